//! The metrics after known traffic, read from a test recorder (`metrics-util`'s debugging
//! recorder, installed for the test's thread only), and no secret in any label.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::time::Duration;

use async_trait::async_trait;
use http::{Method, Request, StatusCode};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;
use partner_api::cache::{CachingKeyStore, CachingOrderStore};
use partner_api::key::{ApiKey, KeyEnvironment};
use partner_api::store::OrderQuery;
use partner_api::{
    KeyDigest, KeyLookup, KeyStore, LocalRateLimiter, MemoryStore, OrderPage, OrderStore,
    Organization, PartnerApi, StoreError,
};

use crate::common::{call, get, store, FailingStore, HangingStore, KEY_A, KEY_B, REVOKED_KEY};

/// Runs `test` on a single-threaded runtime with a fresh debugging recorder installed for
/// this thread, and returns what it recorded.
fn recorded<F: std::future::Future<Output = ()>>(test: impl FnOnce() -> F) -> Metrics {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
    Metrics::of(&snapshotter)
}

/// A metric's name and its labels, sorted.
type SeriesId = (String, Vec<(String, String)>);

/// A snapshot: each metric by name and sorted labels.
struct Metrics {
    counters: BTreeMap<SeriesId, u64>,
    histograms: BTreeMap<SeriesId, Vec<f64>>,
    gauges: BTreeMap<SeriesId, f64>,
    /// Names of the metrics that have a description.
    described: Vec<String>,
}

impl Metrics {
    fn of(snapshotter: &Snapshotter) -> Self {
        let mut counters = BTreeMap::new();
        let mut histograms = BTreeMap::new();
        let mut described = Vec::new();
        let mut gauges = BTreeMap::new();
        for (key, _, description, value) in snapshotter.snapshot().into_vec() {
            if description.is_some() {
                described.push(key.key().name().to_owned());
            }
            let mut labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|label| (label.key().to_owned(), label.value().to_owned()))
                .collect();
            labels.sort();
            let id = (key.key().name().to_owned(), labels);
            match (key.kind(), value) {
                (MetricKind::Counter, DebugValue::Counter(n)) => {
                    counters.insert(id, n);
                }
                (MetricKind::Gauge, DebugValue::Gauge(value)) => {
                    gauges.insert(id, value.into_inner());
                }
                (MetricKind::Histogram, DebugValue::Histogram(values)) => {
                    histograms.insert(id, values.into_iter().map(|v| v.into_inner()).collect());
                }
                other => panic!("unexpected metric {other:?}"),
            }
        }
        Self {
            counters,
            histograms,
            gauges,
            described,
        }
    }

    /// The counter `name` with exactly `labels` (0 when it was never counted).
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .get(&id(name, labels))
            .copied()
            .unwrap_or_default()
    }

    /// The samples of the histogram `name` with exactly `labels`.
    fn histogram(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.histograms
            .get(&id(name, labels))
            .cloned()
            .unwrap_or_default()
    }

    /// Every series of the counter `name`, as label sets and values.
    fn series(&self, name: &str) -> Vec<(Vec<(String, String)>, u64)> {
        self.counters
            .iter()
            .filter(|((metric, _), _)| metric == name)
            .map(|((_, labels), value)| (labels.clone(), *value))
            .collect()
    }

    /// Every label value of every metric.
    fn label_values(&self) -> Vec<String> {
        self.counters
            .keys()
            .chain(self.histograms.keys())
            .flat_map(|(_, labels)| labels.iter().map(|(_, value)| value.clone()))
            .collect()
    }
}

fn id(name: &str, labels: &[(&str, &str)]) -> SeriesId {
    let mut labels: Vec<(String, String)> = labels
        .iter()
        .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
        .collect();
    labels.sort();
    (name.to_owned(), labels)
}

fn response_labels<'a>(
    method: &'a str,
    route: &'a str,
    status: &'a str,
) -> Vec<(&'a str, &'a str)> {
    let mut labels = vec![
        ("http_request_method", method),
        ("http_response_status_code", status),
    ];
    if !route.is_empty() {
        labels.push(("http_route", route));
    }
    labels
}

fn with_authorization(path: &str, value: &str) -> Request<()> {
    Request::get(path)
        .header("authorization", value)
        .body(())
        .unwrap()
}

/// A generated key with its last character changed: the checksum no longer matches.
fn bad_checksum_key() -> String {
    let mut key = ApiKey::generate(KeyEnvironment::Live)
        .unwrap()
        .plaintext()
        .to_owned();
    let last = key.pop().unwrap();
    key.push(if last == 'a' { 'b' } else { 'a' });
    key
}

#[test]
fn responses_auth_failures_and_organizations_after_known_traffic() {
    let unknown = ApiKey::generate(KeyEnvironment::Live).unwrap();
    let bad_checksum = bad_checksum_key();
    let mut bodies_401 = Vec::new();
    let mut expired_key = String::new();
    let metrics = recorded(|| async {
        partner_api::metrics::describe();
        let store = store();
        expired_key = crate::common::expired_key(&store, "org_b").await;
        let api = PartnerApi::from_store(store);
        for _ in 0..3 {
            assert_eq!(
                call(&api, get("/v1/me", Some(KEY_A))).await.status,
                StatusCode::OK
            );
        }
        for _ in 0..2 {
            assert_eq!(
                call(&api, get("/v1/orders", Some(KEY_B))).await.status,
                StatusCode::OK
            );
        }
        let head = Request::head("/v1/me")
            .header("authorization", format!("Bearer {KEY_A}"))
            .body(())
            .unwrap();
        assert_eq!(call(&api, head).await.status, StatusCode::OK);
        let refused = [
            get("/v1/me", None),
            with_authorization("/v1/me", "Basic YWxhZGRpbjpvcGVuc2VzYW1l"),
            with_authorization("/v1/orders", "Bearer two tokens"),
            get("/v1/me", Some(&bad_checksum)),
            get("/v1/me", Some(unknown.plaintext())),
            get("/v1/me", Some(REVOKED_KEY)),
            get("/v1/orders", Some(&expired_key)),
        ];
        for request in refused {
            let response = call(&api, request).await;
            assert_eq!(response.status, StatusCode::UNAUTHORIZED);
            bodies_401.push(response.body);
        }
        assert_eq!(
            call(&api, get("/v1/nope", Some(KEY_A))).await.status,
            StatusCode::NOT_FOUND
        );
        let post = Request::builder()
            .method(Method::POST)
            .uri("/v1/me")
            .body(())
            .unwrap();
        assert_eq!(
            call(&api, post).await.status,
            StatusCode::METHOD_NOT_ALLOWED
        );
        assert_eq!(
            call(&api, get("/v1/openapi.json", None)).await.status,
            StatusCode::OK
        );
    });

    use partner_api::metrics::{AUTH_FAILURES, ORGANIZATION_REQUESTS, RESPONSES};
    assert!(
        bodies_401.windows(2).all(|pair| pair[0] == pair[1]),
        "every 401 has the same body"
    );
    for (method, route, status, count) in [
        ("GET", "/v1/me", "200", 3),
        ("HEAD", "/v1/me", "200", 1),
        ("GET", "/v1/orders", "200", 2),
        ("GET", "/v1/me", "401", 5),
        ("GET", "/v1/orders", "401", 2),
        ("GET", "", "404", 1),
        ("POST", "/v1/me", "405", 1),
        ("GET", "/v1/openapi.json", "200", 1),
    ] {
        assert_eq!(
            metrics.counter(RESPONSES, &response_labels(method, route, status)),
            count,
            "{method} {route} {status}"
        );
    }
    assert_eq!(
        metrics.series(RESPONSES).len(),
        8,
        "no other response series"
    );
    for (reason, count) in [
        ("missing", 1),
        ("malformed", 2),
        ("bad_checksum", 1),
        ("unknown", 1),
        ("revoked", 1),
        ("expired", 1),
    ] {
        assert_eq!(
            metrics.counter(AUTH_FAILURES, &[("reason", reason)]),
            count,
            "{reason}"
        );
    }
    assert_eq!(metrics.series(AUTH_FAILURES).len(), 6);
    assert_eq!(
        metrics.counter(ORGANIZATION_REQUESTS, &[("organization_id", "org_a")]),
        4
    );
    assert_eq!(
        metrics.counter(ORGANIZATION_REQUESTS, &[("organization_id", "org_b")]),
        2
    );
    assert_eq!(metrics.series(ORGANIZATION_REQUESTS).len(), 2);
    for name in [RESPONSES, AUTH_FAILURES, ORGANIZATION_REQUESTS] {
        assert!(
            metrics.described.iter().any(|described| described == name),
            "{name}"
        );
    }
    // The memory store answers at once: no store call was waited for.
    assert!(metrics.histograms.is_empty(), "{:?}", metrics.histograms);
    assert_no_secret(
        &metrics,
        &[
            KEY_A,
            KEY_B,
            REVOKED_KEY,
            unknown.plaintext(),
            &bad_checksum,
            &expired_key,
        ],
    );
}

/// No label value holds a key, its digest (hex, either case) or its hint, nor a part of a key
/// long enough to matter.
fn assert_no_secret(metrics: &Metrics, keys: &[&str]) {
    let values = metrics.label_values();
    assert!(!values.is_empty());
    for key in keys {
        let digest: String = KeyDigest::of(key)
            .as_bytes()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let tail = &key[key.len() - 4..];
        for value in &values {
            let lower = value.to_ascii_lowercase();
            assert!(!value.contains(key), "a label holds a key: {value}");
            assert!(
                !lower.contains(&digest[..16]),
                "a label holds a digest: {value}"
            );
            assert!(!value.contains("..."), "a label holds a hint: {value}");
            assert!(
                !(value.len() >= 8 && key.contains(value.as_str())),
                "a label holds part of a key: {value}"
            );
            assert!(
                !value.ends_with(tail) || value.len() < 4,
                "a label ends like a key: {value}"
            );
        }
    }
}

fn organizations(count: usize) -> (MemoryStore, Vec<String>) {
    let store = MemoryStore::new();
    let mut keys = Vec::new();
    for n in 0..count {
        let id = format!("org_{n}");
        store
            .add_organization(Organization {
                id: id.clone(),
                name: format!("Org {n}"),
            })
            .unwrap();
        let key = format!("pk_test_bounded_{n}_key");
        store.add_key(&key, &id).unwrap();
        keys.push(key);
    }
    (store, keys)
}

#[test]
fn organization_labels_are_bounded_and_the_rest_is_other() {
    let metrics = recorded(|| async {
        let (store, keys) = organizations(5);
        let api = PartnerApi::from_store(store).with_organization_labels(2);
        for key in &keys {
            assert_eq!(
                call(&api, get("/v1/me", Some(key))).await.status,
                StatusCode::OK
            );
        }
        // The first two keep their series.
        assert_eq!(
            call(&api, get("/v1/me", Some(&keys[0]))).await.status,
            StatusCode::OK
        );
    });
    use partner_api::metrics::{ORGANIZATION_REQUESTS, OTHER};
    let series = metrics.series(ORGANIZATION_REQUESTS);
    assert_eq!(series.len(), 3, "{series:?}");
    assert_eq!(
        metrics.counter(ORGANIZATION_REQUESTS, &[("organization_id", "org_0")]),
        2
    );
    assert_eq!(
        metrics.counter(ORGANIZATION_REQUESTS, &[("organization_id", "org_1")]),
        1
    );
    assert_eq!(
        metrics.counter(ORGANIZATION_REQUESTS, &[("organization_id", OTHER)]),
        3
    );
}

#[test]
fn key_id_labels_are_opt_in_and_bounded() {
    let mut key_ids = Vec::new();
    let metrics = recorded(|| async {
        let (store, _) = organizations(1);
        let keys = [
            "pk_test_first_key_id",
            "pk_test_second_key_id",
            "pk_test_third_key_id",
        ];
        for key in keys {
            key_ids.push(store.add_key(key, "org_0").unwrap());
        }
        let api = PartnerApi::from_store(store)
            .with_organization_labels(10)
            .with_key_id_labels(2);
        for key in keys {
            assert_eq!(
                call(&api, get("/v1/me", Some(key))).await.status,
                StatusCode::OK
            );
        }
        assert_eq!(
            call(&api, get("/v1/me", Some(keys[2]))).await.status,
            StatusCode::OK
        );
    });
    use partner_api::metrics::{ORGANIZATION_REQUESTS, OTHER};
    let series = metrics.series(ORGANIZATION_REQUESTS);
    assert_eq!(series.len(), 3, "{series:?}");
    for (key_id, count) in [
        (key_ids[0].as_str(), 1),
        (key_ids[1].as_str(), 1),
        (OTHER, 2),
    ] {
        assert_eq!(
            metrics.counter(
                ORGANIZATION_REQUESTS,
                &[("organization_id", "org_0"), ("key_id", key_id)]
            ),
            count,
            "{key_id}"
        );
    }
    assert_no_secret(
        &metrics,
        &[
            "pk_test_first_key_id",
            "pk_test_second_key_id",
            "pk_test_third_key_id",
        ],
    );
}

#[test]
fn rate_limit_refusals_are_counted_by_organization() {
    let metrics = recorded(|| async {
        let limiter = LocalRateLimiter::new(Duration::from_secs(3600), NonZeroU32::new(2).unwrap());
        let api = PartnerApi::from_store(store()).with_rate_limiter(limiter);
        for expected in [
            StatusCode::OK,
            StatusCode::OK,
            StatusCode::TOO_MANY_REQUESTS,
        ] {
            assert_eq!(
                call(&api, get("/v1/me", Some(KEY_A))).await.status,
                expected
            );
        }
        assert_eq!(
            call(&api, get("/v1/me", Some(KEY_B))).await.status,
            StatusCode::OK
        );
    });
    use partner_api::metrics::{RATE_LIMIT_REFUSALS, RESPONSES};
    assert_eq!(
        metrics.counter(RATE_LIMIT_REFUSALS, &[("organization_id", "org_a")]),
        1
    );
    assert_eq!(metrics.series(RATE_LIMIT_REFUSALS).len(), 1);
    assert_eq!(
        metrics.counter(RESPONSES, &response_labels("GET", "/v1/me", "429")),
        1
    );
}

/// A key store that only answers by waiting (no `_now` answers), as a database does.
#[derive(Clone)]
struct Awaited(MemoryStore);

#[async_trait]
impl KeyStore for Awaited {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        self.0.lookup(digest).await
    }
}

/// A key store that keeps no refused keys: every refused key is unknown to it.
struct LookupOnly(MemoryStore);

#[async_trait]
impl KeyStore for LookupOnly {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        Ok(self.0.lookup(digest).await?.into_principal().into())
    }
}

#[test]
fn a_store_that_does_not_say_why_counts_refused_keys_as_unknown() {
    let metrics = recorded(|| async {
        let api = PartnerApi::new(LookupOnly(store()), store());
        let response = call(&api, get("/v1/me", Some(REVOKED_KEY))).await;
        assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    });
    use partner_api::metrics::AUTH_FAILURES;
    assert_eq!(metrics.counter(AUTH_FAILURES, &[("reason", "unknown")]), 1);
    assert_eq!(metrics.series(AUTH_FAILURES).len(), 1);
}

#[async_trait]
impl OrderStore for Awaited {
    async fn orders(&self, org: &str, query: &OrderQuery) -> Result<OrderPage, StoreError> {
        self.0.orders(org, query).await
    }
}

#[test]
fn store_calls_are_timed_and_their_failures_counted_by_type() {
    let metrics = recorded(|| async {
        let awaited = PartnerApi::new(Awaited(store()), Awaited(store()));
        assert_eq!(
            call(&awaited, get("/v1/orders", Some(KEY_A))).await.status,
            StatusCode::OK
        );
        assert_eq!(
            call(&awaited, get("/v1/me", Some(KEY_B))).await.status,
            StatusCode::OK
        );

        let failing_orders = PartnerApi::new(
            Awaited(store()),
            FailingStore(|| StoreError::unavailable("down")),
        );
        let response = call(&failing_orders, get("/v1/orders", Some(KEY_A))).await;
        assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);

        let hanging = PartnerApi::new(Awaited(store()), HangingStore)
            .with_store_timeout(Some(Duration::from_millis(50)));
        let response = call(&hanging, get("/v1/orders", Some(KEY_A))).await;
        assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);

        let failing_keys = PartnerApi::new(FailingStore(|| StoreError::other("bug")), store());
        let response = call(&failing_keys, get("/v1/me", Some(KEY_A))).await;
        assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    });
    use partner_api::metrics::{RESPONSES, STORE_CALL_DURATION, STORE_ERRORS};
    let lookups = metrics.histogram(
        STORE_CALL_DURATION,
        &[("store", "keys"), ("operation", "lookup")],
    );
    assert_eq!(lookups.len(), 4, "the calls that succeeded: {lookups:?}");
    let reads = metrics.histogram(
        STORE_CALL_DURATION,
        &[("store", "orders"), ("operation", "newest_orders")],
    );
    assert_eq!(reads.len(), 1, "{reads:?}");
    // A failed call's duration is apart, by error type; the hanging read was timed until the
    // deadline passed.
    let timed_out = metrics.histogram(
        STORE_CALL_DURATION,
        &[
            ("store", "orders"),
            ("operation", "newest_orders"),
            ("error_type", "timeout"),
        ],
    );
    assert!(
        matches!(timed_out[..], [seconds] if seconds >= 0.05),
        "{timed_out:?}"
    );
    for (store, operation, error_type) in [
        ("orders", "newest_orders", "unavailable"),
        ("keys", "lookup", "other"),
    ] {
        let samples = metrics.histogram(
            STORE_CALL_DURATION,
            &[
                ("store", store),
                ("operation", operation),
                ("error_type", error_type),
            ],
        );
        assert_eq!(samples.len(), 1, "{store} {operation} {error_type}");
    }
    for (store, operation, error_type) in [
        ("orders", "newest_orders", "unavailable"),
        ("orders", "newest_orders", "timeout"),
        ("keys", "lookup", "other"),
    ] {
        assert_eq!(
            metrics.counter(
                STORE_ERRORS,
                &[
                    ("store", store),
                    ("operation", operation),
                    ("error_type", error_type)
                ]
            ),
            1,
            "{store} {operation} {error_type}"
        );
    }
    assert_eq!(metrics.series(STORE_ERRORS).len(), 3);
    assert_eq!(
        metrics.counter(RESPONSES, &response_labels("GET", "/v1/orders", "503")),
        2
    );
    assert_eq!(
        metrics.counter(RESPONSES, &response_labels("GET", "/v1/me", "500")),
        1
    );
}

#[test]
fn caches_count_hits_misses_and_invalidations() {
    let metrics = recorded(|| async {
        let store = store();
        let keys = CachingKeyStore::new(Awaited(store.clone()));
        let orders = CachingOrderStore::new(Awaited(store.clone()));
        let api = PartnerApi::new(keys.clone(), orders.clone());
        for _ in 0..3 {
            assert_eq!(
                call(&api, get("/v1/orders", Some(KEY_A))).await.status,
                StatusCode::OK
            );
        }
        // A revoked key is remembered too, with its reason.
        for _ in 0..2 {
            let response = call(&api, get("/v1/me", Some(REVOKED_KEY))).await;
            assert_eq!(response.status, StatusCode::UNAUTHORIZED);
        }
        let principal = keys
            .lookup(&KeyDigest::of(KEY_A))
            .await
            .unwrap()
            .into_principal()
            .unwrap();
        keys.invalidate_key(principal.key_id());
        orders.invalidate_organization("org_a");
        keys.invalidate_all();
    });
    use partner_api::metrics::{AUTH_FAILURES, CACHE_HITS, CACHE_INVALIDATIONS, CACHE_MISSES};
    // Keys: miss, hit, hit for KEY_A; miss, hit for the revoked key; one more hit above.
    assert_eq!(metrics.counter(CACHE_MISSES, &[("cache", "keys")]), 2);
    assert_eq!(metrics.counter(CACHE_HITS, &[("cache", "keys")]), 4);
    assert_eq!(metrics.counter(CACHE_MISSES, &[("cache", "orders")]), 1);
    assert_eq!(metrics.counter(CACHE_HITS, &[("cache", "orders")]), 2);
    assert_eq!(metrics.counter(AUTH_FAILURES, &[("reason", "revoked")]), 2);
    for (cache, scope) in [("keys", "key"), ("orders", "organization"), ("keys", "all")] {
        assert_eq!(
            metrics.counter(CACHE_INVALIDATIONS, &[("cache", cache), ("scope", scope)]),
            1,
            "{cache} {scope}"
        );
    }
}

#[test]
fn last_use_batches_and_failures_are_counted() {
    let metrics = recorded(|| async {
        let store = store();
        let manager = crate::common::SpyKeys::new(store.clone());
        manager
            .failing_last_used
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let failing = manager.failing_last_used.clone();
        let recorder = partner_api::last_used::LastUsedRecorder::spawn(manager);
        let api = PartnerApi::from_store(store).with_last_used(recorder.clone());
        for key in [KEY_A, KEY_B] {
            assert_eq!(
                call(&api, get("/v1/me", Some(key))).await.status,
                StatusCode::OK
            );
        }
        assert!(recorder.flush().await.is_err());
        failing.store(false, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(recorder.flush().await.unwrap(), 2);
    });
    use partner_api::metrics::{
        LAST_USED_BATCH_KEYS, LAST_USED_FLUSH_FAILURES, STORE_CALL_DURATION, STORE_ERRORS,
    };
    assert_eq!(
        metrics.histogram(LAST_USED_BATCH_KEYS, &[]),
        vec![2.0],
        "written batches only"
    );
    assert_eq!(metrics.counter(LAST_USED_FLUSH_FAILURES, &[]), 1);
    for error_type in [None, Some("unavailable")] {
        let mut labels = vec![("store", "keys"), ("operation", "record_last_used")];
        labels.extend(error_type.map(|error_type| ("error_type", error_type)));
        assert_eq!(
            metrics.histogram(STORE_CALL_DURATION, &labels).len(),
            1,
            "{error_type:?}"
        );
    }
    assert_eq!(
        metrics.counter(
            STORE_ERRORS,
            &[
                ("store", "keys"),
                ("operation", "record_last_used"),
                ("error_type", "unavailable")
            ]
        ),
        1
    );
}

#[test]
fn last_uses_a_full_recorder_drops_are_counted() {
    let metrics = recorded(|| async {
        let store = store();
        let recorder = partner_api::last_used::LastUsedRecorder::with_capacity(store.clone(), 1);
        let api = PartnerApi::from_store(store).with_last_used(recorder.clone());
        for key in [KEY_A, KEY_B] {
            assert_eq!(
                call(&api, get("/v1/me", Some(key))).await.status,
                StatusCode::OK
            );
        }
        assert_eq!(recorder.dropped(), 1);
    });
    assert_eq!(
        metrics.counter(partner_api::metrics::LAST_USED_DROPPED, &[]),
        1
    );
}

#[test]
fn the_route_label_is_the_path_under_the_apis_prefix() {
    let metrics = recorded(|| async {
        let api = PartnerApi::from_store(store()).with_prefix("/partner/v1");
        assert_eq!(
            call(&api, get("/partner/v1/orders", Some(KEY_A)))
                .await
                .status,
            StatusCode::OK
        );
        assert_eq!(
            call(&api, get("/partner/v1/me/", None)).await.status,
            StatusCode::NOT_FOUND
        );
    });
    use partner_api::metrics::RESPONSES;
    assert_eq!(
        metrics.counter(
            RESPONSES,
            &response_labels("GET", "/partner/v1/orders", "200")
        ),
        1
    );
    assert_eq!(
        metrics.counter(RESPONSES, &response_labels("GET", "", "404")),
        1
    );
    assert_eq!(metrics.series(RESPONSES).len(), 2);
}

#[test]
fn the_notifications_gauge_says_whether_the_caches_answer_from_memory() {
    use partner_api::cache::Notifications;
    use partner_api::metrics::CACHE_NOTIFICATIONS_CONNECTED;
    let gauge = |metrics: &Metrics| {
        metrics
            .gauges
            .get(&id(CACHE_NOTIFICATIONS_CONNECTED, &[]))
            .copied()
    };
    let mut hub = None;
    let created = recorded(|| async { hub = Some(Notifications::new()) });
    assert_eq!(gauge(&created), Some(0.0), "down until connected");
    let hub = hub.unwrap();
    let connected = recorded(|| async { hub.connected() });
    assert_eq!(gauge(&connected), Some(1.0));
    let disconnected = recorded(|| async {
        hub.connected();
        hub.disconnected();
    });
    assert_eq!(gauge(&disconnected), Some(0.0));
}

/// An order store that fails at once, without being waited for.
struct FailsAtOnce;

#[async_trait]
impl OrderStore for FailsAtOnce {
    async fn orders(&self, _: &str, _: &OrderQuery) -> Result<OrderPage, StoreError> {
        Err(StoreError::unavailable("down"))
    }

    fn orders_now(&self, _: &str, _: &OrderQuery) -> Option<Result<OrderPage, StoreError>> {
        Some(Err(StoreError::unavailable("down")))
    }
}

#[test]
fn only_calls_that_wait_are_timed_and_a_failure_at_once_is_counted() {
    let metrics = recorded(|| async {
        // The key must be waited for (a cache miss); the limiter and the orders then answer
        // at once, and are no store calls.
        let limiter = LocalRateLimiter::new(Duration::from_secs(60), NonZeroU32::new(10).unwrap());
        let api = PartnerApi::new(CachingKeyStore::new(Awaited(store())), store())
            .with_rate_limiter(limiter);
        assert_eq!(
            call(&api, get("/v1/orders", Some(KEY_A))).await.status,
            StatusCode::OK
        );
        let failing = PartnerApi::new(store(), FailsAtOnce);
        let response = call(&failing, get("/v1/orders", Some(KEY_A))).await;
        assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    });
    use partner_api::metrics::{STORE_CALL_DURATION, STORE_ERRORS};
    let timed: Vec<_> = metrics
        .histograms
        .iter()
        .filter(|((name, _), _)| name == STORE_CALL_DURATION)
        .map(|((_, labels), samples)| (labels.clone(), samples.len()))
        .collect();
    let key_lookup = vec![
        ("operation".to_owned(), "lookup".to_owned()),
        ("store".to_owned(), "keys".to_owned()),
    ];
    assert_eq!(timed, [(key_lookup, 1)], "only the key lookup waited");
    assert_eq!(
        metrics.counter(
            STORE_ERRORS,
            &[
                ("store", "orders"),
                ("operation", "newest_orders"),
                ("error_type", "unavailable")
            ]
        ),
        1
    );
}

#[cfg(feature = "postgres")]
#[test]
fn the_listener_reports_the_caches_evidence_and_the_notifications_lag() {
    crate::common::needs::needs!(Postgres);
    use partner_api::metrics::{CACHE_EVIDENCE, CACHE_NOTIFICATION_LAG};
    let url = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(crate::common::pg::fresh_database());
    let metrics = recorded(|| async {
        let store = partner_api::PgStore::connect_lazy(&url).unwrap();
        store.migrate().await.unwrap();
        let hub = partner_api::cache::postgres::listen(store.pool().clone());
        let _keys = partner_api::cache::CachingKeyStore::new(store).with_notifications(&hub);
        // A few heartbeats.
        tokio::time::sleep(std::time::Duration::from_millis(900)).await;
        assert!(hub.is_connected());
    });
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let evidence = metrics.gauges[&id(CACHE_EVIDENCE, &[])];
    assert!(
        (0.0..1.0).contains(&(now - evidence)),
        "evidence {:.3} s old",
        now - evidence
    );
    let lags = metrics.histogram(CACHE_NOTIFICATION_LAG, &[]);
    assert!(lags.len() >= 2, "{lags:?}");
    assert!(lags.iter().all(|lag| (0.0..0.8).contains(lag)), "{lags:?}");
}

/// Deliveries by outcome, their durations, endpoints disabled by reason, and the backlog.
#[cfg(feature = "webhooks")]
#[test]
fn webhook_deliveries_are_counted() {
    use crate::common::receiver::{Receiver, Reply};
    use partner_api::webhooks::{
        DeliveryConfig, DestinationPolicy, Dispatcher, NewEndpoint, WebhookManager,
    };
    use std::time::Duration;
    let metrics = recorded(|| async {
        let fine = Receiver::ok().await;
        let gone = Receiver::start(|_, _| Reply::Status(410)).await;
        let store = store();
        let config = DeliveryConfig::new()
            .with_destinations(
                DestinationPolicy::new()
                    .with_allow_http(true)
                    .with_allowed_subnet("127.0.0.0/8".parse().unwrap()),
            )
            .with_poll_interval(Duration::from_millis(10));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let worker = tokio::spawn(Dispatcher::new(store.clone(), config).run(async move {
            let _ = stopped.await;
        }));
        for receiver in [&fine, &gone] {
            let endpoint = store
                .add_endpoint("org_a", NewEndpoint::new(receiver.url("/")))
                .await
                .unwrap();
            store.send_test("org_a", &endpoint.record.id).await.unwrap();
            receiver.wait_for(1, Duration::from_secs(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = stop.send(());
        worker.await.unwrap();
    });
    use partner_api::metrics::{
        WEBHOOK_ATTEMPT_DURATION, WEBHOOK_DELIVERIES, WEBHOOK_DUE, WEBHOOK_ENDPOINTS_DISABLED,
    };
    assert_eq!(
        metrics.counter(WEBHOOK_DELIVERIES, &[("outcome", "succeeded")]),
        1
    );
    assert_eq!(
        metrics.counter(WEBHOOK_DELIVERIES, &[("outcome", "failed")]),
        1
    );
    assert_eq!(
        metrics.counter(WEBHOOK_ENDPOINTS_DISABLED, &[("reason", "gone")]),
        1
    );
    assert_eq!(
        metrics
            .histogram(WEBHOOK_ATTEMPT_DURATION, &[("outcome", "succeeded")])
            .len(),
        1
    );
    // Counted when the worker starts (then the first test event was already due) and every
    // 5 s after.
    assert!(metrics
        .gauges
        .get(&id(WEBHOOK_DUE, &[]))
        .is_some_and(|due| *due <= 1.0));
}
