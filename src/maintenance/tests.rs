//! The maintenance's jobs: a round at start and one each interval, each fault followed by
//! the next round, a stop that ends them, a shutdown that writes every recorder's counts;
//! nothing started by a request or outside a runtime.

use std::sync::atomic::{AtomicU32, Ordering};

use super::*;
use crate::model::{Order, Organization};
use crate::store::{EventQuery, EventsPage, MemoryStore, UsageOutcome, UsageRoute, UsageStore};

fn order(id: &str) -> Order {
    crate::model::tests::order(id, "2026-01-01T00:00:00Z")
}

/// A store with the organization `a`.
fn store_with_organization() -> MemoryStore {
    let store = MemoryStore::new();
    store
        .add_organization(Organization {
            id: "a".to_owned(),
            name: "A".to_owned(),
        })
        .unwrap();
    store
}

/// A store whose feed has `orders` events of organization `a`, all older than now.
fn store_with_events(orders: &[&str]) -> MemoryStore {
    let store = store_with_organization();
    for id in orders {
        store.add_order("a", order(id)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(5));
    store
}

/// What a round keeping nothing would still delete now.
async fn left_to_prune(store: &MemoryStore) -> u64 {
    crate::store::prune_event_batches(store, Duration::ZERO, 50, 10)
        .await
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_job_runs_a_round_at_start_then_one_each_interval_until_shut_down() {
    let store = store_with_events(&["o1", "o2", "o3"]);
    let running = Maintenance::new()
        .with_events_retention(store.clone(), Duration::ZERO)
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    // The round ran: all but the feed's newest event are gone.
    assert_eq!(left_to_prune(&store).await, 0);
    store.add_order("a", order("o4")).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    tokio::time::sleep(EVENTS_RETENTION_INTERVAL / 2).await;
    assert_eq!(left_to_prune(&store).await, 1, "not before the interval");
    store.add_order("a", order("o5")).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    tokio::time::sleep(EVENTS_RETENTION_INTERVAL).await;
    assert_eq!(
        left_to_prune(&store).await,
        0,
        "the next round, an interval on"
    );
    assert!(running.shutdown().await.is_ok());
    // Shut down: no round more.
    store.add_order("a", order("o6")).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    tokio::time::sleep(EVENTS_RETENTION_INTERVAL * 3).await;
    assert_eq!(left_to_prune(&store).await, 1);
}

/// A feed over a store that counts its prunes and fails the first two: a panic, then an
/// error.
struct Faulty {
    store: MemoryStore,
    prunes: AtomicU32,
}

#[async_trait::async_trait]
impl EventFeed for Faulty {
    async fn events(
        &self,
        organization_id: &str,
        query: &EventQuery,
    ) -> Result<EventsPage, StoreError> {
        self.store.events(organization_id, query).await
    }

    async fn prune_events(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        match self.prunes.fetch_add(1, Ordering::SeqCst) {
            0 => panic!("a faulty retention round"),
            1 => Err(StoreError::unavailable("down")),
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
async fn a_round_that_panics_or_fails_is_followed_by_the_next_an_interval_later() {
    // The jobs run on this thread (a current-thread runtime): their metrics land here.
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let recorded = recorder.snapshotter();
    let _recording = metrics::set_default_local_recorder(&recorder);
    let store = store_with_events(&["o1", "o2", "o3"]);
    let faulty = Arc::new(Faulty {
        store: store.clone(),
        prunes: AtomicU32::new(0),
    });
    let prunes = || faulty.prunes.load(Ordering::SeqCst);
    let running = Maintenance::new()
        .with_events_retention(faulty.clone(), Duration::ZERO)
        .start()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(prunes(), 1, "the first round, which panicked");
    tokio::time::sleep(EVENTS_RETENTION_INTERVAL / 2).await;
    assert_eq!(prunes(), 1, "no round sooner after a panic");
    tokio::time::sleep(EVENTS_RETENTION_INTERVAL / 2).await;
    assert_eq!(prunes(), 2, "the second, which failed");
    assert_eq!(failed_rounds(&recorded), 1, "the failure is counted");
    tokio::time::sleep(EVENTS_RETENTION_INTERVAL).await;
    assert_eq!(prunes(), 3, "the third, which pruned");
    assert_eq!(failed_rounds(&recorded), 0, "the third failed nothing");
    assert_eq!(left_to_prune(&store).await, 0);
    assert!(running.shutdown().await.is_ok());
}

#[tokio::test]
async fn shutdown_writes_every_recorders_counts_in_hand() {
    let store = store_with_organization();
    let issued = crate::store::KeyManager::issue(
        &store,
        "a",
        crate::store::NewKey::new(crate::key::KeyEnvironment::Test),
    )
    .await
    .unwrap();
    let key_id: Arc<str> = issued.record().id.clone().into();
    // An hour between flushes: only the shutdown writes what is counted.
    let usage = UsageRecorder::new(store.clone()).with_flush_interval(Duration::from_secs(3600));
    let last_used = LastUsedRecorder::new(store.clone());
    let running = Maintenance::new()
        .with_usage(usage.clone())
        .with_last_used(last_used.clone())
        .start()
        .unwrap();
    usage.record(&key_id, UsageRoute::Orders, UsageOutcome::Ok);
    usage.record(&key_id, UsageRoute::Orders, UsageOutcome::Ok);
    let report = running.shutdown().await;
    assert!(report.is_ok());
    let names: Vec<&str> = report.flushed().iter().map(|(name, _)| *name).collect();
    assert_eq!(names, ["usage_recorder", "last_used_recorder"]);
    assert_eq!(report.flushed()[0].1.as_ref().ok(), Some(&1));
    let period = crate::store::UsagePeriod {
        from: crate::model::Timestamp::from_unix_millis(0).unwrap(),
        to: crate::model::Timestamp::now().saturating_add(Duration::from_secs(7200)),
    };
    let totals = store.usage_totals("a", period).await.unwrap();
    assert_eq!(totals.iter().map(|total| total.count).sum::<u64>(), 2);
}

#[test]
fn outside_a_runtime_nothing_starts_and_nothing_panics() {
    let store = MemoryStore::new();
    let refused = Maintenance::new()
        .with_events_retention(store.clone(), Duration::ZERO)
        .start();
    assert!(refused.unwrap_err().to_string().contains("tokio runtime"));
    // A recorder's spawn outside a runtime starts nothing, and says so, never a panic.
    let usage = UsageRecorder::spawn(store.clone());
    let _ = crate::last_used::LastUsedRecorder::spawn(store.clone());
    let _ = crate::deprecated_calls::DeprecatedCallRecorder::spawn(store);
    drop(usage);
}

#[tokio::test(start_paused = true)]
async fn the_api_starts_nothing_in_the_background() {
    let store = store_with_events(&["o1", "o2", "o3"]);
    let _ = store.add_key("pk_test_maintenance_0123456789abcdef", "a");
    let api = crate::PartnerApi::from_store(store.clone()).with_events(store.clone());
    let request = http::Request::get("/v1/events")
        .header(
            "authorization",
            "Bearer pk_test_maintenance_0123456789abcdef",
        )
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let answered = tower::ServiceExt::oneshot(api, request).await.unwrap();
    assert_eq!(answered.status(), http::StatusCode::OK);
    tokio::time::sleep(EVENTS_RETENTION_INTERVAL * 2).await;
    // Retention is the host's maintenance's: without one, nothing was deleted.
    assert_eq!(left_to_prune(&store).await, 2);
}
