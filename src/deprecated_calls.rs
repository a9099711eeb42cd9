//! [`DeprecatedCallRecorder`]: each key's calls of deprecated routes and parameters per UTC
//! day, counted in process and written in batches, so a deprecated call costs the request
//! path no store write.
//!
//! It works as [`UsageRecorder`](crate::usage::UsageRecorder) does: a request counts in its
//! thread's own map behind that thread's own lock (no lock or counter shared by the threads,
//! no clock read: the clock is ticked every second by the background task), and every flush
//! interval the background task writes every thread's counts with one
//! [`DeprecatedCallStore::record_deprecated_calls`] call. Only requests that a declared
//! deprecation concerns are counted, so an API with none pays nothing.
//!
//! # Invariants
//!
//! - **Nothing counted is lost while the store answers**: a flush swaps each thread's map for
//!   an empty one under that thread's lock; a refused batch is kept (at most 100,000 counts, the
//!   oldest days dropped first) and written with the next one.
//! - **Bounded memory**: at most `capacity` counters (a key counted on one thread) between
//!   two flushes; a call of a key that finds no place is dropped, counted
//!   (`partner_api_deprecated_calls_dropped_total`) and asks for a flush at once.
//! - **The right day**: each counter keeps even and odd days apart and the time of its last
//!   call; a flush writes a slot's count under the day of that last call. Every call in a slot
//!   is of that day while flushes are less than a day apart ([`MAX_FLUSH_INTERVAL`]; a store
//!   that hangs for a day can mix two days of one parity). A last call is known to the second
//!   the clock was last ticked.

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
use crate::store::usage::day_of_millis;
use crate::store::{
    DeprecatedCallCount, DeprecatedCallStore, StoreError, DEFAULT_DEPRECATED_CALLS_RETENTION,
};

/// How often counts are written, by default.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(10);
/// The longest flush interval: under a day, so each day's counters are taken before they are
/// used again (see the module's invariants).
pub const MAX_FLUSH_INTERVAL: Duration = Duration::from_secs(30 * 60);
/// How many keys are counted between two flushes, by default.
pub const DEFAULT_CAPACITY: usize = 100_000;
/// The most counts a batch the store refused keeps for the next flush.
pub(crate) const MAX_KEPT_COUNTS: usize = 100_000;

/// The most counts one retention call deletes.
const PRUNE_BATCH: u32 = 500;

/// A key's calls of one target on one thread: for even and for odd days, how many and the
/// last (milliseconds).
#[derive(Clone, Copy, Default)]
struct TargetCalls {
    calls: [u64; 2],
    last: [i64; 2],
}

/// One thread's counts: by key id, then by target. A key calls few deprecated targets, and
/// the request passes the API's own `Arc` of each, so a target is found by its pointer.
type ThreadCalls = HashMap<Arc<str>, Vec<(Arc<str>, TargetCalls)>, BuildOneShotXxh3>;

/// A count of a flush: key id, target and day (milliseconds).
type BatchKey = (Arc<str>, Arc<str>, i64);

fn parity(day_millis: i64) -> usize {
    usize::from(day_millis.div_euclid(86_400_000).rem_euclid(2) == 1)
}

/// Counts each key's calls of deprecated routes and parameters in process and writes them to
/// a [`DeprecatedCallStore`] in batches; given to
/// [`PartnerApi::with_deprecated_calls`](crate::PartnerApi::with_deprecated_calls). Clones
/// share the same counts.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use partner_api::deprecated_calls::DeprecatedCallRecorder;
/// use partner_api::deprecation::Deprecation;
/// use partner_api::{MemoryStore, PartnerApi};
///
/// let store = MemoryStore::new();
/// let recorder = DeprecatedCallRecorder::new(store.clone());
/// let api = PartnerApi::from_store(store)
///     .with_deprecation("/orders?provider=2026-12-01".parse::<Deprecation>()?)
///     .with_deprecated_calls(recorder.clone());
/// let maintenance = partner_api::maintenance::Maintenance::new()
///     .with_deprecated_calls(recorder)
///     .start()?;
/// // ... serve; on shutdown, stop and write the counts in hand:
/// assert!(maintenance.shutdown().await.is_ok());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct DeprecatedCallRecorder {
    shared: Arc<Shared>,
}

struct Shared {
    store: Arc<dyn DeprecatedCallStore>,
    counters: ThreadLocal<std::sync::Mutex<ThreadCalls>>,
    bounds: Bounds,
    /// The clock, in milliseconds, ticked every second.
    now_millis: AtomicI64,
    retention: Retention,
    /// One flush at a time; holds the counts a refused batch must write again.
    kept: Mutex<Vec<DeprecatedCallCount>>,
}

impl DeprecatedCallRecorder {
    /// Creates a recorder that writes to `store`; nothing drives it
    /// until it is handed to a [`Maintenance`](crate::maintenance::Maintenance) (which ticks
    /// its clock, writes every flush interval and at shutdown), or until
    /// [`flush`](Self::flush) is called. Starts no task.
    pub fn new(store: impl DeprecatedCallStore + 'static) -> Self {
        Self::with_capacity(store, DEFAULT_CAPACITY)
    }

    /// [`new`](Self::new), and its background task started on the current tokio runtime
    /// (ending when the last clone is dropped): for tests and hosts without a
    /// [`Maintenance`](crate::maintenance::Maintenance). Outside a runtime it starts none
    /// and says so in the log, never a panic.
    pub fn spawn(store: impl DeprecatedCallStore + 'static) -> Self {
        let recorder = Self::new(store);
        recording::spawn(&recorder.shared);
        recorder
    }

    /// As [`new`](Self::new), counting at most `capacity` keys between two flushes. Starts no
    /// task.
    pub fn with_capacity(store: impl DeprecatedCallStore + 'static, capacity: usize) -> Self {
        let shared = Arc::new(Shared {
            store: Arc::new(store),
            counters: ThreadLocal::new(),
            bounds: Bounds::new(
                capacity,
                DEFAULT_FLUSH_INTERVAL,
                metrics::deprecated_calls_dropped,
            ),
            now_millis: AtomicI64::new(now_millis() / 1000 * 1000),
            retention: Retention::new(Some(DEFAULT_DEPRECATED_CALLS_RETENTION)),
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

    /// Sets how long the store keeps deprecated calls (default
    /// [`DEFAULT_DEPRECATED_CALLS_RETENTION`], 31 days; `None` for ever): after its flushes,
    /// at most once a minute, the background task deletes older days.
    #[must_use]
    pub fn with_retention(self, retention: Option<Duration>) -> Self {
        self.shared.retention.set(retention);
        self
    }

    /// Counts one call of the key `key_id` of `target`. Never waits: at capacity, a key not
    /// counted yet is dropped (and counted as dropped) and a flush is asked for.
    pub(crate) fn record(&self, key_id: &Arc<str>, target: &Arc<str>) {
        let shared = &*self.shared;
        let now = shared.now_millis.load(Ordering::Relaxed);
        let parity = parity(day_of_millis(now));
        let cell = shared
            .counters
            .get_or(|| std::sync::Mutex::new(ThreadCalls::default()));
        let mut counts = cell.lock().unwrap_or_else(PoisonError::into_inner);
        let targets = match counts.get_mut(&**key_id) {
            Some(targets) => targets,
            None => {
                if !shared.bounds.places.reserve() {
                    drop(counts);
                    shared.bounds.no_place();
                    return;
                }
                counts.entry(key_id.clone()).or_default()
            }
        };
        let index = match targets
            .iter()
            .position(|(held, _)| Arc::ptr_eq(held, target) || **held == **target)
        {
            Some(index) => index,
            None => {
                targets.push((target.clone(), TargetCalls::default()));
                targets.len() - 1
            }
        };
        let calls = &mut targets[index].1;
        calls.calls[parity] += 1;
        calls.last[parity] = calls.last[parity].max(now);
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

    /// Returns how many calls were dropped: the recorder was full, or a kept batch past its
    /// bound.
    pub fn dropped(&self) -> u64 {
        self.shared.bounds.dropped()
    }

    /// The store it writes to, which `GET /deprecations` reads.
    pub(crate) fn store(&self) -> &Arc<dyn DeprecatedCallStore> {
        &self.shared.store
    }
}

impl Shared {
    async fn flush(&self) -> Result<usize, StoreError> {
        let mut kept = self.kept.lock().await;
        let mut batch: HashMap<BatchKey, (u64, i64)> = HashMap::new();
        let mut add = |key: BatchKey, calls: u64, last: i64| {
            let held = batch.entry(key).or_insert((0, i64::MIN));
            held.0 = held.0.saturating_add(calls);
            held.1 = held.1.max(last);
        };
        for cell in &self.counters {
            let taken = std::mem::take(&mut *cell.lock().unwrap_or_else(PoisonError::into_inner));
            self.bounds.places.release(taken.len());
            for (key_id, targets) in taken {
                for (target, calls) in targets {
                    for index in 0..2 {
                        if calls.calls[index] == 0 {
                            continue;
                        }
                        // The day of the slot's last call: every call in a slot is of one day
                        // (a slot is of even or of odd days, and taken at least once a day).
                        let day = day_of_millis(calls.last[index]);
                        add(
                            (key_id.clone(), target.clone(), day),
                            calls.calls[index],
                            calls.last[index],
                        );
                    }
                }
            }
        }
        for count in kept.drain(..) {
            let day = count.day.as_datetime().timestamp_millis();
            let last = count.last_call_at.as_datetime().timestamp_millis();
            add(
                (Arc::from(count.key_id), Arc::from(count.target), day),
                count.calls,
                last,
            );
        }
        let mut counts: Vec<DeprecatedCallCount> = batch
            .into_iter()
            .filter_map(|((key_id, target, day), (calls, last))| {
                Some(DeprecatedCallCount {
                    key_id: key_id.to_string(),
                    day: Timestamp::from_unix_millis(day)?,
                    target: target.to_string(),
                    calls,
                    last_call_at: Timestamp::from_unix_millis(last)?,
                })
            })
            .collect();
        if counts.is_empty() {
            return Ok(0);
        }
        // Held in `kept` while the store writes them: a write that panics loses no count.
        kept.clone_from(&counts);
        let started = Instant::now();
        let recorded = self.store.record_deprecated_calls(&counts).await;
        StoreCall::RecordDeprecatedCalls.finished(started.elapsed(), recorded.as_ref().err());
        match recorded {
            Ok(()) => {
                kept.clear();
                Ok(counts.len())
            }
            Err(err) => {
                tracing::warn!(
                    counts = counts.len(),
                    error = %ErrorChain(&err),
                    "partner API could not record deprecated calls; retrying with the next batch"
                );
                self.bounds.keep_newest(
                    &mut counts,
                    MAX_KEPT_COUNTS,
                    |count| count.day,
                    |count| count.calls,
                );
                *kept = counts;
                Err(err)
            }
        }
    }
}

impl Recorder for Shared {
    const TASK: &'static str = "deprecated_call_recorder";

    fn tick(&self) {
        // To the second: what a last call is known to.
        let now = now_millis();
        self.now_millis
            .store(now - now.rem_euclid(1000), Ordering::Relaxed);
    }

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    async fn flush_in_background(self: Arc<Self>) {
        // Failures are logged in `flush` and retried with the next batch.
        let _ = Shared::flush(&self).await;
        let store = &self.store;
        self.retention
            .prune(PRUNE_BATCH, "deprecated calls", |keep, batch| {
                store.prune_deprecated_calls(keep, batch)
            })
            .await;
    }
}

fn now_millis() -> i64 {
    Timestamp::now().as_datetime().timestamp_millis()
}

impl fmt::Debug for DeprecatedCallRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeprecatedCallRecorder")
            .field("capacity", &self.shared.bounds.places.capacity())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

recording::recorded!(DeprecatedCallRecorder);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DeprecatedCallStore;
    use crate::MemoryStore;

    /// A memory store with the organization `org` and the key `key`, and the key's id.
    fn store_with_key(key: &str) -> (MemoryStore, String) {
        let store = MemoryStore::new();
        store
            .add_organization(crate::model::Organization {
                id: "org".into(),
                name: "Org".into(),
            })
            .unwrap();
        let key_id = store.add_key(key, "org").unwrap();
        (store, key_id)
    }

    #[tokio::test]
    async fn counts_each_key_and_target_and_writes_them_once() {
        let (store, key_id) = store_with_key("pk_test_one");
        let recorder = DeprecatedCallRecorder::spawn(store.clone());
        let key: Arc<str> = Arc::from(key_id.as_str());
        let (provider, me): (Arc<str>, Arc<str>) = ("/orders?provider".into(), "/me".into());
        for _ in 0..3 {
            recorder.record(&key, &provider);
        }
        recorder.record(&key, &me);
        // A target equal to one held, through another pointer, is the same target.
        recorder.record(&key, &Arc::from("/me"));
        assert_eq!(recorder.flush().await.unwrap(), 2);
        assert_eq!(recorder.flush().await.unwrap(), 0, "written once");
        let since = Timestamp::from_unix_millis(now_millis() - 86_400_000).unwrap();
        let totals = store.deprecated_calls("org", None, since).await.unwrap();
        let seen: Vec<(&str, u64)> = totals
            .iter()
            .map(|t| (t.target.as_str(), t.calls))
            .collect();
        assert_eq!(seen, [("/me", 2), ("/orders?provider", 3)]);
        assert!(totals.iter().all(|total| total.key_id == key_id));
    }

    /// A store that refuses writes while `failing`.
    struct Flaky {
        store: MemoryStore,
        failing: std::sync::atomic::AtomicBool,
    }

    #[async_trait::async_trait]
    impl DeprecatedCallStore for Flaky {
        async fn record_deprecated_calls(
            &self,
            counts: &[DeprecatedCallCount],
        ) -> Result<(), StoreError> {
            if self.failing.load(Ordering::SeqCst) {
                return Err(StoreError::unavailable("the database is down"));
            }
            self.store.record_deprecated_calls(counts).await
        }
        async fn deprecated_calls(
            &self,
            organization_id: &str,
            key_id: Option<&str>,
            since: Timestamp,
        ) -> Result<Vec<crate::store::DeprecatedCallTotal>, StoreError> {
            self.store
                .deprecated_calls(organization_id, key_id, since)
                .await
        }
        async fn prune_deprecated_calls(
            &self,
            older_than: Duration,
            batch: u32,
        ) -> Result<u64, StoreError> {
            self.store.prune_deprecated_calls(older_than, batch).await
        }
    }

    /// Through an outage of several flushes, with calls counted on four threads all along:
    /// the first flush the store accepts writes every call once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_survive_refused_flushes_and_are_written_once_after() {
        let (store, key_id) = store_with_key("pk_test_outage");
        let flaky = Arc::new(Flaky {
            store: store.clone(),
            failing: std::sync::atomic::AtomicBool::new(true),
        });
        let recorder =
            DeprecatedCallRecorder::spawn(flaky.clone()).with_flush_interval(MAX_FLUSH_INTERVAL);
        let (key, me): (Arc<str>, Arc<str>) = (Arc::from(key_id.as_str()), "/me".into());
        for round in 0..3 {
            let callers: Vec<_> = (0..4)
                .map(|_| {
                    let (recorder, key, me) = (recorder.clone(), key.clone(), me.clone());
                    std::thread::spawn(move || {
                        for _ in 0..250 {
                            recorder.record(&key, &me);
                        }
                    })
                })
                .collect();
            for caller in callers {
                caller.join().unwrap();
            }
            assert!(recorder.flush().await.is_err(), "round {round}");
        }
        flaky.failing.store(false, Ordering::SeqCst);
        recorder.record(&key, &me);
        assert!(recorder.flush().await.unwrap() >= 1);
        assert_eq!(recorder.flush().await.unwrap(), 0, "written once");
        let since = Timestamp::from_unix_millis(now_millis() - 2 * 86_400_000).unwrap();
        let totals = store.deprecated_calls("org", None, since).await.unwrap();
        assert_eq!(totals.iter().map(|t| t.calls).sum::<u64>(), 3 * 1000 + 1);
        assert_eq!(recorder.dropped(), 0);
    }

    #[tokio::test]
    async fn calls_either_side_of_midnight_are_written_under_their_own_days() {
        let (store, key_id) = store_with_key("pk_test_midnight");
        let recorder = DeprecatedCallRecorder::spawn(store.clone());
        let (key, me): (Arc<str>, Arc<str>) = (Arc::from(key_id.as_str()), "/me".into());
        // 2026-01-01T23:59:59Z, then a second later: the next day.
        let midnight = 1_767_312_000_000_i64;
        for (at, calls) in [(midnight - 1000, 2), (midnight, 3)] {
            recorder.shared.now_millis.store(at, Ordering::Relaxed);
            for _ in 0..calls {
                recorder.record(&key, &me);
            }
        }
        // The flush reads a clock that says neither day.
        recorder
            .shared
            .now_millis
            .store(midnight + 5 * 3_600_000, Ordering::Relaxed);
        assert_eq!(recorder.flush().await.unwrap(), 2);
        let day = |millis: i64| Timestamp::from_unix_millis(millis).unwrap();
        let first = store
            .deprecated_calls("org", None, day(midnight - 86_400_000))
            .await
            .unwrap();
        assert_eq!(first[0].calls, 5, "both days from the first");
        assert_eq!(first[0].last_call_at, day(midnight));
        let second = store
            .deprecated_calls("org", None, day(midnight))
            .await
            .unwrap();
        assert_eq!(second[0].calls, 3, "the second day's own");
    }
}
