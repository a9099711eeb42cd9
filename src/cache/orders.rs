//! [`CachingOrderStore`]: each organization's pages of orders, encoded once.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use async_trait::async_trait;
use quick_cache::sync::Cache;

use super::notifications::{Gate, Invalidate, Mark, Notifications};
use super::DEFAULT_CAPACITY;
use crate::metrics::{self, CacheName, InvalidationScope};
use crate::model::{OrderPage, MAX_ORDERS};
use crate::store::OrderQuery;
use crate::store::{OrderStore, StoreError};

/// An [`OrderStore`] in front of another: pages of orders it has read before are answered at
/// once ([`OrderStore::orders_now`]) as the pages it read, encoded once, so `GET /orders`
/// serves ready bytes. The first page of [`MAX_ORDERS`] also answers every shorter unfiltered
/// first page (`limit` below it); a filtered page is kept as a page of its own. Per organization it keeps the first page and up to
/// [`MAX_LATER_PAGES_PER_ORGANIZATION`] later ones; at most `capacity` organizations are kept. A change to an
/// organization's orders drops all of its pages at once.
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

/// The most pages besides the default first page that the cache keeps per organization
/// (later pages, and first pages of another `limit`); past it, they start over (the default
/// first page stays).
pub const MAX_LATER_PAGES_PER_ORGANIZATION: usize = 16;

struct OrderCache {
    organizations: Cache<String, Arc<OrganizationPages>>,
    gate: Gate,
}

/// The pages kept of one organization, all dropped together when its orders change or the
/// first of them is too old: the default first page, and other pages (shorter first pages
/// among them) by their query.
#[derive(Default)]
struct OrganizationPages {
    /// The [`Mark::at`] of the first read kept: the age of every page counts from it.
    read_at: u64,
    first: OnceLock<OrderPage>,
    later: Mutex<HashMap<OrderQuery, OrderPage>>,
}

impl OrganizationPages {
    fn get(&self, query: &OrderQuery) -> Option<OrderPage> {
        if query.is_default_first_page() {
            return self.first.get().cloned();
        }
        if let Some(page) = self.later().get(query) {
            return Some(page.clone());
        }
        // A shorter unfiltered first page is the start of the default one: cut once, then
        // kept. A filtered page is only ever its own.
        let first = self.first.get()?;
        if query.position().is_some() || query.limit() > MAX_ORDERS || !query.filter().is_empty() {
            return None;
        }
        let page = first.truncated(query.limit());
        self.keep(query, &page);
        Some(page)
    }

    fn later(&self) -> std::sync::MutexGuard<'_, HashMap<OrderQuery, OrderPage>> {
        self.later.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn keep(&self, query: &OrderQuery, page: &OrderPage) {
        if query.is_default_first_page() {
            let _ = self.first.set(page.clone());
            return;
        }
        let mut later = self.later();
        if later.len() >= MAX_LATER_PAGES_PER_ORGANIZATION {
            later.clear();
        }
        later.insert(query.clone(), page.clone());
    }
}

impl<S: OrderStore> CachingOrderStore<S> {
    /// Creates a cache of [`DEFAULT_CAPACITY`] organizations in front of `inner`, which its
    /// host keeps informed of changes.
    pub fn new(inner: S) -> Self {
        Self::with_gate(inner, Gate::default(), DEFAULT_CAPACITY)
    }

    fn with_gate(inner: S, gate: Gate, capacity: usize) -> Self {
        let cache = Arc::new(OrderCache {
            organizations: Cache::new(capacity.max(1)),
            gate,
        });
        cache.gate.register(&cache);
        Self { inner, cache }
    }

    /// Keeps the pages of at most `capacity` organizations. Drops what the cache held.
    #[must_use]
    pub fn with_capacity(self, capacity: usize) -> Self {
        let gate = self.cache.gate.clone();
        Self::with_gate(self.inner, gate, capacity)
    }

    /// Follows `notifications`, as [`CachingKeyStore::with_notifications`](super::CachingKeyStore::with_notifications).
    #[must_use]
    pub fn with_notifications(self, notifications: &Notifications) -> Self {
        let capacity = self.cache.organizations.capacity() as usize;
        let gate = self.cache.gate.following(notifications);
        Self::with_gate(self.inner, gate, capacity)
    }

    /// Answers from a page for at most `max_age` after the read that made it, as
    /// [`CachingKeyStore::with_max_age`](super::CachingKeyStore::with_max_age). Drops what
    /// the cache held.
    #[must_use]
    pub fn with_max_age(self, max_age: std::time::Duration) -> Self {
        let capacity = self.cache.organizations.capacity() as usize;
        let gate = self.cache.gate.clone().with_max_age(max_age);
        Self::with_gate(self.inner, gate, capacity)
    }

    /// Forgets the pages of `organization_id`, whose orders changed.
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

impl OrderCache {
    /// The kept page `query` asks for, if the cache may answer (a hit).
    fn answer(&self, organization_id: &str, query: &OrderQuery) -> Option<OrderPage> {
        let now = self.gate.now_if_open()?;
        let pages = self.organizations.get(organization_id)?;
        if !self.gate.fresh(pages.read_at, now) {
            self.organizations.remove(organization_id);
            return None;
        }
        let page = pages.get(query)?;
        metrics::cache_hit(CacheName::Orders);
        Some(page)
    }

    /// Keeps what the store answered, unless a change came in since `mark`.
    fn keep(&self, organization_id: &str, query: &OrderQuery, page: &OrderPage, mark: Mark) {
        if !self.gate.unchanged_since(mark) {
            return;
        }
        let Ok(pages) = self.organizations.get_or_insert_with(organization_id, || {
            Ok::<_, std::convert::Infallible>(Arc::new(OrganizationPages {
                read_at: mark.at,
                ..OrganizationPages::default()
            }))
        });
        pages.keep(query, page);
        // A change that came in while keeping may have missed the new page.
        if !self.gate.unchanged_since(mark) {
            self.organizations.remove(organization_id);
        }
    }
}

impl Invalidate for OrderCache {
    fn key_changed(&self, _key_id: &str) {}

    fn orders_changed(&self, organization_id: &str) {
        self.gate.note_change();
        self.organizations.remove(organization_id);
        metrics::cache_invalidated(CacheName::Orders, InvalidationScope::Organization);
    }

    fn clear(&self) {
        self.gate.note_change();
        self.organizations.clear();
        metrics::cache_invalidated(CacheName::Orders, InvalidationScope::All);
    }
}

#[async_trait]
impl<S: OrderStore> OrderStore for CachingOrderStore<S> {
    async fn orders(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Result<OrderPage, StoreError> {
        if let Some(page) = self.cache.answer(organization_id, query) {
            return Ok(page);
        }
        metrics::cache_missed(CacheName::Orders);
        let mark = self.cache.gate.mark();
        let page = self.inner.orders(organization_id, query).await?;
        self.cache.keep(organization_id, query, &page, mark);
        Ok(page)
    }

    fn orders_now(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Option<Result<OrderPage, StoreError>> {
        self.cache.answer(organization_id, query).map(Ok)
    }
}

impl<S> fmt::Debug for CachingOrderStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingOrderStore")
            .field("organizations", &self.cache.organizations.len())
            .field("answering", &self.cache.gate.open())
            .field("max_age", &self.cache.gate.max_age())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::super::store_of_one_organization;
    use super::*;
    use crate::model::{Order, Timestamp};
    use crate::store::OrderPosition;

    fn order(id: &str, millis: i64) -> Order {
        let date = chrono::NaiveDate::from_ymd_opt(2026, 3, 1).unwrap();
        Order {
            id: id.into(),
            providers: vec![],
            advertiser_name: "A".into(),
            campaign_name: "C".into(),
            budget_dkk: 1,
            start_date: date,
            end_date: date,
            status: "booked".into(),
            external_reference: "PO".into(),
            created_at: Timestamp::from_unix_millis(1_767_225_600_000 + millis).unwrap(),
            updated_at: None,
        }
    }

    fn ids(page: &OrderPage) -> Vec<String> {
        page.orders().iter().map(|o| o.order().id.clone()).collect()
    }

    #[tokio::test]
    async fn later_pages_are_kept_and_dropped_with_their_organization() {
        let store = store_of_one_organization();
        store
            .add_orders("org", (0..10).map(|n| order(&format!("o{n}"), n)))
            .unwrap();
        let cache = CachingOrderStore::new(store.clone());
        let second = OrderQuery::after(OrderPosition::of(&order("o7", 7)), 3);
        let page = cache.orders("org", &second).await.unwrap();
        assert_eq!(ids(&page), ["o6", "o5", "o4"]);
        let shorter = OrderQuery::newest(2);
        assert!(
            cache.orders_now("org", &shorter).is_none(),
            "no first page yet"
        );
        cache.orders("org", &OrderQuery::default()).await.unwrap();
        // Kept: the later page as read, and a shorter first page cut from the first.
        let kept = cache.orders_now("org", &second).unwrap().unwrap();
        assert_eq!(ids(&kept), ["o6", "o5", "o4"]);
        let cut = cache.orders_now("org", &shorter).unwrap().unwrap();
        assert_eq!(
            (ids(&cut), cut.has_more()),
            (vec!["o9".into(), "o8".into()], true)
        );
        // A change drops every page of the organization at once.
        store.remove_order("org", "o5");
        cache.invalidate_organization("org");
        assert!(cache.orders_now("org", &second).is_none());
        let page = cache.orders("org", &second).await.unwrap();
        assert_eq!(ids(&page), ["o6", "o4", "o3"]);
    }

    #[tokio::test]
    async fn a_filtered_first_page_is_its_own_never_cut_from_the_unfiltered_one() {
        let store = store_of_one_organization();
        store
            .add_orders(
                "org",
                (0..10).map(|n| {
                    let mut order = order(&format!("o{n}"), n);
                    order.status = if n % 2 == 0 { "running" } else { "booked" }.into();
                    order
                }),
            )
            .unwrap();
        let cache = CachingOrderStore::new(store.clone());
        cache.orders("org", &OrderQuery::default()).await.unwrap();
        let running = OrderQuery::newest(3)
            .with_filter(crate::store::OrderFilter::default().with_statuses(["running"]));
        assert!(
            cache.orders_now("org", &running).is_none(),
            "not cut from the unfiltered first page"
        );
        let page = cache.orders("org", &running).await.unwrap();
        assert_eq!(ids(&page), ["o8", "o6", "o4"]);
        let kept = cache.orders_now("org", &running).unwrap().unwrap();
        assert_eq!(ids(&kept), ["o8", "o6", "o4"]);
    }
}
