//! [`ResponseFuture`]: the response future of [`PartnerApi`](super::PartnerApi), ready or
//! waiting for a store, catching a panic while answering.

use super::*;

/// The answer when answering panicked (in a store, say): logged without the payload, which
/// could hold anything, and a JSON 500 instead of a dropped connection.
pub(super) fn handler_panicked() -> Response<ApiBody> {
    tracing::error!("partner API request handler panicked");
    ApiError::Internal.into_response()
}

/// The response future of [`PartnerApi`].
///
/// A panic while answering (in a store, say) becomes a JSON 500 instead of tearing down the
/// connection; the panic is logged without its payload, which could hold anything.
pub struct ResponseFuture {
    pub(super) state: State,
    pub(super) head: bool,
    pub(super) request_id: Option<HeaderValue>,
    /// The headers of the deprecations the request concerns, added to whatever it answers.
    pub(super) notices: Option<Notices>,
}

pub(super) enum State {
    Ready(Option<Response<ApiBody>>),
    Pending {
        future: Pin<Box<dyn Future<Output = Response<ApiBody>> + Send>>,
        /// Where the response is counted when it is done (a ready one was counted already).
        counted_as: Option<(ResponseCounters, Method, Option<Route>)>,
    },
}

impl Future for ResponseFuture {
    type Output = Result<Response<ApiBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let State::Pending { future, counted_as } = &mut this.state {
            let response =
                match std::panic::catch_unwind(AssertUnwindSafe(|| future.as_mut().poll(cx))) {
                    Ok(Poll::Pending) => return Poll::Pending,
                    Ok(Poll::Ready(response)) => response,
                    Err(_panic) => handler_panicked(),
                };
            if let Some((responses, method, route)) = counted_as.take() {
                responses.count(&method, route, response.status());
            }
            // The future is done (or panicked): dropped, so it is never polled again.
            this.state = State::Ready(Some(response));
        }
        let State::Ready(ready) = &mut this.state else {
            unreachable!("a pending state became ready above")
        };
        // Finished where it lies, then moved out once: a response is large.
        let response = ready
            .as_mut()
            .expect("ResponseFuture polled after completion");
        response::set_request_id(response, this.request_id.take());
        if let Some(notices) = this.notices.take() {
            crate::deprecation::add_notices(response.headers_mut(), &notices);
        }
        if this.head {
            response::strip_body(response);
        }
        Poll::Ready(Ok(ready.take().expect("present above")))
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}
