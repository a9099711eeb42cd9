//! `PgStore`'s [`EventFeed`]: reads through `partner_api_read_order_events`, stamping first
//! (in a transaction of its own) when the feed has events without a position; retention
//! through `partner_api_prune_order_events`. The invariant and its argument are on
//! [`crate::store::events`] and in the migration `20261201000001_order_events.sql`.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::postgres::PgRow;

use super::timestamp::PgTimestamp;
use super::{column, store_error, PgStore};
use crate::model::{EncodedOrder, Order, Timestamp};
use crate::store::{EventFeed, EventQuery, EventsPage, FeedEvent, OrderChange, StoreError};

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
/// uses: the same bytes every time.
pub(super) fn order_json(snapshot: serde_json::Value) -> Result<Bytes, StoreError> {
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
    })?;
    Ok(Bytes::copy_from_slice(encoded.json()))
}

/// The `{"id":...}` of a deletion.
pub(super) fn deleted_json(order_id: &str) -> Result<Bytes, StoreError> {
    serde_json::to_vec(&serde_json::json!({ "id": order_id }))
        .map(Bytes::from)
        .map_err(StoreError::other)
}

/// The most events one stamping round gives positions to.
const STAMP_BATCH: i32 = 1_000;
/// The most stamping rounds one read runs for an `after` that has no position yet.
const MAX_STAMPING_ROUNDS: usize = 20;

const READ: &str = "SELECT outcome, id, change, order_id, order_row, created_at \
                    FROM partner_api_read_order_events($1, $2, $3, $4, $5)";

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
    let data = match change {
        OrderChange::Deleted => deleted_json(&order_id)?,
        OrderChange::Created | OrderChange::Updated => {
            let snapshot: serde_json::Value = column(row, "order_row")?;
            order_json(snapshot).map_err(|err| {
                StoreError::invalid_data(format!(
                    "event {id} of order {order_id:?}: {}",
                    crate::log::ErrorChain(&err)
                ))
            })?
        }
    };
    Ok(FeedEvent {
        id: u64::try_from(id).map_err(StoreError::invalid_data)?,
        change,
        created_at: column::<PgTimestamp>(row, "created_at")?.0,
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

    async fn prune_events(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        let keep = i64::try_from(older_than.as_secs()).unwrap_or(i64::MAX);
        let deleted: i64 = sqlx::query_scalar("SELECT partner_api_prune_order_events($1, $2)")
            .bind(keep)
            .bind(i32::try_from(batch).unwrap_or(i32::MAX))
            .fetch_one(&self.pool)
            .await
            .map_err(store_error)?;
        Ok(u64::try_from(deleted).unwrap_or(0))
    }
}
