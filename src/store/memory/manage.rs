//! [`KeyManager`] over the memory store.

use async_trait::async_trait;

use super::{generate, unknown_organization, KeyEntry, MemoryStore};
use crate::key::KeyEnvironment;
use crate::management::{IssuedKey, KeyManager, KeyRecord, KeyUse, NewKey};
use crate::model::Timestamp;
use crate::store::StoreError;

#[async_trait]
impl KeyManager for MemoryStore {
    async fn issue(&self, organization_id: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
        new.check(Timestamp::now())?;
        let key = generate(new.environment())?;
        self.write().issue(organization_id, key, &new)
    }

    async fn list(&self, organization_id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        let state = self.read();
        if !state.organizations.contains_key(organization_id) {
            return Err(unknown_organization(organization_id));
        }
        let mut entries: Vec<&KeyEntry> = state
            .keys
            .values()
            .filter(|entry| entry.record.organization_id == organization_id)
            .collect();
        entries.sort_by_key(|entry| std::cmp::Reverse((entry.record.created_at, entry.number)));
        Ok(entries
            .into_iter()
            .map(|entry| entry.record.clone())
            .collect())
    }

    async fn get(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        let mut state = self.write();
        Ok(state.entry_mut(organization_id, key_id)?.record.clone())
    }

    async fn revoke(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        let mut state = self.write();
        let entry = state.entry_mut(organization_id, key_id)?;
        entry.record.revoked_at.get_or_insert_with(Timestamp::now);
        Ok(entry.record.clone())
    }

    async fn roll(
        &self,
        organization_id: &str,
        key_id: &str,
        overlap: std::time::Duration,
    ) -> Result<IssuedKey, StoreError> {
        let environment = {
            let mut state = self.write();
            let entry = state.entry_mut(organization_id, key_id)?;
            entry.record.environment.unwrap_or(KeyEnvironment::Live)
        };
        let key = generate(environment)?;
        let mut state = self.write();
        let old = state.entry_mut(organization_id, key_id)?;
        if old.record.revoked_at.is_some() {
            return Err(StoreError::conflict("a revoked key cannot be rolled"));
        }
        let overlap_ends = Timestamp::now().saturating_add(overlap);
        let expires_at = old
            .record
            .expires_at
            .map_or(overlap_ends, |expires_at| expires_at.min(overlap_ends));
        old.record.expires_at = Some(expires_at);
        old.principal.expires_at = Some(expires_at);
        let mut new = NewKey::new(environment);
        if let Some(label) = old.record.label.clone() {
            new = new.with_label(label);
        }
        state.issue(organization_id, key, &new)
    }

    async fn record_last_used(&self, uses: &[KeyUse]) -> Result<(), StoreError> {
        let mut state = self.write();
        for KeyUse { key_id, at } in uses {
            let Some(digest) = state.key_ids.get(key_id).copied() else {
                continue;
            };
            if let Some(entry) = state.keys.get_mut(&digest) {
                let last = entry.record.last_used_at.get_or_insert(*at);
                *last = (*last).max(*at);
            }
        }
        Ok(())
    }
}
