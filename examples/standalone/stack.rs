//! The layers this host puts around the API.

use std::convert::Infallible;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body::Body;
use partner_api::request_id::RequestIdLayer;
use partner_api::{error_response, ApiBody};
use tower::timeout::TimeoutLayer;
use tower::{Service, ServiceBuilder};
use tower_http::BoxError;

use crate::access_log::AccessLogLayer;
use crate::catch_panic::CatchPanicLayer;
use crate::cli::Options;

/// The service this host serves: `service` (the partner API, or anything that answers like
/// it) inside the host's layers, outermost first:
///
/// 1. request ids ([`RequestIdLayer`]): the request's well-formed `x-request-id` or a new
///    UUID, handed to the API (which echoes it and records it in the span) and put on the
///    responses the layers below make themselves;
/// 2. the access log ([`AccessLogLayer`]): a tracing span per request (method, path, and the
///    request and organization ids that the API records) and one INFO line per response
///    with its status and latency;
/// 3. a panic anywhere below becomes the API's JSON 500 ([`CatchPanicLayer`]);
/// 4. a request over `options.request_timeout` becomes the API's JSON 503 (tower's
///    `Timeout`).
pub(crate) fn app<S, B>(
    service: S,
    options: &Options,
) -> impl Service<
    Request<B>,
    Response = Response<impl Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static>,
    // Never an error in fact: every failure is a JSON response by then.
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
        .layer(RequestIdLayer::new())
        .layer(AccessLogLayer)
        .layer(CatchPanicLayer)
        .map_result(json_timeout)
        .layer(TimeoutLayer::new(options.request_timeout))
        .service(service)
}

/// The answer when the request timeout passed: the API's JSON 503. (tower's timeout polls
/// the request first and arms its timer only when the request must wait, so an answer that is
/// ready at once never touches the runtime's timer wheel; tower-http's `TimeoutLayer` arms it
/// for every request, which cost this host about a fifth of its throughput on `/v1/me`.)
fn json_timeout(
    result: Result<Response<ApiBody>, BoxError>,
) -> Result<Response<ApiBody>, BoxError> {
    Ok(result.unwrap_or_else(|err| {
        // `PartnerApi` never fails: the only error is the timeout's.
        tracing::warn!(error = %err, "request timed out");
        error_response(StatusCode::SERVICE_UNAVAILABLE)
    }))
}
