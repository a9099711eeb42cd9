//! [`CachingOrderStore`]: each organization's newest page of orders, encoded once.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use quick_cache::sync::Cache;

use super::freshness::{Gate, Invalidate, Notifications};
use super::DEFAULT_CAPACITY;
use crate::metrics::{self, CacheName, InvalidationScope};
use crate::model::{OrderPage, MAX_ORDERS};
use crate::store::{OrderStore, StoreError};

/// An [`OrderStore`] in front of another: the newest [`MAX_ORDERS`] orders of an organization
/// it has read before are answered at once ([`OrderStore::newest_orders_now`]) as the page
/// it read, encoded once, so `GET /orders` serves ready bytes. At most `capacity`
/// organizations are kept; other limits than [`MAX_ORDERS`] go to the inner store.
///
/// The host tells it when an organization's orders change
/// ([`invalidate_organization`](Self::invalidate_organization)), or it follows a
/// [`Notifications`] hub ([`with_notifications`](Self::with_notifications)), as
/// [`CachingKeyStore`](super::CachingKeyStore) does. Clones share the cache.
#[derive(Clone)]
pub struct CachingOrderStore<S> {
    inner: S,
    cache: Arc<OrderCache>,
}

struct OrderCache {
    pages: Cache<String, OrderPage>,
    gate: Gate,
}

impl<S: OrderStore> CachingOrderStore<S> {
    /// Creates a cache of [`DEFAULT_CAPACITY`] organizations in front of `inner`, which its
    /// host keeps informed of changes.
    pub fn new(inner: S) -> Self {
        Self::with_gate(inner, Gate::default(), DEFAULT_CAPACITY)
    }

    fn with_gate(inner: S, gate: Gate, capacity: usize) -> Self {
        let cache = Arc::new(OrderCache {
            pages: Cache::new(capacity.max(1)),
            gate,
        });
        cache.gate.register(&cache);
        Self { inner, cache }
    }

    /// Keeps at most `capacity` organizations' pages. Drops what the cache held.
    #[must_use]
    pub fn with_capacity(self, capacity: usize) -> Self {
        let gate = self.cache.gate.clone();
        Self::with_gate(self.inner, gate, capacity)
    }

    /// Follows `notifications`, as [`CachingKeyStore::with_notifications`](super::CachingKeyStore::with_notifications).
    #[must_use]
    pub fn with_notifications(self, notifications: &Notifications) -> Self {
        let capacity = self.cache.pages.capacity() as usize;
        Self::with_gate(self.inner, Gate::following(notifications), capacity)
    }

    /// Forgets the page of `organization_id`, whose orders changed.
    pub fn invalidate_organization(&self, organization_id: &str) {
        self.cache.orders_changed(organization_id);
    }

    /// Forgets every page.
    pub fn invalidate_all(&self) {
        self.cache.clear();
    }

    /// Returns the wrapped store.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl Invalidate for OrderCache {
    fn key_changed(&self, _key_id: &str) {}

    fn orders_changed(&self, organization_id: &str) {
        self.gate.note_change();
        self.pages.remove(organization_id);
        metrics::cache_invalidated(CacheName::Orders, InvalidationScope::Organization);
    }

    fn clear(&self) {
        self.gate.note_change();
        self.pages.clear();
        metrics::cache_invalidated(CacheName::Orders, InvalidationScope::All);
    }
}

#[async_trait]
impl<S: OrderStore> OrderStore for CachingOrderStore<S> {
    async fn newest_orders(
        &self,
        organization_id: &str,
        limit: usize,
    ) -> Result<OrderPage, StoreError> {
        if let Some(Ok(page)) = self.newest_orders_now(organization_id, limit) {
            return Ok(page);
        }
        metrics::cache_missed(CacheName::Orders);
        let mark = self.cache.gate.mark();
        let page = self.inner.newest_orders(organization_id, limit).await?;
        if limit == MAX_ORDERS && self.cache.gate.unchanged_since(mark) {
            self.cache
                .pages
                .insert(organization_id.to_owned(), page.clone());
            if !self.cache.gate.unchanged_since(mark) {
                self.cache.pages.remove(organization_id);
            }
        }
        Ok(page)
    }

    fn newest_orders_now(
        &self,
        organization_id: &str,
        limit: usize,
    ) -> Option<Result<OrderPage, StoreError>> {
        if limit != MAX_ORDERS || !self.cache.gate.open() {
            return None;
        }
        let page = self.cache.pages.get(organization_id)?;
        metrics::cache_hit(CacheName::Orders);
        Some(Ok(page))
    }
}

impl<S> fmt::Debug for CachingOrderStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingOrderStore")
            .field("organizations", &self.cache.pages.len())
            .field("answering", &self.cache.gate.open())
            .finish_non_exhaustive()
    }
}
