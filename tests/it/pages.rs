//! Pages of `GET /orders`: `limit`, `page_token` and `Link: <...>; rel="next"`, over the
//! service, the layer's prefix, conditional requests and the 400s of a bad query.

use std::collections::HashSet;

use http::{Request, StatusCode};
use partner_api::{MemoryStore, Order, Organization, PartnerApi, PartnerApiLayer};
use tower::{Layer, ServiceExt};

use crate::common::*;

/// The store of the other tests, with `org_many` holding `count` orders at 7 distinct instants
/// (so every page edge cuts through ties).
fn store_with_many(count: i64) -> MemoryStore {
    let store = store();
    store
        .add_organization(Organization {
            id: "org_many".into(),
            name: "Many Orders".into(),
        })
        .unwrap();
    store.add_key(KEY_MANY, "org_many").unwrap();
    store
        .add_orders("org_many", (0..count).map(many_order))
        .unwrap();
    store
}

const KEY_MANY: &str = "pk_test_many_orders_Qw12Er34Ty56Ui78";

fn many_order(n: i64) -> Order {
    order(&format!("m{n:04}"), BASE_MILLIS + (n % 7) * 1000)
}

/// The next page's path from a response's `Link`, if it has one.
fn next_link(response: &Collected) -> Option<String> {
    let link = response.header("link")?;
    let rest = link.strip_prefix('<').expect("Link starts with <");
    let (target, params) = rest.split_once('>').expect("Link has >");
    assert_eq!(params, "; rel=\"next\"", "{link}");
    Some(target.to_owned())
}

fn order_ids(response: &Collected) -> Vec<String> {
    response.json()["data"]["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|order| order["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Follows `Link` from `first` to the last page; returns the ids read, page by page.
async fn walk(api: &PartnerApi, first: &str, key: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut next = Some(first.to_owned());
    while let Some(path) = next {
        let response = call(api, get(&path, Some(key))).await;
        assert_eq!(
            response.status,
            StatusCode::OK,
            "{path}: {:?}",
            response.body
        );
        pages.push(order_ids(&response));
        next = next_link(&response);
        assert!(pages.len() <= 1_000, "the walk does not end");
    }
    pages
}

#[tokio::test]
async fn without_parameters_the_first_page_is_todays_answer_with_a_next_link() {
    let store = store_with_many(250);
    let api = PartnerApi::from_store(store);
    let plain = call(&api, get("/v1/orders", Some(KEY_MANY))).await;
    assert_eq!(order_ids(&plain).len(), 100);
    let link = next_link(&plain).expect("more than 100 orders: a next link");
    assert!(link.starts_with("/v1/orders?page_token="), "{link}");
    assert!(
        !link.contains("limit="),
        "no limit given, none kept: {link}"
    );
    // An organization with fewer orders than a page: no link, as before.
    let few = call(&api, get("/v1/orders", Some(KEY_B))).await;
    assert_eq!(few.header("link"), None);
    // limit=100 reads the same page, and keeps its limit in the link.
    let explicit = call(&api, get("/v1/orders?limit=100", Some(KEY_MANY))).await;
    assert_eq!(explicit.body, plain.body);
    assert_eq!(explicit.header("etag"), plain.header("etag"));
    assert!(next_link(&explicit).unwrap().ends_with("&limit=100"));
}

#[tokio::test]
async fn walking_the_links_reads_every_order_once_newest_first() {
    let store = store_with_many(250);
    let mut want: Vec<Order> = (0..250).map(many_order).collect();
    want.sort_by(Order::cmp_newest_first);
    let want: Vec<String> = want.into_iter().map(|order| order.id).collect();
    let api = PartnerApi::from_store(store);
    for limit in [1, 7, 100] {
        let pages = walk(&api, &format!("/v1/orders?limit={limit}"), KEY_MANY).await;
        let (last, full) = pages.split_last().unwrap();
        assert!(full.iter().all(|page| page.len() == limit), "limit {limit}");
        assert!(!last.is_empty() && last.len() <= limit);
        let read: Vec<String> = pages.concat();
        assert_eq!(read, want, "limit {limit}");
    }
}

#[tokio::test]
async fn orders_created_while_walking_never_shift_later_pages() {
    // 5,000 orders at 7 instants (ties at every page edge), in the default pages of 100.
    let store = store_with_many(5_000);
    let api = PartnerApi::from_store(store.clone());
    let first = call(&api, get("/v1/orders", Some(KEY_MANY))).await;
    let mut read = order_ids(&first);
    let mut next = next_link(&first);
    let mut added = 0;
    while let Some(path) = next {
        // Newer than everything, and older than everything not yet read.
        store
            .add_order(
                "org_many",
                order(&format!("new{added}"), BASE_MILLIS + 1_000_000),
            )
            .unwrap();
        store
            .add_order(
                "org_many",
                order(&format!("old{added}"), BASE_MILLIS - 1_000_000),
            )
            .unwrap();
        added += 1;
        let response = call(&api, get(&path, Some(KEY_MANY))).await;
        read.extend(order_ids(&response));
        next = next_link(&response);
    }
    let unique: HashSet<&String> = read.iter().collect();
    assert_eq!(unique.len(), read.len(), "no order twice: {read:?}");
    assert!(read.iter().all(|id| !id.starts_with("new")), "{read:?}");
    let originals: Vec<&String> = read.iter().filter(|id| id.starts_with('m')).collect();
    let mut want: Vec<Order> = (0..5_000).map(many_order).collect();
    want.sort_by(Order::cmp_newest_first);
    assert!(
        originals
            .iter()
            .map(|id| id.as_str())
            .eq(want.iter().map(|o| o.id.as_str())),
        "every original order once, newest first"
    );
    // The older orders come after every original one, in the pages read after they were added.
    assert!(read.iter().any(|id| id.starts_with("old")));
}

#[tokio::test]
async fn the_layer_links_the_path_it_is_mounted_at() {
    let api = PartnerApi::from_store(store_with_many(150)).with_prefix("/partner/v1");
    let host = tower::service_fn(|_: Request<()>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(
            http_body_util::Empty::<bytes::Bytes>::new(),
        ))
    });
    let service = PartnerApiLayer::new(api).layer(host);
    let response = collect(
        service
            .oneshot(get("/partner/v1/orders?limit=60&x=1", Some(KEY_MANY)))
            .await
            .unwrap(),
    )
    .await;
    let link = next_link(&response).unwrap();
    assert!(link.starts_with("/partner/v1/orders?page_token="), "{link}");
    assert!(link.ends_with("&limit=60"), "{link}");
}

#[tokio::test]
async fn bad_queries_are_400s_that_say_which_and_come_after_authentication() {
    let api = PartnerApi::from_store(store_with_many(150));
    let first = call(&api, get("/v1/orders?limit=5", Some(KEY_MANY))).await;
    let link = next_link(&first).unwrap();
    let token = page_token(&link);
    let mut altered = token.clone().into_bytes();
    let at = altered.len() / 2;
    altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
    let altered = String::from_utf8(altered).unwrap();
    let cases = [
        ("/v1/orders?limit=0", KEY_MANY, "limit"),
        ("/v1/orders?limit=101", KEY_MANY, "limit"),
        ("/v1/orders?limit=ten", KEY_MANY, "limit"),
        ("/v1/orders?limit=-1", KEY_MANY, "limit"),
        ("/v1/orders?limit=5&limit=6", KEY_MANY, "once"),
        ("/v1/orders?page_token=", KEY_MANY, "not a page token"),
        ("/v1/orders?page_token=!!!", KEY_MANY, "not a page token"),
        (
            &format!("/v1/orders?page_token={altered}"),
            KEY_MANY,
            "not a page token",
        ),
        (
            &format!("/v1/orders?page_token={}", &token[..token.len() - 2]),
            KEY_MANY,
            "not a page token",
        ),
        (
            &format!("/v1/orders?page_token={token}"),
            KEY_A,
            "another organization",
        ),
    ];
    for (path, key, says) in cases {
        let response = call(&api, get(path, Some(key))).await;
        assert_eq!(response.status, StatusCode::BAD_REQUEST, "{path}");
        let message = response.error_message();
        assert!(message.contains(says), "{path}: {message}");
        assert_eq!(response.header("link"), None);
    }
    // Authentication first: no key is a 401 whatever the query.
    let response = call(&api, get("/v1/orders?limit=0", None)).await;
    assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    // The foreign token never shows the other organization's orders, and its own works.
    let own = call(
        &api,
        get(
            &format!("/v1/orders?page_token={token}&limit=5"),
            Some(KEY_MANY),
        ),
    )
    .await;
    assert_eq!(own.status, StatusCode::OK);
    assert_eq!(order_ids(&own).len(), 5);
    // /me ignores page parameters.
    let me = call(&api, get("/v1/me?limit=0&page_token=x", Some(KEY_MANY))).await;
    assert_eq!(me.status, StatusCode::OK);
}

#[tokio::test]
async fn each_page_has_its_own_etag_and_a_304_keeps_the_link() {
    let api = PartnerApi::from_store(store_with_many(30));
    let first = call(&api, get("/v1/orders?limit=10", Some(KEY_MANY))).await;
    let next = next_link(&first).unwrap();
    let second = call(&api, get(&next, Some(KEY_MANY))).await;
    let (first_tag, second_tag) = (
        first.header("etag").unwrap(),
        second.header("etag").unwrap(),
    );
    assert_ne!(first_tag, second_tag);
    let revalidated = call(
        &api,
        Request::get(next.as_str())
            .header("authorization", format!("Bearer {KEY_MANY}"))
            .header("if-none-match", second_tag)
            .body(())
            .unwrap(),
    )
    .await;
    assert_eq!(revalidated.status, StatusCode::NOT_MODIFIED);
    assert!(revalidated.body.is_empty());
    assert_eq!(revalidated.header("link"), second.header("link"));
    // HEAD answers the same headers without a body.
    let head = call(
        &api,
        Request::head(next.as_str())
            .header("authorization", format!("Bearer {KEY_MANY}"))
            .body(())
            .unwrap(),
    )
    .await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(head.header("link"), second.header("link"));
    assert_eq!(head.header("etag"), Some(second_tag));
}

/// A stored page's next link is made once and reused, but only for the same organization and
/// request: the same page asked for with `limit=100`, or through another prefix, gets its own.
#[tokio::test]
async fn a_pages_next_link_is_reused_only_for_the_request_it_was_made_for() {
    let store = crate::common::store();
    let api = PartnerApi::from_store(store.clone());
    let link = |response: &Collected| response.headers["link"].to_str().unwrap().to_owned();
    let plain = link(&call(&api, get("/v1/orders", Some(KEY_A))).await);
    assert!(
        plain.starts_with("</v1/orders?page_token=") && !plain.contains("limit="),
        "{plain}"
    );
    let limited = link(&call(&api, get("/v1/orders?limit=100", Some(KEY_A))).await);
    assert!(limited.ends_with("&limit=100>; rel=\"next\""), "{limited}");
    assert_eq!(
        link(&call(&api, get("/v1/orders", Some(KEY_A))).await),
        plain
    );
    // The same store, so the same stored page, under another prefix.
    let nested = PartnerApi::from_store(store).with_prefix("/partner/v1");
    let elsewhere = link(&call(&nested, get("/partner/v1/orders", Some(KEY_A))).await);
    assert!(
        elsewhere.starts_with("</partner/v1/orders?page_token="),
        "{elsewhere}"
    );
    // Each link leads on: the next page is served.
    let token = page_token(plain.trim_start_matches('<').split('>').next().unwrap());
    let next = call(
        &api,
        get(&format!("/v1/orders?page_token={token}"), Some(KEY_A)),
    )
    .await;
    assert_eq!(next.status, StatusCode::OK);
}
