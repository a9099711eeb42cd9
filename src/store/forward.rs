//! A shared store is a store: `Arc<S>`, `Arc<dyn Trait>` and `&S` forward every call of every
//! store trait, so one store serves the API, the management service, the Settings page, the
//! recorders and the dispatcher at once, whichever way the host holds it.
//!
//! Each forwarding impl is written once, for both pointers, by `forward!`: a trait that gains
//! a required method fails to compile here until it is forwarded. A provided method compiles
//! unforwarded and answers its default through the pointer, so each is forwarded by hand and
//! checked by the tests below.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::key_manager::{
    IssuedKey, KeyAbility, KeyManager, KeyPolicy, KeyRecord, KeyUse, LeakReport, LeakedKey, NewKey,
    RollKey,
};
use super::read::{KeyDigests, KeyLookup, KeyStore, OrderStore};
use super::{
    AuditLog, AuditPage, AuditQuery, AuditRecord, DeprecatedCallCount, DeprecatedCallStore,
    DeprecatedCallTotal, EventFeed, EventQuery, EventsPage, KeyUsageTotal, OrderQuery, StoreError,
    UsageBucket, UsageCount, UsageGranularity, UsagePeriod, UsageStore,
};
use crate::key::{AllowedIps, KeyDigest};
use crate::model::OrderPage;

/// Implements `$trait` for `Arc<T>` and `&T`, `T` any implementation (sized or not), with the
/// same body: each method calls `(**self).method(..)`, which is `T`'s through either pointer.
macro_rules! forward {
    ($(#[$attr:meta])* $trait:ident { $($body:tt)* }) => {
        $(#[$attr])*
        #[async_trait]
        impl<T: $trait + ?Sized> $trait for Arc<T> {
            $($body)*
        }

        $(#[$attr])*
        #[async_trait]
        impl<'a, T: $trait + ?Sized> $trait for &'a T {
            $($body)*
        }
    };
}

forward!(KeyStore {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        (**self).lookup(digest).await
    }

    fn lookup_now(&self, digest: &KeyDigest) -> Option<Result<KeyLookup, StoreError>> {
        (**self).lookup_now(digest)
    }
});

forward!(OrderStore {
    async fn orders(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Result<OrderPage, StoreError> {
        (**self).orders(organization_id, query).await
    }

    fn orders_now(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Option<Result<OrderPage, StoreError>> {
        (**self).orders_now(organization_id, query)
    }
});

forward!(KeyDigests {
    async fn key_digests(&self, ids: Option<&[String]>) -> Result<Vec<KeyDigest>, StoreError> {
        (**self).key_digests(ids).await
    }
});

forward!(KeyManager {
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

    async fn pin_api_version(
        &self,
        organization_id: &str,
        key_id: &str,
        version: crate::versions::ApiVersion,
    ) -> Result<KeyRecord, StoreError> {
        (**self)
            .pin_api_version(organization_id, key_id, version)
            .await
    }

    async fn roll_back_api_version(
        &self,
        organization_id: &str,
        key_id: &str,
    ) -> Result<KeyRecord, StoreError> {
        (**self)
            .roll_back_api_version(organization_id, key_id)
            .await
    }

    async fn set_providers(
        &self,
        organization_id: &str,
        key_id: &str,
        providers: Option<Vec<String>>,
    ) -> Result<KeyRecord, StoreError> {
        (**self)
            .set_providers(organization_id, key_id, providers)
            .await
    }

    async fn set_permissions(
        &self,
        organization_id: &str,
        key_id: &str,
        permissions: crate::key::Permissions,
    ) -> Result<KeyRecord, StoreError> {
        (**self)
            .set_permissions(organization_id, key_id, permissions)
            .await
    }

    async fn roll(
        &self,
        organization_id: &str,
        key_id: &str,
        roll: RollKey,
    ) -> Result<IssuedKey, StoreError> {
        (**self).roll(organization_id, key_id, roll).await
    }

    fn supports(&self, ability: KeyAbility) -> bool {
        (**self).supports(ability)
    }

    async fn revoke_leaked(
        &self,
        reports: &[LeakReport],
    ) -> Result<Vec<Option<LeakedKey>>, StoreError> {
        (**self).revoke_leaked(reports).await
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
});

forward!(DeprecatedCallStore {
    async fn record_deprecated_calls(
        &self,
        counts: &[DeprecatedCallCount],
    ) -> Result<(), StoreError> {
        (**self).record_deprecated_calls(counts).await
    }

    async fn deprecated_calls(
        &self,
        organization_id: &str,
        key_id: Option<&str>,
        since: crate::model::Timestamp,
    ) -> Result<Vec<DeprecatedCallTotal>, StoreError> {
        (**self).deprecated_calls(organization_id, key_id, since).await
    }

    async fn prune_deprecated_calls(
        &self,
        older_than: Duration,
        batch: u32,
    ) -> Result<u64, StoreError> {
        (**self).prune_deprecated_calls(older_than, batch).await
    }
});

forward!(UsageStore {
    async fn record_usage(&self, counts: &[UsageCount]) -> Result<(), StoreError> {
        (**self).record_usage(counts).await
    }

    async fn key_usage(
        &self,
        organization_id: &str,
        key_id: &str,
        period: UsagePeriod,
        granularity: UsageGranularity,
    ) -> Result<Vec<UsageBucket>, StoreError> {
        (**self)
            .key_usage(organization_id, key_id, period, granularity)
            .await
    }

    async fn usage_totals(
        &self,
        organization_id: &str,
        period: UsagePeriod,
    ) -> Result<Vec<KeyUsageTotal>, StoreError> {
        (**self).usage_totals(organization_id, period).await
    }

    async fn prune_usage(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        (**self).prune_usage(older_than, batch).await
    }
});

forward!(EventFeed {
    async fn events(
        &self,
        organization_id: &str,
        query: &EventQuery,
    ) -> Result<EventsPage, StoreError> {
        (**self).events(organization_id, query).await
    }

    fn serves_provider_views(&self) -> bool {
        (**self).serves_provider_views()
    }

    fn revision_now(&self, organization_id: &str) -> Option<u64> {
        (**self).revision_now(organization_id)
    }

    async fn prune_events(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        (**self).prune_events(older_than, batch).await
    }
});

forward!(AuditLog {
    async fn audit_entries(
        &self,
        organization_id: &str,
        query: &AuditQuery,
    ) -> Result<AuditPage, StoreError> {
        (**self).audit_entries(organization_id, query).await
    }

    async fn append(&self, record: AuditRecord) -> Result<(), StoreError> {
        (**self).append(record).await
    }

    async fn prune_audit(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        (**self).prune_audit(older_than, batch).await
    }
});

#[cfg(feature = "webhooks")]
mod webhooks {
    //! The webhook traits, forwarded the same way (feature `webhooks`).

    use std::sync::Arc;
    use std::time::Duration;

    use async_trait::async_trait;

    use crate::model::Timestamp;
    use crate::store::webhooks::{
        Attempt, Backlog, ClaimRequest, CreatedEndpoint, Delivery, Endpoint, Finish,
        FinishedAttempt, NewEndpoint, WebhookAbility, WebhookManager, WebhookOutbox,
    };
    use crate::store::StoreError;

    forward!(WebhookManager {
        async fn add_endpoint(
            &self,
            organization_id: &str,
            new: NewEndpoint,
        ) -> Result<CreatedEndpoint, StoreError> {
            (**self).add_endpoint(organization_id, new).await
        }

        async fn endpoints(&self, organization_id: &str) -> Result<Vec<Endpoint>, StoreError> {
            (**self).endpoints(organization_id).await
        }

        async fn endpoint(
            &self,
            organization_id: &str,
            endpoint_id: &str,
        ) -> Result<Endpoint, StoreError> {
            (**self).endpoint(organization_id, endpoint_id).await
        }

        async fn rotate_secret(
            &self,
            organization_id: &str,
            endpoint_id: &str,
            overlap: Duration,
        ) -> Result<CreatedEndpoint, StoreError> {
            (**self)
                .rotate_secret(organization_id, endpoint_id, overlap)
                .await
        }

        async fn set_enabled(
            &self,
            organization_id: &str,
            endpoint_id: &str,
            enabled: bool,
        ) -> Result<Endpoint, StoreError> {
            (**self)
                .set_enabled(organization_id, endpoint_id, enabled)
                .await
        }

        async fn remove_endpoint(
            &self,
            organization_id: &str,
            endpoint_id: &str,
        ) -> Result<(), StoreError> {
            (**self).remove_endpoint(organization_id, endpoint_id).await
        }

        fn supports(&self, ability: WebhookAbility) -> bool {
            (**self).supports(ability)
        }

        async fn send_test(
            &self,
            organization_id: &str,
            endpoint_id: &str,
        ) -> Result<String, StoreError> {
            (**self).send_test(organization_id, endpoint_id).await
        }

        async fn attempts(
            &self,
            organization_id: &str,
            endpoint_id: &str,
            limit: usize,
        ) -> Result<Vec<Attempt>, StoreError> {
            (**self).attempts(organization_id, endpoint_id, limit).await
        }

        async fn retry_message(
            &self,
            organization_id: &str,
            endpoint_id: &str,
            message_id: &str,
        ) -> Result<(), StoreError> {
            (**self)
                .retry_message(organization_id, endpoint_id, message_id)
                .await
        }

        async fn recover(
            &self,
            organization_id: &str,
            endpoint_id: &str,
            since: Timestamp,
        ) -> Result<u64, StoreError> {
            (**self).recover(organization_id, endpoint_id, since).await
        }

        async fn pin_api_version(
            &self,
            organization_id: &str,
            endpoint_id: &str,
            version: crate::versions::ApiVersion,
        ) -> Result<Endpoint, StoreError> {
            (**self)
                .pin_api_version(organization_id, endpoint_id, version)
                .await
        }
    });

    forward!(WebhookOutbox {
        async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Delivery>, StoreError> {
            (**self).claim(request).await
        }

        async fn finish(
            &self,
            delivery: &Delivery,
            attempt: &FinishedAttempt,
        ) -> Result<Finish, StoreError> {
            (**self).finish(delivery, attempt).await
        }

        async fn backlog(&self) -> Result<Backlog, StoreError> {
            (**self).backlog().await
        }

        async fn prune(&self, older_than: Duration, batch: usize) -> Result<u64, StoreError> {
            (**self).prune(older_than, batch).await
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::memory::MemoryStore;

    /// Every store trait, so that `Arc<S>` and `&S` are checked to implement each.
    fn every_store_trait<S>(store: S) -> S
    where
        S: KeyStore + OrderStore + KeyDigests + KeyManager + UsageStore + AuditLog + EventFeed,
    {
        store
    }

    /// The defaulted methods are forwarded too: through either pointer, a store says what it
    /// says itself, never the trait's default (`false`, `None`).
    fn says_what_the_store_says<S: KeyStore + OrderStore + KeyManager + EventFeed>(store: &S) {
        for ability in KeyAbility::ALL {
            assert!(store.supports(ability), "{ability:?}");
        }
        let digest = KeyDigest::of("pk_test_forwarded");
        assert!(matches!(
            store.lookup_now(&digest),
            Some(Ok(KeyLookup::Valid(_)))
        ));
        assert!(store.orders_now("org_1", &OrderQuery::newest(10)).is_some());
        assert!(store.serves_provider_views());
        assert!(store.revision_now("org_1").is_some());
    }

    #[test]
    fn a_store_is_a_store_through_arc_and_reference_alike() {
        let store = MemoryStore::new();
        store
            .add_organization(crate::model::Organization {
                id: "org_1".into(),
                name: "Acme".into(),
            })
            .unwrap();
        store.add_key("pk_test_forwarded", "org_1").unwrap();
        says_what_the_store_says(&store);
        says_what_the_store_says(&every_store_trait(Arc::new(store.clone())));
        says_what_the_store_says(&every_store_trait(&store));
        let shared: Arc<dyn KeyManager> = Arc::new(store.clone());
        for ability in KeyAbility::ALL {
            assert!(shared.supports(ability), "{ability:?}");
        }
    }

    #[cfg(feature = "webhooks")]
    #[test]
    fn a_webhook_store_is_one_through_arc_and_reference_alike() {
        use crate::store::webhooks::{WebhookAbility, WebhookManager, WebhookOutbox};

        fn supports_every<S: WebhookManager + WebhookOutbox>(store: &S) {
            for ability in WebhookAbility::ALL {
                assert!(store.supports(ability), "{ability:?}");
            }
        }
        let store = MemoryStore::new();
        supports_every(&Arc::new(store.clone()));
        supports_every(&&store);
    }
}
