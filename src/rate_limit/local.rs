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

use super::lease::{self, Leases, Published, Terms, LEASE_MAX_PERIOD};
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
/// budget that refills at least one request a millisecond lends its tokens a few at a time to
/// the worker threads that keep deciding for it, so a hot key's requests do not all write one
/// cache line; it never allows more than deciding each request under the lock would, and at
/// most 5 ms of refill fewer each time the budget runs dry (the invariants and their argument
/// are on the `lease` module). A
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
    /// Tells this limiter's leases from another's in a thread's memory.
    id: u64,
    /// Each budget's accounts; a full budget without leases is absent.
    shards: [Mutex<HashMap<Box<str>, Budget>>; SHARDS],
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
    /// Whether budgets refill fast enough to lend tokens to threads (`LEASE_MAX_PERIOD`).
    leases: bool,
}

/// One budget's accounts, under its shard's lock.
#[derive(Debug, Default)]
struct Budget {
    /// The theoretical arrival time of the requests debited so far, in nanoseconds since the
    /// limiter's epoch: at or before now, the budget is full.
    tat: u64,
    /// Tokens lent to threads; empty unless the key is hot.
    leases: Leases,
    /// `tat` as the last decision under the lock left it, for the leases' headers; made with
    /// the budget's first lease, so a budget never hot costs no allocation more.
    published: Option<Arc<Published>>,
}

impl Budget {
    /// Publishes the arrival time to the budget's leases, if it ever had one.
    fn publish(&self) {
        if let Some(published) = &self.published {
            published.set(self.tat);
        }
    }
}

/// Numbers the limiters of the process, for [`Budgets::id`].
static NEXT_LIMITER: AtomicU64 = AtomicU64::new(0);

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
            id: NEXT_LIMITER.fetch_add(1, Ordering::Relaxed),
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            hasher: RandomState::new(),
            epoch: Instant::now(),
            limit: burst.get(),
            period: Duration::from_nanos(period_nanos),
            period_nanos,
            tolerance_nanos: period_nanos * u64::from(burst.get() - 1),
            purge_interval_millis: AtomicU64::new(millis(DEFAULT_PURGE_INTERVAL)),
            purge_started: AtomicBool::new(false),
            leases: Duration::from_nanos(period_nanos) <= LEASE_MAX_PERIOD,
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
        self.decide_at(budget, self.budgets.now())
    }

    /// The decision for a request of `budget` at `now` (nanoseconds since the epoch).
    fn decide_at(&self, budget: &str, now: u64) -> RateLimitDecision {
        let budgets = &*self.budgets;
        let (limit, period) = (budgets.limit, budgets.period_nanos);
        let terms = Terms {
            limiter: budgets.id,
            limit,
            period,
            window: window(period, limit),
        };
        if budgets.leases {
            if let Some(decision) = lease::take(terms, budget, now) {
                return decision;
            }
        }
        let hash = budgets.hasher.hash_one(budget);
        let hot = budgets.leases && lease::is_hot(budgets.id, hash, now);
        let mut shard = budgets.shard(hash);
        let (entry, new) = match shard.get_mut(budget) {
            Some(entry) => (entry, false),
            None => (shard.entry(budget.into()).or_default(), true),
        };
        let tat = entry.leases.fold(entry.tat, now, period).max(now);
        entry.tat = tat;
        // Held tokens are spent as far as anyone else is concerned.
        let held = entry.leases.held().saturating_mul(period);
        let allowed_from = tat
            .saturating_add(held)
            .saturating_sub(budgets.tolerance_nanos);
        // (A new budget is full, so never refused: nothing to forget here.)
        if now < allowed_from && !entry.leases.steal() {
            let full_at = tat.saturating_add(held);
            entry.publish();
            return RateLimitDecision::refused(
                limit,
                Duration::from_nanos(allowed_from - now),
                Duration::from_nanos(full_at - now),
            )
            .with_window(terms.window);
        }
        // Allowed from the free tokens, or from one taken back from a lease: debited now.
        entry.tat = tat.saturating_add(period);
        entry.publish();
        // Held tokens are the key's to spend, so they count as remaining.
        let (decision, remaining) = terms.allowed(now, entry.tat);
        if hot {
            let free = remaining.saturating_sub(entry.leases.held());
            let tokens = lease::lease_size(free, entry.leases.holding());
            if tokens > 0 {
                let published = entry.published.get_or_insert_with(Arc::default);
                published.set(entry.tat);
                lease::grant(&mut entry.leases, published, terms, budget, tokens, now);
            }
        }
        drop(shard);
        if new && !budgets.purge_started.swap(true, Ordering::Relaxed) {
            spawn_purge(Arc::downgrade(&self.budgets));
        }
        decision
    }

    fn give_back(&self, budget: &str) {
        let budgets = &*self.budgets;
        let now = budgets.now();
        let mut shard = budgets.shard(budgets.hasher.hash_one(budget));
        if let Some(entry) = shard.get_mut(budget) {
            let tat = entry.leases.fold(entry.tat, now, budgets.period_nanos);
            entry.tat = tat.saturating_sub(budgets.period_nanos);
            entry.publish();
            if entry.tat <= now && entry.leases.is_empty() {
                shard.remove(budget);
            }
        }
    }
}

impl Budgets {
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The shard of the budget whose name hashes to `hash`, locked.
    fn shard(&self, hash: u64) -> MutexGuard<'_, HashMap<Box<str>, Budget>> {
        // The remainder is below SHARDS, so the cast cannot truncate.
        #[allow(clippy::cast_possible_truncation)]
        let index = (hash % SHARDS as u64) as usize;
        lock(&self.shards[index])
    }

    fn purge(&self) {
        self.purge_at(self.now());
    }

    /// Folds every budget's leases at `now` and forgets the budgets full without leases.
    fn purge_at(&self, now: u64) {
        for shard in &self.shards {
            let mut shard = lock(shard);
            shard.retain(|_, budget| {
                budget.tat = budget.leases.fold(budget.tat, now, self.period_nanos);
                budget.publish();
                budget.tat > now || !budget.leases.is_empty()
            });
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
mod tests;
