//! The answers to a request with a key: `GET /me` and a page of `GET /orders` (200, or 304
//! when the request's `If-None-Match` holds the tag; the next page's `Link`), `GET /events`, and the
//! refusals of authentication (401, the throttle's 429) and of a failed store.

use bytes::Bytes;
use http::header::{ETAG, LINK, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, Response, StatusCode};

use super::ApiError;
use crate::api::auth::AuthFailure;
use crate::api::body::ApiBody;
use crate::api::conditional::IfNoneMatch;
use crate::api::config::Config;
use crate::api::events_cache;
use crate::api::events_request::BadEventsRequest;
use crate::api::pagination::PageRequest;
use crate::log::ErrorChain;
use crate::metrics::{self, AuthFailureReason};
use crate::model::{OrderPage, RenditionRef};
use crate::rate_limit::{whole_seconds_at_least_one, RateLimitDecision};
use crate::store::events::EventIds;
use crate::store::{
    EventQuery, EventsPage, FeedEvent, OrderChange, OrderPosition, OrderQuery, StoreError,
    StoreErrorKind,
};
use crate::versions::{ApiVersion, Resource, Versions};

/// The 200 (or 304) of `GET /me`: `body`, with `tagged_headers` (the headers of every `/me`
/// of the organization, its tag in place) when tags are on.
pub(crate) fn me(
    if_none_match: Option<&IfNoneMatch>,
    body: Bytes,
    tagged_headers: Option<HeaderMap>,
) -> Response<ApiBody> {
    let Some(headers) = tagged_headers else {
        return super::json_body(StatusCode::OK, ApiBody::new(body));
    };
    let unchanged = if_none_match.is_some_and(|condition| {
        headers
            .get(ETAG)
            .is_some_and(|etag| condition.matches(etag))
    });
    if unchanged {
        return super::not_modified_with(headers);
    }
    super::with_headers(ApiBody::new(body), headers)
}

/// What a page of `GET /orders` answers with: the request and the path it came in on (which
/// the next page's link names), the organization whose page it is, and the version that
/// answers.
pub(crate) struct PageAnswer<'a> {
    pub(crate) request: &'a PageRequest,
    /// The path and query string the request came in on.
    pub(crate) path: &'a http::uri::PathAndQuery,
    pub(crate) organization_id: &'a str,
    pub(crate) query: &'a OrderQuery,
    pub(crate) version: ApiVersion,
}

/// The 200 (or 304) of `GET /orders` for `page`, with the next page's `Link` when more
/// orders follow. The page size is the service's promise, so it holds whatever the store
/// returned (and a page is newest first by construction).
pub(crate) fn orders(
    config: &Config,
    if_none_match: Option<&IfNoneMatch>,
    asked: &PageAnswer<'_>,
    page: &OrderPage,
) -> Response<ApiBody> {
    let limit = asked.query.limit();
    let page = if page.len() > limit {
        tracing::warn!(
            len = page.len(),
            "the order store returned more orders than asked for"
        );
        page.truncated(limit)
    } else {
        page.clone()
    };
    let chain = config.versions.chain();
    // A key limited to providers: its tag is bound to them too, so keys of other views never
    // share one (kept with the page for the view it was first asked for, as its link is).
    let view = asked.request.view_tag();
    let etag_of = |json: &Bytes| match view {
        None => super::orders_etag(json),
        Some(view) => crate::api::conditional::entity_tag(&[
            super::ORDERS_OPEN,
            json,
            super::ORDERS_CLOSE,
            b"\0key providers\0",
            &view,
        ]),
    };
    // An older version's JSON: each order walked back once and kept with it, the page's
    // joined once and kept with the page, as its tag is.
    let rendition = if chain.reshapes(asked.version, Resource::Order) {
        page.rendition(asked.version.date(), |newest| {
            chain
                .render(Resource::Order, newest, asked.version)
                .ok()
                .flatten()
                .map(Vec::into_boxed_slice)
        })
    } else {
        RenditionRef::Kept(page.newest())
    };
    let etag = config
        .conditional_requests
        .then(|| rendition.etag(view, etag_of));
    let link = match (page.has_more(), page.orders().last()) {
        (true, Some(last)) => {
            let make = || {
                let last = OrderPosition::of(last.order());
                asked
                    .request
                    .next_link(asked.path.path(), asked.organization_id, &last)
            };
            // Made once per stored page, for the way it is usually asked for (a key limited
            // to providers gets its own: its token is bound to them).
            page.next_link(asked.organization_id, asked.path.as_str(), view, make)
        }
        _ => None,
    };
    let body = super::orders_body_of(&rendition.json);
    let Some(etag) = etag.as_deref() else {
        return with_link(super::json_body(StatusCode::OK, body), link);
    };
    if if_none_match.is_some_and(|condition| condition.matches(etag)) {
        // Its `Content-Type` taken out before the `Link` is added, as it always was (which
        // puts the version's echo first).
        return with_link(super::not_modified(etag), link);
    }
    match link {
        // The tagged headers with the `Link` in a slot of its own: the headers in the order
        // the `Link` added last gave them, without growing the map.
        Some(link) => super::with_headers(body, super::tagged_headers_with_link(etag, link)),
        None => super::with_headers(body, super::tagged_headers(etag)),
    }
}

/// `response` with `link` added, when there is one.
fn with_link(mut response: Response<ApiBody>, link: Option<HeaderValue>) -> Response<ApiBody> {
    if let Some(link) = link {
        response.headers_mut().insert(LINK, link);
    }
    response
}

/// The page of `GET /events` that `page`, the feed's answer to `query` of
/// `organization_id`'s feed, is at `version`: its body and the last event the read went
/// through (where the next read resumes); or the refusal to answer with, the 410 of an
/// `after` retention deleted or the 400 of one the feed never held.
pub(crate) fn events_page(
    config: &Config,
    version: ApiVersion,
    organization_id: &str,
    query: &EventQuery,
    page: EventsPage,
) -> Result<(Bytes, Option<u64>), ApiError> {
    let (mut events, mut through) = match page {
        EventsPage::Events { events, through } => (events, through),
        EventsPage::Expired => return Err(ApiError::EventsExpired),
        EventsPage::Unknown => {
            return Err(ApiError::BadEventsRequest(BadEventsRequest::UnknownAfter))
        }
    };
    if events.len() > query.limit() {
        tracing::warn!(
            len = events.len(),
            "the events feed returned more events than asked for"
        );
        events.truncate(query.limit());
        through = events.last().map(|event| event.id);
    }
    let chain = config.versions.chain();
    let older = chain.reshapes(version, Resource::Order).then_some(version);
    let encode = || encode_events(organization_id, &events, older.map(|at| (chain, at)));
    let body = match config.events.as_ref() {
        Some(feed) => {
            events_cache::events_body(feed, organization_id, chain, version, &events, encode)
        }
        None => encode(),
    };
    // Past what this read went through (events of types not asked for too), else after the
    // last event returned.
    Ok((
        body,
        through.or_else(|| events.last().map(|event| event.id)),
    ))
}

/// The 200 of `GET /events` with `body`, and `link` (made by
/// [`EventsRequest::next_link`](crate::api::events_request::EventsRequest::next_link)): where
/// the next read resumes. `echo_slot`: the version's echo is the next header the answer gets
/// (the answer's finish fills or takes out the slot it then has).
pub(crate) fn events(body: Bytes, link: Option<HeaderValue>, echo_slot: bool) -> Response<ApiBody> {
    match link {
        // The common answer: the headers with slots for the `Link` and the echo, when
        // nothing comes between them (`echo_slot`: no rate limiter's headers, no deprecation
        // of the answer's version).
        Some(link) if echo_slot => super::events_page_with_link(body, link),
        link => with_link(super::json(StatusCode::OK, body), link),
    }
}

/// The body of a page of `events` of `organization_id`'s feed: each order in `data` as the
/// feed holds it (the newest shape), or walked back to `older`'s version.
fn encode_events(
    organization_id: &str,
    events: &[FeedEvent],
    older: Option<(&Versions, ApiVersion)>,
) -> Bytes {
    let mut body = Vec::with_capacity(
        super::EVENTS_OPEN.len()
            + events
                .iter()
                .map(|event| event.data.len() + 128)
                .sum::<usize>()
            + super::EVENTS_CLOSE.len(),
    );
    body.extend_from_slice(super::EVENTS_OPEN);
    // The organization's tag hashed once for the page, not once per event.
    let ids = EventIds::of(organization_id);
    for (index, event) in events.iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        // The id is `evt_` and base64url, the type a fixed name, the time digits: nothing to
        // escape; `data` is JSON the store encoded.
        body.extend_from_slice(br#"{"id":""#);
        ids.write_id(event.id, &mut body);
        body.extend_from_slice(br#"","type":""#);
        body.extend_from_slice(event.change.as_str().as_bytes());
        body.extend_from_slice(br#"","createdAt":""#);
        event.created_at.write_rfc3339(&mut body);
        body.extend_from_slice(br#"","data":"#);
        let reshaped = match (older, event.change) {
            (Some((chain, version)), OrderChange::Created | OrderChange::Updated) => chain
                .render(Resource::Order, &event.data, version)
                .ok()
                .flatten(),
            _ => None,
        };
        body.extend_from_slice(reshaped.as_deref().unwrap_or(&event.data));
        body.push(b'}');
    }
    body.extend_from_slice(super::EVENTS_CLOSE);
    Bytes::from(body)
}

/// The 429 for a client past its budget of failed authentications: `Retry-After` only, since
/// the `X-RateLimit-*` headers describe a key's budget.
pub(crate) fn throttled(decision: RateLimitDecision) -> Response<ApiBody> {
    metrics::auth_failed(AuthFailureReason::Throttled);
    let mut response = ApiError::TooManyRequests.into_response();
    if let Some(retry_after) = decision.retry_after() {
        response
            .headers_mut()
            .insert(RETRY_AFTER, whole_seconds_at_least_one(retry_after));
    }
    response
}

/// The 401 for `failure`, counted by its reason.
pub(crate) fn unauthenticated(config: &Config, failure: AuthFailure) -> Response<ApiBody> {
    metrics::auth_failed(failure.reason());
    super::unauthorized(config.challenges.for_failure(failure))
}

/// The answer to a store failure; its detail goes to the log only.
pub(crate) fn store_failed(config: &Config, err: StoreError) -> Response<ApiBody> {
    tracing::error!(
        kind = ?err.kind(),
        error = %ErrorChain(&err),
        "partner API store failed"
    );
    match err.kind() {
        StoreErrorKind::Unavailable => super::unavailable(config.retry_after),
        StoreErrorKind::InvalidData
        | StoreErrorKind::NotFound
        | StoreErrorKind::Conflict
        | StoreErrorKind::Unsupported
        | StoreErrorKind::Other => ApiError::Internal.into_response(),
    }
}
