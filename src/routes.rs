//! The endpoints of spec section 4, in one place: which paths exist, which methods they take,
//! and what each answers once the key is known.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Method, Response, StatusCode};
use pin_project_lite::pin_project;

use crate::auth::AuthFailure;
use crate::body::ApiBody;
use crate::conditional::{self, IfNoneMatch};
use crate::key::KeyDigest;
use crate::model::OrderPage;
use crate::rate_limit::RateLimitDecision;
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

/// What answering one authenticated request needs from the request, owned so a store future
/// can keep it.
pub(crate) struct Exchange {
    pub(crate) route: Route,
    /// The request's `If-None-Match`, when it has one and conditional requests are on.
    pub(crate) if_none_match: Option<IfNoneMatch>,
}

/// The answer to a request with a well-formed key: ready, or still waiting for a store.
pub(crate) enum Answer {
    /// Every store involved answered at once.
    Ready(Response<ApiBody>),
    /// A store must be waited for.
    Wait(Pin<Box<dyn Future<Output = Response<ApiBody>> + Send>>),
}

/// Where answering a request stands: what is known so far.
enum Step {
    /// Only the key's digest: the key store is next.
    LookUp(KeyDigest),
    /// The key is valid: the rate limiter (if any) is next.
    Limit(Principal),
    /// The request may be served, with the budget the limiter reported.
    Serve(Principal, Option<RateLimitDecision>),
}

/// Answers `exchange` with the key whose digest is `digest`. Stores (and a limiter) that have
/// the answer at hand (`lookup_now`, `check_now`, `newest_orders_now`) are answered without a
/// future or a timer; from the first that must be waited for on, through [`respond`], under
/// the store timeout.
pub(crate) fn answer(shared: &Arc<Shared>, exchange: Exchange, digest: KeyDigest) -> Answer {
    let wait = |exchange, step| Answer::Wait(Box::pin(respond(shared.clone(), exchange, step)));
    let mut step = Step::LookUp(digest);
    loop {
        step = match step {
            Step::LookUp(digest) => match shared.keys.lookup_now(&digest) {
                None => return wait(exchange, Step::LookUp(digest)),
                Some(Ok(Some(principal))) => Step::Limit(principal),
                Some(Ok(None)) => return Answer::Ready(unknown_key(shared)),
                Some(Err(err)) => return Answer::Ready(store_failed(err)),
            },
            Step::Limit(principal) => match &shared.rate_limiter {
                None => Step::Serve(principal, None),
                Some(limiter) => match limiter.check_now(&principal) {
                    None => return wait(exchange, Step::Limit(principal)),
                    Some(result) => Step::Serve(principal, limit_decided(result)),
                },
            },
            Step::Serve(principal, decision) => {
                let served = match served_without_orders(exchange.route, decision) {
                    Some(served) => served,
                    None => {
                        let organization_id = &principal.organization.id;
                        match shared.orders.newest_orders_now(organization_id, MAX_ORDERS) {
                            Some(page) => Served::Orders(page),
                            None => return wait(exchange, Step::Serve(principal, decision)),
                        }
                    }
                };
                return Answer::Ready(serve(shared, &exchange, &principal, decision, served));
            }
        }
    }
}

/// [`answer`] from `step` on, for stores that must be waited for.
async fn respond(shared: Arc<Shared>, exchange: Exchange, step: Step) -> Response<ApiBody> {
    within_store_timeout(&shared, async {
        let mut step = step;
        loop {
            step = match step {
                Step::LookUp(digest) => match shared.keys.lookup(&digest).await? {
                    Some(principal) => Step::Limit(principal),
                    None => return Ok(unknown_key(&shared)),
                },
                Step::Limit(principal) => {
                    let decision = match &shared.rate_limiter {
                        Some(limiter) => limit_decided(limiter.check(&principal).await),
                        None => None,
                    };
                    Step::Serve(principal, decision)
                }
                Step::Serve(principal, decision) => {
                    let served = match served_without_orders(exchange.route, decision) {
                        Some(served) => served,
                        None => Served::Orders(
                            shared
                                .orders
                                .newest_orders(&principal.organization.id, MAX_ORDERS)
                                .await,
                        ),
                    };
                    return Ok(serve(&shared, &exchange, &principal, decision, served));
                }
            }
        }
    })
    .await
}

/// What `route` serves without the order store: a refusal when the limiter said no, else
/// `/me` or the document; `None` for `/orders`, whose page the caller reads as its stores
/// allow (at once or awaited).
fn served_without_orders(route: Route, decision: Option<RateLimitDecision>) -> Option<Served> {
    if decision.is_some_and(|decision| !decision.is_allowed()) {
        return Some(Served::Refused);
    }
    match route {
        Route::Orders => None,
        Route::Me => Some(Served::Me),
        Route::OpenApi => Some(Served::OpenApi),
    }
}

/// The limiter's decision, or none when it failed: the request is served without a limit
/// rather than refused because the limiter's own store is down.
fn limit_decided(result: Result<RateLimitDecision, StoreError>) -> Option<RateLimitDecision> {
    result
        .inspect_err(|err| {
            tracing::warn!(
                kind = ?err.kind(),
                error = %ErrorChain(err),
                "partner API rate limiter failed; serving without a limit"
            );
        })
        .ok()
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
    /// Nothing: the rate limiter refused the request.
    Refused,
}

/// The response for `principal` of what is `served`, with the rate-limit budget when a
/// limiter decided.
fn serve(
    shared: &Shared,
    exchange: &Exchange,
    principal: &Principal,
    decision: Option<RateLimitDecision>,
    served: Served,
) -> Response<ApiBody> {
    // The host's request span may declare this field (see the crate docs on logging).
    let span = tracing::Span::current();
    if !span.is_disabled() {
        span.record("organization_id", principal.organization.id.as_str());
    }
    let mut response = authorized(shared, exchange, principal, served).unwrap_or_else(store_failed);
    if let Some(decision) = decision {
        decision.write_headers(response.headers_mut());
    }
    response
}

/// The 200 (or 304, or 429) of what is `served`.
fn authorized(
    shared: &Shared,
    exchange: &Exchange,
    principal: &Principal,
    served: Served,
) -> Result<Response<ApiBody>, StoreError> {
    let (body, etag) = match served {
        Served::Orders(page) => orders_body(&page?, shared.conditional_requests),
        Served::Me => {
            let body = me(principal)?;
            let etag = shared
                .conditional_requests
                .then(|| conditional::entity_tag(&[&body]));
            (ApiBody::new(body), etag)
        }
        // Served before any key is looked at (`Route::needs_key`); the same answer here.
        Served::OpenApi => return Ok(openapi(shared)),
        Served::Refused => return Ok(ApiError::TooManyRequests.into_response()),
    };
    let Some(etag) = etag else {
        return Ok(response::json_body(StatusCode::OK, body));
    };
    let unchanged = exchange
        .if_none_match
        .as_ref()
        .is_some_and(|condition| condition.matches(&etag));
    Ok(if unchanged {
        response::not_modified(etag)
    } else {
        response::tagged(body, etag)
    })
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

/// The `GET /orders` body: the envelope around the page's ready JSON, without a copy, and
/// its entity tag when `tagged` (computed once per stored page). The bound is the service's
/// promise, so it holds whatever the store returned (and a page is newest first by
/// construction).
fn orders_body(page: &OrderPage, tagged: bool) -> (ApiBody, Option<HeaderValue>) {
    let page = if page.len() > MAX_ORDERS {
        tracing::warn!(
            len = page.len(),
            "the order store returned more orders than asked for"
        );
        page.truncated(MAX_ORDERS)
    } else {
        page.clone()
    };
    let etag = tagged.then(|| {
        page.etag(|json| conditional::entity_tag(&[ORDERS_OPEN, json, ORDERS_CLOSE]))
            .clone()
    });
    let body = ApiBody::chunks([
        Bytes::from_static(ORDERS_OPEN),
        page.json().clone(),
        Bytes::from_static(ORDERS_CLOSE),
    ]);
    (body, etag)
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
