//! [`KeyManager`] over the memory store.

use async_trait::async_trait;

use super::{generate, unknown_organization, KeyEntry, MemoryStore, State};
use crate::key::{canonical_providers, AllowedIps, KeyEnvironment, Permissions};
use crate::model::Timestamp;
use crate::store::audit::restriction;
use crate::store::key_manager::{
    no_rollback, permissions_detail, providers_detail, version_change,
};
use crate::store::StoreError;
use crate::store::SECRET_SCANNING_ACTOR;
use crate::store::{
    AuditAction, AuditContext, AuditRecord, IssuedKey, KeyAbility, KeyManager, KeyPolicy,
    KeyRecord, KeyRefusal, KeyUse, LeakReport, LeakedKey, NewKey, RevocationReason, RollKey,
    VersionRollback,
};
use crate::versions::ApiVersion;

#[async_trait]
impl KeyManager for MemoryStore {
    fn supports(&self, _ability: KeyAbility) -> bool {
        true
    }

    async fn issue(&self, organization_id: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
        let now = Timestamp::now();
        new.check(now)?;
        let key = generate(new.environment())?;
        let mut state = self.write();
        let policy = state.policy(organization_id)?;
        policy.check_lifetime(new.lifetime_at(now))?;
        policy.check_active_keys(state.active_keys(organization_id, now), 0)?;
        let issued = state.issue(organization_id, key, &new, now)?;
        let id = &issued.record().id;
        self.audit(AuditRecord::new(
            organization_id,
            AuditAction::KeyIssued,
            Some(id),
        ));
        Ok(issued)
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
        if entry.record.revoked_at.is_none() {
            entry.record.revoked_at = Some(Timestamp::now());
            entry.record.revoked_reason = Some(RevocationReason::Manual);
            self.audit(AuditRecord::new(
                organization_id,
                AuditAction::KeyRevoked,
                Some(key_id),
            ));
        }
        Ok(entry.record.clone())
    }

    async fn restrict(
        &self,
        organization_id: &str,
        key_id: &str,
        allowed_ips: AllowedIps,
    ) -> Result<KeyRecord, StoreError> {
        let mut state = self.write();
        let entry = state.entry_mut(organization_id, key_id)?;
        // A change that changes nothing writes no entry.
        if entry.record.allowed_ips != allowed_ips {
            self.audit(
                AuditRecord::new(organization_id, AuditAction::KeyRestricted, Some(key_id))
                    .with_detail(restriction(&allowed_ips)),
            );
        }
        entry.record.allowed_ips = allowed_ips.clone();
        entry.principal = entry.principal.clone().with_allowed_ips(allowed_ips);
        Ok(entry.record.clone())
    }

    async fn set_permissions(
        &self,
        organization_id: &str,
        key_id: &str,
        permissions: Permissions,
    ) -> Result<KeyRecord, StoreError> {
        let mut state = self.write();
        let entry = state.entry_mut(organization_id, key_id)?;
        // A change that changes nothing writes no entry.
        if entry.record.permissions != permissions {
            self.audit(
                AuditRecord::new(
                    organization_id,
                    AuditAction::KeyPermissionsChanged,
                    Some(key_id),
                )
                .with_detail(permissions_detail(permissions)),
            );
        }
        entry.record.permissions = permissions;
        entry.principal = entry.principal.clone().with_permissions(permissions);
        Ok(entry.record.clone())
    }

    async fn set_providers(
        &self,
        organization_id: &str,
        key_id: &str,
        providers: Option<Vec<String>>,
    ) -> Result<KeyRecord, StoreError> {
        let providers = providers
            .map(|providers| {
                canonical_providers(&providers).map_err(|message| {
                    StoreError::refusal(crate::store::StoreErrorKind::InvalidData, message)
                })
            })
            .transpose()?;
        let mut state = self.write();
        let entry = state.entry_mut(organization_id, key_id)?;
        // A change that changes nothing writes no entry.
        if entry.record.providers != providers {
            self.audit(
                AuditRecord::new(
                    organization_id,
                    AuditAction::KeyProvidersChanged,
                    Some(key_id),
                )
                .with_detail(providers_detail(providers.as_deref())),
            );
        }
        entry.principal = entry
            .principal
            .clone()
            .with_providers(providers.as_deref().map(Into::into));
        entry.record.providers = providers;
        Ok(entry.record.clone())
    }

    async fn pin_api_version(
        &self,
        organization_id: &str,
        key_id: &str,
        version: ApiVersion,
    ) -> Result<KeyRecord, StoreError> {
        let mut state = self.write();
        let entry = state.entry_mut(organization_id, key_id)?;
        let before = entry.record.api_version.unwrap_or(crate::versions::FIRST);
        // A change that changes nothing writes no entry.
        if before != version {
            entry.record.api_version_rollback =
                (version > before).then(|| VersionRollback::new(before, Timestamp::now()));
            entry.record.api_version = Some(version);
            entry.principal.api_version = Some(version);
            self.audit(
                AuditRecord::new(
                    organization_id,
                    AuditAction::KeyApiVersionPinned,
                    Some(key_id),
                )
                .with_detail(version_change(before, version)),
            );
        }
        Ok(entry.record.clone())
    }

    async fn roll_back_api_version(
        &self,
        organization_id: &str,
        key_id: &str,
    ) -> Result<KeyRecord, StoreError> {
        let mut state = self.write();
        let entry = state.entry_mut(organization_id, key_id)?;
        let before = entry.record.api_version.unwrap_or(crate::versions::FIRST);
        let Some(rollback) = entry
            .record
            .api_version_rollback
            .filter(|rollback| rollback.until > Timestamp::now())
        else {
            return Err(no_rollback(key_id));
        };
        entry.record.api_version = Some(rollback.to);
        entry.record.api_version_rollback = None;
        entry.principal.api_version = Some(rollback.to);
        self.audit(
            AuditRecord::new(
                organization_id,
                AuditAction::KeyApiVersionRolledBack,
                Some(key_id),
            )
            .with_detail(version_change(before, rollback.to)),
        );
        Ok(entry.record.clone())
    }

    async fn revoke_leaked(
        &self,
        reports: &[LeakReport],
    ) -> Result<Vec<Option<LeakedKey>>, StoreError> {
        let mut state = self.write();
        let now = Timestamp::now();
        Ok(reports
            .iter()
            .map(|report| {
                let entry = state.keys.get_mut(&report.digest)?;
                let record = &mut entry.record;
                let newly_revoked = record.revoked_at.is_none();
                if newly_revoked {
                    record.revoked_at = Some(now);
                    record.revoked_reason = Some(RevocationReason::Leaked);
                }
                let first_report = record.leak.is_none();
                if first_report {
                    record.leak = Some(report.leak.clone());
                }
                if newly_revoked || first_report {
                    self.audit_as(
                        AuditRecord::new(
                            &record.organization_id,
                            AuditAction::KeyLeaked,
                            Some(&record.id),
                        )
                        .with_detail(report.leak.url.clone()),
                        AuditContext::current().acting_as(SECRET_SCANNING_ACTOR),
                    );
                }
                Some(LeakedKey::new(record.clone(), first_report))
            })
            .collect())
    }

    async fn roll(
        &self,
        organization_id: &str,
        key_id: &str,
        roll: RollKey,
    ) -> Result<IssuedKey, StoreError> {
        let environment = {
            let mut state = self.write();
            let entry = state.entry_mut(organization_id, key_id)?;
            entry.record.environment.unwrap_or(KeyEnvironment::Live)
        };
        // Generated outside the lock: the operating system's randomness may take a while.
        let key = generate(environment)?;
        let mut state = self.write();
        let now = Timestamp::now();
        let policy = state.policy(organization_id)?;
        let active = state.active_keys(organization_id, now);
        let old = state.entry_mut(organization_id, key_id)?;
        if old.record.revoked_at.is_some() {
            return Err(KeyRefusal::conflict("a revoked key cannot be rolled"));
        }
        if !old.record.is_active_at(now) {
            return Err(KeyRefusal::conflict("an expired key cannot be rolled"));
        }
        let lifetime = roll.expires_in().or(old.record.lifetime_for_roll());
        policy.check_lifetime(lifetime)?;
        policy.check_active_keys(active, 1)?;
        // Under a millisecond is none, as PostgreSQL's millisecond intervals have it.
        if roll.overlap() < std::time::Duration::from_millis(1) {
            // Revoked, never expired "now": a wall clock stepped back would make that expiry
            // a future instant again (as `PgStore` does).
            old.record.revoked_at = Some(now);
            old.record.revoked_reason = Some(RevocationReason::Rolled);
        } else {
            let overlap_ends = now.saturating_add(roll.overlap());
            let expires_at = old
                .record
                .expires_at
                .map_or(overlap_ends, |expires_at| expires_at.min(overlap_ends));
            old.record.expires_at = Some(expires_at);
            old.principal.expires_at = Some(expires_at);
        }
        let mut new = NewKey::new(environment)
            .with_allowed_ips(old.record.allowed_ips.clone())
            .with_permissions(old.record.permissions)
            .with_api_version(old.record.api_version.unwrap_or(crate::versions::FIRST));
        if let Some(providers) = &old.record.providers {
            new = new.with_providers(providers);
        }
        if let Some(label) = old.record.label.clone() {
            new = new.with_label(label);
        }
        if let Some(lifetime) = lifetime {
            new = new.with_expires_in(lifetime);
        }
        let issued = state.issue(organization_id, key, &new, now)?;
        self.audit(
            AuditRecord::new(organization_id, AuditAction::KeyRolled, Some(key_id))
                .with_detail(issued.record().id.clone()),
        );
        Ok(issued)
    }

    async fn key_policy(&self, organization_id: &str) -> Result<KeyPolicy, StoreError> {
        self.read().policy(organization_id)
    }

    async fn set_key_policy(
        &self,
        organization_id: &str,
        policy: KeyPolicy,
    ) -> Result<KeyPolicy, StoreError> {
        let mut state = self.write();
        let before = state.policy(organization_id)?;
        state.policies.insert(organization_id.to_owned(), policy);
        if before != policy {
            self.audit(
                AuditRecord::new(organization_id, AuditAction::PolicyChanged, None)
                    .with_detail(serde_json::to_string(&policy).unwrap_or_default()),
            );
        }
        Ok(policy)
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

impl State {
    /// The key policy of `organization_id`.
    pub(super) fn policy(&self, organization_id: &str) -> Result<KeyPolicy, StoreError> {
        if !self.organizations.contains_key(organization_id) {
            return Err(unknown_organization(organization_id));
        }
        Ok(self
            .policies
            .get(organization_id)
            .copied()
            .unwrap_or_default())
    }

    /// How many keys of `organization_id` are active at `now`.
    fn active_keys(&self, organization_id: &str, now: Timestamp) -> u64 {
        let active = self
            .keys
            .values()
            .filter(|entry| {
                entry.record.organization_id == organization_id && entry.record.is_active_at(now)
            })
            .count();
        u64::try_from(active).unwrap_or(u64::MAX)
    }
}
