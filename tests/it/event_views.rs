//! `GET /v1/events` for keys limited to providers (#58), through the API on both stores: each
//! key reads the feed in its own view (an order coming into it is created for the key, one
//! leaving it deleted with its id only), resuming through its `Link`s, with `types`, on two
//! replicas whose keys of different views interleave; a host's feed that cannot show views
//! refuses such a key rather than serve it every order's events.

use async_trait::async_trait;
use http::StatusCode;
use partner_api::key::KeyEnvironment;
use partner_api::store::{EventFeed, EventQuery, EventsPage, KeyManager, NewKey};
use partner_api::testing::StoreFixtures;
use partner_api::{KeyStore, MemoryStore, Order, OrderStore, Organization, PartnerApi, StoreError};
use serde_json::{json, Value};

use crate::common::*;

const ORG: &str = "org_v";

/// A memory store with the organization `ORG` and nothing else.
fn memory_store() -> MemoryStore {
    let store = MemoryStore::new();
    store
        .add_organization(Organization {
            id: ORG.into(),
            name: "Views".into(),
        })
        .unwrap();
    store
}

async fn send(api: &PartnerApi, request: http::Request<()>) -> Collected {
    use tower::ServiceExt;
    collect(api.clone().oneshot(request).await.unwrap()).await
}

fn with_providers(id: &str, millis: i64, providers: &[&str]) -> Order {
    let mut order = order(id, 1_700_000_000_000 + millis);
    order.providers = providers.iter().map(|&p| p.to_owned()).collect();
    order
}

/// One page of `path` for `key`, its events as (type, order id, data) and its next link.
async fn page(api: &PartnerApi, key: &str, path: &str) -> (Vec<(String, String, Value)>, String) {
    let answer = send(api, get(path, Some(key))).await;
    assert_eq!(answer.status, StatusCode::OK, "{path}: {:?}", answer.json());
    let events = answer.json()["data"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| {
            (
                event["type"].as_str().unwrap().to_owned(),
                event["data"]["id"].as_str().unwrap().to_owned(),
                event["data"].clone(),
            )
        })
        .collect();
    let next = answer
        .header("link")
        .and_then(|link| link.strip_prefix('<'))
        .and_then(|rest| rest.split_once('>'))
        .map(|(target, _)| target.to_owned())
        .unwrap();
    (events, next)
}

async fn views_through_the_api<S>(store: S)
where
    S: KeyStore + KeyManager + StoreFixtures + OrderStore + EventFeed + Clone + 'static,
{
    let issue = |providers: Option<&'static [&'static str]>| {
        let store = store.clone();
        async move {
            let mut key = NewKey::new(KeyEnvironment::Live);
            if let Some(providers) = providers {
                key = key.with_providers(providers);
            }
            store.issue(ORG, key).await.unwrap().plaintext().to_owned()
        }
    };
    let (p1, p2, full) = (
        issue(Some(&["p1"])).await,
        issue(Some(&["p2"])).await,
        issue(None).await,
    );
    let one = with_providers("o1", 1, &["p1"]);
    let two = with_providers("o2", 2, &["p2"]);
    let three = with_providers("o3", 3, &["p1", "p2"]);
    store
        .add_orders(ORG, &[one.clone(), two.clone(), three.clone()])
        .await
        .unwrap();
    let two_in = with_providers("o2", 2, &["p2", "p1"]);
    store.update_order(ORG, &two_in).await.unwrap();
    let one_out = with_providers("o1", 1, &["p2"]);
    store.update_order(ORG, &one_out).await.unwrap();
    store.remove_order(ORG, "o3").await.unwrap();

    // Two replicas; the keys' pages of two interleave on them, each resumed by its link.
    let replicas = [
        PartnerApi::from_store(store.clone()).with_events(store.clone()),
        PartnerApi::from_store(store.clone()).with_events(store.clone()),
    ];
    let keys = [&p1, &p2, &full];
    let mut next: Vec<String> = keys.iter().map(|_| "/v1/events?limit=2".into()).collect();
    let mut read: Vec<Vec<(String, String, Value)>> = keys.iter().map(|_| Vec::new()).collect();
    let mut done = [false; 3];
    for round in 0..20 {
        for (n, key) in keys.iter().enumerate() {
            if done[n] {
                continue;
            }
            let (events, link) = page(&replicas[(round + n) % 2], key, &next[n]).await;
            done[n] = events.is_empty();
            read[n].extend(events);
            next[n] = link;
        }
    }
    assert_eq!(done, [true; 3], "a key's feed never came to its end");
    let kinds = |events: &[(String, String, Value)]| -> Vec<(String, String)> {
        events
            .iter()
            .map(|(kind, id, _)| (kind.clone(), id.clone()))
            .collect()
    };
    let expect = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(kind, id)| (format!("order.{kind}"), (*id).to_owned()))
            .collect()
    };
    assert_eq!(
        kinds(&read[0]),
        expect(&[
            ("created", "o1"),
            ("created", "o3"),
            ("created", "o2"),
            ("deleted", "o1"),
            ("deleted", "o3"),
        ]),
        "the view of p1"
    );
    assert_eq!(
        kinds(&read[1]),
        expect(&[
            ("created", "o2"),
            ("created", "o3"),
            ("updated", "o2"),
            ("created", "o1"),
            ("deleted", "o3"),
        ]),
        "the view of p2"
    );
    assert_eq!(read[2].len(), 6, "the whole feed");
    // The order that came in is as it is after the change; the one that left, its id only.
    assert_eq!(read[0][2].2["providers"], json!(["p2", "p1"]));
    assert_eq!(read[0][3].2, json!({"id": "o1"}));
    assert_eq!(read[1][3].2["providers"], json!(["p2"]));

    // Types are the view's: p1's deletions are the order that left and the one deleted.
    let (deletions, _) = page(&replicas[0], &p1, "/v1/events?types=order.deleted").await;
    assert_eq!(
        kinds(&deletions),
        expect(&[("deleted", "o1"), ("deleted", "o3")])
    );
}

/// A rare provider's key behind more than 1,000 events outside its view: an answer looks at
/// 1,000 events at most, so the first is empty and its link moves on; following links, the
/// key reads its one event, and the end is an answer whose link names the `after` it was
/// asked with.
async fn a_rare_view_moves_on_by_its_links<S>(store: S)
where
    S: KeyStore + KeyManager + StoreFixtures + OrderStore + EventFeed + Clone + 'static,
{
    let key = store
        .issue(
            ORG,
            NewKey::new(KeyEnvironment::Live).with_providers(&["rare"]),
        )
        .await
        .unwrap();
    let common: Vec<Order> = (0..1_100)
        .map(|n| with_providers(&format!("c{n:04}"), n, &["common"]))
        .collect();
    store.add_orders(ORG, &common).await.unwrap();
    store
        .add_orders(ORG, &[with_providers("r1", 2_000, &["rare"])])
        .await
        .unwrap();
    let api = PartnerApi::from_store(store.clone()).with_events(store.clone());
    let (first, link) = page(&api, key.plaintext(), "/v1/events").await;
    assert!(first.is_empty(), "{first:?}");
    assert!(link.contains("after="), "the link moved on: {link}");
    let (second, link) = page(&api, key.plaintext(), &link).await;
    assert_eq!(
        second
            .iter()
            .map(|(kind, id, _)| (kind.as_str(), id.as_str()))
            .collect::<Vec<_>>(),
        [("order.created", "r1")]
    );
    let (third, end) = page(&api, key.plaintext(), &link).await;
    assert!(third.is_empty(), "{third:?}");
    assert_eq!(end, link, "the end names the after it was asked with");
}

#[tokio::test]
async fn the_memory_store_moves_a_rare_view_on_by_its_links() {
    let store = memory_store();
    a_rare_view_moves_on_by_its_links(store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_moves_a_rare_view_on_by_its_links() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = pg::migrated_with(&[ORG]).await;
    a_rare_view_moves_on_by_its_links(store).await;
}

#[tokio::test]
async fn the_memory_store_serves_each_key_its_view_of_the_feed() {
    let store = memory_store();
    views_through_the_api(store).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_serves_each_key_its_view_of_the_feed() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = pg::migrated_with(&[ORG]).await;
    views_through_the_api(store).await;
}

/// A host's feed written before views: it reads every order whatever the query asks.
struct FeedWithoutViews(MemoryStore);

#[async_trait]
impl EventFeed for FeedWithoutViews {
    async fn events(&self, org: &str, query: &EventQuery) -> Result<EventsPage, StoreError> {
        self.0
            .events(org, &query.clone().with_providers(None))
            .await
    }
    async fn prune_events(
        &self,
        older_than: std::time::Duration,
        batch: u32,
    ) -> Result<u64, StoreError> {
        self.0.prune_events(older_than, batch).await
    }
}

#[tokio::test]
async fn a_feed_without_views_is_refused_to_a_key_limited_to_providers() {
    let store = memory_store();
    let limited = store
        .issue(
            ORG,
            NewKey::new(KeyEnvironment::Live).with_providers(&["p1"]),
        )
        .await
        .unwrap();
    let full = store
        .issue(ORG, NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    store
        .add_order(ORG, with_providers("o1", 1, &["p2"]))
        .unwrap();
    let api = PartnerApi::from_store(store.clone()).with_events(FeedWithoutViews(store));
    let refused = send(&api, get("/v1/events", Some(limited.plaintext()))).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert!(
        refused
            .header("www-authenticate")
            .is_some_and(|challenge| challenge.contains("insufficient_scope")),
        "{:?}",
        refused.headers
    );
    let served = send(&api, get("/v1/events", Some(full.plaintext()))).await;
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(served.json()["data"]["events"].as_array().unwrap().len(), 1);
}
