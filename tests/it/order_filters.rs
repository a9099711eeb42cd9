//! The filters of `GET /orders` (`status`, `provider`, `created_since`, `created_before`)
//! through the API: filtered walks by the links, the links keeping the filters, tokens bound
//! to their filters, and a 400 naming the parameter for every bad value.

use http::StatusCode;
use partner_api::{MemoryStore, Order, Organization, PartnerApi, Timestamp};

use crate::common::*;

const KEY_F: &str = "pk_test_filtered_orders_Qw12Er34Ty56";

/// 90 orders of `org_f` at 30 instants (ties in threes), three statuses (one with a space),
/// providers of two families.
fn orders() -> Vec<Order> {
    (0..90_i64)
        .map(|n| {
            let mut order = order(&format!("f{n:03}"), BASE_MILLIS + (n / 3) * 1_000);
            order.status = ["booked", "running", "on hold"][(n % 3) as usize].to_owned();
            order.providers = vec![format!("p{}", n % 4), format!("q{}", n % 5)];
            order
        })
        .collect()
}

fn api() -> PartnerApi {
    let store: MemoryStore = store();
    store
        .add_organization(Organization {
            id: "org_f".into(),
            name: "Filtered".into(),
        })
        .unwrap();
    store.add_key(KEY_F, "org_f").unwrap();
    store.add_orders("org_f", orders()).unwrap();
    PartnerApi::from_store(store)
}

fn ids(response: &Collected) -> Vec<String> {
    response.json()["data"]["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|order| order["id"].as_str().unwrap().to_owned())
        .collect()
}

fn next(response: &Collected) -> Option<String> {
    let link = response.header("link")?;
    Some(link.strip_prefix('<')?.split_once('>')?.0.to_owned())
}

/// Follows the links from `first`; every link keeps `keeps`.
async fn walk(api: &PartnerApi, first: &str, keeps: &[&str]) -> Vec<String> {
    let (mut read, mut path) = (Vec::new(), Some(first.to_owned()));
    while let Some(at) = path {
        let response = call(api, get(&at, Some(KEY_F))).await;
        assert_eq!(response.status, StatusCode::OK, "{at}: {:?}", response.body);
        read.extend(ids(&response));
        path = next(&response);
        for kept in keeps {
            assert!(
                path.as_deref().is_none_or(|p| p.contains(kept)),
                "{path:?} lacks {kept}"
            );
        }
        assert!(read.len() <= 1_000, "the walk does not end");
    }
    read
}

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_unix_millis(BASE_MILLIS + seconds * 1_000).unwrap()
}

#[tokio::test]
async fn filtered_walks_hold_exactly_the_filtered_orders_newest_first() {
    let api = api();
    type Holds = Box<dyn Fn(&Order) -> bool>;
    let cases: [(&str, &[&str], Holds); 5] = [
        (
            "status=running,on%20hold",
            &["status=running%2Con+hold"],
            Box::new(|o| o.status == "running" || o.status == "on hold"),
        ),
        (
            "provider=p1,q3",
            &["provider=p1%2Cq3"],
            Box::new(|o| o.providers.iter().any(|p| p == "p1" || p == "q3")),
        ),
        (
            // An offset, and a fraction finer than a millisecond, rounded up.
            "created_since=2026-01-01T01:00:05.0000001%2B01:00&created_before=2026-01-01T00:00:20Z",
            &[
                "created_since=2026-01-01T00%3A00%3A05.001Z",
                "created_before=2026-01-01T00%3A00%3A20.000Z",
            ],
            Box::new(|o| o.created_at > at(5) && o.created_at < at(20)),
        ),
        (
            "status=booked&provider=p0&created_since=2026-01-01T00:00:03Z",
            &["status=booked", "provider=p0", "created_since="],
            Box::new(|o| o.status == "booked" && o.providers[0] == "p0" && o.created_at >= at(3)),
        ),
        ("status=cancelled", &[], Box::new(|_| false)),
    ];
    for (query, keeps, holds) in cases {
        let mut want: Vec<Order> = orders().into_iter().filter(|o| holds(o)).collect();
        want.sort_by(Order::cmp_newest_first);
        let want: Vec<String> = want.into_iter().map(|o| o.id).collect();
        for limit in [2, 7, 100] {
            let read = walk(&api, &format!("/v1/orders?{query}&limit={limit}"), keeps).await;
            assert_eq!(read, want, "{query}, limit {limit}");
        }
    }
}

#[tokio::test]
async fn a_token_is_bound_to_its_filters_and_every_bad_value_is_a_400_naming_it() {
    let api = api();
    let filtered = call(
        &api,
        get("/v1/orders?status=running,booked&limit=5", Some(KEY_F)),
    )
    .await;
    let token = page_token(&next(&filtered).unwrap());
    let plain = call(&api, get("/v1/orders?limit=5", Some(KEY_F))).await;
    let plain_token = page_token(&next(&plain).unwrap());
    // The same filters in another order are the same filters.
    let reordered = call(
        &api,
        get(
            &format!("/v1/orders?page_token={token}&status=booked,running&limit=5"),
            Some(KEY_F),
        ),
    )
    .await;
    assert_eq!(reordered.status, StatusCode::OK, "{:?}", reordered.body);
    let long = "x".repeat(201);
    let many = (0..21).map(|n| n.to_string()).collect::<Vec<_>>().join(",");
    let cases = [
        (format!("/v1/orders?page_token={token}"), "other filters"),
        (format!("/v1/orders?page_token={token}&status=running"), "other filters"),
        (format!("/v1/orders?page_token={plain_token}&status=running,booked"), "other filters"),
        ("/v1/orders?status=".to_owned(), "parameter status"),
        ("/v1/orders?status=a,,b".to_owned(), "parameter status"),
        (format!("/v1/orders?status={long}"), "parameter status"),
        ("/v1/orders?status=a&status=b".to_owned(), "once"),
        (format!("/v1/orders?provider={many}"), "parameter provider"),
        ("/v1/orders?provider=a%07".to_owned(), "parameter provider"),
        ("/v1/orders?created_since=yesterday".to_owned(), "parameter created_since"),
        ("/v1/orders?created_since=2026-01-01".to_owned(), "parameter created_since"),
        ("/v1/orders?created_before=2026-01-01%2010:00:00Z".to_owned(), "parameter created_before"),
        ("/v1/orders?created_before=10000-01-01T00:00:00Z".to_owned(), "parameter created_before"),
        (
            "/v1/orders?created_since=2026-01-02T00:00:00Z&created_before=2026-01-01T00:00:00Z".to_owned(),
            "created_since must be before created_before",
        ),
        (
            "/v1/orders?created_since=2026-01-01T00:00:00Z&created_before=2026-01-01T01:00:00%2B01:00".to_owned(),
            "created_since must be before created_before",
        ),
    ];
    for (path, says) in cases {
        let response = call(&api, get(&path, Some(KEY_F))).await;
        assert_eq!(response.status, StatusCode::BAD_REQUEST, "{path}");
        let message = response.error_message();
        assert!(message.contains(says), "{path}: {message}");
    }
    // The key first: without one, a 401 whatever the filters.
    let response = call(&api, get("/v1/orders?status=", None)).await;
    assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    // /me ignores them.
    let me = call(&api, get("/v1/me?status=&created_since=x", Some(KEY_F))).await;
    assert_eq!(me.status, StatusCode::OK);
}
