//! `--metrics-listen`: the API's metrics for Prometheus, on a listener of their own (never the
//! partner-facing port), from `metrics-exporter-prometheus`.

use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use partner_api::metrics::{LAST_USED_BATCH_KEYS, STORE_CALL_DURATION};
use tokio::net::TcpListener;
use tower_http::BoxError;

use crate::serve::{self, Limits};

/// Store call durations, in seconds: from a cache-speed query to the default store timeout.
const DURATION_BUCKETS: &[f64] = &[
    0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Keys per last-use batch, up to the recorder's default capacity.
const BATCH_BUCKETS: &[f64] = &[1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0];
/// How often histograms are rolled over; the exporter leaves it to its host.
const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder as the process's metrics recorder, with buckets for the
/// API's histograms and their descriptions.
pub(crate) fn install() -> Result<PrometheusHandle, String> {
    let recorder = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(STORE_CALL_DURATION.into()), DURATION_BUCKETS)
        .and_then(|builder| {
            builder
                .set_buckets_for_metric(Matcher::Full(LAST_USED_BATCH_KEYS.into()), BATCH_BUCKETS)
        })
        .map_err(|err| format!("metrics: {err}"))?
        .build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)
        .map_err(|_| "metrics: a recorder is installed already".to_owned())?;
    partner_api::metrics::describe();
    Ok(handle)
}

/// Serves `GET /metrics` on `listener` (and keeps the histograms rolling) with the host's own
/// accept loop and its limits, until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, handle: PrometheusHandle) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        let mut interval = tokio::time::interval(UPKEEP_INTERVAL);
        loop {
            interval.tick().await;
            upkeep.run_upkeep();
        }
    });
    let app = tower::service_fn(move |request: Request<Incoming>| {
        std::future::ready(Ok::<_, BoxError>(scrape(&handle, &request)))
    });
    serve::serve(
        listener,
        move |_peer| app.clone(),
        None,
        Limits::default(),
        std::future::pending(),
    )
    .await;
}

/// The answer to a scrape: the text exposition format at `/metrics`, 404 elsewhere.
fn scrape<B>(handle: &PrometheusHandle, request: &Request<B>) -> Response<Full<Bytes>> {
    let plain = |status: StatusCode, body: &'static str| {
        let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
        *response.status_mut() = status;
        response
    };
    if request.uri().path() != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found: try /metrics\n");
    }
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "GET /metrics\n");
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let mut response = Response::new(Full::new(Bytes::from(handle.render())));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}
