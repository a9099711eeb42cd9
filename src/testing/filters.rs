//! The conformance check of filtered pages of orders (rule `filters-hold` of
//! [`OrderStore::orders`](crate::store::OrderStore::orders)).

use super::calls::{add_orders, expected, ids, order, organization, read_page};
use super::namespace;
use super::pages::walk;
use super::report::{ensure, Check};
use super::StoreFixtures;
use crate::model::Order;
use crate::store::{OrderFilter, OrderQuery};

/// For every kind of filter and their combination, at page sizes that cut through ties, the
/// walk of filtered pages holds exactly the orders the filter holds, newest first, once each.
pub(super) async fn filters_hold<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "filters").await?;
    // 60 orders at 30 instants (ties in pairs), three statuses, providers of two families.
    let written: Vec<Order> = (0..60_usize)
        .map(|n| {
            let mut order = order(
                format!("{ns}-{n:02}"),
                i64::try_from(n / 2).unwrap_or(0) * 1_000,
            );
            order.status = ["booked", "running", "paused"][n % 3].into();
            order.providers = vec![format!("p{}", n % 4), format!("q{}", n % 5)];
            order
        })
        .collect();
    add_orders(fixtures, &org.id, &written).await?;
    // The unfiltered first page read first, as a client would: a store that keeps pages
    // (a cache) must not answer a filtered one from it.
    read_page(fixtures, &org.id, &OrderQuery::default()).await?;
    let (since, before) = (written[10].created_at, written[50].created_at);
    let filters = [
        OrderFilter::default().with_statuses(["running"]),
        OrderFilter::default().with_statuses(["running", "paused"]),
        OrderFilter::default().with_providers(["p1"]),
        OrderFilter::default().with_providers(["p1", "q3"]),
        OrderFilter::default().with_created_since(since),
        OrderFilter::default().with_created_before(before),
        OrderFilter::default()
            .with_created_since(since)
            .with_created_before(before),
        OrderFilter::default()
            .with_statuses(["booked", "paused"])
            .with_providers(["p0", "q2"])
            .with_created_since(since)
            .with_created_before(before),
        OrderFilter::default().with_statuses(["cancelled"]),
    ];
    for filter in &filters {
        let held: Vec<Order> = written
            .iter()
            .filter(|order| filter.holds(order))
            .cloned()
            .collect();
        let want = expected(&held, usize::MAX);
        for limit in [1, 7, 100] {
            let read = walk(fixtures, &org.id, limit, filter, &mut |_| (vec![], vec![])).await?;
            ensure!(
                ids(&read) == ids(&want),
                "{filter:?} in pages of {limit} read {:?}, want {:?}",
                ids(&read),
                ids(&want)
            );
        }
    }
    Ok(())
}
