//! Clients over real sockets: HTTP/1.1 and HTTP/2, raw bytes, TLS with a throwaway
//! certificate; each response checked against the OpenAPI document.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;

use super::{collect, Collected, KEY_A};

pub type HttpClient = Client<HttpConnector, Empty<Bytes>>;

pub fn http1() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

pub fn http2() -> HttpClient {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

pub async fn fetch(
    client: &HttpClient,
    method: Method,
    url: String,
    key: Option<&str>,
) -> Collected {
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
    super::contract::assert_conforms(&method, &path, &collected);
    collected
}

/// The events of the feed at `base` from `path` on, read with `key` page by page (each a 200)
/// until a page has none, and the path its last `Link` names: where to ask for what comes
/// next.
pub async fn read_feed(
    client: &HttpClient,
    base: &str,
    key: &str,
    path: &str,
) -> (Vec<serde_json::Value>, String) {
    let mut events = Vec::new();
    let mut path = path.to_owned();
    loop {
        let page = fetch(client, Method::GET, format!("{base}{path}"), Some(key)).await;
        assert_eq!(page.status, http::StatusCode::OK, "{path}: {:?}", page.body);
        let got = page.json()["data"]["events"].as_array().unwrap().clone();
        let link = page
            .header("link")
            .expect("every answer of the feed links on");
        path = link[1..link.find('>').unwrap()].to_owned();
        if got.is_empty() {
            return (events, path);
        }
        events.extend(got);
    }
}

/// `name` in the test process's scratch folder, written with `contents`.
pub fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = super::scratch::scratch_path(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// Sends raw bytes to the server and returns the status code of its answer.
pub async fn raw_status(address: SocketAddr, request: &[u8]) -> u16 {
    raw_status_from(None, address, request).await
}

/// [`raw_status`] from the local address `local` (`127.0.0.2`, say), when given.
pub async fn raw_status_from(
    local: Option<std::net::IpAddr>,
    address: SocketAddr,
    request: &[u8],
) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = match local {
        None => tokio::net::TcpStream::connect(address).await.unwrap(),
        Some(local) => {
            let socket = if local.is_ipv4() {
                tokio::net::TcpSocket::new_v4()
            } else {
                tokio::net::TcpSocket::new_v6()
            }
            .unwrap();
            socket.bind(SocketAddr::new(local, 0)).unwrap();
            socket.connect(address).await.unwrap()
        }
    };
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

/// The status of `GET /v1/me` with `key` and the raw header lines `extra` (each ending in
/// CRLF), over a fresh connection to `address` from `local` when given.
pub async fn me_status_from(
    local: Option<&str>,
    address: SocketAddr,
    key: &str,
    extra: &str,
) -> u16 {
    let request = format!(
        "GET /v1/me HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {key}\r\n{extra}Connection: close\r\n\r\n"
    );
    let local = local.map(|local| local.parse().unwrap());
    raw_status_from(local, address, request.as_bytes()).await
}

/// Sends `GET path` with `headers` over `client` and returns the collected response, checked
/// against the OpenAPI document.
pub async fn fetch_with(
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
    super::contract::assert_conforms(&Method::GET, &path, &collected);
    collected
}

pub fn uuid_like(id: &str) -> bool {
    id.len() == 36 && id.bytes().filter(|&b| b == b'-').count() == 4
}

/// A throwaway certificate for `localhost` and 127.0.0.1, and its key, as PEM files.
pub struct Certificate {
    pub der: rustls_pki_types::CertificateDer<'static>,
    pub cert_path: PathBuf,
    pub key_path: PathBuf,
}

impl Certificate {
    pub fn generate(name: &str) -> Self {
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
pub async fn tls_get(
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
    super::contract::assert_conforms(&Method::GET, path, &collected);
    Ok((negotiated, collected))
}

/// `GET url` over `client`, not checked against the partner API's document: for listeners
/// that are not the API's.
pub async fn get_unchecked(client: &HttpClient, url: &str) -> Collected {
    let request = Request::get(url).body(Empty::new()).unwrap();
    collect(client.request(request).await.unwrap()).await
}

/// A sample of a Prometheus text exposition: metric name, labels, value.
pub type Sample = (String, std::collections::BTreeMap<String, String>, f64);

/// The samples of a Prometheus text exposition.
pub fn samples(exposition: &str) -> Vec<Sample> {
    exposition
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|pair| !pair.is_empty())
                .map(|pair| {
                    let (key, value) = pair.split_once('=').unwrap();
                    (key.to_owned(), value.trim_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels, value.parse().unwrap())
        })
        .collect()
}

pub fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(metric, found, _)| {
            metric == name
                && found.len() == labels.len()
                && labels
                    .iter()
                    .all(|(key, value)| found.get(*key).map(String::as_str) == Some(*value))
        })
        .map(|(_, _, value)| *value)
}

/// The sum of the samples named `name` whose labels include `labels`.
pub fn sum_of(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(metric, found, _)| {
            metric == name
                && labels
                    .iter()
                    .all(|(key, value)| found.get(*key).map(String::as_str) == Some(*value))
        })
        .map(|(_, _, value)| value)
        .sum()
}
