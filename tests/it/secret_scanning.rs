//! GitHub's secret scanning endpoint, with a signer made here (a P-256 key pair generated for
//! the test, its public key served as the key document): verified reports revoke leaked keys
//! in any organization and only once; anything not signed over the exact bytes is refused
//! with nothing revoked; keys not in our shape cost no store look-up; and the standalone host
//! serves it on PostgreSQL, where every replica refuses a reported key within the bound.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Full};
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{EncodePublicKey, LineEnding};
use partner_api::key::{ApiKey, KeyEnvironment};
use partner_api::secret_scanning::{GithubPublicKeys, PublicKeyFetcher, SecretScanningService};
use partner_api::store::{KeyManager, NewKey, RevocationReason};
use partner_api::{MemoryStore, PartnerApi};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tower::ServiceExt;

use crate::common::*;

/// A key pair as GitHub holds one, and its identifier.
pub(crate) struct Signer {
    identifier: String,
    key: SigningKey,
}

impl Signer {
    pub(crate) fn generate(identifier: &str) -> Self {
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).unwrap();
        Self {
            identifier: identifier.to_owned(),
            key: SigningKey::from_slice(&secret).unwrap(),
        }
    }

    /// Base64 of the DER signature of `body`, as the header carries it.
    pub(crate) fn sign(&self, body: &[u8]) -> String {
        let signature: Signature = self.key.sign(body);
        base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes())
    }

    fn pem(&self) -> String {
        self.key
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap()
    }
}

/// GitHub's key document listing `signers`.
pub(crate) fn document(signers: &[&Signer]) -> String {
    let keys: Vec<Value> = signers
        .iter()
        .enumerate()
        .map(|(n, signer)| {
            json!({"key_identifier": signer.identifier, "key": signer.pem(), "is_current": n == 0})
        })
        .collect();
    json!({ "public_keys": keys }).to_string()
}

fn report_request(body: &[u8], identifier: &str, signature: &str) -> Request<Full<Bytes>> {
    Request::post("/secret-scanning/github")
        .header("content-type", "application/json")
        .header("github-public-key-identifier", identifier)
        .header("github-public-key-signature", signature)
        .body(Full::new(Bytes::copy_from_slice(body)))
        .unwrap()
}

async fn send(
    service: &SecretScanningService,
    request: Request<Full<Bytes>>,
) -> (StatusCode, Value) {
    let response = service.clone().oneshot(request).await.unwrap();
    let status = response.status();
    assert_eq!(response.headers()["content-type"], "application/json");
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

pub(crate) fn matches(tokens: &[(&str, &str)]) -> Vec<u8> {
    let matches: Vec<Value> = tokens
        .iter()
        .map(|(token, url)| {
            json!({"token": token, "type": "partner_api_key", "url": url, "source": "content"})
        })
        .collect();
    serde_json::to_vec(&matches).unwrap()
}

fn hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

struct Fixture {
    store: MemoryStore,
    api: PartnerApi,
    service: SecretScanningService,
    signer: Signer,
    reported: Arc<AtomicUsize>,
    calls: Arc<AtomicUsize>,
    told: Arc<Mutex<Vec<(String, String, String)>>>,
}

fn fixture() -> Fixture {
    let store = store();
    let signer = Signer::generate("github-key-1");
    let public_keys = GithubPublicKeys::from_document(document(&[&signer]).as_bytes()).unwrap();
    let told = Arc::new(Mutex::new(Vec::new()));
    let hook_told = told.clone();
    let counting = SpyKeys::new(store.clone());
    let reported = counting.leak_reports.clone();
    let calls = counting.leak_calls.clone();
    let service = SecretScanningService::new(counting, public_keys).with_leak_hook(move |leaked| {
        let record = &leaked.record;
        let url = record
            .leak
            .as_ref()
            .map(|leak| leak.url.clone())
            .unwrap_or_default();
        hook_told
            .lock()
            .unwrap()
            .push((record.organization_id.clone(), record.id.clone(), url));
    });
    Fixture {
        api: PartnerApi::from_store(store.clone()),
        store,
        service,
        signer,
        reported,
        calls,
        told,
    }
}

async fn issue(store: &MemoryStore, org: &str) -> (String, String) {
    let issued = store
        .issue(org, NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    (issued.plaintext().to_owned(), issued.record().id.clone())
}

async fn me(api: &PartnerApi, key: &str) -> StatusCode {
    call(api, get("/v1/me", Some(key))).await.status
}

#[tokio::test]
async fn a_verified_report_revokes_our_keys_in_any_organization_once() {
    let f = fixture();
    let (in_a, id_a) = issue(&f.store, "org_a").await;
    let (in_b, id_b) = issue(&f.store, "org_b").await;
    let never_issued = ApiKey::generate(KeyEnvironment::Test).unwrap();
    let mut forged = in_a.clone();
    forged.replace_range(10..11, if &in_a[10..11] == "A" { "B" } else { "A" });
    let tokens = [
        (in_a.as_str(), "https://github.com/acme/app/blob/main/.env"),
        ("ghp_notourssssssssssssssssssssssssssssss", ""),
        (in_b.as_str(), "https://gist.github.com/someone/abc"),
        (forged.as_str(), ""),
        (never_issued.plaintext(), ""),
    ];
    let body = matches(&tokens);
    let signature = f.signer.sign(&body);
    let (status, feedback) = send(
        &f.service,
        report_request(&body, "github-key-1", &signature),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{feedback}");
    let expected: Vec<Value> = tokens
        .iter()
        .zip(["true_positive", "false_positive", "true_positive", "false_positive", "false_positive"])
        .map(|((token, _), label)| {
            json!({"token_hash": hash(token), "token_type": "partner_api_key", "label": label})
        })
        .collect();
    assert_eq!(feedback, Value::Array(expected.clone()));
    assert!(
        !feedback.to_string().contains(&in_a),
        "the feedback never holds a token"
    );
    // Only the three keys in our shape with their checksum were asked about.
    assert_eq!(f.reported.load(Ordering::SeqCst), 3);
    assert_eq!(me(&f.api, &in_a).await, StatusCode::UNAUTHORIZED);
    assert_eq!(me(&f.api, &in_b).await, StatusCode::UNAUTHORIZED);
    assert_eq!(
        me(&f.api, KEY_A).await,
        StatusCode::OK,
        "an unreported key works"
    );
    let record = f.store.get("org_b", &id_b).await.unwrap();
    assert_eq!(record.revoked_reason, Some(RevocationReason::Leaked));
    let leak = record.leak.clone().unwrap();
    assert_eq!(leak.url, "https://gist.github.com/someone/abc");
    assert_eq!(leak.source, "content");
    let json = serde_json::to_value(&record).unwrap();
    assert_eq!(json["revokedReason"], "leaked");
    assert_eq!(json["leak"]["url"], "https://gist.github.com/someone/abc");
    assert!(json["leak"]["reportedAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(
        *f.told.lock().unwrap(),
        [
            (
                "org_a".to_owned(),
                id_a.clone(),
                "https://github.com/acme/app/blob/main/.env".to_owned()
            ),
            (
                "org_b".to_owned(),
                id_b.clone(),
                "https://gist.github.com/someone/abc".to_owned()
            ),
        ]
    );

    // GitHub sends it again: the same answer, the first revocation kept, nobody told twice.
    let (status, again) = send(
        &f.service,
        report_request(&body, "github-key-1", &signature),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(again, Value::Array(expected));
    assert_eq!(f.store.get("org_b", &id_b).await.unwrap(), record);
    assert_eq!(f.told.lock().unwrap().len(), 2);
}

/// Over a store without leak reports, a verified report answers 404, like every ability a
/// host does not offer, and revokes nothing.
#[tokio::test]
async fn a_store_without_leak_reports_answers_404_and_revokes_nothing() {
    let store = store();
    let signer = Signer::generate("github-key-1");
    let public_keys = GithubPublicKeys::from_document(document(&[&signer]).as_bytes()).unwrap();
    let keys = SpyKeys::new(store.clone());
    keys.without_leak_reports.store(true, Ordering::SeqCst);
    let service = SecretScanningService::new(keys, public_keys);
    let (key, _) = issue(&store, "org_a").await;
    let body = matches(&[(key.as_str(), "")]);
    let (status, answer) = send(
        &service,
        report_request(&body, "github-key-1", &signer.sign(&body)),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(
        answer["error"]["message"],
        "this host does not offer leak reports"
    );
    assert_eq!(
        me(&PartnerApi::from_store(store), &key).await,
        StatusCode::OK
    );
}

#[tokio::test]
async fn anything_not_signed_over_the_exact_bytes_is_refused_and_revokes_nothing() {
    let f = fixture();
    let (key, _) = issue(&f.store, "org_a").await;
    let other = Signer::generate("github-key-1");
    let body = matches(&[(key.as_str(), "https://github.com/a/b")]);
    let signature = f.signer.sign(&body);
    let mut flipped = body.clone();
    let at = flipped.len() / 2;
    flipped[at] ^= 0x01;
    let value: Value = serde_json::from_slice(&body).unwrap();
    let reformatted = serde_json::to_vec_pretty(&value).unwrap();
    let der = base64::engine::general_purpose::STANDARD
        .decode(&signature)
        .unwrap();
    let mut trailing = der.clone();
    trailing.push(0);
    let trailing = base64::engine::general_purpose::STANDARD.encode(trailing);
    let truncated = &signature[..signature.len() - 4];
    let cases: Vec<(&str, Request<Full<Bytes>>)> = vec![
        (
            "one flipped body byte",
            report_request(&flipped, "github-key-1", &signature),
        ),
        (
            "another key's signature",
            report_request(&body, "github-key-1", &other.sign(&body)),
        ),
        (
            "whitespace-changed JSON",
            report_request(&reformatted, "github-key-1", &signature),
        ),
        (
            "an unknown identifier",
            report_request(&body, "github-key-2", &signature),
        ),
        (
            "truncated base64",
            report_request(&body, "github-key-1", truncated),
        ),
        (
            "DER with trailing bytes",
            report_request(&body, "github-key-1", &trailing),
        ),
        (
            "a signature that is not base64",
            report_request(&body, "github-key-1", "%%%"),
        ),
        ("no signature", {
            let mut request = report_request(&body, "github-key-1", &signature);
            request.headers_mut().remove("github-public-key-signature");
            request
        }),
        ("no identifier", {
            let mut request = report_request(&body, "github-key-1", &signature);
            request.headers_mut().remove("github-public-key-identifier");
            request
        }),
        ("two signatures", {
            let mut request = report_request(&body, "github-key-1", &signature);
            request
                .headers_mut()
                .append("github-public-key-signature", signature.parse().unwrap());
            request
        }),
    ];
    for (what, request) in cases {
        let (status, answer) = send(&f.service, request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{what}: {answer}");
        assert_eq!(
            answer["error"]["message"], "the report's signature does not verify",
            "{what}"
        );
    }
    assert_eq!(f.reported.load(Ordering::SeqCst), 0, "no store was asked");
    assert_eq!(
        me(&f.api, &key).await,
        StatusCode::OK,
        "nothing was revoked"
    );

    // Signed but not a report: 400. Too large: 413. Not a POST: 405.
    let quoted = format!("[\"{key}\"]");
    for bad in [
        &b"{\"token\": 1}"[..],
        b"not json",
        b"[{\"type\": \"x\"}]",
        quoted.as_bytes(),
    ] {
        let (status, answer) = send(
            &f.service,
            report_request(bad, "github-key-1", &f.signer.sign(bad)),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
        assert!(
            !answer.to_string().contains(&key),
            "a 400 never quotes a token: {answer}"
        );
    }
    let (status, answer) = send(
        &f.service,
        report_request(b"[]", "github-key-1", &f.signer.sign(b"[]")),
    )
    .await;
    assert_eq!((status, answer), (StatusCode::OK, json!([])));
    let huge = vec![b' '; partner_api::secret_scanning::MAX_BODY_BYTES + 1];
    let (status, _) = send(
        &f.service,
        report_request(&huge, "github-key-1", &f.signer.sign(&huge)),
    )
    .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let mut get = report_request(&body, "github-key-1", &signature);
    *get.method_mut() = http::Method::GET;
    let response = f.service.clone().oneshot(get).await.unwrap();
    assert_eq!(response.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(response.headers()["allow"], "POST");
    assert_eq!(me(&f.api, &key).await, StatusCode::OK);
}

/// A fetcher serving whatever document the test puts in it, counting its fetches.
#[derive(Clone, Default)]
struct Served {
    document: Arc<Mutex<String>>,
    fetches: Arc<AtomicUsize>,
}

#[async_trait::async_trait]
impl PublicKeyFetcher for Served {
    async fn fetch(&self) -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        Ok(self.document.lock().unwrap().clone().into_bytes())
    }
}

#[tokio::test]
async fn unknown_identifiers_fetch_at_most_once_an_interval_and_rotations_verify() {
    let store = store();
    let old = Signer::generate("old");
    let new = Signer::generate("new");
    let served = Served::default();
    *served.document.lock().unwrap() = document(&[&old]);
    let public_keys = GithubPublicKeys::from_fetcher(served.clone())
        .with_refresh_interval(Duration::from_secs(1));
    let service = SecretScanningService::new(store, public_keys);
    let body = b"[]";
    let (status, _) = send(&service, report_request(body, "old", &old.sign(body))).await;
    assert_eq!(status, StatusCode::OK, "fetched when first needed");
    assert_eq!(served.fetches.load(Ordering::SeqCst), 1);
    // A forger's made-up identifiers: none fetches within the interval of the last fetch,
    // and after it one fetch for all of them.
    let (status, _) = send(&service, report_request(body, "forged", &old.sign(body))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(served.fetches.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    for n in 0..20 {
        let (status, _) = send(
            &service,
            report_request(body, &format!("forged-{n}"), &old.sign(body)),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    assert_eq!(served.fetches.load(Ordering::SeqCst), 2);
    // GitHub rotates: both keys listed, both verify once the document is fetched again.
    *served.document.lock().unwrap() = document(&[&new, &old]);
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    let (status, _) = send(&service, report_request(body, "new", &new.sign(body))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = send(&service, report_request(body, "old", &old.sign(body))).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(served.fetches.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn the_standalone_host_takes_its_keys_over_https_only() {
    crate::common::needs::needs!(Examples);
    let output = tokio::process::Command::new(standalone_binary())
        .args([
            "--listen",
            "127.0.0.1:0",
            "--secret-scanning-keys",
            "http://example.com/keys",
        ])
        .output()
        .await
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("must come over https"), "{stderr}");
}

#[test]
fn a_key_document_without_a_usable_key_is_refused() {
    for bad in [
        "",
        "{}",
        r#"{"public_keys": []}"#,
        r#"{"public_keys": [{"key_identifier": "a", "key": "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"}]}"#,
    ] {
        assert!(
            GithubPublicKeys::from_document(bad.as_bytes()).is_err(),
            "{bad}"
        );
    }
}

#[tokio::test]
async fn ten_thousand_matches_are_answered_in_one_report() {
    let f = fixture();
    let policy = partner_api::store::KeyPolicy::default().with_max_active_keys(1_000);
    f.store.set_key_policy("org_b", policy).await.unwrap();
    let mut keys = Vec::new();
    for _ in 0..500 {
        keys.push(issue(&f.store, "org_b").await.0);
    }
    let mut tokens: Vec<String> = keys.clone();
    while tokens.len() < 10_000 {
        tokens.push(
            ApiKey::generate(KeyEnvironment::Live)
                .unwrap()
                .plaintext()
                .to_owned(),
        );
    }
    let pairs: Vec<(&str, &str)> = tokens.iter().map(|token| (token.as_str(), "")).collect();
    let body = matches(&pairs);
    let started = Instant::now();
    let (status, feedback) = send(
        &f.service,
        report_request(&body, "github-key-1", &f.signer.sign(&body)),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(status, StatusCode::OK);
    let labels: Vec<&str> = feedback
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels.len(), 10_000);
    assert_eq!(
        labels
            .iter()
            .filter(|label| **label == "true_positive")
            .count(),
        500
    );
    // GitHub's own time-out for an answer: a protocol limit, not a speed target.
    assert!(took < Duration::from_secs(30), "{took:?}");
    assert_eq!(me(&f.api, &keys[499]).await, StatusCode::UNAUTHORIZED);
    // In batches, not a store call per match: 10,000 keys in our shape (500 of them real).
    assert_eq!(f.reported.load(Ordering::SeqCst), 10_000);
    assert_eq!(f.calls.load(Ordering::SeqCst), 10, "batches of 1,000");
}

/// POSTs a signed report to the host at `address`: its status and JSON answer.
async fn post_report(address: std::net::SocketAddr, body: &[u8], signer: &Signer) -> (u16, Value) {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    let mut request = report_request(body, &signer.identifier, &signer.sign(body));
    *request.uri_mut() = format!("http://{address}/secret-scanning/github")
        .parse()
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// `GET /v1/me` with `key` on the host at `address`: its status.
async fn me_at(address: std::net::SocketAddr, key: &str) -> u16 {
    crate::common::net::me_status_from(None, address, key, "").await
}

/// Serves `document` at `http://ADDRESS/keys` until the test ends.
async fn serve_document(document: String) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let document = document.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request| {
                    let document = document.clone();
                    async move {
                        Ok::<_, std::convert::Infallible>(http::Response::new(Full::new(
                            Bytes::from(document),
                        )))
                    }
                });
                let io = hyper_util::rt::TokioIo::new(stream);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, service)
                    .await;
            });
        }
    });
    address
}

#[tokio::test]
async fn on_postgres_every_replica_refuses_a_reported_key_within_the_bound() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = crate::common::pg::fresh_database().await;
    let store = partner_api::PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store
        .load_seed(&partner_api::seed::Seed::demo())
        .await
        .unwrap();
    let policy = partner_api::store::KeyPolicy::default().with_max_active_keys(2_000);
    store.set_key_policy("org_demo", policy).await.unwrap();
    let signer = Signer::generate("github-key-1");
    let document = document(&[&signer]);
    let file = crate::common::net::temp_file("secret-scanning-keys.json", &document);
    let served_at = serve_document(document).await;
    let key_url = format!("http://{served_at}/keys");
    let log = crate::common::net::temp_file("secret-scanning-replica.log", "");

    // Two replicas on one database: the keys from a file, and from a URL.
    let mut first = Process::spawn_with_stderr(
        &[
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &url,
            "--secret-scanning-keys",
            file.to_str().unwrap(),
        ],
        &[("RUST_LOG", "warn")],
        &log,
    );
    let mut second = Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &url,
        "--secret-scanning-keys",
        &key_url,
    ]);
    let (first_at, second_at) = (first.address().await, second.address().await);
    let issued = store
        .issue(
            "org_demo",
            NewKey::new(KeyEnvironment::Live).with_label("CI"),
        )
        .await
        .unwrap();
    let key = issued.plaintext().to_owned();
    for replica in [first_at, second_at] {
        assert_eq!(me_at(replica, &key).await, 200, "cached on every replica");
    }
    let body = matches(&[(key.as_str(), "https://github.com/acme/app/blob/main/.env")]);
    let reported = Instant::now();
    let (status, feedback) = post_report(first_at, &body, &signer).await;
    assert_eq!(status, 200, "{feedback}");
    assert_eq!(feedback[0]["label"], "true_positive");
    for replica in [first_at, second_at] {
        loop {
            if me_at(replica, &key).await == 401 {
                break;
            }
            assert!(
                reported.elapsed() < Duration::from_secs(1),
                "a replica still served the reported key after {:?}",
                reported.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let record = store.get("org_demo", &issued.record().id).await.unwrap();
    assert_eq!(record.revoked_reason, Some(RevocationReason::Leaked));
    // The same report to the other replica (its keys fetched from the URL): idempotent.
    let (status, again) = post_report(second_at, &body, &signer).await;
    assert_eq!((status, &again), (200, &feedback));
    assert_eq!(
        store.get("org_demo", &issued.record().id).await.unwrap(),
        record
    );
    // Unsigned: refused, on either replica.
    let mut unsigned = report_request(&body, "github-key-1", "AAAA");
    *unsigned.uri_mut() = format!("http://{first_at}/secret-scanning/github")
        .parse()
        .unwrap();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Full<Bytes>>();
    assert_eq!(client.request(unsigned).await.unwrap().status(), 401);

    // 10,000 matches, 1,000 of them our keys, in one report on PostgreSQL.
    let mut tokens = Vec::new();
    for _ in 0..1_000 {
        let issued = store
            .issue("org_demo", NewKey::new(KeyEnvironment::Test))
            .await
            .unwrap();
        tokens.push(issued.plaintext().to_owned());
    }
    while tokens.len() < 10_000 {
        tokens.push(
            ApiKey::generate(KeyEnvironment::Live)
                .unwrap()
                .plaintext()
                .to_owned(),
        );
    }
    let pairs: Vec<(&str, &str)> = tokens.iter().map(|token| (token.as_str(), "")).collect();
    let body = matches(&pairs);
    let started = Instant::now();
    let (status, feedback) = post_report(first_at, &body, &signer).await;
    let took = started.elapsed();
    assert_eq!(status, 200);
    let positives = feedback
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["label"] == "true_positive")
        .count();
    assert_eq!(positives, 1_000);
    assert!(took < Duration::from_secs(30), "{took:?}");
    println!("10,000 matches (1,000 keys) on PostgreSQL answered in {took:?}");

    first.terminate().await;
    second.terminate().await;
    // The host logged each leak: key id, organization and URL, never the token.
    let logged = std::fs::read_to_string(&log).unwrap();
    let line = logged
        .lines()
        .find(|line| line.contains(&format!("key_id={}", issued.record().id)))
        .unwrap_or_else(|| panic!("no WARN line for the leaked key: {logged}"));
    assert!(
        line.contains("WARN") && line.contains("org_demo") && line.contains("github.com/acme/app"),
        "{line}"
    );
    assert!(!logged.contains(&key), "the token is never logged");
}
