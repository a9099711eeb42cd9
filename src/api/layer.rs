//! [`PartnerApiLayer`]: mounts the API under its prefix in front of a host's own service.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::util::Oneshot;
use tower::{Layer, Service, ServiceExt};

use crate::api::body::ApiBody;
use crate::api::service::{self, PartnerApi};

/// A tower [`Layer`] that answers requests under the API's prefix with [`PartnerApi`] and
/// hands every other request to the wrapped service, untouched.
///
/// ```
/// use partner_api::{MemoryStore, PartnerApi, PartnerApiLayer};
/// use tower::ServiceBuilder;
///
/// # let host_service = tower::service_fn(|_: http::Request<()>| async {
/// #     Ok::<_, std::convert::Infallible>(http::Response::new(String::new()))
/// # });
/// let api = PartnerApi::from_store(MemoryStore::new());
/// let service = ServiceBuilder::new()
///     .layer(PartnerApiLayer::new(api))
///     .service(host_service);
/// ```
#[derive(Clone, Debug)]
pub struct PartnerApiLayer {
    api: PartnerApi,
}

impl PartnerApiLayer {
    /// Creates a layer that mounts `api` under [`PartnerApi::prefix`].
    pub fn new(api: PartnerApi) -> Self {
        Self { api }
    }
}

impl<S> Layer<S> for PartnerApiLayer {
    type Service = PartnerApiMount<S>;

    fn layer(&self, inner: S) -> Self::Service {
        PartnerApiMount::new(inner, self.api.clone())
    }
}

/// The service of [`PartnerApiLayer`]: the API under its prefix, `S` everywhere else.
///
/// It is always ready, as axum's router is: a request for the API never waits on the inner
/// service's readiness (a host's `ConcurrencyLimit` or `Buffer`), and one for the inner
/// service is sent to a clone of it that is driven to readiness first
/// ([`ServiceExt::oneshot`]), so the inner service's backpressure holds for its own requests
/// only.
#[derive(Clone, Debug)]
pub struct PartnerApiMount<S> {
    inner: S,
    api: PartnerApi,
}

impl<S> PartnerApiMount<S> {
    /// Creates the service that mounts `api` in front of `inner`.
    pub fn new(inner: S, api: PartnerApi) -> Self {
        Self { inner, api }
    }

    /// Returns a [`PartnerApiLayer`] that mounts `api`.
    pub fn layer(api: PartnerApi) -> PartnerApiLayer {
        PartnerApiLayer::new(api)
    }

    /// Returns the wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Returns the wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Takes the wrapped service out.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for PartnerApiMount<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, Request<ReqBody>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The API is always ready; the inner service's readiness is awaited per request, in
        // its response future.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let kind = if self.api.is_under_prefix(request.uri().path()) {
            Kind::Api {
                future: Service::call(&mut self.api, request),
            }
        } else {
            Kind::Inner {
                future: self.inner.clone().oneshot(request),
            }
        };
        ResponseFuture { kind }
    }
}

pin_project! {
    /// The response future of [`PartnerApiMount`]: the API's answer, or the inner service's
    /// once it was ready and called.
    pub struct ResponseFuture<S, R>
    where
        S: Service<R>,
    {
        #[pin]
        kind: Kind<S, R>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<S, R>
    where
        S: Service<R>,
    {
        Api { future: service::ResponseFuture },
        Inner { #[pin] future: Oneshot<S, R> },
    }
}

impl<S, R, B> Future for ResponseFuture<S, R>
where
    S: Service<R, Response = Response<B>>,
{
    type Output = Result<Response<ResponseBody<B>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Api { future } => {
                let Ok(response) = ready!(Pin::new(future).poll(cx));
                Poll::Ready(Ok(response.map(ResponseBody::api)))
            }
            KindProj::Inner { future } => {
                let response = ready!(future.poll(cx))?;
                Poll::Ready(Ok(response.map(ResponseBody::inner)))
            }
        }
    }
}

pin_project! {
    /// The body of [`PartnerApiMount`]'s responses: the API's own, or the inner service's as
    /// it was.
    pub struct ResponseBody<B> {
        #[pin]
        kind: BodyKind<B>,
    }
}

pin_project! {
    #[project = BodyKindProj]
    enum BodyKind<B> {
        Api { #[pin] body: ApiBody },
        Inner { #[pin] body: B },
    }
}

impl<B> ResponseBody<B> {
    fn api(body: ApiBody) -> Self {
        Self {
            kind: BodyKind::Api { body },
        }
    }

    fn inner(body: B) -> Self {
        Self {
            kind: BodyKind::Inner { body },
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.project().kind.project() {
            BodyKindProj::Api { body } => match ready!(body.poll_frame(cx)) {
                Some(Ok(frame)) => Poll::Ready(Some(Ok(frame.map_data(B::Data::from)))),
                Some(Err(never)) => match never {},
                None => Poll::Ready(None),
            },
            BodyKindProj::Inner { body } => body.poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            BodyKind::Api { body } => body.is_end_stream(),
            BodyKind::Inner { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            BodyKind::Api { body } => body.size_hint(),
            BodyKind::Inner { body } => body.size_hint(),
        }
    }
}

impl<B> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.kind {
            BodyKind::Api { .. } => "ResponseBody::Api",
            BodyKind::Inner { .. } => "ResponseBody::Inner",
        })
    }
}
