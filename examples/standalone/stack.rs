//! The layers this host puts around the API.

use std::convert::Infallible;

use http::{Request, Response};
use http_body::Body;
use partner_api::request_id::RequestIdLayer;
use partner_api::ApiBody;
use tower::{Service, ServiceBuilder};

use crate::access_log::AccessLogLayer;
use crate::catch_panic::CatchPanicLayer;
use crate::cli::Options;
use crate::timeout::RequestTimeoutLayer;

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
/// 4. a request over `options.request_timeout` becomes the API's JSON 503
///    ([`RequestTimeoutLayer`]).
///
/// Every layer answers with the API's own body, so no body is boxed, and none reads the
/// clock or allocates for an answer that is ready at once (see `docs::performance`).
pub(crate) fn app<S, B>(
    service: S,
    options: &Options,
) -> impl Service<Request<B>, Response = Response<ApiBody>, Error = Infallible, Future: Send + 'static>
       + Clone
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
        .layer(RequestTimeoutLayer::new(options.request_timeout))
        .service(service)
}
