//! `PgStore`'s [`OrderStore`]: a page of an organization's orders, filtered or not, in one
//! indexed statement.

use async_trait::async_trait;
use sqlx::postgres::PgRow;
use sqlx::Postgres;

use super::timestamp::{PgDate, PgTimestamp};
use super::{column, store_error, PgStore};
use crate::model::{EncodedOrder, Order, OrderPage};
use crate::store::{OrderQuery, OrderStore, StoreError};

/// The columns of an order, as the crate's table names them (and a mapped table's select
/// list renames them).
const COLUMNS: &str = "id, providers, advertiser_name, campaign_name, budget_dkk, start_date, \
                       end_date, status, external_reference, created_at, updated_at";

/// An order's last change, as the filters `updated_since` and `updated_before` read it (and
/// `partner_orders_updated` indexes it).
const LAST_CHANGE: &str = "COALESCE(updated_at, created_at)";

/// The statements that read pages of orders from one source: `partner_orders`, or a
/// host's table seen through its [`OrdersMap`](super::OrdersMap) as a subquery named
/// `partner_orders` (which PostgreSQL flattens, so the map's expression indexes serve it).
#[derive(Debug)]
pub(super) struct OrderStatements {
    /// The first page of `GET /orders`: an index range scan of `partner_orders_newest`, one
    /// row more than the page holds (to know whether more follow).
    pub(super) first_page: String,
    /// A later page: the same range scan, started after the position (`created_at`, `id`)
    /// of the previous page's last order. A keyset, not an offset: page 50 costs what page 1
    /// does, and orders created meanwhile never shift it.
    pub(super) page_after: String,
    /// The filtered pages, by what they hold (the bits below), providers bound as a
    /// parameter.
    pub(super) filtered: Vec<String>,
    /// What they read from, for a statement with its providers written in (see
    /// [`filtered_page_text`]).
    source: String,
}

impl OrderStatements {
    /// The statements over `source`, a table name or a subquery with its alias.
    pub(super) fn new(source: &str) -> Self {
        Self {
            first_page: format!(
                "SELECT {COLUMNS} FROM {source} WHERE organization_id = $1 \
                 ORDER BY created_at DESC, id DESC LIMIT $2"
            ),
            page_after: format!(
                "SELECT {COLUMNS} FROM {source} \
                 WHERE organization_id = $1 AND (created_at, id) < ($3, $4) \
                 ORDER BY created_at DESC, id DESC LIMIT $2"
            ),
            filtered: (0..FILTER_SHAPES)
                .map(|holds| filtered_page_text(source, holds, None))
                .collect(),
            source: source.to_owned(),
        }
    }

    /// The text of the page `query` asks for with its providers written in as a constant,
    /// where they are the reading key's own list and printable ASCII; `None` for the others.
    pub(super) fn with_providers_written(&self, query: &OrderQuery) -> Option<String> {
        let filter = query.filter();
        let printable = |provider: &String| {
            provider
                .bytes()
                .all(|byte| byte.is_ascii_graphic() || byte == b' ')
        };
        if !filter.providers_are_the_keys() || !filter.providers().iter().all(printable) {
            return None;
        }
        let array = text_array(&bound_providers(filter));
        Some(filtered_page_text(&self.source, shape(query), Some(&array)))
    }
}

/// `values` as an SQL constant of type `text[]`, `ARRAY[E'..', ...]::text[]`. Each element is
/// an escape string, so its meaning does not depend on `standard_conforming_strings`: within
/// one, only a backslash and a quote are special, and both are doubled. Its callers hold no
/// control character (no key's providers can, and a page writes in printable ASCII only).
pub(super) fn text_array(values: &[String]) -> String {
    let elements: Vec<String> = values
        .iter()
        .map(|value| format!("E'{}'", value.replace('\\', "\\\\").replace('\'', "''")))
        .collect();
    format!("ARRAY[{}]::text[]", elements.join(", "))
}

/// The date column `name` of the order `id`: an error that names the order for a date no
/// reader can serve.
fn date(row: &PgRow, name: &str, id: &str) -> Result<chrono::NaiveDate, StoreError> {
    column::<PgDate>(row, name)
        .map(|date| date.0)
        .map_err(|err| {
            StoreError::invalid_data(format!("order {id:?}: {}", crate::log::ErrorChain(&err)))
        })
}

/// An order from a row of a page's statement, checked against the wire contract.
fn order_from_row(row: &PgRow) -> Result<EncodedOrder, StoreError> {
    let id: String = column(row, "id")?;
    let budget: i64 = column(row, "budget_dkk")?;
    let budget_dkk = u64::try_from(budget)
        .map_err(|_| StoreError::invalid_data(format!("order {id:?}: negative budget_dkk")))?;
    // A host's order tables may hold any timestamp PostgreSQL accepts ('infinity' too): such
    // a row fails this page with the order named, never the reader.
    let created_at = column::<PgTimestamp>(row, "created_at")
        .map_err(|err| {
            StoreError::invalid_data(format!("order {id:?}: {}", crate::log::ErrorChain(&err)))
        })?
        .0;
    let updated_at = sqlx::Row::try_get::<Option<PgTimestamp>, _>(row, "updated_at")
        .map_err(|err| {
            StoreError::invalid_data(format!("order {id:?}: {}", crate::log::ErrorChain(&err)))
        })?
        .map(|at| at.0);
    Ok(EncodedOrder::new(Order {
        providers: column(row, "providers")?,
        advertiser_name: column(row, "advertiser_name")?,
        campaign_name: column(row, "campaign_name")?,
        budget_dkk,
        start_date: date(row, "start_date", &id)?,
        end_date: date(row, "end_date", &id)?,
        status: column(row, "status")?,
        external_reference: column(row, "external_reference")?,
        created_at,
        updated_at,
        id,
    })?)
}

#[async_trait]
impl OrderStore for PgStore {
    async fn orders(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Result<OrderPage, StoreError> {
        self.admit()?;
        let page = self.read_orders(organization_id, query).await;
        self.breaker.record(&page, self.pool.size() > 0);
        page
    }
}

impl PgStore {
    async fn read_orders(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Result<OrderPage, StoreError> {
        let written = self.statements.orders.with_providers_written(query);
        let rows = page_query(
            &self.statements.orders,
            written.as_deref(),
            organization_id,
            query,
        )
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        let orders = rows
            .iter()
            .map(order_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(OrderPage::first(orders, query.limit()))
    }
}

/// The statement that reads the page `query` asks for, with its parameters bound: the text
/// `written` where its providers are written in.
fn page_query<'q>(
    statements: &'q OrderStatements,
    written: Option<&'q str>,
    organization_id: &'q str,
    query: &'q OrderQuery,
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    // One row more than the page holds says whether more follow.
    let rows = i64::try_from(query.limit())
        .unwrap_or(i64::MAX)
        .saturating_add(1);
    if !query.filter().is_empty() {
        return filtered_page_query(statements, written, organization_id, query, rows);
    }
    match query.position() {
        None => sqlx::query(&statements.first_page)
            .bind(organization_id)
            .bind(rows),
        Some(position) => sqlx::query(&statements.page_after)
            .bind(organization_id)
            .bind(rows)
            .bind(position.created_at.as_datetime())
            .bind(position.id.as_str()),
    }
}

/// What a filtered page's statement holds besides the organization and the row count: one
/// bit each, which picks its text among [`OrderStatements::filtered`].
pub(super) const AFTER: usize = 1;
pub(super) const SINCE: usize = 2;
pub(super) const BEFORE: usize = 4;
pub(super) const PROVIDERS: usize = 8;
pub(super) const STATUSES: usize = 16;
pub(super) const UPDATED_SINCE: usize = 32;
pub(super) const UPDATED_BEFORE: usize = 64;
/// How many filtered statements there are: one per combination of the bits.
const FILTER_SHAPES: usize = 128;

// The statements of filtered pages, by what they hold. Only the conditions a filter has are
// in its text, so each is planned on its own indexes: the position and the creation range
// narrow the range scan of `partner_orders_newest`; with statuses, one scan of
// `partner_orders_status` per status, merged newest first, so a page deep in the orders
// costs what the first does. Providers are read through `partner_orders_providers` (the
// array's own index) when rare, as a condition on the rows of the range scan when common, and
// through their own partial index where the host built one (`PgStore::provider_index`).
//
// Which of these serves depends on the providers, so the statement is planned with them. A
// request's `provider` filter is bound as a parameter of an unnamed statement, planned with
// its value on every page (a prepared one would settle on one generic plan for every list,
// which read a rare provider's page in 18 ms). A key's own list, of which there are as many
// as the host made keys (where a request can name any, and each would take a statement of
// the connection's cache), is written into the text as a constant, and the statement is
// prepared once per list and connection like the others: a parse, a plan and a round trip
// less per page, and even the generic plan knows the list, so the list's own index serves it
// (the planner proves the index's predicate from the same constant). Only printable ASCII is
// written in: its bytes mean the same in any client encoding a host could set.

/// The text of the filtered page over `source` that holds what `holds` says (bits above); its
/// providers `written` in as a constant, or else a parameter.
pub(super) fn filtered_page_text(source: &str, holds: usize, written: Option<&str>) -> String {
    let mut conditions = String::new();
    let mut next = 3;
    let mut parameter = || {
        let at = next;
        next += 1;
        at
    };
    if holds & AFTER != 0 {
        let (at, id) = (parameter(), parameter());
        conditions.push_str(&format!(" AND (created_at, id) < (${at}, ${id})"));
    }
    if holds & SINCE != 0 {
        conditions.push_str(&format!(" AND created_at >= ${}", parameter()));
    }
    if holds & BEFORE != 0 {
        conditions.push_str(&format!(" AND created_at < ${}", parameter()));
    }
    if holds & PROVIDERS != 0 {
        match written {
            Some(array) => conditions.push_str(&format!(" AND providers && {array}")),
            None => conditions.push_str(&format!(" AND providers && ${}::text[]", parameter())),
        }
    }
    if holds & UPDATED_SINCE != 0 {
        conditions.push_str(&format!(" AND {LAST_CHANGE} >= ${}", parameter()));
    }
    if holds & UPDATED_BEFORE != 0 {
        conditions.push_str(&format!(" AND {LAST_CHANGE} < ${}", parameter()));
    }
    if holds & STATUSES == 0 {
        return format!(
            "SELECT {COLUMNS} FROM {source} WHERE organization_id = $1{conditions} \
             ORDER BY created_at DESC, id DESC LIMIT $2"
        );
    }
    let statuses = parameter();
    format!(
        "SELECT o.* FROM unnest(${statuses}::text[]) AS s(status) CROSS JOIN LATERAL (\
         SELECT {COLUMNS} FROM {source} \
         WHERE organization_id = $1 AND status = s.status{conditions} \
         ORDER BY created_at DESC, id DESC LIMIT $2) AS o \
         ORDER BY o.created_at DESC, o.id DESC LIMIT $2"
    )
}

/// What the filtered page `query` asks for holds: the bits above.
fn shape(query: &OrderQuery) -> usize {
    let filter = query.filter();
    [
        (query.position().is_some(), AFTER),
        (filter.created_since().is_some(), SINCE),
        (filter.created_before().is_some(), BEFORE),
        (!filter.providers().is_empty(), PROVIDERS),
        (!filter.statuses().is_empty(), STATUSES),
        (filter.updated_since().is_some(), UPDATED_SINCE),
        (filter.updated_before().is_some(), UPDATED_BEFORE),
    ]
    .into_iter()
    .filter(|(has, _)| *has)
    .fold(0, |holds, (_, bit)| holds | bit)
}

/// The statement of a filtered page, with its parameters bound in the order of its text: the
/// text `written` where its providers are written in, else the shape's, its providers bound in
/// an unnamed statement (planned with them each time).
fn filtered_page_query<'q>(
    statements: &'q OrderStatements,
    written: Option<&'q str>,
    organization_id: &'q str,
    query: &'q OrderQuery,
    rows: i64,
) -> sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments> {
    let filter = query.filter();
    let holds = shape(query);
    let bind_providers = holds & PROVIDERS != 0 && written.is_none();
    let text = written.unwrap_or(statements.filtered[holds].as_str());
    let mut statement = sqlx::query(text)
        .persistent(!bind_providers)
        .bind(organization_id)
        .bind(rows);
    if let Some(position) = query.position() {
        statement = statement
            .bind(position.created_at.as_datetime())
            .bind(position.id.as_str());
    }
    if let Some(since) = filter.created_since() {
        statement = statement.bind(since.as_datetime());
    }
    if let Some(before) = filter.created_before() {
        statement = statement.bind(before.as_datetime());
    }
    if bind_providers {
        statement = statement.bind(bound_providers(filter));
    }
    if let Some(since) = filter.updated_since() {
        statement = statement.bind(since.as_datetime());
    }
    if let Some(before) = filter.updated_before() {
        statement = statement.bind(before.as_datetime());
    }
    if !filter.statuses().is_empty() {
        statement = statement.bind(filter.statuses());
    }
    statement
}

/// The filter's providers as the page statement holds them: sorted, as a key holds its
/// providers and `PgStore::provider_index` puts them, since the planner uses a list's own
/// index only for the same list (and one statement serves a list in any order).
pub(super) fn bound_providers(filter: &crate::store::OrderFilter) -> Vec<String> {
    let mut providers = filter.providers().to_vec();
    providers.sort_unstable();
    providers
}
