//! Golden bytes per API version: every answer of a fixed fixture (routes, filters, pages,
//! events, errors), at each version the crate offers, against the committed file
//! `tests/golden/<version>.txt`. A byte of an existing version that changes fails here;
//! `PARTNER_API_UPDATE_GOLDEN=1` writes the files (for a new version, never an old one).
//!
//! The first version's file was checked against the crate before versions existed (the
//! same fixture through the commit before them): its answers are those, byte for byte, but
//! for the `api-version` header each now carries.

use std::fmt::Write as _;

use async_trait::async_trait;
use bytes::Bytes;
use http::{HeaderValue, Method, Request};
use partner_api::store::{EventFeed, EventQuery, EventsPage, FeedEvent, OrderChange};
use partner_api::versions::{ApiVersion, Versions};
use partner_api::{
    EncodedOrder, MemoryStore, Order, Organization, PartnerApi, StoreError, Timestamp,
};
use tower::ServiceExt;

use crate::common::{collect, order, BASE_MILLIS};

const KEY: &str = "pk_test_golden_Ab12Cd34Ef56Gh78Ij90";

/// The fixture's orders: five of one organization at fixed times, one changed since.
fn orders() -> Vec<Order> {
    let mut orders: Vec<Order> = (0..5)
        .map(|n| {
            let mut order = order(&format!("g{n}"), BASE_MILLIS + n * 3_600_000);
            order.status = ["booked", "running"][usize::try_from(n % 2).unwrap()].into();
            order
        })
        .collect();
    orders[3].updated_at =
        Some(Timestamp::from_unix_millis(BASE_MILLIS + 40 * 86_400_000).unwrap());
    orders
}

/// A feed of fixed events: one of each type.
struct FixedFeed;

#[async_trait]
impl EventFeed for FixedFeed {
    async fn events(&self, _: &str, query: &EventQuery) -> Result<EventsPage, StoreError> {
        let at = |n: i64| Timestamp::from_unix_millis(BASE_MILLIS + 50 * 86_400_000 + n).unwrap();
        let snapshot = |order: &Order, changed: Timestamp| {
            let order = Order {
                updated_at: Some(changed),
                ..order.clone()
            };
            Bytes::copy_from_slice(EncodedOrder::new(order).unwrap().json())
        };
        let orders = orders();
        let events = vec![
            FeedEvent {
                id: 1,
                change: OrderChange::Created,
                created_at: at(1),
                data: snapshot(&orders[0], at(1)),
            },
            FeedEvent {
                id: 2,
                change: OrderChange::Updated,
                created_at: at(2),
                data: snapshot(&orders[3], at(2)),
            },
            FeedEvent {
                id: 3,
                change: OrderChange::Deleted,
                created_at: at(3),
                data: Bytes::from_static(br#"{"id":"g9"}"#),
            },
        ];
        let events: Vec<FeedEvent> = events
            .into_iter()
            .filter(|event| query.after_id().is_none_or(|after| event.id > after))
            .filter(|event| query.types().contains(event.change))
            .take(query.limit())
            .collect();
        let through = events.last().map(|event| event.id);
        Ok(EventsPage::Events { events, through })
    }

    async fn prune_events(&self, _: std::time::Duration, _: u32) -> Result<u64, StoreError> {
        Ok(0)
    }
}

fn api() -> PartnerApi {
    let store = MemoryStore::new();
    store
        .add_organization(Organization {
            id: "org_golden".into(),
            name: "Golden \"Media\" A/S".into(),
        })
        .unwrap();
    store.add_key(KEY, "org_golden").unwrap();
    store.add_orders("org_golden", orders()).unwrap();
    PartnerApi::from_store(store)
        .with_events(FixedFeed)
        .with_request_ids(false)
}

/// The requests of the fixture: method, path, key, and whether to name the version.
const CASES: &[(&str, &str, Option<&str>)] = &[
    ("GET", "/v1/me", Some(KEY)),
    ("GET", "/v1/orders", Some(KEY)),
    ("HEAD", "/v1/orders", Some(KEY)),
    ("GET", "/v1/orders?limit=2", Some(KEY)),
    ("GET", "/v1/orders?status=running", Some(KEY)),
    (
        "GET",
        "/v1/orders?provider=meta&created_since=2026-01-01T01:00:00Z",
        Some(KEY),
    ),
    (
        "GET",
        "/v1/orders?updated_since=2026-02-01T00:00:00Z",
        Some(KEY),
    ),
    (
        "GET",
        "/v1/orders?updated_before=2026-02-01T00:00:00Z&limit=1",
        Some(KEY),
    ),
    ("GET", "/v1/orders?updated_since=nonsense", Some(KEY)),
    ("GET", "/v1/orders?limit=0", Some(KEY)),
    ("GET", "/v1/orders?page_token=bogus", Some(KEY)),
    ("GET", "/v1/events", Some(KEY)),
    ("GET", "/v1/events?types=order.deleted", Some(KEY)),
    ("GET", "/v1/events?limit=1", Some(KEY)),
    ("GET", "/v1/events?after=bogus", Some(KEY)),
    ("GET", "/v1/deprecations", Some(KEY)),
    ("GET", "/v1/me", None),
    (
        "GET",
        "/v1/orders",
        Some("pk_test_unknown_Zz99Yy88Xx77Ww66Vv55"),
    ),
    ("GET", "/v1/nowhere", Some(KEY)),
    ("POST", "/v1/orders", Some(KEY)),
];

/// The headers a golden answer records (no request id, no time).
const HEADERS: &[&str] = &[
    "content-type",
    "content-length",
    "cache-control",
    "etag",
    "link",
    "vary",
    "allow",
    "www-authenticate",
    "api-version",
];

/// A request of the fixture: `method` on `path`, with `key` as its bearer when given.
fn fixture_request(method: &str, path: &str, key: Option<&str>) -> http::request::Builder {
    let request = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(path);
    match key {
        Some(key) => request.header("authorization", format!("Bearer {key}")),
        None => request,
    }
}

/// Every answer of the fixture at `version` (named in the header), as text.
async fn answers(version: ApiVersion) -> String {
    let api = api();
    let mut text = String::new();
    for (method, path, key) in CASES {
        let request = fixture_request(method, path, *key).header(
            "api-version",
            HeaderValue::from_str(&version.to_string()).unwrap(),
        );
        let response = api
            .clone()
            .oneshot(request.body(()).unwrap())
            .await
            .unwrap();
        let answer = collect(response).await;
        writeln!(
            text,
            "### {method} {path}{}",
            if key.is_some() { "" } else { " (no key)" }
        )
        .unwrap();
        writeln!(text, "status: {}", answer.status.as_u16()).unwrap();
        for name in HEADERS {
            for value in answer.headers.get_all(*name) {
                writeln!(text, "{name}: {}", value.to_str().unwrap()).unwrap();
            }
        }
        writeln!(text).unwrap();
        writeln!(text, "{}", String::from_utf8(answer.body.to_vec()).unwrap()).unwrap();
        writeln!(text).unwrap();
    }
    text
}

fn golden_file(version: ApiVersion) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(format!("{version}.txt"))
}

#[tokio::test]
async fn every_version_answers_its_committed_bytes() {
    let update = std::env::var_os("PARTNER_API_UPDATE_GOLDEN").is_some();
    for version in Versions::shipped().offered() {
        let served = answers(version).await;
        let file = golden_file(version);
        if update {
            std::fs::write(&file, &served).unwrap();
            continue;
        }
        let committed = std::fs::read_to_string(&file).unwrap_or_else(|err| {
            panic!(
                "{}: {err} (a new version's file is written with PARTNER_API_UPDATE_GOLDEN=1)",
                file.display()
            )
        });
        if served != committed {
            let line = served
                .lines()
                .zip(committed.lines())
                .position(|(a, b)| a != b)
                .unwrap_or(served.lines().count().min(committed.lines().count()));
            panic!(
                "version {version} answers other bytes than {} from line {}:\nserved:    {}\ncommitted: {}",
                file.display(),
                line + 1,
                served.lines().nth(line).unwrap_or("(end)"),
                committed.lines().nth(line).unwrap_or("(end)")
            );
        }
    }
}

/// The versions differ where a change says, and only there: the first version's answers are
/// the newest's without `updatedAt` and with the filters it did not have ignored.
#[test]
fn the_golden_files_differ_where_a_change_says() {
    let first = std::fs::read_to_string(golden_file(partner_api::versions::FIRST)).unwrap();
    let newest = std::fs::read_to_string(golden_file(partner_api::versions::UPDATED_AT)).unwrap();
    assert_ne!(
        first, newest,
        "a change that changes no golden answer is dead"
    );
    assert!(!first.contains("updatedAt") && newest.contains("\"updatedAt\""));
    assert!(
        first.contains("api-version: 2026-11-27") && !first.contains("api-version: 2026-11-28")
    );
}

/// The requests whose headers' order is recorded: a page with a next one and without, its
/// `304` and `HEAD`, a deprecated parameter's page, `/me`, a page of events and its `HEAD`,
/// and errors.
const ORDER_CASES: &[(&str, &str, Option<&str>)] = &[
    ("GET", "/v1/me", Some(KEY)),
    ("GET", "/v1/orders", Some(KEY)),
    ("GET", "/v1/orders?limit=2", Some(KEY)),
    ("HEAD", "/v1/orders?limit=2", Some(KEY)),
    ("GET", "/v1/orders?limit=2&provider=meta", Some(KEY)),
    ("GET", "/v1/events?limit=1", Some(KEY)),
    ("HEAD", "/v1/events?limit=1", Some(KEY)),
    ("GET", "/v1/orders?limit=0", Some(KEY)),
    ("GET", "/v1/me", None),
    ("GET", "/v1/nowhere", Some(KEY)),
];

/// The ways the API is configured for [`header_orders`], each on or off: the first version
/// and the `provider` parameter deprecated, request ids, the version's echo under a host's
/// own header, a rate limiter, tags (conditional requests).
const ORDER_SETTINGS: [&str; 5] = ["deprecated", "ids", "own_echo", "limited", "tags"];

/// The headers' order of every answer of [`ORDER_CASES`] (each `GET` with a tag asked again
/// with it, for its `304`), at every version, in every combination of [`ORDER_SETTINGS`]: the
/// names as written, in order, one answer a line.
async fn header_orders() -> String {
    let deprecations: [&str; 2] = [
        "2026-11-27=2026-11-01,sunset=2099-01-01,link=https://example.com/v1",
        "/orders?provider=2026-01-01",
    ];
    let mut text = String::new();
    for combination in 0..1u32 << ORDER_SETTINGS.len() {
        let on = |setting: &str| {
            let bit = ORDER_SETTINGS
                .iter()
                .position(|name| *name == setting)
                .unwrap();
            combination & (1 << bit) != 0
        };
        let mut api = api()
            .with_request_ids(on("ids"))
            .with_conditional_requests(on("tags"));
        if on("deprecated") {
            for deprecation in deprecations {
                api = api.with_deprecation(deprecation.parse().unwrap());
            }
        }
        let version_header = if on("own_echo") {
            api = api.with_version_header(http::HeaderName::from_static("x-api-version"));
            "x-api-version"
        } else {
            "api-version"
        };
        if on("limited") {
            api = api.with_rate_limiter(partner_api::LocalRateLimiter::new(
                std::time::Duration::from_secs(3600),
                std::num::NonZeroU32::new(1_000_000).unwrap(),
            ));
        }
        let settings: Vec<&str> = ORDER_SETTINGS.into_iter().filter(|name| on(name)).collect();
        for version in Versions::shipped().offered() {
            for (method, path, key) in ORDER_CASES {
                let mut etag = None;
                for conditional in [false, true] {
                    if conditional && etag.is_none() {
                        continue;
                    }
                    let mut request = fixture_request(method, path, *key)
                        .header(version_header, version.to_string())
                        .header("x-request-id", "req-order");
                    if let (true, Some(etag)) = (conditional, &etag) {
                        request = request.header("if-none-match", etag);
                    }
                    let response = api
                        .clone()
                        .oneshot(request.body(()).unwrap())
                        .await
                        .unwrap();
                    etag = response.headers().get("etag").cloned();
                    let names: Vec<&str> = response
                        .headers()
                        .iter()
                        .map(|(name, _)| name.as_str())
                        .collect();
                    writeln!(
                        text,
                        "[{}] {version} {method} {path}{}{}: {} {}",
                        settings.join(" "),
                        if key.is_some() { "" } else { " (no key)" },
                        if conditional { " (if-none-match)" } else { "" },
                        response.status().as_u16(),
                        names.join(" ")
                    )
                    .unwrap();
                }
            }
        }
    }
    text
}

/// The golden files record headers by name; their order is part of the bytes an existing
/// key is answered with too (`tests/golden/header-order.txt`, written with
/// `PARTNER_API_UPDATE_HEADER_ORDER=1`, only by a change meant to reorder headers, which is a
/// change of every version's bytes).
#[tokio::test]
async fn every_answer_writes_its_headers_in_the_committed_order() {
    let served = header_orders().await;
    let file =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/header-order.txt");
    if std::env::var_os("PARTNER_API_UPDATE_HEADER_ORDER").is_some() {
        std::fs::write(&file, &served).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&file).unwrap();
    for (line, (served, committed)) in served.lines().zip(committed.lines()).enumerate() {
        assert_eq!(served, committed, "line {} of {}", line + 1, file.display());
    }
    assert_eq!(served.lines().count(), committed.lines().count());
}
