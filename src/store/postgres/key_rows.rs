//! A key's row in `partner_api_keys`: the columns of a [`KeyRecord`], the record read from a row,
//! and the values written to its columns (ids, lifetimes, address ranges).

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::Row;

use super::timestamp::PgTimestamp;
use super::{allowed_ips, column, store_error};
use crate::key::AllowedIps;
use crate::model::Timestamp;
use crate::store::StoreError;
use crate::store::{KeyRecord, Leak, RevocationReason};

/// The columns of a [`KeyRecord`], in `record_from_row`'s names.
pub(super) const RECORD: &str = "id, organization_id, label, hint, environment, created_at, \
                                 expires_at, last_used_at, revoked_at, lifetime_ms, \
                                 allowed_ips::text[] AS allowed_ips, revoked_reason, leak_url, \
                                 leak_source, leak_reported_at, api_version, \
                                 api_version_rollback_to, api_version_rollback_until, permissions, providers";

/// A lifetime in milliseconds, capped at a century as the overlap is: an interval that
/// PostgreSQL can add to now.
pub(super) fn lifetime_millis(lifetime: Duration) -> i64 {
    i64::try_from(lifetime.as_millis())
        .unwrap_or(i64::MAX)
        .clamp(1, 3_153_600_000_000)
}

/// A key id of this store: its row's number. Anything else names no key.
pub(super) fn parse_id(key_id: &str) -> Result<i64, StoreError> {
    key_id.parse().map_err(|_| unknown_key(key_id))
}

pub(super) fn unknown_key(key_id: &str) -> StoreError {
    StoreError::not_found(format!("no key {key_id:?} in this organization"))
}

fn timestamp(row: &PgRow, name: &str) -> Result<Option<Timestamp>, StoreError> {
    let at: Option<PgTimestamp> = row.try_get(name).map_err(store_error)?;
    Ok(at.map(|at| at.0))
}

pub(super) fn record_from_row(row: &PgRow) -> Result<KeyRecord, StoreError> {
    let id: i64 = column(row, "id")?;
    let created_at = column::<PgTimestamp>(row, "created_at")?.0;
    let mut record = KeyRecord::new(
        id.to_string(),
        column::<String>(row, "organization_id")?,
        created_at,
    );
    record.label = row.try_get("label").map_err(store_error)?;
    record.hint = row.try_get("hint").map_err(store_error)?;
    let environment: Option<String> = row.try_get("environment").map_err(store_error)?;
    record.environment = environment.and_then(|name| name.parse().ok());
    record.expires_at = timestamp(row, "expires_at")?;
    record.last_used_at = timestamp(row, "last_used_at")?;
    record.revoked_at = timestamp(row, "revoked_at")?;
    let lifetime_ms: Option<i64> = row.try_get("lifetime_ms").map_err(store_error)?;
    record.lifetime = lifetime_ms.map(|ms| Duration::from_millis(ms.unsigned_abs()));
    record.allowed_ips = allowed_ips(row)?;
    // A key revoked by plain SQL has no reason recorded: it was revoked by hand.
    let reason: Option<String> = row.try_get("revoked_reason").map_err(store_error)?;
    record.revoked_reason = record.revoked_at.map(|_| match reason.as_deref() {
        Some("leaked") => RevocationReason::Leaked,
        Some("rolled") => RevocationReason::Rolled,
        _ => RevocationReason::Manual,
    });
    record.leak = match timestamp(row, "leak_reported_at")? {
        Some(reported_at) => Some(Leak {
            url: row
                .try_get::<Option<String>, _>("leak_url")
                .map_err(store_error)?
                .unwrap_or_default(),
            source: row
                .try_get::<Option<String>, _>("leak_source")
                .map_err(store_error)?
                .unwrap_or_default(),
            reported_at,
        }),
        None => None,
    };
    record.api_version = super::keys::api_version(row, "api_version")?;
    record.permissions = super::keys::permissions(row)?;
    record.providers = row.try_get("providers").map_err(store_error)?;
    let rollback_to = super::keys::api_version(row, "api_version_rollback_to")?;
    record.api_version_rollback = match (rollback_to, timestamp(row, "api_version_rollback_until")?)
    {
        (Some(to), Some(until)) => Some(crate::store::VersionRollback { to, until }),
        _ => None,
    };
    Ok(record)
}

/// Address ranges as PostgreSQL's `cidr` input reads them.
pub(super) fn range_texts(allowed_ips: &AllowedIps) -> Vec<String> {
    allowed_ips
        .ranges()
        .iter()
        .map(ToString::to_string)
        .collect()
}
