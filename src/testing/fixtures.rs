//! [`StoreFixtures`]: how the conformance suite puts test data into a store, for the shipped
//! stores and any a host writes.

use async_trait::async_trait;

use crate::model::{Order, Organization, Timestamp};
use crate::store::{KeyStore, MemoryStore, OrderStore, StoreError};

/// How the suite puts test data into a store.
///
/// The keys and the orders may be two stores (a host whose orders are its own, read by an
/// [`OrderStore`] of its own, beside the crate's keys): [`store`](Self::store) is the one the
/// key checks (and the other suites) ask, [`order_store`](Self::order_store) the one the page checks
/// ask; a store of both returns itself from each.
#[async_trait]
pub trait StoreFixtures: Send + Sync {
    /// The store under test: its keys, and what the other suites check.
    type Store: KeyStore;

    /// The store of orders under test.
    type Orders: OrderStore;

    /// The store under test.
    fn store(&self) -> &Self::Store;

    /// The store of orders under test.
    fn order_store(&self) -> &Self::Orders;

    /// Adds an organization.
    async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError>;

    /// Adds the API key `key` (plaintext; the store keeps what it keeps) for an organization,
    /// expiring at `expires_at` if given.
    async fn add_key(
        &self,
        key: &str,
        organization_id: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError>;

    /// Revokes the API key `key`.
    async fn revoke_key(&self, key: &str) -> Result<(), StoreError>;

    /// Adds orders to an organization.
    async fn add_orders(&self, organization_id: &str, orders: &[Order]) -> Result<(), StoreError>;

    /// Removes the order `order_id` of an organization.
    async fn remove_order(&self, organization_id: &str, order_id: &str) -> Result<(), StoreError>;

    /// Replaces an organization's order that has `order`'s id with `order` (the webhooks
    /// suite's `order.updated`).
    async fn update_order(&self, organization_id: &str, order: &Order) -> Result<(), StoreError>;
}

#[async_trait]
impl StoreFixtures for MemoryStore {
    type Store = Self;
    type Orders = Self;

    fn store(&self) -> &Self {
        self
    }

    fn order_store(&self) -> &Self {
        self
    }

    async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        MemoryStore::add_organization(self, organization.clone())
    }

    async fn add_key(
        &self,
        key: &str,
        organization_id: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        self.add_described_key(key, organization_id, None, expires_at)
            .map(drop)
    }

    async fn revoke_key(&self, key: &str) -> Result<(), StoreError> {
        MemoryStore::revoke_key(self, key);
        Ok(())
    }

    async fn add_orders(&self, organization_id: &str, orders: &[Order]) -> Result<(), StoreError> {
        MemoryStore::add_orders(self, organization_id, orders.iter().cloned())
    }

    async fn remove_order(&self, organization_id: &str, order_id: &str) -> Result<(), StoreError> {
        MemoryStore::remove_order(self, organization_id, order_id);
        Ok(())
    }

    async fn update_order(&self, organization_id: &str, order: &Order) -> Result<(), StoreError> {
        MemoryStore::update_order(self, organization_id, order.clone())
    }
}

#[cfg(feature = "postgres")]
#[async_trait]
impl StoreFixtures for crate::store::postgres::PgStore {
    type Store = Self;
    type Orders = Self;

    fn store(&self) -> &Self {
        self
    }

    fn order_store(&self) -> &Self {
        self
    }

    async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
        crate::store::postgres::PgStore::add_organization(self, organization).await
    }

    async fn add_key(
        &self,
        key: &str,
        organization_id: &str,
        expires_at: Option<Timestamp>,
    ) -> Result<(), StoreError> {
        self.add_expiring_key(key, organization_id, expires_at)
            .await
            .map(drop)
    }

    async fn revoke_key(&self, key: &str) -> Result<(), StoreError> {
        crate::store::postgres::PgStore::revoke_key(self, key)
            .await
            .map(drop)
    }

    async fn add_orders(&self, organization_id: &str, orders: &[Order]) -> Result<(), StoreError> {
        crate::store::postgres::PgStore::add_orders(self, organization_id, orders).await
    }

    async fn remove_order(&self, organization_id: &str, order_id: &str) -> Result<(), StoreError> {
        crate::store::postgres::PgStore::remove_order(self, organization_id, order_id)
            .await
            .map(drop)
    }

    async fn update_order(&self, organization_id: &str, order: &Order) -> Result<(), StoreError> {
        match crate::store::postgres::PgStore::update_order(self, organization_id, order).await? {
            true => Ok(()),
            false => Err(StoreError::not_found("no such order")),
        }
    }
}
