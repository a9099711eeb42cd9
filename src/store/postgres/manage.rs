//! [`KeyManager`] over PostgreSQL: every statement scoped to the organization, expiry and
//! revocation by the database's clock, last uses in one statement per batch.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::{column, store_error, PgStore};
use crate::key::{ApiKey, KeyEnvironment};
use crate::management::{IssuedKey, KeyManager, KeyRecord, KeyUse, NewKey};
use crate::model::Timestamp;
use crate::store::StoreError;

/// The columns of a [`KeyRecord`], in `record_from_row`'s names.
const RECORD: &str = "id, organization_id, label, hint, environment, created_at, expires_at, \
                      last_used_at, revoked_at";

#[async_trait]
impl KeyManager for PgStore {
    async fn issue(&self, organization_id: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
        // The database's clock decides expiry; this only refuses what is plainly past.
        new.check(Timestamp::now())?;
        let key = ApiKey::generate(new.environment()).map_err(StoreError::other)?;
        let row = sqlx::query(&format!(
            "INSERT INTO partner_api_keys \
               (organization_id, key_sha256, label, hint, environment, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(&key.digest().as_bytes()[..])
        .bind(new.label())
        .bind(key.hint())
        .bind(new.environment().name())
        .bind(new.expires_at().map(|at| at.as_datetime()))
        .fetch_one(&self.pool)
        .await
        .map_err(|err| unknown_organization(store_error(err), organization_id))?;
        Ok(IssuedKey::new(key, record_from_row(&row)?))
    }

    async fn list(&self, organization_id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        let known: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM partner_organizations WHERE id = $1)")
                .bind(organization_id)
                .fetch_one(&mut *transaction)
                .await
                .map_err(store_error)?;
        if !known {
            return Err(StoreError::not_found(format!(
                "unknown organization {organization_id:?}"
            )));
        }
        let rows = sqlx::query(&format!(
            "SELECT {RECORD} FROM partner_api_keys WHERE organization_id = $1 \
             ORDER BY created_at DESC, id DESC"
        ))
        .bind(organization_id)
        .fetch_all(&mut *transaction)
        .await
        .map_err(store_error)?;
        rows.iter().map(record_from_row).collect()
    }

    async fn get(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        let sql =
            format!("SELECT {RECORD} FROM partner_api_keys WHERE organization_id = $1 AND id = $2");
        self.one_record(&sql, organization_id, key_id).await
    }

    async fn revoke(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        let sql = format!(
            "UPDATE partner_api_keys SET revoked_at = COALESCE(revoked_at, now()) \
             WHERE organization_id = $1 AND id = $2 RETURNING {RECORD}"
        );
        self.one_record(&sql, organization_id, key_id).await
    }

    async fn roll(
        &self,
        organization_id: &str,
        key_id: &str,
        overlap: Duration,
    ) -> Result<IssuedKey, StoreError> {
        let id = parse_id(key_id)?;
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        // Locks the old key, so two rolls of one key make one new key each, in turn.
        let old = sqlx::query(&format!(
            "SELECT {RECORD} FROM partner_api_keys \
             WHERE organization_id = $1 AND id = $2 FOR UPDATE"
        ))
        .bind(organization_id)
        .bind(id)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?
        .ok_or_else(|| unknown_key(key_id))?;
        let old = record_from_row(&old)?;
        if old.revoked_at.is_some() {
            return Err(StoreError::conflict("a revoked key cannot be rolled"));
        }
        let overlap_ms = i64::try_from(overlap.as_millis()).unwrap_or(i64::MAX);
        sqlx::query(
            "UPDATE partner_api_keys SET expires_at = LEAST(expires_at, \
               now() + LEAST($3, 3153600000000) * interval '1 millisecond') \
             WHERE organization_id = $1 AND id = $2",
        )
        .bind(organization_id)
        .bind(id)
        .bind(overlap_ms)
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
        let environment = old.environment.unwrap_or(KeyEnvironment::Live);
        let key = ApiKey::generate(environment).map_err(StoreError::other)?;
        let row = sqlx::query(&format!(
            "INSERT INTO partner_api_keys \
               (organization_id, key_sha256, label, hint, environment) \
             VALUES ($1, $2, $3, $4, $5) RETURNING {RECORD}"
        ))
        .bind(organization_id)
        .bind(&key.digest().as_bytes()[..])
        .bind(&old.label)
        .bind(key.hint())
        .bind(environment.name())
        .fetch_one(&mut *transaction)
        .await
        .map_err(store_error)?;
        let record = record_from_row(&row)?;
        transaction.commit().await.map_err(store_error)?;
        Ok(IssuedKey::new(key, record))
    }

    async fn record_last_used(&self, uses: &[KeyUse]) -> Result<(), StoreError> {
        let (ids, times): (Vec<i64>, Vec<DateTime<Utc>>) = uses
            .iter()
            .filter_map(|KeyUse { key_id, at }| {
                Some((key_id.parse::<i64>().ok()?, at.as_datetime()))
            })
            .unzip();
        if ids.is_empty() {
            return Ok(());
        }
        // One statement per batch; a key used twice in it counts its latest use.
        sqlx::query(
            "UPDATE partner_api_keys k SET last_used_at = GREATEST(k.last_used_at, u.at) \
             FROM (SELECT id, max(at) AS at FROM unnest($1::bigint[], $2::timestamptz[]) \
                   AS t(id, at) GROUP BY id) u \
             WHERE k.id = u.id",
        )
        .bind(&ids)
        .bind(&times)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }
}

impl PgStore {
    /// The record `sql` (with `$1` the organization, `$2` the key's row number) returns for
    /// the key `key_id`, or `NotFound`.
    async fn one_record(
        &self,
        sql: &str,
        organization_id: &str,
        key_id: &str,
    ) -> Result<KeyRecord, StoreError> {
        let row = sqlx::query(sql)
            .bind(organization_id)
            .bind(parse_id(key_id)?)
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
        row.as_ref()
            .map(record_from_row)
            .unwrap_or_else(|| Err(unknown_key(key_id)))
    }
}

/// A key id of this store: its row's number. Anything else names no key.
fn parse_id(key_id: &str) -> Result<i64, StoreError> {
    key_id.parse().map_err(|_| unknown_key(key_id))
}

fn unknown_key(key_id: &str) -> StoreError {
    StoreError::not_found(format!("no key {key_id:?} in this organization"))
}

/// A foreign-key failure on insert names the organization.
fn unknown_organization(err: StoreError, organization_id: &str) -> StoreError {
    if err.kind() == crate::StoreErrorKind::NotFound {
        StoreError::not_found(format!("unknown organization {organization_id:?}"))
    } else {
        err
    }
}

fn timestamp(row: &PgRow, name: &str) -> Result<Option<Timestamp>, StoreError> {
    let at: Option<DateTime<Utc>> = row.try_get(name).map_err(store_error)?;
    Ok(at.map(Timestamp::from_datetime))
}

fn record_from_row(row: &PgRow) -> Result<KeyRecord, StoreError> {
    let id: i64 = column(row, "id")?;
    let created_at: DateTime<Utc> = column(row, "created_at")?;
    let mut record = KeyRecord::new(
        id.to_string(),
        column::<String>(row, "organization_id")?,
        Timestamp::from_datetime(created_at),
    );
    record.label = row.try_get("label").map_err(store_error)?;
    record.hint = row.try_get("hint").map_err(store_error)?;
    let environment: Option<String> = row.try_get("environment").map_err(store_error)?;
    record.environment = environment.and_then(|name| name.parse().ok());
    record.expires_at = timestamp(row, "expires_at")?;
    record.last_used_at = timestamp(row, "last_used_at")?;
    record.revoked_at = timestamp(row, "revoked_at")?;
    Ok(record)
}
