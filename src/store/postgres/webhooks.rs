//! [`WebhookManager`] over PostgreSQL: endpoints scoped to their organization, test events,
//! attempts, retries and recoveries; the rows both it and the outbox ([`outbox`](super::outbox)) read.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::audit::audited;
use super::timestamp::PgTimestamp;
use super::{column, store_error, PgStore};
use crate::model::Timestamp;
use crate::store::audit::url_origin;
use crate::store::webhooks::{
    payload, Attempt, AttemptOutcome, CreatedEndpoint, Endpoint, EventType, NewEndpoint,
    WebhookAbility, WebhookManager, WebhookSecret, MAX_RECOVERED,
};
use crate::store::StoreError;
use crate::store::{AuditAction, AuditRecord, EventId};
use crate::versions::{ApiVersion, FIRST};

/// The columns of an [`Endpoint`], in `endpoint_from_row`'s names.
const ENDPOINT: &str =
    "id, organization_id, url, events, description, enabled, created_at, api_version, providers";

pub(super) fn endpoint_id(text: &str) -> Result<i64, StoreError> {
    text.parse::<i64>().map_err(|_| no_endpoint(text))
}

pub(super) fn no_endpoint(text: &str) -> StoreError {
    StoreError::not_found(format!(
        "no webhook endpoint {:?} in this organization",
        text.chars().take(64).collect::<String>()
    ))
}

pub(super) fn endpoint_from_row(row: &PgRow) -> Result<Endpoint, StoreError> {
    let id: i64 = column(row, "id")?;
    let created_at = column::<PgTimestamp>(row, "created_at")?.0;
    let mut endpoint = Endpoint::new(
        id.to_string(),
        column::<String>(row, "organization_id")?,
        column::<String>(row, "url")?,
        created_at,
    );
    endpoint.events = column::<Vec<String>>(row, "events")?
        .iter()
        .map(|name| name.parse().map_err(StoreError::invalid_data))
        .collect::<Result<_, _>>()?;
    endpoint.description = column(row, "description")?;
    endpoint.api_version = super::keys::api_version(row, "api_version")?;
    endpoint.enabled = column(row, "enabled")?;
    endpoint.providers = row.try_get("providers").map_err(store_error)?;
    Ok(endpoint)
}

pub(super) fn secret(text: &str) -> Result<WebhookSecret, StoreError> {
    text.parse().map_err(StoreError::invalid_data)
}

pub(super) fn timestamp(row: &PgRow, name: &str) -> Result<Option<Timestamp>, StoreError> {
    let at: Option<PgTimestamp> = row.try_get(name).map_err(store_error)?;
    Ok(at.map(|at| at.0))
}

/// The body of a claimed delivery, the same bytes every time: from the order's snapshot
/// through the encoder `GET /v1/orders` uses, with its event's id when it has one (messages
/// raised before the feed have none).
pub(super) fn body_from_row(row: &PgRow, kind: EventType) -> Result<Bytes, StoreError> {
    let raised_at = column::<PgTimestamp>(row, "raised_at")?.0;
    let data = match kind {
        EventType::OrderCreated | EventType::OrderUpdated => {
            let delivery: i64 = column(row, "delivery_id")?;
            let newest = super::events::snapshot_json(
                "webhooks",
                format_args!("webhook delivery {delivery}"),
                &column::<String>(row, "message_order_id")?,
                row.try_get("order_row").map_err(store_error)?,
                raised_at,
            )?;
            crate::versions::webhook_order(newest, super::keys::api_version(row, "api_version")?)
        }
        EventType::OrderDeleted => {
            super::events::deleted_json(&column::<String>(row, "message_order_id")?)?
        }
        _ => {
            let data: Option<serde_json::Value> = row.try_get("data").map_err(store_error)?;
            serde_json::to_vec(&data.unwrap_or_else(|| serde_json::json!({})))
                .map_err(StoreError::other)?
                .into()
        }
    };
    let event_id: Option<i64> = row.try_get("event_id").map_err(store_error)?;
    let organization_id: String = column(row, "organization_id")?;
    let event_id = event_id
        .and_then(|id| u64::try_from(id).ok())
        .map(|id| EventId::new(&organization_id, id).to_string());
    Ok(payload(event_id.as_deref(), kind, raised_at, &data))
}

#[async_trait]
impl WebhookManager for PgStore {
    async fn add_endpoint(
        &self,
        organization_id: &str,
        new: NewEndpoint,
    ) -> Result<CreatedEndpoint, StoreError> {
        let events = new.check()?;
        let providers = new.checked_providers()?;
        let secret = WebhookSecret::generate().map_err(StoreError::other)?;
        let names: Vec<&str> = events.iter().map(|kind| kind.as_str()).collect();
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        // One add at a time per organization, so two cannot both pass the cap.
        sqlx::query(super::policy::ORGANIZATION_LOCK)
            .bind(organization_id)
            .bind("webhooks")
            .execute(&mut *transaction)
            .await
            .map_err(store_error)?;
        let policy =
            super::policy::read_policy(&mut transaction, &self.statements.policy, organization_id)
                .await?;
        let endpoints: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM partner_webhook_endpoints WHERE organization_id = $1",
        )
        .bind(organization_id)
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        policy.check_webhook_endpoints(endpoints.unsigned_abs())?;
        let row = sqlx::query(&format!(
            "INSERT INTO partner_webhook_endpoints \
                 (organization_id, url, events, description, secret, api_version, providers) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {ENDPOINT}"
        ))
        .bind(organization_id)
        .bind(&new.url)
        .bind(&names)
        .bind(&new.description)
        .bind(secret.expose())
        .bind(new.api_version.date())
        .bind(&providers)
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        let record = endpoint_from_row(&row)?;
        let entry = AuditRecord::new(organization_id, AuditAction::WebhookAdded, Some(&record.id))
            .with_detail(url_origin(&record.url));
        audited(&mut transaction, entry).await?;
        transaction.commit().await.map_err(store_error)?;
        Ok(CreatedEndpoint { record, secret })
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
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
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
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?;
        let record = endpoint_from_row(&row.ok_or_else(|| no_endpoint(id))?)?;
        let entry = AuditRecord::new(organization_id, AuditAction::WebhookSecretRotated, Some(id));
        audited(&mut transaction, entry).await?;
        transaction.commit().await.map_err(store_error)?;
        Ok(CreatedEndpoint { record, secret })
    }

    async fn set_enabled(
        &self,
        organization_id: &str,
        id: &str,
        enabled: bool,
    ) -> Result<Endpoint, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        // The state before, locked: the entry is for a change, not a repeat.
        let was: Option<bool> = sqlx::query_scalar(
            "SELECT enabled FROM partner_webhook_endpoints \
             WHERE organization_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(organization_id)
        .bind(endpoint_id(id)?)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?;
        let was = was.ok_or_else(|| no_endpoint(id))?;
        let row = sqlx::query(&format!(
            "UPDATE partner_webhook_endpoints SET enabled = $3, \
                 failing_since = CASE WHEN $3 AND NOT enabled THEN NULL ELSE failing_since END \
             WHERE organization_id = $1 AND id = $2 RETURNING {ENDPOINT}"
        ))
        .bind(organization_id)
        .bind(endpoint_id(id)?)
        .bind(enabled)
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        if was != enabled {
            let action = if enabled {
                AuditAction::WebhookEnabled
            } else {
                AuditAction::WebhookDisabled
            };
            audited(
                &mut transaction,
                AuditRecord::new(organization_id, action, Some(id)),
            )
            .await?;
        }
        transaction.commit().await.map_err(store_error)?;
        endpoint_from_row(&row)
    }

    async fn remove_endpoint(&self, organization_id: &str, id: &str) -> Result<(), StoreError> {
        // Its deliveries and attempts go by cascade; messages no other endpoint has, here.
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
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
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        if column::<i64>(&row, "removed")? == 0 {
            return Err(no_endpoint(id));
        }
        let entry = AuditRecord::new(organization_id, AuditAction::WebhookRemoved, Some(id));
        audited(&mut transaction, entry).await?;
        transaction.commit().await.map_err(store_error)?;
        Ok(())
    }

    fn supports(&self, ability: WebhookAbility) -> bool {
        match ability {
            WebhookAbility::TestEvents
            | WebhookAbility::DeliveryHistory
            | WebhookAbility::ApiVersions => true,
        }
    }

    async fn pin_api_version(
        &self,
        organization_id: &str,
        id: &str,
        version: ApiVersion,
    ) -> Result<Endpoint, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let before = sqlx::query(
            "SELECT api_version FROM partner_webhook_endpoints \
             WHERE organization_id = $1 AND id = $2 FOR UPDATE",
        )
        .bind(organization_id)
        .bind(endpoint_id(id)?)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?
        .ok_or_else(|| no_endpoint(id))?;
        let before = super::keys::api_version(&before, "api_version")?.unwrap_or(FIRST);
        let row = sqlx::query(&format!(
            "UPDATE partner_webhook_endpoints SET api_version = $3 \
             WHERE organization_id = $1 AND id = $2 RETURNING {ENDPOINT}"
        ))
        .bind(organization_id)
        .bind(endpoint_id(id)?)
        .bind(version.date())
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        // A pin that changes nothing writes no entry.
        if before != version {
            let entry = AuditRecord::new(
                organization_id,
                AuditAction::WebhookApiVersionPinned,
                Some(id),
            )
            .with_detail(crate::store::key_manager::version_change(before, version));
            audited(&mut transaction, entry).await?;
        }
        transaction.commit().await.map_err(store_error)?;
        endpoint_from_row(&row)
    }

    async fn send_test(&self, organization_id: &str, id: &str) -> Result<String, StoreError> {
        let endpoint = self.endpoint(organization_id, id).await?;
        if !endpoint.enabled {
            return Err(StoreError::conflict(
                "the endpoint is disabled; enable it first",
            ));
        }
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
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
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        let message_id: String = column(&row, "webhook_id")?;
        let entry = AuditRecord::new(organization_id, AuditAction::WebhookTestSent, Some(id))
            .with_detail(message_id.clone());
        audited(&mut transaction, entry).await?;
        transaction.commit().await.map_err(store_error)?;
        Ok(message_id)
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
                let attempted_at = column::<PgTimestamp>(row, "attempted_at")?.0;
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
                    attempted_at,
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
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let done = sqlx::query(
            "WITH found AS (SELECT id, state FROM partner_webhook_deliveries \
                            WHERE endpoint_id = $1 AND webhook_id = $2), \
                  requeued AS ( \
                 UPDATE partner_webhook_deliveries d SET state = 'pending', due_at = now(), \
                     round_start = d.attempts \
                 FROM found WHERE d.id = found.id AND found.state <> 'pending') \
             SELECT state <> 'pending' AS requeued FROM found",
        )
        .bind(endpoint_id(id)?)
        .bind(message_id)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?;
        let Some(found) = done else {
            return Err(StoreError::not_found("no such message to this endpoint"));
        };
        // A message still pending is queued already: nothing changed, no entry.
        if column::<bool>(&found, "requeued")? {
            let entry = AuditRecord::new(
                organization_id,
                AuditAction::WebhookMessageRetried,
                Some(id),
            )
            .with_detail(message_id);
            audited(&mut transaction, entry).await?;
        }
        transaction.commit().await.map_err(store_error)?;
        Ok(())
    }

    async fn recover(
        &self,
        organization_id: &str,
        id: &str,
        since: Timestamp,
    ) -> Result<u64, StoreError> {
        self.endpoint(organization_id, id).await?;
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let done = sqlx::query(
            "UPDATE partner_webhook_deliveries d SET state = 'pending', due_at = now(), \
                 round_start = d.attempts \
             WHERE d.id IN ( \
                 SELECT f.id FROM partner_webhook_deliveries f \
                 JOIN partner_webhook_messages m ON m.id = f.message_id \
                 WHERE f.endpoint_id = $1 AND f.state = 'failed' AND m.raised_at >= $2 \
                 ORDER BY m.raised_at, f.id LIMIT $3 FOR UPDATE OF f)",
        )
        .bind(endpoint_id(id)?)
        .bind(since.as_datetime())
        .bind(i64::try_from(MAX_RECOVERED).unwrap_or(i64::MAX))
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
        let recovered = done.rows_affected();
        if recovered > 0 {
            let entry = AuditRecord::new(
                organization_id,
                AuditAction::WebhookMessagesRecovered,
                Some(id),
            )
            .with_detail(recovered.to_string());
            audited(&mut transaction, entry).await?;
        }
        transaction.commit().await.map_err(store_error)?;
        Ok(recovered)
    }
}
