//! Per-key rate limits (opt-in): the [`RateLimiter`] trait the API asks after authenticating a
//! request, its in-process implementation [`LocalRateLimiter`], and the headers that tell a
//! partner its budget.
//!
//! Headers follow GitHub's convention: `X-RateLimit-Limit` (requests in a full budget),
//! `X-RateLimit-Remaining` (requests left now), `X-RateLimit-Reset` (Unix time, in seconds,
//! when the budget is full again), and `Retry-After` (seconds) on a `429`.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::Quota;
use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::store::{Principal, StoreError};

/// `X-RateLimit-Limit`: the requests a full budget allows.
pub const RATE_LIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`: the requests the key may still make now.
pub const RATE_LIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`: the Unix time, in whole seconds rounded up, when the budget is full.
pub const RATE_LIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// Decides whether an authenticated request may be served now.
///
/// The API asks after the key is known and before anything is read for the request; a
/// limiter keys its budgets on [`Principal::key_id`] (never the raw key). Ship
/// [`LocalRateLimiter`] for one process; a deployment of several replicas implements this
/// trait over a shared counter store (Redis, say) so the budget is the key's, not the
/// replica's.
///
/// When [`check`](Self::check) fails, the request is served without a limit (and the error
/// logged): an outage of the counter store does not take the API down with it.
#[async_trait]
pub trait RateLimiter: Send + Sync {
    /// Takes one request from `principal`'s budget, or refuses it.
    async fn check(&self, principal: &Principal) -> Result<RateLimitDecision, StoreError>;

    /// The answer of [`check`](Self::check) when the limiter has it at hand without waiting,
    /// or `None` to be asked through `check` (the default); as
    /// [`KeyStore::lookup_now`](crate::KeyStore::lookup_now).
    fn check_now(&self, principal: &Principal) -> Option<Result<RateLimitDecision, StoreError>> {
        let _ = principal;
        None
    }
}

#[async_trait]
impl<T: RateLimiter + ?Sized> RateLimiter for Arc<T> {
    async fn check(&self, principal: &Principal) -> Result<RateLimitDecision, StoreError> {
        (**self).check(principal).await
    }

    fn check_now(&self, principal: &Principal) -> Option<Result<RateLimitDecision, StoreError>> {
        (**self).check_now(principal)
    }
}

/// A [`RateLimiter`]'s answer for one request, and the budget the response reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitDecision {
    limit: u32,
    remaining: u32,
    reset_after: Duration,
    retry_after: Option<Duration>,
}

impl RateLimitDecision {
    /// The request may go on; `remaining` more may follow now, of a full budget of `limit`,
    /// which is whole again after `reset_after`.
    pub fn allowed(limit: u32, remaining: u32, reset_after: Duration) -> Self {
        Self {
            limit,
            remaining: remaining.min(limit),
            reset_after,
            retry_after: None,
        }
    }

    /// The request is refused: the next one may succeed after `retry_after`; the budget of
    /// `limit` is whole again after `reset_after`.
    pub fn refused(limit: u32, retry_after: Duration, reset_after: Duration) -> Self {
        Self {
            limit,
            remaining: 0,
            reset_after: reset_after.max(retry_after),
            retry_after: Some(retry_after),
        }
    }

    /// Whether the request may be served.
    pub fn is_allowed(&self) -> bool {
        self.retry_after.is_none()
    }

    /// The requests a full budget allows.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The requests that may still be made now.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// How long until the budget is full again.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// For a refused request, how long until the next one may succeed.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Writes the budget headers (and `Retry-After` when refused) into `headers`.
    pub(crate) fn write_headers(&self, headers: &mut HeaderMap) {
        headers.insert(RATE_LIMIT_LIMIT, HeaderValue::from(self.limit));
        headers.insert(RATE_LIMIT_REMAINING, HeaderValue::from(self.remaining));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        headers.insert(
            RATE_LIMIT_RESET,
            HeaderValue::from(whole_seconds_up(now.saturating_add(self.reset_after))),
        );
        if let Some(retry_after) = self.retry_after {
            headers.insert(RETRY_AFTER, whole_seconds_at_least_one(retry_after));
        }
    }
}

fn whole_seconds_up(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// A `Retry-After` value: `duration` in whole seconds, rounded up, and at least 1, since `0`
/// would invite an immediate retry that fails again.
pub(crate) fn whole_seconds_at_least_one(duration: Duration) -> HeaderValue {
    HeaderValue::from(whole_seconds_up(duration).max(1))
}

type KeyedLimiter = governor::RateLimiter<
    Arc<str>,
    DashMapStateStore<Arc<str>>,
    DefaultClock,
    StateInformationMiddleware,
>;

/// How many checks pass between two purges of idle keys.
const PURGE_EVERY: u64 = 4096;

/// An in-process token bucket per API key (GCRA, from the `governor` crate).
///
/// Each key starts with a full budget of `burst` requests; one request comes back every
/// `period`. Keys whose budget is full again are forgotten every few thousand checks, so
/// memory follows the keys active within the last `burst × period`, not every key ever seen.
/// Budgets live in this process: replicas behind a load balancer each keep their own.
///
/// ```
/// use std::num::NonZeroU32;
/// use partner_api::{LocalRateLimiter, MemoryStore, PartnerApi};
///
/// let limiter = LocalRateLimiter::per_second(NonZeroU32::new(10).unwrap());
/// let api = PartnerApi::from_store(MemoryStore::new()).with_rate_limiter(limiter);
/// ```
pub struct LocalRateLimiter {
    limiter: KeyedLimiter,
    limit: u32,
    period: Duration,
    checks: AtomicU64,
}

impl LocalRateLimiter {
    /// `requests` per second per key, with a burst of `requests`.
    pub fn per_second(requests: NonZeroU32) -> Self {
        Self::with_quota(Quota::per_second(requests))
    }

    /// One request per `period` per key, with bursts of up to `burst` requests.
    ///
    /// # Panics
    ///
    /// When `period` is zero.
    pub fn new(period: Duration, burst: NonZeroU32) -> Self {
        let quota = Quota::with_period(period)
            .expect("the period of a rate limit must not be zero")
            .allow_burst(burst);
        Self::with_quota(quota)
    }

    fn with_quota(quota: Quota) -> Self {
        Self {
            limiter: governor::RateLimiter::dashmap(quota)
                .with_middleware::<StateInformationMiddleware>(),
            limit: quota.burst_size().get(),
            period: quota.replenish_interval(),
            checks: AtomicU64::new(0),
        }
    }

    /// The number of keys whose budget is tracked now.
    pub fn tracked_keys(&self) -> usize {
        self.limiter.len()
    }

    /// Forgets the keys whose budget is full again (they would start full anyway).
    pub fn purge(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }

    fn decide(&self, principal: &Principal) -> RateLimitDecision {
        if self.checks.fetch_add(1, Ordering::Relaxed) % PURGE_EVERY == PURGE_EVERY - 1 {
            self.purge();
        }
        match self.limiter.check_key(&principal.key_id) {
            Ok(state) => {
                let remaining = state.remaining_burst_capacity();
                let reset_after = self
                    .period
                    .saturating_mul(self.limit - remaining.min(self.limit));
                RateLimitDecision::allowed(self.limit, remaining, reset_after)
            }
            Err(not_until) => {
                let retry_after = not_until.wait_time_from(self.limiter.clock().now());
                // Empty now: the next request comes back after `retry_after`, the rest one
                // `period` apart.
                let reset_after =
                    retry_after.saturating_add(self.period.saturating_mul(self.limit - 1));
                RateLimitDecision::refused(self.limit, retry_after, reset_after)
            }
        }
    }
}

#[async_trait]
impl RateLimiter for LocalRateLimiter {
    async fn check(&self, principal: &Principal) -> Result<RateLimitDecision, StoreError> {
        Ok(self.decide(principal))
    }

    fn check_now(&self, principal: &Principal) -> Option<Result<RateLimitDecision, StoreError>> {
        Some(Ok(self.decide(principal)))
    }
}

impl fmt::Debug for LocalRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LocalRateLimiter")
            .field("limit", &self.limit)
            .field("period", &self.period)
            .field("tracked_keys", &self.tracked_keys())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Organization;

    fn principal(key_id: &str) -> Principal {
        Principal::new(
            key_id,
            Organization {
                id: "org".into(),
                name: "Org".into(),
            },
        )
    }

    #[test]
    fn a_burst_is_served_then_refused_with_the_time_to_wait() {
        let limiter = LocalRateLimiter::new(Duration::from_secs(60), NonZeroU32::new(3).unwrap());
        let key = principal("key_1");
        let remaining: Vec<u32> = (0..3).map(|_| limiter.decide(&key).remaining()).collect();
        assert_eq!(remaining, [2, 1, 0]);
        let refused = limiter.decide(&key);
        assert!(!refused.is_allowed());
        let wait = refused.retry_after().unwrap();
        assert!(
            wait > Duration::from_secs(58) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        // Another key has its own budget.
        assert_eq!(limiter.decide(&principal("key_2")).remaining(), 2);
    }

    #[test]
    fn headers_report_the_budget_and_when_to_retry() {
        let mut headers = HeaderMap::new();
        RateLimitDecision::refused(5, Duration::from_millis(1500), Duration::from_secs(5))
            .write_headers(&mut headers);
        assert_eq!(headers[RATE_LIMIT_LIMIT], "5");
        assert_eq!(headers[RATE_LIMIT_REMAINING], "0");
        assert_eq!(headers[RETRY_AFTER], "2");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let reset: u64 = headers[RATE_LIMIT_RESET].to_str().unwrap().parse().unwrap();
        assert!((now.as_secs() + 5..=now.as_secs() + 6).contains(&reset));

        let mut headers = HeaderMap::new();
        RateLimitDecision::allowed(5, 4, Duration::from_millis(200)).write_headers(&mut headers);
        assert_eq!(headers[RATE_LIMIT_REMAINING], "4");
        assert!(!headers.contains_key(RETRY_AFTER));
        let mut headers = HeaderMap::new();
        RateLimitDecision::refused(5, Duration::from_millis(1), Duration::ZERO)
            .write_headers(&mut headers);
        assert_eq!(
            headers[RETRY_AFTER], "1",
            "never tells a client to retry at once"
        );
    }

    #[test]
    fn idle_keys_are_purged_so_memory_stays_bounded() {
        // Budgets refill within a microsecond: every key is idle almost at once.
        let limiter = LocalRateLimiter::new(Duration::from_micros(1), NonZeroU32::new(1).unwrap());
        let mut most = 0;
        for index in 0..50_000 {
            limiter.decide(&principal(&format!("key_{index}")));
            most = most.max(limiter.tracked_keys());
        }
        assert!(most <= PURGE_EVERY as usize + 1, "tracked {most} keys");
        std::thread::sleep(Duration::from_millis(1));
        limiter.purge();
        assert_eq!(limiter.tracked_keys(), 0);
    }
}
