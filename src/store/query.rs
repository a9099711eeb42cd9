//! [`OrderQuery`] and [`OrderPosition`]: which page of an organization's orders a store reads.

use crate::model::{Order, Timestamp, MAX_ORDERS};

/// A place in an organization's orders, in the order the API serves them (newest
/// `createdAt` first, ties by `id` descending in byte order): the keyset of the last order
/// of a page, after which the next page starts.
///
/// It names a position, not an order that must still exist: orders created or deleted
/// around it never shift what comes after it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OrderPosition {
    /// The `createdAt` of the order at the position.
    pub created_at: Timestamp,
    /// The `id` of the order at the position.
    pub id: String,
}

impl OrderPosition {
    /// The position of `order`.
    pub fn of(order: &Order) -> Self {
        Self {
            created_at: order.created_at,
            id: order.id.clone(),
        }
    }

    /// Whether `order` comes after this position in the served order (it is older, or as
    /// old with a smaller id in byte order): the orders a page after this position holds.
    pub fn precedes(&self, order: &Order) -> bool {
        (order.created_at, order.id.as_bytes()) < (self.created_at, self.id.as_bytes())
    }
}

/// Which page of an organization's orders to read: at most [`limit`](Self::limit) orders,
/// from the newest, or from the first after a position.
///
/// ```
/// use partner_api::store::OrderQuery;
///
/// let first = OrderQuery::newest(100);
/// assert_eq!((first.limit(), first.position()), (100, None));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OrderQuery {
    after: Option<OrderPosition>,
    limit: usize,
}

impl OrderQuery {
    /// The newest `limit` orders: the first page.
    pub fn newest(limit: usize) -> Self {
        Self { after: None, limit }
    }

    /// The first `limit` orders after `position`.
    pub fn after(position: OrderPosition, limit: usize) -> Self {
        Self {
            after: Some(position),
            limit,
        }
    }

    /// The position the page starts after, or `None` for the first page.
    pub fn position(&self) -> Option<&OrderPosition> {
        self.after.as_ref()
    }

    /// The most orders the page holds.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether this is the first page of the API's default size: what `GET /orders` without
    /// parameters reads, and what caches keep ready.
    pub fn is_default_first_page(&self) -> bool {
        self.after.is_none() && self.limit == MAX_ORDERS
    }
}

impl Default for OrderQuery {
    /// The first page of [`MAX_ORDERS`] orders: what `GET /orders` without parameters reads.
    fn default() -> Self {
        Self::newest(MAX_ORDERS)
    }
}
