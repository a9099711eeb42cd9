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
use standalone::Options;
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

/// The standalone host's stack around `api`, served on 127.0.0.1:0 without TLS.
async fn start(api: PartnerApi) -> Server {
    start_app(standalone::app(api, &Options::default()), None).await
}

/// `app` served on 127.0.0.1:0, over TLS when `tls` is given.
async fn start_app<S, B>(app: S, tls: Option<tokio_rustls::TlsAcceptor>) -> Server
where
    S: standalone::HostService<B>,
    B: http_body::Body<Data = Bytes, Error: Into<tower_http::BoxError>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(standalone::serve(listener, app, tls, async {
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
    let server = start(standalone::api(store(), &Options::default())).await;
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
    let server = start(standalone::api(store(), &Options::default())).await;
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

/// Sends `GET path` with `headers` over `client` and returns the collected response, checked
/// against the OpenAPI document.
async fn fetch_with(
    client: &HttpClient,
    url: String,
    key: Option<&str>,
    headers: &[(&str, &str)],
) -> Collected {
    let path = url
        .splitn(4, '/')
        .nth(3)
        .map(|rest| format!("/{rest}"))
        .unwrap();
    let mut request = Request::get(url);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = client
        .request(request.body(Empty::new()).unwrap())
        .await
        .unwrap();
    let collected = collect(response).await;
    common::contract::assert_conforms(&Method::GET, &path, &collected);
    collected
}

#[tokio::test]
async fn conditional_gets_rate_limits_and_request_ids_over_a_real_socket() {
    let options = Options {
        rate_limit: Some(std::num::NonZeroU32::new(2).unwrap()),
        ..Options::default()
    };
    let server = start(standalone::api(store(), &options)).await;
    let url = format!("http://{}/v1/orders", server.address);
    let client = http1();

    let first = fetch_with(
        &client,
        url.clone(),
        Some(KEY_A),
        &[("x-request-id", "poll-1")],
    )
    .await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("x-request-id"), Some("poll-1"));
    assert_eq!(first.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
    let etag = first.header("etag").unwrap().to_owned();

    let unchanged = fetch_with(
        &client,
        url.clone(),
        Some(KEY_A),
        &[("if-none-match", &etag)],
    )
    .await;
    assert_eq!(unchanged.status, StatusCode::NOT_MODIFIED);
    assert!(unchanged.body.is_empty());
    assert_eq!(unchanged.header("etag"), Some(&*etag));
    assert_eq!(unchanged.header("x-ratelimit-remaining"), Some("0"));

    let refused = fetch_with(
        &client,
        url.clone(),
        Some(KEY_A),
        &[("x-request-id", "bad id")],
    )
    .await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(
        (1..=1).contains(&retry_after),
        "2 per second: {retry_after}"
    );
    // The malformed id was replaced once, by the host, and the API kept that id.
    let ids: Vec<_> = refused.headers.get_all("x-request-id").iter().collect();
    assert_eq!(ids.len(), 1);
    assert!(uuid_like(ids[0].to_str().unwrap()), "{ids:?}");

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let served = fetch_with(&client, url, Some(KEY_A), &[]).await;
    assert_eq!(served.status, StatusCode::OK);
}

fn uuid_like(id: &str) -> bool {
    id.len() == 36 && id.bytes().filter(|&b| b == b'-').count() == 4
}

#[tokio::test]
async fn a_stuck_store_is_a_json_503_at_the_request_timeout() {
    let api = PartnerApi::from_store(HangingStore).with_store_timeout(None);
    let options = Options {
        request_timeout: Duration::from_millis(300),
        ..Options::default()
    };
    let server = start_app(standalone::app(api, &options), None).await;
    let url = format!("http://{}/v1/me", server.address);
    let response = tokio::time::timeout(
        Duration::from_secs(10),
        fetch_with(&http1(), url, Some(KEY_A), &[("x-request-id", "stuck-1")]),
    )
    .await
    .expect("the host answers instead of holding the connection");
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.error_message().contains("unavailable"));
    assert_eq!(response.header("x-request-id"), Some("stuck-1"));
}

#[tokio::test]
async fn a_panic_below_the_host_layers_is_a_json_500_not_a_dropped_connection() {
    // A service in the API's place that panics: the host's CatchPanic answers for it.
    let panicking = tower::service_fn(|request: Request<hyper::body::Incoming>| async move {
        if request.uri().path() == "/v1/me" {
            panic!("boom");
        }
        Ok::<_, std::convert::Infallible>(partner_api::error_response(StatusCode::NOT_FOUND))
    });
    let server = start_app(standalone::app(panicking, &Options::default()), None).await;
    let client = http1();
    let url = format!("http://{}/v1/me", server.address);
    for _ in 0..2 {
        let response = fetch_with(&client, url.clone(), Some(KEY_A), &[]).await;
        assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.error_message(), "internal server error");
        assert!(uuid_like(response.header("x-request-id").unwrap()));
    }
    let other = fetch_with(
        &client,
        format!("http://{}/v1/x", server.address),
        None,
        &[],
    )
    .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn the_binary_logs_one_structured_line_per_request_without_the_key() {
    let log = std::env::temp_dir().join(format!("partner-api-{}-access.log", std::process::id()));
    let mut process = Process::spawn_with_stderr(
        &["--listen", "127.0.0.1:0", "--rate-limit", "50"],
        &[("RUST_LOG", "info")],
        &log,
    );
    let base = process.base_url().await;
    let key = partner_api::seed::DEMO_KEY;
    let me = fetch_with(
        &http1(),
        format!("{base}/v1/me"),
        Some(key),
        &[("x-request-id", "log-me-1")],
    )
    .await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(me.header("x-ratelimit-limit"), Some("50"));
    let missing = fetch_with(&http1(), format!("{base}/v1/orders"), None, &[]).await;
    assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
    assert!(process.terminate().await.success());

    let text = std::fs::read_to_string(&log).unwrap();
    let _ = std::fs::remove_file(&log);
    let line = text
        .lines()
        .find(|line| line.contains("request_id=log-me-1"))
        .unwrap_or_else(|| panic!("no line for the request: {text}"));
    for field in [
        "method=GET",
        "path=/v1/me",
        "status=200",
        "latency=",
        "organization_id=\"org_demo\"",
        "INFO",
    ] {
        assert!(line.contains(field), "{field} missing from {line}");
    }
    let unauthorized = text
        .lines()
        .find(|line| line.contains("path=/v1/orders"))
        .unwrap_or_else(|| panic!("no line for the 401: {text}"));
    assert!(unauthorized.contains("status=401"), "{unauthorized}");
    assert!(!text.contains(key) && !text.contains(&key[8..]), "{text}");
}

/// A throwaway certificate for `localhost` and 127.0.0.1, and its key, as PEM files.
struct Certificate {
    der: rustls_pki_types::CertificateDer<'static>,
    cert_path: PathBuf,
    key_path: PathBuf,
}

impl Certificate {
    fn generate(name: &str) -> Self {
        let certified =
            rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
                .unwrap();
        Self {
            der: certified.cert.der().clone(),
            cert_path: temp_file(&format!("{name}-cert.pem"), &certified.cert.pem()),
            key_path: temp_file(
                &format!("{name}-key.pem"),
                &certified.signing_key.serialize_pem(),
            ),
        }
    }
}

impl Drop for Certificate {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cert_path);
        let _ = std::fs::remove_file(&self.key_path);
    }
}

/// `GET path` over TLS to `address`, trusting only `trusted`, offering only `alpn`; the
/// negotiated protocol and the response.
async fn tls_get(
    address: SocketAddr,
    trusted: &rustls_pki_types::CertificateDer<'static>,
    alpn: &[u8],
    path: &str,
) -> Result<(Vec<u8>, Collected), String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(trusted.clone()).unwrap();
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(address).await.unwrap();
    let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
    let tls = connector
        .connect(name, tcp)
        .await
        .map_err(|err| err.to_string())?;
    let negotiated = tls.get_ref().1.alpn_protocol().unwrap_or_default().to_vec();
    let io = hyper_util::rt::TokioIo::new(tls);
    let request = Request::get(format!("https://localhost{path}"))
        .header("authorization", format!("Bearer {KEY_A}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = if alpn == b"h2" {
        let (mut sender, connection) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .unwrap();
        tokio::spawn(connection);
        sender.send_request(request).await.unwrap()
    } else {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
        tokio::spawn(connection);
        let mut request = request;
        request
            .headers_mut()
            .insert("host", "localhost".parse().unwrap());
        sender.send_request(request).await.unwrap()
    };
    let collected = collect(response).await;
    common::contract::assert_conforms(&Method::GET, path, &collected);
    Ok((negotiated, collected))
}

#[tokio::test]
async fn https_serves_http1_and_http2_by_alpn_to_a_verifying_client() {
    let certificate = Certificate::generate("in-process");
    let acceptor = standalone::tls_acceptor(&certificate.cert_path, &certificate.key_path).unwrap();
    let server = start_app(standalone::app(api(), &Options::default()), Some(acceptor)).await;
    for (alpn, version) in [
        (&b"h2"[..], http::Version::HTTP_2),
        (b"http/1.1", http::Version::HTTP_11),
    ] {
        let (negotiated, me) = tls_get(server.address, &certificate.der, alpn, "/v1/me")
            .await
            .unwrap();
        assert_eq!(negotiated, alpn);
        assert_eq!(me.status, StatusCode::OK, "{version:?}");
        assert_eq!(me.json()["data"]["organization"]["id"], "org_a");
    }
    // A client that does not trust the certificate refuses the connection: the check is real.
    let stranger = Certificate::generate("stranger");
    let refused = tls_get(server.address, &stranger.der, b"h2", "/v1/me").await;
    assert!(refused.is_err());
    // Plain HTTP on the TLS port gets no API answer.
    let plain = http1()
        .request(
            Request::get(format!("http://{}/v1/me", server.address))
                .body(Empty::new())
                .unwrap(),
        )
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != StatusCode::OK);
}

#[tokio::test]
async fn the_binary_serves_https_when_given_a_certificate() {
    let certificate = Certificate::generate("binary");
    let mut process = Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--tls-cert",
        certificate.cert_path.to_str().unwrap(),
        "--tls-key",
        certificate.key_path.to_str().unwrap(),
    ]);
    let line = process.line().await;
    let address: SocketAddr = line
        .strip_prefix("listening on https://")
        .unwrap_or_else(|| panic!("{line}"))
        .parse()
        .unwrap();
    for alpn in [&b"h2"[..], b"http/1.1"] {
        let (negotiated, orders) = tls_get(address, &certificate.der, alpn, "/v1/orders")
            .await
            .unwrap();
        assert_eq!(negotiated, alpn);
        // The binary serves demo data; KEY_A is not a demo key.
        assert_eq!(orders.status, StatusCode::UNAUTHORIZED);
    }
    assert!(process.terminate().await.success());

    // A missing key file is a clear error, not a plain-HTTP fallback.
    let output = tokio::process::Command::new(standalone_binary())
        .args(["--listen", "127.0.0.1:0", "--tls-cert"])
        .arg(&certificate.cert_path)
        .args(["--tls-key", "/nonexistent/key.pem"])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("private key"));
    assert!(output.stdout.is_empty());
}

#[allow(dead_code)]
#[path = "../examples/baseline.rs"]
mod baseline;

#[tokio::test]
async fn the_load_baseline_replays_a_captured_response_byte_for_byte() {
    // A response as `curl --include` saves it: hyper writes Date and Content-Length itself.
    let capture = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: r-1\r\n\
        content-length: 11\r\ndate: Sat, 21 Nov 2026 00:00:00 GMT\r\n\r\n{\"a\":\"b c\"}";
    let captured = baseline::parse_capture(capture).unwrap();
    let routes = std::sync::Arc::new(std::collections::HashMap::from([(
        "/v1/me".to_owned(),
        captured,
    )]));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let service = hyper::service::service_fn(baseline::app(routes));
        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
            .await
    });
    let client = http1();
    let url = format!("http://{address}/v1/me");
    let response = collect(
        client
            .request(Request::get(url).body(Empty::new()).unwrap())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.body.as_ref(), b"{\"a\":\"b c\"}");
    assert_eq!(response.header("x-request-id"), Some("r-1"));
    assert_eq!(response.header("content-length"), Some("11"));
    assert!(baseline::parse_capture(b"HTTP/1.1 200 OK\r\nno-colon\r\n\r\n").is_err());
    assert!(baseline::parse_capture(b"no blank line").is_err());
}
