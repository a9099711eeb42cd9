//! [`UsageStore`] over PostgreSQL: one upsert that adds per batch, reads scoped to the
//! organization through the keys table, retention by the database's clock.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use super::{column, store_error, PgStore};
use crate::model::Timestamp;
use crate::store::usage::hour_of_millis;
use crate::store::StoreError;
use crate::store::{
    KeyUsageTotal, UsageBucket, UsageCount, UsageGranularity, UsagePeriod, UsageStore,
};

fn unknown_key(key_id: &str) -> StoreError {
    StoreError::not_found(format!("no key {key_id:?} in this organization"))
}

fn count(requests: i64) -> u64 {
    u64::try_from(requests).unwrap_or(0)
}

#[async_trait]
impl UsageStore for PgStore {
    async fn record_usage(&self, counts: &[UsageCount]) -> Result<(), StoreError> {
        let mut ids = Vec::with_capacity(counts.len());
        let mut hours = Vec::with_capacity(counts.len());
        let mut routes = Vec::with_capacity(counts.len());
        let mut outcomes = Vec::with_capacity(counts.len());
        let mut requests = Vec::with_capacity(counts.len());
        for entry in counts.iter().filter(|entry| entry.count > 0) {
            let Ok(id) = entry.key_id.parse::<i64>() else {
                continue; // no key of this store
            };
            let hour = hour_of_millis(entry.hour.as_datetime().timestamp_millis());
            let Some(hour) = DateTime::<Utc>::from_timestamp_millis(hour) else {
                continue;
            };
            ids.push(id);
            hours.push(hour);
            routes.push(entry.route.as_str());
            outcomes.push(entry.outcome.as_str());
            requests.push(i64::try_from(entry.count).unwrap_or(i64::MAX));
        }
        if ids.is_empty() {
            return Ok(());
        }
        // One statement per batch. Grouped first: an upsert may not touch a row twice.
        sqlx::query(
            "INSERT INTO partner_api_key_usage AS u (key_id, hour, route, outcome, requests) \
             SELECT c.key_id, c.hour, c.route, c.outcome, sum(c.requests) \
             FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::text[], $5::bigint[]) \
                  AS c(key_id, hour, route, outcome, requests) \
             WHERE EXISTS (SELECT 1 FROM partner_api_keys k WHERE k.id = c.key_id) \
             GROUP BY c.key_id, c.hour, c.route, c.outcome \
             ON CONFLICT (key_id, hour, route, outcome) \
             DO UPDATE SET requests = u.requests + EXCLUDED.requests",
        )
        .bind(&ids)
        .bind(&hours)
        .bind(&routes)
        .bind(&outcomes)
        .bind(&requests)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn key_usage(
        &self,
        organization_id: &str,
        key_id: &str,
        period: UsagePeriod,
        granularity: UsageGranularity,
    ) -> Result<Vec<UsageBucket>, StoreError> {
        self.check_organization(organization_id).await?;
        let id = key_id.parse::<i64>().map_err(|_| unknown_key(key_id))?;
        let owned: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM partner_api_keys WHERE id = $1 AND organization_id = $2)",
        )
        .bind(id)
        .bind(organization_id)
        .fetch_one(&self.pool)
        .await
        .map_err(store_error)?;
        if !owned {
            return Err(unknown_key(key_id));
        }
        let rows = sqlx::query(
            "SELECT CASE WHEN $4 THEN to_timestamp(floor(extract(epoch FROM hour) / 86400) * 86400) \
                         ELSE hour END AS start, \
                    route, outcome, sum(requests)::bigint AS requests \
             FROM partner_api_key_usage \
             WHERE key_id = $1 AND hour >= $2 AND hour < $3 \
             GROUP BY 1, 2, 3",
        )
        .bind(id)
        .bind(period.from.as_datetime())
        .bind(period.to.as_datetime())
        .bind(granularity == UsageGranularity::Day)
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        let mut buckets = rows
            .iter()
            .map(|row| {
                Ok(UsageBucket {
                    start: Timestamp::from_datetime(column(row, "start")?),
                    route: column::<String>(row, "route")?.parse()?,
                    outcome: column::<String>(row, "outcome")?.parse()?,
                    count: count(column(row, "requests")?),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        buckets.sort_by_key(|bucket| (bucket.start, bucket.route, bucket.outcome));
        Ok(buckets)
    }

    async fn usage_totals(
        &self,
        organization_id: &str,
        period: UsagePeriod,
    ) -> Result<Vec<KeyUsageTotal>, StoreError> {
        self.check_organization(organization_id).await?;
        let rows = sqlx::query(
            "SELECT u.key_id, u.outcome, sum(u.requests)::bigint AS requests \
             FROM partner_api_key_usage u JOIN partner_api_keys k ON k.id = u.key_id \
             WHERE k.organization_id = $1 AND u.hour >= $2 AND u.hour < $3 \
             GROUP BY u.key_id, u.outcome",
        )
        .bind(organization_id)
        .bind(period.from.as_datetime())
        .bind(period.to.as_datetime())
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        let mut totals = rows
            .iter()
            .map(|row| {
                Ok(KeyUsageTotal {
                    key_id: column::<i64>(row, "key_id")?.to_string(),
                    outcome: column::<String>(row, "outcome")?.parse()?,
                    count: count(column(row, "requests")?),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        totals.sort_by(|a, b| (&a.key_id, a.outcome).cmp(&(&b.key_id, b.outcome)));
        Ok(totals)
    }

    async fn prune_usage(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        self.delete_oldest(
            "partner_api_key_usage",
            "hour",
            "ctid",
            older_than,
            batch.into(),
        )
        .await
    }
}
