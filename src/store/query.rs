//! [`OrderQuery`], [`OrderPosition`] and [`OrderFilter`]: which page of an organization's
//! orders a store reads, and which of its orders the page holds.

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

/// Which of an organization's orders a page holds: `GET /orders`' filters, combined with AND.
/// An empty filter (the default) holds every order.
///
/// ```
/// use partner_api::store::OrderFilter;
/// use partner_api::Timestamp;
///
/// let since: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
/// let filter = OrderFilter::default()
///     .with_statuses(["running", "paused"])
///     .with_created_since(since);
/// assert!(!filter.is_empty());
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct OrderFilter {
    statuses: Vec<String>,
    providers: Vec<String>,
    created_since: Option<Timestamp>,
    created_before: Option<Timestamp>,
    updated_since: Option<Timestamp>,
    updated_before: Option<Timestamp>,
    /// Whether `providers` are the reading key's own list (set by the API, not by a request's
    /// filter): a list of the host's making, of which there are as many as keys, where a
    /// request's filter can name any. PostgreSQL keeps a statement per such list.
    providers_of_key: bool,
}

impl OrderFilter {
    /// Holds only orders whose status is one of `statuses` (none: any status); a status
    /// given twice counts once.
    #[must_use]
    pub fn with_statuses<S: Into<String>>(mut self, statuses: impl IntoIterator<Item = S>) -> Self {
        self.statuses = distinct(statuses);
        self
    }

    /// Holds only orders whose providers include one of `providers` (none: any providers); a
    /// provider given twice counts once.
    #[must_use]
    pub fn with_providers<S: Into<String>>(
        mut self,
        providers: impl IntoIterator<Item = S>,
    ) -> Self {
        self.providers = distinct(providers);
        self.providers_of_key = false;
        self
    }

    /// Holds only orders whose providers include one of `providers`, the reading key's own
    /// list ([`Principal::providers`](crate::Principal::providers)), as the API asks a store
    /// for the pages of a key limited to providers. Like
    /// [`with_providers`](Self::with_providers), and the list is marked as a key's
    /// ([`providers_are_the_keys`](Self::providers_are_the_keys)).
    #[must_use]
    pub fn with_key_providers(mut self, providers: &[String]) -> Self {
        self.providers = distinct(providers.iter().cloned());
        self.providers_of_key = true;
        self
    }

    /// Whether the providers are a key's own list ([`with_key_providers`](Self::with_key_providers)),
    /// not a request's `provider` filter: one of as many lists as the host made keys, where a
    /// request can name any. A store may keep what it prepares for such a list (the
    /// PostgreSQL store keeps a statement per list and connection); a request's list it should
    /// not.
    pub fn providers_are_the_keys(&self) -> bool {
        self.providers_of_key && !self.providers.is_empty()
    }

    /// Holds only orders created at or after `since`.
    #[must_use]
    pub fn with_created_since(mut self, since: Timestamp) -> Self {
        self.created_since = Some(since);
        self
    }

    /// Holds only orders created before `before`.
    #[must_use]
    pub fn with_created_before(mut self, before: Timestamp) -> Self {
        self.created_before = Some(before);
        self
    }

    /// Holds only orders that last changed ([`Order::last_changed_at`]) at or after `since`.
    #[must_use]
    pub fn with_updated_since(mut self, since: Timestamp) -> Self {
        self.updated_since = Some(since);
        self
    }

    /// Holds only orders that last changed before `before`.
    #[must_use]
    pub fn with_updated_before(mut self, before: Timestamp) -> Self {
        self.updated_before = Some(before);
        self
    }

    /// The earliest last change held ([`Order::last_changed_at`]), inclusive.
    pub fn updated_since(&self) -> Option<Timestamp> {
        self.updated_since
    }

    /// The last change from which no order is held (exclusive).
    pub fn updated_before(&self) -> Option<Timestamp> {
        self.updated_before
    }

    /// The statuses an order may have (empty: any).
    pub fn statuses(&self) -> &[String] {
        &self.statuses
    }

    /// The providers of which an order must have one (empty: any).
    pub fn providers(&self) -> &[String] {
        &self.providers
    }

    /// The earliest `createdAt` held, inclusive.
    pub fn created_since(&self) -> Option<Timestamp> {
        self.created_since
    }

    /// The `createdAt` from which no order is held (exclusive).
    pub fn created_before(&self) -> Option<Timestamp> {
        self.created_before
    }

    /// Whether the filter holds every order.
    pub fn is_empty(&self) -> bool {
        self.statuses.is_empty()
            && self.providers.is_empty()
            && self.created_since.is_none()
            && self.created_before.is_none()
            && self.updated_since.is_none()
            && self.updated_before.is_none()
    }

    /// Whether the filter holds `order`: what a store that filters in memory asks of each.
    pub fn holds(&self, order: &Order) -> bool {
        (self.statuses.is_empty() || self.statuses.contains(&order.status))
            && (self.providers.is_empty()
                || order.providers.iter().any(|p| self.providers.contains(p)))
            && self
                .created_since
                .is_none_or(|since| order.created_at >= since)
            && self
                .created_before
                .is_none_or(|before| order.created_at < before)
            && self
                .updated_since
                .is_none_or(|since| order.last_changed_at() >= since)
            && self
                .updated_before
                .is_none_or(|before| order.last_changed_at() < before)
    }
}

/// `values`, each once, in the order first given: a store may ask for each in turn (one scan
/// per status) without reading an order twice.
fn distinct<S: Into<String>>(values: impl IntoIterator<Item = S>) -> Vec<String> {
    let mut kept: Vec<String> = Vec::new();
    for value in values {
        let value = value.into();
        if !kept.contains(&value) {
            kept.push(value);
        }
    }
    kept
}

/// Which page of an organization's orders to read: at most [`limit`](Self::limit) orders that
/// the [`filter`](Self::filter) holds, from the newest, or from the first after a position.
///
/// ```
/// use partner_api::store::OrderQuery;
///
/// let first = OrderQuery::newest(100);
/// assert_eq!((first.limit(), first.position()), (100, None));
/// assert!(first.filter().is_empty());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct OrderQuery {
    after: Option<OrderPosition>,
    limit: usize,
    /// Boxed, and only when there is one: an unfiltered query allocates nothing for it.
    filter: Option<Box<OrderFilter>>,
}

/// The filter of an unfiltered query.
static NO_FILTER: OrderFilter = OrderFilter {
    statuses: Vec::new(),
    providers: Vec::new(),
    created_since: None,
    created_before: None,
    updated_since: None,
    updated_before: None,
    providers_of_key: false,
};

impl OrderQuery {
    /// The newest `limit` orders: the first page.
    pub fn newest(limit: usize) -> Self {
        Self {
            after: None,
            limit,
            filter: None,
        }
    }

    /// The first `limit` orders after `position`.
    pub fn after(position: OrderPosition, limit: usize) -> Self {
        Self {
            after: Some(position),
            limit,
            filter: None,
        }
    }

    /// The same page, of the orders `filter` holds only.
    #[must_use]
    pub fn with_filter(mut self, filter: OrderFilter) -> Self {
        self.filter = (!filter.is_empty()).then(|| Box::new(filter));
        self
    }

    /// Which orders the page holds.
    pub fn filter(&self) -> &OrderFilter {
        self.filter.as_deref().unwrap_or(&NO_FILTER)
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
        self.after.is_none() && self.limit == MAX_ORDERS && self.filter.is_none()
    }
}

impl Default for OrderQuery {
    /// The first page of [`MAX_ORDERS`] orders: what `GET /orders` without parameters reads.
    fn default() -> Self {
        Self::newest(MAX_ORDERS)
    }
}
