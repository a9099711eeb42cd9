//! The audit log's retention, run by the management service itself: at most one round an
//! hour, started in the background by the request that finds it due.

use std::sync::Arc;

use crate::store::{AuditContext, AuditLog};

/// The actor of the `audit.pruned` entries of the service's own retention.
pub const AUDIT_RETENTION_ACTOR: &str = "audit retention";

/// How often the service runs the audit log's retention, at most.
const AUDIT_RETENTION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(3600);
/// A retention round deletes at most this many batches of [`AUDIT_RETENTION_BATCH`] entries.
const AUDIT_RETENTION_BATCHES: u32 = 10;
const AUDIT_RETENTION_BATCH: u32 = 500;

/// The audit log's retention, run by the service itself: how long entries are kept, and
/// its rounds.
pub(super) struct AuditRetention {
    pub(super) keep: std::time::Duration,
    rounds: crate::supervise::DueRounds,
}

impl AuditRetention {
    pub(super) fn new(keep: std::time::Duration) -> Self {
        Self {
            keep,
            rounds: crate::supervise::DueRounds::new(AUDIT_RETENTION_INTERVAL),
        }
    }
}

impl AuditRetention {
    /// Starts a round of `log`'s retention in the background when one is due. Its
    /// `audit.pruned` entries are by [`AUDIT_RETENTION_ACTOR`], never in the context of the
    /// request that found it due: that request's user, address and agent belong to one
    /// organization, and retention writes into every organization's log. A failure is
    /// logged; the next round is an hour later.
    pub(super) fn run_if_due(&self, log: &Arc<dyn AuditLog>) {
        if !self.rounds.take_turn() {
            return;
        }
        let (log, keep) = (log.clone(), self.keep);
        tokio::spawn(AuditContext::new(AUDIT_RETENTION_ACTOR).scope(async move {
            let pruned = crate::store::prune_audit_batches(
                &*log,
                keep,
                AUDIT_RETENTION_BATCH,
                AUDIT_RETENTION_BATCHES,
            );
            if let Err(err) = pruned.await {
                tracing::warn!(error = %crate::log::ErrorChain(&err), "the audit log's retention failed");
            }
        }));
    }
}
