//! Fixtures and store doubles shared by the integration tests.
#![allow(dead_code, unreachable_pub)]

pub mod contract;
pub mod needs;
pub mod net;
#[cfg(feature = "postgres")]
pub mod pg;
#[cfg(feature = "webhooks")]
pub mod receiver;
pub mod scratch;
pub mod spy;

#[allow(unused_imports)] // the standalone example's tests include this module too
pub use spy::SpyKeys;

use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::NaiveDate;
use http::{Request, Response};
use http_body_util::BodyExt;
use partner_api::store::OrderQuery;
use partner_api::{
    EncodedOrder, KeyDigest, KeyLookup, KeyStore, MemoryStore, Order, OrderPage, OrderStore,
    Organization, PartnerApi, StoreError, Timestamp,
};
use serde_json::Value;
use tower::ServiceExt;

/// Every route that needs a key, as served under `/v1`.
pub const KEYED_ROUTES: [&str; 5] = [
    "/v1/me",
    "/v1/orders",
    "/v1/events",
    "/v1/deprecations",
    "/v1/versions",
];

pub const KEY_A: &str = "pk_test_alpha_4fG7hJ2kL9mN3pQ5rS8t";
pub const KEY_B: &str = "pk_test_bravo_Zx1Cv2Bn3Mq4Wd5Fg6Hj";
pub const KEY_EMPTY: &str = "pk_test_empty_Ab12Cd34Ef56Gh78Ij90";
pub const REVOKED_KEY: &str = "pk_test_revoked_Kl12Mn34Op56Qr78St";

/// 2026-01-01T00:00:00.000Z
pub const BASE_MILLIS: i64 = 1_767_225_600_000;

pub fn order(id: &str, created_millis: i64) -> Order {
    Order {
        id: id.to_owned(),
        providers: vec!["meta".to_owned(), "google".to_owned()],
        advertiser_name: format!("Advertiser of {id}"),
        campaign_name: format!("Campaign \"{id}\""),
        budget_dkk: 250_000,
        start_date: NaiveDate::from_ymd_opt(2026, 3, 1).unwrap(),
        end_date: NaiveDate::from_ymd_opt(2026, 4, 30).unwrap(),
        status: "booked".to_owned(),
        external_reference: format!("PO-{id}"),
        created_at: Timestamp::from_unix_millis(created_millis).unwrap(),
        updated_at: None,
    }
}

/// `json`, an order in the newest shape, as the first API version serves it (what a key
/// with no recorded version, and every webhook endpoint, reads).
pub fn at_first_version(json: &[u8]) -> Vec<u8> {
    partner_api::versions::Versions::shipped()
        .render(
            partner_api::versions::Resource::Order,
            json,
            partner_api::versions::FIRST,
        )
        .unwrap()
        .unwrap_or_else(|| json.to_vec())
}

/// Organization `org_a` with 157 orders created one minute apart, in a scrambled insertion
/// order, `org_b` with 3 orders (two sharing a timestamp), `org_empty` with none.
pub fn store() -> MemoryStore {
    let store = MemoryStore::new();
    for (id, name) in [
        ("org_a", "Alpha Media"),
        ("org_b", "Bravo Ads"),
        ("org_empty", "Empty Co"),
    ] {
        store
            .add_organization(Organization {
                id: id.into(),
                name: name.into(),
            })
            .unwrap();
    }
    store.add_key(KEY_A, "org_a").unwrap();
    store.add_key(KEY_B, "org_b").unwrap();
    store.add_key(KEY_EMPTY, "org_empty").unwrap();
    store.add_key(REVOKED_KEY, "org_a").unwrap();
    store.revoke_key(REVOKED_KEY);
    // 157 orders; ids a000..a156 where a(n) is created n minutes after BASE; inserted in a
    // scrambled order so sorting is the store's work.
    for n in (0..157).map(|i| (i * 61) % 157) {
        store
            .add_order(
                "org_a",
                order(&format!("a{n:03}"), BASE_MILLIS + n * 60_000),
            )
            .unwrap();
    }
    store.add_order("org_b", order("b1", BASE_MILLIS)).unwrap();
    store
        .add_order("org_b", order("b3", BASE_MILLIS + 5))
        .unwrap();
    store
        .add_order("org_b", order("b2", BASE_MILLIS + 5))
        .unwrap();
    store
}

pub fn api() -> PartnerApi {
    PartnerApi::from_store(store())
}

pub fn get(path: &str, key: Option<&str>) -> Request<()> {
    let mut request = Request::get(path);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    request.body(()).unwrap()
}

/// A response's parts and body, collected.
#[derive(Clone)]
pub struct Collected {
    pub status: http::StatusCode,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

impl Collected {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|err| panic!("body is not JSON ({err}): {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().unwrap())
    }

    /// Asserts the error document of contract section 7 with `meta`, and returns the message.
    pub fn error_message(&self) -> String {
        let json = self.json();
        assert_eq!(
            json["meta"],
            serde_json::json!({"version": "v1", "status": "beta"})
        );
        assert_eq!(json.as_object().unwrap().len(), 2, "{json}");
        let error = json["error"].as_object().expect("an error object");
        error["message"]
            .as_str()
            .expect("a string message")
            .to_owned()
    }
}

pub async fn collect<B>(response: Response<B>) -> Collected
where
    B: http_body::Body,
    B::Error: std::fmt::Debug,
{
    let (parts, body) = response.into_parts();
    Collected {
        status: parts.status,
        headers: parts.headers,
        body: body.collect().await.unwrap().to_bytes(),
    }
}

/// `headers` without `x-request-id`, which differs from request to request.
pub fn without_request_id(mut headers: http::HeaderMap) -> http::HeaderMap {
    headers.remove("x-request-id");
    headers
}

/// Calls the API and checks the response against the OpenAPI document.
pub async fn call<B>(api: &PartnerApi, request: Request<B>) -> Collected {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let response = collect(api.clone().oneshot(request).await.unwrap()).await;
    contract::assert_conforms(&method, &path, &response);
    response
}

/// A store whose every call fails with `error()`.
pub struct FailingStore(pub fn() -> StoreError);

#[async_trait]
impl KeyStore for FailingStore {
    async fn lookup(&self, _: &KeyDigest) -> Result<KeyLookup, StoreError> {
        Err((self.0)())
    }
}

#[async_trait]
impl OrderStore for FailingStore {
    async fn orders(&self, _: &str, _: &OrderQuery) -> Result<OrderPage, StoreError> {
        Err((self.0)())
    }
}

/// A store that never answers.
pub struct HangingStore;

#[async_trait]
impl KeyStore for HangingStore {
    async fn lookup(&self, _: &KeyDigest) -> Result<KeyLookup, StoreError> {
        std::future::pending().await
    }
}

#[async_trait]
impl OrderStore for HangingStore {
    async fn orders(&self, _: &str, _: &OrderQuery) -> Result<OrderPage, StoreError> {
        std::future::pending().await
    }
}

/// A store that panics.
pub struct PanickingStore;

#[async_trait]
impl KeyStore for PanickingStore {
    async fn lookup(&self, _: &KeyDigest) -> Result<KeyLookup, StoreError> {
        panic!("the key store blew up")
    }
}

#[async_trait]
impl OrderStore for PanickingStore {
    async fn orders(&self, _: &str, _: &OrderQuery) -> Result<OrderPage, StoreError> {
        panic!("the order store blew up")
    }
}

/// An order store that ignores the limit: it returns all of its `count` orders, built oldest
/// first.
pub struct UnsortedStore {
    pub count: i64,
}

#[async_trait]
impl OrderStore for UnsortedStore {
    async fn orders(&self, _: &str, _: &OrderQuery) -> Result<OrderPage, StoreError> {
        (0..self.count)
            .map(|n| EncodedOrder::new(order(&format!("u{n:03}"), BASE_MILLIS + n * 1000)))
            .collect::<Result<_, _>>()
            .map_err(StoreError::from)
    }
}

/// A store that delays every answer of `inner` by `delay`.
pub struct SlowStore<S> {
    pub inner: S,
    pub delay: Duration,
}

#[async_trait]
impl<S: KeyStore> KeyStore for SlowStore<S> {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.lookup(digest).await
    }
}

#[async_trait]
impl<S: OrderStore> OrderStore for SlowStore<S> {
    async fn orders(&self, org: &str, limit: &OrderQuery) -> Result<OrderPage, StoreError> {
        tokio::time::sleep(self.delay).await;
        self.inner.orders(org, limit).await
    }
}

/// Captures everything `tracing` writes (all levels) while the guard lives, on this thread.
#[derive(Clone, Default)]
pub struct CapturedLogs(Arc<Mutex<Vec<u8>>>);

impl CapturedLogs {
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for CapturedLogs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Runs `standalone keys ARGS...` against the database at `url` (given as `--database-url`
/// after the subcommand, or as `DATABASE_URL`); exit status, standard output and error.
pub async fn keys_command(url: Option<&str>, args: &[&str]) -> (bool, String, String) {
    let mut full = vec!["keys"];
    full.extend_from_slice(args);
    if let Some(url) = url {
        full.extend(["--database-url", url]);
    }
    standalone_command(&full).await
}

/// Runs `standalone ARGS...` (no `DATABASE_URL` or `REDIS_URL` from outside): exit status,
/// standard output and error.
pub async fn standalone_command(args: &[&str]) -> (bool, String, String) {
    let output = tokio::process::Command::new(standalone_binary())
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("REDIS_URL")
        .output()
        .await
        .unwrap();
    (
        output.status.success(),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// The example binary, which `cargo test` builds beside the test binaries.
pub fn standalone_binary() -> PathBuf {
    example_binary("standalone")
}

/// The example `name` (`examples/NAME.rs` or `examples/NAME/`), built by `cargo build
/// --all-features --examples` (as `.ci/test` does); missing or older than its sources counts
/// as missing.
pub fn example_binary(name: &str) -> PathBuf {
    fresh_example(name).unwrap_or_else(|missing| panic!("{missing}"))
}

/// The path of the example `name`'s binary if it is built and newer than its sources, else
/// what is wrong. `cargo test` builds an example with tests of its own (the standalone host)
/// as its test harness, not as the binary: `.ci/test` builds the binaries first. A binary
/// older than the sources would test old code, so it counts as missing.
pub fn fresh_example(name: &str) -> Result<PathBuf, String> {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    let path = dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let file = examples.join(format!("{name}.rs"));
    let source = if file.exists() {
        file
    } else {
        examples.join(name)
    };
    let modified = |path: &std::path::Path| std::fs::metadata(path).and_then(|m| m.modified());
    let written = if source.is_dir() {
        std::fs::read_dir(&source)
            .unwrap()
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            // Sources only (the Settings test may write its screenshot there), and not
            // `tests.rs`, which is compiled into the example's tests only.
            .filter(|path| {
                path.extension()
                    .is_some_and(|ext| matches!(ext.to_str(), Some("rs" | "html" | "js" | "css")))
                    && path.file_name().is_some_and(|file| file != "tests.rs")
            })
            .filter_map(|path| modified(&path).ok())
            .max()
            .unwrap()
    } else {
        modified(&source).unwrap()
    };
    if modified(&path).is_ok_and(|built| built >= written) {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing or older than {}: run `cargo build --all-features --examples` first \
             (bash .ci/test does)",
            path.display(),
            source.display()
        ))
    }
}

/// The standalone example running as a process, its stdout read line by line.
pub struct Process {
    pub child: tokio::process::Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Process {
    pub fn spawn(args: &[&str]) -> Self {
        Self::spawn_with_env(args, &[])
    }

    /// Runs the binary with `args` and the environment variables `env`.
    pub fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn_to(args, env, Stdio::null())
    }

    /// Runs the binary with `args` and `env`, its log (stderr) written to `log`.
    pub fn spawn_with_stderr(args: &[&str], env: &[(&str, &str)], log: &std::path::Path) -> Self {
        Self::spawn_to(args, env, std::fs::File::create(log).unwrap().into())
    }

    /// Runs the single-file example `name` with `args`.
    pub fn spawn_example(name: &str, args: &[&str]) -> Self {
        Self::spawn_program(example_binary(name), args, &[], Stdio::null())
    }

    fn spawn_to(args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Self {
        Self::spawn_program(standalone_binary(), args, env, stderr)
    }

    fn spawn_program(program: PathBuf, args: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Self {
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Self { child, lines }
    }

    pub async fn line(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("a line within a minute")
            .unwrap()
            .expect("a line before the end of output")
    }

    /// The address from the `listening on http://HOST:PORT ...` line.
    pub async fn address(&mut self) -> std::net::SocketAddr {
        let line = self.line().await;
        let address = line
            .strip_prefix("listening on http://")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{line}"));
        address.parse().unwrap_or_else(|_| panic!("{line}"))
    }

    /// The base URL from the `listening on http://HOST:PORT` line.
    pub async fn base_url(&mut self) -> String {
        let line = self.line().await;
        let url = line
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("{line}"));
        assert!(
            url.starts_with("http://127.0.0.1:") && !url.ends_with(":0"),
            "{url}"
        );
        url.to_owned()
    }

    pub async fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().unwrap().to_string();
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(killed.success());
        tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("exits on SIGTERM")
            .unwrap()
    }
}

/// A key of `organization_id` that has expired: issued to live for 50 ms, then waited for.
/// Returns its plaintext.
pub async fn expired_key(
    store: &impl partner_api::store::KeyManager,
    organization_id: &str,
) -> String {
    let lifetime = Duration::from_millis(50);
    let issued = store
        .issue(
            organization_id,
            partner_api::store::NewKey::new(partner_api::key::KeyEnvironment::Test)
                .with_expires_in(lifetime),
        )
        .await
        .unwrap();
    tokio::time::sleep(lifetime * 2).await;
    issued.plaintext().to_owned()
}

/// Every ability suite of `KeyManager` passes on `store`, which claims them all.
#[cfg(feature = "testing")]
pub async fn key_abilities_pass<F>(store: &F)
where
    F: partner_api::testing::StoreFixtures,
    F::Store: partner_api::store::KeyManager,
{
    for report in [
        partner_api::testing::run_key_policy(store).await,
        partner_api::testing::run_leak_reports(store).await,
        partner_api::testing::run_last_use(store).await,
        partner_api::testing::run_api_versions(store).await,
        partner_api::testing::run_restrictions(store).await,
    ] {
        report.assert_passed();
        assert_eq!(report.len(), 2);
    }
}

/// The `page_token` of a next-page link (`/v1/orders?page_token=...&...`).
pub fn page_token(link: &str) -> String {
    link.split_once("page_token=")
        .expect("a link with a page_token")
        .1
        .split('&')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// The type and order id of each event of a `GET /events` answer, in order.
pub fn event_kinds(response: &Collected) -> Vec<(String, String)> {
    response.json()["data"]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|event| {
            (
                event["type"].as_str().unwrap().to_owned(),
                event["data"]["id"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}
