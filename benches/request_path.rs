//! In-process cost of the request path: `Service::call` on the API and the layer, each beside
//! a baseline service that returns the same bytes without the library. After criterion's
//! figures it prints each case's ratio library/baseline from a timed loop of its own. The
//! `*_prometheus` cases compare the API with the Prometheus exporter's recorder installed
//! ("library") against the API with no recorder ("baseline").
//!
//! `cargo bench --bench request_path`

use std::convert::Infallible;
use std::hint::black_box;

use bytes::Bytes;
use chrono::NaiveDate;
use criterion::{criterion_main, BenchmarkId, Criterion};
use http::{Request, Response};
use http_body_util::BodyExt;
use partner_api::{MemoryStore, Order, Organization, PartnerApi, PartnerApiLayer, Timestamp};
use tower::{Layer, Service, ServiceExt};

const KEY: &str = "pk_test_bench_org_00_abcdefghijklmnop";

/// 50 organizations of 200 orders each; `org_00` is the one the benches read.
fn store() -> MemoryStore {
    let store = MemoryStore::new();
    for org in 0..50 {
        let id = format!("org_{org:02}");
        store
            .add_organization(Organization {
                id: id.clone(),
                name: format!("Organization {org}"),
            })
            .expect("organization");
        store
            .add_key(&format!("pk_test_bench_org_{org:02}_abcdefghijklmnop"), &id)
            .expect("key");
        let orders = (0..200).map(|n| Order {
            id: format!("ord_{org:02}_{n:04}"),
            providers: vec!["meta".into(), "google".into()],
            advertiser_name: format!("Advertiser {n}"),
            campaign_name: format!("Campaign {n} of organization {org}"),
            budget_dkk: 10_000 + n as u64 * 1_250,
            start_date: NaiveDate::from_ymd_opt(2026, 3, 1).expect("date"),
            end_date: NaiveDate::from_ymd_opt(2026, 4, 30).expect("date"),
            status: "booked".into(),
            external_reference: format!("PO-{org}-{n}"),
            created_at: Timestamp::from_unix_millis(1_767_225_600_000 + n * 60_000)
                .expect("timestamp"),
            updated_at: None,
        });
        store.add_orders(&id, orders).expect("orders");
    }
    store
}

fn request(path: &str, key: Option<&str>) -> Request<()> {
    let mut request = Request::get(path);
    if let Some(key) = key {
        request = request.header("authorization", format!("Bearer {key}"));
    }
    request.body(()).expect("request")
}

/// What the library answers to `request`, as headers and bytes, for the baseline to replay.
fn capture(
    runtime: &tokio::runtime::Runtime,
    api: &PartnerApi,
    path: &str,
    key: Option<&str>,
) -> Response<Bytes> {
    runtime.block_on(async {
        let response = api
            .clone()
            .oneshot(request(path, key))
            .await
            .expect("infallible");
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.expect("infallible").to_bytes();
        Response::from_parts(parts, bytes)
    })
}

/// `request(path, key)` from the client 127.0.0.1, as a host passes its peer.
fn request_from_loopback(path: &str, key: Option<&str>) -> Request<()> {
    let mut request = request(path, key);
    request
        .extensions_mut()
        .insert(partner_api::PeerAddr(([127, 0, 0, 1], 40_000).into()));
    request
}

/// Nanoseconds per call of `call`, over a timed loop (best of five rounds).
fn nanos_per_call<S>(
    runtime: &tokio::runtime::Runtime,
    service: &mut S,
    path: &str,
    key: Option<&str>,
) -> f64
where
    S: Service<Request<()>>,
{
    nanos_per_call_of(runtime, service, || request(path, key))
}

/// Nanoseconds per call of `call` with the requests `make` builds.
fn nanos_per_call_of<S>(
    runtime: &tokio::runtime::Runtime,
    service: &mut S,
    make: impl Fn() -> Request<()>,
) -> f64
where
    S: Service<Request<()>>,
{
    const CALLS: u32 = 20_000;
    runtime.block_on(async {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let requests: Vec<Request<()>> = (0..CALLS).map(|_| make()).collect();
            let started = std::time::Instant::now();
            for request in requests {
                let _ = black_box(service.call(request).await);
            }
            best = best.min(started.elapsed().as_nanos() as f64 / f64::from(CALLS));
        }
        best
    })
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let api = PartnerApi::from_store(store());
    let mut ratios = Vec::new();
    let cases = [
        ("me", "/v1/me", Some(KEY)),
        ("orders", "/v1/orders", Some(KEY)),
        ("401_missing", "/v1/orders", None),
        (
            "401_unknown",
            "/v1/orders",
            Some("pk_test_bench_unknown_abcdefghijklmn"),
        ),
    ];
    for (name, path, key) in cases {
        let captured = capture(&runtime, &api, path, key);
        let mut group = c.benchmark_group(name);
        group.bench_function(BenchmarkId::new("library", path), |b| {
            let mut api = api.clone();
            b.to_async(&runtime).iter(|| {
                let response = api.call(request(path, key));
                async move { black_box(response.await) }
            });
        });
        let baseline = tower::service_fn(|_: Request<()>| {
            let mut response = Response::new(captured.body().clone());
            *response.status_mut() = captured.status();
            *response.headers_mut() = captured.headers().clone();
            async move { Ok::<_, Infallible>(response) }
        });
        group.bench_function(BenchmarkId::new("baseline", path), |b| {
            let mut baseline = baseline;
            b.to_async(&runtime).iter(|| {
                let response = baseline.call(request(path, key));
                async move { black_box(response.await) }
            });
        });
        group.finish();
        let library = nanos_per_call(&runtime, &mut api.clone(), path, key);
        let bare = nanos_per_call(&runtime, &mut baseline.clone(), path, key);
        ratios.push((name, library, bare));
    }

    // The layer's pass-through: a request outside the prefix, against the bare host service.
    let host = tower::service_fn(|_: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Bytes::from_static(b"host")))
    });
    let mut group = c.benchmark_group("layer_pass_through");
    group.bench_function("library", |b| {
        let mut mounted = PartnerApiLayer::new(api.clone()).layer(host);
        b.to_async(&runtime).iter(|| {
            let response = mounted.call(request("/health", None));
            async move { black_box(response.await) }
        });
    });
    group.bench_function("baseline", |b| {
        let mut bare = host;
        b.to_async(&runtime).iter(|| {
            let response = bare.call(request("/health", None));
            async move { black_box(response.await) }
        });
    });
    group.finish();
    let library = nanos_per_call(
        &runtime,
        &mut PartnerApiLayer::new(api.clone()).layer(host),
        "/health",
        None,
    );
    let bare = nanos_per_call(&runtime, &mut host.clone(), "/health", None);
    ratios.push(("layer_pass_through", library, bare));

    // Recording each key's last use (issue 13): the same /me, with and without the recorder;
    // "baseline" here is the API without it.
    let recorded_store = store();
    let recorder = runtime.block_on(async {
        partner_api::last_used::LastUsedRecorder::spawn(recorded_store.clone())
    });
    let recorded = PartnerApi::from_store(recorded_store).with_last_used(recorder);
    let mut group = c.benchmark_group("me_last_used");
    group.bench_function("recorded", |b| {
        let mut api = recorded.clone();
        b.to_async(&runtime).iter(|| {
            let response = api.call(request("/v1/me", Some(KEY)));
            async move { black_box(response.await) }
        });
    });
    group.bench_function("not_recorded", |b| {
        let mut api = api.clone();
        b.to_async(&runtime).iter(|| {
            let response = api.call(request("/v1/me", Some(KEY)));
            async move { black_box(response.await) }
        });
    });
    group.finish();
    let with = nanos_per_call(&runtime, &mut recorded.clone(), "/v1/me", Some(KEY));
    let without = nanos_per_call(&runtime, &mut api.clone(), "/v1/me", Some(KEY));
    ratios.push(("me_last_used", with, without));

    // Counting each key's usage (issue 38): the same /me, with and without the recorder;
    // "baseline" here is the API without it.
    let counted_store = store();
    let usage =
        runtime.block_on(async { partner_api::usage::UsageRecorder::spawn(counted_store.clone()) });
    let counted = PartnerApi::from_store(counted_store).with_usage(usage);
    let mut group = c.benchmark_group("me_usage");
    group.bench_function("counted", |b| {
        let mut api = counted.clone();
        b.to_async(&runtime).iter(|| {
            let response = api.call(request("/v1/me", Some(KEY)));
            async move { black_box(response.await) }
        });
    });
    group.finish();
    let with = nanos_per_call(&runtime, &mut counted.clone(), "/v1/me", Some(KEY));
    let without = nanos_per_call(&runtime, &mut api.clone(), "/v1/me", Some(KEY));
    ratios.push(("me_usage", with, without));

    // A key pinned to address ranges (issue 22), served from inside them, against a key
    // without ranges: both from 127.0.0.1, as a host passes its peer.
    let pinned_store = store();
    let pinned_key = "pk_test_bench_pinned_abcdefghijklmnop";
    pinned_store.add_key(pinned_key, "org_00").expect("key");
    let pinned_id = runtime.block_on(async {
        use partner_api::store::KeyManager;
        let records = pinned_store.list("org_00").await.expect("keys");
        let id = records[0].id.clone();
        let ranges =
            partner_api::key::AllowedIps::parse(["10.0.0.0/8", "127.0.0.0/8"]).expect("ranges");
        pinned_store
            .restrict("org_00", &id, ranges)
            .await
            .expect("restrict");
        id
    });
    assert!(!pinned_id.is_empty());
    let pinned_api = PartnerApi::from_store(pinned_store);
    let mut group = c.benchmark_group("me_allowed_ips");
    group.bench_function("pinned", |b| {
        let mut api = pinned_api.clone();
        b.to_async(&runtime).iter(|| {
            let response = api.call(request_from_loopback("/v1/me", Some(pinned_key)));
            async move { black_box(response.await) }
        });
    });
    group.bench_function("any_address", |b| {
        let mut api = pinned_api.clone();
        b.to_async(&runtime).iter(|| {
            let response = api.call(request_from_loopback("/v1/me", Some(KEY)));
            async move { black_box(response.await) }
        });
    });
    group.finish();
    let pinned = nanos_per_call_of(&runtime, &mut pinned_api.clone(), || {
        request_from_loopback("/v1/me", Some(pinned_key))
    });
    let any = nanos_per_call_of(&runtime, &mut pinned_api.clone(), || {
        request_from_loopback("/v1/me", Some(KEY))
    });
    ratios.push(("me_allowed_ips", pinned, any));

    // The metrics (issue 16) with the Prometheus exporter's recorder installed, against the
    // same calls with no recorder (every metric a no-op, as in every case above).
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
    for (name, path) in [
        ("me_prometheus", "/v1/me"),
        ("orders_prometheus", "/v1/orders"),
    ] {
        let mut group = c.benchmark_group(name);
        group.bench_function("exporter", |b| {
            let _installed = metrics::set_default_local_recorder(&prometheus);
            let mut api = api.clone();
            b.to_async(&runtime).iter(|| {
                let response = api.call(request(path, Some(KEY)));
                async move { black_box(response.await) }
            });
        });
        group.bench_function("no_exporter", |b| {
            let mut api = api.clone();
            b.to_async(&runtime).iter(|| {
                let response = api.call(request(path, Some(KEY)));
                async move { black_box(response.await) }
            });
        });
        group.finish();
        let with = {
            let _installed = metrics::set_default_local_recorder(&prometheus);
            nanos_per_call(&runtime, &mut api.clone(), path, Some(KEY))
        };
        let without = nanos_per_call(&runtime, &mut api.clone(), path, Some(KEY));
        ratios.push((name, with, without));
    }

    println!("\nper call, request building included (best of 5 x 20k calls):");
    for (name, library, bare) in ratios {
        println!(
            "  {name:<20} library {library:>7.0} ns  baseline {bare:>7.0} ns  baseline/library {:.2}",
            bare / library
        );
    }
}

// The macro defines an undocumented public function.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::bench);
}
use group::benches;
criterion_main!(benches);
