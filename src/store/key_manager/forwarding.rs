//! A shared key manager is a key manager: `Arc<S>` and `Arc<dyn KeyManager>` forward every
//! call, so one store can serve a Settings page, the `keys` command and the secret scanning
//! endpoint at once.

use std::sync::Arc;

use async_trait::async_trait;

use super::{
    IssuedKey, KeyManager, KeyPolicy, KeyRecord, KeyUse, LeakReport, LeakedKey, NewKey, RollKey,
};
use crate::key::AllowedIps;
use crate::store::StoreError;

#[async_trait]
impl<T: KeyManager + ?Sized> KeyManager for Arc<T> {
    async fn issue(&self, organization_id: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
        (**self).issue(organization_id, new).await
    }

    async fn list(&self, organization_id: &str) -> Result<Vec<KeyRecord>, StoreError> {
        (**self).list(organization_id).await
    }

    async fn get(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        (**self).get(organization_id, key_id).await
    }

    async fn revoke(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError> {
        (**self).revoke(organization_id, key_id).await
    }

    async fn restrict(
        &self,
        organization_id: &str,
        key_id: &str,
        allowed_ips: AllowedIps,
    ) -> Result<KeyRecord, StoreError> {
        (**self)
            .restrict(organization_id, key_id, allowed_ips)
            .await
    }

    async fn revoke_leaked(
        &self,
        reports: &[LeakReport],
    ) -> Result<Vec<Option<LeakedKey>>, StoreError> {
        (**self).revoke_leaked(reports).await
    }

    async fn roll(
        &self,
        organization_id: &str,
        key_id: &str,
        roll: RollKey,
    ) -> Result<IssuedKey, StoreError> {
        (**self).roll(organization_id, key_id, roll).await
    }

    fn supports(&self, ability: super::KeyAbility) -> bool {
        (**self).supports(ability)
    }

    async fn key_policy(&self, organization_id: &str) -> Result<KeyPolicy, StoreError> {
        (**self).key_policy(organization_id).await
    }

    async fn set_key_policy(
        &self,
        organization_id: &str,
        policy: KeyPolicy,
    ) -> Result<KeyPolicy, StoreError> {
        (**self).set_key_policy(organization_id, policy).await
    }

    async fn record_last_used(&self, uses: &[KeyUse]) -> Result<(), StoreError> {
        (**self).record_last_used(uses).await
    }
}
