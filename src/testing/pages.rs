//! The conformance checks of pages of orders ([`OrderStore::orders`] after a position), and
//! of the expiry a key store reports.

use std::time::Duration;

use super::calls::{
    add_orders, expected, ids, key, lookup_outcome, order, organization, read_page,
};
use super::namespace;
use super::report::{ensure, failed, Check};
use super::StoreFixtures;
use crate::model::{Order, Timestamp};
use crate::store::KeyLookup;
#[cfg(doc)]
use crate::store::OrderStore;
use crate::store::{OrderFilter, OrderPosition, OrderQuery};

/// What happens between two pages of a walk: orders added and ids removed after the page of
/// that number was read.
type Between<'a> = &'a mut (dyn FnMut(usize) -> (Vec<Order>, Vec<String>) + Send);

/// Reads every page of `limit` orders of `organization_id` that `filter` holds, from the
/// first, and returns the orders in the order read; every page but the last is full and says
/// more follow.
pub(super) async fn walk<F: StoreFixtures>(
    fixtures: &F,
    organization_id: &str,
    limit: usize,
    filter: &OrderFilter,
    between: Between<'_>,
) -> Result<Vec<Order>, String> {
    let mut read = Vec::new();
    let mut query = OrderQuery::newest(limit).with_filter(filter.clone());
    // A store that never ends a walk (one that ignores positions) is caught here.
    for number in 0_usize..1_000 {
        let page = read_page(fixtures, organization_id, &query).await?;
        read.extend(page.orders().iter().map(|order| order.order().clone()));
        let last = page
            .orders()
            .last()
            .map(|order| OrderPosition::of(order.order()));
        let (added, removed) = between(number);
        if !added.is_empty() {
            add_orders(fixtures, organization_id, &added).await?;
        }
        for id in removed {
            fixtures
                .remove_order(organization_id, &id)
                .await
                .map_err(failed("remove_order"))?;
        }
        if !page.has_more() {
            return Ok(read);
        }
        ensure!(
            page.len() == limit,
            "page {number} holds {} of {limit} orders but says more follow",
            page.len()
        );
        let last = last.ok_or_else(|| format!("page {number} is empty but says more follow"))?;
        query = OrderQuery::after(last, limit).with_filter(filter.clone());
    }
    Err("the walk did not end within 1,000 pages".into())
}

/// Every order exactly once, newest first, for page sizes whose edges cut through ties in
/// `createdAt`; the last page says no more follow.
pub(super) async fn pages_cover_every_order_once<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    for limit in [1, 3, 4, 35, 100] {
        let org = organization(fixtures, &ns, &format!("l{limit}")).await?;
        // 7 instants, 5 orders each.
        let written: Vec<Order> = (0..35_i64)
            .map(|n| {
                order(
                    format!("{ns}-{limit}-{:02}", (n * 13) % 35),
                    (n / 5) * 1_000,
                )
            })
            .collect();
        add_orders(fixtures, &org.id, &written).await?;
        let read = walk(
            fixtures,
            &org.id,
            limit,
            &OrderFilter::default(),
            &mut |_| (vec![], vec![]),
        )
        .await?;
        let want = expected(&written, usize::MAX);
        ensure!(
            ids(&read) == ids(&want),
            "limit {limit}: read {:?}, want {:?}",
            ids(&read),
            ids(&want)
        );
    }
    Ok(())
}

/// Orders created after the first page was read never shift or repeat later pages, and an
/// order deleted between pages neither breaks the walk (when it was the position) nor shows.
pub(super) async fn pages_hold_across_changes<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let written: Vec<Order> = (0..20_i64)
        .map(|n| order(format!("{ns}-{n:02}"), (n / 2) * 1_000))
        .collect();
    add_orders(fixtures, &org.id, &written).await?;
    let want = expected(&written, usize::MAX);
    // After page 0: a newer order, the removal of page 0's last order (the position of
    // page 1) and of the first order of page 2.
    let (position_id, later_id) = (want[3].id.clone(), want[8].id.clone());
    let newer = order(format!("{ns}-newer"), 1_000_000);
    let read = walk(
        fixtures,
        &org.id,
        4,
        &OrderFilter::default(),
        &mut |number| match number {
            0 => (
                vec![newer.clone()],
                vec![position_id.clone(), later_id.clone()],
            ),
            _ => (vec![], vec![]),
        },
    )
    .await?;
    let expected: Vec<&str> = ids(&want)
        .into_iter()
        .filter(|id| *id != later_id)
        .collect();
    ensure!(
        ids(&read) == expected,
        "read {:?}, want {expected:?} (a newer order and two removals after page 0)",
        ids(&read)
    );
    Ok(())
}

/// 10,000 orders, with ties, in pages of 100: each exactly once, newest first.
pub(super) async fn ten_thousand_orders<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let written: Vec<Order> = (0..10_000_i64)
        .map(|n| order(format!("{ns}-{n:05}"), (n / 3) * 10))
        .collect();
    add_orders(fixtures, &org.id, &written).await?;
    let read = walk(fixtures, &org.id, 100, &OrderFilter::default(), &mut |_| {
        (vec![], vec![])
    })
    .await?;
    let want = expected(&written, usize::MAX);
    ensure!(
        read.len() == want.len() && ids(&read) == ids(&want),
        "read {} orders, want {}, or another order",
        read.len(),
        want.len()
    );
    Ok(())
}

/// A key store reports the expiry a key was given (caches enforce it on every hit), and an
/// expired key is not valid.
pub(super) async fn expiry_is_reported<F: StoreFixtures>(fixtures: &F) -> Check {
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let later = Timestamp::now().saturating_add(Duration::from_secs(86_400));
    let expiring = format!("pk_test_{ns}_expiring");
    fixtures
        .add_key(&expiring, &org.id, Some(later))
        .await
        .map_err(failed("add_key"))?;
    match lookup_outcome(fixtures, &expiring).await? {
        KeyLookup::Valid(principal) => ensure!(
            principal.expires_at == Some(later),
            "a key expiring at {later} resolved with expiry {:?}",
            principal.expires_at
        ),
        other => return Err(format!("a key expiring tomorrow is {other:?}")),
    }
    let expired = format!("pk_test_{ns}_expired");
    let past = Timestamp::from_datetime(
        Timestamp::now().as_datetime() - chrono::TimeDelta::milliseconds(1),
    );
    fixtures
        .add_key(&expired, &org.id, Some(past))
        .await
        .map_err(failed("add_key"))?;
    let found = lookup_outcome(fixtures, &expired).await?;
    ensure!(
        matches!(found, KeyLookup::Expired { .. } | KeyLookup::Unknown),
        "an expired key is {found:?}"
    );
    let plain = key(fixtures, &ns, "plain", &org.id).await?;
    let found = lookup_outcome(fixtures, &plain).await?;
    ensure!(
        found.principal().is_some_and(|p| p.expires_at.is_none()),
        "a key without expiry is {found:?}"
    );
    Ok(())
}
