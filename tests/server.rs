//! The API over real sockets: the standalone host's `serve` on 127.0.0.1:0 with a real HTTP
//! client (HTTP/1.1 and HTTP/2), and the example binary itself run as a process.

mod common;

#[allow(dead_code)]
#[path = "../examples/standalone.rs"]
mod standalone;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use partner_api::PartnerApi;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn http1() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

fn http2() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

struct Server {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

async fn start(api: PartnerApi) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(standalone::serve(listener, api, async {
        let _ = stopped.await;
    }));
    Server {
        address,
        stop: Some(stop),
        task,
    }
}

async fn fetch(client: &HttpClient, method: Method, url: String, key: Option<&str>) -> Collected {
    let path = url
        .splitn(4, '/')
        .nth(3)
        .map(|rest| format!("/{rest}"))
        .unwrap_or_default();
    let mut request = Request::builder().method(method.clone()).uri(url);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let collected = Collected {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    };
    common::contract::assert_conforms(&method, &path, &collected);
    collected
}

#[tokio::test]
async fn main_paths_over_http1_and_http2() {
    let server = start(standalone::app(store())).await;
    let base = format!("http://{}", server.address);
    for (client, client_is_http1) in [(http1(), true), (http2(), false)] {
        let me = fetch(&client, Method::GET, format!("{base}/v1/me"), Some(KEY_A)).await;
        assert_eq!(me.status, StatusCode::OK);
        assert_eq!(me.json()["data"]["organization"]["id"], "org_a");
        assert_eq!(me.json()["meta"]["version"], "v1");

        let orders = fetch(
            &client,
            Method::GET,
            format!("{base}/v1/orders"),
            Some(KEY_A),
        )
        .await;
        assert_eq!(orders.status, StatusCode::OK);
        let list = orders.json()["data"]["orders"].as_array().unwrap().clone();
        assert_eq!(list.len(), 100);
        assert_eq!(list[0]["id"], "a156");
        assert_eq!(orders.header("content-type"), Some("application/json"));
        if client_is_http1 {
            assert_eq!(
                orders.header("content-length"),
                Some(orders.body.len().to_string().as_str())
            );
        }

        let head = fetch(
            &client,
            Method::HEAD,
            format!("{base}/v1/orders"),
            Some(KEY_A),
        )
        .await;
        assert_eq!(head.status, StatusCode::OK);
        assert!(head.body.is_empty());
        assert_eq!(
            head.header("content-length"),
            Some(orders.body.len().to_string().as_str())
        );

        let missing = fetch(&client, Method::GET, format!("{base}/v1/orders"), None).await;
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        assert_eq!(
            missing.header("www-authenticate"),
            Some("Bearer realm=\"partner-api\"")
        );
        assert!(!missing.error_message().is_empty());

        let revoked = fetch(
            &client,
            Method::GET,
            format!("{base}/v1/me"),
            Some(REVOKED_KEY),
        )
        .await;
        assert_eq!(revoked.status, StatusCode::UNAUTHORIZED);

        let other = fetch(&client, Method::GET, format!("{base}/elsewhere"), None).await;
        assert_eq!(other.status, StatusCode::NOT_FOUND);
        let post = fetch(&client, Method::POST, format!("{base}/v1/me"), Some(KEY_A)).await;
        assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    }
}

#[tokio::test]
async fn graceful_shutdown_finishes_requests_in_flight() {
    let slow = SlowStore {
        inner: store(),
        delay: Duration::from_millis(400),
    };
    let mut server = start(PartnerApi::from_store(slow)).await;
    let url = format!("http://{}/v1/me", server.address);
    let in_flight =
        tokio::spawn(async move { fetch(&http1(), Method::GET, url, Some(KEY_A)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.stop.take().unwrap().send(()).unwrap();
    let response = in_flight.await.unwrap();
    assert_eq!(
        response.status,
        StatusCode::OK,
        "the request in flight completes"
    );
    tokio::time::timeout(Duration::from_secs(5), server.task)
        .await
        .expect("serve returns once the connection is done")
        .unwrap();
    assert!(
        tokio::net::TcpStream::connect(server.address)
            .await
            .is_err(),
        "no new connections after shutdown"
    );
}

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("partner-api-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).unwrap();
    path
}

const SEED: &str = r#"{
  "organizations": [{"id": "org_1", "name": "Acme"}, {"id": "org_2", "name": "Beta"}],
  "apiKeys": [
    {"key": "seed-key-1", "organizationId": "org_1", "revoked": false},
    {"key": "seed-key-2", "organizationId": "org_2"},
    {"key": "seed-key-revoked", "organizationId": "org_1", "revoked": true}
  ],
  "orders": [
    {"organizationId": "org_1", "id": "ord_1", "providers": ["meta"], "advertiserName": "A",
     "campaignName": "C1", "budgetDkk": 1000, "startDate": "2026-01-01", "endDate": "2026-02-01",
     "status": "booked", "externalReference": "PO-1", "createdAt": "2026-01-01T10:00:00.000Z"},
    {"organizationId": "org_1", "id": "ord_2", "providers": [], "advertiserName": "A",
     "campaignName": "C2", "budgetDkk": 0, "startDate": "2026-01-01", "endDate": "2026-02-01",
     "status": "live", "externalReference": "PO-2", "createdAt": "2026-01-02T10:00:00.000Z"},
    {"organizationId": "org_2", "id": "ord_3", "providers": ["google"], "advertiserName": "B",
     "campaignName": "C3", "budgetDkk": 5, "startDate": "2026-01-01", "endDate": "2026-02-01",
     "status": "draft", "externalReference": "PO-3", "createdAt": "2026-01-03T10:00:00.000Z"}
  ]
}"#;

#[tokio::test]
async fn the_binary_serves_a_seed_file_and_stops_on_sigterm() {
    let seed = temp_file("seed.json", SEED);
    let mut process =
        Process::spawn(&["--listen", "127.0.0.1:0", "--seed", seed.to_str().unwrap()]);
    let base = process.base_url().await;
    let client = http1();
    let me = fetch(
        &client,
        Method::GET,
        format!("{base}/v1/me"),
        Some("seed-key-1"),
    )
    .await;
    assert_eq!(
        me.json()["data"]["organization"],
        serde_json::json!({"id": "org_1", "name": "Acme"})
    );
    let orders = fetch(
        &client,
        Method::GET,
        format!("{base}/v1/orders"),
        Some("seed-key-1"),
    )
    .await;
    let ids: Vec<String> = orders.json()["data"]["orders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids, ["ord_2", "ord_1"]);
    let revoked = fetch(
        &client,
        Method::GET,
        format!("{base}/v1/me"),
        Some("seed-key-revoked"),
    )
    .await;
    assert_eq!(revoked.status, StatusCode::UNAUTHORIZED);
    let other = fetch(
        &client,
        Method::GET,
        format!("{base}/v1/orders"),
        Some("seed-key-2"),
    )
    .await;
    assert_eq!(other.json()["data"]["orders"][0]["id"], "ord_3");
    assert!(process.terminate().await.success());
    let _ = std::fs::remove_file(seed);
}

#[tokio::test]
async fn the_binary_without_a_seed_serves_demo_data_and_prints_a_curl_command() {
    let mut process = Process::spawn(&["--listen", "127.0.0.1:0"]);
    let base = process.base_url().await;
    let mut hint = process.line().await;
    hint.push_str(&process.line().await);
    assert!(
        hint.contains("curl") && hint.contains(partner_api::seed::DEMO_KEY),
        "{hint}"
    );
    let orders = fetch(
        &http1(),
        Method::GET,
        format!("{base}/v1/orders"),
        Some(partner_api::seed::DEMO_KEY),
    )
    .await;
    assert_eq!(orders.status, StatusCode::OK);
    assert_eq!(
        orders.json()["data"]["orders"].as_array().unwrap().len(),
        100
    );
    assert!(process.terminate().await.success());
}

#[tokio::test]
async fn a_bad_seed_file_is_a_clear_error_and_a_failing_exit() {
    let unknown_org = SEED.replace(
        r#""organizationId": "org_2", "id": "ord_3""#,
        r#""organizationId": "org_9", "id": "ord_3""#,
    );
    let cases = [
        (
            temp_file("broken.json", "{\"organizations\": ["),
            "line 1".to_owned(),
        ),
        (
            temp_file("unknown-org.json", &unknown_org),
            "org_9".to_owned(),
        ),
        (
            PathBuf::from("/nonexistent/seed.json"),
            "/nonexistent/seed.json".to_owned(),
        ),
    ];
    for (path, expected) in cases {
        let output = tokio::process::Command::new(standalone_binary())
            .args(["--listen", "127.0.0.1:0", "--seed", path.to_str().unwrap()])
            .output()
            .await
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{}", path.display());
        assert!(
            stderr.contains("error:") && stderr.contains(&expected),
            "{stderr}"
        );
        assert!(output.stdout.is_empty(), "nothing is served");
    }
}

/// Sends raw bytes to the server and returns the status code of its answer.
async fn raw_status(address: SocketAddr, request: &[u8]) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buffer))
            .await
            .expect("an answer, not a hang")
            .unwrap();
        assert!(read > 0, "the connection closed without an answer");
        answer.extend_from_slice(&buffer[..read]);
    }
    let text = String::from_utf8_lossy(&answer);
    text.split(' ').nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn raw_hostile_requests_get_a_4xx_and_never_a_dropped_connection() {
    let server = start(standalone::app(store())).await;
    let key = KEY_A.as_bytes();
    let cases: Vec<Vec<u8>> = vec![
        [&b"GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\x01b\r\n\r\n"[..]].concat(),
        [
            &b"GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "[..],
            key,
            b"\x00\r\n\r\n",
        ]
        .concat(),
        [&b"GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \xff\xfe\r\n\r\n"[..]].concat(),
        [
            &b"GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "[..],
            key,
            b"\r\nAuthorization: Bearer ",
            key,
            b"\r\n\r\n",
        ]
        .concat(),
        [
            &b"GET /v1/%6de HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "[..],
            key,
            b"\r\n\r\n",
        ]
        .concat(),
        [&b"GET /v1/../v1/me HTTP/1.1\r\nHost: x\r\n\r\n"[..]].concat(),
        [&b"GET /v1/me\x7f HTTP/1.1\r\nHost: x\r\n\r\n"[..]].concat(),
    ];
    for request in cases {
        let status = raw_status(server.address, &request).await;
        assert!(
            matches!(status, 400 | 401 | 404),
            "{:?} -> {status}",
            String::from_utf8_lossy(&request)
        );
    }
    // And the valid request over the same kind of raw connection still works.
    let valid = [
        &b"GET /v1/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "[..],
        key,
        b"\r\n\r\n",
    ]
    .concat();
    assert_eq!(raw_status(server.address, &valid).await, 200);
}
