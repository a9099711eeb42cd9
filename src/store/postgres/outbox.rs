//! [`WebhookOutbox`] over PostgreSQL: the outbox written by the orders' trigger, claims with
//! `FOR UPDATE SKIP LOCKED` and a lease committed before the HTTP call, finishes, the
//! backlog and retention.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::webhooks::{body_from_row, endpoint_from_row, secret, timestamp};
use super::{column, store_error, PgStore};
use crate::model::Timestamp;
use crate::store::webhooks::{
    AttemptOutcome, Backlog, ClaimRequest, Delivery, DisableReason, EventType, Finish,
    FinishedAttempt, NextStep, WebhookOutbox,
};
use crate::store::StoreError;

/// The webhooks of new events: the feeds they need made (committed on their own, so the
/// stamping takes each feed's lock without waiting), then a stamping round.
async fn stamp_for_webhooks(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT partner_api_open_feeds_for_webhooks($1)")
        .bind(STAMPED_ORGANIZATIONS)
        .execute(pool)
        .await?;
    sqlx::query("SELECT partner_api_stamp_for_webhooks($1, $2)")
        .bind(STAMPED_ORGANIZATIONS)
        .bind(STAMPED_EVENTS)
        .execute(pool)
        .await?;
    Ok(())
}

/// Claims as [`ClaimRequest`] says: per enabled endpoint, its room (`$2`, or 1 while its
/// deliveries fail, less what the worker has in flight there, `$3`/`$4`), first attempts
/// before retries, never past an earlier pending change of the same order; per organization
/// at most its room (`$6`, less what the worker has in flight for it, `$7`/`$8`), endpoints
/// that answer before failing ones, and at most an equal part of the slots (`$10` over the
/// organizations in flight or due, plus one, less what it has in flight), a part of the free
/// slots (`$1`) kept for the first delivery of organizations with nothing in flight; to
/// failing endpoints at most `$9`; `$1` in all, the
/// organizations with nothing in flight first, then deliveries to endpoints that answer, in
/// random order within each (so none is always served last). The lease (`$5` ms) and the
/// attempt number are written in the same statement, which commits before any HTTP call.
const CLAIM: &str = "\
    WITH room AS MATERIALIZED ( \
        SELECT e.id, e.organization_id, e.failing_since IS NOT NULL AS failing, \
               o.busy IS NULL OR o.busy = 0 AS idle, coalesce(o.busy, 0) AS busy, \
               greatest(CASE WHEN e.failing_since IS NULL THEN $2 ELSE 1 END \
                        - coalesce(b.busy, 0), 0) AS room, \
               greatest($6::bigint - coalesce(o.busy, 0), 0) AS organization_room \
        FROM partner_webhook_endpoints e \
        LEFT JOIN unnest($3::bigint[], $4::int[]) AS b(endpoint_id, busy) ON b.endpoint_id = e.id \
        LEFT JOIN unnest($7::text[], $8::int[]) AS o(organization_id, busy) \
            ON o.organization_id = e.organization_id \
        WHERE e.enabled ORDER BY random()), \
    ranked AS ( \
        SELECT d.id, r.organization_id, r.organization_room, r.busy, r.failing, r.idle, \
               random() AS draw, \
               row_number() OVER (PARTITION BY r.organization_id \
                                  ORDER BY r.failing, d.due_at, d.id) AS nth \
        FROM room r, LATERAL ( \
            SELECT d.id, d.due_at FROM partner_webhook_deliveries d \
            WHERE d.endpoint_id = r.id AND d.state = 'pending' AND d.due_at <= now() \
              AND NOT EXISTS ( \
                  SELECT 1 FROM partner_webhook_deliveries p \
                  WHERE p.endpoint_id = d.endpoint_id AND p.order_id = d.order_id \
                    AND p.state = 'pending' AND p.id < d.id) \
            ORDER BY d.attempts > d.round_start, d.due_at, d.id \
            LIMIT r.room \
            FOR UPDATE OF d SKIP LOCKED) d \
        WHERE r.room > 0 AND r.organization_room > 0), \
    waiting AS ( \
        SELECT count(*) AS organizations FROM ( \
            SELECT organization_id FROM ranked UNION SELECT unnest($7::text[])) o), \
    parts AS ( \
        SELECT CASE WHEN $10::bigint IS NULL THEN NULL \
                    ELSE greatest(1, $10 / (organizations + 1)) END AS part \
        FROM waiting), \
    ordered AS ( \
        SELECT id, failing, idle AND nth = 1 AS newcomer, row_number() OVER fair AS position, \
               count(*) FILTER (WHERE failing) OVER fair AS failing_so_far \
        FROM ranked, parts \
        WHERE nth <= least(organization_room, coalesce(parts.part - busy, organization_room)) \
        WINDOW fair AS (ORDER BY (idle AND nth = 1) DESC, failing, draw \
                        ROWS UNBOUNDED PRECEDING)), \
    picked AS ( \
        SELECT o.id FROM ordered o, parts \
        WHERE (NOT o.failing OR o.failing_so_far <= $9) \
          AND (o.newcomer OR parts.part IS NULL OR o.position <= $1 - parts.part) \
        ORDER BY o.position LIMIT $1) \
    UPDATE partner_webhook_deliveries d \
    SET attempts = d.attempts + 1, due_at = now() + $5 * interval '1 millisecond' \
    FROM picked, partner_webhook_messages m, partner_webhook_endpoints e \
    WHERE d.id = picked.id AND m.id = d.message_id AND e.id = d.endpoint_id \
    RETURNING d.id AS delivery_id, d.webhook_id, d.attempts, d.round_start, \
              m.event_type, m.order_id AS message_order_id, m.order_row, m.data, m.raised_at, \
              m.event_id, \
              e.id, e.organization_id, e.url, e.events, e.description, e.enabled, e.created_at, \
              e.api_version, e.providers, e.secret, \
              CASE WHEN e.previous_secret_until > now() THEN e.previous_secret END AS previous_secret, \
              e.failing_since";

/// Finishes attempt `$2` of delivery `$1` if it is still current: its state and due time,
/// the attempt's record, and the endpoint's failure streak (written only when it changes) and
/// disabling, whose reason (`$12`) the transaction-local `partner_api.disable_reason` hands to
/// the trigger that writes its audit entry (migration `audit_disabled_by_delivery`; the
/// statement runs as a transaction of its own, so the setting ends with it). `before` is the
/// endpoint as the statement's snapshot saw it: a row whose `enabled` another transaction
/// changed meanwhile (an admin's) is left to that change, so `was_enabled` is never stale and
/// a disabling reported here is always the one the trigger saw.
/// Returns whether it was current, and the endpoint if this disabled it.
const FINISH: &str = "\
    WITH current AS ( \
        UPDATE partner_webhook_deliveries SET state = $3, due_at = coalesce($4, due_at) \
        WHERE id = $1 AND attempts = $2 AND state = 'pending' \
        RETURNING id, endpoint_id), \
    recorded AS ( \
        INSERT INTO partner_webhook_attempts (delivery_id, endpoint_id, attempt, outcome, \
            response_status, error, response_body, duration_ms, attempted_at) \
        SELECT id, endpoint_id, $2, $5, $6, $7, $8, $9, $10 FROM current), \
    reason AS ( \
        SELECT pg_catalog.set_config('partner_api.disable_reason', coalesce($12, ''), true)), \
    endpoint AS ( \
        UPDATE partner_webhook_endpoints e SET \
            failing_since = CASE WHEN $5 = 'succeeded' THEN NULL \
                                 ELSE coalesce(e.failing_since, $10) END, \
            enabled = e.enabled AND NOT $11 \
        FROM current c, partner_webhook_endpoints before, reason \
        WHERE e.id = c.endpoint_id AND before.id = e.id AND before.enabled = e.enabled \
          AND (($5 = 'succeeded') = (e.failing_since IS NOT NULL) OR ($11 AND e.enabled)) \
        RETURNING e.id, e.organization_id, e.url, e.events, e.description, e.enabled, \
                  e.created_at, e.api_version, e.providers, before.enabled AS was_enabled) \
    SELECT EXISTS (SELECT 1 FROM current) AS current, endpoint.* \
    FROM (SELECT 1) one LEFT JOIN endpoint ON true";

/// The organizations whose new events one claim stamps (and so writes their webhooks) before
/// it claims, the oldest waiting first, and the events of each: at most 10,000 events, a
/// transaction well within the pool's 5 s statement time-out whatever the backlog (what it
/// leaves waits for the next claim, 200 ms later by default).
const STAMPED_ORGANIZATIONS: i32 = 20;
/// See [`STAMPED_ORGANIZATIONS`].
const STAMPED_EVENTS: i32 = 500;

#[async_trait]
impl WebhookOutbox for PgStore {
    /// Stamps the new events of the organizations with an enabled endpoint first (a change's
    /// webhooks are written from its event when it gets its position in the feed, off the
    /// order write's path), then claims. A stamping that fails is logged and the claim goes
    /// on: what is already in the outbox is delivered whatever happens to the new events.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Delivery>, StoreError> {
        if let Err(err) = stamp_for_webhooks(&self.pool).await {
            tracing::warn!(
                error = %crate::log::ErrorChain(&err),
                "webhooks: stamping new events failed; their webhooks wait for the next claim"
            );
        }
        let (busy_ids, busy_counts): (Vec<i64>, Vec<i32>) = request
            .in_flight
            .iter()
            .filter_map(|(id, count)| Some((id.parse::<i64>().ok()?, i32::try_from(*count).ok()?)))
            .unzip();
        let (busy_organizations, busy_organization_counts): (Vec<&str>, Vec<i32>) = request
            .organizations_in_flight
            .iter()
            .filter_map(|(id, count)| Some((id.as_str(), i32::try_from(*count).ok()?)))
            .unzip();
        let rows = sqlx::query(CLAIM)
            .bind(i64::try_from(request.limit).unwrap_or(i64::MAX))
            .bind(i32::try_from(request.per_endpoint).unwrap_or(i32::MAX))
            .bind(&busy_ids)
            .bind(&busy_counts)
            .bind(i64::try_from(request.lease.as_millis()).unwrap_or(i64::MAX / 2))
            .bind(i64::try_from(request.per_organization).unwrap_or(i64::MAX))
            .bind(&busy_organizations)
            .bind(&busy_organization_counts)
            .bind(i64::try_from(request.failing_room).unwrap_or(i64::MAX))
            .bind(
                (request.slots != usize::MAX)
                    .then(|| i64::try_from(request.slots).unwrap_or(i64::MAX)),
            )
            .fetch_all(&self.pool)
            .await
            .map_err(store_error)?;
        let mut deliveries = Vec::with_capacity(rows.len());
        for row in &rows {
            match delivery_from_row(row) {
                Ok(delivery) => deliveries.push(delivery),
                // A message that cannot be sent (a row the API could not serve either) fails
                // alone, with the reason, instead of failing the claim: the other deliveries
                // go, and its order's later events are not held behind it forever.
                Err((Some(delivery), error)) => {
                    let mut attempt = FinishedAttempt::new(
                        AttemptOutcome::Failed,
                        Timestamp::now(),
                        Duration::ZERO,
                    );
                    // The reason goes to the host's log; the attempt, which the
                    // organization reads, keeps a fixed cause.
                    attempt.error = Some(
                        "the event could not be built from its order (the host's log says why)"
                            .to_owned(),
                    );
                    tracing::error!(endpoint_id = %delivery.endpoint_id, message_id = %delivery.message_id, error = %crate::log::ErrorChain(&error), "webhooks: an event could not be built; it is failed");
                    self.finish(&delivery, &attempt).await?;
                }
                // A row that cannot be read at all (an endpoint's timestamp out of range, say)
                // is skipped, never the whole claim: its lease runs out, every other
                // organization's deliveries go on, and the log names it until it is repaired.
                Err((None, error)) => {
                    let delivery_id = column::<i64>(row, "delivery_id").ok();
                    tracing::error!(?delivery_id, error = %crate::log::ErrorChain(&error), "webhooks: a claimed delivery's row cannot be read; it is skipped");
                }
            }
        }
        Ok(deliveries)
    }
    async fn finish(
        &self,
        delivery: &Delivery,
        attempt: &FinishedAttempt,
    ) -> Result<Finish, StoreError> {
        finish(self, delivery, attempt).await
    }

    async fn backlog(&self) -> Result<Backlog, StoreError> {
        backlog(self).await
    }

    async fn prune(&self, older_than: Duration, batch: usize) -> Result<u64, StoreError> {
        // Their deliveries and attempts go by the foreign keys' cascade. No row lock in the
        // subquery (it would need UPDATE, which the delivering role has not): a worker that
        // picks rows another one is deleting waits for that batch and deletes fewer.
        let batch = u64::try_from(batch).unwrap_or(u64::MAX);
        self.delete_oldest(
            "partner_webhook_messages",
            "raised_at",
            "id",
            older_than,
            batch,
        )
        .await
    }
}

/// A claimed row as a delivery; when only its body cannot be built, the delivery without a
/// body (to fail it) and why.
fn delivery_from_row(row: &PgRow) -> Result<Delivery, (Option<Box<Delivery>>, StoreError)> {
    let fail = |error| (None, error);
    let endpoint = endpoint_from_row(row).map_err(fail)?;
    let built = (|| {
        let kind: EventType = column::<String>(row, "event_type")?
            .parse()
            .map_err(StoreError::invalid_data)?;
        let mut secrets = vec![secret(&column::<String>(row, "secret")?)?];
        if let Some(previous) = row
            .try_get::<Option<String>, _>("previous_secret")
            .map_err(store_error)?
        {
            secrets.push(secret(&previous)?);
        }
        let attempts = u32::try_from(column::<i32>(row, "attempts")?).unwrap_or(0);
        let round_start = u32::try_from(column::<i32>(row, "round_start")?).unwrap_or(0);
        Ok::<_, StoreError>(Delivery::new(
            column::<i64>(row, "delivery_id")?.to_string(),
            column(row, "webhook_id")?,
            &endpoint,
            secrets,
            kind,
            Bytes::new(),
            attempts,
            attempts.saturating_sub(round_start),
            timestamp(row, "failing_since")?,
        ))
    })();
    let mut delivery = built.map_err(fail)?;
    match body_from_row(row, delivery.event_type) {
        Ok(body) => {
            delivery.body = body;
            Ok(delivery)
        }
        Err(error) => Err((Some(Box::new(delivery)), error)),
    }
}

async fn finish(
    store: &PgStore,
    delivery: &Delivery,
    attempt: &FinishedAttempt,
) -> Result<Finish, StoreError> {
    let (state, due) = match attempt.next {
        NextStep::Done => ("succeeded", None),
        NextStep::RetryAt(at) => ("pending", Some(at.as_datetime())),
        _ => ("failed", None),
    };
    let row = sqlx::query(FINISH)
        .bind(delivery.delivery_id.parse::<i64>().unwrap_or(0))
        .bind(i32::try_from(delivery.attempt).unwrap_or(i32::MAX))
        .bind(state)
        .bind(due)
        .bind(attempt.outcome.as_str())
        .bind(attempt.response_status.map(i32::from))
        .bind(attempt.error.as_deref())
        .bind(attempt.response_body.as_deref())
        .bind(i64::try_from(attempt.duration.as_millis()).unwrap_or(i64::MAX))
        .bind(attempt.attempted_at.as_datetime())
        .bind(attempt.disable_endpoint)
        .bind(attempt.disable_reason().map(DisableReason::as_str))
        .fetch_one(&store.pool)
        .await
        .map_err(store_error)?;
    let current: bool = column(&row, "current")?;
    let was_enabled: Option<bool> = row.try_get("was_enabled").map_err(store_error)?;
    let enabled: Option<bool> = row.try_get("enabled").map_err(store_error)?;
    let disabled = if was_enabled == Some(true) && enabled == Some(false) {
        Some(endpoint_from_row(&row)?)
    } else {
        None
    };
    Ok(Finish { current, disabled })
}

async fn backlog(store: &PgStore) -> Result<Backlog, StoreError> {
    let row = sqlx::query(
        "SELECT count(*) AS due, \
                extract(epoch FROM now() - min(d.due_at))::float8 AS oldest \
         FROM partner_webhook_deliveries d \
         JOIN partner_webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled \
         WHERE d.state = 'pending' AND d.due_at <= now()",
    )
    .fetch_one(&store.pool)
    .await
    .map_err(store_error)?;
    let due: i64 = column(&row, "due")?;
    let oldest: Option<f64> = row.try_get("oldest").map_err(store_error)?;
    Ok(Backlog {
        due: u64::try_from(due).unwrap_or(0),
        oldest_due: oldest.map(|seconds| Duration::from_secs_f64(seconds.max(0.0))),
    })
}
