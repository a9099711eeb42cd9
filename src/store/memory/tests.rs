//! Unit tests of the memory store.

use super::*;
use crate::model::Timestamp;
use crate::model::MAX_ORDERS;
use crate::store::{EventFeed, EventQuery};

fn order(id: &str, millis: i64) -> Order {
    Order {
        id: id.to_owned(),
        providers: vec![],
        advertiser_name: "A".to_owned(),
        campaign_name: "C".to_owned(),
        budget_dkk: 1,
        start_date: chrono::NaiveDate::from_ymd_opt(2026, 1, 1).unwrap(),
        end_date: chrono::NaiveDate::from_ymd_opt(2026, 1, 2).unwrap(),
        status: "booked".to_owned(),
        external_reference: "X".to_owned(),
        created_at: Timestamp::from_unix_millis(millis).unwrap(),
        updated_at: None,
    }
}

fn store() -> MemoryStore {
    let store = MemoryStore::new();
    for id in ["a", "b"] {
        store
            .add_organization(Organization {
                id: id.to_owned(),
                name: id.to_uppercase(),
            })
            .unwrap();
    }
    store
}

async fn ids(store: &MemoryStore, org: &str, limit: usize) -> Vec<String> {
    store
        .orders(org, &OrderQuery::newest(limit))
        .await
        .unwrap()
        .orders()
        .iter()
        .map(|o| o.order().id.clone())
        .collect()
}

#[tokio::test]
async fn single_and_bulk_inserts_keep_newest_first_with_id_tie_break() {
    let store = store();
    store.add_order("a", order("o2", 10)).unwrap();
    store.add_order("a", order("o9", 30)).unwrap();
    store.add_order("a", order("o1", 20)).unwrap();
    store.add_order("a", order("o3", 20)).unwrap();
    store
        .add_orders("a", [order("o0", 20), order("o5", 5)])
        .unwrap();
    assert_eq!(
        ids(&store, "a", 100).await,
        ["o9", "o3", "o1", "o0", "o2", "o5"]
    );
    assert_eq!(ids(&store, "a", 2).await, ["o9", "o3"]);
    assert!(ids(&store, "b", 100).await.is_empty());
    assert!(ids(&store, "nope", 100).await.is_empty());
}

#[tokio::test]
async fn the_cached_newest_page_follows_every_insert() {
    let store = store();
    let many: Vec<Order> = (0..150).map(|n| order(&format!("m{n:03}"), n)).collect();
    store.add_orders("a", many).unwrap();
    let page = store
        .orders("a", &OrderQuery::newest(MAX_ORDERS))
        .await
        .unwrap();
    assert_eq!(page.len(), MAX_ORDERS);
    assert_eq!(page.orders()[0].order().id, "m149");
    store.add_order("a", order("newest", 1_000)).unwrap();
    let page = store
        .orders("a", &OrderQuery::newest(MAX_ORDERS))
        .await
        .unwrap();
    assert_eq!(page.len(), MAX_ORDERS);
    assert_eq!(page.orders()[0].order().id, "newest");
    assert_eq!(page.orders()[99].order().id, "m051");
    assert_eq!(ids(&store, "a", 3).await, ["newest", "m149", "m148"]);
}

#[tokio::test]
async fn a_kept_page_is_the_same_page_until_a_write_and_never_after() {
    let store = store();
    let meta = |id: &str, millis| Order {
        providers: vec!["meta".to_owned()],
        ..order(id, millis)
    };
    store
        .add_orders("a", [meta("m1", 1), order("g1", 2), meta("m2", 3)])
        .unwrap();
    let view = OrderQuery::newest(MAX_ORDERS)
        .with_filter(crate::store::OrderFilter::default().with_providers(["meta"]));
    let read = || async {
        let page = store.orders("a", &view).await.unwrap();
        let ids: Vec<String> = page.orders().iter().map(|o| o.order().id.clone()).collect();
        (page, ids)
    };
    let (first, ids) = read().await;
    assert_eq!(ids, ["m2", "m1"]);
    let (again, _) = read().await;
    // The same bytes, not a copy: the page kept.
    assert_eq!(first.json().as_ptr(), again.json().as_ptr());
    // Each kind of write: a page read after it is of the orders after it.
    store.add_order("a", meta("m3", 4)).unwrap();
    assert_eq!(read().await.1, ["m3", "m2", "m1"]);
    store
        .update_order(
            "a",
            Order {
                providers: vec!["google".to_owned()],
                ..order("m2", 3)
            },
        )
        .unwrap();
    assert_eq!(read().await.1, ["m3", "m1"]);
    assert!(store.remove_order("a", "m3"));
    assert_eq!(read().await.1, ["m1"]);
    // More queries than are kept: each still reads its own page.
    for limit in 1..=20 {
        let page = store
            .orders(
                "a",
                &OrderQuery::newest(limit).with_filter(view.filter().clone()),
            )
            .await
            .unwrap();
        assert_eq!(page.len(), 1, "limit {limit}");
    }
}

#[tokio::test]
async fn failed_bulk_insert_adds_nothing() {
    let store = store();
    store.add_order("a", order("o1", 1)).unwrap();
    let err = store
        .add_orders("a", [order("o2", 2), order("o1", 3)])
        .unwrap_err();
    assert_eq!(err.kind(), crate::store::StoreErrorKind::InvalidData);
    assert!(store
        .add_orders("a", [order("o3", 2), order("o3", 3)])
        .is_err());
    assert!(store.add_order("zzz", order("o4", 2)).is_err());
    assert_eq!(ids(&store, "a", 100).await, ["o1"]);
}

#[tokio::test]
async fn keys_resolve_until_revoked() {
    let store = store();
    let key_id = store.add_key("secret-a", "a").unwrap();
    let digest = KeyDigest::of("secret-a");
    let principal = store
        .lookup(&digest)
        .await
        .unwrap()
        .into_principal()
        .unwrap();
    assert_eq!(principal.organization.id, "a");
    assert_eq!(&*principal.key_id, key_id);
    assert!(store.revoke_key("secret-a"));
    assert!(!store.revoke_key("secret-a"));
    assert!(matches!(
        store.lookup(&digest).await.unwrap(),
        KeyLookup::Revoked { .. }
    ));
    assert!(
        store.add_key("secret-a", "b").is_err(),
        "a revoked key stays taken"
    );
    assert!(store.add_key("bad key", "a").is_err());
    assert!(store.add_key("secret-c", "zzz").is_err());
    assert_eq!(
        store.lookup(&KeyDigest::of("unknown")).await.unwrap(),
        KeyLookup::Unknown
    );
}

#[test]
fn debug_shows_counts_not_keys() {
    let store = store();
    store.add_key("secret-a", "a").unwrap();
    let debug = format!("{store:?}");
    assert!(!debug.contains("secret-a"));
    assert!(debug.contains("keys: 1"));
}

#[tokio::test]
async fn the_feed_revision_is_new_after_every_change_to_the_feed() {
    let store = store();
    let revision = |org: &str| store.revision_now(org).expect("the memory store says it");
    // No event yet: 0, below every revision handed out.
    assert_eq!(revision("a"), 0);
    let mut seen = vec![0];
    let mut is_new = |revision: u64, after: &str| {
        assert!(!seen.contains(&revision), "{revision} again, after {after}");
        seen.push(revision);
    };
    store.add_order("a", order("a1", 1)).unwrap();
    is_new(revision("a"), "an order added");
    // Reads change nothing.
    let before = revision("a");
    store.events("a", &EventQuery::oldest(100)).await.unwrap();
    assert_eq!(revision("a"), before);
    // Another organization's write is another feed's change; each feed's revision is one
    // no feed had before.
    store.add_order("b", order("b1", 1)).unwrap();
    assert_eq!(revision("a"), before);
    is_new(revision("b"), "another organization's order");
    let mut changed = order("a1", 1);
    changed.status = "running".to_owned();
    store.update_order("a", changed.clone()).unwrap();
    is_new(revision("a"), "an update");
    // A write that changes nothing makes no event, and leaves the revision.
    let before = revision("a");
    store.update_order("a", changed).unwrap();
    assert_eq!(revision("a"), before);
    assert!(store.remove_order("a", "a1"));
    is_new(revision("a"), "a removal");
    // Retention's deletion: every event but the newest is older than now.
    std::thread::sleep(std::time::Duration::from_millis(5));
    let before = revision("b");
    let deleted = store
        .prune_events(std::time::Duration::ZERO, 100)
        .await
        .unwrap();
    assert_eq!(deleted, 2, "a's two oldest events");
    is_new(revision("a"), "retention");
    // b's feed holds one event, its newest, which retention keeps: no change.
    assert_eq!(revision("b"), before);
}
