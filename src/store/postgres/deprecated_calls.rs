//! [`DeprecatedCallStore`] over PostgreSQL: one upsert that adds per batch, reads scoped to
//! the organization through the keys table, retention by the database's clock.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::timestamp::PgTimestamp;
use super::{column, store_error, PgStore};
use crate::model::Timestamp;
use crate::store::usage::day_of_millis;
use crate::store::{DeprecatedCallCount, DeprecatedCallStore, DeprecatedCallTotal, StoreError};

#[async_trait]
impl DeprecatedCallStore for PgStore {
    async fn record_deprecated_calls(
        &self,
        counts: &[DeprecatedCallCount],
    ) -> Result<(), StoreError> {
        let mut ids = Vec::with_capacity(counts.len());
        let mut days = Vec::with_capacity(counts.len());
        let mut targets = Vec::with_capacity(counts.len());
        let mut calls = Vec::with_capacity(counts.len());
        let mut lasts = Vec::with_capacity(counts.len());
        for entry in counts.iter().filter(|entry| entry.calls > 0) {
            let Ok(id) = entry.key_id.parse::<i64>() else {
                continue; // no key of this store
            };
            let day = day_of_millis(entry.day.as_datetime().timestamp_millis());
            let Some(day) = DateTime::<Utc>::from_timestamp_millis(day) else {
                continue;
            };
            ids.push(id);
            days.push(day);
            targets.push(entry.target.as_str());
            calls.push(i64::try_from(entry.calls).unwrap_or(i64::MAX));
            lasts.push(entry.last_call_at.as_datetime());
        }
        if ids.is_empty() {
            return Ok(());
        }
        // One statement per batch. Grouped first: an upsert may not touch a row twice.
        sqlx::query(
            "INSERT INTO partner_api_deprecated_calls AS d (key_id, day, target, calls, last_call_at) \
             SELECT c.key_id, c.day, c.target, sum(c.calls), max(c.last_call_at) \
             FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::bigint[], \
                         $5::timestamptz[]) AS c(key_id, day, target, calls, last_call_at) \
             WHERE EXISTS (SELECT 1 FROM partner_api_keys k WHERE k.id = c.key_id) \
             GROUP BY c.key_id, c.day, c.target \
             ON CONFLICT (key_id, target, day) \
             DO UPDATE SET calls = d.calls + EXCLUDED.calls, \
                           last_call_at = greatest(d.last_call_at, EXCLUDED.last_call_at)",
        )
        .bind(&ids)
        .bind(&days)
        .bind(&targets)
        .bind(&calls)
        .bind(&lasts)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn deprecated_calls(
        &self,
        organization_id: &str,
        key_id: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<DeprecatedCallTotal>, StoreError> {
        let from = day_of_millis(since.as_datetime().timestamp_millis());
        let from = DateTime::<Utc>::from_timestamp_millis(from).unwrap_or(since.as_datetime());
        // Two statements, each with a plan of its own: one key's rows by the primary key (a
        // partner's poll; its key proves the organization), or the organization's.
        let rows = match key_id {
            Some(text) => {
                let Ok(id) = text.parse::<i64>() else {
                    return Ok(Vec::new()); // no key of this store
                };
                sqlx::query(
                    "SELECT d.key_id, d.target, sum(d.calls)::bigint AS calls, \
                            max(d.last_call_at) AS last_call_at \
                     FROM partner_api_deprecated_calls d \
                     WHERE d.key_id = $2 AND d.day >= $3 \
                       AND EXISTS (SELECT 1 FROM partner_api_keys k \
                                   WHERE k.id = $2 AND k.organization_id = $1) \
                     GROUP BY d.key_id, d.target",
                )
                .bind(organization_id)
                .bind(id)
                .bind(from)
                .fetch_all(&self.pool)
                .await
            }
            None => {
                self.check_organization(organization_id).await?;
                sqlx::query(
                    "SELECT d.key_id, d.target, sum(d.calls)::bigint AS calls, \
                            max(d.last_call_at) AS last_call_at \
                     FROM partner_api_deprecated_calls d \
                     JOIN partner_api_keys k ON k.id = d.key_id \
                     WHERE k.organization_id = $1 AND d.day >= $2 \
                     GROUP BY d.key_id, d.target",
                )
                .bind(organization_id)
                .bind(from)
                .fetch_all(&self.pool)
                .await
            }
        }
        .map_err(store_error)?;
        let mut totals = rows
            .iter()
            .map(|row| {
                Ok(DeprecatedCallTotal {
                    key_id: column::<i64>(row, "key_id")?.to_string(),
                    target: column(row, "target")?,
                    calls: u64::try_from(column::<i64>(row, "calls")?).unwrap_or(0),
                    last_call_at: column::<PgTimestamp>(row, "last_call_at")?.0,
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        // By target, then key id as the API shows it (a string).
        totals.sort_by(|a, b| (&a.target, &a.key_id).cmp(&(&b.target, &b.key_id)));
        Ok(totals)
    }

    async fn prune_deprecated_calls(
        &self,
        older_than: Duration,
        batch: u32,
    ) -> Result<u64, StoreError> {
        self.delete_oldest(
            "partner_api_deprecated_calls",
            "day",
            "ctid",
            older_than,
            batch.into(),
        )
        .await
    }
}
