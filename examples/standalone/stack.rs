//! The layers this host puts around the API: tower-http's and tower's own, configured for
//! what a request costs. `benches/host_layers.rs` measures each one by itself, through the
//! functions here.

use std::any::Any;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Request, Response, StatusCode};
use http_body::Body;
use http_body_util as body;
use partner_api::request_id::{self, REQUEST_ID_HEADER};
use partner_api::{error_response, ApiBody};
use tower::layer::util::{Identity, Stack};
use tower::timeout::TimeoutLayer;
use tower::util::{Either, MapResultLayer};
use tower::{BoxError, Service, ServiceBuilder};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::propagate_header::PropagateHeaderLayer;
use tower_http::set_header::SetRequestHeaderLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_http::LatencyUnit;
use tracing::{Level, Span};

/// The service this host serves: `service` (the partner API, or anything that answers like
/// it) inside the host's layers, outermost first: [`request_ids`], [`access_log`] (only
/// where its span or its line would be kept: [`access_log_enabled`]), [`catch_panics`] and
/// [`request_timeout`] (of `timeout`).
///
/// Its error type is tower's `BoxError`, but it returns none: the API's is `Infallible`
/// and the time-out's is answered (see [`request_timeout`]).
pub(crate) fn app<S, B>(
    service: S,
    timeout: Duration,
) -> impl Service<
    Request<B>,
    Response = Response<impl Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static>,
    Error = BoxError,
    Future: Send + 'static,
> + Clone
       + Send
       + 'static
where
    S: Service<Request<B>, Response = Response<ApiBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
{
    let inner = ServiceBuilder::new()
        .layer(catch_panics())
        .layer(request_timeout(timeout))
        .service(service);
    // Both ways answer with one body type, `http_body_util::Either`'s: a stack is chosen per
    // connection, a body type once.
    let logged_or_not = if access_log_enabled() {
        Either::Left(
            ServiceBuilder::new()
                .map_response(|response: Response<_>| response.map(body::Either::Left))
                .layer(access_log())
                .service(inner),
        )
    } else {
        Either::Right(
            ServiceBuilder::new()
                .map_response(|response: Response<_>| response.map(body::Either::Right))
                .service(inner),
        )
    };
    ServiceBuilder::new()
        .layer(request_ids())
        .service(logged_or_not)
}

/// The layers of [`request_ids`].
pub(crate) type RequestIds<B> =
    ServiceBuilder<Stack<PropagateHeaderLayer, Stack<SetRequestHeaderLayer<NewId<B>>, Identity>>>;

/// What makes a request's id in [`request_ids`].
pub(crate) type NewId<B> = fn(&Request<B>) -> Option<HeaderValue>;

/// Request ids, from tower-http's header layers: its `SetRequestHeaderLayer` gives a request
/// whose `x-request-id` the API would not keep (none, a malformed one, or more than one) a
/// new UUID in its place ([`new_id_unless_usable`]), and its `PropagateHeaderLayer` puts the
/// request's id on every response, the ones the layers below make themselves (the 500 of a
/// panic, the 503 of a timeout) included. So the API (which echoes the request's id and
/// records it in the span), the log and every response agree on the id.
///
/// Not tower-http's request-id layers, which do the same and also put the id into the
/// request's and the response's extensions, each a map allocated per message for one entry
/// that nothing here reads: about twice the cost (`docs::performance`, "The host's layers").
pub(crate) fn request_ids<B>() -> RequestIds<B> {
    ServiceBuilder::new()
        .layer(SetRequestHeaderLayer::overriding(
            REQUEST_ID_HEADER,
            new_id_unless_usable as NewId<B>,
        ))
        .layer(PropagateHeaderLayer::new(REQUEST_ID_HEADER))
}

/// A new id ([`request_id::generate`]: a UUID, as the API would make) for a request without
/// one the API would keep ([`request_id::usable`]); `None` keeps the request's own.
fn new_id_unless_usable<B>(request: &Request<B>) -> Option<HeaderValue> {
    match request_id::usable(request.headers()) {
        Some(_) => None,
        None => Some(request_id::generate()),
    }
}

/// Whether the access log would keep anything: its span (INFO, this module's target) or its
/// line per response (INFO, target `tower_http::trace::on_response`) enabled by the
/// subscriber. Where neither is (the load harness's `RUST_LOG=warn`), [`app`] leaves the
/// layer out: tower-http's `TraceLayer` reads the clock for every request and body frame
/// whatever its callbacks, about 1,000 instructions a request for nothing. Asked per
/// connection, so it follows the subscriber a process set (the host sets one at start).
pub(crate) fn access_log_enabled() -> bool {
    tracing::span_enabled!(Level::INFO)
        || tracing::event_enabled!(target: "tower_http::trace::on_response", Level::INFO)
}

/// The layer of [`access_log`].
pub(crate) type AccessLog<B> = TraceLayer<
    SharedClassifier<ServerErrorsAsFailures>,
    fn(&Request<B>) -> Span,
    (),
    DefaultOnResponse,
    (),
    (),
    (),
>;

/// The access log, tower-http's `TraceLayer`: a span per request ([`request_span`]) and one
/// INFO line per response with its status and latency in microseconds (target
/// `tower_http::trace::on_response`); nothing when a request starts, per body frame, at a
/// body's end, or as a second line for a 5xx.
pub(crate) fn access_log<B>() -> AccessLog<B> {
    TraceLayer::new_for_http()
        .make_span_with(request_span as fn(&Request<B>) -> Span)
        .on_request(())
        .on_response(
            DefaultOnResponse::new()
                .level(Level::INFO)
                .latency_unit(LatencyUnit::Micros),
        )
        .on_body_chunk(())
        .on_eos(())
        // The line per response already says a 5xx, and the API logs its causes.
        .on_failure(())
}

/// The access log's span: `method` and `path`, and `request_id` and `organization_id` for
/// the API to record. Never a header: the `Authorization` one holds a key.
fn request_span<B>(request: &Request<B>) -> Span {
    tracing::info_span!(
        "request",
        method = %request.method(),
        path = %request.uri().path(),
        request_id = tracing::field::Empty,
        organization_id = tracing::field::Empty,
    )
}

/// The layer of [`catch_panics`].
pub(crate) type CatchPanics =
    CatchPanicLayer<fn(Box<dyn Any + Send + 'static>) -> Response<ApiBody>>;

/// A panic anywhere below, in `call` or in the response future, becomes the API's JSON 500
/// (tower-http's `CatchPanicLayer`), not a dropped connection.
pub(crate) fn catch_panics() -> CatchPanics {
    CatchPanicLayer::custom(panicked as fn(_) -> _)
}

/// The answer to a panic. Its payload could hold anything: it is not logged.
fn panicked(_payload: Box<dyn Any + Send + 'static>) -> Response<ApiBody> {
    tracing::error!("request handler panicked");
    error_response(StatusCode::INTERNAL_SERVER_ERROR)
}

/// The layers of [`request_timeout`].
pub(crate) type RequestTimeout =
    ServiceBuilder<Stack<TimeoutLayer, Stack<MapResultLayer<TimeoutAnswer>, Identity>>>;

/// What [`request_timeout`] makes of its inner result.
pub(crate) type TimeoutAnswer =
    fn(Result<Response<ApiBody>, BoxError>) -> Result<Response<ApiBody>, BoxError>;

/// A request over `timeout` becomes the API's JSON 503: tower's `TimeoutLayer`, whose
/// elapsed time is answered by a `map_result`. Tower's polls the answer before its timer, so
/// an answer ready at once never arms one (tower-http's arms a timer for every request:
/// `docs::performance` measures both).
pub(crate) fn request_timeout(timeout: Duration) -> RequestTimeout {
    ServiceBuilder::new()
        .map_result(timed_out as TimeoutAnswer)
        .layer(TimeoutLayer::new(timeout))
}

/// The answer when the timeout elapsed: the API's JSON 503. Any other error goes up as it
/// is; the API's error is `Infallible`, so in this host there is none. The stack's error type
/// is `BoxError` only because tower's `MapResult` requires `From` of its inner error (for
/// `poll_ready`), which `Infallible` has not for `BoxError`: that no error goes up is this
/// function's doing, not the type's.
fn timed_out(result: Result<Response<ApiBody>, BoxError>) -> Result<Response<ApiBody>, BoxError> {
    match result {
        Err(error) if error.is::<tower::timeout::error::Elapsed>() => {
            tracing::warn!("request timed out");
            Ok(error_response(StatusCode::SERVICE_UNAVAILABLE))
        }
        other => other,
    }
}
