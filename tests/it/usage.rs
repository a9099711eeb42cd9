//! Per-key usage from the request path to the management service: each answered request
//! of a key counted once, per route and outcome, written by the recorder's flush and read
//! back through `GET /keys/{id}/usage` and `GET /usage`.

use http::{Request, StatusCode};
use http_body_util::BodyExt;
use partner_api::management::{ActingOrganization, KeyManagementService};
use partner_api::seed::{Seed, DEMO_KEY, DEMO_REVOKED_KEY};
use partner_api::usage::UsageRecorder;
use partner_api::{KeyDigest, KeyLookup, KeyStore, MemoryStore, PartnerApi};
use serde_json::Value;
use tower::ServiceExt;

use crate::common::{call, get};

async fn manage(service: &KeyManagementService, path: &str) -> (StatusCode, Value) {
    let mut request = Request::get(path).body(String::new()).unwrap();
    request
        .extensions_mut()
        .insert(ActingOrganization::new("org_demo"));
    let response = service.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

async fn key_id(store: &MemoryStore, key: &str) -> String {
    match store.lookup(&KeyDigest::of(key)).await.unwrap() {
        KeyLookup::Valid(principal) => principal.key_id.to_string(),
        KeyLookup::Revoked { key_id: Some(id) } => id.to_string(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn every_answered_request_of_a_key_is_counted_once_by_route_and_outcome() {
    let store = Seed::demo().to_memory_store().unwrap();
    let recorder = UsageRecorder::spawn(store.clone());
    let api = PartnerApi::from_store(store.clone()).with_usage(recorder.clone());
    let first = call(&api, get("/v1/me", Some(DEMO_KEY))).await;
    let etag = first.header("etag").unwrap().to_owned();
    for _ in 0..4 {
        assert_eq!(
            call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
            StatusCode::OK
        );
    }
    for _ in 0..3 {
        assert_eq!(
            call(&api, get("/v1/orders", Some(DEMO_KEY))).await.status,
            StatusCode::OK
        );
    }
    let mut conditional = get("/v1/me", Some(DEMO_KEY));
    conditional
        .headers_mut()
        .insert("if-none-match", etag.parse().unwrap());
    assert_eq!(
        call(&api, conditional).await.status,
        StatusCode::NOT_MODIFIED
    );
    assert_eq!(
        call(&api, get("/v1/orders?limit=0", Some(DEMO_KEY)))
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    for _ in 0..2 {
        let refused = call(&api, get("/v1/orders", Some(DEMO_REVOKED_KEY))).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    }
    // A token that is no key is nobody's usage.
    call(
        &api,
        get("/v1/me", Some("pk_live_made_up_made_up_made_up_00")),
    )
    .await;
    assert!(recorder.flush().await.unwrap() > 0);

    let service = KeyManagementService::new(store.clone()).with_usage(store.clone());
    let demo = key_id(&store, DEMO_KEY).await;
    let revoked = key_id(&store, DEMO_REVOKED_KEY).await;
    let (status, body) = manage(&service, &format!("/keys/{demo}/usage?granularity=hour")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let buckets = body["data"]["buckets"].as_array().unwrap();
    let count = |route: &str, outcome: &str| -> u64 {
        buckets
            .iter()
            .filter(|bucket| bucket["route"] == route && bucket["outcome"] == outcome)
            .map(|bucket| bucket["count"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(count("/me", "ok"), 5, "{body}");
    assert_eq!(count("/me", "not_modified"), 1, "{body}");
    assert_eq!(count("/orders", "ok"), 3, "{body}");
    assert_eq!(count("/orders", "error"), 1, "{body}");
    assert_eq!(body["data"]["total"], 10);

    let (status, body) = manage(&service, "/usage").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let keys = body["data"]["keys"].as_array().unwrap();
    let of = |id: &str| keys.iter().find(|key| key["keyId"] == id).cloned().unwrap();
    assert_eq!(of(&demo)["total"], 10);
    assert_eq!(of(&revoked)["outcomes"]["revoked"], 2);
    assert_eq!(keys.len(), 2, "{body}");

    // Written once: a second flush has nothing left.
    assert_eq!(recorder.flush().await.unwrap(), 0);
    let (_, again) = manage(&service, "/usage").await;
    assert_eq!(again["data"]["keys"], body["data"]["keys"]);
}

#[tokio::test]
async fn usage_queries_are_checked_and_scoped_to_the_organization() {
    let store = Seed::demo().to_memory_store().unwrap();
    let service = KeyManagementService::new(store.clone()).with_usage(store.clone());
    let demo = key_id(&store, DEMO_KEY).await;
    for bad in [
        format!("/keys/{demo}/usage?from=yesterday"),
        format!("/keys/{demo}/usage?granularity=week"),
        format!("/keys/{demo}/usage?from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z"),
        "/usage?from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z".to_owned(),
        "/usage?granularity=hour".to_owned(),
    ] {
        let (status, body) = manage(&service, &bad).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    let (status, _) = manage(&service, "/keys/999999/usage").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // Another organization's key is not found either.
    let mut request = Request::get(format!("/keys/{demo}/usage"))
        .body(String::new())
        .unwrap();
    request
        .extensions_mut()
        .insert(ActingOrganization::new("org_other"));
    let response = service.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);

    // Without a usage store: 404, and the abilities say so.
    let without = KeyManagementService::new(store.clone());
    let (status, _) = manage(&without, "/usage").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, abilities) = manage(&without, "/abilities").await;
    assert_eq!(abilities["data"]["abilities"]["usage"], false);
    let (_, abilities) = manage(&service, "/abilities").await;
    assert_eq!(abilities["data"]["abilities"]["usage"], true);
}
