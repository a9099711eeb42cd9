//! One organization's orders in the memory store: sorted newest first, with the first page
//! kept ready and the other pages read since the last write kept too.

use std::collections::{HashSet, VecDeque};
use std::sync::{Mutex, PoisonError};

use crate::model::{EncodedOrder, OrderPage, MAX_ORDERS};
use crate::store::OrderQuery;
use crate::store::StoreError;

#[derive(Clone, Default)]
pub(super) struct OrganizationOrders {
    newest_first: Vec<EncodedOrder>,
    ids: HashSet<String>,
    /// The page of the newest [`MAX_ORDERS`], what `GET /orders` reads; rebuilt on write, so
    /// a read is two reference-count increments.
    newest_page: OrderPage,
    /// The other pages read since the last write (a key's view of providers, a filter, a later
    /// page), as [`CachingOrderStore`](crate::cache::CachingOrderStore) keeps them in front of
    /// a database: a page read again is the same page, with what was worked out for it (its
    /// tag, older versions' renditions) instead of a scan and all that afresh.
    recent_pages: RecentPages,
}

/// The most pages [`RecentPages`] keeps; past it, the oldest kept goes.
const MAX_RECENT_PAGES: usize = 8;

/// Pages by the query that read them. A write makes a new [`OrganizationOrders`], whose clone
/// of this starts empty: a kept page is always of the orders it was read from.
#[derive(Default)]
struct RecentPages(Mutex<VecDeque<(OrderQuery, OrderPage)>>);

impl Clone for RecentPages {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl RecentPages {
    fn page(&self, query: &OrderQuery, read: impl FnOnce() -> OrderPage) -> OrderPage {
        let kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, page)) = kept.iter().find(|(asked, _)| asked == query) {
            return page.clone();
        }
        // Read without the lock held: readers of other pages do not wait on the scan.
        drop(kept);
        let page = read();
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !kept.iter().any(|(asked, _)| asked == query) {
            if kept.len() == MAX_RECENT_PAGES {
                kept.pop_front();
            }
            kept.push_back((query.clone(), page.clone()));
        }
        page
    }
}

impl OrganizationOrders {
    /// The number of orders.
    pub(super) fn len(&self) -> usize {
        self.newest_first.len()
    }

    /// These orders and `added`, or an error naming the first id that would repeat.
    pub(super) fn with(
        &self,
        organization_id: &str,
        added: &[EncodedOrder],
    ) -> Result<Self, StoreError> {
        let mut next = self.clone();
        for order in added {
            let id = &order.order().id;
            if !next.ids.insert(id.clone()) {
                return Err(StoreError::invalid_data(format!(
                    "organization {organization_id:?} has an order {id:?}"
                )));
            }
        }
        if let [order] = added {
            let at = next
                .newest_first
                .partition_point(|held| held.order().cmp_newest_first(order.order()).is_lt());
            next.newest_first.insert(at, order.clone());
        } else {
            next.newest_first.extend_from_slice(added);
            next.newest_first
                .sort_by(|a, b| a.order().cmp_newest_first(b.order()));
        }
        next.refresh_newest_page();
        Ok(next)
    }

    /// The order `order_id`, if held.
    pub(super) fn get(&self, order_id: &str) -> Option<&EncodedOrder> {
        if !self.ids.contains(order_id) {
            return None;
        }
        self.newest_first
            .iter()
            .find(|order| order.order().id == order_id)
    }

    /// These orders without the order `order_id`, if they hold it.
    pub(super) fn without(&self, order_id: &str) -> Option<Self> {
        if !self.ids.contains(order_id) {
            return None;
        }
        let mut next = self.clone();
        next.ids.remove(order_id);
        next.newest_first
            .retain(|order| order.order().id != order_id);
        next.refresh_newest_page();
        Some(next)
    }

    fn refresh_newest_page(&mut self) {
        let end = self.newest_first.len().min(MAX_ORDERS + 1);
        self.newest_page = OrderPage::first(self.newest_first[..end].to_vec(), MAX_ORDERS);
    }

    /// The page `query` asks for.
    pub(super) fn page(&self, query: &OrderQuery) -> OrderPage {
        if query.is_default_first_page() {
            return self.newest_page.clone();
        }
        self.recent_pages.page(query, || self.read_page(query))
    }

    fn read_page(&self, query: &OrderQuery) -> OrderPage {
        let start = query.position().map_or(0, |position| {
            self.newest_first
                .partition_point(|held| !position.precedes(held.order()))
        });
        let filter = query.filter();
        if filter.is_empty() {
            let end = self
                .newest_first
                .len()
                .min(start.saturating_add(query.limit()).saturating_add(1));
            return OrderPage::first(self.newest_first[start..end].to_vec(), query.limit());
        }
        // In memory, a filtered page is a scan from the position: it stops at the first order
        // past the page, or past `created_since` (older orders cannot be held).
        let held = self.newest_first[start..]
            .iter()
            .filter(|held| {
                filter
                    .created_before()
                    .is_none_or(|before| held.order().created_at < before)
            })
            .take_while(|held| {
                filter
                    .created_since()
                    .is_none_or(|since| held.order().created_at >= since)
            })
            .filter(|held| filter.holds(held.order()))
            .take(query.limit().saturating_add(1))
            .cloned()
            .collect();
        OrderPage::first(held, query.limit())
    }
}
