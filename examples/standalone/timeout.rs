//! A request that takes longer than the request timeout becomes the API's JSON 503.
//!
//! tower's `Timeout` makes its timer when the service is called: a clock read, and a
//! `Sleep` carried inside every response future and copied with it through each layer
//! above, though nearly every answer here is ready at once (tower-http's `TimeoutLayer` also
//! arms the timer). This one makes its timer at the first poll that finds the answer not
//! ready, which hyper makes right after the call, so a ready answer costs nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use partner_api::{error_response, ApiBody};
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower::{Layer, Service};

/// Wraps a service in [`RequestTimeout`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestTimeoutLayer {
    timeout: Duration,
}

impl RequestTimeoutLayer {
    pub(crate) fn new(timeout: Duration) -> Self {
        Self { timeout }
    }
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestTimeout {
            inner,
            timeout: self.timeout,
        }
    }
}

/// Answers the API's JSON 503 for a request whose answer is not ready within the timeout
/// (dropping the inner service's future, and so whatever store call it waits for).
#[derive(Clone, Debug)]
pub(crate) struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
}

impl<S, B> Service<Request<B>> for RequestTimeout<S>
where
    S: Service<Request<B>, Response = Response<ApiBody>>,
{
    type Response = Response<ApiBody>;
    type Error = S::Error;
    type Future = RequestTimeoutFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        RequestTimeoutFuture {
            future: self.inner.call(request),
            timeout: self.timeout,
            sleep: None,
        }
    }
}

pin_project! {
    /// The response future of [`RequestTimeout`].
    pub(crate) struct RequestTimeoutFuture<F> {
        #[pin]
        future: F,
        timeout: Duration,
        // Boxed, so a future whose answer is ready never carries a timer's bytes.
        sleep: Option<Pin<Box<Sleep>>>,
    }
}

impl<F, E> Future for RequestTimeoutFuture<F>
where
    F: Future<Output = Result<Response<ApiBody>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(output);
        }
        let timeout = *this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(sleep.as_mut().poll(cx));
        tracing::warn!(timeout = ?timeout, "request timed out");
        Poll::Ready(Ok(error_response(StatusCode::SERVICE_UNAVAILABLE)))
    }
}
