//! [`KeyManagementService`]: the server side of a host's Settings -> Partner API section, as a
//! terminal tower [`Service`] over any [`KeyManager`].
//!
//! A host mounts it under a path of its choosing, behind its own user authentication, and
//! tells it which organization the signed-in user acts for with the request extension
//! [`ActingOrganization`]; a request without one is refused with a 401 (there is no default
//! organization). JSON in and out; the OpenAPI 3.1 description is served at `/openapi.json`:
//!
//! | method and path (below the mount) | does | answers |
//! |---|---|---|
//! | `GET /keys` | lists the organization's keys, newest first | 200 `{"data": {"keys": [record, ...]}}` |
//! | `POST /keys` `{"label", "environment", "expiresAt", "allowedIps"}` | issues a key | 201 `{"data": {"key": "pk_...", "record": record}}` |
//! | `GET /keys/{id}` | shows one key | 200 `{"data": {"record": record}}` |
//! | `POST /keys/{id}/revoke` `{}` | revokes it | 200 `{"data": {"record": record}}` |
//! | `POST /keys/{id}/roll` `{"overlapSeconds", "expiresInSeconds"}` | rolls it (the new key lives `expiresInSeconds`, or as long as the old one was issued for) | 201 `{"data": {"key": "pk_...", "record": record}}` |
//! | `POST /keys/{id}/restrict` `{"allowedIps": ["192.0.2.0/24", ...]}` | sets the address ranges it may be used from (`[]`: any) | 200 `{"data": {"record": record}}` |
//! | `GET /policy` | the organization's key policy | 200 `{"data": {"policy": {"maxKeyLifetimeSeconds", "maxActiveKeys", "maxWebhookEndpoints"}}}` |
//! | `GET /api-versions/calls` | each key's calls per API version in the last 30 days (with `with_deprecated_calls`) | 200 `{"data": {"since", "keys": [{"keyId", "versions": [{"version", "calls", "lastCallAt"}]}]}}` |
//! | `GET /keys/{id}/api-version/preview?version=DATE` | what the key would read at that version, from the organization's own orders and events (with [`with_preview`](KeyManagementService::with_preview)) | 200 `{"data": {"keyId", "from", "to", "changes", "orders": [{"id", "from", "to", "differences": [{"field", "change", "from", "to"}]}], "events": [...]}}` |
//! | `GET /abilities` | what this host offers besides the keys themselves | 200 `{"data": {"abilities": {"keyPolicy", "leakReports", "lastUse", "webhooks", "webhookTestEvents", "webhookDeliveryHistory", "webhookApiVersions", "usage", "deprecatedCalls", "auditLog"}}}` (booleans) |
//! | `GET /keys/{id}/usage?from=&to=&granularity=hour\|day` | one key's requests per bucket, route and outcome (with [`with_usage`](KeyManagementService::with_usage)) | 200 `{"data": {"keyId", "from", "to", "granularity", "total", "buckets": [{"start", "route", "outcome", "count"}]}}` |
//! | `GET /keys/{id}/permissions/suggestion` | the narrowest permissions that would have allowed every call of the key in the last 30 days, and those it holds unused (with `with_usage` and a store that keeps restrictions) | 200 `{"data": {"suggestion": {"keyId", "from", "to", "held", "used": {"orders": n, "events": n}, "suggested", "unused"}}}` |
//! | `GET /permissions/suggestions` | the same for every key not revoked | 200 `{"data": {"suggestions": [...]}}` |
//! | `GET /usage?from=&to=` | every key's totals per outcome (with `with_usage`) | 200 `{"data": {"from", "to", "keys": [{"keyId", "total", "outcomes": {"ok": n, ...}}]}}` |
//! | `GET /deprecated-calls` | for each deprecation, the keys that called it in the last 30 days (with [`with_deprecated_calls`](KeyManagementService::with_deprecated_calls)) | 200 `{"data": {"since", "deprecations": [{"target", "route", "parameter", "deprecatedOn", "sunsetOn", "link", "enforced", "declared", "keys": [{"keyId", "calls", "lastCallAt"}]}]}}` |
//!
//! Every optional ability (key policies, usage, the audit log, webhooks, and of them test
//! events and the delivery history) is asked one way: `GET /abilities` says which are offered
//! (the Settings page reads it), and a path of one not offered answers 404 `{"error":
//! {"message": "this host does not offer ..."}}` and is left out of the served OpenAPI
//! document.
//!
//! The plaintext key is in exactly one response: the one that created it. Every response is
//! `Cache-Control: no-store`; no body is logged. Errors are `{"error": {"message": "..."}}`
//! with the status that fits: 400 (not JSON), 401 (no organization), 403 (the host's CSRF
//! check refused), 404 (no such key in this organization, or no such path), 405, 409 (a revoked
//! or expired key cannot be rolled; the organization has as many active keys as its policy
//! allows), 413 (a body over 16 KiB), 415 (not `application/json`), 422 (JSON
//! that breaks a rule: an unknown member, an expiry in the past, a label over 100 characters,
//! an unknown environment, a lifetime the organization's key policy does not allow, an address
//! range that is not a network, more than 100 ranges), 500, 503. A refused request changes nothing.
//!
//! # Cross-site request forgery
//!
//! A state-changing request (every `POST`) must carry `Content-Type: application/json`: a
//! browser sends that cross-origin only after a CORS preflight, and this service answers no
//! preflight and sends no CORS header, so another site's page cannot make the signed-in user's
//! browser issue, revoke or roll a key. If the host gives a CSRF check
//! ([`with_csrf_check`](KeyManagementService::with_csrf_check), say its own token header), a
//! `POST` must pass it too. The host must still: authenticate the user before this service
//! (and set [`ActingOrganization`] only for an organization the user may act for), keep its
//! session cookie `SameSite=Lax` or `Strict`, `Secure` and `HttpOnly`, not add a CORS layer
//! that allows other origins with credentials in front of this service, and serve the page
//! over HTTPS.

mod routes;

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::CONTENT_TYPE;
use http::request::Parts;
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use tower::Service;

use super::bodies::{
    api_versions, key_permissions, offered_version, PermissionsRequest, PinVersionRequest,
    ProvidersRequest,
};
use super::bodies::{
    caller_message, created, json, one, read_json, Failure, IssueRequest, RestrictRequest,
    RevokeRequest, RollRequest,
};
use super::budget::within_budget;
use super::limits::DEFAULT_MANAGEMENT_WRITES;
#[cfg(feature = "webhooks")]
use super::limits::DEFAULT_WEBHOOK_ACTIONS;
use super::limits::{MAX_LIFETIME, MAX_OVERLAP};
use crate::api::body::ApiBody;
use crate::api::client_address::{ClientAddr, PeerAddr, TrustedProxies};
use crate::model::Timestamp;
use crate::store::AuditContext;
use crate::store::{KeyManager, NewKey, RollKey};

/// The OpenAPI 3.1 description of the service, as checked in.
pub const OPENAPI_DOCUMENT: &str = include_str!("openapi.json");

/// The organization the signed-in user acts for: the request extension the host's session
/// middleware sets before [`KeyManagementService`].
///
/// ```
/// use partner_api::management::ActingOrganization;
///
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(ActingOrganization::new("org_1"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ActingOrganization {
    organization_id: Arc<str>,
    actor: Option<Arc<str>>,
}

impl ActingOrganization {
    /// Creates the extension for the organization `organization_id`.
    pub fn new(organization_id: impl Into<Arc<str>>) -> Self {
        Self {
            organization_id: organization_id.into(),
            actor: None,
        }
    }

    /// Names who is signed in (a user's name or email): the actor of the audit log's entries
    /// of the request's changes. Without it they are
    /// [`UNATTRIBUTED`](crate::store::UNATTRIBUTED). Never taken from the request's body.
    #[must_use]
    pub fn with_actor(mut self, actor: impl Into<Arc<str>>) -> Self {
        self.actor = Some(actor.into());
        self
    }

    /// Returns the organization's id.
    pub fn id(&self) -> &str {
        &self.organization_id
    }

    /// Returns who is signed in, if the host said.
    pub fn actor(&self) -> Option<&str> {
        self.actor.as_deref()
    }
}

/// The audit context of a request's changes: the host's actor, the client's address (the
/// peer's, or behind `trusted` proxies the one they forwarded), the user agent and the
/// request id.
fn audit_context(parts: &Parts, trusted: &TrustedProxies) -> AuditContext {
    let acting = parts.extensions.get::<ActingOrganization>();
    let actor = acting
        .and_then(ActingOrganization::actor)
        .unwrap_or(crate::store::UNATTRIBUTED);
    let mut context = AuditContext::new(actor);
    let peer = parts
        .extensions
        .get::<PeerAddr>()
        .map(|PeerAddr(peer)| *peer);
    if let Some(ClientAddr::Known(client) | ClientAddr::Unparseable(client)) =
        trusted.client_addr(peer, &parts.headers)
    {
        context = context.with_source_address(client);
    }
    let header = |name| {
        parts
            .headers
            .get(name)
            .and_then(|value: &http::HeaderValue| value.to_str().ok())
    };
    if let Some(user_agent) = header(http::header::USER_AGENT.as_str()) {
        context = context.with_user_agent(user_agent);
    }
    if let Some(request_id) = header(crate::api::request_id::REQUEST_ID_HEADER.as_str()) {
        context = context.with_request_id(request_id);
    }
    context
}

/// A host's own CSRF check of a state-changing request.
type CsrfCheck = dyn Fn(&Parts) -> bool + Send + Sync;

/// The key-management API of a Settings page, as a tower [`Service`] (`Error = Infallible`,
/// so `axum::Router::nest_service` takes it). Clones are cheap and share the store.
///
/// ```
/// use partner_api::management::KeyManagementService;
/// use partner_api::MemoryStore;
///
/// let service = KeyManagementService::new(MemoryStore::new())
///     .with_csrf_check(|parts| parts.headers.contains_key("x-csrf-token"));
/// ```
#[derive(Clone)]
pub struct KeyManagementService {
    keys: Arc<dyn KeyManager>,
    prefix: Arc<str>,
    csrf: Option<Arc<CsrfCheck>>,
    usage: Option<Arc<dyn crate::store::UsageStore>>,
    deprecated_calls: Option<Arc<dyn crate::store::DeprecatedCallStore>>,
    /// What the API declared deprecated, which `GET /deprecated-calls` names with its dates.
    deprecations: Arc<[crate::deprecation::Deprecation]>,
    audit: Option<Arc<dyn crate::store::AuditLog>>,
    /// The budget per organization of every change (each one writes an audit entry).
    writes: Arc<crate::rate_limit::LocalRateLimiter>,
    /// The proxies whose forwarding headers name the client of an audit entry.
    trusted_proxies: Arc<TrustedProxies>,
    /// The API's versions: what a key may be pinned to.
    versions: crate::versions::Versions,
    /// Where a preview of a version reads the organization's orders and events.
    preview: Option<(
        Arc<dyn crate::store::OrderStore>,
        Arc<dyn crate::store::EventFeed>,
    )>,
    #[cfg(feature = "webhooks")]
    webhooks: Option<Arc<dyn crate::webhooks::WebhookManager>>,
    /// The budget per organization of the webhook actions that queue messages.
    #[cfg(feature = "webhooks")]
    webhook_actions: Arc<crate::rate_limit::LocalRateLimiter>,
}

impl KeyManagementService {
    /// Creates the service over `keys`, answering at the root of its mount (`/keys`).
    pub fn new(keys: impl KeyManager + 'static) -> Self {
        Self {
            keys: Arc::new(keys),
            prefix: Arc::from(""),
            csrf: None,
            usage: None,
            deprecated_calls: None,
            deprecations: Arc::from([]),
            audit: None,
            writes: Arc::new(crate::rate_limit::LocalRateLimiter::new(
                DEFAULT_MANAGEMENT_WRITES.0,
                DEFAULT_MANAGEMENT_WRITES.1,
            )),
            trusted_proxies: Arc::new(TrustedProxies::default()),
            versions: crate::versions::Versions::shipped(),
            preview: None,
            #[cfg(feature = "webhooks")]
            webhooks: None,
            #[cfg(feature = "webhooks")]
            webhook_actions: Arc::new(crate::rate_limit::LocalRateLimiter::new(
                DEFAULT_WEBHOOK_ACTIONS.0,
                DEFAULT_WEBHOOK_ACTIONS.1,
            )),
        }
    }

    /// Limits the webhook actions that queue messages (`test`, `retry`, `recover`) to one per
    /// `period` per organization, with bursts of `burst` ([`DEFAULT_WEBHOOK_ACTIONS`] by
    /// default): past it, `429` with `Retry-After`, so one organization cannot fill the
    /// delivery queue every organization shares. Counted in this process (each replica its
    /// own budget).
    #[cfg(feature = "webhooks")]
    #[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
    #[must_use]
    pub fn with_webhook_action_limit(
        mut self,
        period: std::time::Duration,
        burst: std::num::NonZeroU32,
    ) -> Self {
        self.webhook_actions = Arc::new(crate::rate_limit::LocalRateLimiter::new(period, burst));
        self
    }

    /// Serves the organization's webhook endpoints too, below `/webhooks`, from `manager`
    /// (feature `webhooks`). Without it those paths are 404 and absent from the OpenAPI
    /// document the service serves.
    #[cfg(feature = "webhooks")]
    #[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
    #[must_use]
    pub fn with_webhooks(
        mut self,
        manager: impl crate::webhooks::WebhookManager + 'static,
    ) -> Self {
        self.webhooks = Some(Arc::new(manager));
        self
    }

    /// Offers the API versions of `versions` (the API's
    /// [`with_versions`](crate::PartnerApi::with_versions)) instead of the crate's own: what a
    /// key may be issued at and pinned to, and what `GET /api-versions` lists. New keys are
    /// pinned to its newest.
    #[must_use]
    pub fn with_versions(mut self, versions: crate::versions::Versions) -> Self {
        self.versions = versions;
        self
    }

    /// Serves each key's usage too (`GET /keys/{id}/usage`, `GET /usage`), from `store`.
    /// Without it those paths are 404, absent from the OpenAPI document the service serves,
    /// and `GET /abilities` says `"usage": false`, so the Settings page hides usage.
    #[must_use]
    pub fn with_usage(mut self, store: impl crate::store::UsageStore + 'static) -> Self {
        self.usage = Some(Arc::new(store));
        self
    }

    /// Serves previews of API versions (`GET /keys/{id}/api-version/preview?version=DATE`):
    /// the organization's first page of orders and the oldest events its feed keeps, read
    /// from `store`, at the key's version and the asked one, with what differs field by
    /// field. Offered when the key store offers versions too
    /// ([`KeyAbility::ApiVersions`](crate::store::KeyAbility::ApiVersions)); without it the
    /// path is 404, absent from the served OpenAPI document, and `GET /abilities` says
    /// `"apiVersionPreview": false`, so the Settings page offers no preview.
    #[must_use]
    pub fn with_preview<S>(mut self, store: S) -> Self
    where
        S: crate::store::OrderStore + crate::store::EventFeed + 'static,
    {
        let store = Arc::new(store);
        self.preview = Some((store.clone(), store));
        self
    }

    /// Serves the keys' calls of deprecated routes and parameters too
    /// (`GET /deprecated-calls`), from `store`, which the API's
    /// [`DeprecatedCallRecorder`](crate::deprecated_calls::DeprecatedCallRecorder) writes.
    /// Without it the path is 404, absent from the OpenAPI document the service serves, and
    /// `GET /abilities` says `"deprecatedCalls": false`, so the Settings page hides its
    /// section.
    #[must_use]
    pub fn with_deprecated_calls(
        mut self,
        store: impl crate::store::DeprecatedCallStore + 'static,
    ) -> Self {
        self.deprecated_calls = Some(Arc::new(store));
        self
    }

    /// Names `deprecation` in `GET /deprecated-calls` (with its days and link) even before a
    /// key calls it: give the service each of the API's
    /// [`deprecations`](crate::PartnerApi::deprecations).
    #[must_use]
    pub fn with_deprecation(mut self, deprecation: crate::deprecation::Deprecation) -> Self {
        let mut deprecations = self.deprecations.to_vec();
        // A target declared again replaces its deprecation, as the API's does.
        deprecations.retain(|held| held.target() != deprecation.target());
        deprecations.push(deprecation);
        self.deprecations = deprecations.into();
        self
    }

    /// Serves the organization's security log too (`GET /audit`), from `log`. Without it the
    /// path is 404, absent from the OpenAPI document the service serves, and
    /// `GET /abilities` says `"auditLog": false`. The entries themselves are written by the
    /// store, with each change.
    ///
    /// The service starts no task: the host runs the log's retention with its
    /// [`Maintenance`](crate::maintenance::Maintenance::with_audit_retention).
    #[must_use]
    pub fn with_audit_log(mut self, log: impl crate::store::AuditLog + 'static) -> Self {
        self.audit = Some(Arc::new(log));
        self
    }

    /// Believes the forwarding header of requests from these proxies when it records where a
    /// change came from: an audit entry's source address is then the client's, as
    /// [`PartnerApi::with_trusted_proxies`](crate::PartnerApi::with_trusted_proxies) resolves
    /// it, not the proxy's. Give it the ranges the API was given.
    #[must_use]
    pub fn with_trusted_proxies(mut self, ranges: impl IntoIterator<Item = ipnet::IpNet>) -> Self {
        let header = self.trusted_proxies.header();
        self.trusted_proxies =
            Arc::new(TrustedProxies::new(ranges.into_iter().collect()).with_header(header));
        self
    }

    /// Reads the client's address behind trusted proxies from `header` only (default
    /// [`ClientAddressHeader::XForwardedFor`](crate::ClientAddressHeader::XForwardedFor)), as
    /// [`PartnerApi::with_client_address_header`](crate::PartnerApi::with_client_address_header).
    #[must_use]
    pub fn with_client_address_header(
        mut self,
        header: crate::api::client_address::ClientAddressHeader,
    ) -> Self {
        self.trusted_proxies = Arc::new((*self.trusted_proxies).clone().with_header(header));
        self
    }

    /// Limits the changes (every `POST`) to one per `period` per organization, with bursts of
    /// `burst` ([`DEFAULT_MANAGEMENT_WRITES`] by default): past it, `429` with `Retry-After`.
    /// Counted in this process (each replica its own budget).
    #[must_use]
    pub fn with_write_limit(
        mut self,
        period: std::time::Duration,
        burst: std::num::NonZeroU32,
    ) -> Self {
        self.writes = Arc::new(crate::rate_limit::LocalRateLimiter::new(period, burst));
        self
    }

    /// Answers below `prefix` (`"/settings/partner-api/api"` answers
    /// `/settings/partner-api/api/keys`), for hosts that do not strip their mount path as
    /// axum's `nest_service` does.
    ///
    /// # Panics
    ///
    /// When `prefix` is neither empty nor a path starting with `/`.
    #[must_use]
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        let prefix = prefix.trim_end_matches('/');
        assert!(
            prefix.is_empty() || prefix.starts_with('/'),
            "the prefix must be a path such as \"/settings/partner-api/api\""
        );
        self.prefix = Arc::from(prefix);
        self
    }

    /// Requires every state-changing request to pass `check` (the host's own CSRF check, say
    /// a token header that matches the session); a request that fails it is a 403.
    #[must_use]
    pub fn with_csrf_check(
        mut self,
        check: impl Fn(&Parts) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.csrf = Some(Arc::new(check));
        self
    }
}

impl fmt::Debug for KeyManagementService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyManagementService")
            .field("prefix", &self.prefix)
            .field("csrf_check", &self.csrf.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> Service<Request<B>> for KeyManagementService
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = Response<ApiBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let service = self.clone();
        ResponseFuture {
            future: Box::pin(async move {
                service
                    .answer(request)
                    .await
                    .unwrap_or_else(Failure::into_response)
            }),
        }
    }
}

/// The response future of [`KeyManagementService`].
pub struct ResponseFuture {
    future: Pin<Box<dyn Future<Output = Response<ApiBody>> + Send>>,
}

impl Future for ResponseFuture {
    type Output = Result<Response<ApiBody>, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.future.as_mut().poll(cx).map(Ok)
    }
}

impl fmt::Debug for ResponseFuture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl KeyManagementService {
    async fn answer<B>(&self, request: Request<B>) -> Result<Response<ApiBody>, Failure>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let (parts, body) = request.into_parts();
        let head = parts.method == Method::HEAD;
        let context = audit_context(&parts, &self.trusted_proxies);
        let mut response = context.scope(self.route(parts, body)).await?;
        if head {
            *response.body_mut() = ApiBody::empty();
        }
        Ok(response)
    }

    /// The organization the host says the user acts for.
    fn acting_organization(&self, parts: &Parts) -> Result<ActingOrganization, Failure> {
        parts
            .extensions
            .get::<ActingOrganization>()
            .cloned()
            .ok_or_else(|| Failure::new(StatusCode::UNAUTHORIZED, "sign in to manage API keys"))
    }

    /// Refuses a state-changing request that is not `application/json` (the browser's CSRF
    /// barrier) or fails the host's own check.
    fn check_state_change(&self, parts: &Parts) -> Result<(), Failure> {
        let json = parts
            .headers
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.split(';').next())
            .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
        if !json {
            return Err(Failure::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "send Content-Type: application/json",
            ));
        }
        if self.csrf.as_ref().is_some_and(|check| !check(parts)) {
            return Err(Failure::new(StatusCode::FORBIDDEN, "the CSRF check failed"));
        }
        Ok(())
    }
}
