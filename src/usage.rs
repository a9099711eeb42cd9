//! [`UsageRecorder`]: each key's answered requests per hour, route and outcome, counted in
//! process and written in batches, so the request path never waits for a store write.
//!
//! A request counts in its thread's own map of keys, behind that thread's own lock (no lock
//! or counter shared by the threads, no clock read: the hour is ticked every second by the
//! background task; an allocation only for the first request of a key on a thread after a
//! flush). Every flush interval (default [`DEFAULT_FLUSH_INTERVAL`]) the background task takes
//! every thread's map and writes the counts with one [`UsageStore::record_usage`] call: for
//! `PgStore`, one statement that adds.
//!
//! # Invariants
//!
//! - **Nothing counted is lost while the store answers.** A flush swaps each thread's map for
//!   an empty one under that thread's lock, so a request counted during a flush lands in this
//!   flush or the next, never in neither. A batch the store refused is kept and written, added
//!   to, with the next one; [`flush`](UsageRecorder::flush) on shutdown writes what is in
//!   hand.
//! - **Bounded memory.** At most `capacity` counters (a key counted on one thread) are held
//!   between two flushes (default [`DEFAULT_CAPACITY`]); a request of a key that finds no
//!   place is dropped and counted (`partner_api_usage_dropped_total`) and asks for a flush at
//!   once. A kept batch holds at most [`MAX_KEPT_COUNTS`] counts; beyond, the oldest hours are
//!   dropped and counted.
//! - **The right hour.** Each counter has a count per route and outcome for even and for odd
//!   hours; a request adds to its hour's, and a flush takes both and writes each with its
//!   hour. So with flushes less than an hour apart (the interval is capped at
//!   [`MAX_FLUSH_INTERVAL`]) a count is written with the hour it was counted in; only a
//!   request that read the hour just before it turned and added after the flush that
//!   followed can be written two hours late.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use partner_api::maintenance::Maintenance;
//! use partner_api::usage::UsageRecorder;
//! use partner_api::{MemoryStore, PartnerApi};
//!
//! let store = MemoryStore::new();
//! let recorder = UsageRecorder::new(store.clone());
//! let api = PartnerApi::from_store(store).with_usage(recorder.clone());
//! let maintenance = Maintenance::new().with_usage(recorder).start()?;
//! // ... serve; on shutdown, stop and write the counts in hand:
//! assert!(maintenance.shutdown().await.is_ok());
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use thread_local::ThreadLocal;
use tokio::sync::Mutex;

use crate::hashing::BuildOneShotXxh3;
use crate::log::ErrorChain;
use crate::metrics::{self, StoreCall};
use crate::model::Timestamp;
use crate::recording::{self, Bounds, Recorder, Retention};
use crate::store::usage::hour_of_millis;
use crate::store::StoreError;
use crate::store::{UsageCount, UsageOutcome, UsageRoute, UsageStore, DEFAULT_USAGE_RETENTION};

/// How often counts are written, by default.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(10);
/// The longest flush interval: under an hour, so each hour's counters are taken before
/// they are used again (see the module's invariants).
pub const MAX_FLUSH_INTERVAL: Duration = Duration::from_secs(30 * 60);
/// How many keys are counted between two flushes, by default.
pub const DEFAULT_CAPACITY: usize = 100_000;
/// The most counts a batch the store refused keeps for the next flush.
pub const MAX_KEPT_COUNTS: usize = 200_000;

const ROUTES: usize = 4;
const OUTCOMES: usize = 8;
const SLOTS: usize = ROUTES * OUTCOMES;

fn slot(route: UsageRoute, outcome: UsageOutcome) -> usize {
    let route = match route {
        UsageRoute::Me => 0,
        UsageRoute::Orders => 1,
        UsageRoute::Events => 2,
        UsageRoute::Deprecations => 3,
    };
    let outcome = match outcome {
        UsageOutcome::Ok => 0,
        UsageOutcome::NotModified => 1,
        UsageOutcome::Revoked => 2,
        UsageOutcome::Expired => 3,
        UsageOutcome::AddressNotAllowed => 4,
        UsageOutcome::PermissionMissing => 5,
        UsageOutcome::RateLimited => 6,
        UsageOutcome::Error => 7,
    };
    route * OUTCOMES + outcome
}

fn unslot(index: usize) -> (UsageRoute, UsageOutcome) {
    (
        UsageRoute::ALL[index / OUTCOMES],
        UsageOutcome::ALL[index % OUTCOMES],
    )
}

/// One key's counts on one thread: for even and for odd hours, one per route and outcome.
type KeyCounts = [[u64; SLOTS]; 2];

/// One thread's counts, by key id. Hashed with XXH3 in one call, not SipHash: ids come from the store,
/// never from a client, so nobody can choose them to collide, and this hash is on every
/// request.
type ThreadCounts = HashMap<Arc<str>, KeyCounts, BuildOneShotXxh3>;

fn parity(hour_millis: i64) -> usize {
    usize::from(hour_millis.div_euclid(3_600_000).rem_euclid(2) == 1)
}

/// Counts each key's answered requests in process and writes them to a [`UsageStore`] in
/// batches. Clones share the same counts.
#[derive(Clone)]
pub struct UsageRecorder {
    shared: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn UsageStore>,
    /// Each thread's counts, behind a lock of its own: a request takes only its thread's
    /// lock, which nothing else takes but a flush, for as long as it takes to swap the map.
    counters: ThreadLocal<std::sync::Mutex<ThreadCounts>>,
    /// Places taken in the threads' maps (one a key a thread counted, never more than the
    /// capacity), the flush interval, what was dropped.
    bounds: Bounds,
    /// The start of the current hour, in milliseconds; ticked every second.
    hour_millis: AtomicI64,
    /// How long usage is kept, and when the background task last deleted older hours.
    retention: Retention,
    /// One flush at a time; holds the counts a refused batch must write again.
    kept: Mutex<Vec<UsageCount>>,
}

impl UsageRecorder {
    /// Creates a recorder that writes to `store`; nothing drives it
    /// until it is handed to a [`Maintenance`](crate::maintenance::Maintenance) (which ticks
    /// its clock, writes every flush interval and at shutdown), or until
    /// [`flush`](Self::flush) is called. Starts no task.
    pub fn new(store: impl UsageStore + 'static) -> Self {
        Self::with_capacity(store, DEFAULT_CAPACITY)
    }

    /// [`new`](Self::new), and its background task started on the current tokio runtime
    /// (ending when the last clone is dropped): for tests and hosts without a
    /// [`Maintenance`](crate::maintenance::Maintenance). Outside a runtime it starts none
    /// and says so in the log, never a panic.
    pub fn spawn(store: impl UsageStore + 'static) -> Self {
        let recorder = Self::new(store);
        recording::spawn(&recorder.shared);
        recorder
    }

    /// As [`new`](Self::new), counting at most `capacity` keys between two flushes. Starts no
    /// task.
    pub fn with_capacity(store: impl UsageStore + 'static, capacity: usize) -> Self {
        let shared = Arc::new(Shared {
            store: Arc::new(store),
            counters: ThreadLocal::new(),
            bounds: Bounds::new(capacity, DEFAULT_FLUSH_INTERVAL, metrics::usage_dropped),
            hour_millis: AtomicI64::new(current_hour_millis()),
            retention: Retention::new(Some(DEFAULT_USAGE_RETENTION)),
            kept: Mutex::new(Vec::new()),
        });
        Self { shared }
    }

    /// Sets how often counts are written (default [`DEFAULT_FLUSH_INTERVAL`], at most
    /// [`MAX_FLUSH_INTERVAL`], at least a second), from the next flush on.
    #[must_use]
    pub fn with_flush_interval(self, interval: Duration) -> Self {
        let interval = interval.clamp(Duration::from_secs(1), MAX_FLUSH_INTERVAL);
        self.shared.bounds.set_flush_interval(interval);
        self
    }

    /// Sets how long the store keeps usage (default
    /// [`DEFAULT_USAGE_RETENTION`], 90 days; `None` for ever): after its flushes, at most once
    /// a minute, the background task deletes older hours, 500 counts a store call.
    #[must_use]
    pub fn with_retention(self, retention: Option<Duration>) -> Self {
        self.shared.retention.set(retention);
        self
    }

    /// Counts one request of the key `key_id` on `route`, answered with `outcome`. Never
    /// waits: at capacity, a key not counted yet is dropped (and counted as dropped) and a
    /// flush is asked for.
    pub fn record(&self, key_id: &Arc<str>, route: UsageRoute, outcome: UsageOutcome) {
        let shared = &*self.shared;
        let hour = shared.hour_millis.load(Ordering::Relaxed);
        let (parity, slot) = (parity(hour), slot(route, outcome));
        let cell = shared
            .counters
            .get_or(|| std::sync::Mutex::new(ThreadCounts::default()));
        let mut counts = cell.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(key) = counts.get_mut(&**key_id) {
            key[parity][slot] += 1;
            return;
        }
        if !shared.bounds.places.reserve() {
            drop(counts);
            shared.bounds.no_place();
            return;
        }
        let mut key = KeyCounts::default();
        key[parity][slot] = 1;
        counts.insert(key_id.clone(), key);
    }

    /// Writes the counts gathered so far (and any a refused batch kept) in one store call;
    /// returns how many counts it wrote. Call it on graceful shutdown so the counts in hand
    /// are not lost.
    ///
    /// # Errors
    ///
    /// The store's; the counts are kept for the next flush.
    pub async fn flush(&self) -> Result<usize, StoreError> {
        // The clock as of now, whether or not a maintenance drives it.
        self.shared.tick();
        self.shared.flush().await
    }

    /// Returns how many requests were dropped: the recorder was full, or a kept batch past
    /// its bound.
    pub fn dropped(&self) -> u64 {
        self.shared.bounds.dropped()
    }

    /// Returns how many counters (a key counted on one thread) are held now.
    pub(crate) fn tracked_keys(&self) -> usize {
        self.shared
            .counters
            .iter()
            .map(|cell| cell.lock().map_or(0, |counts| counts.len()))
            .sum()
    }
}

impl Shared {
    async fn flush(&self) -> Result<usize, StoreError> {
        let mut kept = self.kept.lock().await;
        let hour = self.hour_millis.load(Ordering::Relaxed);
        // Each thread's map is taken whole (its lock held only for the swap), and its places
        // given back once its entries are gone from it.
        let mut batch: HashMap<(Arc<str>, i64, usize), u64> = HashMap::new();
        for cell in &self.counters {
            let taken = std::mem::take(&mut *cell.lock().unwrap_or_else(PoisonError::into_inner));
            self.bounds.places.release(taken.len());
            for (key_id, by_parity) in taken {
                for (parity_index, counts) in by_parity.iter().enumerate() {
                    // The current hour's parity holds this hour's counts; the other, the last's.
                    let slot_hour = if parity_index == parity(hour) {
                        hour
                    } else {
                        hour - 3_600_000
                    };
                    for (index, &count) in counts.iter().enumerate() {
                        if count > 0 {
                            *batch.entry((key_id.clone(), slot_hour, index)).or_default() += count;
                        }
                    }
                }
            }
        }
        // Counts a refused batch kept meet the new ones, added up.
        for count in kept.drain(..) {
            let index = slot(count.route, count.outcome);
            let hour = count.hour.as_datetime().timestamp_millis();
            *batch
                .entry((Arc::from(count.key_id), hour, index))
                .or_default() += count.count;
        }
        let mut counts: Vec<UsageCount> = batch
            .into_iter()
            .filter_map(|((key_id, hour, index), count)| {
                let (route, outcome) = unslot(index);
                Some(UsageCount {
                    key_id: key_id.to_string(),
                    hour: Timestamp::from_unix_millis(hour)?,
                    route,
                    outcome,
                    count,
                })
            })
            .collect();
        if counts.is_empty() {
            return Ok(0);
        }
        // Held in `kept` while the store writes them: a write that panics (the round is
        // dropped, `supervise`) loses no count; the next flush sends them again.
        kept.clone_from(&counts);
        let started = Instant::now();
        let recorded = self.store.record_usage(&counts).await;
        StoreCall::RecordUsage.finished(started.elapsed(), recorded.as_ref().err());
        metrics::usage_batch(counts.len(), recorded.is_ok());
        match recorded {
            Ok(()) => {
                kept.clear();
                Ok(counts.len())
            }
            Err(err) => {
                tracing::warn!(
                    counts = counts.len(),
                    error = %ErrorChain(&err),
                    "partner API could not record key usage; retrying with the next batch"
                );
                self.bounds.keep_newest(
                    &mut counts,
                    MAX_KEPT_COUNTS,
                    |count| count.hour,
                    |count| count.count,
                );
                *kept = counts;
                Err(err)
            }
        }
    }
}

impl Recorder for Shared {
    fn tick(&self) {
        self.hour_millis
            .store(current_hour_millis(), Ordering::Relaxed);
    }

    const TASK: &'static str = "usage_recorder";

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    async fn flush_in_background(self: Arc<Self>) {
        // Failures are logged in `flush` and retried with the next batch.
        let _ = Shared::flush(&self).await;
        let store = &self.store;
        self.retention
            .prune(PRUNE_BATCH, "key usage", |keep, batch| {
                store.prune_usage(keep, batch)
            })
            .await;
    }
}

/// The most counts one retention call deletes.
const PRUNE_BATCH: u32 = 500;

fn current_hour_millis() -> i64 {
    hour_of_millis(Timestamp::now().as_datetime().timestamp_millis())
}

impl fmt::Debug for UsageRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UsageRecorder")
            .field("tracked_keys", &self.tracked_keys())
            .field("capacity", &self.shared.bounds.places.capacity())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

recording::recorded!(UsageRecorder);

#[cfg(test)]
mod tests;
