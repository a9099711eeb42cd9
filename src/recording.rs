//! What the in-process recorders ([`LastUsedRecorder`](crate::last_used::LastUsedRecorder),
//! [`UsageRecorder`](crate::usage::UsageRecorder),
//! [`DeprecatedCallRecorder`](crate::deprecated_calls::DeprecatedCallRecorder)) share: places bounded by a capacity, the
//! flush interval, the count of what was dropped ([`Bounds`]), and the background task that
//! ticks their clock every second and flushes them every interval.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Places taken in a recorder's map. Invariant: `map.len() <= taken <= capacity` at every
/// instant. A place is reserved (only while one is free) before its entry is inserted, and
/// given back only after its entry is removed, so concurrent new entries and flushes never
/// take the map past its capacity.
pub(crate) struct Places {
    taken: AtomicUsize,
    capacity: usize,
}

impl Places {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            taken: AtomicUsize::new(0),
            capacity: capacity.max(1),
        }
    }

    /// Takes a place if one is free: never past the capacity, not even for an instant.
    pub(crate) fn reserve(&self) -> bool {
        self.taken
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |taken| {
                (taken < self.capacity).then_some(taken + 1)
            })
            .is_ok()
    }

    /// Gives back `count` places, once their entries are gone (or were never inserted).
    pub(crate) fn release(&self, count: usize) {
        self.taken.fetch_sub(count, Ordering::AcqRel);
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    #[cfg(test)]
    pub(crate) fn taken(&self) -> usize {
        self.taken.load(Ordering::Acquire)
    }
}

/// What bounds a recorder: its places, how often it flushes, the wake-up of a full map, and
/// how much it dropped (counted, and reported to `on_dropped`, its metric).
pub(crate) struct Bounds {
    pub(crate) places: Places,
    flush_interval_millis: AtomicU64,
    /// Notified when the map is full: a flush is due at once.
    full: Notify,
    dropped: AtomicU64,
    on_dropped: fn(u64),
}

impl Bounds {
    pub(crate) fn new(capacity: usize, flush_interval: Duration, on_dropped: fn(u64)) -> Self {
        Self {
            places: Places::new(capacity),
            flush_interval_millis: AtomicU64::new(millis(flush_interval)),
            full: Notify::new(),
            dropped: AtomicU64::new(0),
            on_dropped,
        }
    }

    /// Sets the flush interval (at least a millisecond), from the next flush on.
    pub(crate) fn set_flush_interval(&self, interval: Duration) {
        self.flush_interval_millis
            .store(millis(interval).max(1), Ordering::Relaxed);
    }

    pub(crate) fn flush_interval(&self) -> Duration {
        Duration::from_millis(self.flush_interval_millis.load(Ordering::Relaxed))
    }

    /// A use found no place: counted as dropped, and a flush asked for.
    pub(crate) fn no_place(&self) {
        self.count_dropped(1);
        self.full.notify_one();
    }

    /// Counts `count` uses dropped (a full map, or a kept batch past its bound).
    pub(crate) fn count_dropped(&self, count: u64) {
        self.dropped.fetch_add(count, Ordering::Relaxed);
        (self.on_dropped)(count);
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Cuts `counts`, a batch the store refused, to the newest `max` (by `at`) to keep for
    /// the next flush: an outage drops its oldest counts first, each counted as dropped by
    /// `calls`.
    pub(crate) fn keep_newest<T, K: Ord>(
        &self,
        counts: &mut Vec<T>,
        max: usize,
        at: impl Fn(&T) -> K,
        calls: impl Fn(&T) -> u64,
    ) {
        if counts.len() > max {
            counts.sort_by_key(|count| std::cmp::Reverse(at(count)));
            let over: u64 = counts[max..].iter().map(calls).sum();
            counts.truncate(max);
            self.count_dropped(over);
        }
    }
}

/// How long a recorder's store keeps what it wrote, and when the recorder last deleted what is
/// older: its background task deletes after its flushes, at most once a minute.
pub(crate) struct Retention {
    /// In milliseconds; 0 for ever.
    keep_millis: AtomicU64,
    pruned_at: std::sync::Mutex<Option<Instant>>,
}

impl Retention {
    pub(crate) fn new(keep: Option<Duration>) -> Self {
        let retention = Self {
            keep_millis: AtomicU64::new(0),
            pruned_at: std::sync::Mutex::new(None),
        };
        retention.set(keep);
        retention
    }

    /// Sets how long the store keeps (`None`: for ever).
    pub(crate) fn set(&self, keep: Option<Duration>) {
        self.keep_millis.store(
            keep.map_or(0, |keep| millis(keep).max(1)),
            Ordering::Relaxed,
        );
    }

    /// Deletes, through `prune` (a store call deleting at most `batch` of what is older than
    /// it is given), until a call deletes less than a batch or fails: at most once a minute,
    /// never when kept for ever. A failure is logged as `what` and tried again in a minute.
    pub(crate) async fn prune<F, Fut>(&self, batch: u32, what: &str, mut prune: F)
    where
        F: FnMut(Duration, u32) -> Fut,
        Fut: Future<Output = Result<u64, crate::store::StoreError>>,
    {
        let keep = self.keep_millis.load(Ordering::Relaxed);
        if keep == 0 {
            return;
        }
        {
            let mut pruned_at = self
                .pruned_at
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if pruned_at.is_some_and(|at| at.elapsed() < Duration::from_secs(60)) {
                return;
            }
            *pruned_at = Some(Instant::now());
        }
        loop {
            match prune(Duration::from_millis(keep), batch).await {
                Ok(deleted) if deleted == u64::from(batch) => continue,
                Ok(_) => return,
                Err(err) => {
                    tracing::warn!(
                        error = %crate::log::ErrorChain(&err),
                        "partner API could not delete old {what}; trying again in a minute"
                    );
                    return;
                }
            }
        }
    }
}

pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A boxed future, as the maintenance holds its jobs'.
pub(crate) type BoxFuture<T> = std::pin::Pin<Box<dyn Future<Output = T> + Send>>;

/// A recorder the host's [`Maintenance`](crate::maintenance::Maintenance) drives and flushes
/// at shutdown (each recorder's public type implements it).
pub(crate) trait Recorded: Send + Sync {
    /// Its name in the shutdown report (its task's).
    fn name(&self) -> &'static str;
    /// Ticks its clock and writes its counts until `stop` says to stop.
    fn drive(&self, stop: tokio::sync::watch::Receiver<bool>) -> BoxFuture<()>;
    /// Writes what it holds now.
    fn flush_now(&self) -> BoxFuture<Result<usize, crate::store::StoreError>>;
}

/// Implements [`Recorded`] for a public recorder type: one whose `shared: Arc<Shared>` is a
/// [`Recorder`] and that writes what it holds with `flush(&self)`.
macro_rules! recorded {
    ($recorder:ty) => {
        impl $crate::recording::Recorded for $recorder {
            fn name(&self) -> &'static str {
                <Shared as $crate::recording::Recorder>::TASK
            }

            fn drive(
                &self,
                stop: tokio::sync::watch::Receiver<bool>,
            ) -> $crate::recording::BoxFuture<()> {
                Box::pin($crate::recording::drive(
                    std::sync::Arc::downgrade(&self.shared),
                    Some(stop),
                ))
            }

            fn flush_now(
                &self,
            ) -> $crate::recording::BoxFuture<Result<usize, $crate::store::StoreError>> {
                let recorder = self.clone();
                Box::pin(async move { recorder.flush().await })
            }
        }
    };
}
pub(crate) use recorded;

/// A recorder the background task drives.
pub(crate) trait Recorder: Send + Sync + 'static {
    /// The task's name in the log and in `partner_api_background_task_panics_total`.
    const TASK: &'static str;
    /// Called every second: the recorder reads the clock here, never on the request path.
    fn tick(&self);
    /// Its places, flush interval and full map's wake-up.
    fn bounds(&self) -> &Bounds;
    /// Called before a flush the full map asked for.
    fn was_full(&self) {}
    /// Writes what the recorder holds; failures are its own to log and keep.
    fn flush_in_background(self: Arc<Self>) -> impl Future<Output = ()> + Send;
}

/// Starts the background task of `recorder` on the current Tokio runtime, if there is one
/// (the recorders' `spawn`): [`drive`] until the recorder is dropped. Outside a runtime
/// nothing starts, and the log says so once: the recorder then writes only when flushed.
pub(crate) fn spawn<R: Recorder>(recorder: &Arc<R>) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(drive(Arc::downgrade(recorder), None))),
        Err(_) => {
            static WARNED: AtomicBool = AtomicBool::new(false);
            if !WARNED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    task = R::TASK,
                    "a recorder was spawned outside a tokio runtime: nothing drives it; \
                     hand it to partner_api::maintenance::Maintenance instead"
                );
            }
        }
    }
}

/// Ticks the clock of `recorder` every second and flushes it every flush interval (or when
/// its map is full), one flush at a time, each on a task of its own so the clock keeps
/// ticking while a slow store is written to; until the recorder is dropped or `stop` says to
/// stop (a [`MaintenanceHandle`](crate::maintenance::MaintenanceHandle)'s shutdown, which then
/// flushes it once more).
pub(crate) async fn drive<R: Recorder>(
    recorder: Weak<R>,
    mut stop: Option<tokio::sync::watch::Receiver<bool>>,
) {
    tokio::select! {
        () = run(recorder) => {}
        () = stopped(&mut stop) => {}
    }
}

/// When `stop` says to stop (or its sender is gone); never without one.
async fn stopped(stop: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match stop {
        Some(stop) => {
            let _ = stop.wait_for(|stopped| *stopped).await;
        }
        None => std::future::pending().await,
    }
}

async fn run<R: Recorder>(recorder: Weak<R>) {
    let flushing = Arc::new(AtomicBool::new(false));
    let mut since_flush = Duration::ZERO;
    loop {
        let full = {
            let Some(strong) = recorder.upgrade() else {
                return;
            };
            let full =
                tokio::time::timeout(Duration::from_secs(1), strong.bounds().full.notified())
                    .await
                    .is_ok();
            strong.tick();
            full
        };
        since_flush += Duration::from_secs(1);
        let Some(strong) = recorder.upgrade() else {
            return;
        };
        if full || since_flush >= strong.bounds().flush_interval() {
            since_flush = Duration::ZERO;
            if full {
                strong.was_full();
            }
            if !flushing.swap(true, Ordering::AcqRel) {
                let flushing = flushing.clone();
                tokio::spawn(async move {
                    // A flush that panicked is dropped (logged, counted); the next one runs
                    // at the next interval, as after a store's failure.
                    crate::supervise::caught(R::TASK, strong.flush_in_background()).await;
                    flushing.store(false, Ordering::Release);
                });
            }
        }
    }
}
