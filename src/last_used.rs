//! [`LastUsedRecorder`]: each key's last use, gathered in process and written in batches, so
//! the request path never waits for a store write.
//!
//! A request records its key with an atomic store into a concurrent map (no clock read, no
//! lock held past a hash lookup); a background task stamps uses by a clock it ticks every
//! second and writes them with [`KeyManager::record_last_used`] every flush interval (default
//! [`DEFAULT_FLUSH_INTERVAL`]), one batch at a time. A last use is thus visible in the store
//! at most a flush interval and a second after it happened, to within a second.
//!
//! Memory is bounded whatever the number of keys: at most `capacity` keys are tracked
//! (default [`DEFAULT_CAPACITY`]); a key not used since the last flush is forgotten at the
//! next; when the map is full, the recorder flushes at once and a use of a key it cannot
//! track meanwhile is counted as dropped ([`LastUsedRecorder::dropped`]) and logged, never
//! waited for. A batch the store refused is kept and written with the next one.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use partner_api::last_used::LastUsedRecorder;
//! use partner_api::maintenance::Maintenance;
//! use partner_api::{MemoryStore, PartnerApi};
//!
//! let store = MemoryStore::new();
//! let recorder = LastUsedRecorder::new(store.clone());
//! let api = PartnerApi::from_store(store).with_last_used(recorder.clone());
//! let maintenance = Maintenance::new().with_last_used(recorder).start()?;
//! // ... serve; on shutdown, stop and write the batch in hand:
//! assert!(maintenance.shutdown().await.is_ok());
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use tokio::sync::Mutex;

use crate::hashing::BuildOneShotXxh3;
use crate::log::ErrorChain;
use crate::metrics::{self, StoreCall};
use crate::model::Timestamp;
use crate::recording::{self, Bounds, Recorder};
use crate::store::StoreError;
use crate::store::{KeyManager, KeyUse};

/// How often gathered uses are written, by default: well within the minute a last use may
/// lag.
pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(30);
/// How many keys are tracked between two flushes, by default.
pub const DEFAULT_CAPACITY: usize = 100_000;
/// The most uses written in one store call; a larger batch is written in parts.
const BATCH_LIMIT: usize = 10_000;

/// Gathers the last use of keys in process and writes them to a [`KeyManager`] in batches.
/// Clones share the same uses.
#[derive(Clone)]
pub struct LastUsedRecorder {
    shared: Arc<Shared>,
}

struct Shared {
    /// Whether the store records last uses at all.
    enabled: bool,
    store: Arc<dyn KeyManager>,
    /// Each tracked key's last use, in milliseconds since the Unix epoch; 0 once written.
    /// Key ids come from the store, never from a client: hashed with one XXH3 call.
    uses: DashMap<Arc<str>, AtomicI64, BuildOneShotXxh3>,
    /// Places taken in `uses` (never more than the capacity), the flush interval, what was
    /// dropped.
    bounds: Bounds,
    /// The clock uses are stamped with, ticked every second by the background task.
    now_millis: AtomicI64,
    /// One flush at a time; holds the uses a failed flush must write again.
    flushing: Mutex<Vec<KeyUse>>,
}

impl LastUsedRecorder {
    /// Creates a recorder that writes to `store`; nothing drives it
    /// until it is handed to a [`Maintenance`](crate::maintenance::Maintenance) (which ticks
    /// its clock, writes every flush interval and at shutdown), or until
    /// [`flush`](Self::flush) is called. Starts no task.
    pub fn new(store: impl KeyManager + 'static) -> Self {
        Self::with_capacity(store, DEFAULT_CAPACITY)
    }

    /// [`new`](Self::new), and its background task started on the current tokio runtime
    /// (ending when the last clone is dropped): for tests and hosts without a
    /// [`Maintenance`](crate::maintenance::Maintenance). Outside a runtime it starts none
    /// and says so in the log, never a panic.
    pub fn spawn(store: impl KeyManager + 'static) -> Self {
        let recorder = Self::new(store);
        recording::spawn(&recorder.shared);
        recorder
    }

    /// As [`new`](Self::new), counting at most `capacity` keys between two flushes. Starts no
    /// task.
    pub fn with_capacity(store: impl KeyManager + 'static, capacity: usize) -> Self {
        let enabled = store.supports(crate::store::KeyAbility::LastUse);
        let shared = Arc::new(Shared {
            enabled,
            store: Arc::new(store),
            uses: DashMap::default(),
            bounds: Bounds::new(capacity, DEFAULT_FLUSH_INTERVAL, metrics::last_used_dropped),
            now_millis: AtomicI64::new(now_millis()),
            flushing: Mutex::new(Vec::new()),
        });
        Self { shared }
    }

    /// Sets how often uses are written (default [`DEFAULT_FLUSH_INTERVAL`]), from the next
    /// flush on.
    #[must_use]
    pub fn with_flush_interval(self, interval: Duration) -> Self {
        self.shared.bounds.set_flush_interval(interval);
        self
    }

    /// Records a use of the key `key_id` now. Never waits: at capacity, a key it does not
    /// track yet is dropped (and counted) and a flush is asked for.
    pub fn record(&self, key_id: &Arc<str>) {
        let shared = &*self.shared;
        if !shared.enabled {
            return;
        }
        let now = shared.now_millis.load(Ordering::Relaxed);
        if let Some(last) = shared.uses.get(&**key_id) {
            // The clock ticks once a second: a hot key's line is written once a second, not
            // by every request on every worker.
            if last.load(Ordering::Relaxed) != now {
                last.store(now, Ordering::Relaxed);
            }
            return;
        }
        if !shared.bounds.places.reserve() {
            shared.bounds.no_place();
            return;
        }
        match shared.uses.entry(key_id.clone()) {
            Entry::Occupied(entry) => {
                // Another request inserted it meanwhile: the reserved place is not needed.
                entry.get().store(now, Ordering::Relaxed);
                shared.bounds.places.release(1);
            }
            Entry::Vacant(entry) => {
                entry.insert(AtomicI64::new(now));
            }
        }
    }

    /// Writes the uses gathered so far (and any a failed flush kept) in one batch; returns how
    /// many keys it wrote. Call it on graceful shutdown so the batch in hand is not lost.
    ///
    /// # Errors
    ///
    /// The store's; the batch is kept for the next flush.
    pub async fn flush(&self) -> Result<usize, StoreError> {
        // The clock as of now, whether or not a maintenance drives it.
        self.shared.tick();
        self.shared.flush().await
    }

    /// Returns how many uses were dropped because the recorder was full.
    pub fn dropped(&self) -> u64 {
        self.shared.bounds.dropped()
    }

    /// Returns how many keys are tracked now.
    pub(crate) fn tracked_keys(&self) -> usize {
        self.shared.uses.len()
    }
}

impl Shared {
    async fn flush(&self) -> Result<usize, StoreError> {
        let mut batch = self.flushing.lock().await;
        let kept = batch.len();
        // Keys unused since the last flush are forgotten, which bounds the map; their places
        // are given back once they are gone.
        let mut forgotten = 0;
        self.uses.retain(|_, last| {
            let used = last.load(Ordering::Relaxed) != 0;
            forgotten += usize::from(!used);
            used
        });
        self.bounds.places.release(forgotten);
        for entry in &self.uses {
            let millis = entry.value().swap(0, Ordering::Relaxed);
            if let Some(at) = (millis != 0)
                .then(|| Timestamp::from_unix_millis(millis))
                .flatten()
            {
                batch.push(KeyUse {
                    key_id: entry.key().to_string(),
                    at,
                });
            }
        }
        if kept > 0 {
            // Uses a failed flush kept meet new ones: one entry per key, its latest use, and
            // no more than the recorder tracks, so an outage cannot grow the batch.
            let mut latest: HashMap<String, Timestamp> = HashMap::with_capacity(batch.len());
            for KeyUse { key_id, at } in batch.drain(..) {
                let last = latest.entry(key_id).or_insert(at);
                *last = (*last).max(at);
            }
            let over = latest.len().saturating_sub(self.bounds.places.capacity());
            if over > 0 {
                self.bounds.count_dropped(over as u64);
            }
            batch.extend(
                latest
                    .into_iter()
                    .take(self.bounds.places.capacity())
                    .map(|(key_id, at)| KeyUse { key_id, at }),
            );
        }
        let mut written = 0;
        while !batch.is_empty() {
            let chunk = batch.len().min(BATCH_LIMIT);
            let started = Instant::now();
            let recorded = self.store.record_last_used(&batch[..chunk]).await;
            StoreCall::RecordLastUsed.finished(started.elapsed(), recorded.as_ref().err());
            metrics::last_used_batch(chunk, recorded.is_ok());
            match recorded {
                Ok(()) => {
                    batch.drain(..chunk);
                    written += chunk;
                }
                Err(err) => {
                    // The rest is kept for the next flush.
                    tracing::warn!(
                        keys = batch.len(),
                        error = %ErrorChain(&err),
                        "partner API could not record the last use of keys; retrying with the next batch"
                    );
                    return Err(err);
                }
            }
        }
        Ok(written)
    }
}

impl Recorder for Shared {
    fn tick(&self) {
        self.now_millis.store(now_millis(), Ordering::Relaxed);
    }

    const TASK: &'static str = "last_used_recorder";

    fn bounds(&self) -> &Bounds {
        &self.bounds
    }

    fn was_full(&self) {
        let dropped = self.bounds.dropped();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "partner API last-use recorder was full; some uses were not recorded"
            );
        }
    }

    async fn flush_in_background(self: Arc<Self>) {
        // Failures are logged in `flush` and retried with the next batch.
        let _ = Shared::flush(&self).await;
    }
}

fn now_millis() -> i64 {
    Timestamp::now().as_datetime().timestamp_millis()
}

impl fmt::Debug for LastUsedRecorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LastUsedRecorder")
            .field("tracked_keys", &self.tracked_keys())
            .field("capacity", &self.shared.bounds.places.capacity())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

recording::recorded!(LastUsedRecorder);

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    use crate::store::MemoryStore;

    /// The invariant `uses.len() <= places taken <= capacity`, under bursts of new keys
    /// racing with flushes. The places taken are one atomic, so sampling them is exact; the
    /// map's length is not (`DashMap::len` adds up its shards one after another, so a sample
    /// taken while entries come and go may count one that was already gone), so it is
    /// compared when the
    /// writers have stopped and the flush lock is held.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_new_keys_and_flushes_never_take_the_recorder_past_its_capacity() {
        const CAPACITY: usize = 100;
        let recorder = LastUsedRecorder::with_capacity(MemoryStore::new(), CAPACITY)
            .with_flush_interval(Duration::from_secs(3600));
        for round in 0..20 {
            let writing = Arc::new(AtomicBool::new(true));
            let sampler = {
                let (recorder, writing) = (recorder.clone(), writing.clone());
                std::thread::spawn(move || {
                    let mut most = 0;
                    while writing.load(Ordering::Acquire) {
                        most = most.max(recorder.shared.bounds.places.taken());
                        std::thread::yield_now();
                    }
                    most
                })
            };
            let writers: Vec<_> = (0..8)
                .map(|thread| {
                    let recorder = recorder.clone();
                    std::thread::spawn(move || {
                        for n in 0..1_000 {
                            // Every thread records every key, so inserts of one key race too;
                            // each round moves on to keys the last one did not use.
                            let key: Arc<str> =
                                format!("key-{}", (n * 7 + thread + round * 37) % 500).into();
                            recorder.record(&key);
                        }
                    })
                })
                .collect();
            let flusher = {
                let recorder = recorder.clone();
                tokio::spawn(async move {
                    for _ in 0..5 {
                        recorder.flush().await.unwrap();
                        tokio::task::yield_now().await;
                    }
                })
            };
            for writer in writers {
                writer.join().unwrap();
            }
            flusher.await.unwrap();
            writing.store(false, Ordering::Release);
            let most = sampler.join().unwrap();
            assert!(most <= CAPACITY, "round {round}: {most} places taken");
            // No flush runs while its lock is held, and every earlier one has given its
            // places back: the count is exact.
            let shared = &recorder.shared;
            let _no_flush = shared.flushing.lock().await;
            let tracked = shared.bounds.places.taken();
            assert_eq!(tracked, shared.uses.len(), "round {round}");
            assert!(tracked <= CAPACITY, "round {round}: {tracked} keys");
        }
        assert!(recorder.dropped() > 0);
    }
}
