//! The access log: a span per request and one INFO line per response, at no cost when INFO
//! is off.
//!
//! tower-http's `TraceLayer` did the same job here, but it reads the clock three times per
//! request, clones the span into a wrapper of the response body and classifies every
//! response even when nothing is logged: about 1,100 instructions per request of this host
//! (see `docs::performance`). This layer reads the clock only when the line will be written
//! and leaves the body alone.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};
use tracing::Span;

/// Wraps a service in [`AccessLog`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct AccessLogLayer;

impl<S> Layer<S> for AccessLogLayer {
    type Service = AccessLog<S>;

    fn layer(&self, inner: S) -> Self::Service {
        AccessLog { inner }
    }
}

/// A span `request` per request (`method`, `path`, and `request_id` and `organization_id`
/// for the API to record), entered whenever the inner service runs, and one INFO line per
/// response with its `status` and `latency`. Nothing per body frame, and never a header.
#[derive(Clone, Debug)]
pub(crate) struct AccessLog<S> {
    inner: S,
}

impl<S, B, RB> Service<Request<B>> for AccessLog<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = AccessLogFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let span = tracing::info_span!(
            "request",
            method = %request.method(),
            path = %request.uri().path(),
            request_id = tracing::field::Empty,
            organization_id = tracing::field::Empty,
        );
        // A disabled span (INFO off) means no line either: no clock to read.
        let started = (!span.is_disabled()).then(Instant::now);
        let future = {
            let _entered = span.enter();
            self.inner.call(request)
        };
        AccessLogFuture {
            future,
            span,
            started,
        }
    }
}

pin_project! {
    /// The response future of [`AccessLog`]: writes the line when the response is ready.
    pub(crate) struct AccessLogFuture<F> {
        #[pin]
        future: F,
        span: Span,
        started: Option<Instant>,
    }
}

impl<F, RB, E> Future for AccessLogFuture<F>
where
    F: Future<Output = Result<Response<RB>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let _entered = this.span.enter();
        let output = ready!(this.future.poll(cx));
        if let (Some(started), Ok(response)) = (this.started.take(), &output) {
            tracing::info!(
                latency = %Micros(started.elapsed()),
                status = response.status().as_u16(),
                "finished processing request"
            );
        }
        Poll::Ready(output)
    }
}

/// A latency as the log shows it: `289 μs`.
struct Micros(Duration);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} μs", self.0.as_micros())
    }
}
