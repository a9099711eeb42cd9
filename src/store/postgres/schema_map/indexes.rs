//! The indexes a [`SchemaMap`](super::SchemaMap) needs so that every page and filter is an
//! index range scan on the host's tables, as on the crate's own (expression indexes where a
//! field is an expression), a provider's own index on either, and which of them a database
//! lacks.

use super::{OrderField, Resolved, SchemaMap};

/// An index of an orders or organizations table for the crate's reads: one a host's table
/// needs through a [`SchemaMap`] ([`PgStore::schema_indexes`](crate::PgStore::schema_indexes)),
/// or a provider list's own, on the crate's table or the host's
/// ([`PgStore::provider_index`](crate::PgStore::provider_index)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchemaIndex {
    name: String,
    table: String,
    definition: String,
    /// What it serves, for the warning that it is missing.
    serves: &'static str,
}

impl SchemaIndex {
    /// The statement that builds it without blocking the table's writes:
    /// `CREATE INDEX CONCURRENTLY IF NOT EXISTS name ON table USING ...;`.
    pub fn statement(&self) -> String {
        format!(
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON {} {};",
            self.name, self.table, self.definition
        )
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it serves, in words.
    pub fn serves(&self) -> &'static str {
        self.serves
    }
}

/// Every index `map` needs on its tables (none on a view, which has none of its own).
pub(in crate::store::postgres) fn needed(map: &SchemaMap, resolved: &Resolved) -> Vec<SchemaIndex> {
    let mut indexes = Vec::new();
    if let (Some(orders), Some(table)) = (map.orders(), &resolved.orders) {
        if !table.is_view {
            let field = |field| format!("({})", orders.cast_expression(field));
            let (organization, created, id) = (
                field(OrderField::Organization),
                field(OrderField::CreatedAt),
                field(OrderField::Id),
            );
            let index = |what: &str, definition: String, serves| SchemaIndex {
                name: super::register::name_for(what, table),
                table: table.name.clone(),
                definition,
                serves,
            };
            indexes.push(index(
                "newest",
                format!("USING btree ({organization}, {created} DESC, {id} DESC)"),
                "pages of /v1/orders, newest first, and the created_since and created_before filters",
            ));
            indexes.push(index(
                "status",
                format!(
                    "USING btree ({organization}, {}, {created} DESC, {id} DESC)",
                    field(OrderField::Status)
                ),
                "the status filter of /v1/orders",
            ));
            indexes.push(index(
                "providers",
                format!("USING gin ({})", field(OrderField::Providers)),
                "the provider filter of /v1/orders",
            ));
            if orders.maps_updated_at() {
                indexes.push(index(
                    "updated",
                    format!(
                        "USING btree ({organization}, (COALESCE({}, {})))",
                        field(OrderField::UpdatedAt),
                        field(OrderField::CreatedAt)
                    ),
                    "the updated_since and updated_before filters of /v1/orders",
                ));
            } else {
                // The last change the crate recorded, read per order: its newest event other
                // than its creation (inserts add nothing to this index).
                indexes.push(SchemaIndex {
                    name: "partner_api_order_events_changes".to_owned(),
                    table: "partner_api_order_events".to_owned(),
                    definition: "USING btree (organization_id, order_id, id) \
                                 WHERE change <> 'order.created'"
                        .to_owned(),
                    serves: "updatedAt of /v1/orders where the map has no updated_at",
                });
            }
        }
    }
    if let (Some(organizations), Some(table)) = (map.organizations(), &resolved.organizations) {
        if !table.is_view {
            indexes.push(SchemaIndex {
                name: super::register::name_for("id", table),
                table: table.name.clone(),
                definition: format!("USING btree (({}))", organizations.cast_id()),
                serves: "each key lookup's organization",
            });
        }
    }
    indexes
}

/// The index that serves the pages of orders booking one of `providers` (sorted, each once,
/// as a key limited to them holds them) as `partner_orders_newest` serves every page: the
/// orders table's newest-first index, partial to those orders. A page filtered by a common
/// provider is otherwise the newest-first scan skipping the orders without it (about ten rows
/// read a row kept, for a provider on one order in ten); with this index it is one range scan
/// of its own orders. The page statement's `providers && ...` is planned with its list (a
/// constant written in for a key's list, a parameter's value for a request's), so the
/// planner proves this index's predicate from it when it is the same list.
///
/// `None` where orders are a host's view (an index belongs on its table, which the crate
/// does not know).
pub(in crate::store::postgres) fn for_providers(
    mapped: Option<(&SchemaMap, &Resolved)>,
    providers: &[String],
) -> Option<SchemaIndex> {
    use sha2::Digest;
    // The predicate's array as the page statement writes it: the planner folds both into the
    // same constant.
    let list = crate::store::postgres::orders::text_array(providers);
    // A name of at most 63 bytes (PostgreSQL cuts longer ones, and two lists cut alike would
    // then pass for one another): the list's digest, not its text.
    let digest = sha2::Sha256::digest(providers.join("\0").as_bytes());
    let tag: String = digest[..5]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let serves = "the pages of /v1/orders of a key limited to these providers, or filtered by them";
    let Some((map, resolved)) = mapped else {
        return Some(SchemaIndex {
            name: format!("partner_orders_for_{tag}"),
            table: "partner_orders".to_owned(),
            definition: format!(
                "USING btree (organization_id, created_at DESC, id DESC) WHERE providers && {list}"
            ),
            serves,
        });
    };
    let (Some(orders), Some(table)) = (map.orders(), &resolved.orders) else {
        // The crate's own orders table, with the host's organizations.
        return for_providers(None, providers);
    };
    if table.is_view {
        return None;
    }
    let field = |field| format!("({})", orders.cast_expression(field));
    Some(SchemaIndex {
        name: format!(
            "partner_api_for_{tag}_{}",
            super::register::bare_identifier(&table.bare_name, 36)
        ),
        table: table.name.clone(),
        definition: format!(
            "USING btree ({}, {} DESC, {} DESC) WHERE {} && {list}",
            field(OrderField::Organization),
            field(OrderField::CreatedAt),
            field(OrderField::Id),
            field(OrderField::Providers),
        ),
        serves,
    })
}

/// The indexes of `needed` that the database lacks. An index counts as there when one of
/// its table's valid indexes has the same definition as PostgreSQL writes it (unique or not;
/// not one a failed `CONCURRENTLY` build left invalid): each needed one is built on an empty
/// temporary copy of the table's columns, in a transaction rolled back, and its definition
/// compared. One that cannot be built at all (an expression that is not immutable, say)
/// counts as missing: its statement fails the same way when the host runs it.
pub(in crate::store::postgres) async fn missing(
    pool: &sqlx::PgPool,
    needed: &[SchemaIndex],
) -> Result<Vec<SchemaIndex>, sqlx::Error> {
    let mut missing = Vec::new();
    let mut transaction = pool.begin().await?;
    let definitions = "SELECT pg_catalog.substring(pg_catalog.pg_get_indexdef(i.indexrelid), \
                       ' USING .*$') FROM pg_catalog.pg_index i WHERE i.indrelid = $1::regclass \
                       AND i.indisvalid AND i.indisready";
    for (at, index) in needed.iter().enumerate() {
        let probe = format!("partner_api_index_probe_{at}");
        sqlx::query(&format!(
            "CREATE TEMPORARY TABLE {probe} (LIKE {}) ON COMMIT DROP",
            index.table
        ))
        .execute(&mut *transaction)
        .await?;
        sqlx::query("SAVEPOINT partner_api_probe")
            .execute(&mut *transaction)
            .await?;
        let built = sqlx::query(&format!(
            "CREATE INDEX ON pg_temp.{probe} {}",
            index.definition
        ))
        .execute(&mut *transaction)
        .await;
        if built.is_err() {
            sqlx::query("ROLLBACK TO SAVEPOINT partner_api_probe")
                .execute(&mut *transaction)
                .await?;
            missing.push(index.clone());
            continue;
        }
        let wanted: Vec<String> = sqlx::query_scalar(definitions)
            .bind(format!("pg_temp.{probe}"))
            .fetch_all(&mut *transaction)
            .await?;
        let present: Vec<String> = sqlx::query_scalar(definitions)
            .bind(&index.table)
            .fetch_all(&mut *transaction)
            .await?;
        if !wanted.iter().all(|definition| present.contains(definition)) {
            missing.push(index.clone());
        }
    }
    transaction.rollback().await?;
    Ok(missing)
}
