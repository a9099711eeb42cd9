//! The JSON documents the API writes: the `meta` envelope (contract 2.1, 9.3), success bodies
//! and the error object of contract section 7, with the headers every response carries; and
//! ([`keyed`]) the answers to a request with a key.

pub(crate) mod keyed;

use std::time::Duration;

use bytes::Bytes;
use http::header::{
    HeaderMap, HeaderName, HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, ETAG,
    LINK, RETRY_AFTER, VARY, WWW_AUTHENTICATE, X_CONTENT_TYPE_OPTIONS,
};
use http::{Response, StatusCode};

use crate::api::body::ApiBody;
use crate::api::conditional;
use crate::api::config::DEFAULT_RETRY_AFTER;
use crate::api::deprecations::Deprecations;
use crate::api::events_request::{BadEventsRequest, EventsParameter};
use crate::api::order_filters::FilterParameter;
use crate::api::pagination::BadPageRequest;
use crate::api::request_id::{is_request_id, REQUEST_ID_HEADER};
use crate::api::versioning::ApiVersions;
use crate::rate_limit::whole_seconds_at_least_one;
use crate::store::DeprecatedCallTotal;
use crate::versions::{ApiVersion, Versions, DEFAULT_VERSION_HEADER};

/// The `meta` object of every response, as a literal so bodies can be built with `concat!`.
macro_rules! meta_json {
    () => {
        r#"{"version":"v1","status":"beta"}"#
    };
}

/// An error document: `{"meta": {...}, "error": {"message": $message}}`. The message must
/// not need JSON escaping.
macro_rules! error_json {
    ($message:literal) => {
        concat!(
            r#"{"meta":"#,
            meta_json!(),
            r#","error":{"message":""#,
            $message,
            r#""}}"#
        )
    };
}

/// What precedes the `data` object in the body of `GET /me`.
pub(crate) const ME_OPEN: &[u8] = concat!(r#"{"meta":"#, meta_json!(), r#","data":"#).as_bytes();
/// What closes the body of `GET /me`.
pub(crate) const ME_CLOSE: &[u8] = b"}";
/// What precedes the orders' JSON array in the body of `GET /orders`.
pub(crate) const ORDERS_OPEN: &[u8] =
    concat!(r#"{"meta":"#, meta_json!(), r#","data":{"orders":"#).as_bytes();
/// What closes the body of `GET /orders`.
pub(crate) const ORDERS_CLOSE: &[u8] = b"}}";

/// The error document of a 400 for `bad`.
fn bad_page_request(bad: BadPageRequest) -> &'static str {
    match bad {
        BadPageRequest::Limit => {
            error_json!("invalid query parameter limit: it must be a whole number from 1 to 100")
        }
        BadPageRequest::Repeated => {
            error_json!("invalid query: limit and page_token may each be given once")
        }
        BadPageRequest::RepeatedFilter(FilterParameter::Status) => {
            error_json!("invalid query parameter status: it may be given once")
        }
        BadPageRequest::RepeatedFilter(FilterParameter::Provider) => {
            error_json!("invalid query parameter provider: it may be given once")
        }
        BadPageRequest::RepeatedFilter(FilterParameter::CreatedSince) => {
            error_json!("invalid query parameter created_since: it may be given once")
        }
        BadPageRequest::RepeatedFilter(FilterParameter::CreatedBefore) => {
            error_json!("invalid query parameter created_before: it may be given once")
        }
        BadPageRequest::RepeatedFilter(FilterParameter::UpdatedSince) => {
            error_json!("invalid query parameter updated_since: it may be given once")
        }
        BadPageRequest::RepeatedFilter(FilterParameter::UpdatedBefore) => {
            error_json!("invalid query parameter updated_before: it may be given once")
        }
        BadPageRequest::MalformedToken => error_json!(
            "invalid query parameter page_token: it is not a page token of this API (cut or altered); use the link of the previous page as it was given"
        ),
        BadPageRequest::ForeignToken => error_json!(
            "invalid query parameter page_token: it belongs to another organization's pages"
        ),
        BadPageRequest::OtherFilters => error_json!(
            "invalid query parameter page_token: it was made for other filters; use the link of the previous page as it was given, or start again without page_token"
        ),
        BadPageRequest::Filter(FilterParameter::Status) => error_json!(
            "invalid query parameter status: it must be one or more comma-separated statuses, at most 20, each of 1 to 200 bytes"
        ),
        BadPageRequest::Filter(FilterParameter::Provider) => error_json!(
            "invalid query parameter provider: it must be one or more comma-separated provider ids, at most 20, each of 1 to 200 bytes"
        ),
        BadPageRequest::Filter(FilterParameter::CreatedSince) => error_json!(
            "invalid query parameter created_since: it must be an RFC 3339 date-time such as 2026-11-26T10:15:02.113Z, in the years 0000 to 9999"
        ),
        BadPageRequest::Filter(FilterParameter::CreatedBefore) => error_json!(
            "invalid query parameter created_before: it must be an RFC 3339 date-time such as 2026-11-26T10:15:02.113Z, in the years 0000 to 9999"
        ),
        BadPageRequest::Filter(FilterParameter::UpdatedSince) => error_json!(
            "invalid query parameter updated_since: it must be an RFC 3339 date-time such as 2026-11-26T10:15:02.113Z, in the years 0000 to 9999"
        ),
        BadPageRequest::Filter(FilterParameter::UpdatedBefore) => error_json!(
            "invalid query parameter updated_before: it must be an RFC 3339 date-time such as 2026-11-26T10:15:02.113Z, in the years 0000 to 9999"
        ),
        BadPageRequest::EmptyRange => error_json!(
            "invalid query: created_since must be before created_before (by at least a millisecond)"
        ),
        BadPageRequest::EmptyUpdatedRange => error_json!(
            "invalid query: updated_since must be before updated_before (by at least a millisecond)"
        ),
    }
}

/// The error document of a 400 of `GET /events` for `bad`.
fn bad_events_request(bad: BadEventsRequest) -> &'static str {
    match bad {
        BadEventsRequest::Limit => {
            error_json!("invalid query parameter limit: it must be a whole number from 1 to 100")
        }
        BadEventsRequest::Types => error_json!(
            "invalid query parameter types: it must be one or more comma-separated event types of order.created, order.updated and order.deleted"
        ),
        BadEventsRequest::MalformedAfter => error_json!(
            "invalid query parameter after: it is not an event id of this API (cut or altered); use an id as an event or the link of the previous answer gave it"
        ),
        BadEventsRequest::ForeignAfter => error_json!(
            "invalid query parameter after: it is another organization's event id"
        ),
        BadEventsRequest::UnknownAfter => error_json!(
            "invalid query parameter after: it names no event of this organization's feed"
        ),
        BadEventsRequest::Repeated(EventsParameter::After) => {
            error_json!("invalid query parameter after: it may be given once")
        }
        BadEventsRequest::Repeated(EventsParameter::Types) => {
            error_json!("invalid query parameter types: it may be given once")
        }
        BadEventsRequest::Repeated(EventsParameter::Limit) => {
            error_json!("invalid query parameter limit: it may be given once")
        }
    }
}

/// What precedes the events' JSON array in the body of `GET /events`.
pub(crate) const EVENTS_OPEN: &[u8] =
    concat!(r#"{"meta":"#, meta_json!(), r#","data":{"events":["#).as_bytes();
/// What closes the body of `GET /events`.
pub(crate) const EVENTS_CLOSE: &[u8] = b"]}}";

/// A JSON response with the headers every API response carries.
pub(crate) fn json(status: StatusCode, body: Bytes) -> Response<ApiBody> {
    json_body(status, ApiBody::new(body))
}

/// A JSON response of `body` with the headers every API response carries. `Content-Length`
/// is left to the server, which takes it from the body's exact size; a `HEAD` response gets
/// it explicitly ([`strip_body`]).
pub(crate) fn json_body(status: StatusCode, body: ApiBody) -> Response<ApiBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    // A clone of a ready map: no header name is hashed per response.
    *response.headers_mut() = JSON_HEADERS.clone();
    response
}

/// The headers of every API response.
///
/// `x-request-id` holds an empty placeholder that the service's response future always
/// replaces or removes ([`set_request_id`]): a cloned map has room for exactly the headers it
/// holds, so filling a slot costs nothing where adding one would grow the map.
static JSON_HEADERS: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(|| {
    // Room to spare: a map at its capacity grows on any insert, even one into a slot.
    let mut headers = HeaderMap::with_capacity(12);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    // Errors are not worth keeping, and a 401 says something about a key: no cache may keep
    // them. Tagged bodies (below) say otherwise.
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(REQUEST_ID_HEADER, HeaderValue::from_static(""));
    headers
});

/// Puts the request's id in the slot every API response has for it, or removes the slot.
pub(crate) fn set_request_id(response: &mut Response<ApiBody>, id: Option<HeaderValue>) {
    let headers = response.headers_mut();
    let Some(id) = id else {
        headers.remove(REQUEST_ID_HEADER);
        return;
    };
    match headers.iter_mut().find(|(name, _)| is_request_id(name)) {
        Some((_, slot)) => *slot = id,
        None => {
            headers.insert(REQUEST_ID_HEADER, id);
        }
    }
}

/// The headers of a `200` (or `304`) that carries an `ETag`: such a body may be kept by the
/// partner's own (private) cache and revalidated with `If-None-Match` on every use. `Vary`
/// keeps a cache from answering one key with another key's body, and, when a host compresses
/// responses (tower-http's `CompressionLayer` keeps the tag), from answering a client with an
/// encoding it did not ask for: a cache keeps one variant per encoding and revalidates each
/// with the one tag, which names the same content.
static TAGGED_HEADERS: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(|| {
    let mut headers = JSON_HEADERS.clone();
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("private, no-cache"));
    headers.insert(
        VARY,
        HeaderValue::from_static("Authorization, Accept-Encoding"),
    );
    // A slot, as `x-request-id`'s: `tagged` always fills it.
    headers.insert(ETAG, HeaderValue::from_static(""));
    // And one for the version's echo, which every tagged answer carries: filled (or, for a
    // host that names its own header, taken out) when the answer is finished, so the map never
    // grows on the request path.
    headers.insert(VERSION_SLOT, HeaderValue::from_static(""));
    headers
});

/// [`TAGGED_HEADERS`] with a last slot for a `Link` (a page of orders with a next one): the
/// headers of such a page in the order they had when its `Link` was added to a map cloned
/// from [`TAGGED_HEADERS`], where adding it grew the map (a clone has room for exactly what
/// it holds).
static TAGGED_HEADERS_WITH_LINK: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(|| {
    let mut headers = TAGGED_HEADERS.clone();
    headers.insert(LINK, HeaderValue::from_static(""));
    headers
});

/// [`JSON_HEADERS`] with slots for a `Link` and the version's echo (a page of events): the
/// headers such a page had when its `Link` and then the echo were added to a map cloned from
/// [`JSON_HEADERS`], where adding them grew the map. Only for an answer that gets no other
/// header before the echo (no rate limiter's, no deprecation's of its version): those came
/// between the two.
static EVENTS_PAGE_HEADERS: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(|| {
    let mut headers = JSON_HEADERS.clone();
    headers.insert(LINK, HeaderValue::from_static(""));
    headers.insert(VERSION_SLOT, HeaderValue::from_static(""));
    headers
});

/// A `200` of JSON `body` with `link`, from a map with slots for it and the version's echo,
/// which the answer's finish fills or takes out (see [`EVENTS_PAGE_HEADERS`]).
pub(crate) fn events_page_with_link(body: Bytes, link: HeaderValue) -> Response<ApiBody> {
    let mut response = with_headers(ApiBody::new(body), EVENTS_PAGE_HEADERS.clone());
    response.headers_mut().insert(LINK, link);
    response
}

/// The slot of [`TAGGED_HEADERS`] (and [`EVENTS_PAGE_HEADERS`]) for the version's echo: the
/// default header's name.
pub(crate) const VERSION_SLOT: HeaderName = HeaderName::from_static(DEFAULT_VERSION_HEADER);

/// The headers of a `200` tagged `etag` ([`TAGGED_HEADERS`] with the tag in its slot).
pub(crate) fn tagged_headers(etag: &HeaderValue) -> HeaderMap {
    let mut headers = TAGGED_HEADERS.clone();
    headers.insert(ETAG, etag.clone());
    headers
}

/// The headers of a `200` tagged `etag` with `link` (the next page's): the same as
/// [`tagged_headers`] with the `Link` added after them, but filled into a slot (inserting a
/// header the map holds replaces its value in place).
pub(crate) fn tagged_headers_with_link(etag: &HeaderValue, link: HeaderValue) -> HeaderMap {
    let mut headers = TAGGED_HEADERS_WITH_LINK.clone();
    headers.insert(ETAG, etag.clone());
    headers.insert(LINK, link);
    headers
}

/// A response of `body` with `headers`, a ready map's clone (as [`tagged_headers`] makes).
#[inline]
pub(crate) fn with_headers(body: ApiBody, headers: HeaderMap) -> Response<ApiBody> {
    let mut response = Response::new(body);
    *response.headers_mut() = headers;
    response
}

/// The `304 Not Modified` for a representation tagged `etag`: the headers its `200` would
/// carry (RFC 9110 section 15.4.5) but no body and no `Content-Length`.
pub(crate) fn not_modified(etag: &HeaderValue) -> Response<ApiBody> {
    not_modified_with(tagged_headers(etag))
}

/// The `304 Not Modified` with `tagged_headers`, those of the tagged `200` it stands for.
pub(crate) fn not_modified_with(tagged_headers: HeaderMap) -> Response<ApiBody> {
    let mut response = with_headers(ApiBody::empty(), tagged_headers);
    *response.status_mut() = StatusCode::NOT_MODIFIED;
    response.headers_mut().remove(CONTENT_TYPE);
    response
}

/// Makes `response` its `HEAD` form: the same status and headers, `Content-Length` that of
/// the body it leaves out, and no body.
pub(crate) fn strip_body(response: &mut Response<ApiBody>) {
    if response.status() == StatusCode::NOT_MODIFIED {
        // Bodiless already; a Content-Length here would have to be the 200's.
        return;
    }
    let length = HeaderValue::from(response.body().len());
    response.headers_mut().insert(CONTENT_LENGTH, length);
    *response.body_mut() = ApiBody::empty();
}

/// Every error the API answers with, each with its status and fixed message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ApiError {
    /// No endpoint at this path.
    NotFound,
    /// The endpoint exists but not for this method.
    MethodNotAllowed,
    /// A store failed, or the handler panicked.
    Internal,
    /// A store is unreachable or did not answer in time.
    Unavailable,
    /// The key's rate limit is spent.
    TooManyRequests,
    /// The key may not be used from the client's address.
    Forbidden,
    /// The query string of `GET /orders` asks for no page there is.
    BadPageRequest(BadPageRequest),
    /// The query string of `GET /events` asks for no part of the feed there is.
    BadEventsRequest(BadEventsRequest),
    /// `GET /events`' `after` names an event retention deleted.
    EventsExpired,
}

impl ApiError {
    pub(crate) fn into_response(self) -> Response<ApiBody> {
        let (status, body) = match self {
            Self::NotFound => (StatusCode::NOT_FOUND, error_json!("not found")),
            Self::MethodNotAllowed => (
                StatusCode::METHOD_NOT_ALLOWED,
                error_json!("method not allowed: use GET or HEAD"),
            ),
            Self::Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                error_json!("internal server error"),
            ),
            Self::Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                error_json!("service temporarily unavailable, try again later"),
            ),
            Self::TooManyRequests => (
                StatusCode::TOO_MANY_REQUESTS,
                error_json!("rate limit exceeded: retry after the time in the Retry-After header"),
            ),
            Self::Forbidden => (
                StatusCode::FORBIDDEN,
                error_json!("this API key may not be used from this address"),
            ),
            Self::BadPageRequest(bad) => (StatusCode::BAD_REQUEST, bad_page_request(bad)),
            Self::BadEventsRequest(bad) => (StatusCode::BAD_REQUEST, bad_events_request(bad)),
            Self::EventsExpired => (
                StatusCode::GONE,
                error_json!("invalid query parameter after: the events feed no longer reaches back to this event (events are kept for a limited time); read the orders again (GET /orders) and follow the feed from its oldest event kept (without after)"),
            ),
        };
        let mut response = json(status, Bytes::from_static(body.as_bytes()));
        if self == Self::MethodNotAllowed {
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        }
        response
    }
}

/// Creates a JSON error response in the API's envelope for `status`, with the headers of every API
/// response: for a host's own layers (a request timeout, a caught panic) so that every error
/// a partner sees has one shape. 404, 405, 429, 500 and 503 carry the API's own messages;
/// other statuses their canonical reason.
///
/// ```
/// use http::StatusCode;
///
/// let response = partner_api::error_response(StatusCode::SERVICE_UNAVAILABLE);
/// assert_eq!(response.status(), 503);
/// assert_eq!(response.headers()["content-type"], "application/json");
/// ```
pub fn error_response(status: StatusCode) -> Response<ApiBody> {
    let known = match status {
        StatusCode::NOT_FOUND => Some(ApiError::NotFound),
        StatusCode::METHOD_NOT_ALLOWED => Some(ApiError::MethodNotAllowed),
        StatusCode::TOO_MANY_REQUESTS => Some(ApiError::TooManyRequests),
        StatusCode::INTERNAL_SERVER_ERROR => Some(ApiError::Internal),
        StatusCode::SERVICE_UNAVAILABLE => Some(ApiError::Unavailable),
        _ => None,
    };
    let mut response = match known {
        Some(ApiError::Unavailable) => unavailable(DEFAULT_RETRY_AFTER),
        Some(error) => error.into_response(),
        None => json(status, Bytes::from(other_error_body(status))),
    };
    // A host's own response: no request id of the API's to put in the slot.
    set_request_id(&mut response, None);
    response
}

/// The `410 Gone` of a request that `deprecation`, enforced and past its sunset, concerns:
/// the message names what is gone, the sunset date and the link.
pub(crate) fn past_sunset(deprecation: &crate::deprecation::Deprecation) -> Response<ApiBody> {
    let mut message = format!(
        "{} is no longer served: its sunset was {}",
        deprecation.target(),
        deprecation
            .sunset()
            .map(|sunset| sunset.to_string())
            .unwrap_or_default()
    );
    if let Some(link) = deprecation.link() {
        message.push_str(&format!("; see {link}"));
    }
    let body = serde_json::json!({
        "meta": serde_json::from_str::<serde_json::Value>(meta_json!())
            .expect("the meta literal is JSON"),
        "error": { "message": message },
    });
    json(StatusCode::GONE, Bytes::from(body.to_string()))
}

/// The 200 of `GET /deprecations`: each deprecation declared, with the key's calls of it in
/// the last 30 days (`calls`: `None` when the host does not record them).
pub(crate) fn deprecations(
    declared: &Deprecations,
    calls: Option<&[DeprecatedCallTotal]>,
) -> Response<ApiBody> {
    let body = serde_json::json!({
        "meta": serde_json::from_str::<serde_json::Value>(meta_json!())
            .expect("the meta literal is JSON"),
        "data": declared.listed(calls),
    });
    json(StatusCode::OK, Bytes::from(body.to_string()))
}

/// The `503` of a store that is unreachable or too slow, with `Retry-After`.
pub(crate) fn unavailable(retry_after: Duration) -> Response<ApiBody> {
    let mut response = ApiError::Unavailable.into_response();
    response
        .headers_mut()
        .insert(RETRY_AFTER, whole_seconds_at_least_one(retry_after));
    response
}

/// The `GET /openapi.json` response: the bare document, which may be cached.
pub(crate) fn openapi(document: Bytes) -> Response<ApiBody> {
    let mut response = json(StatusCode::OK, document);
    response.headers_mut().insert(
        CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}

/// The body of `GET /orders` around the orders' JSON array `orders`, without a copy.
pub(crate) fn orders_body_of(orders: &Bytes) -> ApiBody {
    ApiBody::chunks([
        Bytes::from_static(ORDERS_OPEN),
        orders.clone(),
        Bytes::from_static(ORDERS_CLOSE),
    ])
}

/// The 200 of `GET /versions`: the versions of `chain`, newest first, each with its changes
/// and, when `deprecations` deprecate it, the day it is deprecated from and its sunset; and
/// the version the key is pinned to.
pub(crate) fn versions(
    chain: &Versions,
    pinned: ApiVersion,
    deprecations: &crate::api::deprecations::Deprecations,
) -> Response<ApiBody> {
    #[derive(serde::Serialize)]
    struct Listed<'a> {
        version: ApiVersion,
        changes: Vec<&'a str>,
        deprecated: Option<ApiVersion>,
        sunset: Option<ApiVersion>,
    }
    #[derive(serde::Serialize)]
    struct Data<'a> {
        pinned: ApiVersion,
        versions: Vec<Listed<'a>>,
    }
    let data = Data {
        pinned,
        versions: chain
            .offered()
            .map(|version| {
                let deprecation = deprecations
                    .of_version(version)
                    .and_then(|index| deprecations.get(index));
                Listed {
                    version,
                    changes: chain.changes_of(version).map(|c| c.description()).collect(),
                    deprecated: deprecation.map(|d| ApiVersion::from_date(d.since())),
                    sunset: deprecation
                        .and_then(|d| d.sunset())
                        .map(ApiVersion::from_date),
                }
            })
            .collect(),
    };
    let body = serde_json::json!({
        "meta": serde_json::from_str::<serde_json::Value>(meta_json!())
            .expect("the meta literal is JSON"),
        "data": data,
    });
    json(StatusCode::OK, Bytes::from(body.to_string()))
}

/// The entity tag of the `GET /orders` body around the page whose JSON is `page_json`.
pub(crate) fn orders_etag(page_json: &Bytes) -> HeaderValue {
    conditional::entity_tag(&[ORDERS_OPEN, page_json, ORDERS_CLOSE])
}

/// The error document with `message`, escaped as JSON needs, `meta` first as in the
/// documents of [`error_json!`].
pub(crate) fn error_document(message: &str) -> Bytes {
    let message = serde_json::to_string(message).expect("a string always encodes");
    Bytes::from(format!(
        r#"{{"meta":{},"error":{{"message":{message}}}}}"#,
        meta_json!()
    ))
}

/// The 400 of a version header (or `version` parameter, `what`) that names no version the API
/// offers: its message lists those offered.
pub(crate) fn unknown_version(what: &str, versions: &ApiVersions) -> Response<ApiBody> {
    let offered: Vec<String> = versions
        .chain()
        .offered()
        .map(|version| version.to_string())
        .collect();
    json(
        StatusCode::BAD_REQUEST,
        error_document(&format!(
            "invalid {what}: it must name a version of this API, one of {} (newest first)",
            offered.join(", ")
        )),
    )
}

/// The error document for a status the API itself never answers with.
fn other_error_body(status: StatusCode) -> Vec<u8> {
    let message = status
        .canonical_reason()
        .unwrap_or("error")
        .to_ascii_lowercase();
    let body = serde_json::json!({
        "meta": serde_json::from_str::<serde_json::Value>(meta_json!())
            .expect("the meta literal is JSON"),
        "error": { "message": message },
    });
    body.to_string().into_bytes()
}

/// The body of every 401.
const UNAUTHORIZED_BODY: &str = error_json!(
    "missing or invalid API key: send the header Authorization: Bearer <API_KEY> with a valid key"
);

/// The 403 of a valid key that lacks `permission` (RFC 6750 section 3.1): the challenge
/// `challenge` names the scope, the message the permission and the route.
pub(crate) fn insufficient_scope(
    challenge: HeaderValue,
    permission: crate::key::Permission,
) -> Response<ApiBody> {
    let body = match permission {
        crate::key::Permission::Orders => error_json!(
            "this API key lacks the permission orders, which GET /orders needs: ask the organization's admin for a key with it"
        ),
        crate::key::Permission::Events => error_json!(
            "this API key lacks the permission events, which GET /events needs: ask the organization's admin for a key with it"
        ),
    };
    let mut response = json(StatusCode::FORBIDDEN, Bytes::from_static(body.as_bytes()));
    response.headers_mut().insert(WWW_AUTHENTICATE, challenge);
    response
}

/// The 403 of a key limited to providers whose `provider` filter names `outside`, one not
/// among them: refused rather than answered with an empty page, and named, as the caller
/// gave it.
pub(crate) fn outside_providers(outside: &str) -> Response<ApiBody> {
    let message = serde_json::Value::from(format!(
        "this API key may not read the orders of provider {outside}: it is limited to other providers"
    ));
    let body = format!(
        r#"{{"meta":{},"error":{{"message":{message}}}}}"#,
        meta_json!()
    );
    json(StatusCode::FORBIDDEN, Bytes::from(body))
}

/// A 401 with the `WWW-Authenticate` challenge `challenge`.
///
/// One body for every reason, so a caller learns nothing about a key it does not hold
/// (revoked, expired, unknown); the reason goes to the metrics. The challenge still says
/// whether a token was presented (RFC 6750 section 3).
pub(crate) fn unauthorized(challenge: HeaderValue) -> Response<ApiBody> {
    let mut response = json(
        StatusCode::UNAUTHORIZED,
        Bytes::from_static(UNAUTHORIZED_BODY.as_bytes()),
    );
    response.headers_mut().insert(WWW_AUTHENTICATE, challenge);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A header map as the bytes hyper writes it: every value in order, with its name.
    fn written(headers: &HeaderMap) -> Vec<(String, String)> {
        headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect()
    }

    /// A page with a next one is answered from its own ready map: the headers must be those,
    /// in the order, that adding its `Link` to the tagged map wrote, through every later step
    /// an answer takes (the version's echo in its slot or under a host's own name, the
    /// request's id or none, a deprecation's `Link` and headers, `HEAD`'s length).
    #[test]
    fn a_page_with_a_next_one_writes_the_headers_of_the_tagged_map_and_its_link() {
        let etag = HeaderValue::from_static("\"tag\"");
        let link = HeaderValue::from_static("</v1/orders?page_token=t>; rel=\"next\"");
        let version = HeaderValue::from_static("2026-11-27");
        type Step = fn(&mut HeaderMap, &HeaderValue);
        let steps: [(&str, Step); 6] = [
            ("echo in its slot", |headers, version| {
                headers.insert(VERSION_SLOT, version.clone());
            }),
            ("echo under the host's own name", |headers, version| {
                headers.remove(VERSION_SLOT);
                headers.insert(HeaderName::from_static("x-api-version"), version.clone());
            }),
            ("no request id", |headers, _| {
                headers.remove(REQUEST_ID_HEADER);
            }),
            ("a request id", |headers, _| {
                headers.insert(REQUEST_ID_HEADER, HeaderValue::from_static("req-1"));
            }),
            ("a deprecation", |headers, _| {
                headers.append(
                    LINK,
                    HeaderValue::from_static("<https://d>; rel=\"deprecation\""),
                );
                headers.insert(
                    HeaderName::from_static("deprecation"),
                    HeaderValue::from_static("@1"),
                );
            }),
            ("HEAD", |headers, _| {
                headers.insert(CONTENT_LENGTH, HeaderValue::from(10));
            }),
        ];
        for first in 0..steps.len() {
            for second in 0..steps.len() {
                let mut ready = tagged_headers_with_link(&etag, link.clone());
                let mut added = tagged_headers(&etag);
                added.insert(LINK, link.clone());
                for (_, step) in [&steps[first], &steps[second]] {
                    step(&mut ready, &version);
                    step(&mut added, &version);
                }
                assert_eq!(
                    written(&ready),
                    written(&added),
                    "{} then {}",
                    steps[first].0,
                    steps[second].0
                );
            }
        }
    }

    #[test]
    fn error_responses_for_hosts_share_the_envelope() {
        use http_body::Body;
        for status in [StatusCode::GATEWAY_TIMEOUT, StatusCode::SERVICE_UNAVAILABLE] {
            let response = error_response(status);
            assert_eq!(response.status(), status);
            assert_eq!(response.headers()[CACHE_CONTROL], "no-store");
            assert!(!response.headers().contains_key(REQUEST_ID_HEADER));
            let length = response.body().size_hint().exact().unwrap();
            assert!(length > 0);
        }
        let gateway = error_response(StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            gateway.body().len(),
            br#"{"meta":{"version":"v1","status":"beta"},"error":{"message":"gateway timeout"}}"#
                .len()
        );
    }

    #[test]
    fn every_fixed_body_is_json_with_meta() {
        let bodies = [error_json!("not found"), UNAUTHORIZED_BODY];
        for body in bodies {
            let value: serde_json::Value = serde_json::from_str(body).unwrap();
            assert_eq!(value["meta"]["version"], "v1");
            assert_eq!(value["meta"]["status"], "beta");
            assert!(value["error"]["message"].is_string());
        }
        let me = [
            ME_OPEN,
            br#"{"organization":{"id":"o","name":"n"}}"#,
            ME_CLOSE,
        ]
        .concat();
        serde_json::from_slice::<serde_json::Value>(&me).unwrap();
        let orders = [ORDERS_OPEN, b"[]", ORDERS_CLOSE].concat();
        let value: serde_json::Value = serde_json::from_slice(&orders).unwrap();
        assert_eq!(value["data"]["orders"], serde_json::json!([]));
    }
}
