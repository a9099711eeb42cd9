//! The steps of answering a request that carries a well-formed key, written once: look the key
//! up, ask the rate limiter, read the orders, write the response.
//!
//! [`KeyedAnswer`] holds where a request stands and takes each store's reply ([`KeyedAnswer::advance`]);
//! it never waits itself. The drivers in [`drive`](super::store_drivers) ask the stores its
//! questions. A new step is a new question and a new arm of `advance`; both drivers follow it.

use http::header::LINK;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use crate::api::auth::AuthFailure;
use crate::api::body::ApiBody;
use crate::api::client_address::ClientAddr;
use crate::api::conditional::IfNoneMatch;
use crate::api::config::Config;
use crate::api::pagination::{BadPageRequest, PageRequest};
use crate::api::response::{self, ApiError};
use crate::api::routes::Route;
use crate::key::KeyDigest;
use crate::log::{record_in_request_span, ErrorChain};
use crate::metrics::{self, AuthFailureReason, StoreCall};
use crate::model::OrderPage;
use crate::rate_limit::RateLimitDecision;
use crate::store::{KeyLookup, Principal, StoreError, StoreErrorKind};
use crate::store::{OrderPosition, OrderQuery, UsageOutcome, UsageRoute};
use std::sync::Arc;

/// What answering needs from the request, owned so a store future can keep it.
pub(crate) struct RequestFacts {
    pub(crate) route: Route,
    /// The request's `If-None-Match`, when it has one and conditional requests are on.
    pub(crate) if_none_match: Option<IfNoneMatch>,
    /// For `GET /orders`: the page its query string asks for (or why it is refused), and the
    /// path it came in on, which the next page's link names.
    pub(crate) page: Option<(Result<PageRequest, BadPageRequest>, PathAndQuery)>,
    /// The client's address; `None` when the host passed no peer (no
    /// [`PeerAddr`](super::client_address::PeerAddr), no `PartnerApi::with_peer_addr`).
    pub(crate) client: Option<ClientAddr>,
    /// Whether the client's failed authentications are throttled (a failure limiter, and a
    /// client address).
    pub(crate) throttle_failures: bool,
}

impl RequestFacts {
    /// The name of the throttled client's budget, made only when the throttle is asked (a
    /// valid key answered from memory never needs it).
    fn failure_budget(&self) -> Box<str> {
        self.client
            .map_or_else(|| "".into(), ClientAddr::budget_name)
    }

    /// Whether `principal`'s key may be used from the client's address: any key without
    /// ranges; a restricted one only from a known address inside them (an unknown client,
    /// or a forwarding header that does not parse, is outside every range).
    fn allows(&self, principal: &Principal) -> bool {
        principal.allowed_ips.is_any()
            || matches!(self.client, Some(ClientAddr::Known(address)) if principal.allowed_ips.allows(address))
    }
}

/// Where answering one request stands.
pub(crate) struct KeyedAnswer {
    exchange: RequestFacts,
    step: Step,
}

/// What is known so far, and so what the flow asks next.
enum Step {
    /// Only the key's digest: the key store is asked.
    LookUp(KeyDigest),
    /// Only the key's digest, failed authentications throttled: the key store is asked for
    /// the answer it has at hand, and nothing more yet.
    LookUpAtHand(KeyDigest),
    /// The key store must be asked and failures are throttled: one failure is taken from the
    /// client's budget (named here) first, so a flood of unknown keys never reaches the store
    /// beyond it.
    Reserve(KeyDigest, Box<str>),
    /// The key store is asked, past its memory (which had no answer a moment ago); the budget
    /// one failure was taken from, if the limiter answered, gets it back for a valid key.
    LookUpReserved(KeyDigest, Option<Box<str>>),
    /// The key store is asked, past its memory, for a key the replica knows may be usable
    /// ([`KnownKeys`](crate::cache::KnownKeys)), whatever the client's budget: a refusal is
    /// charged to the budget (named here) afterwards.
    LookUpKnown(KeyDigest, Box<str>),
    /// The key store refused the key from memory, failures throttled: the failure is taken
    /// from the client's budget (named here), a 401 while it lasts, a 429 past it.
    ChargeFailure(AuthFailureReason, Box<str>),
    /// The key is valid: the rate limiter is asked.
    Limit(Principal),
    /// The request may be served: the order store is asked for the organization's page.
    ReadOrders(Principal, Option<RateLimitDecision>, OrderQuery),
}

/// A question of the flow to a store.
pub(crate) enum StoreQuestion<'a> {
    /// The key store's principal for the digest.
    Key(&'a KeyDigest),
    /// The key store's principal for the digest if it has it at hand; never waited for.
    KeyAtHand(&'a KeyDigest),
    /// The key store's principal for the digest, from the store itself: always waited for.
    StoredKey(&'a KeyDigest),
    /// The failure limiter's decision for the client's budget.
    Failures(&'a str),
    /// The rate limiter's decision for the principal.
    Limit(&'a Principal),
    /// The order store's page of the organization's orders.
    Orders(&'a str, &'a OrderQuery),
}

impl StoreQuestion<'_> {
    /// The store call that answers the question.
    pub(crate) fn call(&self) -> StoreCall {
        match self {
            Self::Key(_) | Self::KeyAtHand(_) | Self::StoredKey(_) => StoreCall::KeyLookup,
            Self::Failures(_) => StoreCall::AuthFailureCheck,
            Self::Limit(_) => StoreCall::RateLimitCheck,
            Self::Orders(..) => StoreCall::NewestOrders,
        }
    }
}

/// A store's reply to a [`StoreQuestion`].
pub(crate) enum StoreReply {
    Key(Result<KeyLookup, StoreError>),
    /// The key store has no answer at hand (to [`StoreQuestion::KeyAtHand`]).
    NotAtHand,
    Limit(Result<RateLimitDecision, StoreError>),
    Orders(Result<OrderPage, StoreError>),
}

impl StoreReply {
    /// The store's error, if it failed.
    pub(crate) fn error(&self) -> Option<&StoreError> {
        match self {
            Self::Key(result) => result.as_ref().err(),
            Self::NotAtHand => None,
            Self::Limit(result) => result.as_ref().err(),
            Self::Orders(result) => result.as_ref().err(),
        }
    }
}

/// The flow after a reply: done, or with a next question.
pub(crate) enum AfterReply {
    Done(Response<ApiBody>),
    /// Done, with the 429 of the failure throttle: answered after the throttle's delay.
    Throttled(Response<ApiBody>),
    Next(KeyedAnswer),
}

impl KeyedAnswer {
    /// A flow for `exchange` with the key whose digest is `digest`.
    pub(crate) fn new(exchange: RequestFacts, digest: KeyDigest) -> Self {
        let step = if exchange.throttle_failures {
            Step::LookUpAtHand(digest)
        } else {
            Step::LookUp(digest)
        };
        Self { exchange, step }
    }

    /// The key and route of the request once its key is known to be usable: what a store
    /// timeout from here on is counted against.
    pub(crate) fn usage_key(&self) -> Option<(Arc<str>, UsageRoute)> {
        let principal = match &self.step {
            Step::Limit(principal) | Step::ReadOrders(principal, ..) => principal,
            _ => return None,
        };
        Some((principal.key_id.clone(), self.exchange.route.usage_route()?))
    }

    /// The question the flow waits on.
    pub(crate) fn question(&self) -> StoreQuestion<'_> {
        match &self.step {
            Step::LookUp(digest) => StoreQuestion::Key(digest),
            Step::LookUpAtHand(digest) => StoreQuestion::KeyAtHand(digest),
            Step::LookUpReserved(digest, _) | Step::LookUpKnown(digest, _) => {
                StoreQuestion::StoredKey(digest)
            }
            Step::Reserve(_, budget) | Step::ChargeFailure(_, budget) => {
                StoreQuestion::Failures(budget)
            }
            Step::Limit(principal) => StoreQuestion::Limit(principal),
            Step::ReadOrders(principal, _, query) => {
                StoreQuestion::Orders(&principal.organization.id, query)
            }
        }
    }

    /// Takes the reply to [`question`](Self::question).
    pub(crate) fn advance(self, config: &Config, reply: StoreReply) -> AfterReply {
        let Self { exchange, step } = self;
        match (step, reply) {
            (Step::LookUpAtHand(digest), StoreReply::NotAtHand) => {
                let budget = exchange.failure_budget();
                let known = config
                    .known_keys
                    .as_ref()
                    .is_some_and(|known| known.may_be_usable(&digest));
                let step = if known {
                    Step::LookUpKnown(digest, budget)
                } else {
                    Step::Reserve(digest, budget)
                };
                AfterReply::Next(Self { exchange, step })
            }
            (Step::LookUpKnown(digest, budget), StoreReply::Key(Ok(lookup)))
                if !lookup.is_valid() =>
            {
                count_refusal(config, &exchange, &lookup);
                // Final: the next token with this digest is throttled before any lookup.
                if let Some(known) = &config.known_keys {
                    known.forget(&digest);
                }
                AfterReply::Next(Self {
                    exchange,
                    step: Step::ChargeFailure(refusal_reason(&lookup), budget),
                })
            }
            (Step::Reserve(digest, budget), StoreReply::Limit(decided)) => match decided {
                Ok(decision) if !decision.is_allowed() => {
                    AfterReply::Throttled(throttled(decision))
                }
                decided => {
                    let reserved = limit_decided(decided).map(|_| budget);
                    AfterReply::Next(Self {
                        exchange,
                        step: Step::LookUpReserved(digest, reserved),
                    })
                }
            },
            (Step::LookUpAtHand(_), StoreReply::Key(Ok(lookup))) if !lookup.is_valid() => {
                count_refusal(config, &exchange, &lookup);
                let budget = exchange.failure_budget();
                AfterReply::Next(Self {
                    exchange,
                    step: Step::ChargeFailure(refusal_reason(&lookup), budget),
                })
            }
            (Step::ChargeFailure(reason, _), StoreReply::Limit(decided)) => match decided {
                Ok(decision) if !decision.is_allowed() => {
                    AfterReply::Throttled(throttled(decision))
                }
                _ => refused(config, reason),
            },
            (
                step @ (Step::LookUp(_)
                | Step::LookUpAtHand(_)
                | Step::LookUpReserved(..)
                | Step::LookUpKnown(..)),
                StoreReply::Key(found),
            ) => match found {
                Ok(KeyLookup::Valid(principal)) => {
                    if let (Step::LookUpReserved(_, Some(budget)), Some(limiter)) =
                        (&step, &config.auth_failure_limiter)
                    {
                        limiter.refund(budget);
                    }
                    // Before the rate limiter: a leaked key used from elsewhere must not
                    // spend its owner's budget. Not a use of the key either.
                    if !exchange.allows(&principal) {
                        metrics::auth_failed(AuthFailureReason::AddressNotAllowed);
                        count_usage(
                            config,
                            &exchange,
                            &principal.key_id,
                            UsageOutcome::AddressNotAllowed,
                        );
                        return AfterReply::Done(ApiError::Forbidden.into_response());
                    }
                    if let Some(recorder) = &config.last_used {
                        recorder.record(&principal.key_id);
                    }
                    config
                        .usage
                        .request(&principal.organization.id, &principal.key_id);
                    Self::looked_up(config, exchange, principal)
                }
                Ok(lookup) => {
                    count_refusal(config, &exchange, &lookup);
                    refused(config, refusal_reason(&lookup))
                }
                Err(err) => AfterReply::Done(store_failed(config, err)),
            },
            (Step::Limit(principal), StoreReply::Limit(decided)) => {
                after_limit(config, exchange, principal, limit_decided(decided))
            }
            (Step::ReadOrders(principal, decision, query), StoreReply::Orders(page)) => {
                let response =
                    page.map(|page| orders(config, &exchange, &principal, &query, &page));
                AfterReply::Done(finish(config, &exchange, &principal, decision, response))
            }
            // The drivers reply to the question asked; anything else is a bug here, answered
            // as a failure rather than a panic on the request path.
            (_, _) => AfterReply::Done(ApiError::Internal.into_response()),
        }
    }
}

impl KeyedAnswer {
    /// The flow once the key is known to be valid: to the rate limiter, if there is one.
    fn looked_up(config: &Config, exchange: RequestFacts, principal: Principal) -> AfterReply {
        if config.rate_limiter.is_some() {
            return AfterReply::Next(Self {
                exchange,
                step: Step::Limit(principal),
            });
        }
        after_limit(config, exchange, principal, None)
    }
}

/// The flow once the limiter decided (or there is none): refused, served without the order
/// store, or on to read the orders.
fn after_limit(
    config: &Config,
    exchange: RequestFacts,
    principal: Principal,
    decision: Option<RateLimitDecision>,
) -> AfterReply {
    if decision.is_some_and(|decision| !decision.is_allowed()) {
        config.usage.rate_limited(&principal.organization.id);
        let refused = Ok(ApiError::TooManyRequests.into_response());
        return AfterReply::Done(finish(config, &exchange, &principal, decision, refused));
    }
    if let Some((page, _)) = &exchange.page {
        let query = page
            .as_ref()
            .map_err(|bad| *bad)
            .and_then(|page| page.query_for(&principal.organization.id));
        let step = match query {
            Ok(query) => Step::ReadOrders(principal, decision, query),
            Err(bad) => {
                let refused = Ok(ApiError::BadPageRequest(bad).into_response());
                return AfterReply::Done(finish(config, &exchange, &principal, decision, refused));
            }
        };
        return AfterReply::Next(KeyedAnswer { exchange, step });
    }
    let response = match exchange.route {
        // Served before any key is looked at (`Route::needs_key`); the same answer here.
        Route::OpenApi => Ok(response::openapi(config.openapi.clone())),
        _ => me(config, &exchange, &principal),
    };
    AfterReply::Done(finish(config, &exchange, &principal, decision, response))
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

/// The response to `principal`: `response` (or its failure's), with the rate-limit budget when
/// a limiter decided; the organization recorded in the host's request span.
fn finish(
    config: &Config,
    exchange: &RequestFacts,
    principal: &Principal,
    decision: Option<RateLimitDecision>,
    response: Result<Response<ApiBody>, StoreError>,
) -> Response<ApiBody> {
    record_in_request_span("organization_id", || principal.organization.id.as_str());
    let mut response = response.unwrap_or_else(|err| store_failed(config, err));
    if config.key_usage.is_some() {
        let outcome = match response.status() {
            StatusCode::OK => UsageOutcome::Ok,
            StatusCode::NOT_MODIFIED => UsageOutcome::NotModified,
            StatusCode::TOO_MANY_REQUESTS => UsageOutcome::RateLimited,
            _ => UsageOutcome::Error,
        };
        count_usage(config, exchange, &principal.key_id, outcome);
    }
    if let Some(decision) = decision {
        decision.write_headers(response.headers_mut());
    }
    response
}

/// The 200 (or 304) of `GET /me`.
fn me(
    config: &Config,
    exchange: &RequestFacts,
    principal: &Principal,
) -> Result<Response<ApiBody>, StoreError> {
    crate::api::me_cache::with_me_representation(&principal.organization, |me| {
        let etag = config.conditional_requests.then_some(&me.etag);
        // Its tag in place already: the headers of every `/me` of this organization.
        tagged_or_not(exchange, ApiBody::new(me.body.clone()), etag, |_| {
            me.tagged_headers.clone()
        })
    })
    .map_err(StoreError::other)
}

/// The 200 (or 304) of `GET /orders` for `page`, with the next page's `Link` when more
/// orders follow. The page size is the service's promise, so it holds whatever the store
/// returned (and a page is newest first by construction).
fn orders(
    config: &Config,
    exchange: &RequestFacts,
    principal: &Principal,
    query: &OrderQuery,
    page: &OrderPage,
) -> Response<ApiBody> {
    let page = if page.len() > query.limit() {
        tracing::warn!(
            len = page.len(),
            "the order store returned more orders than asked for"
        );
        page.truncated(query.limit())
    } else {
        page.clone()
    };
    // Computed once per stored page and shared by its clones.
    let etag = config
        .conditional_requests
        .then(|| page.etag(response::orders_etag));
    let mut response = tagged_or_not(
        exchange,
        response::orders_body(&page),
        etag,
        response::tagged_headers,
    );
    if let (true, Some(last), Some((Ok(request), path))) =
        (page.has_more(), page.orders().last(), &exchange.page)
    {
        let last = OrderPosition::of(last.order());
        let link = request.next_link(path.path(), &principal.organization.id, &last);
        if let Some(link) = link {
            response.headers_mut().insert(LINK, link);
        }
    }
    response
}

/// The `200` of `body`, tagged `etag` when there is one (with the headers
/// `tagged_headers(etag)` makes), or the `304` when the request's `If-None-Match` matches
/// that tag.
fn tagged_or_not(
    exchange: &RequestFacts,
    body: ApiBody,
    etag: Option<&HeaderValue>,
    tagged_headers: impl FnOnce(&HeaderValue) -> HeaderMap,
) -> Response<ApiBody> {
    let Some(etag) = etag else {
        return response::json_body(StatusCode::OK, body);
    };
    let unchanged = exchange
        .if_none_match
        .as_ref()
        .is_some_and(|condition| condition.matches(etag));
    if unchanged {
        response::not_modified(etag)
    } else {
        response::with_headers(body, tagged_headers(etag))
    }
}

/// Why the key store refused a key it did not find valid.
fn refusal_reason(lookup: &KeyLookup) -> AuthFailureReason {
    match lookup {
        KeyLookup::Revoked { .. } => AuthFailureReason::Revoked,
        KeyLookup::Expired { .. } => AuthFailureReason::Expired,
        _ => AuthFailureReason::Unknown,
    }
}

/// The 429 for a client past its budget of failed authentications: `Retry-After` only, since
/// the `X-RateLimit-*` headers describe a key's budget.
fn throttled(decision: RateLimitDecision) -> Response<ApiBody> {
    metrics::auth_failed(AuthFailureReason::Throttled);
    let mut response = ApiError::TooManyRequests.into_response();
    if let Some(retry_after) = decision.retry_after() {
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            crate::rate_limit::whole_seconds_at_least_one(retry_after),
        );
    }
    response
}

/// The 401 for a well-formed key the key store refused, for `reason`.
/// Counts one answered request of the key `key_id` in the key's usage, if it is recorded.
fn count_usage(config: &Config, exchange: &RequestFacts, key_id: &Arc<str>, outcome: UsageOutcome) {
    if let (Some(recorder), Some(route)) = (&config.key_usage, exchange.route.usage_route()) {
        recorder.record(key_id, route, outcome);
    }
}

/// Counts a refused key's request in its usage, when the store said which key it was.
fn count_refusal(config: &Config, exchange: &RequestFacts, lookup: &KeyLookup) {
    match lookup {
        KeyLookup::Revoked {
            key_id: Some(key_id),
        } => {
            count_usage(config, exchange, key_id, UsageOutcome::Revoked);
        }
        KeyLookup::Expired {
            key_id: Some(key_id),
        } => {
            count_usage(config, exchange, key_id, UsageOutcome::Expired);
        }
        _ => {}
    }
}

fn refused(config: &Config, reason: AuthFailureReason) -> AfterReply {
    AfterReply::Done(unauthenticated(config, AuthFailure::Refused(reason)))
}

/// The 401 for `failure`, counted by its reason.
pub(crate) fn unauthenticated(config: &Config, failure: AuthFailure) -> Response<ApiBody> {
    metrics::auth_failed(failure.reason());
    response::unauthorized(config.challenges.for_failure(failure))
}

/// The answer to a store failure; its detail goes to the log only.
pub(crate) fn store_failed(config: &Config, err: StoreError) -> Response<ApiBody> {
    tracing::error!(
        kind = ?err.kind(),
        error = %ErrorChain(&err),
        "partner API store failed"
    );
    match err.kind() {
        StoreErrorKind::Unavailable => response::unavailable(config.retry_after),
        _ => ApiError::Internal.into_response(),
    }
}
