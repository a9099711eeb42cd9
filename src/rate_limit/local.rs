//! [`LocalRateLimiter`]: a token bucket per API key in this process.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use governor::clock::{Clock, DefaultClock};
use governor::middleware::StateInformationMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::Quota;

use super::{RateLimitDecision, RateLimiter};
use crate::store::{Principal, StoreError};

type KeyedLimiter = governor::RateLimiter<
    Arc<str>,
    DashMapStateStore<Arc<str>>,
    DefaultClock,
    StateInformationMiddleware,
>;

/// How often the background purge forgets keys whose budget is full again, by default.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(10);

/// An in-process token bucket per API key (GCRA, from the `governor` crate).
///
/// Each key starts with a full budget of `burst` requests; one request comes back every
/// `period`. A background thread forgets, every [`DEFAULT_PURGE_INTERVAL`], the keys whose
/// budget is full again, so memory follows the keys active within the last `burst × period`
/// plus that interval, not every key ever seen; it ends when the limiter is dropped. A request
/// never does that work: the most it waits for is the purge of one of the map's shards, a
/// small fraction of the keys. Budgets live in this process: replicas behind a load balancer
/// each keep their own.
///
/// ```
/// use std::num::NonZeroU32;
/// use partner_api::{LocalRateLimiter, MemoryStore, PartnerApi};
///
/// let limiter = LocalRateLimiter::per_second(NonZeroU32::new(10).unwrap());
/// let api = PartnerApi::from_store(MemoryStore::new()).with_rate_limiter(limiter);
/// ```
pub struct LocalRateLimiter {
    budgets: Arc<Budgets>,
}

/// The budgets of a [`LocalRateLimiter`], shared with its purge thread.
struct Budgets {
    limiter: KeyedLimiter,
    limit: u32,
    period: Duration,
    /// The purge interval in milliseconds; read by the purge thread before each sleep.
    purge_interval_millis: AtomicU64,
}

impl LocalRateLimiter {
    /// Creates a limiter of `requests` per second per key, with a burst of `requests`.
    pub fn per_second(requests: NonZeroU32) -> Self {
        Self::with_quota(Quota::per_second(requests))
    }

    /// Creates a limiter of one request per `period` per key, with bursts of up to `burst`
    /// requests. A period too long to count in nanoseconds over a whole burst (centuries) is
    /// shortened to the longest that can be.
    ///
    /// # Panics
    ///
    /// When `period` is zero.
    pub fn new(period: Duration, burst: NonZeroU32) -> Self {
        let longest = Duration::from_nanos(u64::MAX / (u64::from(burst.get()) + 1));
        let quota = Quota::with_period(period.min(longest))
            .expect("the period of a rate limit must not be zero")
            .allow_burst(burst);
        Self::with_quota(quota)
    }

    fn with_quota(quota: Quota) -> Self {
        let budgets = Arc::new(Budgets {
            limiter: governor::RateLimiter::dashmap(quota)
                .with_middleware::<StateInformationMiddleware>(),
            limit: quota.burst_size().get(),
            period: quota.replenish_interval(),
            purge_interval_millis: AtomicU64::new(millis(DEFAULT_PURGE_INTERVAL)),
        });
        spawn_purge(Arc::downgrade(&budgets));
        Self { budgets }
    }

    /// Sets how often idle keys are forgotten (default [`DEFAULT_PURGE_INTERVAL`]); from the
    /// next purge on.
    #[must_use]
    pub fn with_purge_interval(self, interval: Duration) -> Self {
        self.budgets
            .purge_interval_millis
            .store(millis(interval).max(1), Ordering::Relaxed);
        self
    }

    /// Returns the number of keys whose budget is tracked now.
    pub fn tracked_keys(&self) -> usize {
        self.budgets.limiter.len()
    }

    /// Forgets the keys whose budget is full again (they would start full anyway). The
    /// background thread calls this; a host may too.
    pub fn purge(&self) {
        self.budgets.purge();
    }

    fn decide(&self, principal: &Principal) -> RateLimitDecision {
        let Budgets {
            limiter,
            limit,
            period,
            ..
        } = &*self.budgets;
        let limit = *limit;
        match limiter.check_key(&principal.key_id) {
            Ok(state) => {
                let remaining = state.remaining_burst_capacity();
                let reset_after = period.saturating_mul(limit - remaining.min(limit));
                RateLimitDecision::allowed(limit, remaining, reset_after)
            }
            Err(not_until) => {
                let retry_after = not_until.wait_time_from(limiter.clock().now());
                // Empty now: the next request comes back after `retry_after`, the rest one
                // `period` apart.
                let reset_after = retry_after.saturating_add(period.saturating_mul(limit - 1));
                RateLimitDecision::refused(limit, retry_after, reset_after)
            }
        }
    }
}

impl Budgets {
    fn purge(&self) {
        self.limiter.retain_recent();
        self.limiter.shrink_to_fit();
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Purges `budgets` every purge interval on a thread of its own, until they are dropped.
fn spawn_purge(budgets: std::sync::Weak<Budgets>) {
    let purge = move || loop {
        let Some(interval) = budgets
            .upgrade()
            .map(|budgets| budgets.purge_interval_millis.load(Ordering::Relaxed))
        else {
            return;
        };
        std::thread::sleep(Duration::from_millis(interval));
        match budgets.upgrade() {
            Some(budgets) => budgets.purge(),
            None => return,
        }
    };
    let spawned = std::thread::Builder::new()
        .name("partner-api-rate-limit-purge".into())
        .spawn(purge);
    if let Err(err) = spawned {
        // Budgets still work; idle keys are forgotten only when the host calls `purge`.
        tracing::warn!(error = %err, "cannot start the rate limiter's purge thread");
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
            .field("limit", &self.budgets.limit)
            .field("period", &self.budgets.period)
            .field("tracked_keys", &self.tracked_keys())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Organization;
    use http::header::HeaderMap;

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
    fn idle_keys_are_purged_in_the_background_so_memory_stays_bounded() {
        // Budgets refill within a microsecond: every key is idle almost at once.
        let limiter = LocalRateLimiter::new(Duration::from_micros(1), NonZeroU32::new(1).unwrap())
            .with_purge_interval(Duration::from_millis(20));
        for index in 0..10_000 {
            limiter.decide(&principal(&format!("key_{index}")));
        }
        // No request purged: the background thread does, within a few intervals.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while limiter.tracked_keys() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "{} keys still tracked",
                limiter.tracked_keys()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        limiter.decide(&principal("key_again"));
        limiter.purge();
        std::thread::sleep(Duration::from_millis(1));
        limiter.purge();
        assert_eq!(limiter.tracked_keys(), 0);
    }

    #[test]
    fn the_purge_thread_ends_with_its_limiter() {
        let limiter = LocalRateLimiter::new(Duration::from_secs(1), NonZeroU32::new(1).unwrap())
            .with_purge_interval(Duration::from_millis(1));
        let weak = Arc::downgrade(&limiter.budgets);
        drop(limiter);
        // The thread holds the budgets only while it purges them, and then stops.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while weak.strong_count() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the budgets outlive their limiter"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

        /// No period, burst or decision, however extreme, panics on the request path.
        #[test]
        fn extreme_durations_saturate_instead_of_panicking(
            period_nanos in proptest::prelude::any::<u64>(),
            period_secs in proptest::prop_oneof![proptest::prelude::Just(0_u64), proptest::prelude::any::<u64>()],
            burst in 1_u32..,
            remaining in proptest::prelude::any::<u32>(),
            reset_secs in proptest::prelude::any::<u64>(),
            retry_secs in proptest::prelude::any::<u64>(),
        ) {
            let period = Duration::new(period_secs, 0).saturating_add(Duration::from_nanos(period_nanos.max(1)));
            let limiter = LocalRateLimiter::new(period, NonZeroU32::new(burst).unwrap());
            let key = principal("key");
            for _ in 0..3 {
                let decision = limiter.decide(&key);
                decision.write_headers(&mut HeaderMap::new());
            }
            let reset = Duration::new(reset_secs, 999_999_999);
            let retry = Duration::new(retry_secs, 1);
            RateLimitDecision::allowed(burst, remaining, reset).write_headers(&mut HeaderMap::new());
            RateLimitDecision::refused(burst, retry, reset).write_headers(&mut HeaderMap::new());
            RateLimitDecision::refused(burst, Duration::MAX, Duration::MAX).write_headers(&mut HeaderMap::new());
        }
    }
}
