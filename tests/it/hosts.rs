//! The axum and tonic examples, each run as the program a product team would run (built by
//! `cargo build --all-features --examples`, as `.ci/test` does) on 127.0.0.1:0, over the
//! demo data.

use std::net::SocketAddr;

use crate::common::*;
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use partner_api::seed::{DEMO_KEY, DEMO_OTHER_KEY};

fn http1() -> Client<HttpConnector, Empty<Bytes>> {
    Client::builder(TokioExecutor::new()).build_http()
}

async fn fetch(address: SocketAddr, path: &str, key: Option<&str>) -> Collected {
    let mut request = Request::get(format!("http://{address}{path}"));
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let response = http1()
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    collect(response).await
}

/// `fetch` for a path the API answers: also checked against the OpenAPI document.
async fn fetch_api(address: SocketAddr, path: &str, key: Option<&str>) -> Collected {
    let response = fetch(address, path, key).await;
    crate::common::contract::assert_conforms(&Method::GET, path, &response);
    response
}

#[tokio::test]
async fn axum_host_serves_the_api_nested_and_layered_beside_its_own_routes() {
    crate::common::needs::needs!(Examples);
    let mut host = Process::spawn_example("axum", &["127.0.0.1:0"]);
    let address = host.address().await;

    for prefix in ["/partner/v1", "/v1"] {
        let me = fetch_api(address, &format!("{prefix}/me"), Some(DEMO_KEY)).await;
        assert_eq!(me.status, StatusCode::OK, "{prefix}");
        assert_eq!(me.json()["data"]["organization"]["id"], "org_demo");
        let orders = fetch_api(address, &format!("{prefix}/orders"), Some(DEMO_OTHER_KEY)).await;
        assert_eq!(
            orders.json()["data"]["orders"].as_array().unwrap().len(),
            12
        );
        let missing = fetch_api(address, &format!("{prefix}/orders"), None).await;
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        let unknown = fetch_api(address, &format!("{prefix}/nothing"), Some(DEMO_KEY)).await;
        assert_eq!(unknown.status, StatusCode::NOT_FOUND);
        assert!(!unknown.error_message().is_empty());
    }
    // The host's routes keep their own responses.
    let home = fetch(address, "/", None).await;
    assert_eq!(
        (home.status, home.body.as_ref()),
        (StatusCode::OK, &b"the host's home page"[..])
    );
    assert_eq!(
        home.header("x-request-id"),
        None,
        "the API did not touch it"
    );
    let status = fetch(address, "/api/status", None).await;
    assert_eq!(status.json(), serde_json::json!({"host": "ok"}));
    let elsewhere = fetch(address, "/v2/me", Some(DEMO_KEY)).await;
    assert_eq!(elsewhere.status, StatusCode::NOT_FOUND);
    assert_eq!(
        elsewhere.body.as_ref(),
        b"the host's own 404",
        "the host's fallback, not the API's 404"
    );
}

/// The `rel="next"` target of `response`'s `Link`.
fn next_of(response: &Collected) -> String {
    let link = response.header("link").expect("a Link");
    assert!(link.ends_with("rel=\"next\""), "{link}");
    link[1..link.find('>').unwrap()].to_owned()
}

#[tokio::test]
async fn under_axums_nest_service_the_links_are_the_paths_the_partner_called() {
    crate::common::needs::needs!(Examples);
    let mut host = Process::spawn_example("axum", &["127.0.0.1:0"]);
    let address = host.address().await;
    for (prefix, route) in [
        ("/partner/v1", "orders"),
        ("/v1", "orders"),
        ("/partner/v1", "events"),
        ("/v1", "events"),
    ] {
        let path = format!("{prefix}/{route}?limit=5");
        let first = fetch_api(address, &path, Some(DEMO_OTHER_KEY)).await;
        assert_eq!(first.status, StatusCode::OK, "{path}");
        let next = next_of(&first);
        assert!(
            next.starts_with(&format!("{prefix}/{route}?")),
            "{path} links to {next}"
        );
        // Followed as a partner would: the same mount answers it.
        let second = fetch_api(address, &next, Some(DEMO_OTHER_KEY)).await;
        assert_eq!(second.status, StatusCode::OK, "{next}");
        assert_ne!(first.json()["data"], second.json()["data"], "{next}");
    }
}

#[tokio::test]
async fn tonic_host_answers_grpc_and_http1_on_one_listener() {
    crate::common::needs::needs!(Examples);
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let mut host = Process::spawn_example("tonic", &["127.0.0.1:0"]);
    let address = host.address().await;

    // A gRPC call (HTTP/2) ...
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    let answer = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(answer.into_inner().status, ServingStatus::Serving as i32);

    // ... and HTTP/1.1 calls of the partner API, against the same listener.
    let me = fetch_api(address, "/v1/me", Some(DEMO_KEY)).await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(
        me.json()["data"]["organization"]["name"],
        "Demo Media Agency"
    );
    let orders = fetch_api(address, "/v1/orders", Some(DEMO_KEY)).await;
    assert_eq!(
        orders.json()["data"]["orders"].as_array().unwrap().len(),
        100
    );
    assert_eq!(
        fetch_api(address, "/v1/me", None).await.status,
        StatusCode::UNAUTHORIZED
    );

    // gRPC still works after the HTTP calls, and an unknown gRPC service is tonic's answer.
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}

/// Sends a made-up key from one address until a 429 comes back: only a host that passes the
/// client's address (`PeerAddr`) to the API gets its failed authentications throttled.
async fn throttled_after(address: SocketAddr, path: &str) -> usize {
    let client = http1();
    for sent in 1..=400 {
        let request = Request::get(format!("http://{address}{path}"))
            .header("authorization", "Bearer made_up_key_0123456789abcdefghij")
            .body(Empty::new())
            .unwrap();
        let status = client.request(request).await.unwrap().status();
        match status {
            StatusCode::UNAUTHORIZED => {}
            StatusCode::TOO_MANY_REQUESTS => return sent,
            other => panic!("{other}"),
        }
    }
    panic!("400 failed authentications from one address were never throttled");
}

#[tokio::test]
async fn axum_and_tonic_hosts_pass_the_client_address_to_the_throttle() {
    crate::common::needs::needs!(Examples);
    let mut axum = Process::spawn_example("axum", &["127.0.0.1:0"]);
    let address = axum.address().await;
    // A burst of 200 failures, then the budget's refill: the 429 comes soon after.
    let sent = throttled_after(address, "/partner/v1/me").await;
    assert!((200..=300).contains(&sent), "throttled after {sent}");
    let mut tonic = Process::spawn_example("tonic", &["127.0.0.1:0"]);
    let address = tonic.address().await;
    let sent = throttled_after(address, "/v1/me").await;
    assert!((200..=300).contains(&sent), "throttled after {sent}");
}

/// An API that no peer address reaches (no `PeerAddr`, no `ConnectInfo`, no
/// `with_peer_addr`) says so once in the log, never silently; one that is told says nothing.
#[tokio::test]
async fn a_host_that_passes_no_peer_is_told_once_in_the_log() {
    let logs = CapturedLogs::default();
    let _capture = logs.install();
    let api = partner_api::PartnerApi::from_store(store());
    for _ in 0..3 {
        let answered = call(&api, get("/v1/me", Some(KEY_A))).await;
        assert_eq!(answered.status, StatusCode::OK);
    }
    let told = logs.text().matches("came with no peer address").count();
    assert_eq!(told, 1, "{}", logs.text());
    let peer: SocketAddr = "192.0.2.7:50312".parse().unwrap();
    let quiet = partner_api::PartnerApi::from_store(store()).with_peer_addr(peer);
    let answered = call(&quiet, get("/v1/me", Some(KEY_A))).await;
    assert_eq!(answered.status, StatusCode::OK);
    assert_eq!(logs.text().matches("came with no peer address").count(), 1);
}
