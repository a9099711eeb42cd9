//! The events feed: `GET /v1/events` through the API (ids, the resuming link, types, every
//! 400, the 410 past retention, 404 without a feed), the conformance suite against the memory
//! store and stores that skip or reorder (which must fail it), and the webhook of a change
//! naming its event.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use partner_api::store::{EventFeed, EventId, EventQuery, EventsPage, OrderChange};
use partner_api::testing::StoreFixtures;
use partner_api::{MemoryStore, Organization, PartnerApi, Timestamp};

use crate::common::*;

/// The API over the common store (`org_a` with 157 orders, `org_b` with 3) with its feed.
fn api_with_events(store: &MemoryStore) -> PartnerApi {
    PartnerApi::from_store(store.clone()).with_events(store.clone())
}

fn event_ids(response: &Collected) -> Vec<String> {
    response.json()["data"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| event["id"].as_str().unwrap().to_owned())
        .collect()
}

fn next(response: &Collected) -> String {
    let link = response.header("link").expect("every answer links onward");
    let (target, rel) = link.strip_prefix('<').unwrap().split_once('>').unwrap();
    assert_eq!(rel, "; rel=\"next\"");
    target.to_owned()
}

#[tokio::test]
async fn the_feed_serves_every_change_oldest_first_and_links_to_where_to_resume() {
    let store = store();
    let api = api_with_events(&store);
    let all = call(&api, get("/v1/events", Some(KEY_B))).await;
    assert_eq!(all.status, StatusCode::OK);
    assert_eq!(all.header("cache-control"), Some("no-store"));
    let body = all.json();
    assert_eq!(
        body["meta"],
        serde_json::json!({"version": "v1", "status": "beta"})
    );
    let events = body["data"]["events"].as_array().unwrap();
    // org_b's three orders, in the order they were written.
    let ids: Vec<&str> = events
        .iter()
        .map(|event| event["data"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["b1", "b3", "b2"]);
    for event in events {
        assert_eq!(event["type"], "order.created");
        let id = event["id"].as_str().unwrap();
        assert!(id.starts_with("evt_") && id.len() == 26, "{id}");
        assert!(
            event["createdAt"]
                .as_str()
                .unwrap()
                .parse::<Timestamp>()
                .is_ok(),
            "{event}"
        );
        assert_eq!(event.as_object().unwrap().len(), 4, "{event}");
    }
    // The order exactly as /orders serves it.
    let orders = call(&api, get("/v1/orders", Some(KEY_B))).await.json();
    let b2 = orders["data"]["orders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|order| order["id"] == "b2")
        .unwrap()
        .clone();
    assert_eq!(events[2]["data"], b2);
    let last = event_ids(&all).pop().unwrap();
    assert_eq!(next(&all), format!("/v1/events?after={last}"));

    // Nothing new: empty, and the link keeps the `after` given.
    let tail = call(&api, get(&next(&all), Some(KEY_B))).await;
    assert_eq!(tail.status, StatusCode::OK);
    assert!(event_ids(&tail).is_empty());
    assert_eq!(next(&tail), format!("/v1/events?after={last}"));

    // Changes after it: exactly those, in order.
    let mut changed = order("b2", BASE_MILLIS + 5);
    changed.status = "running".into();
    store.update_order("org_b", changed.clone()).unwrap();
    store.update_order("org_b", changed).unwrap();
    assert!(store.remove_order("org_b", "b1"));
    let news = call(&api, get(&next(&tail), Some(KEY_B))).await;
    let kinds = event_kinds(&news);
    assert_eq!(
        kinds,
        [
            ("order.updated".to_owned(), "b2".to_owned()),
            ("order.deleted".to_owned(), "b1".to_owned())
        ]
    );
    assert_eq!(
        news.json()["data"]["events"][1]["data"],
        serde_json::json!({"id": "b1"})
    );
}

#[tokio::test]
async fn pages_of_the_feed_walk_every_event_once_with_limit_and_types_kept() {
    let store = store();
    let api = api_with_events(&store);
    let all = event_ids(&call(&api, get("/v1/events", Some(KEY_A))).await);
    assert_eq!(all.len(), 100, "at most 100 by default");
    let mut walked = Vec::new();
    let mut path = "/v1/events?limit=7".to_owned();
    loop {
        let page = call(&api, get(&path, Some(KEY_A))).await;
        assert_eq!(page.status, StatusCode::OK);
        let ids = event_ids(&page);
        assert!(ids.len() <= 7);
        let following = next(&page);
        assert!(following.contains("limit=7"), "{following}");
        if ids.is_empty() {
            break;
        }
        walked.extend(ids);
        path = following;
    }
    assert_eq!(walked.len(), 157);
    assert_eq!(walked[..100], all[..]);

    assert!(store.remove_order("org_a", "a000"));
    let deleted = call(&api, get("/v1/events?types=order.deleted", Some(KEY_A))).await;
    let ids = event_ids(&deleted);
    assert_eq!(ids.len(), 1);
    assert_eq!(
        next(&deleted),
        format!("/v1/events?after={}&types=order.deleted", ids[0])
    );
    // Only other types since: none returned, and the link moves past them, so a reader of
    // deletions never reads them again (nor finds its position expired for want of one).
    store
        .add_order("org_a", order("a999", BASE_MILLIS + 999 * 60_000))
        .unwrap();
    let quiet = call(&api, get(&next(&deleted), Some(KEY_A))).await;
    assert!(event_ids(&quiet).is_empty());
    let newest = event_ids(
        &call(
            &api,
            get(&format!("/v1/events?after={}", ids[0]), Some(KEY_A)),
        )
        .await,
    );
    assert_eq!(
        next(&quiet),
        format!("/v1/events?after={}&types=order.deleted", newest[0])
    );
    let created_only = call(
        &api,
        get(
            "/v1/events?types=order.created,order.created&limit=100",
            Some(KEY_A),
        ),
    )
    .await;
    assert_eq!(event_ids(&created_only), all);
}

#[tokio::test]
async fn every_bad_parameter_is_a_400_naming_it_and_a_foreign_id_too() {
    let store = store();
    let api = api_with_events(&store);
    let a_event = event_ids(&call(&api, get("/v1/events?limit=1", Some(KEY_A))).await)
        .pop()
        .unwrap();
    let never = EventId::new("org_b", 1 << 40).to_string();
    for (query, parameter) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=x", "limit"),
        ("limit=1&limit=1", "limit"),
        ("types=", "types"),
        ("types=order.paid", "types"),
        ("types=order.created&types=order.created", "types"),
        ("after=", "after"),
        ("after=evt_nope", "after"),
        (&format!("after={}x", &a_event[..25]) as &str, "after"),
        (&format!("after={a_event}") as &str, "after"),
        (&format!("after={never}") as &str, "after"),
        (&format!("after={never}&after={never}") as &str, "after"),
    ] {
        let response = call(&api, get(&format!("/v1/events?{query}"), Some(KEY_B))).await;
        assert_eq!(response.status, StatusCode::BAD_REQUEST, "{query}");
        let message = response.error_message();
        assert!(
            message.starts_with(&format!("invalid query parameter {parameter}")),
            "{query}: {message}"
        );
        assert!(!message.contains(&a_event), "{message}");
    }
    // Authentication first: a bad query without a key is a 401.
    let unkeyed = call(&api, get("/v1/events?limit=0", None)).await;
    assert_eq!(unkeyed.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_position_past_retention_is_gone_and_a_host_without_a_feed_has_no_events() {
    let store = store();
    let api = api_with_events(&store);
    let first = call(&api, get("/v1/events?limit=1", Some(KEY_B))).await;
    let first_id = event_ids(&first).pop().unwrap();
    // Everything is older than zero seconds: retention deletes the feed's events in order.
    let newest = event_ids(
        &call(
            &api,
            get(&format!("/v1/events?after={first_id}"), Some(KEY_B)),
        )
        .await,
    )
    .pop()
    .unwrap();
    // In batches of 50: 157 + 3 events but each feed's newest, four batches, the last short.
    let deleted = partner_api::store::prune_event_batches(&store, Duration::ZERO, 50, 10)
        .await
        .unwrap();
    assert_eq!(deleted, 158);
    let gone = call(
        &api,
        get(&format!("/v1/events?after={first_id}"), Some(KEY_B)),
    )
    .await;
    assert_eq!(gone.status, StatusCode::GONE);
    assert_eq!(gone.header("content-type"), Some("application/json"));
    let message = gone.error_message();
    assert!(
        message.contains("no longer reaches back") && message.contains("GET /orders"),
        "{message}"
    );
    // The newest is kept: a reader that had it is caught up, not expired, however old it is.
    let kept = event_ids(&call(&api, get("/v1/events", Some(KEY_B))).await);
    assert_eq!(kept, std::slice::from_ref(&newest));
    let caught_up = call(
        &api,
        get(&format!("/v1/events?after={newest}"), Some(KEY_B)),
    )
    .await;
    assert_eq!(caught_up.status, StatusCode::OK);
    assert!(event_ids(&caught_up).is_empty());
    store.add_order("org_b", order("b4", BASE_MILLIS)).unwrap();
    let fresh = call(
        &api,
        get(&format!("/v1/events?after={newest}"), Some(KEY_B)),
    )
    .await;
    assert_eq!(fresh.json()["data"]["events"][0]["data"]["id"], "b4");

    let without = PartnerApi::from_store(store.clone());
    let response = call(&without, get("/v1/events", Some(KEY_B))).await;
    assert_eq!(response.status, StatusCode::NOT_FOUND);
    assert_eq!(response.error_message(), "not found");
    let post = http::Request::post("/v1/events").body(()).unwrap();
    assert_eq!(call(&without, post).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_feed_answers_head_and_refuses_other_methods() {
    let store = store();
    let api = api_with_events(&store);
    let head = call(
        &api,
        http::Request::head("/v1/events")
            .header("authorization", format!("Bearer {KEY_B}"))
            .body(())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    let post = call(
        &api,
        http::Request::post("/v1/events")
            .header("authorization", format!("Bearer {KEY_B}"))
            .body(())
            .unwrap(),
    )
    .await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(post.header("allow"), Some("GET, HEAD"));
}

/// Webhooks and the feed agree: each webhook of a change names its event's id, and carries
/// its type, time and data; the changes from before the organization had an endpoint are in
/// the feed all the same.
#[cfg(feature = "webhooks")]
pub(crate) async fn every_webhook_names_its_event_in_the_feed<S>(store: &S)
where
    S: StoreFixtures<Store = S>
        + EventFeed
        + partner_api::webhooks::WebhookManager
        + partner_api::webhooks::WebhookOutbox,
{
    use partner_api::webhooks::{ClaimRequest, NewEndpoint};
    let organization = Organization {
        id: "org_hooked".into(),
        name: "Hooked".into(),
    };
    store.add_organization(&organization).await.unwrap();
    let org = organization.id.as_str();
    // Before the endpoint: in the feed, no webhook.
    store
        .add_orders(
            org,
            &[order("gone", BASE_MILLIS), order("kept", BASE_MILLIS + 1)],
        )
        .await
        .unwrap();
    store
        .add_endpoint(org, NewEndpoint::new("https://partner.example/hooks"))
        .await
        .unwrap();
    store
        .add_orders(org, &[order("new", BASE_MILLIS + 2)])
        .await
        .unwrap();
    let mut kept = order("kept", BASE_MILLIS + 1);
    kept.status = "running".into();
    store.update_order(org, &kept).await.unwrap();
    store.remove_order(org, "gone").await.unwrap();

    let EventsPage::Events { events, .. } =
        store.events(org, &EventQuery::oldest(100)).await.unwrap()
    else {
        panic!("the feed answered no events")
    };
    assert_eq!(events.len(), 5);
    let deliveries = store
        .claim(&ClaimRequest::new(100, 100, Duration::from_secs(60)))
        .await
        .unwrap();
    assert_eq!(
        deliveries.len(),
        3,
        "one webhook per change since the endpoint"
    );
    let mut bodies: Vec<serde_json::Value> = deliveries
        .iter()
        .map(|delivery| serde_json::from_slice(&delivery.body).unwrap())
        .collect();
    for event in &events[2..] {
        let id = EventId::new(org, event.id).to_string();
        let at = bodies
            .iter()
            .position(|body| body["id"] == id.as_str())
            .unwrap_or_else(|| panic!("no webhook names the event {id}: {bodies:?}"));
        let body = bodies.remove(at);
        assert_eq!(body["type"], event.change.as_str());
        assert_eq!(body["timestamp"], event.created_at.to_string());
        // The feed holds the newest shape, which an endpoint added at the newest reads.
        let data: serde_json::Value = serde_json::from_slice(&event.data).unwrap();
        assert_eq!(body["data"], data);
        assert_eq!(
            body.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["data", "id", "timestamp", "type"]
        );
    }
}

#[cfg(feature = "webhooks")]
#[tokio::test]
async fn every_webhook_of_the_memory_store_names_its_event_in_the_feed() {
    every_webhook_names_its_event_in_the_feed(&MemoryStore::new()).await;
}

/// The memory store's feed, counting its reads, and saying its revision or not.
struct CountedFeed {
    store: MemoryStore,
    reads: Arc<AtomicUsize>,
    says_revision: bool,
}

#[async_trait::async_trait]
impl EventFeed for CountedFeed {
    async fn events(
        &self,
        organization_id: &str,
        query: &EventQuery,
    ) -> Result<EventsPage, partner_api::StoreError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.store.events(organization_id, query).await
    }
    fn serves_provider_views(&self) -> bool {
        true
    }
    fn revision_now(&self, organization_id: &str) -> Option<u64> {
        self.says_revision
            .then(|| self.store.revision_now(organization_id))
            .flatten()
    }
    async fn prune_events(
        &self,
        older_than: Duration,
        batch: u32,
    ) -> Result<u64, partner_api::StoreError> {
        self.store.prune_events(older_than, batch).await
    }
}

#[tokio::test]
async fn a_read_answered_at_the_feeds_revision_is_answered_again_without_reading_it_until_it_changes(
) {
    let store = store();
    let reads = Arc::new(AtomicUsize::new(0));
    let api = |says_revision| {
        PartnerApi::from_store(store.clone()).with_events(CountedFeed {
            store: store.clone(),
            reads: reads.clone(),
            says_revision,
        })
    };
    let read_count = || reads.load(Ordering::SeqCst);
    let api_with_revisions = api(true);
    let first = call(&api_with_revisions, get("/v1/events", Some(KEY_B))).await;
    assert_eq!((first.status, read_count()), (StatusCode::OK, 1));
    let again = call(&api_with_revisions, get("/v1/events", Some(KEY_B))).await;
    assert_eq!(read_count(), 1, "answered as before, the feed unread");
    assert_eq!(
        (again.status, &again.body, again.header("link")),
        (first.status, &first.body, first.header("link"))
    );
    // Every other read is its own, each kept for the next time.
    let resume = next(&first);
    for (n, path) in [
        "/v1/events?limit=2",
        "/v1/events?types=order.deleted",
        resume.as_str(),
    ]
    .into_iter()
    .enumerate()
    {
        let fresh = call(&api_with_revisions, get(path, Some(KEY_B))).await;
        assert_eq!(
            (fresh.status, read_count()),
            (StatusCode::OK, 2 + n),
            "{path}"
        );
        let kept = call(&api_with_revisions, get(path, Some(KEY_B))).await;
        assert_eq!(read_count(), 2 + n, "{path} again");
        assert_eq!(kept.body, fresh.body, "{path}");
    }
    // Another organization's key reads its own feed.
    let other = call(&api_with_revisions, get("/v1/events", Some(KEY_A))).await;
    assert_eq!(read_count(), 5);
    assert_ne!(other.body, first.body);
    // A write: the feed is read again, and the change is in the answer.
    let mut changed = order("b2", BASE_MILLIS + 5);
    changed.status = "running".into();
    store.update_order("org_b", changed).unwrap();
    let news = call(&api_with_revisions, get(&resume, Some(KEY_B))).await;
    assert_eq!(read_count(), 6);
    assert_eq!(
        event_kinds(&news),
        [("order.updated".to_owned(), "b2".to_owned())]
    );
    let all = call(&api_with_revisions, get("/v1/events", Some(KEY_B))).await;
    assert_eq!((read_count(), event_ids(&all).len()), (7, 4));
    // A feed that does not say its revision is read for every request.
    let api_without = api(false);
    for n in 1..=2 {
        call(&api_without, get("/v1/events", Some(KEY_B))).await;
        assert_eq!(read_count(), 7 + n);
    }
}

/// Rule `feed-revision` under load: pollers on two worker threads follow the API's links
/// while writers change orders; every worker thread keeps answers by the feed's revision.
/// Each poller must see every event once, in the feed's order, and reach the newest once
/// the writers stop: a kept answer served past a change, or to another read, would skip,
/// repeat or never reach it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pollers_through_the_api_see_every_change_once_in_order_under_concurrent_writers() {
    use std::sync::atomic::AtomicBool;

    let store = store();
    let api = api_with_events(&store);
    let writers_done = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|writer| {
            let store = store.clone();
            tokio::spawn(async move {
                for n in 0..150_i64 {
                    let id = format!("w{writer}-{}", n / 3);
                    match n % 3 {
                        0 => store
                            .add_order("org_b", order(&id, BASE_MILLIS + n))
                            .unwrap(),
                        1 => {
                            let mut changed = order(&id, BASE_MILLIS + n - 1);
                            changed.status = "running".into();
                            store.update_order("org_b", changed).unwrap();
                        }
                        _ if n % 2 == 0 => assert!(store.remove_order("org_b", &id)),
                        _ => {}
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let pollers: Vec<_> = [
        "/v1/events?limit=5",
        "/v1/events?limit=5",
        "/v1/events",
        "/v1/events?types=order.updated,order.deleted&limit=3",
    ]
    .into_iter()
    .map(|start| {
        let (api, writers_done) = (api.clone(), writers_done.clone());
        tokio::spawn(async move {
            let (mut seen, mut path) = (Vec::new(), start.to_owned());
            loop {
                // Read before the request: an empty page after the last write is the end.
                let done = writers_done.load(Ordering::SeqCst);
                let page = call(&api, get(&path, Some(KEY_B))).await;
                assert_eq!(page.status, StatusCode::OK, "{path}");
                let ids = event_ids(&page);
                if ids.is_empty() && done {
                    return (start, seen);
                }
                seen.extend(event_kinds(&page).into_iter().zip(ids));
                path = next(&page);
                tokio::task::yield_now().await;
            }
        })
    })
    .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    writers_done.store(true, Ordering::SeqCst);
    // The whole feed, as the store holds it.
    let mut feed = Vec::new();
    let mut query = EventQuery::oldest(100);
    loop {
        let EventsPage::Events { events, through } = store.events("org_b", &query).await.unwrap()
        else {
            panic!("the feed from its start is events");
        };
        feed.extend(events);
        match through {
            Some(last) if Some(last) != query.after_id() => query = EventQuery::after(last, 100),
            _ => break,
        }
    }
    assert_eq!(feed.len(), 3 + 2 * (50 + 50 + 25), "every write's event");
    for poller in pollers {
        let (start, seen) = poller.await.unwrap();
        let want: Vec<String> = feed
            .iter()
            .filter(|event| !start.contains("types=") || event.change != OrderChange::Created)
            .map(|event| EventId::new("org_b", event.id).to_string())
            .collect();
        let got: Vec<&String> = seen.iter().map(|(_, id)| id).collect();
        assert_eq!(got, want.iter().collect::<Vec<_>>(), "{start}");
    }
}
