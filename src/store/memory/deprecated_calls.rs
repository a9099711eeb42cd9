//! [`DeprecatedCallStore`] in memory: calls per key, target and day, with the semantics of
//! `PgStore`'s table (added to, the later last call kept, scoped to the key's organization,
//! pruned by day).

use std::collections::BTreeMap;
use std::sync::PoisonError;
use std::time::Duration;

use async_trait::async_trait;

use super::usage::millis;
use super::MemoryStore;
use crate::model::Timestamp;
use crate::store::usage::day_of_millis;
use crate::store::{DeprecatedCallCount, DeprecatedCallStore, DeprecatedCallTotal, StoreError};

/// The calls a memory store holds: by key id, target and day (milliseconds), how many and
/// the last (milliseconds).
pub(super) type Calls = BTreeMap<(String, String, i64), (u64, i64)>;

impl MemoryStore {
    fn calls(&self) -> std::sync::MutexGuard<'_, Calls> {
        self.deprecated_calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl DeprecatedCallStore for MemoryStore {
    async fn record_deprecated_calls(
        &self,
        counts: &[DeprecatedCallCount],
    ) -> Result<(), StoreError> {
        let state = self.read();
        let mut calls = self.calls();
        for count in counts.iter().filter(|count| count.calls > 0) {
            if !state.key_ids.contains_key(&count.key_id) {
                continue;
            }
            let day = day_of_millis(millis(count.day));
            let held = calls
                .entry((count.key_id.clone(), count.target.clone(), day))
                .or_insert((0, i64::MIN));
            held.0 = held.0.saturating_add(count.calls);
            held.1 = held.1.max(millis(count.last_call_at));
        }
        Ok(())
    }

    async fn deprecated_calls(
        &self,
        organization_id: &str,
        key_id: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<DeprecatedCallTotal>, StoreError> {
        // With a key, a key of no such organization simply has no calls, as on PostgreSQL.
        let mut key_ids = match self.read().key_ids_of(organization_id) {
            Err(_) if key_id.is_some() => Vec::new(),
            found => found?,
        };
        key_ids.retain(|id| key_id.is_none_or(|only| only == id));
        let from = day_of_millis(millis(since));
        let calls = self.calls();
        let mut totals: BTreeMap<(String, String), (u64, i64)> = BTreeMap::new();
        for key_id in key_ids {
            let start = (key_id.clone(), String::new(), i64::MIN);
            for ((id, target, day), (count, last)) in calls.range(start..) {
                if *id != key_id {
                    break;
                }
                if *day >= from {
                    let held = totals
                        .entry((target.clone(), key_id.clone()))
                        .or_insert((0, i64::MIN));
                    held.0 = held.0.saturating_add(*count);
                    held.1 = held.1.max(*last);
                }
            }
        }
        Ok(totals
            .into_iter()
            .filter_map(|((target, key_id), (calls, last))| {
                Some(DeprecatedCallTotal {
                    key_id,
                    target,
                    calls,
                    last_call_at: Timestamp::from_unix_millis(last)?,
                })
            })
            .collect())
    }

    async fn prune_deprecated_calls(
        &self,
        older_than: Duration,
        batch: u32,
    ) -> Result<u64, StoreError> {
        let cutoff = millis(Timestamp::now())
            .saturating_sub(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX));
        let mut calls = self.calls();
        let mut old: Vec<_> = calls
            .keys()
            .filter(|(_, _, day)| *day < cutoff)
            .cloned()
            .collect();
        // Oldest first, as PostgreSQL deletes them.
        old.sort_by_key(|(_, _, day)| *day);
        old.truncate(batch as usize);
        for key in &old {
            calls.remove(key);
        }
        Ok(old.len() as u64)
    }
}
