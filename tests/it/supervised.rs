//! Background tasks outlive a panic in one round: a host store that panics in a claim or a
//! write costs that round (logged, counted in `partner_api_background_task_panics_total`),
//! never the task; the next round delivers, writes, and loses nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use partner_api::store::{
    KeyUsageTotal, UsageBucket, UsageCount, UsageGranularity, UsageOutcome, UsagePeriod,
    UsageRoute, UsageStore,
};
use partner_api::usage::UsageRecorder;
use partner_api::StoreError;

use crate::common::*;

/// Runs `test` on one thread with a fresh metrics recorder; the panics counted per task.
fn with_panics_counted<F: std::future::Future<Output = ()>>(
    test: impl FnOnce() -> F,
) -> Vec<(String, u64)> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(test()));
    panics(&snapshotter)
}

fn panics(snapshotter: &Snapshotter) -> Vec<(String, u64)> {
    let mut counted: Vec<(String, u64)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == partner_api::metrics::BACKGROUND_TASK_PANICS)
        .filter_map(|(key, _, _, value)| {
            let task = key.key().labels().find(|label| label.key() == "task")?;
            match value {
                DebugValue::Counter(count) => Some((task.value().to_owned(), count)),
                _ => None,
            }
        })
        .collect();
    counted.sort();
    counted
}

/// A usage store whose first `panics` writes panic; the rest are kept.
#[derive(Clone, Default)]
struct PanickingUsage {
    panics: Arc<AtomicUsize>,
    written: Arc<std::sync::Mutex<Vec<UsageCount>>>,
}

#[async_trait]
impl UsageStore for PanickingUsage {
    async fn record_usage(&self, counts: &[UsageCount]) -> Result<(), StoreError> {
        let left = self.panics.load(Ordering::SeqCst);
        if left > 0 {
            self.panics.store(left - 1, Ordering::SeqCst);
            panic!("a host's usage store panicked");
        }
        self.written.lock().unwrap().extend_from_slice(counts);
        Ok(())
    }

    async fn key_usage(
        &self,
        _: &str,
        _: &str,
        _: UsagePeriod,
        _: UsageGranularity,
    ) -> Result<Vec<UsageBucket>, StoreError> {
        Ok(Vec::new())
    }

    async fn usage_totals(
        &self,
        _: &str,
        _: UsagePeriod,
    ) -> Result<Vec<KeyUsageTotal>, StoreError> {
        Ok(Vec::new())
    }

    async fn prune_usage(&self, _: Duration, _: u32) -> Result<u64, StoreError> {
        Ok(0)
    }
}

#[test]
fn a_usage_recorder_whose_store_panics_goes_on_and_loses_no_count() {
    let store = PanickingUsage {
        panics: Arc::new(AtomicUsize::new(2)),
        ..PanickingUsage::default()
    };
    let panics = with_panics_counted(|| async {
        let recorder =
            UsageRecorder::spawn(store.clone()).with_flush_interval(Duration::from_millis(1));
        let key: Arc<str> = Arc::from("7");
        for _ in 0..5 {
            recorder.record(&key, UsageRoute::Orders, UsageOutcome::Ok);
        }
        let started = Instant::now();
        loop {
            let total: u64 = store.written.lock().unwrap().iter().map(|c| c.count).sum();
            if total == 5 {
                break;
            }
            assert!(total < 5, "{total} requests written of 5");
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the recorder stopped writing after its store panicked"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // And it still writes what comes next.
        recorder.record(&key, UsageRoute::Me, UsageOutcome::Ok);
        recorder.flush().await.unwrap();
        let total: u64 = store.written.lock().unwrap().iter().map(|c| c.count).sum();
        assert_eq!(total, 6);
    });
    assert_eq!(panics, [("usage_recorder".to_owned(), 2)]);
}

#[cfg(feature = "webhooks")]
mod webhooks {
    use super::*;
    use crate::common::receiver::Receiver;
    use partner_api::webhooks::{
        Backlog, ClaimRequest, Delivery, DeliveryConfig, DestinationPolicy, Dispatcher, Finish,
        FinishedAttempt, NewEndpoint, WebhookManager, WebhookOutbox,
    };
    use partner_api::MemoryStore;

    /// An outbox whose first `panics` claims and backlogs panic.
    struct PanickingOutbox {
        inner: MemoryStore,
        claims: AtomicUsize,
        backlogs: AtomicUsize,
    }

    fn take_one(left: &AtomicUsize) -> bool {
        left.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }

    #[async_trait]
    impl WebhookOutbox for PanickingOutbox {
        async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Delivery>, StoreError> {
            assert!(
                !take_one(&self.claims),
                "a host's outbox panicked in a claim"
            );
            self.inner.claim(request).await
        }

        async fn finish(
            &self,
            delivery: &Delivery,
            attempt: &FinishedAttempt,
        ) -> Result<Finish, StoreError> {
            self.inner.finish(delivery, attempt).await
        }

        async fn backlog(&self) -> Result<Backlog, StoreError> {
            assert!(
                !take_one(&self.backlogs),
                "a host's outbox panicked in a backlog"
            );
            self.inner.backlog().await
        }
    }

    #[test]
    fn a_dispatcher_whose_outbox_panics_goes_on_delivering() {
        let panics = with_panics_counted(|| async {
            let receiver = Receiver::ok().await;
            let store = store();
            store
                .add_endpoint("org_b", NewEndpoint::new(receiver.url("/hooks")))
                .await
                .unwrap();
            let outbox = PanickingOutbox {
                inner: store.clone(),
                claims: AtomicUsize::new(3),
                backlogs: AtomicUsize::new(1),
            };
            let config = DeliveryConfig::new()
                .with_destinations(
                    DestinationPolicy::new()
                        .with_allow_http(true)
                        .with_allowed_subnet("127.0.0.0/8".parse().unwrap()),
                )
                .with_poll_interval(Duration::from_millis(20));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let worker = tokio::spawn(Dispatcher::new(outbox, config).run(async move {
                let _ = stopped.await;
            }));
            store
                .add_order("org_b", order("b_supervised", BASE_MILLIS))
                .unwrap();
            let received = receiver.wait_for(1, Duration::from_secs(10)).await;
            assert_eq!(received[0].json()["type"], "order.created");
            assert!(!worker.is_finished(), "the dispatcher ended");
            drop(stop);
            worker.await.unwrap();
        });
        assert_eq!(panics, [("webhook_dispatcher".to_owned(), 4)]);
    }
}
