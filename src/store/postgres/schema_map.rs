//! The host's own tables, mapped: [`SchemaMap`] names the host's orders table (or view) and
//! organizations table, and for each field of the contract a column or SQL expression of it.
//! [`PgStore::with_schema_map`](super::PgStore::with_schema_map) checks it and reads through
//! it; `register.rs` makes the crate's triggers for it; `indexes.rs` says which indexes it
//! needs.

use std::fmt;

use serde::Deserialize;

mod indexes;
mod register;

pub use indexes::SchemaIndex;

pub(super) use register::bare_identifier;
/// A mapped order's snapshot as the triggers check and render it (over `t`), and the crate's
/// schema once that type exists: for the capture.
pub(super) use register::{migrated_schema, shown as shown_order};

impl super::PgStore {
    /// The indexes the [schema map](Self::with_schema_map) needs on the host's tables, so
    /// that every page and filter costs what it costs on the crate's own (none without a
    /// map, or for a view).
    pub fn schema_indexes(&self) -> Vec<SchemaIndex> {
        self.statements
            .mapped
            .as_ref()
            .map(|(map, resolved)| indexes::needed(map, resolved))
            .unwrap_or_default()
    }

    /// Those of [`schema_indexes`](Self::schema_indexes) the database lacks: for a host
    /// to warn of at start (reads without them scan the table).
    ///
    /// # Errors
    ///
    /// When the database fails (the check makes temporary tables, which it rolls back).
    pub async fn missing_schema_indexes(&self) -> Result<Vec<SchemaIndex>, super::StoreError> {
        self.missing_indexes(&self.schema_indexes()).await
    }

    /// The index that makes a page of the orders booking one of `providers` (a key limited
    /// to them, or the `provider` filter naming exactly them) cost what an unfiltered page
    /// costs, on the orders table this store reads (the crate's, or the host's through the
    /// [schema map](Self::with_schema_map)): its newest-first index, partial to those orders.
    /// Worth building for a provider on more than about one order in a hundred; a rarer
    /// one's pages are read through the providers' own index already. Each such index costs
    /// the orders' writes a check of the list, and an entry for the orders it holds. See the
    /// [hosting page](crate::docs::hosting).
    ///
    /// The page's statement is planned with its list, and the planner uses the index when
    /// the list is the same: a key's providers as the key holds them, sorted and each once
    /// (the list is put so here too).
    ///
    /// # Errors
    ///
    /// `InvalidData` for a list that could not limit a key
    /// ([`canonical_providers`](crate::key::canonical_providers)), `Unsupported` where the
    /// orders are a host's view (index its table).
    pub fn provider_index<S: AsRef<str>>(
        &self,
        providers: &[S],
    ) -> Result<SchemaIndex, super::StoreError> {
        let providers =
            crate::key::canonical_providers(providers).map_err(super::StoreError::invalid_data)?;
        let mapped = self
            .statements
            .mapped
            .as_ref()
            .map(|(map, resolved)| (map, resolved));
        indexes::for_providers(mapped, &providers)
            .ok_or_else(|| super::StoreError::unsupported("indexes on a view of orders"))
    }

    /// Those of `indexes` ([`schema_indexes`](Self::schema_indexes),
    /// [`provider_index`](Self::provider_index)) the database lacks: each is compared, by
    /// its definition as PostgreSQL writes it, with the valid indexes of its table.
    ///
    /// # Errors
    ///
    /// When the database fails (the check makes temporary tables, which it rolls back).
    pub async fn missing_indexes(
        &self,
        indexes: &[SchemaIndex],
    ) -> Result<Vec<SchemaIndex>, super::StoreError> {
        indexes::missing(&self.pool, indexes)
            .await
            .map_err(super::store_error)
    }

    /// Makes the crate's triggers for the host's tables of the [schema
    /// map](Self::with_schema_map), in one transaction, as the owner (the role that ran
    /// [`migrate`](Self::migrate), with the right to add triggers to those tables): on the
    /// orders table, the one that writes each change's event (which the caches'
    /// listeners read too) and its webhooks (the feed's rules for a write the map cannot show hold as on
    /// the crate's table); registered, so `TRUNCATE` of it is refused; on the organizations
    /// table, the one that tells the caches when an organization is renamed or deleted (its
    /// keys unusable within their 1 s bound). With the organizations mapped, the crate's
    /// tables stop referring to `partner_organizations` (they hold the host's ids). Safe
    /// to run again; a view gets no trigger (its orders are served, their changes are in no
    /// feed; a renamed organization of a view shows within the caches' maximum age).
    ///
    /// # Errors
    ///
    /// When the role may not, or the database fails; nothing is changed then.
    pub async fn register_schema_map(&self) -> Result<(), super::StoreError> {
        if self.statements.mapped.is_none() {
            return Ok(());
        }
        let failed = super::store_error;
        let mut transaction = self.pool.begin().await.map_err(failed)?;
        // One registration at a time (replicas starting together), and never a long wait for
        // the host's busy table: its triggers change under a lock of the whole table. 2 s for
        // each lock, within the pool's 5 s statement time-out, so the error says which.
        for statement in [
            "SET LOCAL lock_timeout = '2s'",
            "LOCK TABLE partner_api_order_tables IN SHARE ROW EXCLUSIVE MODE",
        ] {
            sqlx::query(statement)
                .execute(&mut *transaction)
                .await
                .map_err(failed)?;
        }
        let schema = register::migrated_schema(&mut transaction).await?;
        let (references, tables) = self.registration(&schema);
        if let Some(references) = references {
            sqlx::query(&references)
                .execute(&mut *transaction)
                .await
                .map_err(failed)?;
        }
        // Retention carries what it deletes of the orders' changes only for a map that
        // leaves `updated_at` out (the rows would be read by nothing else); turned off, what
        // it carried goes, as it would be stale if turned on again.
        let keeps_last_changes = self
            .statements
            .mapped
            .as_ref()
            .and_then(|(map, resolved)| Some((map.orders()?, resolved.orders.as_ref()?)))
            .is_some_and(|(orders, table)| !orders.maps_updated_at() && !table.is_view);
        let switched: Option<bool> = sqlx::query_scalar(
            "UPDATE partner_api_event_retention SET keeps_last_changes = $1 \
             WHERE keeps_last_changes <> $1 RETURNING keeps_last_changes",
        )
        .bind(keeps_last_changes)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(failed)?;
        if switched == Some(false) {
            sqlx::query("DELETE FROM partner_api_order_last_changes")
                .execute(&mut *transaction)
                .await
                .map_err(failed)?;
        }
        for (function, statements) in tables {
            let fingerprint = register::fingerprint(&statements);
            let (made, in_use): (Option<String>, bool) = sqlx::query_as(
                "SELECT pg_catalog.obj_description(pg_catalog.to_regprocedure($1), 'pg_proc'), \
                        EXISTS (SELECT 1 FROM pg_catalog.pg_trigger \
                                WHERE tgfoid = pg_catalog.to_regprocedure($1))",
            )
            .bind(&function)
            .fetch_one(&mut *transaction)
            .await
            .map_err(failed)?;
            if in_use && made.as_deref() == Some(fingerprint.as_str()) {
                continue;
            }
            for statement in &statements {
                sqlx::query(statement.as_str())
                    .execute(&mut *transaction)
                    .await
                    .map_err(failed)?;
            }
            sqlx::query(&format!(
                "COMMENT ON FUNCTION {function} IS '{fingerprint}'"
            ))
            .execute(&mut *transaction)
            .await
            .map_err(failed)?;
        }
        transaction.commit().await.map_err(failed)
    }

    /// What registering the map runs in the crate's schema `schema` (quoted): the statement
    /// that drops the crate's tables' references to `partner_organizations` (organizations
    /// mapped), and for each mapped table (not a view) its trigger function's signature and
    /// the statements that make it. Owned, so nothing of the store is borrowed across the
    /// registration's awaits (its future stays `Send` for any host's runtime).
    #[allow(clippy::type_complexity)]
    fn registration(&self, schema: &str) -> (Option<String>, Vec<(String, Vec<String>)>) {
        let Some((map, resolved)) = &self.statements.mapped else {
            return (None, Vec::new());
        };
        let mut tables = Vec::new();
        if let (Some(orders), Some(table)) = (map.orders(), &resolved.orders) {
            if !table.is_view {
                let function = format!("{schema}.{}()", register::function_for("orders", table));
                tables.push((function, register::orders_trigger(schema, table, orders)));
            }
        }
        let mut references = None;
        if let (Some(organizations), Some(table)) = (map.organizations(), &resolved.organizations) {
            references = Some(register::drop_organization_references());
            if !table.is_view {
                let function = format!(
                    "{schema}.{}()",
                    register::function_for("organizations", table)
                );
                let statements = register::organizations_trigger(schema, table, organizations);
                tables.push((function, statements));
            }
        }
        (references, tables)
    }
}

/// A field of an order in the contract, which [`OrdersMap`] maps to an expression of the
/// host's table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OrderField {
    /// `id`: the order's id, unique in its organization (SQL type `text`).
    Id,
    /// `organization`: the id of the organization the order belongs to (`text`), as the
    /// organizations' `id` maps it.
    Organization,
    /// `providers` (`text[]`).
    Providers,
    /// `advertiser_name` (`text`).
    AdvertiserName,
    /// `campaign_name` (`text`).
    CampaignName,
    /// `budget_dkk`: whole Danish kroner (any SQL number; a fraction is rounded).
    BudgetDkk,
    /// `start_date` (`date`).
    StartDate,
    /// `end_date` (`date`).
    EndDate,
    /// `status` (`text`).
    Status,
    /// `external_reference` (`text`).
    ExternalReference,
    /// `created_at` (`timestamp with time zone`): the order's place in the newest-first order.
    CreatedAt,
    /// `updated_at` (`timestamp with time zone`, may be null): when the order last changed,
    /// `updatedAt` from API version [`UPDATED_AT`](crate::versions::UPDATED_AT) (null: its
    /// `created_at`). Optional: a map that leaves it out serves the last change the crate
    /// recorded (the time of the order's newest `order.updated` event, kept past the events'
    /// retention), read per order through an index of the events that
    /// [`schema_indexes`](crate::PgStore::schema_indexes) lists.
    UpdatedAt,
}

/// What an expression's SQL type must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Needs {
    Text,
    TextArray,
    Number,
    Date,
    Instant,
}

impl Needs {
    /// The types PostgreSQL names (`pg_typeof`) that this accepts, and the cast that makes
    /// each the one the crate reads (a no-op for the exact type).
    fn accepts(self, type_name: &str) -> bool {
        let accepted: &[&str] = match self {
            Self::Text => &["text", "character varying"],
            Self::TextArray => &["text[]", "character varying[]"],
            Self::Number => &[
                "smallint",
                "integer",
                "bigint",
                "numeric",
                "real",
                "double precision",
            ],
            Self::Date => &["date"],
            Self::Instant => &["timestamp with time zone"],
        };
        accepted.contains(&type_name)
    }

    /// The type the crate reads, as a cast.
    fn cast(self) -> &'static str {
        match self {
            Self::Text => "text",
            Self::TextArray => "text[]",
            Self::Number => "bigint",
            Self::Date => "date",
            Self::Instant => "timestamptz",
        }
    }

    /// What the contract needs, in words, with a hint where a common type is near.
    fn describe(self, has: &str) -> String {
        let needs = match self {
            Self::Text => "text",
            Self::TextArray => "text[]",
            Self::Number => {
                "a number (smallint, integer, bigint, numeric, real or double precision)"
            }
            Self::Date => "date",
            Self::Instant => "timestamp with time zone",
        };
        let hint = match (self, has) {
            (Self::Instant, "timestamp without time zone") => {
                " (for a column that holds UTC, write `column AT TIME ZONE 'UTC'`: a plain cast \
                 would read the session's time zone)"
            }
            (Self::Text | Self::TextArray, _) => " (a cast such as `::text` converts most types)",
            _ => "",
        };
        format!("{needs}{hint}")
    }
}

impl OrderField {
    /// Every field an order's snapshot in an event holds (all but [`UpdatedAt`](Self::UpdatedAt),
    /// which an event's time gives), in the order of the crate's own `partner_orders` columns.
    pub const ALL: [Self; 11] = [
        Self::Id,
        Self::Organization,
        Self::Providers,
        Self::AdvertiserName,
        Self::CampaignName,
        Self::BudgetDkk,
        Self::StartDate,
        Self::EndDate,
        Self::Status,
        Self::ExternalReference,
        Self::CreatedAt,
    ];

    /// The field's key in a schema map file (`[orders]`).
    pub fn key(self) -> &'static str {
        match self {
            Self::Id => "id",
            Self::Organization => "organization",
            Self::Providers => "providers",
            Self::AdvertiserName => "advertiser_name",
            Self::CampaignName => "campaign_name",
            Self::BudgetDkk => "budget_dkk",
            Self::StartDate => "start_date",
            Self::EndDate => "end_date",
            Self::Status => "status",
            Self::ExternalReference => "external_reference",
            Self::CreatedAt => "created_at",
            Self::UpdatedAt => "updated_at",
        }
    }

    /// The crate's own column for the field: the name the mapped expression is read as, and
    /// its expression when a map leaves the field out.
    fn column(self) -> &'static str {
        match self {
            Self::Organization => "organization_id",
            other => other.key(),
        }
    }

    fn needs(self) -> Needs {
        match self {
            Self::Providers => Needs::TextArray,
            Self::BudgetDkk => Needs::Number,
            Self::StartDate | Self::EndDate => Needs::Date,
            Self::CreatedAt | Self::UpdatedAt => Needs::Instant,
            _ => Needs::Text,
        }
    }
}

impl fmt::Display for OrderField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// The host's orders: a table (or view) and, for each [`OrderField`], a column or SQL
/// expression of one row of it. A field left out reads the column named as the crate's own
/// (`organization_id` for `organization`).
///
/// The expressions are SQL, run as written in every read and in the crate's triggers: this
/// is trusted configuration, like the database URL. They are evaluated with the crate's
/// schema and `pg_catalog` on the search path: qualify a function of another schema.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrdersMap {
    table: String,
    expressions: [Option<String>; 12],
}

impl OrdersMap {
    /// The orders of `table` (a name PostgreSQL resolves, `public.media_buys` say), every
    /// field read from the column named as the crate's own until [`with`](Self::with)
    /// maps it.
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            expressions: Default::default(),
        }
    }

    /// Maps `field` to `expression`, a column or SQL expression of one row of the table
    /// (`round(budget_ore / 100)`).
    #[must_use]
    pub fn with(mut self, field: OrderField, expression: impl Into<String>) -> Self {
        self.expressions[field as usize] = Some(expression.into());
        self
    }

    /// The table as written.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The expression of `field`: as mapped, or the crate's column name (`NULL` for an
    /// unmapped [`OrderField::UpdatedAt`]: the order's `created_at`).
    pub fn expression(&self, field: OrderField) -> &str {
        let unmapped = match field {
            OrderField::UpdatedAt => "NULL",
            other => other.column(),
        };
        self.expressions[field as usize]
            .as_deref()
            .unwrap_or(unmapped)
    }

    /// The select list the pages read: [`select_list`](Self::select_list) and the order's
    /// last change: the mapped `updated_at`, else the one the crate recorded (its newest
    /// `order.updated` event, or what retention carried of it; see the migration
    /// `recorded_last_change`).
    pub(in crate::store::postgres) fn read_list(&self) -> String {
        let last_change = if self.maps_updated_at() {
            self.item(OrderField::UpdatedAt)
        } else {
            format!(
                "partner_api_recorded_last_change({}, {}) AS updated_at",
                self.cast_expression(OrderField::Organization),
                self.cast_expression(OrderField::Id)
            )
        };
        format!("{}, {last_change}", self.select_list())
    }

    /// Whether the map names the orders' `updated_at`; without it, the crate serves the
    /// last change it recorded.
    pub(in crate::store::postgres) fn maps_updated_at(&self) -> bool {
        self.expressions[OrderField::UpdatedAt as usize].is_some()
    }

    /// The select list of one mapped order, each field cast to the type the crate reads and
    /// named as the crate's column.
    pub(in crate::store::postgres) fn select_list(&self) -> String {
        OrderField::ALL
            .iter()
            .map(|&field| self.item(field))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `field`'s item of [`select_list`](Self::select_list).
    pub(in crate::store::postgres) fn item(&self, field: OrderField) -> String {
        format!(
            "({})::{} AS {}",
            self.expression(field),
            field.needs().cast(),
            field.column()
        )
    }

    /// `field`'s expression as the crate reads it (cast), for an index.
    pub(super) fn cast_expression(&self, field: OrderField) -> String {
        format!("({})::{}", self.expression(field), field.needs().cast())
    }
}

/// The host's organizations: a table (or view), with the expressions of an organization's
/// `id` (`text`, what [`OrderField::Organization`] and the crate's tables hold) and `name`
/// (`text`, what `/v1/me` answers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrganizationsMap {
    table: String,
    id: String,
    name: String,
}

impl OrganizationsMap {
    /// The organizations of `table`, `id` and `name` read from columns so named until mapped.
    pub fn new(table: impl Into<String>) -> Self {
        Self {
            table: table.into(),
            id: "id".to_owned(),
            name: "name".to_owned(),
        }
    }

    /// Maps the organization's id to `expression` (`id::text`).
    #[must_use]
    pub fn with_id(mut self, expression: impl Into<String>) -> Self {
        self.id = expression.into();
        self
    }

    /// Maps the organization's name to `expression` (`display_name`).
    #[must_use]
    pub fn with_name(mut self, expression: impl Into<String>) -> Self {
        self.name = expression.into();
        self
    }

    /// The table as written.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The id's expression.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The name's expression.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The id's expression as the crate reads it (cast), for an index and the triggers.
    pub(super) fn cast_id(&self) -> String {
        format!("({})::text", self.id)
    }

    /// The select list of one mapped organization.
    pub(super) fn select_list(&self) -> String {
        format!("({})::text AS id, ({})::text AS name", self.id, self.name)
    }
}

/// Where [`PgStore`](super::PgStore) reads the host's data: its orders, its organizations,
/// either or both (what is not mapped stays in the crate's `partner_orders` and
/// `partner_organizations`). Built in code, or read from a file (`serde`), in this form:
///
/// ```toml
/// [orders]
/// table = "public.media_buys"
/// id = "buy_id::text"
/// organization = "account_id::text"
/// providers = "channels"
/// advertiser_name = "advertiser"
/// campaign_name = "campaign"
/// budget_dkk = "round(budget_ore / 100)"
/// start_date = "starts_on"
/// end_date = "ends_on"
/// status = "lower(state)"
/// external_reference = "coalesce(po_number, '')"
/// created_at = "created"
///
/// [organizations]
/// table = "public.accounts"
/// id = "id::text"
/// name = "display_name"
/// ```
///
/// [`docs::host_data`](crate::docs::host_data) says how to serve the host's data, top to
/// bottom.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(try_from = "SchemaMapFile")]
pub struct SchemaMap {
    orders: Option<OrdersMap>,
    organizations: Option<OrganizationsMap>,
}

impl SchemaMap {
    /// A map of nothing: the crate's own tables.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads orders through `orders`.
    #[must_use]
    pub fn with_orders(mut self, orders: OrdersMap) -> Self {
        self.orders = Some(orders);
        self
    }

    /// Reads organizations through `organizations`.
    #[must_use]
    pub fn with_organizations(mut self, organizations: OrganizationsMap) -> Self {
        self.organizations = Some(organizations);
        self
    }

    /// The orders' map, if the orders are mapped.
    pub fn orders(&self) -> Option<&OrdersMap> {
        self.orders.as_ref()
    }

    /// The organizations' map, if they are mapped.
    pub fn organizations(&self) -> Option<&OrganizationsMap> {
        self.organizations.as_ref()
    }
}

/// A schema map file as written: unknown keys are errors, so a misspelt field is never
/// silently read from the crate's column name.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SchemaMapFile {
    orders: Option<OrdersFile>,
    organizations: Option<OrganizationsFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OrdersFile {
    table: String,
    id: Option<String>,
    organization: Option<String>,
    providers: Option<String>,
    advertiser_name: Option<String>,
    campaign_name: Option<String>,
    budget_dkk: Option<String>,
    start_date: Option<String>,
    end_date: Option<String>,
    status: Option<String>,
    external_reference: Option<String>,
    created_at: Option<String>,
    updated_at: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OrganizationsFile {
    table: String,
    id: Option<String>,
    name: Option<String>,
}

impl TryFrom<SchemaMapFile> for SchemaMap {
    type Error = String;

    fn try_from(file: SchemaMapFile) -> Result<Self, String> {
        let orders = file.orders.map(|orders| {
            let expressions = [
                orders.id,
                orders.organization,
                orders.providers,
                orders.advertiser_name,
                orders.campaign_name,
                orders.budget_dkk,
                orders.start_date,
                orders.end_date,
                orders.status,
                orders.external_reference,
                orders.created_at,
                orders.updated_at,
            ];
            OrdersMap {
                table: orders.table,
                expressions,
            }
        });
        let organizations = file.organizations.map(|organizations| {
            let mut map = OrganizationsMap::new(organizations.table);
            if let Some(id) = organizations.id {
                map = map.with_id(id);
            }
            if let Some(name) = organizations.name {
                map = map.with_name(name);
            }
            map
        });
        let empty = |text: &str| text.trim().is_empty();
        if let Some(orders) = &orders {
            if empty(&orders.table) {
                return Err("[orders] table is empty".to_owned());
            }
            if let Some(field) = OrderField::ALL
                .into_iter()
                .find(|&field| empty(orders.expression(field)))
            {
                return Err(format!("[orders] {field} is empty"));
            }
        }
        if let Some(organizations) = &organizations {
            for (key, text) in [
                ("table", organizations.table()),
                ("id", organizations.id()),
                ("name", organizations.name()),
            ] {
                if empty(text) {
                    return Err(format!("[organizations] {key} is empty"));
                }
            }
        }
        Ok(Self {
            orders,
            organizations,
        })
    }
}

/// A mapped field's expression whose type is not the one the contract needs, or that
/// PostgreSQL refuses: what [`PgStore::with_schema_map`](super::PgStore::with_schema_map)
/// answers, naming the field, the expression and the types.
pub(super) fn type_error(
    section: &str,
    key: &str,
    expression: &str,
    has: &str,
    needs: &str,
) -> String {
    format!(
        "schema map: [{section}] {key} = {expression:?} has type {has}; the contract needs {needs}"
    )
}

/// Checks each mapped expression's type against what the contract needs, as PostgreSQL
/// types it (`pg_typeof` of the expression over the table, no row read), and resolves the
/// tables to their qualified, quoted names.
pub(super) async fn check(
    pool: &sqlx::PgPool,
    map: &SchemaMap,
) -> Result<Resolved, super::StoreError> {
    use super::StoreError;
    let mut resolved = Resolved::default();
    if let Some(orders) = &map.orders {
        let table = resolve_table(pool, "orders", orders.table()).await?;
        let mapped_updated_at = orders.maps_updated_at().then_some(OrderField::UpdatedAt);
        for field in OrderField::ALL.into_iter().chain(mapped_updated_at) {
            let expression = orders.expression(field);
            let has = type_of(pool, &table.name, expression)
                .await
                .map_err(|message| {
                    StoreError::invalid_data(format!(
                        "schema map: [orders] {field} = {expression:?}: {message}"
                    ))
                })?;
            let needs = field.needs();
            if !needs.accepts(&has) {
                return Err(StoreError::invalid_data(type_error(
                    "orders",
                    field.key(),
                    expression,
                    &has,
                    &needs.describe(&has),
                )));
            }
        }
        resolved.orders = Some(table);
    }
    if let Some(organizations) = &map.organizations {
        let table = resolve_table(pool, "organizations", organizations.table()).await?;
        for (key, expression) in [("id", organizations.id()), ("name", organizations.name())] {
            let has = type_of(pool, &table.name, expression)
                .await
                .map_err(|message| {
                    StoreError::invalid_data(format!(
                        "schema map: [organizations] {key} = {expression:?}: {message}"
                    ))
                })?;
            if !Needs::Text.accepts(&has) {
                return Err(StoreError::invalid_data(type_error(
                    "organizations",
                    key,
                    expression,
                    &has,
                    &Needs::Text.describe(&has),
                )));
            }
        }
        resolved.organizations = Some(table);
    }
    Ok(resolved)
}

/// A mapped table as PostgreSQL knows it.
#[derive(Clone, Debug)]
pub(super) struct Table {
    /// Schema-qualified and quoted: safe to write into a statement.
    pub(super) name: String,
    /// The table's own name, unquoted (for the names of what the crate makes for it).
    pub(super) bare_name: String,
    /// A view (no triggers, no indexes of its own), not a table.
    pub(super) is_view: bool,
    /// Its oid when it was resolved (for the statements of a registration, made at once).
    pub(super) oid: u32,
}

/// The mapped tables, resolved.
#[derive(Clone, Debug, Default)]
pub(super) struct Resolved {
    pub(super) orders: Option<Table>,
    pub(super) organizations: Option<Table>,
}

async fn resolve_table(
    pool: &sqlx::PgPool,
    section: &str,
    table: &str,
) -> Result<Table, super::StoreError> {
    use sqlx::Row;
    let row = sqlx::query(
        "SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) AS name, c.relname::text AS bare, \
                c.relkind::text AS kind, c.oid::bigint AS oid \
         FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.oid = pg_catalog.to_regclass($1) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')",
    )
    .bind(table)
    .fetch_optional(pool)
    .await
    .map_err(|err| match err {
        sqlx::Error::Database(db) => super::StoreError::invalid_data(format!(
            "schema map: [{section}] table = {table:?}: {}",
            db.message()
        )),
        other => super::store_error(other),
    })?;
    let row = row.ok_or_else(|| {
        super::StoreError::invalid_data(format!(
            "schema map: [{section}] table = {table:?} is no table or view this role can see"
        ))
    })?;
    let kind: String = row.get("kind");
    // A row trigger on a partitioned table fires for each partition (another table), and a
    // foreign table has no indexes of its own nor transition tables: neither can be served
    // as a table is. A view over either can (its orders read, their changes in no feed).
    if kind == "p" || kind == "f" {
        let what = if kind == "p" {
            "partitioned"
        } else {
            "foreign"
        };
        return Err(super::StoreError::invalid_data(format!(
            "schema map: [{section}] table = {table:?} is a {what} table, which the crate's \
             triggers and indexes cannot serve; map a view over it (its orders are served, \
             their changes reach no feed)"
        )));
    }
    Ok(Table {
        name: row.get("name"),
        bare_name: row.get("bare"),
        is_view: kind == "v" || kind == "m",
        oid: u32::try_from(row.get::<i64, _>("oid")).unwrap_or(0),
    })
}

/// The search path every mapped expression is resolved in: the one the crate's triggers run
/// with (pinned, as every function of ours is), checked at start in it, so that what reads
/// pass, the triggers pass too, and no function of another schema stands in for a built-in.
pub(super) const EXPRESSION_SEARCH_PATH: &str = "pg_catalog, pg_temp";

/// The SQL type of `expression` over a row `r` of `table`, as `pg_typeof` names it, resolved
/// in [`EXPRESSION_SEARCH_PATH`] as the triggers resolve it; reads no row. `Err` with
/// PostgreSQL's message when it is no expression of that table there.
async fn type_of(pool: &sqlx::PgPool, table: &str, expression: &str) -> Result<String, String> {
    // The outer join yields one row of NULLs with the expression's type whatever the table
    // holds; `LIMIT 0` keeps the table's rows unread.
    let statement = format!(
        "SELECT pg_catalog.pg_typeof(m.value)::text FROM (VALUES (1)) AS one (x) \
         LEFT JOIN (SELECT ({expression}) AS value FROM {table} AS r LIMIT 0) AS m ON true"
    );
    let failed = |err: sqlx::Error| match err {
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => crate::log::ErrorChain(&other).to_string(),
    };
    let mut transaction = pool.begin().await.map_err(failed)?;
    sqlx::query(&format!(
        "SET LOCAL search_path TO {EXPRESSION_SEARCH_PATH}"
    ))
    .execute(&mut *transaction)
    .await
    .map_err(failed)?;
    let type_name = sqlx::query_scalar::<_, String>(&statement)
        .fetch_one(&mut *transaction)
        .await
        .map_err(failed)?;
    transaction.rollback().await.map_err(failed)?;
    Ok(type_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host spawns these on its runtime: their futures are `Send` (sqlx's `raw_sql` on a
    /// transaction was not, found by this check at compile time).
    #[allow(dead_code)]
    fn the_stores_schema_map_calls_are_send(store: super::super::PgStore, map: SchemaMap) {
        fn send<T: Send>(_: T) {}
        send(store.clone().with_schema_map(map));
        send(store.register_schema_map());
        send(store.missing_schema_indexes());
    }

    #[test]
    fn a_file_maps_every_field_and_leaves_out_none_silently() {
        let map: SchemaMap = serde_json::from_value(serde_json::json!({
            "orders": {"table": "public.media_buys", "id": "buy_id::text",
                       "budget_dkk": "round(budget_ore / 100)"},
            "organizations": {"table": "public.accounts", "name": "display_name"}
        }))
        .expect("a map");
        let orders = map.orders().expect("orders");
        assert_eq!(orders.expression(OrderField::Id), "buy_id::text");
        assert_eq!(
            orders.expression(OrderField::Organization),
            "organization_id"
        );
        assert_eq!(
            orders.item(OrderField::BudgetDkk),
            "(round(budget_ore / 100))::bigint AS budget_dkk"
        );
        let organizations = map.organizations().expect("organizations");
        assert_eq!(
            (organizations.id(), organizations.name()),
            ("id", "display_name")
        );

        let misspelt = serde_json::from_value::<SchemaMap>(serde_json::json!({
            "orders": {"table": "t", "budget": "x"}
        }));
        assert!(misspelt
            .expect_err("unknown key")
            .to_string()
            .contains("budget"));
        let empty = serde_json::from_value::<SchemaMap>(serde_json::json!({
            "orders": {"table": "t", "status": " "}
        }));
        assert!(empty
            .expect_err("empty")
            .to_string()
            .contains("[orders] status is empty"));
    }

    #[test]
    fn a_type_error_names_the_field_the_expression_and_both_types() {
        let needs = Needs::Instant;
        assert!(!needs.accepts("timestamp without time zone"));
        let message = type_error(
            "orders",
            "created_at",
            "created",
            "timestamp without time zone",
            &needs.describe("timestamp without time zone"),
        );
        assert!(
            message
                .contains("[orders] created_at = \"created\" has type timestamp without time zone"),
            "{message}"
        );
        assert!(
            message.contains("needs timestamp with time zone"),
            "{message}"
        );
        assert!(message.contains("AT TIME ZONE 'UTC'"), "{message}");
    }
}
