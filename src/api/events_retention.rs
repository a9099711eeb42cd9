//! The events feed's retention, run by the API itself: a task of its own, started by the first
//! request for a key in a tokio runtime, runs a round at once and then one a minute, deleting
//! in small batches (the store keeps what is left a suffix of the feed).
//!
//! The request path pays one atomic read for it. The task holds the feed and the retention
//! weakly and ends once either is gone (the API dropped, or `with_events_retention` replaced
//! the retention): it never keeps an API alive nor prunes with a retention no longer set. When
//! its runtime shuts down the task is dropped, and the next request (in another runtime)
//! starts another.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::store::{prune_event_batches, EventFeed};

/// How often the API runs the feed's retention.
const EVENTS_RETENTION_INTERVAL: Duration = Duration::from_secs(60);
/// A round deletes batches of [`EVENTS_RETENTION_BATCH`] events until a batch finds fewer
/// due, at most this many: 600,000 events a minute, far above the 60,000 that 1,000 events a
/// second make, so a backlog drains too.
const EVENTS_RETENTION_BATCHES: u32 = 600;
const EVENTS_RETENTION_BATCH: u32 = 1_000;

/// How long the feed keeps events, and whether a task runs its retention's rounds.
pub(crate) struct EventsRetention {
    pub(crate) keep: Duration,
    /// Set by the request that starts the task; cleared when the task ends.
    running: AtomicBool,
}

impl EventsRetention {
    pub(crate) fn new(keep: Duration) -> Self {
        Self {
            keep,
            running: AtomicBool::new(false),
        }
    }

    /// Starts the task that runs `feed`'s retention, unless one runs or there is no tokio
    /// runtime to run it on. Each round's failure is logged and a panic caught and counted
    /// (task `events_retention`); the next round is a minute later either way.
    pub(crate) fn ensure_running(self: &Arc<Self>, feed: &Arc<dyn EventFeed>) {
        // The request path's one read; the runtime's handle only when a task must start
        // (getting it clones an `Arc` every worker shares).
        if self.running.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if self.running.swap(true, Ordering::AcqRel) {
            return;
        }
        let ended = EndsRunning(Arc::downgrade(self));
        let (retention, feed) = (Arc::downgrade(self), Arc::downgrade(feed));
        runtime.spawn(async move {
            let _ended = ended;
            while round(&retention, &feed).await.is_some() {
                tokio::time::sleep(EVENTS_RETENTION_INTERVAL).await;
            }
        });
    }
}

/// One round of retention, if the retention and the feed are still there (`None` ends the
/// task). Neither is held across the sleep between rounds.
async fn round(retention: &Weak<EventsRetention>, feed: &Weak<dyn EventFeed>) -> Option<()> {
    let keep = retention.upgrade()?.keep;
    let feed = feed.upgrade()?;
    crate::supervise::caught("events_retention", async {
        let pruned = prune_event_batches(
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
    .await;
    Some(())
}

/// Clears the retention's `running` when the task ends, however it ends (its runtime shut
/// down, say), so the next request starts another.
struct EndsRunning(Weak<EventsRetention>);

impl Drop for EndsRunning {
    fn drop(&mut self) {
        if let Some(retention) = self.0.upgrade() {
            retention.running.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Order, Organization};
    use crate::store::MemoryStore;

    fn order(id: &str) -> Order {
        crate::model::tests::order(id, "2026-01-01T00:00:00Z")
    }

    /// A store whose feed has `orders` events of organization `a`, all older than now.
    fn store_with_events(orders: &[&str]) -> MemoryStore {
        let store = MemoryStore::new();
        store
            .add_organization(Organization {
                id: "a".to_owned(),
                name: "A".to_owned(),
            })
            .unwrap();
        for id in orders {
            store.add_order("a", order(id)).unwrap();
        }
        std::thread::sleep(Duration::from_millis(5));
        store
    }

    /// What a round keeping nothing would still delete now.
    async fn left_to_prune(store: &MemoryStore) -> u64 {
        prune_event_batches(store, Duration::ZERO, 50, 10)
            .await
            .unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn one_task_runs_a_round_at_once_then_one_a_minute_until_the_feed_is_gone() {
        let store = store_with_events(&["o1", "o2", "o3"]);
        let feed: Arc<dyn EventFeed> = Arc::new(store.clone());
        let retention = Arc::new(EventsRetention::new(Duration::ZERO));
        retention.ensure_running(&feed);
        assert!(retention.running.load(Ordering::Acquire));
        // Another request meanwhile starts nothing more.
        retention.ensure_running(&feed);
        tokio::time::sleep(Duration::from_millis(1)).await;
        // The round ran: all but the feed's newest event are gone.
        assert_eq!(left_to_prune(&store).await, 0);
        store.add_order("a", order("o4")).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        tokio::time::sleep(EVENTS_RETENTION_INTERVAL / 2).await;
        assert_eq!(left_to_prune(&store).await, 1, "not before a minute");
        store.add_order("a", order("o5")).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        tokio::time::sleep(EVENTS_RETENTION_INTERVAL).await;
        assert_eq!(
            left_to_prune(&store).await,
            0,
            "the next round, a minute on"
        );
        // The API gone (its feed with it): the task ends, and says so.
        drop(feed);
        tokio::time::sleep(EVENTS_RETENTION_INTERVAL * 2).await;
        assert!(!retention.running.load(Ordering::Acquire));
    }

    /// A feed over a store that counts its prunes and fails the first two: a panic, then an
    /// error.
    struct Faulty {
        store: MemoryStore,
        prunes: std::sync::atomic::AtomicU32,
    }

    #[async_trait::async_trait]
    impl EventFeed for Faulty {
        async fn events(
            &self,
            organization_id: &str,
            query: &crate::store::EventQuery,
        ) -> Result<crate::store::EventsPage, crate::store::StoreError> {
            self.store.events(organization_id, query).await
        }

        async fn prune_events(
            &self,
            older_than: Duration,
            batch: u32,
        ) -> Result<u64, crate::store::StoreError> {
            match self.prunes.fetch_add(1, Ordering::SeqCst) {
                0 => panic!("a faulty retention round"),
                1 => Err(crate::store::StoreError::unavailable("down")),
                _ => self.store.prune_events(older_than, batch).await,
            }
        }
    }

    /// The failed rounds of retention counted in `recorded` since its last snapshot.
    fn failed_rounds(recorded: &metrics_util::debugging::Snapshotter) -> u64 {
        recorded
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, _, _, _)| {
                let key = key.key();
                key.name() == crate::metrics::STORE_ERRORS
                    && key
                        .labels()
                        .any(|label| label.key() == "operation" && label.value() == "prune_events")
            })
            .map(|(_, _, _, value)| match value {
                metrics_util::debugging::DebugValue::Counter(count) => count,
                other => panic!("{other:?}"),
            })
            .sum()
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_that_panics_or_fails_is_followed_by_the_next_a_minute_later() {
        // The task runs on this thread (a current-thread runtime): its metrics land here.
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let recorded = recorder.snapshotter();
        let _recording = metrics::set_default_local_recorder(&recorder);
        let store = store_with_events(&["o1", "o2", "o3"]);
        let faulty = Arc::new(Faulty {
            store: store.clone(),
            prunes: Default::default(),
        });
        let feed: Arc<dyn EventFeed> = faulty.clone();
        let retention = Arc::new(EventsRetention::new(Duration::ZERO));
        let prunes = || faulty.prunes.load(Ordering::SeqCst);
        retention.ensure_running(&feed);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(prunes(), 1, "the first round, which panicked");
        assert!(
            retention.running.load(Ordering::Acquire),
            "the task goes on"
        );
        tokio::time::sleep(EVENTS_RETENTION_INTERVAL / 2).await;
        assert_eq!(prunes(), 1, "no round sooner after a panic");
        tokio::time::sleep(EVENTS_RETENTION_INTERVAL / 2).await;
        assert_eq!(prunes(), 2, "the second, which failed");
        assert_eq!(failed_rounds(&recorded), 1, "the failure is counted");
        tokio::time::sleep(EVENTS_RETENTION_INTERVAL).await;
        assert_eq!(prunes(), 3, "the third, which pruned");
        // A snapshot takes what was counted since the last one.
        assert_eq!(failed_rounds(&recorded), 0, "the third failed nothing");
        assert_eq!(left_to_prune(&store).await, 0);
    }

    #[test]
    fn outside_a_runtime_no_task_starts_and_a_runtime_shut_down_frees_the_next() {
        let store = store_with_events(&["o1", "o2"]);
        let feed: Arc<dyn EventFeed> = Arc::new(store.clone());
        let retention = Arc::new(EventsRetention::new(Duration::ZERO));
        retention.ensure_running(&feed);
        assert!(!retention.running.load(Ordering::Acquire));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            retention.ensure_running(&feed);
            tokio::time::sleep(Duration::from_millis(1)).await;
        });
        assert!(retention.running.load(Ordering::Acquire));
        drop(runtime);
        assert!(
            !retention.running.load(Ordering::Acquire),
            "dropped with its runtime"
        );
        // The next request, in another runtime, starts another.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            store.add_order("a", order("o3")).unwrap();
            std::thread::sleep(Duration::from_millis(5));
            retention.ensure_running(&feed);
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert_eq!(left_to_prune(&store).await, 0);
        });
    }
}
