//! The HTTP contract of sections 2, 4, 5, 7, 8 and 9, driven through `Service::call`.

use std::time::Duration;

use crate::common::*;
use http::{HeaderValue, Method, Request, StatusCode};
use partner_api::{MemoryStore, PartnerApi, StoreError, StoreErrorKind};
use serde_json::{json, Value};

const META: fn() -> Value = || json!({"version": "v1", "status": "beta"});

fn order_ids(json: &Value) -> Vec<String> {
    json["data"]["orders"]
        .as_array()
        .expect("data.orders is an array")
        .iter()
        .map(|order| order["id"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn me_returns_the_keys_organization_in_the_envelope() {
    let response = call(&api(), get("/v1/me", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(
        response.json(),
        json!({"meta": META(), "data": {"organization": {"id": "org_a", "name": "Alpha Media"}}})
    );
    let response = call(&api(), get("/v1/me", Some(KEY_B))).await;
    assert_eq!(response.json()["data"]["organization"]["id"], "org_b");
}

#[tokio::test]
async fn me_escapes_what_json_must_escape() {
    let store = store();
    let name = "Quote \" backslash \\ tab \t newline \n bell \u{7} Bølge 日本 \u{1F600} </script>";
    store
        .add_organization(partner_api::Organization {
            id: "org \"x\"".into(),
            name: name.into(),
        })
        .unwrap();
    store.add_key("pk_test_escapes", "org \"x\"").unwrap();
    let response = call(
        &PartnerApi::from_store(store),
        get("/v1/me", Some("pk_test_escapes")),
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let json = response.json();
    assert_eq!(
        json["data"]["organization"],
        json!({"id": "org \"x\"", "name": name})
    );
}

#[tokio::test]
async fn orders_are_the_newest_100_newest_first() {
    let response = call(&api(), get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::OK);
    let json = response.json();
    assert_eq!(json["meta"], META());
    assert_eq!(json.as_object().unwrap().len(), 2);
    assert_eq!(json["data"].as_object().unwrap().len(), 1);
    // a156 is the newest of 157; the newest 100 are a156 down to a057.
    let expected: Vec<String> = (57..157).rev().map(|n| format!("a{n:03}")).collect();
    assert_eq!(order_ids(&json), expected);
    let stamps: Vec<&str> = json["data"]["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["createdAt"].as_str().unwrap())
        .collect();
    assert!(
        stamps.windows(2).all(|w| w[0] > w[1]),
        "strictly newest first"
    );
}

#[tokio::test]
async fn equal_timestamps_are_broken_by_id_descending() {
    let json = call(&api(), get("/v1/orders", Some(KEY_B))).await.json();
    assert_eq!(order_ids(&json), ["b3", "b2", "b1"]);
}

#[tokio::test]
async fn an_order_has_exactly_the_ten_fields_in_their_formats() {
    let json = call(&api(), get("/v1/orders", Some(KEY_B))).await.json();
    let order = &json["data"]["orders"][2];
    assert_eq!(
        *order,
        json!({
            "id": "b1",
            "providers": ["meta", "google"],
            "advertiserName": "Advertiser of b1",
            "campaignName": "Campaign \"b1\"",
            "budgetDkk": 250000,
            "startDate": "2026-03-01",
            "endDate": "2026-04-30",
            "status": "booked",
            "externalReference": "PO-b1",
            "createdAt": "2026-01-01T00:00:00.000Z",
        })
    );
    assert!(order["budgetDkk"].is_u64(), "a whole number, not a float");
    assert_eq!(
        json["data"]["orders"][0]["createdAt"],
        "2026-01-01T00:00:00.005Z"
    );
}

#[tokio::test]
async fn the_raw_body_has_no_decimal_budget_and_millisecond_timestamps() {
    let response = call(&api(), get("/v1/orders", Some(KEY_B))).await;
    let text = std::str::from_utf8(&response.body).unwrap();
    assert!(text.contains(r#""budgetDkk":250000,"#), "{text}");
    assert!(
        text.contains(r#""createdAt":"2026-01-01T00:00:00.000Z""#),
        "{text}"
    );
    assert!(text.starts_with(r#"{"meta":{"version":"v1","status":"beta"},"data":{"orders":["#));
}

#[tokio::test]
async fn an_organization_without_orders_gets_an_empty_list() {
    let response = call(&api(), get("/v1/orders", Some(KEY_EMPTY))).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(
        response.json(),
        json!({"meta": META(), "data": {"orders": []}})
    );
}

#[tokio::test]
async fn a_key_reaches_only_its_own_organization() {
    let json = call(&api(), get("/v1/orders", Some(KEY_B))).await.json();
    let ids = order_ids(&json);
    assert!(ids.iter().all(|id| id.starts_with('b')), "{ids:?}");
    let json = call(&api(), get("/v1/orders", Some(KEY_A))).await.json();
    assert!(order_ids(&json).iter().all(|id| id.starts_with('a')));
    let json = call(&api(), get("/v1/orders", Some(KEY_EMPTY)))
        .await
        .json();
    assert!(order_ids(&json).is_empty());
}

#[tokio::test]
async fn revocation_takes_effect_on_the_very_next_request() {
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    assert_eq!(
        call(&api, get("/v1/orders", Some(KEY_B))).await.status,
        StatusCode::OK
    );
    assert!(store.revoke_key(KEY_B));
    let revoked = call(&api, get("/v1/orders", Some(KEY_B))).await;
    assert_eq!(revoked.status, StatusCode::UNAUTHORIZED);
    let unknown = call(&api, get("/v1/orders", Some("pk_test_never_issued"))).await;
    assert_eq!(
        revoked.body, unknown.body,
        "revoked and unknown keys answer alike"
    );
    assert_eq!(
        without_request_id(revoked.headers),
        without_request_id(unknown.headers)
    );
    assert_eq!(call(&api, get("/v1/me", Some(KEY_B))).await.status, 401);
    // A key added at runtime works at once.
    store.add_key("pk_test_fresh", "org_b").unwrap();
    assert_eq!(
        call(&api, get("/v1/me", Some("pk_test_fresh")))
            .await
            .status,
        200
    );
}

#[tokio::test]
async fn a_seeded_revoked_key_is_invalid() {
    let response = call(&api(), get("/v1/me", Some(REVOKED_KEY))).await;
    assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    assert_eq!(response.error_message(), "missing or invalid API key: send the header Authorization: Bearer <API_KEY> with a valid key");
}

fn with_authorization(path: &str, values: &[&[u8]]) -> Request<()> {
    let mut request = Request::get(path).body(()).unwrap();
    for value in values {
        request
            .headers_mut()
            .append("authorization", HeaderValue::from_bytes(value).unwrap());
    }
    request
}

const NO_ERROR: &str = "Bearer realm=\"partner-api\"";
const INVALID_TOKEN: &str = "Bearer realm=\"partner-api\", error=\"invalid_token\"";

#[tokio::test]
async fn every_unauthenticated_request_is_a_401_with_a_challenge() {
    let long = format!("Bearer {}", "k".repeat(64 * 1024));
    let key_a = format!("Bearer {KEY_A}");
    let cases: Vec<(Vec<&[u8]>, &str)> = vec![
        (vec![], NO_ERROR),
        (vec![b"Basic dXNlcjpwYXNz"], NO_ERROR),
        (vec![KEY_A.as_bytes()], NO_ERROR),
        (vec![b"Bearer"], INVALID_TOKEN),
        (vec![b"Bearer "], INVALID_TOKEN),
        (vec![b"Bearer a b"], INVALID_TOKEN),
        (vec![b"Bearer\tabc"], INVALID_TOKEN),
        (vec![key_a.as_bytes(), key_a.as_bytes()], INVALID_TOKEN),
        (vec![b"Bearer caf\xc3\xa9"], INVALID_TOKEN),
        (vec![b"Bearer \xff\xfe"], INVALID_TOKEN),
        (vec![long.as_bytes()], INVALID_TOKEN),
        (vec![b"Bearer pk_test_unknown"], INVALID_TOKEN),
        (
            vec![b"Bearer pk_test_alpha_4fG7hJ2kL9mN3pQ5rS8T"],
            INVALID_TOKEN,
        ),
    ];
    for path in ["/v1/me", "/v1/orders"] {
        for (values, challenge) in &cases {
            let response = call(&api(), with_authorization(path, values)).await;
            let shown = format!("{path} {values:?}");
            assert_eq!(response.status, StatusCode::UNAUTHORIZED, "{shown}");
            assert_eq!(
                response.header("www-authenticate"),
                Some(*challenge),
                "{shown}"
            );
            assert_eq!(response.header("content-type"), Some("application/json"));
            let message = response.error_message();
            assert!(!message.is_empty());
            assert!(
                !message.contains(KEY_A) && !message.contains("unknown"),
                "{message}"
            );
        }
    }
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive_and_takes_several_spaces() {
    for value in [
        format!("bearer {KEY_A}"),
        format!("BEARER {KEY_A}"),
        format!("BeArEr {KEY_A}"),
        format!("Bearer   {KEY_A}"),
    ] {
        let response = call(&api(), with_authorization("/v1/me", &[value.as_bytes()])).await;
        assert_eq!(response.status, StatusCode::OK, "{value}");
    }
}

#[tokio::test]
async fn head_answers_like_get_without_a_body() {
    let cases = [
        ("/v1/me", Some(KEY_A)),
        ("/v1/orders", Some(KEY_A)),
        ("/v1/orders", None),
        ("/v1/orders", Some("pk_test_unknown")),
        ("/v1/nothing", None),
    ];
    for (path, key) in cases {
        let get_response = call(&api(), get(path, key)).await;
        let mut head = get(path, key);
        *head.method_mut() = Method::HEAD;
        let mut head_response = call(&api(), head).await;
        assert_eq!(head_response.status, get_response.status, "{path}");
        assert!(head_response.body.is_empty(), "{path}");
        // The server writes GET's Content-Length from the body; HEAD states the same length.
        let length = head_response.headers.remove("content-length");
        assert_eq!(
            length.unwrap(),
            get_response.body.len().to_string().as_str()
        );
        assert_eq!(
            without_request_id(head_response.headers),
            without_request_id(get_response.headers),
            "{path}"
        );
    }
}

#[tokio::test]
async fn an_answer_that_waits_for_a_store_is_finished_as_a_ready_one_is() {
    // Nothing is at hand in a slow store: each answer is a future, finished when it is done.
    let deprecation: partner_api::deprecation::Deprecation =
        "/me=2026-12-01,sunset=2099-06-01".parse().unwrap();
    let at_hand = api().with_deprecation(deprecation.clone());
    let waiting = PartnerApi::from_store(SlowStore {
        inner: store(),
        delay: Duration::from_millis(1),
    })
    .with_deprecation(deprecation);
    let cases = [
        ("/v1/me", Some(KEY_A)),
        ("/v1/orders", Some(KEY_A)),
        ("/v1/orders", Some("pk_test_unknown")),
    ];
    for (path, key) in cases {
        for method in [Method::GET, Method::HEAD] {
            let request = |id: &'static str| {
                let mut request = get(path, key);
                *request.method_mut() = method.clone();
                request
                    .headers_mut()
                    .insert("x-request-id", HeaderValue::from_static(id));
                request
            };
            let ready = call(&at_hand, request("ready-1")).await;
            let waited = call(&waiting, request("waited-1")).await;
            assert_eq!(waited.status, ready.status, "{method} {path}");
            assert_eq!(waited.body, ready.body, "{method} {path}");
            assert_eq!(waited.headers["x-request-id"], "waited-1");
            // The deprecation's fields, HEAD's Content-Length, the rest alike.
            assert_eq!(
                without_request_id(waited.headers),
                without_request_id(ready.headers),
                "{method} {path}"
            );
        }
    }
}

#[tokio::test]
async fn unknown_paths_under_the_prefix_are_json_404s() {
    for path in [
        "/v1",
        "/v1/",
        "/v1/me/",
        "/v1//me",
        "/v1/./me",
        "/v1/%6de",
        "/v1/ME",
        "/v1/orders/a001",
        "/v1/order",
        "/v2/me",
        "/me",
        "/",
        "/v1me",
    ] {
        for key in [None, Some(KEY_A)] {
            let response = call(&api(), get(path, key)).await;
            assert_eq!(response.status, StatusCode::NOT_FOUND, "{path}");
            assert_eq!(response.error_message(), "not found");
        }
    }
}

#[tokio::test]
async fn other_methods_on_known_paths_are_405_with_allow() {
    for path in ["/v1/me", "/v1/orders"] {
        for method in [
            "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "PURGE",
        ] {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("authorization", format!("Bearer {KEY_A}"))
                .body(())
                .unwrap();
            let response = call(&api(), request).await;
            assert_eq!(
                response.status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path}"
            );
            assert_eq!(response.header("allow"), Some("GET, HEAD"));
            assert!(response.error_message().contains("GET"));
        }
    }
}

#[tokio::test]
async fn query_parameters_other_than_the_pages_are_ignored() {
    let plain = call(&api(), get("/v1/orders", Some(KEY_A))).await;
    for path in [
        "/v1/orders?page=2&per_page=1",
        "/v1/orders?",
        "/v1/orders?limits=5&token=x&Limit=3",
    ] {
        let response = call(&api(), get(path, Some(KEY_A))).await;
        assert_eq!(response.body, plain.body, "{path}");
    }
    let me = call(&api(), get("/v1/me?x=1", Some(KEY_A))).await;
    assert_eq!(me.status, StatusCode::OK);
}

#[tokio::test]
async fn every_response_is_json_and_cached_only_privately() {
    let requests = [
        get("/v1/me", Some(KEY_A)),
        get("/v1/orders", Some(KEY_A)),
        get("/v1/orders", None),
        get("/v1/nope", None),
        Request::post("/v1/me").body(()).unwrap(),
    ];
    for request in requests {
        let path = request.uri().to_string();
        let response = call(&api(), request).await;
        assert_eq!(
            response.header("content-type"),
            Some("application/json"),
            "{path}"
        );
        // A keyed 200 may sit in the partner's own cache, revalidated on every use; nothing
        // else may be kept anywhere.
        let cache_control = match response.status {
            StatusCode::OK => "private, no-cache",
            _ => "no-store",
        };
        assert_eq!(
            response.header("cache-control"),
            Some(cache_control),
            "{path}"
        );
        assert_eq!(
            response.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
        assert_eq!(response.json()["meta"], META(), "{path}");
    }
}

#[tokio::test]
async fn a_request_body_is_ignored() {
    let request = Request::get("/v1/me")
        .header("authorization", format!("Bearer {KEY_A}"))
        .body(String::from("{\"unexpected\": true}"))
        .unwrap();
    assert_eq!(call(&api(), request).await.status, StatusCode::OK);
}

fn failing(error: fn() -> StoreError) -> PartnerApi {
    PartnerApi::from_store(FailingStore(error))
}

#[tokio::test]
async fn a_store_failure_is_a_generic_500_and_its_detail_is_logged() {
    let logs = CapturedLogs::default();
    let _guard = logs.install();
    let api = failing(|| StoreError::other("connection reset by db-7.internal"));
    let response = call(&api, get("/v1/me", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(response.error_message(), "internal server error");
    assert!(!String::from_utf8_lossy(&response.body).contains("db-7"));
    let text = logs.text();
    assert!(
        text.contains("ERROR") && text.contains("connection reset by db-7.internal"),
        "{text}"
    );
}

#[tokio::test]
async fn an_order_store_failure_is_a_500_too() {
    let store = store();
    let api = PartnerApi::new(
        std::sync::Arc::new(store),
        std::sync::Arc::new(FailingStore(|| StoreError::invalid_data("bad row"))),
    );
    let response = call(&api, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        call(&api, get("/v1/me", Some(KEY_A))).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn an_unavailable_store_is_a_503() {
    let api = failing(|| StoreError::unavailable("connection refused"));
    let response = call(&api, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(!response.error_message().contains("refused"));
    assert_eq!(response.header("retry-after"), Some("2"));
    assert_eq!(
        StoreError::unavailable("x").kind(),
        StoreErrorKind::Unavailable
    );
    // The wait is the host's to set; sent in whole seconds, rounded up, at least 1.
    for (retry_after, header) in [(1500, "2"), (0, "1"), (30_000, "30")] {
        let api = failing(|| StoreError::unavailable("connection refused"))
            .with_retry_after(Duration::from_millis(retry_after));
        let response = call(&api, get("/v1/me", Some(KEY_A))).await;
        assert_eq!(response.header("retry-after"), Some(header));
    }
    // Other failures are no reason to come back later.
    let api = failing(|| StoreError::other("bug"));
    let response = call(&api, get("/v1/me", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(response.header("retry-after"), None);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_store_is_a_503_after_the_store_timeout() {
    let api = PartnerApi::from_store(HangingStore).with_store_timeout(Some(Duration::from_secs(2)));
    let started = tokio::time::Instant::now();
    let response = call(&api, get("/v1/me", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.header("retry-after"), Some("2"));
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    let default = PartnerApi::from_store(HangingStore);
    let started = tokio::time::Instant::now();
    let response = call(&default, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        started.elapsed(),
        partner_api::service::DEFAULT_STORE_TIMEOUT
    );
}

#[tokio::test]
async fn a_panicking_store_is_a_500_and_the_service_keeps_serving() {
    let api = PartnerApi::from_store(PanickingStore);
    let response = call(&api, get("/v1/me", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(response.error_message(), "internal server error");
    let again = call(&api, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(again.status, StatusCode::INTERNAL_SERVER_ERROR);
    // The same service value still answers what needs no store.
    assert_eq!(
        call(&api, get("/v1/me", None)).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn the_service_bounds_and_sorts_what_a_store_returns() {
    let api = PartnerApi::new(
        std::sync::Arc::new(store()),
        std::sync::Arc::new(UnsortedStore { count: 150 }),
    );
    let json = call(&api, get("/v1/orders", Some(KEY_A))).await.json();
    let expected: Vec<String> = (50..150).rev().map(|n| format!("u{n:03}")).collect();
    assert_eq!(order_ids(&json), expected);
}

#[tokio::test]
async fn the_prefix_and_realm_are_configurable() {
    let api = api()
        .with_prefix("/partner/v1/")
        .with_realm("acme partners");
    assert_eq!(api.prefix(), "/partner/v1");
    assert_eq!(
        call(&api, get("/partner/v1/me", Some(KEY_A))).await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(&api, get("/v1/me", Some(KEY_A))).await.status,
        StatusCode::NOT_FOUND
    );
    let response = call(&api, get("/partner/v1/orders", None)).await;
    assert_eq!(
        response.header("www-authenticate"),
        Some("Bearer realm=\"acme partners\"")
    );
    let root = self::api().with_prefix("/");
    assert_eq!(
        call(&root, get("/me", Some(KEY_A))).await.status,
        StatusCode::OK
    );
}

#[test]
#[should_panic(expected = "prefix")]
fn a_prefix_that_cannot_match_is_refused() {
    let _ = api().with_prefix("v1");
}

#[tokio::test]
async fn no_key_or_digest_reaches_logs_debug_output_or_bodies() {
    let logs = CapturedLogs::default();
    let _guard = logs.install();
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    let failing = failing(|| StoreError::other("boom"));
    let panicking = PartnerApi::from_store(PanickingStore);
    let hanging =
        PartnerApi::from_store(HangingStore).with_store_timeout(Some(Duration::from_millis(20)));
    let hex: String = partner_api::KeyDigest::of(KEY_A)
        .as_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mut seen = String::new();
    for api in [&api, &failing, &panicking, &hanging] {
        for path in ["/v1/me", "/v1/orders", "/v1/nope"] {
            for key in [KEY_A, REVOKED_KEY, "pk_test_unknown_key_0001"] {
                let response = call(api, get(path, Some(key))).await;
                seen.push_str(&String::from_utf8_lossy(&response.body));
                seen.push_str(&format!("{:?}", response.headers));
            }
        }
    }
    seen.push_str(&logs.text());
    seen.push_str(&format!(
        "{api:?} {store:?} {:?}",
        partner_api::KeyDigest::of(KEY_A)
    ));
    for secret in [KEY_A, REVOKED_KEY, "pk_test_unknown_key_0001", hex.as_str()] {
        assert!(!seen.contains(secret), "{secret} leaked");
    }
}

/// A key store that never answers for `KEY_A` and answers at once for every other key.
struct HangsForKeyA(MemoryStore);

#[async_trait::async_trait]
impl partner_api::KeyStore for HangsForKeyA {
    async fn lookup(
        &self,
        digest: &partner_api::KeyDigest,
    ) -> Result<partner_api::KeyLookup, StoreError> {
        if *digest == partner_api::KeyDigest::of(KEY_A) {
            std::future::pending::<()>().await;
        }
        self.0.lookup(digest).await
    }
}

#[tokio::test]
async fn a_hanging_request_does_not_hold_up_others() {
    let store = store();
    let api = PartnerApi::new(
        std::sync::Arc::new(HangsForKeyA(store.clone())),
        std::sync::Arc::new(store),
    )
    .with_store_timeout(Some(Duration::from_secs(30)));
    let stuck = tokio::spawn({
        let api = api.clone();
        async move { call(&api, get("/v1/me", Some(KEY_A))).await.status }
    });
    tokio::task::yield_now().await;
    for _ in 0..10 {
        let response = call(&api, get("/v1/orders", Some(KEY_B))).await;
        assert_eq!(response.status, StatusCode::OK);
    }
    assert!(
        !stuck.is_finished(),
        "the first request is still waiting for its store"
    );
    stuck.abort();
}

#[test]
fn the_service_fits_tower_hosts() {
    fn assert_service<S>(_: &S)
    where
        S: tower::Service<Request<axum::body::Body>, Error = std::convert::Infallible>
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
    }
    assert_service(&api());
}

/// A key store that counts its lookups.
struct CountingKeys(MemoryStore, std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl partner_api::KeyStore for CountingKeys {
    async fn lookup(
        &self,
        digest: &partner_api::KeyDigest,
    ) -> Result<partner_api::KeyLookup, StoreError> {
        self.1.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.0.lookup(digest).await
    }
}

#[tokio::test]
async fn generated_keys_work_and_forged_ones_never_reach_the_store() {
    use partner_api::key::{ApiKey, KeyEnvironment};
    use std::sync::atomic::Ordering;
    let store = store();
    let key = ApiKey::generate(KeyEnvironment::Live).unwrap();
    store.add_key(key.plaintext(), "org_b").unwrap();
    let keys = std::sync::Arc::new(CountingKeys(store.clone(), 0.into()));
    let api = PartnerApi::new(keys.clone(), std::sync::Arc::new(store));

    let response = call(&api, get("/v1/me", Some(key.plaintext()))).await;
    assert_eq!(response.json()["data"]["organization"]["id"], "org_b");
    assert_eq!(keys.1.load(Ordering::SeqCst), 1);

    let mut forged = key.plaintext().to_owned();
    let last = forged.pop().unwrap();
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let response = call(&api, get("/v1/me", Some(&forged))).await;
    assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    assert_eq!(response.header("www-authenticate"), Some(INVALID_TOKEN));
    assert_eq!(
        keys.1.load(Ordering::SeqCst),
        1,
        "the forged key was refused before the store"
    );

    // A key of another shape is still looked up.
    call(&api, get("/v1/me", Some("pk_live_not_generated_here"))).await;
    assert_eq!(keys.1.load(Ordering::SeqCst), 2);
}

/// A key store whose immediate answer panics or fails, and whose async answer is never used.
struct BrokenNow(fn() -> Option<Result<partner_api::KeyLookup, StoreError>>);

#[async_trait::async_trait]
impl partner_api::KeyStore for BrokenNow {
    async fn lookup(
        &self,
        _: &partner_api::KeyDigest,
    ) -> Result<partner_api::KeyLookup, StoreError> {
        unreachable!("lookup_now answered")
    }

    fn lookup_now(
        &self,
        _: &partner_api::KeyDigest,
    ) -> Option<Result<partner_api::KeyLookup, StoreError>> {
        (self.0)()
    }
}

#[tokio::test]
async fn immediate_store_answers_fail_and_panic_like_waited_ones() {
    let orders = std::sync::Arc::new(store());
    let panicking = PartnerApi::new(
        std::sync::Arc::new(BrokenNow(|| panic!("lookup_now blew up"))),
        orders.clone(),
    );
    let response = call(&panicking, get("/v1/me", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(response.error_message(), "internal server error");
    assert_eq!(call(&panicking, get("/v1/me", None)).await.status, 401);

    let unavailable = PartnerApi::new(
        std::sync::Arc::new(BrokenNow(|| Some(Err(StoreError::unavailable("down"))))),
        orders,
    );
    let response = call(&unavailable, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
}

#[tokio::test(start_paused = true)]
async fn an_order_store_that_hangs_after_an_immediate_key_is_a_503() {
    let api = PartnerApi::new(
        std::sync::Arc::new(store()),
        std::sync::Arc::new(HangingStore),
    )
    .with_store_timeout(Some(Duration::from_secs(3)));
    let started = tokio::time::Instant::now();
    let response = call(&api, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(started.elapsed(), Duration::from_secs(3));
    assert_eq!(
        call(&api, get("/v1/me", Some(KEY_A))).await.status,
        StatusCode::OK
    );
}
