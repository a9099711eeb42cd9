//! The conformance suites check what they claim: the shipped stores pass, and a store or a
//! limiter with a deliberate fault fails exactly the checks its fault breaks.
#![cfg(feature = "testing")]

use async_trait::async_trait;
use partner_api::testing::{run, StoreFixtures};
use partner_api::{
    KeyDigest, KeyStore, MemoryStore, Order, OrderPage, OrderStore, Organization, Principal,
    StoreError,
};

#[tokio::test]
async fn the_memory_store_conforms_and_can_run_twice() {
    let store = MemoryStore::new();
    let report = run(&store).await;
    report.assert_passed();
    assert_eq!(report.len(), 9);
    run(&store).await.assert_passed();
}

/// How a [`Faulty`] store breaks the contract.
#[derive(Clone, Copy, PartialEq)]
enum Fault {
    /// Revocations are dropped and the limit is ignored.
    ForgetsRevocationsAndLimits,
    /// `lookup_now` resolves no key, while `lookup` does.
    ForgetsKeysAtOnce,
}

/// A memory store with one deliberate fault.
struct Faulty(MemoryStore, Fault);

#[async_trait]
impl KeyStore for Faulty {
    async fn lookup(&self, digest: &KeyDigest) -> Result<Option<Principal>, StoreError> {
        self.0.lookup(digest).await
    }
    fn lookup_now(&self, _: &KeyDigest) -> Option<Result<Option<Principal>, StoreError>> {
        (self.1 == Fault::ForgetsKeysAtOnce).then_some(Ok(None))
    }
}

#[async_trait]
impl OrderStore for Faulty {
    async fn newest_orders(&self, org: &str, limit: usize) -> Result<OrderPage, StoreError> {
        let limit = match self.1 {
            Fault::ForgetsRevocationsAndLimits => usize::MAX,
            Fault::ForgetsKeysAtOnce => limit,
        };
        self.0.newest_orders(org, limit).await
    }
}

#[async_trait]
impl StoreFixtures for Faulty {
    type Store = Self;
    fn store(&self) -> &Self {
        self
    }
    async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        self.0.add_organization(organization.clone())
    }
    async fn add_key(&self, key: &str, organization_id: &str) -> Result<(), StoreError> {
        self.0.add_key(key, organization_id).map(drop)
    }
    async fn revoke_key(&self, key: &str) -> Result<(), StoreError> {
        if self.1 != Fault::ForgetsRevocationsAndLimits {
            self.0.revoke_key(key);
        }
        Ok(())
    }
    async fn add_orders(&self, organization_id: &str, orders: &[Order]) -> Result<(), StoreError> {
        self.0.add_orders(organization_id, orders.iter().cloned())
    }
}

#[tokio::test]
async fn immediate_answers_must_agree_with_waited_ones() {
    let report = run(&Faulty(MemoryStore::new(), Fault::ForgetsKeysAtOnce)).await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert!(
        failed.contains(&"a key resolves to its own organization"),
        "{report}"
    );
    assert!(
        failed.contains(&"a revoked key resolves to nothing at once"),
        "{report}"
    );
}

#[tokio::test]
async fn a_broken_store_fails_the_checks_it_breaks() {
    let report = run(&Faulty(
        MemoryStore::new(),
        Fault::ForgetsRevocationsAndLimits,
    ))
    .await;
    let failed: Vec<&str> = report.failures().map(|(name, _)| name).collect();
    assert_eq!(
        failed,
        [
            "a revoked key resolves to nothing at once",
            "the limit is honoured",
            "more than 100 orders give the newest 100"
        ],
        "{report}"
    );
}

#[tokio::test]
async fn the_memory_store_manages_keys_as_the_suite_requires() {
    let store = MemoryStore::new();
    let report = partner_api::testing::run_key_manager(&store).await;
    report.assert_passed();
    assert_eq!(report.len(), 9);
}
