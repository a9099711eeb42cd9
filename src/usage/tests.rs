//! The unit tests of `usage`.

use super::*;
use crate::model::Organization;
use crate::store::MemoryStore;
use crate::store::{UsageGranularity, UsagePeriod};

/// A memory store with the organization `org` and `keys` keys, and the keys' ids.
async fn store_with_keys(keys: usize) -> (MemoryStore, Vec<Arc<str>>) {
    let store = MemoryStore::new();
    store
        .add_organization(Organization {
            id: "org".into(),
            name: "Org".into(),
        })
        .unwrap();
    for n in 0..keys {
        store.add_key(&format!("pk_test_usage_{n}"), "org").unwrap();
    }
    let ids = crate::store::KeyManager::list(&store, "org")
        .await
        .unwrap()
        .into_iter()
        .map(|record| Arc::from(record.id))
        .collect();
    (store, ids)
}

#[test]
fn every_route_and_outcome_has_a_slot_of_its_own() {
    let mut seen = std::collections::HashSet::new();
    for route in UsageRoute::ALL {
        for outcome in UsageOutcome::ALL {
            let index = slot(*route, *outcome);
            assert!(index < SLOTS);
            assert!(seen.insert(index));
            assert_eq!(unslot(index), (*route, *outcome));
        }
    }
    assert_eq!(seen.len(), SLOTS);
}

/// Requests counted from many threads while flushes run: every one is written, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_racing_flushes_are_written_exactly_once() {
    let (store, key_ids) = store_with_keys(4).await;
    let recorder =
        UsageRecorder::spawn(store.clone()).with_flush_interval(Duration::from_secs(3600));
    let writers: Vec<_> = (0..4)
        .map(|thread| {
            let (recorder, key_ids) = (recorder.clone(), key_ids.clone());
            std::thread::spawn(move || {
                for n in 0..5_000 {
                    let key = &key_ids[(n + thread) % key_ids.len()];
                    let outcome = UsageOutcome::ALL[n % UsageOutcome::ALL.len()];
                    recorder.record(key, UsageRoute::Orders, outcome);
                }
            })
        })
        .collect();
    let flusher = {
        let recorder = recorder.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                recorder.flush().await.unwrap();
                tokio::task::yield_now().await;
            }
        })
    };
    for writer in writers {
        writer.join().unwrap();
    }
    flusher.await.unwrap();
    recorder.flush().await.unwrap();
    let period = UsagePeriod {
        from: Timestamp::from_unix_millis(0).unwrap(),
        to: Timestamp::now().saturating_add(Duration::from_secs(7200)),
    };
    let totals = store.usage_totals("org", period).await.unwrap();
    let total: u64 = totals.iter().map(|total| total.count).sum();
    assert_eq!(total, 20_000);
    let first = store
        .key_usage("org", &key_ids[0], period, UsageGranularity::Day)
        .await
        .unwrap();
    assert_eq!(first.iter().map(|bucket| bucket.count).sum::<u64>(), 5_000);
    assert_eq!(recorder.dropped(), 0);
}

/// A usage store that refuses writes while `failing` is set, and counts its writes.
struct Flaky {
    store: MemoryStore,
    failing: std::sync::atomic::AtomicBool,
    writes: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl UsageStore for Arc<Flaky> {
    async fn record_usage(&self, counts: &[UsageCount]) -> Result<(), StoreError> {
        self.writes.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return Err(StoreError::unavailable("the database is down"));
        }
        self.store.record_usage(counts).await
    }
    async fn key_usage(
        &self,
        organization_id: &str,
        key_id: &str,
        period: UsagePeriod,
        granularity: UsageGranularity,
    ) -> Result<Vec<crate::store::UsageBucket>, StoreError> {
        self.store
            .key_usage(organization_id, key_id, period, granularity)
            .await
    }
    async fn usage_totals(
        &self,
        organization_id: &str,
        period: UsagePeriod,
    ) -> Result<Vec<crate::store::KeyUsageTotal>, StoreError> {
        self.store.usage_totals(organization_id, period).await
    }
    async fn prune_usage(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        self.store.prune_usage(older_than, batch).await
    }
}

/// Through an outage of several flushes, with requests counted all along: the counts a
/// refused batch kept meet the new ones, and the first flush the store accepts writes
/// every request once.
#[tokio::test]
async fn counts_survive_refused_flushes_and_are_written_once_after() {
    let (store, key_ids) = store_with_keys(1).await;
    let key_id = key_ids[0].clone();
    let flaky = Arc::new(Flaky {
        store: store.clone(),
        failing: std::sync::atomic::AtomicBool::new(true),
        writes: std::sync::atomic::AtomicUsize::new(0),
    });
    let recorder = UsageRecorder::spawn(flaky.clone()).with_flush_interval(MAX_FLUSH_INTERVAL);
    for round in 0..5 {
        for _ in 0..100 {
            recorder.record(&key_id, UsageRoute::Me, UsageOutcome::Ok);
        }
        recorder.record(&key_id, UsageRoute::Orders, UsageOutcome::RateLimited);
        assert!(recorder.flush().await.is_err(), "round {round}");
    }
    flaky.failing.store(false, Ordering::SeqCst);
    recorder.record(&key_id, UsageRoute::Me, UsageOutcome::Ok);
    assert_eq!(recorder.flush().await.unwrap(), 2);
    let period = UsagePeriod {
        from: Timestamp::from_unix_millis(0).unwrap(),
        to: Timestamp::now().saturating_add(Duration::from_secs(7200)),
    };
    let totals = store.usage_totals("org", period).await.unwrap();
    let of = |outcome| {
        totals
            .iter()
            .filter(|total| total.outcome == outcome)
            .map(|total| total.count)
            .sum::<u64>()
    };
    assert_eq!(of(UsageOutcome::Ok), 501);
    assert_eq!(of(UsageOutcome::RateLimited), 5);
    assert_eq!(recorder.flush().await.unwrap(), 0);
    assert_eq!(recorder.dropped(), 0);
}

/// The store sees one write a flush, however many requests of however many keys came in
/// between: so the database's cost is one statement per replica per flush interval (one
/// `record_usage` call is one statement in `PgStore`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_store_write_a_flush_whatever_the_requests() {
    let (store, key_ids) = store_with_keys(50).await;
    let counting = Arc::new(Flaky {
        store: store.clone(),
        failing: std::sync::atomic::AtomicBool::new(false),
        writes: std::sync::atomic::AtomicUsize::new(0),
    });
    let recorder = UsageRecorder::spawn(counting.clone()).with_flush_interval(MAX_FLUSH_INTERVAL);
    for flush in 1..=3 {
        let writers: Vec<_> = (0..4)
            .map(|thread| {
                let (recorder, key_ids) = (recorder.clone(), key_ids.clone());
                std::thread::spawn(move || {
                    for n in 0..2_500 {
                        let outcome = UsageOutcome::ALL[(n + thread) % UsageOutcome::ALL.len()];
                        recorder.record(&key_ids[n % key_ids.len()], UsageRoute::Orders, outcome);
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        assert!(recorder.flush().await.unwrap() > 0);
        assert_eq!(counting.writes.load(Ordering::SeqCst), flush);
    }
    let period = UsagePeriod {
        from: Timestamp::from_unix_millis(0).unwrap(),
        to: Timestamp::now().saturating_add(Duration::from_secs(7200)),
    };
    let totals = store.usage_totals("org", period).await.unwrap();
    assert_eq!(totals.iter().map(|total| total.count).sum::<u64>(), 30_000);
}

/// The background task deletes usage past the retention after its flushes, and keeps
/// what is younger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_task_deletes_usage_past_the_retention() {
    let (store, key_ids) = store_with_keys(1).await;
    let key_id = key_ids[0].to_string();
    let old = Timestamp::from_unix_millis(978_307_200_000).unwrap(); // 2001
    let count = |hour| UsageCount {
        key_id: key_id.clone(),
        hour,
        route: UsageRoute::Me,
        outcome: UsageOutcome::Ok,
        count: 1,
    };
    store
        .record_usage(&[count(old), count(Timestamp::now())])
        .await
        .unwrap();
    let _recorder = UsageRecorder::spawn(store.clone())
        .with_flush_interval(Duration::from_secs(1))
        .with_retention(Some(Duration::from_secs(24 * 3600)));
    let period = UsagePeriod {
        from: old,
        to: Timestamp::now().saturating_add(Duration::from_secs(7200)),
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let buckets = store
            .key_usage("org", &key_id, period, UsageGranularity::Hour)
            .await
            .unwrap();
        if buckets.len() == 1 {
            assert_ne!(buckets[0].start, old, "the young hour was deleted");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nothing was deleted: {buckets:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Memory stays bounded by the capacity: a key that finds no place is dropped and
/// counted, and a flush gives every place back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_never_exceed_the_capacity_and_a_flush_frees_them() {
    let recorder = UsageRecorder::with_capacity(MemoryStore::new(), 10)
        .with_flush_interval(MAX_FLUSH_INTERVAL);
    // Driven, as a maintenance drives it: a full map wakes its flush.
    crate::recording::spawn(&recorder.shared);
    let threads: Vec<_> = (0..4)
        .map(|thread| {
            let recorder = recorder.clone();
            std::thread::spawn(move || {
                for n in 0..20 {
                    let key: Arc<str> = format!("key-{thread}-{n}").into();
                    recorder.record(&key, UsageRoute::Me, UsageOutcome::Ok);
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    // A full map asks the background task for a flush, which may have freed places
    // meanwhile: never more than the capacity, and some requests dropped.
    assert!(recorder.tracked_keys() <= 10);
    assert!(recorder.shared.bounds.places.taken() <= 10);
    assert!(recorder.dropped() > 0);
    // The keys are no store's: the flush writes nothing, yet frees every place.
    recorder.flush().await.unwrap();
    assert_eq!(recorder.tracked_keys(), 0);
    assert_eq!(recorder.shared.bounds.places.taken(), 0);
}
