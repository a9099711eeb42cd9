//! The store calls the checks share, each failing as a check fails (`Err` with what went
//! wrong): an organization with a key, a lookup, a page of orders, an issued key.

use std::time::Duration;

use chrono::NaiveDate;

use super::report::{ensure, failed, Check};
use super::StoreFixtures;
use crate::key::KeyDigest;
use crate::model::{Order, OrderPage, Organization, Timestamp};
use crate::store::{IssuedKey, KeyManager, KeyRecord, NewKey, OrderQuery};
use crate::store::{KeyLookup, KeyStore, OrderStore, Principal};

/// How long the checks of expiry and overlap wait for a key to expire.
pub(super) const EXPIRY: Duration = Duration::from_millis(1500);

pub(super) async fn organization<F: StoreFixtures>(
    fixtures: &F,
    ns: &str,
    name: &str,
) -> Result<Organization, String> {
    let organization = Organization {
        id: format!("{ns}_{name}"),
        name: format!("Organization {name} «{ns}»"),
    };
    fixtures
        .add_organization(&organization)
        .await
        .map_err(failed("add_organization"))?;
    Ok(organization)
}

pub(super) async fn key<F: StoreFixtures>(
    fixtures: &F,
    ns: &str,
    name: &str,
    organization_id: &str,
) -> Result<String, String> {
    let key = format!("pk_test_{ns}_{name}");
    fixtures
        .add_key(&key, organization_id, None)
        .await
        .map_err(failed("add_key"))?;
    Ok(key)
}

/// An order created `millis` after 2026-01-01T00:00:00Z.
pub(super) fn order(id: String, millis: i64) -> Order {
    let start = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap_or_default();
    Order {
        providers: vec!["meta".into(), format!("provider-{}", millis % 7)],
        advertiser_name: format!("Advertiser of {id}"),
        campaign_name: format!("Campaign {id}"),
        budget_dkk: millis.unsigned_abs() % 1_000_000,
        start_date: start,
        end_date: start + chrono::Days::new(30),
        status: "booked".into(),
        external_reference: format!("PO-{id}"),
        created_at: Timestamp::from_unix_millis(1_767_225_600_000 + millis)
            .unwrap_or_else(|| Timestamp::from_datetime(chrono::DateTime::UNIX_EPOCH)),
        updated_at: None,
        id,
    }
}

/// The store's principal for `key`; as [`lookup_outcome`].
pub(super) async fn lookup<F: StoreFixtures>(
    fixtures: &F,
    key: &str,
) -> Result<Option<Principal>, String> {
    Ok(lookup_outcome(fixtures, key).await?.into_principal())
}

/// What the store knows of `key`, asked every way it answers: [`KeyStore::lookup`] and, when
/// the store answers at once, [`KeyStore::lookup_now`] must agree.
pub(super) async fn lookup_outcome<F: StoreFixtures>(
    fixtures: &F,
    key: &str,
) -> Result<KeyLookup, String> {
    let digest = KeyDigest::of(key);
    let store = fixtures.store();
    let found = store.lookup(&digest).await.map_err(failed("lookup"))?;
    if let Some(now) = store.lookup_now(&digest) {
        let now = now.map_err(failed("lookup_now"))?;
        ensure!(now == found, "lookup_now gave {now:?}, lookup {found:?}");
    }
    Ok(found)
}

/// The page `query` of `organization_id`, asked every way the store answers:
/// [`OrderStore::orders`] and, when the store answers at once, [`OrderStore::orders_now`]
/// must agree.
pub(super) async fn read_page<F: StoreFixtures>(
    fixtures: &F,
    organization_id: &str,
    query: &OrderQuery,
) -> Result<OrderPage, String> {
    let page = fixtures
        .order_store()
        .orders(organization_id, query)
        .await
        .map_err(failed("orders"))?;
    if let Some(now) = fixtures.order_store().orders_now(organization_id, query) {
        let now = now.map_err(failed("orders_now"))?;
        ensure!(
            now.json() == page.json() && now.has_more() == page.has_more(),
            "orders_now gave {now:?} (more: {}), orders {page:?} (more: {})",
            now.has_more(),
            page.has_more()
        );
    }
    ensure!(
        page.len() <= query.limit(),
        "a page of at most {} holds {}",
        query.limit(),
        page.len()
    );
    Ok(page)
}

pub(super) async fn read<F: StoreFixtures>(
    fixtures: &F,
    organization_id: &str,
    limit: usize,
) -> Result<Vec<Order>, String> {
    let orders = read_page(fixtures, organization_id, &OrderQuery::newest(limit)).await?;
    Ok(orders
        .orders()
        .iter()
        .map(|order| order.order().clone())
        .collect())
}

pub(super) fn ids(orders: &[Order]) -> Vec<&str> {
    orders.iter().map(|order| order.id.as_str()).collect()
}

/// `orders` as the store must return them: newest first, at most `limit`.
pub(super) fn expected(orders: &[Order], limit: usize) -> Vec<Order> {
    let mut sorted = orders.to_vec();
    sorted.sort_by(Order::cmp_newest_first);
    sorted.truncate(limit);
    sorted
}

pub(super) async fn add_orders<F: StoreFixtures>(
    fixtures: &F,
    organization_id: &str,
    orders: &[Order],
) -> Check {
    fixtures
        .add_orders(organization_id, orders)
        .await
        .map_err(failed("add_orders"))
}

/// Issues a key, failing as a check does.
pub(super) async fn issue<F>(
    fixtures: &F,
    organization_id: &str,
    new: NewKey,
) -> Result<IssuedKey, String>
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    fixtures
        .store()
        .issue(organization_id, new)
        .await
        .map_err(failed("issue"))
}

pub(super) async fn record_of<F>(
    fixtures: &F,
    organization_id: &str,
    key_id: &str,
) -> Result<KeyRecord, String>
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    fixtures
        .store()
        .get(organization_id, key_id)
        .await
        .map_err(failed("get"))
}

/// Whether `key` resolves to a principal of `organization`.
pub(super) async fn resolves<F: StoreFixtures>(
    fixtures: &F,
    key: &str,
    organization: &Organization,
) -> Result<bool, String> {
    Ok(lookup(fixtures, key)
        .await?
        .is_some_and(|principal| *principal.organization == *organization))
}
