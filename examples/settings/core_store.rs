//! A host's own key table as the smallest store the Settings page works with: only the six
//! required methods of `KeyManager` (issue, list, get, revoke, restrict, roll), here over the
//! demo's memory store. With `--core-store` the page runs on it and hides what it lacks
//! (the keys' last use, webhooks); its policy answers 501.

use async_trait::async_trait;
use partner_api::key::AllowedIps;
use partner_api::store::{IssuedKey, KeyManager, KeyRecord, NewKey, RollKey};
use partner_api::{MemoryStore, StoreError};

/// The six required methods, nothing more.
#[derive(Clone)]
pub(crate) struct CoreStore(pub(crate) MemoryStore);

#[async_trait]
impl KeyManager for CoreStore {
    async fn issue(&self, organization_id: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
        self.0.issue(organization_id, new).await
    }

    async fn list(&self, organization_id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        self.0.list(organization_id).await
    }

    async fn get(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        self.0.get(organization_id, key_id).await
    }

    async fn revoke(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        self.0.revoke(organization_id, key_id).await
    }

    async fn restrict(
        &self,
        organization_id: &str,
        key_id: &str,
        allowed_ips: AllowedIps,
    ) -> Result<KeyRecord, StoreError> {
        self.0.restrict(organization_id, key_id, allowed_ips).await
    }

    async fn roll(
        &self,
        organization_id: &str,
        key_id: &str,
        roll: RollKey,
    ) -> Result<IssuedKey, StoreError> {
        self.0.roll(organization_id, key_id, roll).await
    }
}
