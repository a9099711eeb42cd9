//! Organizations' key policies in PostgreSQL: read (the default one without a row), and read
//! under the organization's issue lock.

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::Row;

use super::store_error;
use crate::store::KeyPolicy;
use crate::store::StoreError;

/// Serializes, until the transaction ends, the issues and rolls (`$2` `keys`) or the
/// endpoint additions (`$2` `webhooks`) of the organization `$1`, so two of them at the cap
/// make one, not two: the organization's row of `partner_api_organization_locks` for that
/// purpose, locked by an upsert. A row lock, not an advisory one (which any login could take
/// and hold), and not a lock of the organization's row (which would need the right to update
/// organizations): only the roles granted UPDATE on that table can take it.
pub(super) const ORGANIZATION_LOCK: &str =
    "INSERT INTO partner_api_organization_locks (organization_id, purpose) VALUES ($1, $2) \
     ON CONFLICT (organization_id, purpose) DO UPDATE SET purpose = EXCLUDED.purpose";

/// The policy of `organization_id`, with the organization's issue lock held until the
/// transaction ends (`statement` as for [`read_policy`]).
pub(super) async fn locked_policy(
    transaction: &mut sqlx::PgConnection,
    statement: &str,
    organization_id: &str,
) -> Result<KeyPolicy, StoreError> {
    sqlx::query(ORGANIZATION_LOCK)
        .bind(organization_id)
        .bind("keys")
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
    read_policy(transaction, statement, organization_id).await
}

/// The policy of `organization_id` (`statement`: the store's
/// [`policy`](super::statements::Statements::policy)), or `NotFound` for an unknown
/// organization.
pub(super) async fn read_policy(
    connection: &mut sqlx::PgConnection,
    statement: &str,
    organization_id: &str,
) -> Result<KeyPolicy, StoreError> {
    let row = sqlx::query(statement)
        .bind(organization_id)
        .fetch_optional(&mut *connection)
        .await
        .map_err(store_error)?
        .ok_or_else(|| {
            StoreError::not_found(format!("unknown organization {organization_id:?}"))
        })?;
    policy_from_row(&row)
}

fn policy_from_row(row: &PgRow) -> Result<KeyPolicy, StoreError> {
    let max_lifetime_ms: Option<i64> = row.try_get("max_lifetime_ms").map_err(store_error)?;
    let max_active_keys: Option<i32> = row.try_get("max_active_keys").map_err(store_error)?;
    let mut policy = KeyPolicy::default()
        .with_max_lifetime(max_lifetime_ms.map(|ms| Duration::from_millis(ms.unsigned_abs())));
    if let Some(max) = max_active_keys {
        policy = policy.with_max_active_keys(max.unsigned_abs());
    }
    let max_webhook_endpoints: Option<i32> =
        row.try_get("max_webhook_endpoints").map_err(store_error)?;
    if let Some(max) = max_webhook_endpoints {
        policy = policy.with_max_webhook_endpoints(max.unsigned_abs());
    }
    Ok(policy.with_default_api_version(super::keys::api_version(row, "default_api_version")?))
}
