//! Request ids (issue 8): every API response carries `x-request-id`, the request's own when
//! well-formed, a fresh UUID otherwise, and the id is recorded in the host's request span.

use crate::common::*;
use http::{Method, Request, StatusCode};
use tower::ServiceExt;
use tracing::Instrument;

fn with_id(mut request: Request<()>, id: &str) -> Request<()> {
    request
        .headers_mut()
        .insert("x-request-id", id.parse().unwrap());
    request
}

fn is_uuid_v4(id: &str) -> bool {
    id.len() == 36
        && id.as_bytes()[14] == b'4'
        && id.bytes().enumerate().all(|(i, b)| {
            matches!(i, 8 | 13 | 18 | 23) == (b == b'-') && (b == b'-' || b.is_ascii_hexdigit())
        })
}

#[tokio::test]
async fn every_api_response_carries_an_id() {
    let mut post = get("/v1/me", Some(KEY_A));
    *post.method_mut() = Method::POST;
    let requests = [
        get("/v1/me", Some(KEY_A)),
        get("/v1/orders", Some(KEY_A)),
        get("/v1/orders", None),
        get("/v1/me", Some("pk_test_unknown")),
        get("/v1/nothing", None),
        post,
        get("/v1/openapi.json", None),
    ];
    let mut seen = std::collections::HashSet::new();
    for request in requests {
        let path = request.uri().path().to_owned();
        let response = call(&api(), request).await;
        let id = response
            .header("x-request-id")
            .unwrap_or_else(|| panic!("{path}"));
        assert!(is_uuid_v4(id), "{path}: {id}");
        assert!(seen.insert(id.to_owned()), "ids are fresh");
    }
}

#[tokio::test]
async fn a_well_formed_id_is_echoed_and_a_bad_one_replaced() {
    let echoed = call(
        &api(),
        with_id(get("/v1/me", Some(KEY_A)), "client-42:retry.1"),
    )
    .await;
    assert_eq!(echoed.header("x-request-id"), Some("client-42:retry.1"));
    let failed = call(&api(), with_id(get("/v1/me", None), "trace=abc/def")).await;
    assert_eq!(failed.status, StatusCode::UNAUTHORIZED);
    assert_eq!(failed.header("x-request-id"), Some("trace=abc/def"));
    for bad in ["has space", "quote\"", &"x".repeat(129)] {
        let response = call(&api(), with_id(get("/v1/me", Some(KEY_A)), bad)).await;
        let id = response.header("x-request-id").unwrap();
        assert!(is_uuid_v4(id), "{bad:?} gave {id}");
    }
}

#[tokio::test]
async fn ids_can_be_turned_off() {
    let response = call(&api().with_request_ids(false), get("/v1/me", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.header("x-request-id"), None);
}

#[tokio::test]
async fn the_id_is_recorded_in_the_hosts_request_span() {
    let logs = CapturedLogs::default();
    let _guard = logs.install();
    let response = async {
        let response = api().oneshot(get("/v1/me", Some(KEY_A))).await.unwrap();
        tracing::info!("request done");
        response
    }
    .instrument(tracing::info_span!(
        "request",
        request_id = tracing::field::Empty,
        organization_id = tracing::field::Empty
    ))
    .await;
    let id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let text = logs.text();
    assert!(
        text.contains(&format!("request_id={id}")) && text.contains("organization_id=\"org_a\""),
        "{text}"
    );
}

#[tokio::test]
async fn a_store_failure_is_logged_with_the_organization() {
    let logs = CapturedLogs::default();
    let _guard = logs.install();
    let api = partner_api::PartnerApi::new(
        store(),
        FailingStore(|| partner_api::StoreError::other("down")),
    );
    let response = api
        .oneshot(get("/v1/orders", Some(KEY_A)))
        .instrument(tracing::info_span!(
            "request",
            request_id = tracing::field::Empty,
            organization_id = tracing::field::Empty
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let text = logs.text();
    let failure = text
        .lines()
        .find(|line| line.contains("partner API store failed"))
        .unwrap_or_else(|| panic!("no failure logged: {text}"));
    assert!(failure.contains("organization_id=\"org_a\""), "{failure}");
}
