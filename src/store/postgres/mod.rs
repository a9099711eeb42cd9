//! [`PgStore`]: both store traits over PostgreSQL (feature `postgres`).

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{Postgres, Row};

use super::StoreError;
use crate::key::is_valid_key;
use crate::key::KeyDigest;
use crate::model::{EncodedOrder, Order, Organization, Timestamp};
use crate::store::describe_plaintext;

mod audit;
mod breaker;
mod capture;
mod deprecated_calls;
mod error;
mod events;
mod key_rows;
mod keys;
mod manage;
mod migrate;
mod orders;
#[cfg(feature = "webhooks")]
mod outbox;
mod policy;
mod schema_map;
mod seed;
mod statements;
mod timestamp;
mod usage;
#[cfg(feature = "webhooks")]
mod webhooks;

pub(crate) use capture::{
    parse_lsn, LAG_BYTES as CAPTURE_LAG_BYTES, LAG_SECONDS as CAPTURE_LAG_SECONDS,
};
pub use capture::{CaptureRound, OrderCapture};
pub(crate) use error::store_error;
use keys::allowed_ips;
pub use schema_map::{OrderField, OrdersMap, OrganizationsMap, SchemaIndex, SchemaMap};

/// [`KeyStore`](crate::KeyStore) and [`OrderStore`](crate::OrderStore) over PostgreSQL, in the reference schema of [`PgStore::migrator`].
///
/// The store keeps no state of its own: every lookup reads the database, so any number of
/// replicas serve the same keys, and a revocation (`UPDATE partner_api_keys SET revoked_at =
/// now() ...`) holds for the next request on every replica. A request costs one indexed query
/// for the key and, for `GET /orders`, one for the orders.
///
/// Clones share the pool.
///
/// When the database is unreachable, the request path fails fast: after two failures that
/// say so, lookups and order reads answer `Unavailable` at once (the API's 503 with
/// `Retry-After`) instead of each waiting out the pool's acquire timeout, while a probe in the
/// background (one at a time, every half second at most) finds out when the database is
/// back; then everything works again by itself.
///
/// Key look-ups hold at most half of the pool's connections at once (rounded down, at least
/// one); the rest queue for a turn. Behind a cache, look-ups are of keys the cache does not
/// know, so a flood of made-up keys waits among itself while order reads of known keys still
/// find a connection.
///
/// By default it reads orders from `partner_orders` and organizations from
/// `partner_organizations`; [`with_schema_map`](Self::with_schema_map) reads the host's own
/// tables instead ([`docs::host_data`](crate::docs::host_data)).
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    breaker: std::sync::Arc<breaker::Breaker>,
    lookups: std::sync::Arc<tokio::sync::Semaphore>,
    statements: std::sync::Arc<statements::Statements>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// The statement timeout of a pool made by [`PgStore::connect_lazy`].
    pub const DEFAULT_STATEMENT_TIMEOUT: Duration = Duration::from_secs(5);

    /// The table in which the crate records the migrations it applied (sqlx records a host's
    /// own in `_sqlx_migrations`; each migrator then fails on versions it does not know).
    pub const MIGRATIONS_TABLE: &'static str = migrate::MIGRATIONS_TABLE;

    /// The embedded migrations that create the reference schema (`src/store/migrations`),
    /// which [`migrate`](Self::migrate) applies; for a host that inspects or plans them.
    pub fn migrator() -> &'static sqlx::migrate::Migrator {
        &migrate::MIGRATOR
    }

    /// Creates a store over the host's own pool.
    pub fn new(pool: PgPool) -> Self {
        let half = usize::try_from(pool.options().get_max_connections() / 2).unwrap_or(1);
        Self {
            pool,
            breaker: std::sync::Arc::new(breaker::Breaker::new()),
            lookups: std::sync::Arc::new(tokio::sync::Semaphore::new(half.max(1))),
            statements: std::sync::Arc::new(statements::Statements::own()),
        }
    }

    /// The store reading the host's tables through `map` (what it leaves out stays in the
    /// crate's tables), once each mapped expression is checked to have the type the contract
    /// needs. Reads no row.
    ///
    /// # Errors
    ///
    /// `InvalidData`, with a message naming the field, the expression and the type it has
    /// and needs, for an expression PostgreSQL refuses or of another type, or a table this
    /// role cannot see; or the database's error.
    pub async fn with_schema_map(mut self, map: SchemaMap) -> Result<Self, StoreError> {
        let resolved = schema_map::check(&self.pool, &map).await?;
        self.statements = std::sync::Arc::new(statements::Statements::mapped(map, resolved));
        Ok(self)
    }

    /// The map this store reads through, if any.
    pub fn schema_map(&self) -> Option<&SchemaMap> {
        self.statements.map()
    }

    /// `Unsupported` when the orders are the host's: the crate writes none there.
    fn own_orders(&self) -> Result<(), StoreError> {
        if self.statements.orders_mapped() {
            return Err(StoreError::unsupported(
                "writing orders: they are the host's, read through the schema map",
            ));
        }
        Ok(())
    }

    /// Connects a pool of its own to `url` with production defaults: at most 10
    /// connections, 5 s to acquire one, and [`PgStore::DEFAULT_STATEMENT_TIMEOUT`] per statement.
    /// It connects lazily: an unreachable database shows as errors of the store's calls.
    ///
    /// # Errors
    ///
    /// When `url` is not a PostgreSQL URL.
    pub fn connect_lazy(url: &str) -> Result<Self, StoreError> {
        let timeout = Self::DEFAULT_STATEMENT_TIMEOUT.as_millis().to_string();
        let options = PgConnectOptions::from_str(url)
            .map_err(StoreError::other)?
            .options([("statement_timeout", timeout.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy_with(options);
        Ok(Self::new(pool))
    }

    /// Returns the pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates or updates the reference schema; safe to run from several replicas at once.
    ///
    /// The crate records its migrations in a table of its own ([`PgStore::MIGRATIONS_TABLE`]), not in
    /// sqlx's `_sqlx_migrations`, so it shares a database with a host that runs its own sqlx
    /// migrations: neither sees the other's versions.
    ///
    /// # Errors
    ///
    /// When the database is unreachable, a migration fails, or an applied migration was
    /// changed since.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        migrate::run(&self.pool).await
    }

    /// Adds an organization.
    ///
    /// # Errors
    ///
    /// When it exists, the organizations are mapped (`Unsupported`), or the database fails.
    pub async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        if self.statements.organizations_mapped() {
            return Err(StoreError::unsupported(
                "adding an organization: they are the host's, read through the schema map",
            ));
        }
        sqlx::query("INSERT INTO partner_organizations (id, name) VALUES ($1, $2)")
            .bind(&organization.id)
            .bind(&organization.name)
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    /// Adds the API key `key` (only its digest is stored) and returns its id.
    ///
    /// # Errors
    ///
    /// When the key is no bearer token, exists, its organization is unknown, or the database
    /// fails.
    pub async fn add_key(&self, key: &str, organization_id: &str) -> Result<String, StoreError> {
        self.add_expiring_key(key, organization_id, None).await
    }

    /// [`add_key`](Self::add_key) with an expiry.
    pub(crate) async fn add_expiring_key(
        &self,
        key: &str,
        organization_id: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<String, StoreError> {
        if !is_valid_key(key) {
            return Err(StoreError::invalid_data(
                "the key is not an RFC 6750 bearer token of at most 4096 bytes",
            ));
        }
        let (hint, environment) = describe_plaintext(key);
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO partner_api_keys \
             (organization_id, key_sha256, hint, environment, expires_at) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(organization_id)
        .bind(&KeyDigest::of(key).as_bytes()[..])
        .bind(hint)
        .bind(environment.map(|environment| environment.name()))
        .bind(expires_at.map(|at| at.as_datetime()))
        .fetch_one(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(id.to_string())
    }

    /// Revokes the API key `key`; returns whether a live key was revoked.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn revoke_key(&self, key: &str) -> Result<bool, StoreError> {
        let revoked = sqlx::query(
            "UPDATE partner_api_keys SET revoked_at = now() \
             WHERE key_sha256 = $1 AND revoked_at IS NULL",
        )
        .bind(&KeyDigest::of(key).as_bytes()[..])
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(revoked.rows_affected() > 0)
    }

    /// Removes the order `order_id` of the organization `organization_id`; returns whether it
    /// was there.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn remove_order(
        &self,
        organization_id: &str,
        order_id: &str,
    ) -> Result<bool, StoreError> {
        self.own_orders()?;
        let removed =
            sqlx::query("DELETE FROM partner_orders WHERE organization_id = $1 AND id = $2")
                .bind(organization_id)
                .bind(order_id)
                .execute(&self.pool)
                .await
                .map_err(store_error)?;
        Ok(removed.rows_affected() > 0)
    }

    /// Replaces the order of `organization_id` that has `order`'s id with `order`, and
    /// returns whether there was one (the orders' trigger raises `order.updated` when a
    /// field changed, and the order's `updated_at` becomes the time of the change unless
    /// `order` names one).
    pub async fn update_order(
        &self,
        organization_id: &str,
        order: &Order,
    ) -> Result<bool, StoreError> {
        self.own_orders()?;
        EncodedOrder::new(order.clone())?;
        let update = sqlx::query(
            "UPDATE partner_orders SET providers = $3, advertiser_name = $4, campaign_name = $5, \
                 budget_dkk = $6, start_date = $7, end_date = $8, status = $9, \
                 external_reference = $10, created_at = $11, \
                 updated_at = COALESCE($12, updated_at) \
             WHERE organization_id = $1 AND id = $2",
        );
        let done = bind_order(update, organization_id, order)?
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
        Ok(done.rows_affected() > 0)
    }

    /// Adds orders to an organization, all or none.
    ///
    /// # Errors
    ///
    /// When an order cannot be served ([`EncodedOrder::new`]), an id exists, the organization
    /// is unknown, or the database fails.
    pub async fn add_orders(
        &self,
        organization_id: &str,
        orders: &[Order],
    ) -> Result<(), StoreError> {
        self.own_orders()?;
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        for order in orders {
            insert_order(&mut transaction, organization_id, order, false).await?;
        }
        transaction.commit().await.map_err(store_error)
    }
}

pub(super) async fn insert_order(
    transaction: &mut sqlx::Transaction<'_, Postgres>,
    organization_id: &str,
    order: &Order,
    upsert: bool,
) -> Result<(), StoreError> {
    // The same checks as every store: what cannot be served is not stored. An upsert leaves
    // an unchanged row alone, so it sends the caches no notification.
    EncodedOrder::new(order.clone())?;
    let on_conflict = if upsert {
        " ON CONFLICT (organization_id, id) DO UPDATE SET providers = EXCLUDED.providers, \
          advertiser_name = EXCLUDED.advertiser_name, campaign_name = EXCLUDED.campaign_name, \
          budget_dkk = EXCLUDED.budget_dkk, start_date = EXCLUDED.start_date, \
          end_date = EXCLUDED.end_date, status = EXCLUDED.status, \
          external_reference = EXCLUDED.external_reference, created_at = EXCLUDED.created_at, \
          updated_at = COALESCE(EXCLUDED.updated_at, partner_orders.updated_at) \
          WHERE (partner_orders.providers, partner_orders.advertiser_name, \
                 partner_orders.campaign_name, partner_orders.budget_dkk, \
                 partner_orders.start_date, partner_orders.end_date, partner_orders.status, \
                 partner_orders.external_reference, partner_orders.created_at) \
          IS DISTINCT FROM (EXCLUDED.providers, EXCLUDED.advertiser_name, \
                 EXCLUDED.campaign_name, EXCLUDED.budget_dkk, EXCLUDED.start_date, \
                 EXCLUDED.end_date, EXCLUDED.status, EXCLUDED.external_reference, \
                 EXCLUDED.created_at)"
    } else {
        ""
    };
    let insert = format!(
        "INSERT INTO partner_orders (organization_id, id, providers, advertiser_name, \
         campaign_name, budget_dkk, start_date, end_date, status, external_reference, created_at, \
         updated_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12){on_conflict}"
    );
    bind_order(sqlx::query(&insert), organization_id, order)?
        .execute(&mut **transaction)
        .await
        .map_err(store_error)?;
    Ok(())
}

/// `query` with an order's columns as `$1` to `$12`, in the order of `partner_orders`.
fn bind_order<'q>(
    query: sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>,
    organization_id: &'q str,
    order: &'q Order,
) -> Result<sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>, StoreError> {
    let budget = i64::try_from(order.budget_dkk).map_err(StoreError::invalid_data)?;
    Ok(query
        .bind(organization_id)
        .bind(&order.id)
        .bind(&order.providers)
        .bind(&order.advertiser_name)
        .bind(&order.campaign_name)
        .bind(budget)
        .bind(order.start_date)
        .bind(order.end_date)
        .bind(&order.status)
        .bind(&order.external_reference)
        .bind(order.created_at.as_datetime())
        .bind(order.updated_at.map(|at| at.as_datetime())))
}

/// A column that must not be null.
impl PgStore {
    /// `NotFound` unless the organization exists.
    pub(super) async fn check_organization(&self, organization_id: &str) -> Result<(), StoreError> {
        let found: bool = sqlx::query_scalar(&self.statements.organization_exists)
            .bind(organization_id)
            .fetch_one(&self.pool)
            .await
            .map_err(store_error)?;
        found.then_some(()).ok_or_else(|| {
            StoreError::not_found(format!("unknown organization {organization_id:?}"))
        })
    }
}

impl PgStore {
    /// Deletes at most `batch` rows of `table` whose `at` column is older than `older_than` by
    /// the database's clock, oldest first (rows named by `key`), and returns how many: the
    /// retention of usage, the audit log and the webhooks' outbox. The names are the crate's
    /// own constants, never input.
    pub(super) async fn delete_oldest(
        &self,
        table: &'static str,
        at: &'static str,
        key: &'static str,
        older_than: std::time::Duration,
        batch: u64,
    ) -> Result<u64, StoreError> {
        // Capped at a century: an interval PostgreSQL can subtract from now.
        let older_than_ms = i64::try_from(older_than.as_millis())
            .unwrap_or(i64::MAX)
            .min(3_153_600_000_000);
        let deleted = sqlx::query(&format!(
            "DELETE FROM {table} WHERE {key} IN ( \
               SELECT {key} FROM {table} \
               WHERE {at} < now() - $1 * interval '1 millisecond' \
               ORDER BY {at} LIMIT $2)"
        ))
        .bind(older_than_ms)
        .bind(i64::try_from(batch).unwrap_or(i64::MAX))
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(deleted.rows_affected())
    }
}

pub(super) fn column<'r, T>(row: &'r PgRow, name: &str) -> Result<T, StoreError>
where
    T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get::<Option<T>, _>(name)
        .map_err(store_error)?
        .ok_or_else(|| StoreError::invalid_data(format!("column {name} is null")))
}

#[cfg(test)]
mod tests;
