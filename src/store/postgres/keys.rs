//! The key side of [`PgStore`]: lookups (one query, behind the circuit breaker and a bound
//! on lookups at once) and the digests of usable keys.

use async_trait::async_trait;
use sqlx::postgres::PgConnection;
use sqlx::{Connection, Row};

use super::timestamp::PgTimestamp;
use super::{breaker, column, store_error, PgStore};
use crate::key::AllowedIps;
use crate::key::KeyDigest;
use crate::model::Organization;
use crate::store::{KeyLookup, KeyStore, Principal, StoreError};

#[async_trait]
impl KeyStore for PgStore {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        self.admit()?;
        // Never closed: the semaphore lives as long as the store.
        let _turn = self
            .lookups
            .acquire()
            .await
            .map_err(|_| StoreError::other("key look-ups closed"))?;
        let found = self.look_up(digest).await;
        self.breaker.record(&found, self.pool.size() > 0);
        found
    }
}

#[async_trait]
impl crate::store::KeyDigests for PgStore {
    async fn key_digests(&self, ids: Option<&[String]>) -> Result<Vec<KeyDigest>, StoreError> {
        const USABLE: &str = "revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())";
        let rows: Vec<Vec<u8>> = match ids {
            None => sqlx::query_scalar(&format!(
                "SELECT key_sha256 FROM partner_api_keys WHERE {USABLE}"
            ))
            .fetch_all(&self.pool)
            .await
            .map_err(store_error)?,
            Some(ids) => {
                // Ids are numbers here; anything else names no key.
                let ids: Vec<i64> = ids.iter().filter_map(|id| id.parse().ok()).collect();
                if ids.is_empty() {
                    return Ok(Vec::new());
                }
                sqlx::query_scalar(&format!(
                    "SELECT key_sha256 FROM partner_api_keys WHERE id = ANY($1) AND {USABLE}"
                ))
                .bind(ids)
                .fetch_all(&self.pool)
                .await
                .map_err(store_error)?
            }
        };
        Ok(rows
            .into_iter()
            .filter_map(|bytes| <[u8; 32]>::try_from(bytes).ok())
            .map(KeyDigest::from_bytes)
            .collect())
    }
}

impl PgStore {
    /// `Ok` to ask the database; while it is unreachable, the error to answer at once, and a
    /// probe in the background now and then.
    pub(super) fn admit(&self) -> Result<(), StoreError> {
        match self.breaker.admit() {
            Ok(()) => Ok(()),
            Err(breaker::Refusal::Fail(err)) => Err(err),
            Err(breaker::Refusal::FailAndProbe(err)) => {
                let options = self.pool.connect_options();
                let breaker = self.breaker.clone();
                tokio::spawn(async move {
                    // One connection attempt of its own, not the pool's: the pool retries a
                    // refused connection with a backoff that doubles up to a second, so a
                    // probe through it could sleep through the database's return, and the
                    // breaker stay open for a probe timeout and a cooldown more. With one
                    // attempt per probe, a request finds the database within a cooldown (and
                    // one connection) of its return.
                    let probe = async {
                        let mut connection = PgConnection::connect_with(&options).await?;
                        sqlx::query("SELECT 1").execute(&mut connection).await?;
                        connection.close().await
                    };
                    let back = tokio::time::timeout(breaker::PROBE_TIMEOUT, probe)
                        .await
                        .is_ok_and(|done| done.is_ok());
                    breaker.probed(back);
                });
                Err(err)
            }
        }
    }

    async fn look_up(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        let row = sqlx::query(&self.statements.lookup_key)
            .bind(&digest.as_bytes()[..])
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
        let Some(row) = row else {
            return Ok(KeyLookup::Unknown);
        };
        let key_id: i64 = column(&row, "id")?;
        if column::<bool>(&row, "revoked")? {
            return Ok(KeyLookup::Revoked {
                key_id: Some(key_id.to_string().into()),
            });
        }
        if column::<bool>(&row, "expired")? {
            return Ok(KeyLookup::Expired {
                key_id: Some(key_id.to_string().into()),
            });
        }
        let expires_at: Option<PgTimestamp> = row.try_get("expires_at").map_err(store_error)?;
        let organization = Organization {
            id: column(&row, "organization_id")?,
            name: column(&row, "name")?,
        };
        Ok(KeyLookup::Valid(
            Principal::new(key_id.to_string(), organization)
                .with_expires_at(expires_at.map(|at| at.0))
                .with_allowed_ips(allowed_ips(&row)?)
                .with_api_version(api_version(&row, "api_version")?)
                .with_permissions(permissions(&row)?)
                .with_providers(
                    row.try_get::<Option<Vec<String>>, _>("providers")
                        .map_err(store_error)?
                        .map(Into::into),
                ),
        ))
    }
}

/// The API version in the date column `name`, if there is one.
/// The `permissions` column of a key's row: NULL for every permission; a name the crate does
/// not know (written by SQL past the column's check) is invalid data, never a permission
/// granted.
pub(super) fn permissions(
    row: &sqlx::postgres::PgRow,
) -> Result<crate::key::Permissions, StoreError> {
    let names: Option<Vec<String>> = row.try_get("permissions").map_err(store_error)?;
    match names {
        None => Ok(crate::key::Permissions::ALL),
        Some(names) => crate::key::Permissions::parse(names.iter().map(String::as_str))
            .map_err(|name| StoreError::invalid_data(format!("unknown key permission {name:?}"))),
    }
}

pub(super) fn api_version(
    row: &sqlx::postgres::PgRow,
    name: &str,
) -> Result<Option<crate::versions::ApiVersion>, StoreError> {
    let date: Option<super::timestamp::PgDate> = row.try_get(name).map_err(store_error)?;
    Ok(date.map(|date| crate::versions::ApiVersion::from_date(date.0)))
}

/// The `allowed_ips` column, read as `allowed_ips::text[]` (PostgreSQL's `cidr` output).
pub(super) fn allowed_ips(row: &sqlx::postgres::PgRow) -> Result<AllowedIps, StoreError> {
    let ranges: Vec<String> = column(row, "allowed_ips")?;
    if ranges.is_empty() {
        return Ok(AllowedIps::any());
    }
    AllowedIps::parse(&ranges).map_err(StoreError::invalid_data)
}
