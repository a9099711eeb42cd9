//! What each layer of the standalone host costs a request, by itself: the host's own layers
//! (`examples/standalone/stack.rs`, compiled into this bench as they are) each alone around
//! the API, then all of them, against the API alone; and, for comparison, the layers the
//! host does not use for the same jobs. In process and CPU-bound: a current-thread runtime
//! calls the service and reads the response's body to its end as hyper does, for
//! `GET /v1/me` with the demo key and no `x-request-id` (so every request gets a new one),
//! with a subscriber filtering at WARN, as the load harness runs the host (nothing is logged;
//! the host's default, INFO, writes a line per request and costs that line).
//!
//! ```text
//! cargo bench --bench host_layers                      # nanoseconds per request, each case
//! cargo bench --bench host_layers -- --only host --calls 1000   # one case, for callgrind
//! cargo bench --bench host_layers -- --list            # the cases' names, one a line
//! ```
//!
//! `benches/instructions.sh` runs the second form under callgrind for each case, twice
//! (`FEW` and `MANY` calls), and prints the instructions per request of each.

#![allow(missing_docs)]

#[path = "../examples/standalone/stack.rs"]
mod stack;

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION};
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util::Empty;
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::PartnerApi;
use tower::{BoxError, Layer, Service, ServiceBuilder};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};

/// The request timeout of every case that has one: the host's default.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Each case: its name, and what it measures.
const CASES: [(&str, &str); 9] = [
    ("api", "PartnerApi alone"),
    (
        "request_ids",
        "+ the host's request ids (tower-http's SetRequestHeader, PropagateHeader)",
    ),
    (
        "access_log",
        "+ the host's access log (tower-http's TraceLayer, INFO off)",
    ),
    (
        "panics",
        "+ the host's panic catcher (tower-http's CatchPanicLayer)",
    ),
    (
        "request_timeout",
        "+ the host's request timeout (tower's TimeoutLayer, map_result)",
    ),
    (
        "host",
        "+ the host's stack (stack::app; INFO off: the access log left out)",
    ),
    (
        "tower_http_request_id",
        "+ tower-http's SetRequestId, PropagateRequestId for the ids (not used)",
    ),
    (
        "library_request_id",
        "+ partner_api's RequestIdLayer instead of tower-http's (not used)",
    ),
    (
        "tower_http_timeout",
        "+ tower-http's TimeoutLayer instead of tower's (not used)",
    ),
];

fn main() {
    let arguments: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        arguments
            .iter()
            .position(|argument| argument == flag)
            .and_then(|at| arguments.get(at + 1))
    };
    // As the load harness runs the host (RUST_LOG=warn): spans and INFO lines are disabled.
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("warn"))
        .with_writer(std::io::sink)
        .init();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = Seed::demo().to_memory_store().expect("the demo data");
    let api = PartnerApi::from_store(store);
    let _entered = runtime.enter();

    if arguments.iter().any(|argument| argument == "--list") {
        for (name, _) in CASES {
            println!("{name}");
        }
        return;
    }
    if let Some(only) = value("--only") {
        let calls = value("--calls").map_or(1_000, |calls| calls.parse().expect("--calls N"));
        run_case(only, &api, calls);
        return;
    }
    println!("GET /v1/me, nanoseconds per request: best of 7 rounds of 20,000, each case");
    let mut api_alone = None;
    for (name, what) in CASES {
        let best = (0..7)
            .map(|_| {
                let started = Instant::now();
                run_case(name, &api, 20_000);
                started.elapsed().as_nanos() as f64 / 20_000.0
            })
            .fold(f64::MAX, f64::min);
        let added = api_alone.map_or(String::new(), |alone: f64| format!("{:+7.0}", best - alone));
        api_alone.get_or_insert(best);
        println!("{name:<20} {best:7.0} {added:>7}   {what}");
    }
}

/// Serves `calls` requests through the case `name` around `api`.
fn run_case(name: &str, api: &PartnerApi, calls: u32) {
    let api = api.clone();
    match name {
        "api" => serve(api, calls),
        "request_ids" => serve(stack::request_ids().service(api), calls),
        "access_log" => serve(stack::access_log().layer(api), calls),
        "panics" => serve(stack::catch_panics().layer(api), calls),
        "request_timeout" => serve(stack::request_timeout(TIMEOUT).service(api), calls),
        "host" => serve(stack::app(api, TIMEOUT), calls),
        "library_request_id" => {
            serve(
                partner_api::request_id::RequestIdLayer::new().layer(api),
                calls,
            );
        }
        "tower_http_request_id" => serve(
            ServiceBuilder::new()
                .map_request(|mut request: Request<Empty<Bytes>>| {
                    partner_api::request_id::remove_unusable(request.headers_mut());
                    request
                })
                .layer(SetRequestIdLayer::x_request_id(GeneratedId))
                .layer(PropagateRequestIdLayer::x_request_id())
                .service(api),
            calls,
        ),
        "tower_http_timeout" => serve(
            ServiceBuilder::new()
                .layer(tower_http::timeout::TimeoutLayer::with_status_code(
                    StatusCode::SERVICE_UNAVAILABLE,
                    TIMEOUT,
                ))
                .service(api),
            calls,
        ),
        other => panic!(
            "no case {other}; the cases: {:?}",
            CASES.map(|(name, _)| name)
        ),
    }
}

/// Calls `service` `calls` times and reads each response's body to its end. Every answer
/// of these services is ready at once, so each future is polled once, as hyper would
/// first poll it; a case whose answer were not ready would be a defect of the bench.
fn serve<S, B>(mut service: S, calls: u32)
where
    S: Service<Request<Empty<Bytes>>, Response = Response<B>>,
    S::Error: Into<BoxError>,
    B: Body<Data = Bytes>,
{
    // A waker that does nothing (`Waker::noop` is newer than the crate's MSRV): nothing
    // here waits.
    struct Noop;
    impl std::task::Wake for Noop {
        fn wake(self: std::sync::Arc<Self>) {}
    }
    let waker = std::task::Waker::from(std::sync::Arc::new(Noop));
    let mut context = Context::from_waker(&waker);
    let authorization = HeaderValue::try_from(format!("Bearer {DEMO_KEY}")).expect("a header");
    for _ in 0..calls {
        let request = Request::get("/v1/me")
            .header(AUTHORIZATION, authorization.clone())
            .body(Empty::new())
            .expect("a request");
        assert!(service.poll_ready(&mut context).is_ready());
        let future = pin!(service.call(request));
        let Poll::Ready(Ok(response)) = future.poll(&mut context) else {
            panic!("the answer was not ready at once, or an error");
        };
        assert_eq!(response.status(), StatusCode::OK);
        // As hyper: frames until the body says it is at its end.
        let mut body = pin!(response.into_body());
        while !body.is_end_stream() {
            let Poll::Ready(Some(frame)) = body.as_mut().poll_frame(&mut context) else {
                break;
            };
            black_box(frame.ok());
        }
    }
}

/// Makes the id of a request that brought none for tower-http's request-id layers: a UUID,
/// as the API would.
#[derive(Clone, Copy)]
struct GeneratedId;

impl MakeRequestId for GeneratedId {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        Some(RequestId::new(partner_api::request_id::generate()))
    }
}
