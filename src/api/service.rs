//! [`PartnerApi`]: the API as a terminal tower [`Service`].

mod dispatch;
mod future;

pub use future::ResponseFuture;
use future::{handler_panicked, State};

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use tower::Service;

use crate::api::auth::{bearer_token, presented_key, Challenges};
use crate::api::body::ApiBody;
use crate::api::client_address::{ClientAddressHeader, TrustedProxies};
use crate::api::conditional::IfNoneMatch;
use crate::api::config::Config;
pub use crate::api::config::{
    DEFAULT_AUTH_FAILURE_DELAY, DEFAULT_AUTH_FAILURE_LIMIT, DEFAULT_PREFIX, DEFAULT_REALM,
    DEFAULT_RETRY_AFTER, DEFAULT_STORE_TIMEOUT,
};
use crate::api::deprecations::{Concerned, Notices};
use crate::api::events_request::EventsRequest;
use crate::api::keyed_answer::Ask;
use crate::api::mount_facts;
use crate::api::openapi;
use crate::api::pagination::PageRequest;
use crate::api::request_facts::{KeyedRoute, RequestFacts};
use crate::api::request_id;
use crate::api::response::keyed::unauthenticated;
use crate::api::response::{self, ApiError};
use crate::api::responses_metric::ResponseCounters;
use crate::api::routes::Route;
use crate::api::store_drivers::{self, ReadyOrWaiting};
use crate::api::versioning::{ApiVersions, AskedVersion};
use crate::deprecated_calls::DeprecatedCallRecorder;
use crate::deprecation::Deprecation;

use crate::last_used::LastUsedRecorder;
use crate::log::record_in_request_span;
use crate::metrics::UsageCounters;
#[cfg(doc)]
use crate::metrics::DEFAULT_MAX_ORGANIZATIONS;
use crate::rate_limit::RateLimiter;
use crate::store::{EventFeed, KeyStore, OrderStore};
use crate::usage::UsageRecorder;

/// The partner API (contract section 4) as a tower [`Service`] for any request body.
///
/// It answers `GET`/`HEAD` `{prefix}/me`, `{prefix}/orders`, `{prefix}/events` (with
/// [`with_events`](Self::with_events)) and `{prefix}/openapi.json` (the OpenAPI description,
/// without a key) and a JSON error for anything else; it never fails (`Error = Infallible`) and never reads the request body. Clones are
/// cheap and share the stores.
///
/// ```
/// use partner_api::{MemoryStore, PartnerApi};
///
/// let api = PartnerApi::from_store(MemoryStore::new()).with_prefix("/partner/v1");
/// assert_eq!(api.prefix(), "/partner/v1");
/// ```
#[derive(Clone)]
pub struct PartnerApi {
    config: Arc<Config>,
    /// The connection's peer, for a service made per connection ([`Self::with_peer_addr`]).
    peer: Option<SocketAddr>,
}

impl PartnerApi {
    /// Creates the API over separate key and order stores: any [`KeyStore`] and
    /// [`OrderStore`], an `Arc` of one included.
    pub fn new(keys: impl KeyStore + 'static, orders: impl OrderStore + 'static) -> Self {
        Self {
            config: Arc::new(Config::new(Arc::new(keys), Arc::new(orders))),
            peer: None,
        }
    }

    /// Creates the API over one store that holds both keys and orders.
    pub fn from_store<S: KeyStore + OrderStore + 'static>(store: S) -> Self {
        let store = Arc::new(store);
        Self::new(store.clone(), store)
    }

    /// Serves `GET {prefix}/events`, the organization's order events oldest first, from
    /// `feed` (without one, that path answers 404 as any unknown one). The API starts no
    /// task: the host runs the feed's retention with its
    /// [`Maintenance`](crate::maintenance::Maintenance::with_events_retention) (30 days,
    /// [`DEFAULT_EVENTS_RETENTION`](crate::store::DEFAULT_EVENTS_RETENTION), is the standalone
    /// host's default); an `after` older than what is kept answers 410 Gone.
    ///
    /// ```
    /// use partner_api::{MemoryStore, PartnerApi};
    ///
    /// let store = MemoryStore::new();
    /// let api = PartnerApi::from_store(store.clone()).with_events(store);
    /// ```
    #[must_use]
    pub fn with_events(mut self, feed: impl EventFeed + 'static) -> Self {
        Arc::make_mut(&mut self.config).events = Some(Arc::new(feed));
        self
    }

    /// Declares `deprecation` (see [`deprecation`](crate::deprecation)): every answer to a
    /// request it concerns carries `Deprecation`, and `Sunset` and `Link` when set (2xx, 304
    /// and 4xx alike); the served OpenAPI document marks it; an enforced one answers 410 Gone
    /// from its sunset on. With no deprecation declared, answers are as they always were. A
    /// deprecation of a target already declared (a route, or a route's parameter) replaces it.
    ///
    /// # Panics
    ///
    /// At a 65th target: an API declares at most 64.
    ///
    /// ```
    /// use partner_api::{deprecation::Deprecation, MemoryStore, PartnerApi};
    ///
    /// let api = PartnerApi::from_store(MemoryStore::new())
    ///     .with_deprecation("/orders?provider=2026-12-01,sunset=2027-06-01".parse()?);
    /// # Ok::<(), partner_api::deprecation::DeprecationError>(())
    /// ```
    #[must_use]
    pub fn with_deprecation(mut self, deprecation: Deprecation) -> Self {
        let shared = Arc::make_mut(&mut self.config);
        shared.deprecations = shared.deprecations.with(deprecation);
        shared.openapi = openapi::Served::new(&shared.prefix, shared.deprecations.iter());
        self
    }

    /// Serves the versions of `versions` instead of the crate's own
    /// ([`Versions::shipped`](crate::versions::Versions::shipped)): a request is answered at
    /// the version its version header names, else at its key's pinned one, each answer built
    /// in the newest shape and walked back through the changes released after it.
    ///
    /// The newest version of `versions` must be the shape the crate builds, the newest of
    /// [`Versions::shipped`](crate::versions::Versions::shipped); a host declares versions
    /// before the crate's first (for its own older shapes) or more changes on them.
    #[must_use]
    pub fn with_versions(mut self, versions: crate::versions::Versions) -> Self {
        let shared = Arc::make_mut(&mut self.config);
        shared.versions = ApiVersions::new(versions, shared.versions.header().clone());
        self
    }

    /// Reads a request's version from the header `name`, and echoes the version served in
    /// it, instead of [`DEFAULT_VERSION_HEADER`](crate::versions::DEFAULT_VERSION_HEADER)
    /// (`Api-Version`): a host that names its own (`Acme-Version`).
    #[must_use]
    pub fn with_version_header(mut self, name: http::HeaderName) -> Self {
        let shared = Arc::make_mut(&mut self.config);
        shared.versions = ApiVersions::new(shared.versions.chain().clone(), name);
        self
    }

    /// Counts each key's calls of the deprecated routes and parameters in `recorder` (per
    /// UTC day, in batches, as usage is), for the management service's
    /// `GET /deprecated-calls` and the Settings page; `GET /deprecations` then tells a
    /// partner when its key last called each. Only requests a declared deprecation concerns
    /// are counted, once their key is known to be usable.
    #[must_use]
    pub fn with_deprecated_calls(mut self, recorder: DeprecatedCallRecorder) -> Self {
        Arc::make_mut(&mut self.config).deprecated_calls = Some(recorder);
        self
    }

    /// Counts each key's calls per API version too, in the recorder of
    /// [`with_deprecated_calls`](Self::with_deprecated_calls) (one store for both: a version's
    /// calls are its target's, `2026-11-28`, whether or not it is deprecated), for the
    /// management service's `GET /api-versions/calls` and the Settings page. Off by default:
    /// it counts every request with a usable key, which costs each a count in the recorder's
    /// per-thread table; without the recorder it does nothing. A deprecated version's calls
    /// are counted whether or not this is on.
    #[must_use]
    pub fn with_calls_per_version(mut self, on: bool) -> Self {
        Arc::make_mut(&mut self.config).calls_per_version = on;
        self
    }

    /// Serves the API under `prefix` instead of [`DEFAULT_PREFIX`]: `"/partner/v1"` answers
    /// `/partner/v1/me`. A trailing `/` is dropped, and `""` or `"/"` serves at the root (for a
    /// host that strips the whole prefix itself).
    ///
    /// # Panics
    ///
    /// When `prefix` does not start with `/` or holds `?`, `#`, `//` or a character that is
    /// not visible ASCII: it could never match a request path.
    #[must_use]
    pub fn with_prefix(mut self, prefix: &str) -> Self {
        let prefix = prefix.trim_end_matches('/');
        assert!(
            (prefix.is_empty() || prefix.starts_with('/'))
                && !prefix.contains("//")
                && prefix
                    .bytes()
                    .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#'),
            "the prefix must be a path such as \"/v1\" or \"/partner/v1\""
        );
        let shared = Arc::make_mut(&mut self.config);
        shared.prefix = prefix.to_owned();
        shared.openapi = openapi::Served::new(prefix, shared.deprecations.iter());
        shared.responses = ResponseCounters::new(prefix);
        self
    }

    /// Names `realm` in the `WWW-Authenticate` challenge of a 401 instead of
    /// [`DEFAULT_REALM`].
    ///
    /// # Panics
    ///
    /// When `realm` is not printable ASCII or holds `"` or `\`.
    #[must_use]
    pub fn with_realm(mut self, realm: &str) -> Self {
        Arc::make_mut(&mut self.config).challenges = Challenges::new(realm);
        self
    }

    /// Bounds the time one request waits for its stores (default
    /// [`DEFAULT_STORE_TIMEOUT`]); past it the answer is a JSON 503. `None` waits forever.
    ///
    /// The timer needs a tokio runtime with its time driver enabled.
    #[must_use]
    pub fn with_store_timeout(mut self, timeout: Option<Duration>) -> Self {
        Arc::make_mut(&mut self.config).store_timeout = timeout;
        self
    }

    /// Records the last use of every key that authenticates a request in `recorder` (off by
    /// default); it writes them to its store in batches, off the request path.
    #[must_use]
    pub fn with_last_used(mut self, recorder: LastUsedRecorder) -> Self {
        Arc::make_mut(&mut self.config).last_used = Some(recorder);
        self
    }

    /// Counts every answered request of a key in `recorder` (off by default), per hour,
    /// route and outcome; it writes the counts to its store in batches, off the request
    /// path. Requests whose token is no key are not counted here (the metrics count them).
    #[must_use]
    pub fn with_usage(mut self, recorder: UsageRecorder) -> Self {
        Arc::make_mut(&mut self.config).key_usage = Some(recorder);
        self
    }

    /// Sets the `Retry-After` of a `503` (default [`DEFAULT_RETRY_AFTER`]): how long a client
    /// should wait after a store was unreachable or too slow. Sent in whole seconds, at
    /// least 1.
    #[must_use]
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        Arc::make_mut(&mut self.config).retry_after = retry_after;
        self
    }

    /// Limits each key's requests with `limiter` (off by default). Over the limit the answer is
    /// a JSON 429 with `Retry-After`; every response to a valid key reports its budget in
    /// `X-RateLimit-*` headers (see [`rate_limit`](crate::rate_limit)).
    #[must_use]
    pub fn with_rate_limiter(mut self, limiter: impl RateLimiter + 'static) -> Self {
        Arc::make_mut(&mut self.config).rate_limiter = Some(Arc::new(limiter));
        self
    }

    /// Throttles failed authentication with `limiter`, its budgets named by client address
    /// (the peer the host passes, as a [`PeerAddr`](crate::PeerAddr) or with
    /// [`with_peer_addr`](Self::with_peer_addr), or what a trusted proxy reports,
    /// see [`with_trusted_proxies`](Self::with_trusted_proxies); an IPv6 client by its /64).
    ///
    /// On by default, in this process, at [`DEFAULT_AUTH_FAILURE_LIMIT`] failures a second
    /// with bursts of ten times as many, for every request that carries its client's address:
    /// a request without a peer is not throttled, since one budget
    /// shared by every client would let one of them lock the others out. A key that the key store must be asked about (not
    /// answered from memory) first takes one from its client's budget, given back when the
    /// key is valid; a key refused from memory takes one too. Past the budget the answer is a
    /// JSON 429 with `Retry-After`, and the key store is not asked: a flood of made-up keys
    /// costs the store at most the budget. Valid keys answered from memory never touch it, and
    /// with [`with_known_keys`](Self::with_known_keys) neither do the other valid keys.
    #[must_use]
    pub fn with_auth_failure_limiter(mut self, limiter: impl RateLimiter + 'static) -> Self {
        Arc::make_mut(&mut self.config).auth_failure_limiter = Some(Arc::new(limiter));
        self
    }

    /// Sets how long the failure throttle's 429 waits before it is sent (default
    /// [`DEFAULT_AUTH_FAILURE_DELAY`]; zero sends it at once). A client past its budget then
    /// waits that long before it can send its next key on the connection, so a flood costs
    /// the host little CPU and other clients keep their latency. The wait needs a tokio
    /// runtime with its time driver.
    #[must_use]
    pub fn with_auth_failure_delay(mut self, delay: Duration) -> Self {
        Arc::make_mut(&mut self.config).auth_failure_delay = delay;
        self
    }

    /// Lets the failure throttle tell a token that may be a key from one that certainly is
    /// not ([`KnownKeys`](crate::cache::KnownKeys)): a token it holds is looked up whatever
    /// its client's budget (and charged only if refused), so a valid key it holds is never
    /// refused because others at its address sent bad tokens; any other token (a key issued
    /// moments ago whose notification has not arrived, too) is throttled as before. Without it, an address past its budget gets 429 for a valid key the key store
    /// cannot answer from memory.
    #[must_use]
    pub fn with_known_keys(mut self, known_keys: crate::cache::KnownKeys) -> Self {
        Arc::make_mut(&mut self.config).known_keys = Some(known_keys);
        self
    }

    /// Turns the throttle of failed authentication off (see
    /// [`with_auth_failure_limiter`](Self::with_auth_failure_limiter)): for a host that
    /// throttles in front of the API.
    #[must_use]
    pub fn without_auth_failure_limiter(mut self) -> Self {
        Arc::make_mut(&mut self.config).auth_failure_limiter = None;
        self
    }

    /// Believes the forwarding header ([`with_client_address_header`](Self::with_client_address_header),
    /// `X-Forwarded-For` by default) from peers in these ranges (none by default): the client
    /// is then the rightmost forwarded address that is not a trusted proxy. Name only proxies
    /// you run: a header from anyone else is the client's own word.
    #[must_use]
    pub fn with_trusted_proxies(mut self, ranges: impl IntoIterator<Item = ipnet::IpNet>) -> Self {
        let config = Arc::make_mut(&mut self.config);
        let header = config.trusted_proxies.header();
        config.trusted_proxies =
            TrustedProxies::new(ranges.into_iter().collect()).with_header(header);
        self
    }

    /// Reads the client's address behind trusted proxies from `header` only (default
    /// [`ClientAddressHeader::XForwardedFor`]): the header your proxies write. The other one
    /// is ignored, so a client cannot name its own address in the header its proxy passes
    /// through untouched.
    #[must_use]
    pub fn with_client_address_header(mut self, header: ClientAddressHeader) -> Self {
        let config = Arc::make_mut(&mut self.config);
        config.trusted_proxies = std::mem::take(&mut config.trusted_proxies).with_header(header);
        self
    }

    /// Turns conditional requests on or off (on by default). When on, `GET /me` and
    /// `GET /orders` carry a strong `ETag` over their body, `Cache-Control: private, no-cache`
    /// and `Vary: Authorization`, and a matching `If-None-Match` gets `304 Not Modified`
    /// without a body. When off, they carry `Cache-Control: no-store` and no tag.
    #[must_use]
    pub fn with_conditional_requests(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config).conditional_requests = enabled;
        self
    }

    /// Turns request ids on or off (on by default). When on, every API response carries
    /// `x-request-id`: the request's own when it is well-formed, a new UUID otherwise (see
    /// [`request_id`]); the id is also recorded in the host's request span
    /// when it declares a `request_id` field.
    #[must_use]
    pub fn with_request_ids(mut self, enabled: bool) -> Self {
        Arc::make_mut(&mut self.config).request_ids = enabled;
        self
    }

    /// Gives at most `max` organizations a series of their own in the per-organization
    /// metrics (default [`DEFAULT_MAX_ORGANIZATIONS`]); requests of every later one count
    /// under `organization_id="_other"`. `0` puts every organization there. See
    /// [`metrics`](crate::metrics) for how the labels stay bounded.
    #[must_use]
    pub fn with_organization_labels(mut self, max: usize) -> Self {
        let shared = Arc::make_mut(&mut self.config);
        shared.usage = Arc::new(UsageCounters::new(max, shared.usage.max_keys()));
        self
    }

    /// Labels the per-organization requests metric with the key id (`key_id`, the store's
    /// id of the key, never the key) for at most `max` keys; requests with any later key
    /// count as `key_id="_other"` of their organization. Off (`0`) by default.
    #[must_use]
    pub fn with_key_id_labels(mut self, max: usize) -> Self {
        let shared = Arc::make_mut(&mut self.config);
        shared.usage = Arc::new(UsageCounters::new(shared.usage.max_organizations(), max));
        self
    }

    /// Tells this service that its requests come from `peer`: for a host that makes a service
    /// per connection (a clone of one `PartnerApi`, which shares the stores), in place of a
    /// [`PeerAddr`](crate::PeerAddr) in every request's extensions, which allocates a map per request. A
    /// request's own `PeerAddr` (or, with the `axum` feature, axum's `ConnectInfo`), when
    /// it has one, wins.
    ///
    /// # Correctness
    ///
    /// `peer` must be the real peer of the one connection this service serves. Set on a
    /// service that several connections share (a clone kept in a layer, say), every client
    /// would be that address: a key pinned to ranges that hold it would be served to anyone,
    /// and one client's failed keys would throttle all the others.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use partner_api::{MemoryStore, PartnerApi};
    ///
    /// let api = PartnerApi::from_store(MemoryStore::new());
    /// // In the accept loop, for each connection:
    /// let peer: SocketAddr = "192.0.2.7:50312".parse().unwrap();
    /// let for_this_connection = api.clone().with_peer_addr(peer);
    /// ```
    #[must_use]
    pub fn with_peer_addr(mut self, peer: SocketAddr) -> Self {
        self.peer = Some(peer);
        self
    }

    /// Returns the deprecations the API declares, in the order declared: what a host hands
    /// the management service too, so the two never disagree.
    ///
    /// ```
    /// use partner_api::management::KeyManagementService;
    /// use partner_api::{MemoryStore, PartnerApi};
    ///
    /// let store = MemoryStore::new();
    /// let api = PartnerApi::from_store(store.clone())
    ///     .with_deprecation("/orders?provider=2026-12-01".parse()?);
    /// let management = api
    ///     .deprecations()
    ///     .fold(KeyManagementService::new(store.clone()), |service, deprecation| {
    ///         service.with_deprecation(deprecation.clone())
    ///     });
    /// # Ok::<(), partner_api::deprecation::DeprecationError>(())
    /// ```
    pub fn deprecations(&self) -> impl Iterator<Item = &Deprecation> {
        self.config.deprecations.iter()
    }

    /// Returns the prefix the API answers under, without a trailing `/`.
    pub fn prefix(&self) -> &str {
        &self.config.prefix
    }

    /// Returns whether `path` is under the prefix: the prefix itself or below it
    /// (`/v1/...`, not `/v10`).
    pub fn is_under_prefix(&self, path: &str) -> bool {
        self.config.path_below_prefix(path).is_some()
    }
}

impl fmt::Debug for PartnerApi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PartnerApi")
            .field("prefix", &self.config.prefix)
            .field("store_timeout", &self.config.store_timeout)
            .field("retry_after", &self.config.retry_after)
            .field("rate_limited", &self.config.rate_limiter.is_some())
            .field(
                "auth_failures_throttled",
                &self.config.auth_failure_limiter.is_some(),
            )
            .field("known_keys", &self.config.known_keys)
            .field("last_used", &self.config.last_used.is_some())
            .field("events", &self.config.events.is_some())
            .field("conditional_requests", &self.config.conditional_requests)
            .field("request_ids", &self.config.request_ids)
            .field("peer_addr", &self.peer)
            .finish_non_exhaustive()
    }
}
