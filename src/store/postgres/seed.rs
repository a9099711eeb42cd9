//! Loading a seed into PostgreSQL: idempotent, and never weakening a key that exists.

use super::{insert_order, store_error, PgStore};
use crate::key::KeyDigest;
use crate::seed::{Seed, SeedError};
use crate::store::describe_plaintext;
use crate::store::StoreError;

impl PgStore {
    /// Loads `seed` in one transaction, after checking it as [`Seed::to_memory_store`] does.
    /// Loading is idempotent, so every replica may start with the same `--seed`: new entries
    /// are added, organizations and orders take the seed's values, and a key that exists is
    /// never weakened: a seed never un-revokes it (it may revoke it), never moves it to
    /// another organization (that is an error naming the entry), never drops or changes its
    /// expiry (it may give one to a key without), and never replaces its label.
    ///
    /// # Errors
    ///
    /// When the seed breaks a rule (the message names the entry), holds organizations or
    /// orders where the [schema map](Self::with_schema_map) makes them the host's, or the
    /// database fails.
    pub async fn load_seed(&self, seed: &Seed) -> Result<(), SeedError> {
        seed.to_memory_store()?;
        let database = |err: StoreError| SeedError::new("loading into PostgreSQL".to_owned(), err);
        let fail = |err: sqlx::Error| database(store_error(err));
        // Mapped data is the host's: a seed's organizations or orders would be written
        // beside it, never served.
        if self.statements.organizations_mapped() && !seed.organizations.is_empty() {
            return Err(database(StoreError::unsupported(
                "seeding organizations: they are the host's, read through the schema map",
            )));
        }
        if !seed.orders.is_empty() {
            self.own_orders().map_err(database)?;
        }
        let mut transaction = self.pool.begin().await.map_err(fail)?;
        for organization in &seed.organizations {
            sqlx::query(
                "INSERT INTO partner_organizations (id, name) VALUES ($1, $2) \
                 ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name \
                 WHERE partner_organizations.name IS DISTINCT FROM EXCLUDED.name",
            )
            .bind(&organization.id)
            .bind(&organization.name)
            .execute(&mut *transaction)
            .await
            .map_err(fail)?;
        }
        for (index, key) in seed.api_keys.iter().enumerate() {
            let (hint, environment) = describe_plaintext(&key.key);
            let written = sqlx::query(
                "INSERT INTO partner_api_keys \
                   (organization_id, key_sha256, revoked_at, label, hint, environment, expires_at) \
                 VALUES ($1, $2, CASE WHEN $3 THEN now() END, $4, $5, $6, $7) \
                 ON CONFLICT (key_sha256) DO UPDATE SET \
                   revoked_at = COALESCE(partner_api_keys.revoked_at, EXCLUDED.revoked_at), \
                   label = COALESCE(partner_api_keys.label, EXCLUDED.label), \
                   hint = COALESCE(partner_api_keys.hint, EXCLUDED.hint), \
                   environment = COALESCE(partner_api_keys.environment, EXCLUDED.environment), \
                   expires_at = COALESCE(partner_api_keys.expires_at, EXCLUDED.expires_at) \
                 WHERE partner_api_keys.organization_id = EXCLUDED.organization_id",
            )
            .bind(&key.organization_id)
            .bind(&KeyDigest::of(&key.key).as_bytes()[..])
            .bind(key.revoked)
            .bind(&key.label)
            .bind(hint)
            .bind(environment.map(|environment| environment.name()))
            .bind(key.expires_at.map(|at| at.as_datetime()))
            .execute(&mut *transaction)
            .await
            .map_err(fail)?;
            if written.rows_affected() == 0 {
                return Err(SeedError::new(
                    format!("apiKeys[{index}]"),
                    StoreError::conflict(format!(
                        "the key exists in another organization than {:?}; a seed never moves a key",
                        key.organization_id
                    )),
                ));
            }
        }
        for seed_order in &seed.orders {
            insert_order(
                &mut transaction,
                &seed_order.organization_id,
                &seed_order.order,
                true,
            )
            .await
            .map_err(database)?;
        }
        transaction.commit().await.map_err(fail)
    }
}
