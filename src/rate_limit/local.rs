//! [`LocalRateLimiter`]: a token bucket per budget (an API key, a client address) in this
//! process.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
use std::hash::BuildHasher;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use super::{RateLimitDecision, RateLimiter};
use crate::store::StoreError;

/// How often the background purge forgets budgets that are full again, by default.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(10);

/// Budgets are spread over this many maps, each behind its own lock, so that concurrent
/// requests rarely wait for one another.
const SHARDS: usize = 16;

/// An in-process token bucket per budget (GCRA: one "theoretical arrival time" per budget).
///
/// Each budget starts full with `burst` requests; one request comes back every `period`. A
/// background thread forgets, every [`DEFAULT_PURGE_INTERVAL`], the budgets that are full
/// again, so memory follows the budgets active within the last `burst × period` plus that
/// interval, not every key or address ever seen; it ends when the limiter is dropped. A request
/// never does that work: the most it waits for is the purge of one of sixteen shards. Budgets
/// live in this process: replicas behind a load balancer each keep their own.
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
    /// Each budget's theoretical arrival time, in nanoseconds since `epoch`; a budget at or
    /// before now is full, and absent.
    shards: [Mutex<HashMap<Box<str>, u64>>; SHARDS],
    hasher: RandomState,
    epoch: Instant,
    limit: u32,
    period: Duration,
    period_nanos: u64,
    /// How far ahead of now the arrival time may be with a request still allowed:
    /// `(burst - 1) × period`.
    tolerance_nanos: u64,
    /// The purge interval in milliseconds; read by the purge thread before each sleep.
    purge_interval_millis: AtomicU64,
    /// Whether the purge thread was started: by the first budget tracked, so that a limiter
    /// that is never asked (an API built in a test, say) costs no thread.
    purge_started: AtomicBool,
}

impl LocalRateLimiter {
    /// Creates a limiter of `requests` per second per budget, with a burst of `requests`.
    pub fn per_second(requests: NonZeroU32) -> Self {
        Self::new(Duration::from_secs(1) / requests.get(), requests)
    }

    /// Creates a limiter of one request per `period` per budget, with bursts of up to
    /// `burst` requests. A period too long to count in nanoseconds over a whole burst
    /// (centuries) is shortened to the longest that can be; a zero period is a nanosecond.
    pub fn new(period: Duration, burst: NonZeroU32) -> Self {
        let longest = u64::MAX / (u64::from(burst.get()) + 1);
        let period_nanos = u64::try_from(period.as_nanos())
            .unwrap_or(u64::MAX)
            .clamp(1, longest);
        let budgets = Arc::new(Budgets {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            hasher: RandomState::new(),
            epoch: Instant::now(),
            limit: burst.get(),
            period: Duration::from_nanos(period_nanos),
            period_nanos,
            tolerance_nanos: period_nanos * u64::from(burst.get() - 1),
            purge_interval_millis: AtomicU64::new(millis(DEFAULT_PURGE_INTERVAL)),
            purge_started: AtomicBool::new(false),
        });
        Self { budgets }
    }

    /// Sets how often full budgets are forgotten (default [`DEFAULT_PURGE_INTERVAL`]); from
    /// the next purge on.
    #[must_use]
    pub fn with_purge_interval(self, interval: Duration) -> Self {
        self.budgets
            .purge_interval_millis
            .store(millis(interval).max(1), Ordering::Relaxed);
        self
    }

    /// Returns the number of budgets tracked now (those not full, until the next purge).
    pub(crate) fn tracked_keys(&self) -> usize {
        self.budgets
            .shards
            .iter()
            .map(|shard| lock(shard).len())
            .sum()
    }

    /// Forgets the budgets that are full again (they would start full anyway). The
    /// background thread calls this; a host may too.
    pub fn purge(&self) {
        self.budgets.purge();
    }

    fn decide(&self, budget: &str) -> RateLimitDecision {
        let budgets = &*self.budgets;
        let (limit, period) = (budgets.limit, budgets.period_nanos);
        let now = budgets.now();
        let mut shard = budgets.shard(budget);
        let tat = shard.get(budget).copied().unwrap_or(now).max(now);
        let allowed_from = tat.saturating_sub(budgets.tolerance_nanos);
        if now < allowed_from {
            return RateLimitDecision::refused(
                limit,
                Duration::from_nanos(allowed_from - now),
                Duration::from_nanos(tat - now),
            )
            .with_window(window(period, limit));
        }
        let next = tat.saturating_add(period);
        match shard.get_mut(budget) {
            Some(stored) => *stored = next,
            None => {
                shard.insert(budget.into(), next);
                drop(shard);
                if !budgets.purge_started.swap(true, Ordering::Relaxed) {
                    spawn_purge(Arc::downgrade(&self.budgets));
                }
            }
        }
        // Whole requests between the next arrival time and a full budget's.
        let full = u128::from(now) + u128::from(period) * u128::from(limit);
        let remaining = full.saturating_sub(u128::from(next)) / u128::from(period);
        RateLimitDecision::allowed(
            limit,
            u32::try_from(remaining).unwrap_or(limit),
            Duration::from_nanos(next - now),
        )
        .with_window(window(period, limit))
    }

    fn give_back(&self, budget: &str) {
        let budgets = &*self.budgets;
        let now = budgets.now();
        let mut shard = budgets.shard(budget);
        if let Some(tat) = shard.get_mut(budget) {
            *tat = tat.saturating_sub(budgets.period_nanos);
            if *tat <= now {
                shard.remove(budget);
            }
        }
    }
}

impl Budgets {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn shard(&self, budget: &str) -> MutexGuard<'_, HashMap<Box<str>, u64>> {
        // The remainder is below SHARDS, so the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let index = (self.hasher.hash_one(budget) % SHARDS as u64) as usize;
        lock(&self.shards[index])
    }

    fn purge(&self) {
        let now = self.now();
        for shard in &self.shards {
            let mut shard = lock(shard);
            shard.retain(|_, tat| *tat > now);
            shard.shrink_to_fit();
        }
    }
}

/// A shard's map; a panic elsewhere while it was held left arrival times that are still
/// valid numbers, so the poison is ignored.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
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
        // Budgets still work; full ones are forgotten only when the host calls `purge`.
        tracing::warn!(error = %err, "cannot start the rate limiter's purge thread");
    }
}

#[async_trait]
impl RateLimiter for LocalRateLimiter {
    async fn check(&self, budget: &str) -> Result<RateLimitDecision, StoreError> {
        Ok(self.decide(budget))
    }

    fn check_now(&self, budget: &str) -> Option<Result<RateLimitDecision, StoreError>> {
        Some(Ok(self.decide(budget)))
    }

    fn refund(&self, budget: &str) {
        self.give_back(budget);
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

/// How long an empty budget of `limit` requests, one back every `period_nanos`, takes to fill.
fn window(period_nanos: u64, limit: u32) -> Duration {
    Duration::from_nanos(period_nanos.saturating_mul(u64::from(limit)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HeaderMap;

    fn principal(key_id: &str) -> &str {
        key_id
    }

    #[test]
    fn a_burst_is_served_then_refused_with_the_time_to_wait() {
        let limiter = LocalRateLimiter::new(Duration::from_secs(60), NonZeroU32::new(3).unwrap());
        let key = principal("key_1");
        let remaining: Vec<u32> = (0..3).map(|_| limiter.decide(key).remaining()).collect();
        assert_eq!(remaining, [2, 1, 0]);
        let refused = limiter.decide(key);
        assert!(!refused.is_allowed());
        let wait = refused.retry_after().unwrap();
        assert!(
            wait > Duration::from_secs(58) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        // Another key has its own budget.
        assert_eq!(limiter.decide(principal("key_2")).remaining(), 2);
    }

    #[test]
    fn a_refund_gives_one_request_back() {
        let limiter = LocalRateLimiter::new(Duration::from_secs(60), NonZeroU32::new(2).unwrap());
        assert_eq!(limiter.decide("a").remaining(), 1);
        assert_eq!(limiter.decide("a").remaining(), 0);
        limiter.give_back("a");
        assert_eq!(limiter.decide("a").remaining(), 0, "one came back");
        assert!(!limiter.decide("a").is_allowed());
        limiter.give_back("a");
        limiter.give_back("a");
        limiter.give_back("a");
        assert_eq!(limiter.tracked_keys(), 0, "a full budget is forgotten");
        assert_eq!(
            limiter.decide("a").remaining(),
            1,
            "never more than a full budget"
        );
        limiter.give_back("unknown");
    }

    #[test]
    fn idle_keys_are_purged_in_the_background_so_memory_stays_bounded() {
        // Budgets refill within a microsecond: every key is idle almost at once.
        let limiter = LocalRateLimiter::new(Duration::from_micros(1), NonZeroU32::new(1).unwrap())
            .with_purge_interval(Duration::from_millis(20));
        for index in 0..10_000 {
            limiter.decide(principal(&format!("key_{index}")));
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
        limiter.decide(principal("key_again"));
        limiter.purge();
        std::thread::sleep(Duration::from_millis(1));
        limiter.purge();
        assert_eq!(limiter.tracked_keys(), 0);
    }

    #[test]
    fn the_purge_thread_ends_with_its_limiter() {
        let limiter = LocalRateLimiter::new(Duration::from_secs(1), NonZeroU32::new(1).unwrap())
            .with_purge_interval(Duration::from_millis(1));
        limiter.decide("started");
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
                let decision = limiter.decide(key);
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
