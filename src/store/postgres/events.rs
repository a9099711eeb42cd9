//! `PgStore`'s [`EventFeed`]: reads through `partner_api_read_order_events`, stamping first
//! (in a transaction of its own) when the feed has events without a position; retention
//! through `partner_api_prune_order_events`. The invariant and its argument are on
//! [`crate::store::events`] and in the migration `20261201000001_order_events.sql`.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::timestamp::PgTimestamp;
use super::{column, store_error, PgStore};
use crate::model::{EncodedOrder, Order, Timestamp};
use crate::store::{
    EventFeed, EventQuery, EventsPage, FeedEvent, OrderChange, StoreError,
    MAX_EVENTS_LOOKED_AT_IN_VIEW,
};

/// An order as the trigger's snapshot (`to_jsonb` of the row) holds it.
#[derive(serde::Deserialize)]
struct OrderRow {
    id: String,
    providers: Vec<String>,
    advertiser_name: String,
    campaign_name: String,
    budget_dkk: u64,
    start_date: chrono::NaiveDate,
    end_date: chrono::NaiveDate,
    status: String,
    external_reference: String,
    created_at: Timestamp,
}

/// The JSON of the order a trigger's snapshot holds, through the encoder `GET /v1/orders`
/// uses, in the newest shape: the same bytes every time. Its `updatedAt` is `changed_at`, the
/// time of the change the snapshot was taken at.
fn order_json(snapshot: serde_json::Value, changed_at: Timestamp) -> Result<Bytes, StoreError> {
    let order: OrderRow = serde_json::from_value(snapshot).map_err(StoreError::invalid_data)?;
    let encoded = EncodedOrder::new(Order {
        id: order.id,
        providers: order.providers,
        advertiser_name: order.advertiser_name,
        campaign_name: order.campaign_name,
        budget_dkk: order.budget_dkk,
        start_date: order.start_date,
        end_date: order.end_date,
        status: order.status,
        external_reference: order.external_reference,
        created_at: order.created_at,
        updated_at: Some(changed_at),
    })?;
    Ok(Bytes::copy_from_slice(encoded.json()))
}

/// The `data` of a created or updated order's event or webhook (`what` names it in the log):
/// the order from its snapshot, or, where the trigger found the order unshowable (no
/// snapshot) or the snapshot does not decode (one written before the trigger checked them),
/// the order's id with the mark [`unshowable_order_json`]: logged and counted as a store
/// error of `store`, never a failed read. The same bytes every time for the same row.
pub(super) fn snapshot_json(
    store: &'static str,
    what: std::fmt::Arguments<'_>,
    order_id: &str,
    snapshot: Option<serde_json::Value>,
    changed_at: Timestamp,
) -> Result<Bytes, StoreError> {
    let problem = match snapshot.map(|snapshot| order_json(snapshot, changed_at)) {
        Some(Ok(json)) => return Ok(json),
        Some(Err(err)) => crate::log::ErrorChain(&err).to_string(),
        None => "the trigger found it outside the contract when it was written".to_owned(),
    };
    tracing::warn!(
        store,
        order_id,
        problem = %problem,
        "{what}: the order cannot be shown in the contract's form; served as its id with \"unshowable\": true"
    );
    // `crate::metrics::STORE_ERRORS` by name: the store sits below the metrics module.
    ::metrics::counter!(
        "partner_api_store_errors_total",
        "store" => store,
        "operation" => "show_order",
        "error_type" => "invalid_data"
    )
    .increment(1);
    unshowable_order_json(order_id)
}

/// The `{"id":...}` of a deletion.
pub(super) fn deleted_json(order_id: &str) -> Result<Bytes, StoreError> {
    serde_json::to_vec(&serde_json::json!({ "id": order_id }))
        .map(Bytes::from)
        .map_err(StoreError::other)
}

/// The `{"id":...,"unshowable":true}` of an order whose data could not be shown.
fn unshowable_order_json(order_id: &str) -> Result<Bytes, StoreError> {
    serde_json::to_vec(&serde_json::json!({ "id": order_id, "unshowable": true }))
        .map(Bytes::from)
        .map_err(StoreError::other)
}

/// The most events one stamping round gives positions to.
const STAMP_BATCH: i32 = 1_000;
/// The most stamping rounds one read runs for an `after` that has no position yet.
const MAX_STAMPING_ROUNDS: usize = 20;

/// The most work (in milliseconds) one retention call does before it commits.
const PRUNE_CALL_MILLIS: i32 = 100;
/// The most retention calls one `prune_events` makes: with [`PRUNE_CALL_MILLIS`], a few
/// seconds of work at most before the caller's next batch.
const MAX_PRUNE_CALLS: usize = 50;

const READ: &str = "SELECT outcome, id, change, order_id, order_row, created_at \
                    FROM partner_api_read_order_events($1, $2, $3, $4, $5, $6, $7)";

impl PgStore {
    /// One read of the feed; `None` when it has events without a position (and `check` was
    /// asked).
    async fn read_events(
        &self,
        organization_id: &str,
        query: &EventQuery,
        check: bool,
    ) -> Result<Option<EventsPage>, StoreError> {
        let after = query
            .after_id()
            .map(|id| i64::try_from(id).unwrap_or(i64::MAX));
        let kinds: Vec<&str> = query.types().names().collect();
        let limit = i32::try_from(query.limit()).unwrap_or(i32::MAX);
        let rows = sqlx::query(READ)
            .bind(organization_id)
            .bind(after)
            .bind(limit)
            .bind(kinds)
            .bind(check)
            .bind(query.providers())
            .bind(i32::try_from(MAX_EVENTS_LOOKED_AT_IN_VIEW).unwrap_or(i32::MAX))
            .fetch_all(&self.pool)
            .await
            .map_err(store_error)?;
        let mut events = Vec::with_capacity(rows.len());
        let mut newest = None;
        for row in &rows {
            let outcome: String = column(row, "outcome")?;
            match outcome.as_str() {
                "event" => events.push(event_from_row(row)?),
                "through" => {
                    let id: i64 = column(row, "id")?;
                    newest = Some(u64::try_from(id).map_err(StoreError::invalid_data)?);
                }
                "unstamped" => return Ok(None),
                "expired" => return Ok(Some(EventsPage::Expired)),
                "unknown" => return Ok(Some(EventsPage::Unknown)),
                other => {
                    return Err(StoreError::invalid_data(format!(
                        "the events feed answered {other:?}"
                    )))
                }
            }
        }
        let through = match events.last() {
            Some(last) if events.len() == query.limit() => Some(last.id),
            _ => newest,
        };
        Ok(Some(EventsPage::Events { events, through }))
    }
}

fn event_from_row(row: &PgRow) -> Result<FeedEvent, StoreError> {
    let id: i64 = column(row, "id")?;
    let change: String = column(row, "change")?;
    let change = OrderChange::from_name(&change)
        .ok_or_else(|| StoreError::invalid_data(format!("event {id}: type {change:?}")))?;
    let order_id: String = column(row, "order_id")?;
    let created_at = column::<PgTimestamp>(row, "created_at")?.0;
    let data = match change {
        OrderChange::Deleted => deleted_json(&order_id)?,
        OrderChange::Created | OrderChange::Updated => snapshot_json(
            "events",
            format_args!("event {id}"),
            &order_id,
            row.try_get("order_row").map_err(store_error)?,
            created_at,
        )?,
    };
    Ok(FeedEvent {
        id: u64::try_from(id).map_err(StoreError::invalid_data)?,
        change,
        created_at,
        data,
    })
}

#[async_trait]
impl EventFeed for PgStore {
    async fn events(
        &self,
        organization_id: &str,
        query: &EventQuery,
    ) -> Result<EventsPage, StoreError> {
        // The tail with nothing new, or nothing unstamped: one statement.
        if let Some(page) = self.read_events(organization_id, query, true).await? {
            return Ok(page);
        }
        // Rounds of their own, each committed before the read: positions are never handed
        // out by a transaction whose rows a reader may see before it commits. A round stamps
        // at most STAMP_BATCH events, so a backlog (a bulk import) never makes one statement
        // that a timeout could roll back again and again; the read after a round serves what
        // is stamped (the rest comes with the next reads), unless the `after` asked is not
        // stamped yet, which takes rounds until it is.
        for _ in 0..MAX_STAMPING_ROUNDS {
            let stamped: i64 = sqlx::query_scalar("SELECT partner_api_stamp_order_events($1, $2)")
                .bind(organization_id)
                .bind(STAMP_BATCH)
                .fetch_one(&self.pool)
                .await
                .map_err(store_error)?;
            // Without the check: events committed since wait for the next read, so a busy
            // feed never keeps a reader stamping.
            if let Some(page) = self.read_events(organization_id, query, false).await? {
                return Ok(page);
            }
            if stamped == 0 {
                break;
            }
        }
        Err(StoreError::unavailable(
            "the event to resume after has no position yet: the feed is still stamping a backlog",
        ))
    }

    fn serves_provider_views(&self) -> bool {
        true
    }

    /// Calls of `partner_api_prune_order_events`, each one short transaction (about 100 ms
    /// of work at most, so a reader's stamping waits for one call at most),
    /// from where the last call stopped, until `batch` events are deleted or every
    /// organization was visited.
    async fn prune_events(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        let keep = i64::try_from(older_than.as_secs()).unwrap_or(i64::MAX);
        let mut deleted = 0_u64;
        for _ in 0..MAX_PRUNE_CALLS {
            let asked = u64::from(batch).saturating_sub(deleted).max(1);
            let row =
                sqlx::query("SELECT deleted, done FROM partner_api_prune_order_events($1, $2, $3)")
                    .bind(keep)
                    .bind(i32::try_from(asked).unwrap_or(i32::MAX))
                    .bind(PRUNE_CALL_MILLIS)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(|err| {
                        if super::error::is_lock_timeout(&err) {
                            StoreError::unavailable(
                                "events retention: another call held the retention lock for two \
                         seconds; this round did not run",
                            )
                        } else {
                            store_error(err)
                        }
                    })?;
            let now: i64 = column(&row, "deleted")?;
            let done: bool = column(&row, "done")?;
            deleted += u64::try_from(now).unwrap_or(0);
            if done || deleted >= u64::from(batch) {
                break;
            }
        }
        Ok(deleted)
    }
}
