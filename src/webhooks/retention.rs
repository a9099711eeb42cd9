//! Retention: the messages older than the retention period are deleted, with their
//! deliveries and attempts, in small batches, so the outbox and its history stay bounded; a
//! job of the host's [`Maintenance`](crate::maintenance::Maintenance).

use std::time::Duration;

use super::WebhookOutbox;
use crate::log::ErrorChain;

/// How long messages (and their deliveries and attempts) are kept, by default: 30 days.
pub const DEFAULT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// The most messages one statement deletes: a short transaction that holds few locks.
pub(super) const BATCH: usize = 500;

/// How often the maintenance deletes what aged out (and once when it starts).
pub const RETENTION_INTERVAL: Duration = Duration::from_secs(60);

/// The most batches of one round: a backlog of old messages goes over several rounds
/// instead of one long one.
const MOST_BATCHES: usize = 100;

/// Deletes what was raised more than `retention` ago, a batch at a time, until a batch finds
/// less than a full one (or the round's batches are spent). Returns how many messages went.
pub(crate) async fn prune_messages(outbox: &dyn WebhookOutbox, retention: Duration) -> u64 {
    let mut deleted = 0;
    for _ in 0..MOST_BATCHES {
        match outbox.prune(retention, BATCH).await {
            Ok(count) => {
                deleted += count;
                if count < BATCH as u64 {
                    break;
                }
            }
            Err(error) => {
                tracing::warn!(error = %ErrorChain(&error), "webhooks: deleting old messages failed; trying again later");
                break;
            }
        }
        // Room for the claims and finishes of the other workers between batches.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if deleted > 0 {
        tracing::info!(
            deleted,
            "webhooks: deleted messages older than the retention period"
        );
    }
    deleted
}
