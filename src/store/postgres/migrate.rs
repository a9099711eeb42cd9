//! The crate's own migration runner: sqlx's embedded migrations, recorded in a table of the
//! crate's own so that a host's sqlx migrations in the same database never see them.

use std::collections::HashMap;

use sqlx::migrate::Migrator;
use sqlx::postgres::PgPool;
use sqlx::{Postgres, Transaction};

use super::store_error;
use crate::store::StoreError;

/// The embedded migrations that create the reference schema (`src/store/migrations`).
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("src/store/migrations");

/// The table in which the crate records the migrations it applied (sqlx records a host's own
/// in `_sqlx_migrations`; each migrator then fails on versions it does not know).
pub(crate) const MIGRATIONS_TABLE: &str = "partner_api_migrations";

/// The advisory lock that makes replicas migrate one after the other: "partner" and 1.
const LOCK: i64 = 0x7061_7274_6e65_7201;

/// Applies the migrations of [`MIGRATOR`] that are not applied yet, in one transaction.
pub(super) async fn run(pool: &PgPool) -> Result<(), StoreError> {
    run_before(pool, i64::MAX).await
}

/// Applies the migrations of [`MIGRATOR`] older than `version` that are not applied yet, in
/// one transaction (a test's database as a version before it left it).
pub(super) async fn run_before(pool: &PgPool, version: i64) -> Result<(), StoreError> {
    let mut transaction = pool.begin().await.map_err(store_error)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(LOCK)
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
    // `IF NOT EXISTS` says "already exists, skipping" as a notice, which sqlx logs at INFO:
    // on every start and every command. Nothing the operator needs to read.
    sqlx::raw_sql("SET LOCAL client_min_messages = warning")
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS partner_api_migrations (\
             version BIGINT PRIMARY KEY, \
             description TEXT NOT NULL, \
             checksum BYTEA NOT NULL, \
             installed_on TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .execute(&mut *transaction)
    .await
    .map_err(store_error)?;
    adopt_from_sqlx_table(&mut transaction).await?;
    let applied: HashMap<i64, Vec<u8>> =
        sqlx::query_as("SELECT version, checksum FROM partner_api_migrations")
            .fetch_all(&mut *transaction)
            .await
            .map_err(store_error)?
            .into_iter()
            .collect();
    for migration in MIGRATOR
        .iter()
        .filter(|migration| migration.migration_type.is_up_migration())
        .filter(|migration| migration.version < version)
    {
        match applied.get(&migration.version) {
            Some(checksum) if checksum[..] == migration.checksum[..] => {}
            Some(_) => {
                return Err(StoreError::invalid_data(format!(
                    "migration {} was changed after it was applied",
                    migration.version
                )))
            }
            None => {
                sqlx::raw_sql(&migration.sql)
                    .execute(&mut *transaction)
                    .await
                    .map_err(store_error)?;
                sqlx::query(
                    "INSERT INTO partner_api_migrations (version, description, checksum) \
                     VALUES ($1, $2, $3)",
                )
                .bind(migration.version)
                .bind(&*migration.description)
                .bind(&*migration.checksum)
                .execute(&mut *transaction)
                .await
                .map_err(store_error)?;
            }
        }
    }
    transaction.commit().await.map_err(store_error)
}

/// Takes over the crate's migrations that an earlier version recorded in sqlx's own table,
/// and removes them from it, so the host's sqlx migrator no longer meets versions it does not
/// know.
async fn adopt_from_sqlx_table(
    transaction: &mut Transaction<'_, Postgres>,
) -> Result<(), StoreError> {
    let has_sqlx_table: bool =
        sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
            .fetch_one(&mut **transaction)
            .await
            .map_err(store_error)?;
    if !has_sqlx_table {
        return Ok(());
    }
    for migration in MIGRATOR.iter() {
        let adopted = sqlx::query(
            "WITH mine AS (\
                 DELETE FROM _sqlx_migrations WHERE version = $1 AND checksum = $2 \
                 RETURNING version, description, checksum) \
             INSERT INTO partner_api_migrations (version, description, checksum) \
             SELECT version, description, checksum FROM mine ON CONFLICT DO NOTHING",
        )
        .bind(migration.version)
        .bind(&*migration.checksum)
        .execute(&mut **transaction)
        .await
        .map_err(store_error)?;
        if adopted.rows_affected() > 0 {
            tracing::info!(
                version = migration.version,
                "took over a partner-api migration from _sqlx_migrations"
            );
        }
    }
    Ok(())
}
