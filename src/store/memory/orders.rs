//! One organization's orders in the memory store: sorted newest first, with the first page
//! kept ready.

use std::collections::HashSet;

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
