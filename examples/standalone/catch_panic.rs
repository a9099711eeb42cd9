//! A panic below becomes the API's JSON 500.
//!
//! tower-http's `CatchPanicLayer` does the same job, but it boxes every response body
//! (`UnsyncBoxBody`) so that its own 500 and the inner service's bodies have one type: an
//! allocation per request. Here the service below answers with the API's own body, of which
//! the 500 is one, so nothing is boxed.

use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use partner_api::{error_response, ApiBody};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// Wraps a service in [`CatchPanic`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CatchPanicLayer;

impl<S> Layer<S> for CatchPanicLayer {
    type Service = CatchPanic<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CatchPanic { inner }
    }
}

/// Answers a panic in the inner service's `call` or response future with the API's JSON 500
/// (a panic while the body is written ends the connection, as hyper does).
#[derive(Clone, Debug)]
pub(crate) struct CatchPanic<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for CatchPanic<S>
where
    S: Service<Request<B>, Response = Response<ApiBody>>,
{
    type Response = Response<ApiBody>;
    type Error = S::Error;
    type Future = CatchPanicFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        CatchPanicFuture {
            future: catch_unwind(AssertUnwindSafe(|| self.inner.call(request))).ok(),
        }
    }
}

pin_project! {
    /// The response future of [`CatchPanic`]: the inner service's, or none when its `call`
    /// panicked.
    pub(crate) struct CatchPanicFuture<F> {
        #[pin]
        future: Option<F>,
    }
}

impl<F, E> Future for CatchPanicFuture<F>
where
    F: Future<Output = Result<Response<ApiBody>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().future.as_pin_mut() {
            Some(future) => catch_unwind(AssertUnwindSafe(|| future.poll(cx)))
                .unwrap_or_else(|_panic| Poll::Ready(Ok(panicked()))),
            None => Poll::Ready(Ok(panicked())),
        }
    }
}

/// The answer to a panic. Its payload could hold anything: it is not logged.
fn panicked() -> Response<ApiBody> {
    tracing::error!("request handler panicked");
    error_response(StatusCode::INTERNAL_SERVER_ERROR)
}
