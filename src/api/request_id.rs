//! Request ids: every API response carries `x-request-id`, the one the request brought when it
//! is well-formed (a host's or a proxy's), a new UUID otherwise.
//!
//! [`RequestIdLayer`] gives a host's other routes and its own responses (a timeout, a caught
//! panic) the same treatment: put it outermost and every response carries the id the API
//! and the host's logs agree on.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use http::header::{HeaderMap, HeaderName, HeaderValue};
use http::{Request, Response};
use pin_project_lite::pin_project;
use tower::{Layer, Service};

/// The header that carries the id, in both directions.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id taken from a request.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The id of a request: the request's own `x-request-id` when there is exactly one and it is
/// 1 to [`MAX_REQUEST_ID_LEN`] bytes of ASCII letters, digits and `-_.:+/=@`; else a new
/// random (v4) UUID. The character set keeps ids safe to log and to quote.
pub(crate) fn request_id(headers: &HeaderMap) -> HeaderValue {
    usable(headers).cloned().unwrap_or_else(generate)
}

/// The request's own id, when `headers` hold exactly one `x-request-id` and it is
/// well-formed ([`is_well_formed`]): the id the API answers with. `None`: the API answers
/// with a new one. A host that sets ids itself replaces the id of a request where this is
/// `None` with one of [`generate`] (tower-http's `SetRequestHeaderLayer::overriding`, with a
/// function that returns `None` where this is `Some`), so its logs and the API agree on
/// every id.
///
/// ```
/// use http::HeaderMap;
/// use partner_api::request_id::{usable, REQUEST_ID_HEADER};
///
/// let mut headers = HeaderMap::new();
/// assert_eq!(usable(&headers), None);
/// headers.insert(REQUEST_ID_HEADER, "poll-1".parse().unwrap());
/// assert_eq!(usable(&headers).unwrap(), "poll-1");
/// headers.append(REQUEST_ID_HEADER, "poll-2".parse().unwrap());
/// assert_eq!(usable(&headers), None);
/// ```
pub fn usable(headers: &HeaderMap) -> Option<&HeaderValue> {
    let mut given = headers
        .iter()
        .filter(|(name, _)| is_request_id(name))
        .map(|(_, value)| value);
    match (given.next(), given.next()) {
        (Some(value), None) if is_well_formed(value.as_bytes()) => Some(value),
        _ => None,
    }
}

/// Removes every `x-request-id` of `headers` unless there is exactly one and it is
/// well-formed ([`is_well_formed`]): what the API would replace, gone before a host's own
/// id layer looks. tower-http's `SetRequestIdLayer` keeps any id the request brought and
/// makes one only where there is none, so a host that runs this first (a `map_request`)
/// and has that layer make ids with [`generate`] logs the same id the API answers with,
/// for every request. (A host that sets the header itself asks [`usable`] instead.)
///
/// ```
/// use http::HeaderMap;
/// use partner_api::request_id::{remove_unusable, REQUEST_ID_HEADER};
///
/// let mut headers = HeaderMap::new();
/// headers.insert(REQUEST_ID_HEADER, "two words".parse().unwrap());
/// remove_unusable(&mut headers);
/// assert!(headers.is_empty());
///
/// headers.insert(REQUEST_ID_HEADER, "poll-1".parse().unwrap());
/// remove_unusable(&mut headers);
/// assert_eq!(headers[REQUEST_ID_HEADER], "poll-1");
/// ```
pub fn remove_unusable(headers: &mut HeaderMap) {
    let any = headers.iter().any(|(name, _)| is_request_id(name));
    if any && usable(headers).is_none() {
        headers.remove(REQUEST_ID_HEADER);
    }
}

/// Whether `name` is [`REQUEST_ID_HEADER`]. The id is found by walking a message's few
/// headers with this, not by a lookup: the name is not a standard one, so a lookup hashes it
/// byte by byte, which costs more than comparing a message's names (most of them standard
/// ones, told apart from it at once).
pub(crate) fn is_request_id(name: &HeaderName) -> bool {
    *name == REQUEST_ID_HEADER
}

/// Returns whether `id` may be taken from a request as its id: 1 to [`MAX_REQUEST_ID_LEN`] bytes of
/// ASCII letters, digits and `-_.:+/=@`. A host that sets ids itself (tower-http's
/// `SetRequestIdLayer`) can drop others first, so its logs and the API agree on every id.
///
/// ```
/// use partner_api::request_id::is_well_formed;
/// assert!(is_well_formed(b"4f1c-9a:retry.2"));
/// assert!(!is_well_formed(b"two words"));
/// ```
pub fn is_well_formed(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len())
        && id.iter().fold(true, |ok, &b| ok & ID_BYTES[usize::from(b)])
}

/// Which bytes a request id may hold, as a table: one load per byte, no branch.
const ID_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        let b = byte as u8;
        table[byte] = b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b':' | b'+' | b'/' | b'=' | b'@');
        byte += 1;
    }
    table
};

/// A new request id: a random (v4) UUID in lower-case hex.
///
/// Each thread writes 64 ids into one buffer at a time and hands out slices
/// of it: an id is then a reference count on a buffer the thread owns, not an allocation of
/// its own (an allocation and its free were about a third of an id's cost). A batch is freed
/// once its last id is dropped.
pub fn generate() -> HeaderValue {
    const LENGTH: usize = uuid::fmt::Hyphenated::LENGTH;
    thread_local! {
        // The batch, and how many of its ids were handed out.
        static BATCH: RefCell<(bytes::Bytes, usize)> =
            const { RefCell::new((bytes::Bytes::new(), IDS_PER_BATCH)) };
    }
    let id = BATCH.with_borrow_mut(|(batch, used)| {
        if *used == IDS_PER_BATCH {
            // The batch's random bits from one call: a call per id cost more than the bits.
            let mut random = [[0; 16]; IDS_PER_BATCH];
            rand::RngCore::fill_bytes(&mut rand::rng(), random.as_flattened_mut());
            let mut text = vec![0; LENGTH * IDS_PER_BATCH];
            for (slot, bytes) in text.chunks_exact_mut(LENGTH).zip(random) {
                let uuid = uuid::Builder::from_random_bytes(bytes).into_uuid();
                uuid.hyphenated().encode_lower(slot);
            }
            *batch = bytes::Bytes::from(text);
            *used = 0;
        }
        let start = *used * LENGTH;
        *used += 1;
        batch.slice(start..start + LENGTH)
    });
    HeaderValue::from_maybe_shared(id).expect("a UUID is a valid header value")
}

/// How many request ids a thread writes at a time ([`generate`]).
const IDS_PER_BATCH: usize = 64;

/// A tower [`Layer`] that gives every request a well-formed `x-request-id` (its own when it
/// has one, else a new UUID) and puts that id on every response that lacks one.
///
/// tower-http's `SetRequestIdLayer` and `PropagateRequestIdLayer` do the same job but store
/// the id in the request's and the response's extensions too (a map allocated per request);
/// this layer touches only the header, so with the API behind it a request pays for at most
/// the id it generates.
///
/// ```
/// use partner_api::request_id::RequestIdLayer;
/// use partner_api::{MemoryStore, PartnerApi};
/// use tower::ServiceBuilder;
///
/// let service = ServiceBuilder::new()
///     .layer(RequestIdLayer::new())
///     .service(PartnerApi::from_store(MemoryStore::new()));
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct RequestIdLayer;

impl RequestIdLayer {
    /// Creates the layer.
    pub fn new() -> Self {
        Self
    }
}

impl<S> Layer<S> for RequestIdLayer {
    type Service = RequestId<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestId::new(inner)
    }
}

/// The service of [`RequestIdLayer`].
#[derive(Clone, Debug)]
pub struct RequestId<S> {
    inner: S,
}

impl<S> RequestId<S> {
    /// Creates the service: `inner`, with request ids.
    pub fn new(inner: S) -> Self {
        Self { inner }
    }

    /// Returns a [`RequestIdLayer`].
    pub fn layer() -> RequestIdLayer {
        RequestIdLayer
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

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RequestId<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<ReqBody>) -> Self::Future {
        let id = match usable(request.headers()) {
            Some(id) => id.clone(),
            None => {
                // Replaces every malformed or repeated id the request had.
                let id = generate();
                request.headers_mut().insert(REQUEST_ID_HEADER, id.clone());
                id
            }
        };
        ResponseFuture {
            future: self.inner.call(request),
            id: Some(id),
        }
    }
}

pin_project! {
    /// The response future of [`RequestId`].
    pub struct ResponseFuture<F> {
        #[pin]
        future: F,
        id: Option<HeaderValue>,
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.future.poll(cx))?;
        if let Some(id) = this.id.take() {
            let headers = response.headers_mut();
            if !headers.iter().any(|(name, _)| is_request_id(name)) {
                headers.insert(REQUEST_ID_HEADER, id);
            }
        }
        Poll::Ready(Ok(response))
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_ids(ids: &[&[u8]]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for id in ids {
            headers.append(REQUEST_ID_HEADER, HeaderValue::from_bytes(id).unwrap());
        }
        headers
    }

    fn is_uuid_v4(id: &HeaderValue) -> bool {
        uuid::Uuid::parse_str(id.to_str().unwrap()).is_ok_and(|id| id.get_version_num() == 4)
    }

    #[test]
    fn generated_ids_are_distinct_v4_uuids_across_batches() {
        let ids: Vec<HeaderValue> = (0..3 * IDS_PER_BATCH + 5).map(|_| generate()).collect();
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        for id in &ids {
            let uuid = uuid::Uuid::parse_str(id.to_str().unwrap()).unwrap();
            assert_eq!(uuid.get_version_num(), 4);
            assert_eq!(uuid.get_variant(), uuid::Variant::RFC4122);
            assert_eq!(id.to_str().unwrap(), uuid.hyphenated().to_string());
        }
    }

    #[test]
    fn remove_unusable_leaves_exactly_the_ids_the_api_would_keep() {
        let cases: [(&[&[u8]], bool); 6] = [
            (&[], false),
            (&[b"ok-1"], true),
            (&[b""], false),
            (&[b"has space"], false),
            (&[b"one", b"two"], false),
            (&[&[b'a'; 129]], false),
        ];
        for (ids, kept) in cases {
            let mut headers = with_ids(ids);
            headers.insert(http::header::ACCEPT, HeaderValue::from_static("*/*"));
            remove_unusable(&mut headers);
            let left: Vec<_> = headers.get_all(REQUEST_ID_HEADER).iter().collect();
            assert_eq!(left.len(), usize::from(kept), "{ids:?}");
            assert_eq!(headers.len(), 1 + usize::from(kept), "other headers stay");
            if kept {
                assert_eq!(request_id(&headers).as_bytes(), ids[0]);
            }
        }
    }

    #[test]
    fn a_well_formed_id_is_kept() {
        for id in [
            &b"abc-123"[..],
            b"Root=1-5f84c7a5:req/7+x@edge_1.a",
            &[b'a'; 128],
        ] {
            assert_eq!(request_id(&with_ids(&[id])).as_bytes(), id);
        }
    }

    #[test]
    fn a_missing_repeated_or_malformed_id_is_replaced_by_a_fresh_uuid() {
        let cases: [&[&[u8]]; 6] = [
            &[],
            &[b""],
            &[b"has space"],
            &[b"quote\"d"],
            &[&[b'a'; 129]],
            &[b"one", b"two"],
        ];
        for ids in cases {
            let id = request_id(&with_ids(ids));
            assert!(is_uuid_v4(&id), "{ids:?} gave {id:?}");
        }
        assert_ne!(request_id(&HeaderMap::new()), request_id(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn the_layer_hands_one_id_to_the_service_and_to_its_response() {
        use tower::ServiceExt;
        // A service that reports the id it saw, and answers without one.
        let inner = tower::service_fn(|request: Request<()>| async move {
            let seen = request.headers()[REQUEST_ID_HEADER].clone();
            let mut response = Response::new(());
            response.extensions_mut().insert(seen);
            Ok::<_, std::convert::Infallible>(response)
        });
        let service = RequestIdLayer::new().layer(inner);
        for given in [None, Some("given-1"), Some("bad id")] {
            let mut request = Request::new(());
            if let Some(id) = given {
                request
                    .headers_mut()
                    .insert(REQUEST_ID_HEADER, HeaderValue::from_static(id));
            }
            let response = service.clone().oneshot(request).await.unwrap();
            let seen = response.extensions().get::<HeaderValue>().unwrap();
            assert_eq!(&response.headers()[REQUEST_ID_HEADER], seen);
            match given {
                Some("given-1") => assert_eq!(seen, "given-1"),
                _ => assert!(is_uuid_v4(seen), "{given:?} gave {seen:?}"),
            }
        }
        // A response that has an id keeps it.
        let answered = tower::service_fn(|_: Request<()>| async {
            let mut response = Response::new(());
            response
                .headers_mut()
                .insert(REQUEST_ID_HEADER, HeaderValue::from_static("own"));
            Ok::<_, std::convert::Infallible>(response)
        });
        let response = RequestIdLayer::new()
            .layer(answered)
            .oneshot(Request::new(()))
            .await
            .unwrap();
        assert_eq!(response.headers()[REQUEST_ID_HEADER], "own");
    }
}
