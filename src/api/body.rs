//! [`ApiBody`]: the body of every response the API itself writes.

use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

/// The body of the API's responses: JSON of known length in up to three ready buffers (an
/// envelope around a shared payload, written without copying), or nothing (`HEAD`).
pub struct ApiBody {
    /// The chunks not yet written, in order; written and empty ones are empty.
    chunks: [Bytes; 3],
    /// Their length in all: hyper asks it several times per response.
    remaining: usize,
}

impl ApiBody {
    pub(crate) fn new(data: Bytes) -> Self {
        Self::chunks([data, Bytes::new(), Bytes::new()])
    }

    /// `open`, `payload` and `close`, written in that order.
    pub(crate) fn chunks(chunks: [Bytes; 3]) -> Self {
        let remaining = chunks.iter().map(Bytes::len).sum();
        Self { chunks, remaining }
    }

    pub(crate) fn empty() -> Self {
        Self::new(Bytes::new())
    }

    /// The bytes left to write.
    pub(crate) fn len(&self) -> usize {
        self.remaining
    }
}

/// No bytes, as a layer that makes its own bodiless response (tower-http's `TimeoutLayer`)
/// needs.
impl Default for ApiBody {
    fn default() -> Self {
        Self::empty()
    }
}

impl Body for ApiBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        match this.chunks.iter_mut().find(|chunk| !chunk.is_empty()) {
            Some(chunk) => {
                let chunk = std::mem::take(chunk);
                this.remaining -= chunk.len();
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.len() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len() as u64)
    }
}

impl fmt::Debug for ApiBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiBody").field("len", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn chunks_are_written_in_order_skipping_empty_ones() {
        use http_body_util::BodyExt;
        let body = ApiBody::chunks([
            Bytes::from_static(b"{\"a\":"),
            Bytes::new(),
            Bytes::from_static(b"1}"),
        ]);
        assert_eq!(body.size_hint().exact(), Some(7));
        assert!(!body.is_end_stream());
        let frames = body.collect().await.unwrap().to_bytes();
        assert_eq!(frames.as_ref(), b"{\"a\":1}");
        // What is left shrinks with every frame, down to the end of the stream.
        let mut body = ApiBody::chunks([
            Bytes::new(),
            Bytes::from_static(b"ab"),
            Bytes::from_static(b"c"),
        ]);
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(
            (first.as_ref(), body.size_hint().exact()),
            (&b"ab"[..], Some(1))
        );
        assert!(!body.is_end_stream());
        let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(second.as_ref(), b"c");
        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
        let empty = ApiBody::empty();
        assert!(empty.is_end_stream());
        assert_eq!(empty.size_hint().exact(), Some(0));
    }
}
