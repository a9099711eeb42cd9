//! [`SpyKeys`]: the memory store's key manager, watched and made to fail on demand.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use partner_api::key::AllowedIps;
use partner_api::store::{
    IssuedKey, KeyManager, KeyPolicy, KeyRecord, KeyUse, LeakReport, LeakedKey, NewKey, RollKey,
};
use partner_api::{MemoryStore, StoreError};

/// A [`MemoryStore`]'s key manager that counts the leak reports it is asked about and fails
/// last-use writes while `failing_last_used` is set (a database down for the recorder).
#[derive(Clone, Default)]
pub struct SpyKeys {
    pub store: MemoryStore,
    pub failing_last_used: Arc<AtomicBool>,
    pub leak_reports: Arc<AtomicUsize>,
    /// Calls of `revoke_leaked`.
    pub leak_calls: Arc<AtomicUsize>,
    /// While set, the store does not offer leak reports (a host's table without them).
    pub without_leak_reports: Arc<AtomicBool>,
}

impl SpyKeys {
    pub fn new(store: MemoryStore) -> Self {
        Self {
            store,
            ..Self::default()
        }
    }
}

#[async_trait]
impl KeyManager for SpyKeys {
    fn supports(&self, ability: partner_api::store::KeyAbility) -> bool {
        let without = ability == partner_api::store::KeyAbility::LeakReports
            && self.without_leak_reports.load(Ordering::SeqCst);
        !without && self.store.supports(ability)
    }
    async fn issue(&self, org: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
        self.store.issue(org, new).await
    }
    async fn list(&self, org: &str) -> Result<Vec<KeyRecord>, StoreError> {
        self.store.list(org).await
    }
    async fn get(&self, org: &str, id: &str) -> Result<KeyRecord, StoreError> {
        self.store.get(org, id).await
    }
    async fn revoke(&self, org: &str, id: &str) -> Result<KeyRecord, StoreError> {
        self.store.revoke(org, id).await
    }
    async fn restrict(
        &self,
        org: &str,
        id: &str,
        allowed_ips: AllowedIps,
    ) -> Result<KeyRecord, StoreError> {
        self.store.restrict(org, id, allowed_ips).await
    }
    async fn revoke_leaked(
        &self,
        reports: &[LeakReport],
    ) -> Result<Vec<Option<LeakedKey>>, StoreError> {
        self.leak_reports.fetch_add(reports.len(), Ordering::SeqCst);
        self.leak_calls.fetch_add(1, Ordering::SeqCst);
        if self.without_leak_reports.load(Ordering::SeqCst) {
            return Err(StoreError::unsupported("leak reports"));
        }
        self.store.revoke_leaked(reports).await
    }
    async fn roll(&self, org: &str, id: &str, roll: RollKey) -> Result<IssuedKey, StoreError> {
        self.store.roll(org, id, roll).await
    }
    async fn key_policy(&self, org: &str) -> Result<KeyPolicy, StoreError> {
        self.store.key_policy(org).await
    }
    async fn set_key_policy(&self, org: &str, policy: KeyPolicy) -> Result<KeyPolicy, StoreError> {
        self.store.set_key_policy(org, policy).await
    }
    async fn record_last_used(&self, uses: &[KeyUse]) -> Result<(), StoreError> {
        if self.failing_last_used.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the database is down"));
        }
        self.store.record_last_used(uses).await
    }
}
