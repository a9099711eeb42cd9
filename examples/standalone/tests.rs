//! The host in process: its stack and accept loop over real sockets, with stores and
//! services that misbehave on purpose.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Empty;
use partner_api::PartnerApi;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use crate::cli::Options;
use crate::serve::{serve, HostService, Limits};
use crate::stack::app;
use crate::stores;
use crate::tls::tls_acceptor;

#[path = "../../tests/it/common/mod.rs"]
mod common;

use common::net::*;
use common::*;

struct Server {
    address: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

/// The standalone host's stack around `api` (told each connection's peer), served on
/// 127.0.0.1:0 without TLS.
async fn start(api: PartnerApi) -> Server {
    let app = move |peer| {
        app(
            api.clone().with_peer_addr(peer),
            Options::default().request_timeout,
        )
    };
    start_within(app, None, Limits::default()).await
}

/// `app` served on 127.0.0.1:0, over TLS when `tls` is given.
async fn start_app<S, B>(app: S, tls: Option<tokio_rustls::TlsAcceptor>) -> Server
where
    S: HostService<B>,
    B: http_body::Body<Data = Bytes, Error: Into<tower_http::BoxError>> + Send + 'static,
{
    start_within(move |_peer| app.clone(), tls, Limits::default()).await
}

/// `app(peer)` served to each connection on 127.0.0.1:0 within `limits`.
async fn start_within<M, S, B>(
    app: M,
    tls: Option<tokio_rustls::TlsAcceptor>,
    limits: Limits,
) -> Server
where
    M: Fn(SocketAddr) -> S + Send + 'static,
    S: HostService<B>,
    B: http_body::Body<Data = Bytes, Error: Into<tower_http::BoxError>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, app, tls, limits, async {
        let _ = stopped.await;
    }));
    Server {
        address,
        stop: Some(stop),
        task,
    }
}

#[tokio::test]
async fn main_paths_over_http1_and_http2() {
    let server = start(stores::api(store(), &Options::default())).await;
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

#[tokio::test]
async fn raw_hostile_requests_get_a_4xx_and_never_a_dropped_connection() {
    let server = start(stores::api(store(), &Options::default())).await;
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

#[tokio::test]
async fn conditional_gets_rate_limits_and_request_ids_over_a_real_socket() {
    let options = Options {
        rate_limit: Some(std::num::NonZeroU32::new(2).unwrap()),
        ..Options::default()
    };
    let server = start(stores::api(store(), &options)).await;
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

#[tokio::test]
async fn a_stuck_store_is_a_json_503_at_the_request_timeout() {
    let api = PartnerApi::from_store(HangingStore).with_store_timeout(None);
    let options = Options {
        request_timeout: Duration::from_millis(300),
        ..Options::default()
    };
    let server = start_app(app(api, options.request_timeout), None).await;
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
    // A service in the API's place that panics, in its response future (`/v1/me`) or in
    // `call` itself (`/v1/orders`): the host's CatchPanic answers for it.
    let panicking = tower::service_fn(|request: Request<hyper::body::Incoming>| {
        assert_ne!(request.uri().path(), "/v1/orders", "boom in call");
        async move {
            if request.uri().path() == "/v1/me" {
                panic!("boom");
            }
            Ok::<_, std::convert::Infallible>(partner_api::error_response(StatusCode::NOT_FOUND))
        }
    });
    let server = start_app(app(panicking, Options::default().request_timeout), None).await;
    let client = http1();
    for path in ["/v1/me", "/v1/orders", "/v1/me"] {
        let url = format!("http://{}{path}", server.address);
        let response = fetch_with(&client, url, Some(KEY_A), &[]).await;
        assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR, "{path}");
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

/// A subscriber's writer that keeps what it is given.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_access_log_writes_a_line_per_response_where_info_is_kept_and_is_left_out_elsewhere() {
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    for (filter, logged) in [("info", true), ("warn", false)] {
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _default = tracing::subscriber::set_default(subscriber);
        assert_eq!(crate::stack::access_log_enabled(), logged, "{filter}");

        let mut request = get("/v1/me", Some(KEY_A)).map(|()| Empty::<Bytes>::new());
        request
            .headers_mut()
            .insert("x-request-id", "logged-1".parse().unwrap());
        let peer = SocketAddr::from(([127, 0, 0, 1], 50_000));
        let service = app(
            api().with_peer_addr(peer),
            Options::default().request_timeout,
        );
        let response = service.oneshot(request).await.unwrap();
        let response =
            collect(response.map(|body| body.map_err(Into::<tower::BoxError>::into))).await;
        assert_eq!(response.status, StatusCode::OK);
        assert_eq!(response.header("x-request-id"), Some("logged-1"));

        let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = log
            .lines()
            .filter(|line| line.contains("finished processing request"))
            .collect();
        if logged {
            // One line, in the request's span with the id and organization the API recorded.
            assert_eq!(lines.len(), 1, "{log}");
            for field in [
                "status=200",
                "request_id=logged-1",
                "organization_id=\"org_a\"",
                "path=/v1/me",
            ] {
                assert!(lines[0].contains(field), "{field} in {log}");
            }
            assert!(!log.contains(KEY_A), "{log}");
        } else {
            assert_eq!(log, "");
        }
    }
}

#[tokio::test]
async fn https_serves_http1_and_http2_by_alpn_to_a_verifying_client() {
    let certificate = Certificate::generate("in-process");
    let acceptor = tls_acceptor(&certificate.cert_path, &certificate.key_path).unwrap();
    let server = start_app(
        app(api(), Options::default().request_timeout),
        Some(acceptor),
    )
    .await;
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
async fn a_request_in_flight_is_never_cut_as_idle() {
    // The store answers after four idle timeouts: the connection waits for it, over HTTP/1.1
    // and HTTP/2 alike.
    let slow = SlowStore {
        inner: store(),
        delay: Duration::from_millis(800),
    };
    let limits = Limits {
        idle_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let api = stores::api(slow, &Options::default());
    let app = move |_peer| app(api.clone(), Options::default().request_timeout);
    let server = start_within(app, None, limits).await;
    for client in [http1(), http2()] {
        let url = format!("http://{}/v1/me", server.address);
        let response = fetch(&client, Method::GET, url, Some(KEY_A)).await;
        assert_eq!(response.status, StatusCode::OK);
    }
}

#[tokio::test]
async fn a_client_slow_to_send_its_headers_is_cut_off_at_the_header_timeout() {
    use tokio::io::AsyncWriteExt;
    let limits = Limits {
        header_read_timeout: Duration::from_millis(400),
        ..Limits::default()
    };
    let (_server, mut stream) = raw_connection(limits).await;
    // A whole request first: the timeout counts for each request's headers, not the
    // connection's age.
    assert_eq!(openapi_status(&mut stream).await, "HTTP/1.1 200 OK");
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Then headers that trickle in, a byte every 50 ms, and never end.
    let started = std::time::Instant::now();
    let trickle = async {
        stream.write_all(b"GET /v1/me HTTP/1.1\r\n").await?;
        loop {
            stream.write_all(b"x").await?;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        #[allow(unreachable_code)]
        Ok::<(), std::io::Error>(())
    };
    let cut = tokio::time::timeout(Duration::from_secs(5), trickle).await;
    assert!(
        matches!(cut, Ok(Err(_))),
        "the connection stayed open for 5 s of trickling headers"
    );
    // Due 400 ms after it began to wait, found by a look every 100 ms: cut within 600 ms of
    // that (and a little for the socket to tell the writer).
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(2), "cut after {elapsed:?}");
}

#[tokio::test]
async fn a_connection_that_sent_nothing_yet_waits_under_the_idle_timeout_alone() {
    // Connection pools and preconnects open a connection before they have a request: the
    // header timeout starts with the client's first byte, as hyper's did.
    let limits = Limits {
        header_read_timeout: Duration::from_millis(200),
        idle_timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let (_server, mut stream) = raw_connection(limits).await;
    // Four header timeouts (and more than 1.5 of them plus a look) in silence.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(openapi_status(&mut stream).await, "HTTP/1.1 200 OK");
}

/// The host's stack around the demo API within `limits`, and a raw connection to it.
async fn raw_connection(limits: Limits) -> (Server, tokio::net::TcpStream) {
    let server = start_within(
        |_peer| app(api(), Options::default().request_timeout),
        None,
        limits,
    )
    .await;
    let stream = tokio::net::TcpStream::connect(server.address)
        .await
        .unwrap();
    (server, stream)
}

/// Sends a whole `GET /v1/openapi.json` on `stream`; returns the answer's status line.
async fn openapi_status(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    stream
        .write_all(b"GET /v1/openapi.json HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = vec![0; 64 * 1024];
    let read = stream.read(&mut buffer).await.unwrap();
    let head = String::from_utf8_lossy(&buffer[..read]);
    head.lines().next().unwrap_or_default().to_owned()
}
