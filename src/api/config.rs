//! [`Config`]: what every request of one [`PartnerApi`](crate::PartnerApi) reads, as its
//! builder set it.

use std::sync::Arc;
use std::time::Duration;

use crate::api::auth::Challenges;
use crate::api::client_address::TrustedProxies;
use crate::api::deprecations::Deprecations;
use crate::api::openapi;
use crate::api::responses_metric::ResponseCounters;
use crate::api::versioning::ApiVersions;
use crate::deprecated_calls::DeprecatedCallRecorder;
use crate::last_used::LastUsedRecorder;
use crate::metrics::{UsageCounters, DEFAULT_MAX_ORGANIZATIONS};
use crate::rate_limit::{LocalRateLimiter, RateLimiter};
use crate::store::{EventFeed, KeyStore, OrderStore};
use crate::usage::UsageRecorder;

/// The default mount prefix: the version segment of contract section 9.
pub const DEFAULT_PREFIX: &str = "/v1";
/// The default realm of the `WWW-Authenticate` challenge.
pub const DEFAULT_REALM: &str = "partner-api";
/// The default time a request may spend waiting for its stores.
pub const DEFAULT_STORE_TIMEOUT: Duration = Duration::from_secs(10);
/// The default `Retry-After` of a `503`: long enough that a client's retries do not pile
/// onto a store that is failing, short enough that a passing failure costs partners little.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(2);

/// The default budget of failed authentications per client address: this many a second,
/// with bursts of ten times as many.
pub const DEFAULT_AUTH_FAILURE_LIMIT: u32 = 20;

/// How long the failure throttle's 429 waits before it is sent, by default.
pub const DEFAULT_AUTH_FAILURE_DELAY: Duration = Duration::from_millis(50);

/// The in-process throttle of failed authentication: `per_second` a second per client
/// address, bursts of ten times as many.
pub(crate) fn auth_failure_limiter(per_second: std::num::NonZeroU32) -> LocalRateLimiter {
    let burst = per_second.saturating_mul(std::num::NonZeroU32::MIN.saturating_add(9));
    LocalRateLimiter::new(Duration::from_secs(1) / per_second.get(), burst)
}

/// The configuration of one API: shared by its clones, changed only by its builder.
#[derive(Clone)]
pub(crate) struct Config {
    pub(crate) keys: Arc<dyn KeyStore>,
    pub(crate) orders: Arc<dyn OrderStore>,
    /// The events feed `GET /events` reads, when the host has one.
    pub(crate) events: Option<Arc<dyn EventFeed>>,
    pub(crate) challenges: Challenges,
    pub(crate) store_timeout: Option<Duration>,
    pub(crate) retry_after: Duration,
    pub(crate) rate_limiter: Option<Arc<dyn RateLimiter>>,
    /// The budgets of failed authentications, by client address.
    pub(crate) auth_failure_limiter: Option<Arc<dyn RateLimiter>>,
    /// The keys that may be usable: looked up past a client's budget of failures.
    pub(crate) known_keys: Option<crate::cache::KnownKeys>,
    /// The proxies whose forwarding headers name the client.
    pub(crate) trusted_proxies: TrustedProxies,
    /// How long the failure throttle's 429 waits before it is sent.
    pub(crate) auth_failure_delay: Duration,
    /// Where each authenticated request's key use is recorded.
    pub(crate) last_used: Option<LastUsedRecorder>,
    /// Where each answered request of a key is counted, per route and outcome.
    pub(crate) key_usage: Option<UsageRecorder>,
    /// Where each key's calls of deprecated routes and parameters are counted.
    pub(crate) deprecated_calls: Option<DeprecatedCallRecorder>,
    /// Whether every call is counted under its API version too (in `deprecated_calls`).
    pub(crate) calls_per_version: bool,
    /// Whether keyed bodies carry an `ETag` and `If-None-Match` can answer `304`.
    pub(crate) conditional_requests: bool,
    /// Whether responses carry `x-request-id`.
    pub(crate) request_ids: bool,
    /// The keys of the responses metric under `prefix`.
    pub(crate) responses: ResponseCounters,
    /// The per-organization series, bounded.
    pub(crate) usage: Arc<UsageCounters>,
    /// The OpenAPI document of each version that has one, as served under `prefix`, the
    /// deprecations marked.
    pub(crate) openapi: openapi::Served,
    /// The versions, and which one answers a request.
    pub(crate) versions: ApiVersions,
    /// What the host declared deprecated.
    pub(crate) deprecations: Deprecations,
    pub(crate) prefix: String,
    /// Whether this API said in the log that a request came with no peer address (once).
    pub(crate) warned_of_no_peer: Arc<std::sync::atomic::AtomicBool>,
}

impl Config {
    pub(crate) fn new(keys: Arc<dyn KeyStore>, orders: Arc<dyn OrderStore>) -> Self {
        Self {
            keys,
            orders,
            events: None,
            challenges: Challenges::new(DEFAULT_REALM),
            store_timeout: Some(DEFAULT_STORE_TIMEOUT),
            retry_after: DEFAULT_RETRY_AFTER,
            rate_limiter: None,
            auth_failure_limiter: Some(Arc::new(auth_failure_limiter(
                std::num::NonZeroU32::new(DEFAULT_AUTH_FAILURE_LIMIT)
                    .unwrap_or(std::num::NonZeroU32::MIN),
            ))),
            known_keys: None,
            trusted_proxies: TrustedProxies::default(),
            auth_failure_delay: DEFAULT_AUTH_FAILURE_DELAY,
            last_used: None,
            key_usage: None,
            deprecated_calls: None,
            calls_per_version: false,
            conditional_requests: true,
            request_ids: true,
            responses: ResponseCounters::new(DEFAULT_PREFIX),
            usage: Arc::new(UsageCounters::new(DEFAULT_MAX_ORGANIZATIONS, 0)),
            openapi: openapi::Served::new(DEFAULT_PREFIX, []),
            versions: ApiVersions::default(),
            deprecations: Deprecations::default(),
            prefix: DEFAULT_PREFIX.to_owned(),
            warned_of_no_peer: Arc::default(),
        }
    }

    /// The part of `path` below the prefix (`""` or `/...`), if `path` is under it: `/v1`
    /// and `/v1/me`, not `/v10`.
    pub(crate) fn path_below_prefix<'p>(&self, path: &'p str) -> Option<&'p str> {
        let rest = path.strip_prefix(self.prefix.as_str())?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }
}
