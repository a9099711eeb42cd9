//! The conformance checks of filtered pages of orders (rule `filters-hold` of
//! [`OrderStore::orders`](crate::store::OrderStore::orders)) and of each order's last change
//! (rule `last-change`).

use super::calls::{add_orders, expected, ids, order, organization, read_page};
use super::namespace;
use super::pages::walk;
use super::report::{ensure, Check};
use super::StoreFixtures;
use crate::model::{Order, Timestamp};
use crate::store::{OrderFilter, OrderQuery};

/// A provider id with what SQL, an array's text and JSON quote: a quote, a backslash, braces,
/// a comma, double quotes, a dollar sign and a space.
const AWKWARD_PROVIDER: &str = "q4 it's \\ {a,\"b\"} $1";

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
            let second = match n % 5 {
                4 => AWKWARD_PROVIDER.to_owned(),
                family => format!("q{family}"),
            };
            order.providers = vec![format!("p{}", n % 4), second];
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
        OrderFilter::default().with_providers([AWKWARD_PROVIDER]),
        OrderFilter::default().with_providers(["q3", AWKWARD_PROVIDER, "p1"]),
        OrderFilter::default()
            .with_providers(["p1"])
            .with_updated_since(since)
            .with_updated_before(before),
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

/// Rule `last-change`: an order never changed has its creation as its last change
/// (`updatedAt`); an update that changes a field moves it to the time of the change (within
/// the clocks' slack of the test's), one that changes nothing leaves it; and the
/// `updated_since` and `updated_before` filters hold exactly the orders whose last change is
/// in their range, through pages.
pub(super) async fn last_change<F: StoreFixtures>(fixtures: &F) -> Check {
    const SLACK: std::time::Duration = std::time::Duration::from_secs(60);
    let ns = namespace();
    let org = organization(fixtures, &ns, "changes").await?;
    let written: Vec<Order> = (0..6_i64)
        .map(|n| order(format!("{ns}-{n}"), n * 1_000))
        .collect();
    add_orders(fixtures, &org.id, &written).await?;
    let changed_ids = [&written[1].id, &written[4].id];
    let before = Timestamp::now();
    for order in written
        .iter()
        .filter(|order| changed_ids.contains(&&order.id))
    {
        let changed = Order {
            status: "paused".into(),
            updated_at: None,
            ..order.clone()
        };
        fixtures
            .update_order(&org.id, &changed)
            .await
            .map_err(super::report::failed("update_order"))?;
    }
    let after = Timestamp::now();
    let read = read_page(fixtures, &org.id, &OrderQuery::default()).await?;
    let mut changed_at = Vec::new();
    for encoded in read.orders() {
        let order = encoded.order();
        let served: serde_json::Value =
            serde_json::from_slice(encoded.json()).map_err(|err| err.to_string())?;
        let last = order.last_changed_at();
        ensure!(
            served["updatedAt"] == last.to_string(),
            "order {:?} is served with updatedAt {}, not its last change {last}",
            order.id,
            served["updatedAt"]
        );
        if changed_ids.contains(&&order.id) {
            ensure!(
                last >= before.saturating_sub(SLACK) && last <= after.saturating_add(SLACK),
                "order {:?} changed between {before} and {after} has its last change at {last}",
                order.id
            );
            changed_at.push(last);
        } else {
            ensure!(
                last == order.created_at,
                "order {:?}, never changed, has its last change at {last}, not its creation",
                order.id
            );
        }
    }
    // A write that changes nothing is no change.
    let unchanged = Order {
        status: "paused".into(),
        ..written[1].clone()
    };
    fixtures
        .update_order(&org.id, &unchanged)
        .await
        .map_err(super::report::failed("update_order"))?;
    let again = read_page(fixtures, &org.id, &OrderQuery::default()).await?;
    ensure!(
        again.json() == read.json(),
        "an update that changed nothing changed the page"
    );
    let Some(since) = changed_at.iter().min().copied() else {
        return Err("the changed orders are not on the page".into());
    };
    let changed: Vec<Order> = written
        .iter()
        .filter(|order| changed_ids.contains(&&order.id))
        .cloned()
        .collect();
    let unchanged: Vec<Order> = written
        .iter()
        .filter(|order| !changed_ids.contains(&&order.id))
        .cloned()
        .collect();
    for (filter, want) in [
        (OrderFilter::default().with_updated_since(since), &changed),
        (
            OrderFilter::default().with_updated_before(since),
            &unchanged,
        ),
        (
            OrderFilter::default()
                .with_updated_since(written[0].created_at)
                .with_updated_before(written[3].created_at),
            &unchanged[..2].to_vec(),
        ),
        (
            OrderFilter::default()
                .with_updated_since(since)
                .with_statuses(["booked"]),
            &Vec::new(),
        ),
    ] {
        let want = expected(want, usize::MAX);
        for limit in [1, 100] {
            let read = walk(fixtures, &org.id, limit, &filter, &mut |_| (vec![], vec![])).await?;
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
