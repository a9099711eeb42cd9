//! [`WebhookManager`] and [`WebhookOutbox`] over PostgreSQL: endpoints scoped to their
//! organization, the outbox written by the orders' trigger, claims with `FOR UPDATE SKIP
//! LOCKED` and a lease committed before the HTTP call.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::{column, store_error, PgStore};
use crate::model::{EncodedOrder, Order, Timestamp};
use crate::store::StoreError;
use crate::webhooks::{
    payload, Attempt, AttemptOutcome, Backlog, ClaimRequest, CreatedEndpoint, Delivery, Endpoint,
    EventType, Finish, FinishedAttempt, NewEndpoint, NextStep, WebhookManager, WebhookOutbox,
    WebhookSecret,
};

/// The columns of an [`Endpoint`], in `endpoint_from_row`'s names.
const ENDPOINT: &str = "id, organization_id, url, events, description, enabled, created_at";

/// Claims as [`ClaimRequest`] says: per enabled endpoint, its room (`$2`, or 1 while its
/// deliveries fail, less what the worker has in flight there, `$3`/`$4`), first attempts
/// before retries, never past an earlier pending change of the same order; `$1` in all, the
/// endpoints taken in random order so that none is always served last; per organization at
/// most its room (`$6`, less what the worker has in flight for it, `$7`/`$8`), so one
/// organization's hanging endpoints never take every slot. The lease (`$5` ms) and the attempt
/// number are written in the same statement, which commits before any HTTP call.
const CLAIM: &str = "\
    WITH room AS MATERIALIZED ( \
        SELECT e.id, e.organization_id, \
               greatest(CASE WHEN e.failing_since IS NULL THEN $2 ELSE 1 END \
                        - coalesce(b.busy, 0), 0) AS room, \
               greatest($6::bigint - coalesce(o.busy, 0), 0) AS organization_room \
        FROM partner_webhook_endpoints e \
        LEFT JOIN unnest($3::bigint[], $4::int[]) AS b(endpoint_id, busy) ON b.endpoint_id = e.id \
        LEFT JOIN unnest($7::text[], $8::int[]) AS o(organization_id, busy) \
            ON o.organization_id = e.organization_id \
        WHERE e.enabled ORDER BY random()), \
    ranked AS ( \
        SELECT d.id, r.organization_room, \
               row_number() OVER (PARTITION BY r.organization_id) AS nth \
        FROM room r, LATERAL ( \
            SELECT d.id FROM partner_webhook_deliveries d \
            WHERE d.endpoint_id = r.id AND d.state = 'pending' AND d.due_at <= now() \
              AND NOT EXISTS ( \
                  SELECT 1 FROM partner_webhook_deliveries p \
                  WHERE p.endpoint_id = d.endpoint_id AND p.order_id = d.order_id \
                    AND p.state = 'pending' AND p.id < d.id) \
            ORDER BY d.attempts > d.round_start, d.due_at, d.id \
            LIMIT r.room \
            FOR UPDATE OF d SKIP LOCKED) d \
        WHERE r.room > 0 AND r.organization_room > 0), \
    picked AS (SELECT id FROM ranked WHERE nth <= organization_room LIMIT $1) \
    UPDATE partner_webhook_deliveries d \
    SET attempts = d.attempts + 1, due_at = now() + $5 * interval '1 millisecond' \
    FROM picked, partner_webhook_messages m, partner_webhook_endpoints e \
    WHERE d.id = picked.id AND m.id = d.message_id AND e.id = d.endpoint_id \
    RETURNING d.id AS delivery_id, d.webhook_id, d.attempts, d.round_start, \
              m.event_type, m.order_id AS message_order_id, m.order_row, m.data, m.raised_at, \
              e.id, e.organization_id, e.url, e.events, e.description, e.enabled, e.created_at, \
              e.secret, \
              CASE WHEN e.previous_secret_until > now() THEN e.previous_secret END AS previous_secret, \
              e.failing_since";

/// Finishes attempt `$2` of delivery `$1` if it is still current: its state and due time,
/// the attempt's record, and the endpoint's failure streak (written only when it changes) and
/// disabling. Returns whether it was current, and the endpoint if this disabled it.
const FINISH: &str = "\
    WITH current AS ( \
        UPDATE partner_webhook_deliveries SET state = $3, due_at = coalesce($4, due_at) \
        WHERE id = $1 AND attempts = $2 AND state = 'pending' \
        RETURNING id, endpoint_id), \
    recorded AS ( \
        INSERT INTO partner_webhook_attempts (delivery_id, endpoint_id, attempt, outcome, \
            response_status, error, response_body, duration_ms, attempted_at) \
        SELECT id, endpoint_id, $2, $5, $6, $7, $8, $9, $10 FROM current), \
    endpoint AS ( \
        UPDATE partner_webhook_endpoints e SET \
            failing_since = CASE WHEN $5 = 'succeeded' THEN NULL \
                                 ELSE coalesce(e.failing_since, $10) END, \
            enabled = e.enabled AND NOT $11 \
        FROM current c, partner_webhook_endpoints before \
        WHERE e.id = c.endpoint_id AND before.id = e.id \
          AND (($5 = 'succeeded') = (e.failing_since IS NOT NULL) OR ($11 AND e.enabled)) \
        RETURNING e.id, e.organization_id, e.url, e.events, e.description, e.enabled, \
                  e.created_at, before.enabled AS was_enabled) \
    SELECT EXISTS (SELECT 1 FROM current) AS current, endpoint.* \
    FROM (SELECT 1) one LEFT JOIN endpoint ON true";

fn endpoint_id(text: &str) -> Result<i64, StoreError> {
    text.parse::<i64>().map_err(|_| no_endpoint(text))
}

fn no_endpoint(text: &str) -> StoreError {
    StoreError::not_found(format!(
        "no webhook endpoint {:?} in this organization",
        text.chars().take(64).collect::<String>()
    ))
}

fn endpoint_from_row(row: &PgRow) -> Result<Endpoint, StoreError> {
    let id: i64 = column(row, "id")?;
    let created_at: DateTime<Utc> = column(row, "created_at")?;
    let mut endpoint = Endpoint::new(
        id.to_string(),
        column::<String>(row, "organization_id")?,
        column::<String>(row, "url")?,
        Timestamp::from_datetime(created_at),
    );
    endpoint.events = column::<Vec<String>>(row, "events")?
        .iter()
        .map(|name| name.parse().map_err(StoreError::invalid_data))
        .collect::<Result<_, _>>()?;
    endpoint.description = column(row, "description")?;
    endpoint.enabled = column(row, "enabled")?;
    Ok(endpoint)
}

fn secret(text: &str) -> Result<WebhookSecret, StoreError> {
    text.parse().map_err(StoreError::invalid_data)
}

fn timestamp(row: &PgRow, name: &str) -> Result<Option<Timestamp>, StoreError> {
    let at: Option<DateTime<Utc>> = row.try_get(name).map_err(store_error)?;
    Ok(at.map(Timestamp::from_datetime))
}

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

/// The body of a claimed delivery, the same bytes every time: from the order's snapshot
/// through the encoder `GET /v1/orders` uses.
fn body_from_row(row: &PgRow, kind: EventType) -> Result<Bytes, StoreError> {
    let raised_at: DateTime<Utc> = column(row, "raised_at")?;
    let raised_at = Timestamp::from_datetime(raised_at);
    let data = match kind {
        EventType::OrderCreated | EventType::OrderUpdated => {
            let snapshot: serde_json::Value = column(row, "order_row")?;
            let order: OrderRow =
                serde_json::from_value(snapshot).map_err(StoreError::invalid_data)?;
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
            encoded.json().to_vec()
        }
        EventType::OrderDeleted => {
            let id: String = column(row, "message_order_id")?;
            serde_json::to_vec(&serde_json::json!({ "id": id })).map_err(StoreError::other)?
        }
        _ => {
            let data: Option<serde_json::Value> = row.try_get("data").map_err(store_error)?;
            serde_json::to_vec(&data.unwrap_or_else(|| serde_json::json!({})))
                .map_err(StoreError::other)?
        }
    };
    Ok(payload(kind, raised_at, &data))
}

impl PgStore {
    async fn check_organization(&self, organization_id: &str) -> Result<(), StoreError> {
        let found = sqlx::query("SELECT 1 FROM partner_organizations WHERE id = $1")
            .bind(organization_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
        found.map(drop).ok_or_else(|| {
            StoreError::not_found(format!("unknown organization {organization_id:?}"))
        })
    }
}

#[async_trait]
impl WebhookManager for PgStore {
    async fn add_endpoint(
        &self,
        organization_id: &str,
        new: NewEndpoint,
    ) -> Result<CreatedEndpoint, StoreError> {
        let events = new.check()?;
        let secret = WebhookSecret::generate().map_err(StoreError::other)?;
        let names: Vec<&str> = events.iter().map(|kind| kind.as_str()).collect();
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        // One add at a time per organization, so two cannot both pass the cap.
        sqlx::query(
            "SELECT pg_advisory_xact_lock(hashtextextended('partner_api_webhooks:' || $1, 0))",
        )
        .bind(organization_id)
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
        let policy = super::manage::read_policy(&mut transaction, organization_id).await?;
        let endpoints: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM partner_webhook_endpoints WHERE organization_id = $1",
        )
        .bind(organization_id)
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        policy.check_webhook_endpoints(endpoints.unsigned_abs())?;
        let row = sqlx::query(&format!(
            "INSERT INTO partner_webhook_endpoints (organization_id, url, events, description, secret) \
             VALUES ($1, $2, $3, $4, $5) RETURNING {ENDPOINT}"
        ))
        .bind(organization_id)
        .bind(&new.url)
        .bind(&names)
        .bind(&new.description)
        .bind(secret.expose())
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        transaction.commit().await.map_err(store_error)?;
        Ok(CreatedEndpoint {
            record: endpoint_from_row(&row)?,
            secret,
        })
    }

    async fn endpoints(&self, organization_id: &str) -> Result<Vec<Endpoint>, StoreError> {
        self.check_organization(organization_id).await?;
        sqlx::query(&format!(
            "SELECT {ENDPOINT} FROM partner_webhook_endpoints WHERE organization_id = $1 ORDER BY id DESC"
        ))
        .bind(organization_id)
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?
        .iter()
        .map(endpoint_from_row)
        .collect()
    }

    async fn endpoint(&self, organization_id: &str, id: &str) -> Result<Endpoint, StoreError> {
        let row = sqlx::query(&format!(
            "SELECT {ENDPOINT} FROM partner_webhook_endpoints WHERE organization_id = $1 AND id = $2"
        ))
        .bind(organization_id)
        .bind(endpoint_id(id)?)
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        endpoint_from_row(&row.ok_or_else(|| no_endpoint(id))?)
    }

    async fn rotate_secret(
        &self,
        organization_id: &str,
        id: &str,
        overlap: Duration,
    ) -> Result<CreatedEndpoint, StoreError> {
        let secret = WebhookSecret::generate().map_err(StoreError::other)?;
        let overlap_ms = i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX / 2);
        let row = sqlx::query(&format!(
            "UPDATE partner_webhook_endpoints SET \
                 previous_secret = CASE WHEN $4 > 0 THEN secret END, \
                 previous_secret_until = CASE WHEN $4 > 0 THEN now() + $4 * interval '1 millisecond' END, \
                 secret = $3 \
             WHERE organization_id = $1 AND id = $2 RETURNING {ENDPOINT}"
        ))
        .bind(organization_id)
        .bind(endpoint_id(id)?)
        .bind(secret.expose())
        .bind(overlap_ms)
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(CreatedEndpoint {
            record: endpoint_from_row(&row.ok_or_else(|| no_endpoint(id))?)?,
            secret,
        })
    }

    async fn set_enabled(
        &self,
        organization_id: &str,
        id: &str,
        enabled: bool,
    ) -> Result<Endpoint, StoreError> {
        let row = sqlx::query(&format!(
            "UPDATE partner_webhook_endpoints SET enabled = $3, \
                 failing_since = CASE WHEN $3 AND NOT enabled THEN NULL ELSE failing_since END \
             WHERE organization_id = $1 AND id = $2 RETURNING {ENDPOINT}"
        ))
        .bind(organization_id)
        .bind(endpoint_id(id)?)
        .bind(enabled)
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        endpoint_from_row(&row.ok_or_else(|| no_endpoint(id))?)
    }

    async fn remove_endpoint(&self, organization_id: &str, id: &str) -> Result<(), StoreError> {
        // Its deliveries and attempts go by cascade; messages no other endpoint has, here.
        let row = sqlx::query(
            "WITH removed AS ( \
                 DELETE FROM partner_webhook_endpoints WHERE organization_id = $1 AND id = $2 \
                 RETURNING id), \
             orphans AS ( \
                 DELETE FROM partner_webhook_messages m \
                 WHERE m.id IN (SELECT d.message_id FROM partner_webhook_deliveries d \
                                JOIN removed ON d.endpoint_id = removed.id) \
                   AND NOT EXISTS (SELECT 1 FROM partner_webhook_deliveries o \
                                   WHERE o.message_id = m.id AND o.endpoint_id <> $2)) \
             SELECT count(*) AS removed FROM removed",
        )
        .bind(organization_id)
        .bind(endpoint_id(id)?)
        .fetch_one(&self.pool)
        .await
        .map_err(store_error)?;
        if column::<i64>(&row, "removed")? == 0 {
            return Err(no_endpoint(id));
        }
        Ok(())
    }

    async fn send_test(&self, organization_id: &str, id: &str) -> Result<String, StoreError> {
        let endpoint = self.endpoint(organization_id, id).await?;
        if !endpoint.enabled {
            return Err(StoreError::conflict(
                "the endpoint is disabled; enable it first",
            ));
        }
        let row = sqlx::query(
            "WITH message AS ( \
                 INSERT INTO partner_webhook_messages (organization_id, event_type, data) \
                 VALUES ($1, 'webhook.test', jsonb_build_object('endpointId', $2::text)) RETURNING id) \
             INSERT INTO partner_webhook_deliveries (message_id, endpoint_id) \
             SELECT message.id, $3 FROM message RETURNING webhook_id",
        )
        .bind(organization_id)
        .bind(&endpoint.id)
        .bind(endpoint_id(id)?)
        .fetch_one(&self.pool)
        .await
        .map_err(store_error)?;
        column(&row, "webhook_id")
    }

    async fn attempts(
        &self,
        organization_id: &str,
        id: &str,
        limit: usize,
    ) -> Result<Vec<Attempt>, StoreError> {
        self.endpoint(organization_id, id).await?;
        let rows = sqlx::query(
            "SELECT d.webhook_id, m.event_type, a.attempt, a.outcome, a.response_status, a.error, \
                    a.response_body, a.duration_ms, a.attempted_at \
             FROM partner_webhook_attempts a \
             JOIN partner_webhook_deliveries d ON d.id = a.delivery_id \
             JOIN partner_webhook_messages m ON m.id = d.message_id \
             WHERE a.endpoint_id = $1 ORDER BY a.id DESC LIMIT $2",
        )
        .bind(endpoint_id(id)?)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        rows.iter()
            .map(|row| {
                let outcome = match column::<String>(row, "outcome")?.as_str() {
                    "succeeded" => AttemptOutcome::Succeeded,
                    _ => AttemptOutcome::Failed,
                };
                let status: Option<i32> = row.try_get("response_status").map_err(store_error)?;
                let attempted_at: DateTime<Utc> = column(row, "attempted_at")?;
                Ok(Attempt {
                    message_id: column(row, "webhook_id")?,
                    event_type: column::<String>(row, "event_type")?
                        .parse()
                        .map_err(StoreError::invalid_data)?,
                    attempt: u32::try_from(column::<i32>(row, "attempt")?).unwrap_or(0),
                    outcome,
                    response_status: status.and_then(|status| u16::try_from(status).ok()),
                    error: row.try_get("error").map_err(store_error)?,
                    response_body: row.try_get("response_body").map_err(store_error)?,
                    duration_ms: u64::try_from(column::<i64>(row, "duration_ms")?).unwrap_or(0),
                    attempted_at: Timestamp::from_datetime(attempted_at),
                })
            })
            .collect()
    }

    async fn retry_message(
        &self,
        organization_id: &str,
        id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.endpoint(organization_id, id).await?;
        let done = sqlx::query(
            "WITH found AS (SELECT id, state FROM partner_webhook_deliveries \
                            WHERE endpoint_id = $1 AND webhook_id = $2), \
                  requeued AS ( \
                 UPDATE partner_webhook_deliveries d SET state = 'pending', due_at = now(), \
                     round_start = d.attempts \
                 FROM found WHERE d.id = found.id AND found.state <> 'pending') \
             SELECT id FROM found",
        )
        .bind(endpoint_id(id)?)
        .bind(message_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        match done {
            Some(_) => Ok(()),
            None => Err(StoreError::not_found("no such message to this endpoint")),
        }
    }

    async fn recover(
        &self,
        organization_id: &str,
        id: &str,
        since: Timestamp,
    ) -> Result<u64, StoreError> {
        self.endpoint(organization_id, id).await?;
        let done = sqlx::query(
            "UPDATE partner_webhook_deliveries d SET state = 'pending', due_at = now(), \
                 round_start = d.attempts \
             FROM partner_webhook_messages m \
             WHERE d.endpoint_id = $1 AND d.state = 'failed' AND m.id = d.message_id \
               AND m.raised_at >= $2",
        )
        .bind(endpoint_id(id)?)
        .bind(since.as_datetime())
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected())
    }
}

#[async_trait]
impl WebhookOutbox for PgStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Delivery>, StoreError> {
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
                    attempt.error = Some(format!(
                        "the event could not be built: {}",
                        crate::log::ErrorChain(&error)
                    ));
                    tracing::error!(endpoint_id = %delivery.endpoint_id, message_id = %delivery.message_id, error = %crate::log::ErrorChain(&error), "webhooks: an event could not be built; it is failed");
                    self.finish(&delivery, &attempt).await?;
                }
                Err((None, error)) => return Err(error),
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

    async fn prune(&self, before: Timestamp, batch: usize) -> Result<u64, StoreError> {
        // Their deliveries and attempts go by the foreign keys' cascade. No row lock in the
        // subquery (it would need UPDATE, which the delivering role has not): a worker that
        // picks rows another one is deleting waits for that batch and deletes fewer.
        let deleted = sqlx::query(
            "DELETE FROM partner_webhook_messages WHERE id IN ( \
               SELECT id FROM partner_webhook_messages WHERE raised_at < $1 \
               ORDER BY raised_at LIMIT $2)",
        )
        .bind(before.as_datetime())
        .bind(i64::try_from(batch).unwrap_or(i64::MAX))
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(deleted.rows_affected())
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
