//! [`Maintenance`]: everything the crate does in the background, started by the host in one
//! call and stopped by one handle.
//!
//! What runs is what the host names, each its own job: the retention of events, the audit
//! log and webhook messages, and the
//! recorders (usage, last uses, deprecated calls), whose job ticks their clock, writes their
//! counts every flush interval and runs their own retention. Nothing of it is started by a
//! request or a constructor: a host that starts no maintenance has none, and says so by not
//! calling [`Maintenance::start`].
//!
//! [`MaintenanceHandle::shutdown`] stops every job (a retention round in flight is dropped
//! between two store calls: what it deleted stays deleted, the next start goes on from there)
//! and then flushes every recorder once more, so nothing counted is lost; it reports each
//! flush.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::time::Duration;
//! use partner_api::maintenance::Maintenance;
//! use partner_api::usage::UsageRecorder;
//! use partner_api::MemoryStore;
//!
//! let store = MemoryStore::new();
//! let usage = UsageRecorder::new(store.clone());
//! let maintenance = Maintenance::new()
//!     .with_events_retention(store.clone(), Duration::from_secs(30 * 24 * 3600))
//!     .with_usage(usage.clone())
//!     .start()
//!     .expect("inside a tokio runtime");
//! // ... serve with `PartnerApi::from_store(store).with_usage(usage)` ...
//! let report = maintenance.shutdown().await;
//! assert!(report.is_ok());
//! # }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::deprecated_calls::DeprecatedCallRecorder;
use crate::last_used::LastUsedRecorder;
use crate::store::{AuditLog, EventFeed, StoreError};
use crate::usage::UsageRecorder;

use crate::recording::{BoxFuture, Recorded};

/// How often the events feed's retention runs a round.
pub const EVENTS_RETENTION_INTERVAL: Duration = Duration::from_secs(60);
/// How often the audit log's retention runs a round.
pub const AUDIT_RETENTION_INTERVAL: Duration = Duration::from_secs(3600);

/// A round of the events feed's retention deletes batches of this many events until a
/// batch finds fewer due, at most [`EVENTS_RETENTION_BATCHES`] of them: 600,000 events a
/// minute, far above the 60,000 that 1,000 events a second make, so a backlog drains too.
const EVENTS_RETENTION_BATCH: u32 = 1_000;
const EVENTS_RETENTION_BATCHES: u32 = 600;

/// One periodic job: its name (the task's in the log and the panics metric), how often, and
/// its round.
struct Job {
    name: &'static str,
    every: Duration,
    round: Arc<dyn Fn() -> BoxFuture<()> + Send + Sync>,
}

/// The background work a host runs, job by job; [`start`](Self::start) runs it.
#[must_use]
#[derive(Default)]
pub struct Maintenance {
    jobs: Vec<Job>,
    recorders: Vec<Arc<dyn Recorded>>,
}

impl std::fmt::Debug for Maintenance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Maintenance")
            .field(
                "jobs",
                &self.jobs.iter().map(|job| job.name).collect::<Vec<_>>(),
            )
            .field(
                "recorders",
                &self.recorders.iter().map(|r| r.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Maintenance {
    /// No job yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Deletes the events of `feed` readable for longer than `keep` (counted from when each
    /// became part of the feed: [`EventFeed::prune_events`]), a round at start and one every
    /// [`EVENTS_RETENTION_INTERVAL`], in batches (the store keeps what is left a suffix of
    /// the feed; a reader further back gets 410). A round's failure is logged and counted in
    /// `partner_api_store_errors_total`; the next round comes all the same.
    pub fn with_events_retention(self, feed: impl EventFeed + 'static, keep: Duration) -> Self {
        let feed: Arc<dyn EventFeed> = Arc::new(feed);
        self.with_job("events_retention", EVENTS_RETENTION_INTERVAL, feed, move |feed| async move {
            let pruned = crate::store::prune_event_batches(
                &*feed,
                keep,
                EVENTS_RETENTION_BATCH,
                EVENTS_RETENTION_BATCHES,
            );
            if let Err(err) = pruned.await {
                crate::metrics::StoreCall::PruneEvents.failed_at_once(&err);
                tracing::warn!(error = %crate::log::ErrorChain(&err), "the events feed's retention failed");
            }
        })
    }

    /// Deletes the audit log's entries older than `keep`, a round at start and one every
    /// [`AUDIT_RETENTION_INTERVAL`], as the actor
    /// [`AUDIT_RETENTION_ACTOR`](crate::store::AUDIT_RETENTION_ACTOR) (each pruned
    /// organization gets an `audit.pruned` entry).
    pub fn with_audit_retention(self, log: impl AuditLog + 'static, keep: Duration) -> Self {
        let log: Arc<dyn AuditLog> = Arc::new(log);
        self.with_job("audit_retention", AUDIT_RETENTION_INTERVAL, log, move |log| async move {
            let context = crate::store::AuditContext::new(crate::store::AUDIT_RETENTION_ACTOR);
            let pruned = context
                .scope(crate::store::prune_audit_batches(&*log, keep, 500, 10))
                .await;
            if let Err(err) = pruned {
                tracing::warn!(error = %crate::log::ErrorChain(&err), "the audit log's retention failed");
            }
        })
    }

    /// Deletes the webhook messages older than `keep` (their deliveries and attempts with
    /// them), a round at start and one every
    /// [`RETENTION_INTERVAL`](crate::webhooks::RETENTION_INTERVAL), in batches of 500
    /// ([`WebhookOutbox::prune`](crate::webhooks::WebhookOutbox::prune)); a message older than
    /// this can no longer be retried or recovered, so keep it longer than the retry schedule
    /// (27 hours by default).
    #[cfg(feature = "webhooks")]
    #[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
    pub fn with_webhook_retention(
        self,
        outbox: impl crate::webhooks::WebhookOutbox + 'static,
        keep: Duration,
    ) -> Self {
        let outbox: Arc<dyn crate::webhooks::WebhookOutbox> = Arc::new(outbox);
        let every = crate::webhooks::RETENTION_INTERVAL;
        self.with_job(
            "webhook_retention",
            every,
            outbox,
            move |outbox| async move {
                crate::webhooks::prune_messages(&*outbox, keep).await;
            },
        )
    }

    /// Adds the job `name`: every `every`, a round `round(target)` (the target cloned for
    /// each round, so no round holds another's).
    fn with_job<T, R, F>(mut self, name: &'static str, every: Duration, target: T, round: R) -> Self
    where
        T: Clone + Send + Sync + 'static,
        R: Fn(T) -> F + Send + Sync + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        self.jobs.push(Job {
            name,
            every,
            round: Arc::new(move || Box::pin(round(target.clone()))),
        });
        self
    }

    /// Drives `recorder`: ticks its clock, writes the counts every flush interval (and its
    /// retention), and at shutdown writes what it holds.
    pub fn with_usage(mut self, recorder: UsageRecorder) -> Self {
        self.recorders.push(Arc::new(recorder));
        self
    }

    /// Drives `recorder`, as [`with_usage`](Self::with_usage).
    pub fn with_last_used(mut self, recorder: LastUsedRecorder) -> Self {
        self.recorders.push(Arc::new(recorder));
        self
    }

    /// Drives `recorder`, as [`with_usage`](Self::with_usage).
    pub fn with_deprecated_calls(mut self, recorder: DeprecatedCallRecorder) -> Self {
        self.recorders.push(Arc::new(recorder));
        self
    }

    /// Starts every job on the current tokio runtime.
    ///
    /// # Errors
    ///
    /// Outside a tokio runtime (never a panic).
    pub fn start(self) -> Result<MaintenanceHandle, NoRuntime> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| NoRuntime(()))?;
        Ok(self.start_on(&runtime))
    }

    /// Starts every job on `runtime`.
    pub fn start_on(self, runtime: &tokio::runtime::Handle) -> MaintenanceHandle {
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for job in self.jobs {
            tasks.spawn_on(run_job(job, stopped.clone()), runtime);
        }
        for recorder in &self.recorders {
            tasks.spawn_on(recorder.drive(stopped.clone()), runtime);
        }
        MaintenanceHandle {
            stop,
            tasks,
            recorders: self.recorders,
        }
    }
}

/// Runs `job`'s rounds, the first at once, until `stop`; a round in flight when it comes is
/// dropped. A round that panics is caught, logged and counted
/// (`partner_api_background_task_panics_total`), and the next comes all the same.
async fn run_job(job: Job, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = crate::supervise::caught(job.name, (job.round)()) => {}
            _ = stop.changed() => return,
        }
        tokio::select! {
            () = tokio::time::sleep(job.every) => {}
            _ = stop.changed() => return,
        }
    }
}

/// [`Maintenance::start`] outside a tokio runtime.
#[derive(Debug)]
pub struct NoRuntime(());

impl std::fmt::Display for NoRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("maintenance starts inside a tokio runtime, and none is running")
    }
}

impl std::error::Error for NoRuntime {}

/// The running jobs of a [`Maintenance`]. Dropped without [`shutdown`](Self::shutdown), its
/// jobs are aborted, without the recorders' last flush: hold it while the host serves.
#[derive(Debug)]
#[must_use = "dropping the handle stops every job at once"]
pub struct MaintenanceHandle {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    recorders: Vec<Arc<dyn Recorded>>,
}

impl std::fmt::Debug for dyn Recorded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl MaintenanceHandle {
    /// Stops every job, waits for them to end, then writes what each recorder holds (all
    /// at once, each after a flush of its own still under way), and reports each write.
    pub async fn shutdown(mut self) -> ShutdownReport {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
        let mut flushes = JoinSet::new();
        for (at, recorder) in self.recorders.iter().enumerate() {
            let flush = recorder.flush_now();
            flushes.spawn(async move { (at, flush.await) });
        }
        let mut written: Vec<Option<Result<usize, StoreError>>> =
            self.recorders.iter().map(|_| None).collect();
        while let Some(done) = flushes.join_next().await {
            if let Ok((at, result)) = done {
                written[at] = Some(result);
            }
        }
        let flushed = self
            .recorders
            .iter()
            .zip(written)
            .map(|(recorder, result)| {
                let result = result.unwrap_or_else(|| {
                    Err(StoreError::other("the recorder's last flush panicked"))
                });
                (recorder.name(), result)
            })
            .collect();
        ShutdownReport { flushed }
    }
}

impl Drop for MaintenanceHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// What [`MaintenanceHandle::shutdown`] wrote: for each recorder, in the order they were
/// added, its name (`usage_recorder`, `last_used_recorder`, `deprecated_call_recorder`: its
/// task's, as in the panics metric) and how many entries it wrote, or the store's error.
#[derive(Debug)]
pub struct ShutdownReport {
    flushed: Vec<(&'static str, Result<usize, StoreError>)>,
}

impl ShutdownReport {
    /// Each recorder's name and its last write.
    pub fn flushed(&self) -> &[(&'static str, Result<usize, StoreError>)] {
        &self.flushed
    }

    /// Whether every recorder's last write succeeded.
    pub fn is_ok(&self) -> bool {
        self.flushed.iter().all(|(_, written)| written.is_ok())
    }
}

#[cfg(test)]
mod tests;
