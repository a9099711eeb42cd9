//! The events feed's retention, run by the API itself: at most one round a minute, started in
//! the background by a request that finds it due, deleting in small batches (the store keeps
//! what is left a suffix of the feed).

use std::sync::Arc;
use std::time::Duration;

use crate::store::{prune_event_batches, EventFeed};
use crate::supervise::DueRounds;

/// How often the API runs the feed's retention, at most.
const EVENTS_RETENTION_INTERVAL: Duration = Duration::from_secs(60);
/// A round deletes at most this many batches of [`EVENTS_RETENTION_BATCH`] events.
const EVENTS_RETENTION_BATCHES: u32 = 20;
const EVENTS_RETENTION_BATCH: u32 = 500;

/// How long the feed keeps events, and the rounds of its retention.
pub(crate) struct EventsRetention {
    pub(crate) keep: Duration,
    rounds: DueRounds,
}

impl EventsRetention {
    pub(crate) fn new(keep: Duration) -> Self {
        Self {
            keep,
            rounds: DueRounds::new(EVENTS_RETENTION_INTERVAL),
        }
    }

    /// Starts a round of `feed`'s retention in the background when one is due and there is a
    /// tokio runtime to run it on. A failure is logged, a panic caught and counted (task
    /// `events_retention`); the next round is a minute later.
    pub(crate) fn run_if_due(&self, feed: &Arc<dyn EventFeed>) {
        // The turn first: getting the runtime's handle clones an `Arc` every worker shares.
        if !self.rounds.take_turn() {
            return;
        }
        // Outside a runtime the round is skipped; the next is due an interval later.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (feed, keep) = (feed.clone(), self.keep);
        runtime.spawn(crate::supervise::caught("events_retention", async move {
            let pruned = prune_event_batches(
                &*feed,
                keep,
                EVENTS_RETENTION_BATCH,
                EVENTS_RETENTION_BATCHES,
            );
            if let Err(err) = pruned.await {
                tracing::warn!(error = %crate::log::ErrorChain(&err), "the events feed's retention failed");
            }
        }));
    }
}
