//! [`PartnerApiLayer`]: mounts the API under its prefix in front of a host's own service.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use crate::body::ApiBody;
use crate::service::{self, PartnerApi};

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
    /// A layer that mounts `api` under [`PartnerApi::prefix`].
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
#[derive(Clone, Debug)]
pub struct PartnerApiMount<S> {
    inner: S,
    api: PartnerApi,
}

impl<S> PartnerApiMount<S> {
    /// Mounts `api` in front of `inner`.
    pub fn new(inner: S, api: PartnerApi) -> Self {
        Self { inner, api }
    }

    /// A [`PartnerApiLayer`] that mounts `api`.
    pub fn layer(api: PartnerApi) -> PartnerApiLayer {
        PartnerApiLayer::new(api)
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
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
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = Response<ResponseBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // The API is always ready; readiness is the inner service's.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let kind = if self.api.is_under_prefix(request.uri().path()) {
            Kind::Api {
                future: Service::call(&mut self.api, request),
            }
        } else {
            Kind::Inner {
                future: self.inner.call(request),
            }
        };
        ResponseFuture { kind }
    }
}

pin_project! {
    /// The response future of [`PartnerApiMount`].
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        Api { future: service::ResponseFuture },
        Inner { #[pin] future: F },
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<ResponseBody<B>>, E>;

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
