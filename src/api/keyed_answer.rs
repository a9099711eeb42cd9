//! The steps of answering a request that carries a well-formed key, top to bottom: look the
//! key up (through the failed-authentication throttle when it is on: [`throttle`]), check the
//! client's address, ask the rate limiter, read the orders (or the events feed); the answer itself is built in
//! [`response::keyed`].
//!
//! The flow never waits itself. Each step is an [`Ask`]: a question to one store that takes
//! only the reply to that question, so no step can be handed a reply it did not ask for (a
//! compile error, never a runtime case). The drivers in [`store_drivers`](super::store_drivers)
//! ask the stores; a new step is a new variant of [`Ask`], which both drivers must answer.

use std::sync::Arc;

use http::uri::PathAndQuery;
use http::{Response, StatusCode};

use crate::api::body::ApiBody;
use crate::api::conditional::IfNoneMatch;
use crate::api::config::Config;
use crate::api::events_cache::{self, Read};
use crate::api::events_request::EventsRequest;
use crate::api::me_cache::{with_me_representation, KeyAccess};
use crate::api::pagination::PageRequest;
use crate::api::request_facts::{count_usage, KeyedRoute, RequestFacts};
use crate::api::response::keyed::{self, PageAnswer};
use crate::api::response::{self, ApiError};
#[cfg(doc)]
use crate::api::throttle;
use crate::api::throttle::{refusal_reason, AtHandAsk, Charge, FailuresAsk, ThrottleStep};
use crate::api::versioning::AskedVersion;
use crate::key::KeyDigest;
use crate::log::record_in_request_span;
use crate::metrics::{self, AuthFailureReason, StoreCall};
use crate::model::OrderPage;
use crate::rate_limit::{or_unlimited, RateLimitDecision};
use crate::store::{
    DeprecatedCallTotal, EventFeed, EventQuery, EventsPage, KeyLookup, OrderQuery, Principal,
    StoreError, UsageOutcome, UsageRoute,
};
use crate::versions::ApiVersion;

/// What serving a request needs once its key is known to be usable.
pub(crate) struct Serving {
    route: KeyedRoute,
    if_none_match: Option<IfNoneMatch>,
    /// The version that answers, or `None` for a version header that names none offered.
    version: Option<ApiVersion>,
}

/// The flow after a reply: done, or with a next question.
pub(crate) enum AfterReply {
    Done(Response<ApiBody>),
    /// Done, with the 429 of the failure throttle: answered after the throttle's delay.
    Throttled(Response<ApiBody>),
    Next(Ask),
}

/// What the flow asks next, to which store; each takes only the reply to its question.
pub(crate) enum Ask {
    /// The key store's lookup of the key.
    Key(KeyAsk),
    /// The throttle's first question: the key store's answer at hand, never waited for.
    KeyAtHand(AtHandAsk),
    /// The throttle's: the failure limiter's decision for the client's budget.
    Failures(FailuresAsk),
    /// The rate limiter's decision for the key.
    Limit(LimitAsk),
    /// The order store's page of the organization's orders.
    Orders(OrdersAsk),
    /// The events feed's part of the organization's feed.
    Events(EventsAsk),
    /// The key's calls of the deprecations, for `GET /deprecations`.
    Deprecations(DeprecationsAsk),
}

impl Ask {
    /// The first question about the key whose digest is `digest`.
    pub(crate) fn first(facts: RequestFacts, digest: KeyDigest) -> Self {
        if facts.throttle_failures {
            Self::KeyAtHand(AtHandAsk::new(facts, digest))
        } else {
            Self::Key(KeyAsk::new(facts, digest, Charge::Unthrottled))
        }
    }

    /// The store call that answers the question.
    pub(crate) fn call(&self) -> StoreCall {
        match self {
            Self::Key(_) | Self::KeyAtHand(_) => StoreCall::KeyLookup,
            Self::Failures(_) => StoreCall::AuthFailureCheck,
            Self::Limit(_) => StoreCall::RateLimitCheck,
            Self::Orders(_) => StoreCall::NewestOrders,
            Self::Events(_) => StoreCall::OrderEvents,
            Self::Deprecations(_) => StoreCall::DeprecatedCalls,
        }
    }

    /// The key and route of the request once its key is known to be usable: what a store
    /// timeout from here on is counted against.
    pub(crate) fn usage_key(&self) -> Option<(Arc<str>, UsageRoute)> {
        match self {
            Self::Limit(ask) => Some((
                ask.principal.key_id.clone(),
                ask.serving.route.usage_route(),
            )),
            Self::Orders(ask) => Some((ask.principal.key_id.clone(), UsageRoute::Orders)),
            Self::Events(ask) => Some((ask.principal.key_id.clone(), UsageRoute::Events)),
            Self::Deprecations(ask) => {
                Some((ask.principal.key_id.clone(), UsageRoute::Deprecations))
            }
            Self::Key(_) | Self::KeyAtHand(_) | Self::Failures(_) => None,
        }
    }
}

/// The key store's lookup of the key.
pub(crate) struct KeyAsk {
    facts: RequestFacts,
    digest: KeyDigest,
    charge: Charge,
}

impl KeyAsk {
    pub(crate) fn new(facts: RequestFacts, digest: KeyDigest, charge: Charge) -> Self {
        Self {
            facts,
            digest,
            charge,
        }
    }

    /// The digest of the key asked about.
    pub(crate) fn digest(&self) -> &KeyDigest {
        &self.digest
    }

    /// Whether the store itself must answer, past its memory (which had no answer a moment
    /// ago): the throttle asked it already.
    pub(crate) fn past_memory(&self) -> bool {
        self.charge.past_memory()
    }

    /// Takes the key store's lookup.
    pub(crate) fn answer(
        self,
        config: &Config,
        found: Result<KeyLookup, StoreError>,
    ) -> AfterReply {
        let Self {
            facts,
            digest,
            charge,
        } = self;
        match found {
            Ok(KeyLookup::Valid(principal)) => {
                charge.valid(config);
                authenticated(config, facts, principal)
            }
            Ok(lookup) => {
                facts.count_refusal(config, &lookup);
                let reason = refusal_reason(&lookup);
                after_throttle(config, charge.refused(config, facts, &digest, reason))
            }
            Err(err) => AfterReply::Done(keyed::store_failed(config, err)),
        }
    }
}

/// The flow after a step of the throttle.
pub(crate) fn after_throttle(config: &Config, step: ThrottleStep) -> AfterReply {
    match step {
        ThrottleStep::LookUp(facts, digest, charge) => {
            AfterReply::Next(Ask::Key(KeyAsk::new(facts, digest, charge)))
        }
        ThrottleStep::Found(facts, digest, found) => {
            KeyAsk::new(facts, digest, Charge::Unthrottled).answer(config, found)
        }
        ThrottleStep::Failures(ask) => AfterReply::Next(Ask::Failures(ask)),
        ThrottleStep::Refused(response) => AfterReply::Done(response),
        ThrottleStep::Throttled(response) => AfterReply::Throttled(response),
    }
}

/// The flow once the key is known to be valid: refused from an address outside its ranges,
/// else its use recorded and on to the rate limiter, if there is one.
fn authenticated(config: &Config, facts: RequestFacts, principal: Principal) -> AfterReply {
    // Before the rate limiter: a leaked key used from elsewhere must not spend its owner's
    // budget. Not a use of the key either.
    if !facts.allows(&principal) {
        metrics::auth_failed(AuthFailureReason::AddressNotAllowed);
        count_usage(
            config,
            facts.route.usage_route(),
            &principal.key_id,
            UsageOutcome::AddressNotAllowed,
        );
        return AfterReply::Done(ApiError::Forbidden.into_response());
    }
    // A use of the key (its last use recorded), but not of its rate limit: a refusal like
    // the address's, counted as one of its own kind.
    // A key limited to providers reads no feed that cannot show it its view (a host's store
    // written before views): it would see every order's events.
    let missing = facts.route.permission().filter(|permission| {
        !principal.permissions().allows(*permission)
            || (*permission == crate::key::Permission::Events
                && principal.providers().is_some()
                && !config
                    .events
                    .as_ref()
                    .is_some_and(|feed| feed.serves_provider_views()))
    });
    if let Some(recorder) = &config.last_used {
        recorder.record(&principal.key_id);
    }
    if let (Some(recorder), false) = (&config.deprecated_calls, facts.concerned.is_none()) {
        config
            .deprecations
            .count(recorder, &principal.key_id, facts.concerned);
    }
    let version = match facts.version {
        AskedVersion::Pinned => Some(config.versions.pinned(principal.api_version)),
        AskedVersion::Named(version) => Some(version),
        AskedVersion::Unknown => None,
    };
    // The version's own deprecation, known only now: counted (under the version's name, as
    // every call is when calls per version are), and gone past its enforced sunset as a
    // route's is.
    let deprecated_version = version.and_then(|version| config.deprecations.of_version(version));
    if let (Some(recorder), Some(version)) = (&config.deprecated_calls, version) {
        if config.calls_per_version || deprecated_version.is_some() {
            if let Some(target) = config.versions.target(version) {
                recorder.record(&principal.key_id, target);
            }
        }
    }
    let mut gone = facts.gone;
    if let Some(index) = deprecated_version {
        let today = crate::model::Timestamp::now().as_datetime().date_naive();
        if gone.is_none()
            && config
                .deprecations
                .get(index)
                .is_some_and(|deprecation| deprecation.is_gone(today))
        {
            gone = Some(index);
        }
    }
    if let Some(permission) = missing {
        metrics::auth_failed(AuthFailureReason::PermissionMissing);
        let challenge = config.challenges.insufficient_scope(permission);
        let response = response::insufficient_scope(challenge, permission);
        return finish(
            config,
            facts.route.usage_route(),
            &principal,
            None,
            version,
            response,
        );
    }
    // Past an enforced sunset: gone, without spending the key's rate limit.
    if let Some(deprecation) = gone.and_then(|index| config.deprecations.get(index)) {
        let response = response::past_sunset(deprecation);
        return finish(
            config,
            facts.route.usage_route(),
            &principal,
            None,
            version,
            response,
        );
    }
    config
        .usage
        .request(&principal.organization.id, &principal.key_id);
    let serving = Serving {
        route: facts.route,
        if_none_match: facts.if_none_match,
        version,
    };
    if config.rate_limiter.is_some() {
        return AfterReply::Next(Ask::Limit(LimitAsk { serving, principal }));
    }
    limited(config, serving, principal, None)
}

/// The rate limiter's decision for the key.
pub(crate) struct LimitAsk {
    serving: Serving,
    principal: Principal,
}

impl LimitAsk {
    /// The name of the key's budget: its id.
    pub(crate) fn budget(&self) -> &str {
        &self.principal.key_id
    }

    /// Takes the limiter's decision.
    pub(crate) fn answer(
        self,
        config: &Config,
        decided: Result<RateLimitDecision, StoreError>,
    ) -> AfterReply {
        limited(config, self.serving, self.principal, or_unlimited(decided))
    }
}

/// The flow once the limiter decided (or there is none): refused, `/me` answered, or on to
/// read the orders.
fn limited(
    config: &Config,
    serving: Serving,
    principal: Principal,
    decision: Option<RateLimitDecision>,
) -> AfterReply {
    let Serving {
        route,
        if_none_match,
        version,
    } = serving;
    let usage_route = route.usage_route();
    let done = |response| finish(config, usage_route, &principal, decision, version, response);
    if decision.is_some_and(|decision| !decision.is_allowed()) {
        config.usage.rate_limited(&principal.organization.id);
        return done(ApiError::TooManyRequests.into_response());
    }
    let Some(version) = version else {
        return done(response::unknown_version(
            config.versions.unknown_header(),
            &config.versions,
        ));
    };
    // A route a later version added is not found at the versions before it.
    if !config.versions.chain().has_route(route.path(), version) {
        return done(ApiError::NotFound.into_response());
    }
    let (request, path) = match route {
        KeyedRoute::Me => {
            let chain = config.versions.chain();
            let tagged = config.conditional_requests;
            let access = KeyAccess::of(&principal);
            // Only clones of the parts leave the thread's cache (small enough to move without
            // a copy call); the response is made out here.
            let me =
                with_me_representation(chain, version, &principal.organization, access, |me| {
                    (me.body.clone(), tagged.then(|| me.tagged_headers.clone()))
                });
            return done(match me {
                Ok((body, tagged_headers)) => {
                    keyed::me(if_none_match.as_ref(), body, tagged_headers)
                }
                Err(err) => failed(config, &principal, StoreError::other(err)),
            });
        }
        KeyedRoute::Orders(parsed, path) => {
            // A parameter the version did not have is answered as it answered one it did not
            // know: the query read again without it.
            let older = config.versions.chain().query_at(
                "/orders",
                path.query().unwrap_or_default(),
                version,
            );
            let parsed = match older {
                None => parsed,
                Some(older) => PageRequest::parse(Some(&older)),
            };
            match parsed {
                Ok(mut request) => {
                    if let Some(restrictions) = principal
                        .shared_restrictions()
                        .filter(|restrictions| restrictions.providers.is_some())
                    {
                        if let Err(outside) = request.within(restrictions.clone()) {
                            return done(response::outside_providers(&outside));
                        }
                    }
                    (request, path)
                }
                Err(bad) => return done(ApiError::BadPageRequest(bad).into_response()),
            }
        }
        KeyedRoute::Versions => {
            let pinned = config.versions.pinned(principal.api_version);
            return done(response::versions(
                config.versions.chain(),
                pinned,
                &config.deprecations,
            ));
        }
        KeyedRoute::Deprecations => {
            if config.deprecated_calls.is_none() || config.deprecations.is_empty() {
                return done(response::deprecations(&config.deprecations, None));
            }
            return AfterReply::Next(Ask::Deprecations(DeprecationsAsk {
                principal,
                decision,
                version,
            }));
        }
        KeyedRoute::Events(Err(bad), _) => {
            return done(ApiError::BadEventsRequest(bad).into_response())
        }
        KeyedRoute::Events(Ok(request), path) => {
            return match request.query_for(&principal.organization.id) {
                Ok(query) => AfterReply::Next(Ask::Events(EventsAsk {
                    // The key's view: the orders of its providers, if it is limited to any.
                    query: query.with_providers(principal.providers().cloned()),
                    principal,
                    decision,
                    version,
                    request,
                    path,
                    revision: None,
                })),
                Err(bad) => done(ApiError::BadEventsRequest(bad).into_response()),
            };
        }
    };
    match request.query_for(&principal.organization.id) {
        Ok(query) => AfterReply::Next(Ask::Orders(OrdersAsk {
            if_none_match,
            principal,
            decision,
            version,
            query,
            request,
            path,
        })),
        Err(bad) => done(ApiError::BadPageRequest(bad).into_response()),
    }
}

/// The order store's page of the organization's orders.
pub(crate) struct OrdersAsk {
    if_none_match: Option<IfNoneMatch>,
    principal: Principal,
    decision: Option<RateLimitDecision>,
    version: ApiVersion,
    query: OrderQuery,
    /// The request the page answers, and the path it came in on (for the next page's link).
    request: PageRequest,
    path: PathAndQuery,
}

impl OrdersAsk {
    /// The organization whose orders are read.
    pub(crate) fn organization_id(&self) -> &str {
        &self.principal.organization.id
    }

    /// Which page.
    pub(crate) fn query(&self) -> &OrderQuery {
        &self.query
    }

    /// Takes the order store's page.
    pub(crate) fn answer(self, config: &Config, page: Result<OrderPage, StoreError>) -> AfterReply {
        let response = match page {
            Ok(page) => {
                let asked = PageAnswer {
                    request: &self.request,
                    path: &self.path,
                    organization_id: &self.principal.organization.id,
                    query: &self.query,
                    version: self.version,
                };
                keyed::orders(config, self.if_none_match.as_ref(), &asked, &page)
            }
            Err(err) => failed(config, &self.principal, err),
        };
        finish(
            config,
            UsageRoute::Orders,
            &self.principal,
            self.decision,
            Some(self.version),
            response,
        )
    }
}

/// The events feed's part of the organization's feed.
pub(crate) struct EventsAsk {
    principal: Principal,
    decision: Option<RateLimitDecision>,
    version: ApiVersion,
    query: EventQuery,
    /// The request the answer is for, and the path it came in on (for the resuming link).
    request: EventsRequest,
    path: PathAndQuery,
    /// The feed's revision, taken before the feed is read ([`EventsAsk::answer_at_hand`]):
    /// what the answer is kept by.
    revision: Option<u64>,
}

impl EventsAsk {
    /// The organization whose feed is read.
    pub(crate) fn organization_id(&self) -> &str {
        &self.principal.organization.id
    }

    /// Which part of the feed.
    pub(crate) fn query(&self) -> &EventQuery {
        &self.query
    }

    /// The answer this thread kept of the same read at the feed's revision now, without
    /// reading the feed; else `None`, the revision taken for the read of the feed to be kept
    /// by. The revision is taken and the answer looked for in one go (rule `feed-revision`).
    pub(crate) fn answer_at_hand(&mut self, config: &Config) -> Option<AfterReply> {
        let feed = config.events.as_ref()?;
        self.revision = feed.revision_now(&self.principal.organization.id);
        let kept = self
            .revision
            .and_then(|revision| events_cache::answered_read(&self.read(config, feed, revision)));
        let (body, link) = kept?;
        Some(self.finish(config, keyed::events(body, link, self.echo_next(config))))
    }

    /// Takes the feed's answer, and keeps it by the revision taken before the read.
    pub(crate) fn answer(
        self,
        config: &Config,
        page: Result<EventsPage, StoreError>,
    ) -> AfterReply {
        let organization_id = &self.principal.organization.id;
        let response = match page.map(|page| {
            keyed::events_page(config, self.version, organization_id, &self.query, page)
        }) {
            Ok(Ok((body, through))) => {
                let link = self
                    .request
                    .next_link(self.path.path(), organization_id, through);
                if let (Some(feed), Some(revision)) = (&config.events, self.revision) {
                    let read = self.read(config, feed, revision);
                    events_cache::keep_read(&read, &body, link.as_ref());
                }
                keyed::events(body, link, self.echo_next(config))
            }
            Ok(Err(refused)) => refused.into_response(),
            Err(err) => failed(config, &self.principal, err),
        };
        self.finish(config, response)
    }

    /// Whether the version's echo is the first header [`finish`] adds: no rate limiter's
    /// headers and no deprecation of the answer's version's come before it.
    fn echo_next(&self, config: &Config) -> bool {
        self.decision.is_none()
            && config
                .deprecations
                .of_version(self.version)
                .and_then(|index| config.deprecations.notices_of(index))
                .is_none()
    }

    /// This read of `feed` at `revision`, answered by `config`, as answers are kept by.
    fn read<'a>(
        &'a self,
        config: &'a Config,
        feed: &'a Arc<dyn EventFeed>,
        revision: u64,
    ) -> Read<'a> {
        Read {
            feed,
            organization_id: &self.principal.organization.id,
            revision,
            chain: config.versions.chain(),
            version: self.version,
            query: &self.query,
            request: &self.request,
            path: self.path.path(),
        }
    }

    /// The flow's end with `response`: counted, limited, recorded as the route's.
    fn finish(&self, config: &Config, response: Response<ApiBody>) -> AfterReply {
        finish(
            config,
            UsageRoute::Events,
            &self.principal,
            self.decision,
            Some(self.version),
            response,
        )
    }
}

/// The key's calls of the deprecations, for `GET /deprecations`.
pub(crate) struct DeprecationsAsk {
    principal: Principal,
    decision: Option<RateLimitDecision>,
    version: ApiVersion,
}

impl DeprecationsAsk {
    /// The organization whose key asks.
    pub(crate) fn organization_id(&self) -> &str {
        &self.principal.organization.id
    }

    /// The key that asks.
    pub(crate) fn key_id(&self) -> &str {
        &self.principal.key_id
    }

    /// Takes the store's totals of the key's deprecated calls.
    pub(crate) fn answer(
        self,
        config: &Config,
        calls: Result<Vec<DeprecatedCallTotal>, StoreError>,
    ) -> AfterReply {
        let response = match calls {
            Ok(calls) => response::deprecations(&config.deprecations, Some(&calls)),
            Err(err) => failed(config, &self.principal, err),
        };
        finish(
            config,
            UsageRoute::Deprecations,
            &self.principal,
            self.decision,
            Some(self.version),
            response,
        )
    }
}

/// The response to `principal` when a store failed: the organization recorded in the host's
/// request span first, so the failure's log line carries it.
fn failed(config: &Config, principal: &Principal, err: StoreError) -> Response<ApiBody> {
    record_in_request_span("organization_id", || principal.organization.id.as_str());
    keyed::store_failed(config, err)
}

/// The flow done with `response` to `principal`: counted in the key's usage on `usage_route`,
/// with the rate-limit budget when a limiter decided and the version that answered
/// (`version`, none for a version header that named none offered); the organization recorded
/// in the host's request span. The response is finished where it lies and moved once: it is
/// large.
fn finish(
    config: &Config,
    usage_route: UsageRoute,
    principal: &Principal,
    decision: Option<RateLimitDecision>,
    version: Option<ApiVersion>,
    mut response: Response<ApiBody>,
) -> AfterReply {
    record_in_request_span("organization_id", || principal.organization.id.as_str());
    if config.key_usage.is_some() {
        let outcome = match response.status() {
            StatusCode::OK => UsageOutcome::Ok,
            StatusCode::NOT_MODIFIED => UsageOutcome::NotModified,
            StatusCode::TOO_MANY_REQUESTS => UsageOutcome::RateLimited,
            // A 403 after authentication: the key's restrictions (a permission it lacks, a
            // provider it may not read).
            StatusCode::FORBIDDEN => UsageOutcome::PermissionMissing,
            _ => UsageOutcome::Error,
        };
        count_usage(config, usage_route, &principal.key_id, outcome);
    }
    if let Some(decision) = decision {
        decision.write_headers(response.headers_mut());
    }
    let echo = version.and_then(|version| config.versions.echo(version));
    let headers = response.headers_mut();
    if let Some(notices) = version
        .and_then(|version| config.deprecations.of_version(version))
        .and_then(|index| config.deprecations.notices_of(index))
    {
        crate::deprecation::add_notices(headers, notices);
    }
    match echo {
        // Into the tagged answers' slot when the header is the default one.
        Some((name, value)) if name == response::VERSION_SLOT => {
            headers.insert(name, value);
        }
        echo => {
            headers.remove(response::VERSION_SLOT);
            if let Some((name, value)) = echo {
                headers.insert(name, value);
            }
        }
    }
    AfterReply::Done(response)
}
