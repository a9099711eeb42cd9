//! The OpenAPI description: served as documented, and an exact account of the responses.
//! (Every response of the other suites is checked against it in `crate::common::call`.)

use std::collections::BTreeSet;

use crate::common::contract::{assert_conforms, produced};
use crate::common::*;
use bytes::Bytes;
use http::{HeaderMap, Method, Request, StatusCode};
use partner_api::store::KeyManager as _;
use partner_api::{openapi, PartnerApi, StoreError};
use serde_json::{json, Value};

fn document() -> Value {
    serde_json::from_str(openapi::DOCUMENT).unwrap()
}

#[tokio::test]
async fn the_document_is_served_bare_without_a_key() {
    let response = call(&api(), get("/v1/openapi.json", None)).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.header("content-type"), Some("application/json"));
    let served = response.json();
    assert_eq!(served, openapi::document("/v1"));
    assert_eq!(
        served,
        document(),
        "the checked-in file is served as it is under /v1"
    );
    assert_eq!(served["openapi"], "3.1.0");
    assert_eq!(served["info"]["version"], "1.0.0-beta");
    assert!(
        served.get("meta").is_none(),
        "a meta member would make it invalid OpenAPI"
    );

    let mut head = get("/v1/openapi.json", None);
    *head.method_mut() = Method::HEAD;
    let head = call(&api(), head).await;
    assert_eq!((head.status, head.body.len()), (StatusCode::OK, 0));
    let post = call(&api(), Request::post("/v1/openapi.json").body(()).unwrap()).await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// Each version's document: by `?version=`, else by the version header, else the newest; a
/// name that is no version is a 400 listing those offered.
#[tokio::test]
async fn each_version_has_its_document() {
    let first = openapi::document_at(partner_api::versions::FIRST, "/v1").unwrap();
    let asked = call(&api(), get("/v1/openapi.json?version=2026-11-27", None)).await;
    assert_eq!(asked.json(), first);
    let mut by_header = get("/v1/openapi.json", None);
    by_header
        .headers_mut()
        .insert("api-version", http::HeaderValue::from_static("2026-11-27"));
    assert_eq!(call(&api(), by_header).await.json(), first);
    let newest = call(&api(), get("/v1/openapi.json?version=2026-12-01", None)).await;
    assert_eq!(newest.json(), document());
    assert_ne!(first, document());
    for bad in ["2026-11-29", "latest", "2026-11-27&version=2026-11-27"] {
        let refused = call(
            &api(),
            get(&format!("/v1/openapi.json?version={bad}"), None),
        )
        .await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad}");
        assert_eq!(
            refused.error_message(),
            "invalid query parameter version: it must name a version of this API, one of \
             2026-12-01, 2026-11-28, 2026-11-27 (newest first)"
        );
    }
}

#[tokio::test]
async fn the_served_server_url_follows_the_prefix() {
    let api = api().with_prefix("/partner/v1");
    let served = call(&api, get("/partner/v1/openapi.json", None))
        .await
        .json();
    assert_eq!(served["servers"][0]["url"], "/partner/v1");
    let root = self::api().with_prefix("");
    assert_eq!(
        call(&root, get("/openapi.json", None)).await.json()["servers"][0]["url"],
        "/"
    );
}

/// The newest version's document adds `updatedAt` to orders (listed, not required: the
/// document served by default also describes the answers of keys at the first version) and
/// the two filters of the last change.
#[test]
fn the_newest_document_adds_the_last_change() {
    let newest = document();
    let order = &newest["components"]["schemas"]["Order"];
    assert_eq!(order["properties"]["updatedAt"]["format"], "date-time");
    assert_eq!(order["additionalProperties"], false);
    assert!(!order["required"]
        .as_array()
        .unwrap()
        .contains(&json!("updatedAt")));
    let parameters = &newest["paths"]["/orders"]["get"]["parameters"];
    for name in ["updated_since", "updated_before"] {
        assert!(
            parameters
                .as_array()
                .unwrap()
                .contains(&json!({"$ref": format!("#/components/parameters/{name}")})),
            "{name}"
        );
    }
    let first = openapi::document_at(partner_api::versions::FIRST, "/v1").unwrap();
    assert!(first["components"]["parameters"]["updated_since"].is_null());
    assert_eq!(first["info"]["x-api-version"], "2026-11-27");
    assert_eq!(newest["info"]["x-api-version"], "2026-12-01");
    assert_eq!(first["info"]["version"], newest["info"]["version"]);
}

/// The first version's document: the contract as it was, the ten fields exactly.
#[test]
fn the_document_describes_the_contract() {
    let document = openapi::document_at(partner_api::versions::FIRST, "/v1").unwrap();
    let order = &document["components"]["schemas"]["Order"];
    let required: BTreeSet<&str> = order["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let properties: BTreeSet<&str> = order["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(required.len(), 10);
    assert_eq!(required, properties, "all ten fields, all required");
    assert_eq!(order["properties"]["budgetDkk"]["type"], "integer");
    assert_eq!(order["properties"]["startDate"]["format"], "date");
    assert_eq!(order["properties"]["createdAt"]["format"], "date-time");
    assert_eq!(
        document["components"]["securitySchemes"]["bearerAuth"],
        json!({"type": "http", "scheme": "bearer", "description": document["components"]["securitySchemes"]["bearerAuth"]["description"]})
    );
    assert_eq!(document["security"], json!([{"bearerAuth": []}]));
    assert_eq!(
        document["paths"]["/openapi.json"]["get"]["security"],
        json!([])
    );
    assert!(
        !openapi::DOCUMENT.contains("nullable"),
        "JSON Schema 2020-12: type [X, \"null\"]"
    );
    let orders = &document["components"]["schemas"]["OrdersResponse"]["properties"]["data"]
        ["properties"]["orders"];
    assert_eq!(orders["maxItems"], partner_api::MAX_ORDERS);
}

/// Every response the document declares is one the service gives: this test produces each of
/// them (and `crate::common::call` checks each against the document).
#[tokio::test]
async fn every_documented_response_is_produced() {
    let failing = PartnerApi::from_store(FailingStore(|| StoreError::other("down")));
    let unavailable = PartnerApi::from_store(FailingStore(|| StoreError::unavailable("down")));
    for path in ["/v1/me", "/v1/orders"] {
        call(&api(), get(path, Some(KEY_A))).await;
        call(&api(), get(path, None)).await;
        call(&api(), get(path, Some("pk_test_unknown"))).await;
        call(&failing, get(path, Some(KEY_A))).await;
        call(&unavailable, get(path, Some(KEY_A))).await;
        let limited = api().with_rate_limiter(partner_api::LocalRateLimiter::new(
            std::time::Duration::from_secs(60),
            std::num::NonZeroU32::MIN,
        ));
        let first = call(&limited, get(path, Some(KEY_A))).await;
        let mut unchanged = get(path, Some(KEY_A));
        let etag = first.headers["etag"].clone();
        unchanged.headers_mut().insert("if-none-match", etag);
        assert_eq!(
            call(&api(), unchanged).await.status,
            StatusCode::NOT_MODIFIED
        );
        assert_eq!(
            call(&limited, get(path, Some(KEY_A))).await.status,
            StatusCode::TOO_MANY_REQUESTS
        );
    }
    // `/versions`: not conditional, so apart from the loop above.
    call(&api(), get("/v1/versions", Some(KEY_A))).await;
    call(&api(), get("/v1/versions", None)).await;
    call(&failing, get("/v1/versions", Some(KEY_A))).await;
    call(&unavailable, get("/v1/versions", Some(KEY_A))).await;
    let limited = api().with_rate_limiter(partner_api::LocalRateLimiter::new(
        std::time::Duration::from_secs(60),
        std::num::NonZeroU32::MIN,
    ));
    call(&limited, get("/v1/versions", Some(KEY_A))).await;
    assert_eq!(
        call(&limited, get("/v1/versions", Some(KEY_A)))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
    // A version header that names no version: a 400 on every route with a key, and on the
    // document.
    for path in KEYED_ROUTES.into_iter().chain(["/v1/openapi.json"]) {
        let mut request = get(path, Some(KEY_A));
        request
            .headers_mut()
            .insert("api-version", http::HeaderValue::from_static("2020-01-01"));
        let api = api().with_events(crate::common::store());
        assert_eq!(
            call(&api, request).await.status,
            StatusCode::BAD_REQUEST,
            "{path}"
        );
    }
    call(&api(), get("/v1/openapi.json", None)).await;
    // The 403 of every keyed route: a key pinned to an address range, asked from outside it
    // (here, not left to `allowed_ips.rs`, which may not have run when this checks).
    let pinned_store = store();
    let pinned = pinned_store
        .issue(
            "org_a",
            partner_api::store::NewKey::new(partner_api::key::KeyEnvironment::Live)
                .with_allowed_ips(partner_api::key::AllowedIps::parse(["192.0.2.0/24"]).unwrap()),
        )
        .await
        .unwrap();
    let outside = PartnerApi::from_store(pinned_store.clone())
        .with_events(pinned_store)
        .with_peer_addr("198.51.100.7:40000".parse().unwrap());
    for path in KEYED_ROUTES {
        let refused = call(&outside, get(path, Some(pinned.plaintext()))).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
    }
    call(&api(), get("/v1/orders?limit=0", Some(KEY_A))).await;
    events_responses().await;
    deprecations_responses().await;

    let document = document();
    let mut declared = BTreeSet::new();
    for (path, item) in document["paths"].as_object().unwrap() {
        for status in item["get"]["responses"].as_object().unwrap().keys() {
            declared.insert((path.clone(), status.parse::<u16>().unwrap()));
        }
    }
    let produced = produced().lock().unwrap().clone();
    let missing: Vec<_> = declared.difference(&produced).collect();
    assert!(
        missing.is_empty(),
        "documented but never produced: {missing:?}"
    );
}

/// A feed that fails as `FailingStore` does.
struct FailingFeed(fn() -> StoreError);

#[async_trait::async_trait]
impl partner_api::store::EventFeed for FailingFeed {
    async fn events(
        &self,
        _: &str,
        _: &partner_api::store::EventQuery,
    ) -> Result<partner_api::store::EventsPage, StoreError> {
        Err((self.0)())
    }
    async fn prune_events(&self, _: std::time::Duration, _: u32) -> Result<u64, StoreError> {
        Err((self.0)())
    }
}

/// Every documented answer of `GET /events` but the 403 (above).
async fn events_responses() {
    let store = store();
    let api = PartnerApi::from_store(store.clone()).with_events(store.clone());
    let first = call(&api, get("/v1/events?limit=1", Some(KEY_A))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        call(&api, get("/v1/events", None)).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        call(&api, get("/v1/events?types=x", Some(KEY_A)))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&crate::common::api(), get("/v1/events", Some(KEY_A)))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    for (error, status) in [
        (
            (|| StoreError::other("down")) as fn() -> StoreError,
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        (
            || StoreError::unavailable("down"),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ] {
        let failing = PartnerApi::from_store(store.clone()).with_events(FailingFeed(error));
        assert_eq!(
            call(&failing, get("/v1/events", Some(KEY_A))).await.status,
            status
        );
    }
    let limited = PartnerApi::from_store(store.clone())
        .with_events(store.clone())
        .with_rate_limiter(partner_api::LocalRateLimiter::new(
            std::time::Duration::from_secs(60),
            std::num::NonZeroU32::MIN,
        ));
    call(&limited, get("/v1/events", Some(KEY_A))).await;
    assert_eq!(
        call(&limited, get("/v1/events", Some(KEY_A))).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    let after = first.json()["data"]["events"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    partner_api::store::prune_event_batches(&store, std::time::Duration::ZERO, 500, 10)
        .await
        .unwrap();
    assert_eq!(
        call(&api, get(&format!("/v1/events?after={after}"), Some(KEY_A)))
            .await
            .status,
        StatusCode::GONE
    );
}

/// A deprecated-call store whose reads fail as `FailingStore` does.
struct FailingCalls(fn() -> StoreError);

#[async_trait::async_trait]
impl partner_api::store::DeprecatedCallStore for FailingCalls {
    async fn record_deprecated_calls(
        &self,
        _: &[partner_api::store::DeprecatedCallCount],
    ) -> Result<(), StoreError> {
        Ok(())
    }
    async fn deprecated_calls(
        &self,
        _: &str,
        _: Option<&str>,
        _: partner_api::Timestamp,
    ) -> Result<Vec<partner_api::store::DeprecatedCallTotal>, StoreError> {
        Err((self.0)())
    }
    async fn prune_deprecated_calls(
        &self,
        _: std::time::Duration,
        _: u32,
    ) -> Result<u64, StoreError> {
        Ok(0)
    }
}

/// Every documented answer of `GET /deprecations` but the 403 (above).
async fn deprecations_responses() {
    use partner_api::deprecated_calls::DeprecatedCallRecorder;
    let deprecated = |api: PartnerApi| api.with_deprecation("/me=2026-01-01".parse().unwrap());
    let api = deprecated(crate::common::api());
    assert_eq!(
        call(&api, get("/v1/deprecations", Some(KEY_A)))
            .await
            .status,
        StatusCode::OK
    );
    assert_eq!(
        call(&api, get("/v1/deprecations", None)).await.status,
        StatusCode::UNAUTHORIZED
    );
    for (error, status) in [
        (
            (|| StoreError::other("down")) as fn() -> StoreError,
            StatusCode::INTERNAL_SERVER_ERROR,
        ),
        (
            || StoreError::unavailable("down"),
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ] {
        let failing = deprecated(crate::common::api())
            .with_deprecated_calls(DeprecatedCallRecorder::spawn(FailingCalls(error)));
        assert_eq!(
            call(&failing, get("/v1/deprecations", Some(KEY_A)))
                .await
                .status,
            status
        );
    }
    let limited = api.with_rate_limiter(partner_api::LocalRateLimiter::new(
        std::time::Duration::from_secs(60),
        std::num::NonZeroU32::MIN,
    ));
    call(&limited, get("/v1/deprecations", Some(KEY_A))).await;
    assert_eq!(
        call(&limited, get("/v1/deprecations", Some(KEY_A)))
            .await
            .status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

fn collected(status: StatusCode, body: Value) -> Collected {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    Collected {
        status,
        headers,
        body: Bytes::from(body.to_string()),
    }
}

fn good_orders() -> Value {
    json!({"meta": {"version": "v1", "status": "beta"}, "data": {"orders": [{
        "id": "o1", "providers": ["meta"], "advertiserName": "A", "campaignName": "C",
        "budgetDkk": 1, "startDate": "2026-01-01", "endDate": "2026-01-02", "status": "booked",
        "externalReference": "X", "createdAt": "2026-01-01T00:00:00.000Z"}]}})
}

#[test]
fn the_oracle_accepts_a_conforming_body() {
    assert_conforms(
        &Method::GET,
        "/v1/orders",
        &collected(StatusCode::OK, good_orders()),
    );
}

#[test]
#[should_panic(expected = "breaks the document")]
fn the_oracle_rejects_a_decimal_budget() {
    let mut body = good_orders();
    body["data"]["orders"][0]["budgetDkk"] = json!(1.5);
    assert_conforms(&Method::GET, "/v1/orders", &collected(StatusCode::OK, body));
}

#[test]
#[should_panic(expected = "breaks the document")]
fn the_oracle_rejects_an_extra_order_field() {
    let mut body = good_orders();
    body["data"]["orders"][0]["organizationId"] = json!("org_a");
    assert_conforms(&Method::GET, "/v1/orders", &collected(StatusCode::OK, body));
}

#[test]
#[should_panic(expected = "breaks the document")]
fn the_oracle_rejects_a_timestamp_without_milliseconds() {
    let mut body = good_orders();
    body["data"]["orders"][0]["createdAt"] = json!("2026-01-01T00:00:00Z");
    assert_conforms(&Method::GET, "/v1/orders", &collected(StatusCode::OK, body));
}

#[test]
#[should_panic(expected = "breaks the document")]
fn the_oracle_rejects_an_error_without_meta() {
    let body = json!({"error": {"message": "nope"}});
    assert_conforms(
        &Method::GET,
        "/v1/orders",
        &collected(StatusCode::INTERNAL_SERVER_ERROR, body),
    );
}

#[test]
#[should_panic(expected = "not in the document")]
fn the_oracle_rejects_an_undocumented_status() {
    let body =
        json!({"meta": {"version": "v1", "status": "beta"}, "error": {"message": "slow down"}});
    assert_conforms(
        &Method::GET,
        "/v1/orders",
        &collected(StatusCode::IM_A_TEAPOT, body),
    );
}

#[test]
#[should_panic(expected = "no WWW-Authenticate header")]
fn the_oracle_requires_the_challenge_on_401() {
    let body = json!({"meta": {"version": "v1", "status": "beta"}, "error": {"message": "no"}});
    assert_conforms(
        &Method::GET,
        "/v1/me",
        &collected(StatusCode::UNAUTHORIZED, body),
    );
}
