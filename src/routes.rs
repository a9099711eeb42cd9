//! The endpoints of spec section 4, in one place: which paths exist, which methods they take,
//! and what each answers once the key is known.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use pin_project_lite::pin_project;

use crate::auth::AuthFailure;
use crate::body::ApiBody;
use crate::key::KeyDigest;
use crate::model::OrderPage;
use crate::response::{self, ApiError, ME_CLOSE, ME_OPEN, ORDERS_CLOSE, ORDERS_OPEN};
use crate::service::Shared;
use crate::store::{ErrorChain, Principal, StoreError, StoreErrorKind};

/// The most orders one response holds (spec 4.2 rule 1, section 8).
pub const MAX_ORDERS: usize = 100;

/// An endpoint under the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /me` (spec 4.1).
    Me,
    /// `GET /orders` (spec 4.2).
    Orders,
    /// `GET /openapi.json`: the OpenAPI description, served without a key.
    OpenApi,
}

impl Route {
    /// The endpoint at `path`, the part of the request path after the prefix. Matching is
    /// exact: no decoding, no dot segments, no trailing slash, so one resource has one URL.
    pub(crate) fn at(path: &str) -> Option<Self> {
        match path {
            "/me" => Some(Self::Me),
            "/orders" => Some(Self::Orders),
            "/openapi.json" => Some(Self::OpenApi),
            _ => None,
        }
    }

    /// Whether the endpoint needs an API key.
    pub(crate) fn needs_key(self) -> bool {
        self != Self::OpenApi
    }

    /// Whether the endpoint answers `method`; all of them are read-only.
    pub(crate) fn allows(self, method: &Method) -> bool {
        method == Method::GET || method == Method::HEAD
    }
}

/// The answer to a request with a well-formed key: ready, or still waiting for a store.
pub(crate) enum Answer {
    /// Every store involved answered at once.
    Ready(Response<ApiBody>),
    /// A store must be waited for.
    Wait(Pin<Box<dyn Future<Output = Response<ApiBody>> + Send>>),
}

/// Answers a request for `route` with the key whose digest is `digest`. Stores that have the
/// answer at hand (`lookup_now`, `newest_orders_now`) are answered without a future or a
/// timer; the others through [`respond`], under the store timeout.
pub(crate) fn answer(shared: &Arc<Shared>, route: Route, digest: KeyDigest) -> Answer {
    let Some(found) = shared.keys.lookup_now(&digest) else {
        return Answer::Wait(Box::pin(respond(shared.clone(), route, digest)));
    };
    let principal = match found {
        Ok(Some(principal)) => principal,
        Ok(None) => return Answer::Ready(unknown_key(shared)),
        Err(err) => return Answer::Ready(store_failed(err)),
    };
    let served = match route {
        Route::Orders => {
            let organization_id = &principal.organization.id;
            match shared.orders.newest_orders_now(organization_id, MAX_ORDERS) {
                Some(page) => Served::Orders(page),
                None => return Answer::Wait(Box::pin(respond_orders(shared.clone(), principal))),
            }
        }
        Route::Me => Served::Me,
        Route::OpenApi => Served::OpenApi,
    };
    Answer::Ready(authorized(shared, &principal, served).unwrap_or_else(store_failed))
}

/// [`answer`] for stores that must be waited for: the key, then what the route serves.
async fn respond(shared: Arc<Shared>, route: Route, digest: KeyDigest) -> Response<ApiBody> {
    within_store_timeout(&shared, async {
        let Some(principal) = shared.keys.lookup(&digest).await? else {
            return Ok(unknown_key(&shared));
        };
        let served = match route {
            Route::Orders => Served::Orders(
                shared
                    .orders
                    .newest_orders(&principal.organization.id, MAX_ORDERS)
                    .await,
            ),
            Route::Me => Served::Me,
            Route::OpenApi => Served::OpenApi,
        };
        authorized(&shared, &principal, served)
    })
    .await
}

/// [`answer`] for an order store that must be waited for, once the key is known.
async fn respond_orders(shared: Arc<Shared>, principal: Principal) -> Response<ApiBody> {
    within_store_timeout(&shared, async {
        let page = shared
            .orders
            .newest_orders(&principal.organization.id, MAX_ORDERS)
            .await;
        authorized(&shared, &principal, Served::Orders(page))
    })
    .await
}

/// `work` under the store timeout; a failure becomes its error response.
async fn within_store_timeout(
    shared: &Shared,
    work: impl Future<Output = Result<Response<ApiBody>, StoreError>>,
) -> Response<ApiBody> {
    let result = match shared.store_timeout {
        Some(timeout) => Deadline::new(work, timeout).await.unwrap_or_else(|()| {
            Err(StoreError::unavailable(format!(
                "no answer from the store within {timeout:?}"
            )))
        }),
        None => work.await,
    };
    result.unwrap_or_else(store_failed)
}

/// The 401 for a well-formed key that no store knows, or that was revoked.
fn unknown_key(shared: &Shared) -> Response<ApiBody> {
    let failure = AuthFailure::UnknownKey;
    response::unauthorized(failure, shared.challenges.for_failure(failure))
}

/// The answer to a store failure; its detail goes to the log only.
pub(crate) fn store_failed(err: StoreError) -> Response<ApiBody> {
    tracing::error!(
        kind = ?err.kind(),
        error = %ErrorChain(&err),
        "partner API store failed"
    );
    match err.kind() {
        StoreErrorKind::Unavailable => ApiError::Unavailable.into_response(),
        _ => ApiError::Internal.into_response(),
    }
}

/// What an authenticated route serves, with the order store's answer for `GET /orders`.
enum Served {
    Me,
    Orders(Result<OrderPage, StoreError>),
    OpenApi,
}

/// The 200 for `principal` of what is `served`.
fn authorized(
    shared: &Shared,
    principal: &Principal,
    served: Served,
) -> Result<Response<ApiBody>, StoreError> {
    // The host's request span may declare this field (see the crate docs on logging).
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record("organization_id", principal.organization.id.as_str());
    }
    let body = match served {
        Served::Orders(page) => orders_body(&page?),
        Served::Me => ApiBody::new(me(principal)?),
        // Served before any key is looked at (`Route::needs_key`); the same answer here.
        Served::OpenApi => return Ok(openapi(shared)),
    };
    Ok(response::json_body(StatusCode::OK, body))
}

/// The `GET /openapi.json` response: the bare document, which may be cached.
pub(crate) fn openapi(shared: &Shared) -> Response<ApiBody> {
    let mut response = response::json(StatusCode::OK, shared.openapi.clone());
    response.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("public, max-age=300"),
    );
    response
}

fn me(principal: &Principal) -> Result<Bytes, StoreError> {
    let organization = &principal.organization;
    // Exact when nothing needs escaping, so `Bytes::from` takes the buffer without allocating.
    let mut body = Vec::with_capacity(
        ME_OPEN.len()
            + r#"{"id":"","name":""}"#.len()
            + organization.id.len()
            + organization.name.len()
            + ME_CLOSE.len(),
    );
    body.extend_from_slice(ME_OPEN);
    body.extend_from_slice(br#"{"id":"#);
    write_json_string(&mut body, &organization.id)?;
    body.extend_from_slice(br#","name":"#);
    write_json_string(&mut body, &organization.name)?;
    body.push(b'}');
    body.extend_from_slice(ME_CLOSE);
    Ok(body.into())
}

/// Writes `text` as a JSON string: as it is when nothing in it needs escaping (the common
/// case, and a copy), else through serde_json.
fn write_json_string(out: &mut Vec<u8>, text: &str) -> Result<(), StoreError> {
    // No early exit, so the compiler can check many bytes at once.
    let plain = text.bytes().fold(true, |plain, b| {
        plain & (b >= 0x20) & (b != b'"') & (b != b'\\')
    });
    if plain {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(out, text).map_err(StoreError::other)
    }
}

/// The `GET /orders` body: the envelope around the page's ready JSON, without a copy. The
/// bound is the service's promise, so it holds whatever the store returned (and a page is
/// newest first by construction).
fn orders_body(page: &OrderPage) -> ApiBody {
    let page = if page.len() > MAX_ORDERS {
        tracing::warn!(
            len = page.len(),
            "the order store returned more orders than asked for"
        );
        page.truncated(MAX_ORDERS)
    } else {
        page.clone()
    };
    ApiBody::chunks([
        Bytes::from_static(ORDERS_OPEN),
        page.json().clone(),
        Bytes::from_static(ORDERS_CLOSE),
    ])
}

pin_project! {
    /// `future`, or `Err(())` once `timeout` has passed. The timer is armed only when the
    /// future first waits, so answers that are ready at once (an in-memory store) never touch
    /// the runtime's timer.
    struct Deadline<F> {
        #[pin]
        future: F,
        timeout: Duration,
        sleep: Option<Pin<Box<tokio::time::Sleep>>>,
    }
}

impl<F> Deadline<F> {
    fn new(future: F, timeout: Duration) -> Self {
        Self {
            future,
            timeout,
            sleep: None,
        }
    }
}

impl<F: Future> Future for Deadline<F> {
    type Output = Result<F::Output, ()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(output) = this.future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        let timeout = *this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(())),
            Poll::Pending => Poll::Pending,
        }
    }
}
