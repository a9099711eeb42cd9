//! The statements a [`PgStore`](super::PgStore) reads with, made once for its tables: the
//! crate's own, or the host's through a [`SchemaMap`].

use super::orders::OrderStatements;
use super::schema_map::{Resolved, SchemaMap};

/// Every statement whose text depends on where orders and organizations are read.
#[derive(Debug)]
pub(super) struct Statements {
    /// The map they were made for, with its tables resolved (`None`: the crate's tables).
    pub(super) mapped: Option<(SchemaMap, Resolved)>,
    pub(super) orders: OrderStatements,
    /// A key lookup: the key, whether it is revoked or expired (by the database's clock),
    /// and its organization; a key whose organization is gone is unknown.
    pub(super) lookup_key: String,
    /// The policy of the organization `$1` (the default one without a row).
    pub(super) policy: String,
    /// Whether the organization `$1` exists.
    pub(super) organization_exists: String,
}

impl Statements {
    /// The statements over the crate's own tables.
    pub(super) fn own() -> Self {
        Self::over("partner_orders", "partner_organizations", None)
    }

    /// The statements over what `map` maps (resolved as `resolved`), the crate's own tables
    /// for the rest.
    pub(super) fn mapped(map: SchemaMap, resolved: Resolved) -> Self {
        let orders = match (map.orders(), &resolved.orders) {
            (Some(orders), Some(table)) => format!(
                "(SELECT {} FROM {} AS r) AS partner_orders",
                orders.read_list(),
                table.name
            ),
            _ => "partner_orders".to_owned(),
        };
        let organizations = match (map.organizations(), &resolved.organizations) {
            (Some(organizations), Some(table)) => format!(
                "(SELECT {} FROM {} AS r)",
                organizations.select_list(),
                table.name
            ),
            _ => "partner_organizations".to_owned(),
        };
        Self::over(&orders, &organizations, Some((map, resolved)))
    }

    fn over(orders: &str, organizations: &str, mapped: Option<(SchemaMap, Resolved)>) -> Self {
        Self {
            mapped,
            orders: OrderStatements::new(orders),
            lookup_key: format!(
                "SELECT k.id, k.expires_at, k.revoked_at IS NOT NULL AS revoked, \
                 COALESCE(k.expires_at <= now(), false) AS expired, \
                 k.allowed_ips::text[] AS allowed_ips, k.api_version, k.permissions, k.providers, \
                 o.id AS organization_id, o.name \
                 FROM partner_api_keys k JOIN {organizations} o ON o.id = k.organization_id \
                 WHERE k.key_sha256 = $1"
            ),
            policy: format!(
                "SELECT o.id, p.max_lifetime_ms, p.max_active_keys, p.max_webhook_endpoints, \
                        p.default_api_version \
                 FROM {organizations} o \
                 LEFT JOIN partner_api_key_policies p ON p.organization_id = o.id \
                 WHERE o.id = $1"
            ),
            organization_exists: format!(
                "SELECT EXISTS (SELECT 1 FROM {organizations} o WHERE o.id = $1)"
            ),
        }
    }

    /// The map, if any.
    pub(super) fn map(&self) -> Option<&SchemaMap> {
        self.mapped.as_ref().map(|(map, _)| map)
    }

    /// Whether orders are the host's (the crate's order writes refuse then).
    pub(super) fn orders_mapped(&self) -> bool {
        self.map().is_some_and(|map| map.orders().is_some())
    }

    /// Whether organizations are the host's.
    pub(super) fn organizations_mapped(&self) -> bool {
        self.map().is_some_and(|map| map.organizations().is_some())
    }
}
