//! [`ApiBody`]: the body of every response the API itself writes.

use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The body of the API's responses: one buffer of JSON, known length, or nothing (`HEAD`).
pub struct ApiBody {
    data: Option<Bytes>,
}

impl ApiBody {
    pub(crate) fn new(data: Bytes) -> Self {
        Self {
            data: (!data.is_empty()).then_some(data),
        }
    }

    pub(crate) fn empty() -> Self {
        Self { data: None }
    }
}

impl Body for ApiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.data.take().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.data.as_ref().map_or(0, |data| data.len() as u64))
    }
}

impl fmt::Debug for ApiBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiBody")
            .field("len", &self.data.as_ref().map_or(0, Bytes::len))
            .finish()
    }
}
