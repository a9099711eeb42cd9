//! [`AuditLog`] in memory: entries appended under the lock of the change they record, so a
//! reader never sees a change without its entry.

use std::time::Duration;

use async_trait::async_trait;

use super::{unknown_organization, MemoryStore};
use crate::model::Timestamp;
use crate::store::audit::refuse_host_entry;
use crate::store::StoreError;
use crate::store::{
    AuditAction, AuditContext, AuditEntry, AuditLog, AuditPage, AuditQuery, AuditRecord,
    MAX_AUDIT_PAGE,
};

/// The most entries a memory store keeps: past it, the oldest tenth goes at once (a log that
/// grows without bound in a process's memory would take the process down first). A test or a
/// demo never comes near it; retention ([`AuditLog::prune_audit`]) is the ordinary deletion.
const MAX_MEMORY_AUDIT_ENTRIES: usize = 100_000;

/// The entries a memory store holds, oldest first by `(at, id)` as PostgreSQL orders them
/// (a wall clock stepped back can make a later entry older), and the next entry's number.
#[derive(Default)]
pub(super) struct Audit {
    entries: Vec<AuditEntry>,
    next_id: u64,
}

impl MemoryStore {
    /// Appends the entry of a change, with the running call's [`AuditContext`]. Called while
    /// the change's own lock is held; the audit lock is always taken last.
    pub(super) fn audit(&self, record: AuditRecord) {
        self.audit_as(record, AuditContext::current());
    }

    /// [`audit`](Self::audit) with the given context, not the running call's: for a change
    /// the crate makes by itself (delivery disabling an endpoint).
    pub(super) fn audit_as(&self, record: AuditRecord, context: AuditContext) {
        let mut audit = self.audit_log();
        audit.next_id += 1;
        let entry = AuditEntry {
            id: audit.next_id.to_string(),
            at: Timestamp::now(),
            organization_id: record.organization_id,
            action: record.action,
            target: record.target,
            detail: record.detail,
            actor: context.actor().to_owned(),
            source_address: context.source_address().map(str::to_owned),
            user_agent: context.user_agent().map(str::to_owned),
            request_id: context.request_id().map(str::to_owned),
        };
        // At the end, but for a wall clock stepped back: then where PostgreSQL would put it.
        let position = position_of(&entry);
        let at = audit
            .entries
            .partition_point(|entry| position_of(entry) <= position);
        audit.entries.insert(at, entry);
        if audit.entries.len() > MAX_MEMORY_AUDIT_ENTRIES {
            audit.entries.drain(..MAX_MEMORY_AUDIT_ENTRIES / 10);
        }
    }
}

fn position_of(entry: &AuditEntry) -> (Timestamp, u64) {
    (entry.at, entry.id.parse().unwrap_or(u64::MAX))
}

#[async_trait]
impl AuditLog for MemoryStore {
    async fn audit_entries(
        &self,
        organization_id: &str,
        query: &AuditQuery,
    ) -> Result<AuditPage, StoreError> {
        if !self.read().organizations.contains_key(organization_id) {
            return Err(unknown_organization(organization_id));
        }
        let limit = query.limit.clamp(1, MAX_AUDIT_PAGE);
        let after = query
            .after
            .as_ref()
            // An id that is no number of ours reads as the last of its millisecond, as in
            // PostgreSQL.
            .map(|after| (after.at, after.id.parse::<u64>().unwrap_or(u64::MAX)));
        let audit = self.audit_log();
        let mut matching = audit.entries.iter().rev().filter(|entry| {
            entry.organization_id == organization_id
                && query
                    .action
                    .as_ref()
                    .is_none_or(|action| entry.action == *action)
                && query
                    .target
                    .as_deref()
                    .is_none_or(|target| entry.target.as_deref() == Some(target))
                && after.is_none_or(|after| position_of(entry) < after)
        });
        let entries: Vec<AuditEntry> = matching.by_ref().take(limit).cloned().collect();
        let more = matching.next().is_some();
        Ok(AuditPage { entries, more })
    }

    async fn append(&self, record: AuditRecord) -> Result<(), StoreError> {
        if let Some(refused) = refuse_host_entry(&record, &AuditContext::current()) {
            return Err(refused);
        }
        let state = self.read();
        if !state.organizations.contains_key(&record.organization_id) {
            return Err(unknown_organization(&record.organization_id));
        }
        self.audit(record);
        Ok(())
    }

    async fn prune_audit(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        let cutoff = Timestamp::from_unix_millis(
            Timestamp::now().as_datetime().timestamp_millis()
                - i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX / 2),
        );
        let Some(cutoff) = cutoff else {
            return Ok(0);
        };
        let pruned: Vec<AuditEntry> = {
            let mut audit = self.audit_log();
            let old = audit
                .entries
                .iter()
                .take(batch as usize)
                .take_while(|entry| entry.at < cutoff)
                .count();
            audit.entries.drain(..old).collect()
        };
        let mut per_organization = std::collections::BTreeMap::<String, u64>::new();
        for entry in &pruned {
            *per_organization
                .entry(entry.organization_id.clone())
                .or_default() += 1;
        }
        for (organization_id, count) in per_organization {
            self.audit(
                AuditRecord::new(&organization_id, AuditAction::AuditPruned, None)
                    .with_detail(count.to_string()),
            );
        }
        Ok(pruned.len() as u64)
    }
}
