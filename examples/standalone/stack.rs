//! The layers this host puts around the API: tower-http's and tower's own, configured for
//! what a request costs. `benches/host_layers.rs` measures each one by itself, through the
//! functions here.

use std::any::Any;
use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use partner_api::{error_response, request_id, ApiBody};
use tower::layer::util::{Identity, Stack};
use tower::timeout::TimeoutLayer;
use tower::util::{MapRequestLayer, MapResultLayer};
use tower::{BoxError, Service, ServiceBuilder};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::request_id::{
    MakeRequestId, PropagateRequestIdLayer, RequestId, SetRequestIdLayer,
};
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_http::LatencyUnit;
use tracing::{Level, Span};

/// The service this host serves: `service` (the partner API, or anything that answers like
/// it) inside the host's layers, outermost first: [`request_ids`], [`access_log`],
/// [`catch_panics`] and [`request_timeout`] (of `timeout`).
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
    ServiceBuilder::new()
        .layer(request_ids())
        .layer(access_log())
        .layer(catch_panics())
        .layer(request_timeout(timeout))
        .service(service)
}

/// The layers of [`request_ids`].
pub(crate) type RequestIds<B> = ServiceBuilder<
    Stack<
        PropagateRequestIdLayer,
        Stack<
            SetRequestIdLayer<GeneratedId>,
            Stack<MapRequestLayer<fn(Request<B>) -> Request<B>>, Identity>,
        >,
    >,
>;

/// Request ids: an `x-request-id` the API would not keep (malformed, or more than one) is
/// dropped ([`request_id::remove_unusable`]), then tower-http's `SetRequestIdLayer` gives a
/// request without one a new UUID ([`request_id::generate`]) and its
/// `PropagateRequestIdLayer` puts the id on the responses the layers below make themselves.
/// So the API (which echoes the request's id and records it in the span), the log and every
/// response agree on the id.
pub(crate) fn request_ids<B>() -> RequestIds<B> {
    ServiceBuilder::new()
        .map_request(without_unusable_id as fn(Request<B>) -> Request<B>)
        .layer(SetRequestIdLayer::x_request_id(GeneratedId))
        .layer(PropagateRequestIdLayer::x_request_id())
}

fn without_unusable_id<B>(mut request: Request<B>) -> Request<B> {
    request_id::remove_unusable(request.headers_mut());
    request
}

/// Makes the id of a request that brought none: a UUID, as the API would.
#[derive(Clone, Copy, Debug)]
pub(crate) struct GeneratedId;

impl MakeRequestId for GeneratedId {
    fn make_request_id<B>(&mut self, _request: &Request<B>) -> Option<RequestId> {
        Some(RequestId::new(request_id::generate()))
    }
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
