//! [`UsageStore`] in memory: counts per key, hour, route and outcome, with the semantics of
//! `PgStore`'s table (added to, scoped to the key's organization, pruned by hour).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

use super::{unknown_key, unknown_organization, MemoryStore, State};
use crate::model::Timestamp;
use crate::store::usage::{day_of_millis, hour_of_millis};
use crate::store::StoreError;
use crate::store::{
    KeyUsageTotal, UsageBucket, UsageCount, UsageGranularity, UsageOutcome, UsagePeriod,
    UsageRoute, UsageStore,
};

/// The usage a memory store holds: by key id, then hour (milliseconds), route and outcome.
pub(super) type Usage = BTreeMap<(String, i64, UsageRoute, UsageOutcome), u64>;

impl State {
    /// The ids of the organization's keys, or `NotFound` for an unknown organization.
    pub(super) fn key_ids_of(&self, organization_id: &str) -> Result<Vec<String>, StoreError> {
        if !self.organizations.contains_key(organization_id) {
            return Err(unknown_organization(organization_id));
        }
        Ok(self
            .keys
            .values()
            .filter(|entry| entry.record.organization_id == organization_id)
            .map(|entry| entry.record.id.clone())
            .collect())
    }

    pub(super) fn owns_key(&self, organization_id: &str, key_id: &str) -> bool {
        self.key_ids
            .get(key_id)
            .and_then(|digest| self.keys.get(digest))
            .is_some_and(|entry| entry.record.organization_id == organization_id)
    }
}

pub(super) fn millis(at: Timestamp) -> i64 {
    at.as_datetime().timestamp_millis()
}

#[async_trait]
impl UsageStore for MemoryStore {
    async fn record_usage(&self, counts: &[UsageCount]) -> Result<(), StoreError> {
        let state = self.read();
        let mut usage = self.usage();
        for count in counts.iter().filter(|count| count.count > 0) {
            if !state.key_ids.contains_key(&count.key_id) {
                continue;
            }
            let hour = hour_of_millis(millis(count.hour));
            let held = usage
                .entry((count.key_id.clone(), hour, count.route, count.outcome))
                .or_default();
            *held = held.saturating_add(count.count);
        }
        Ok(())
    }

    async fn key_usage(
        &self,
        organization_id: &str,
        key_id: &str,
        period: UsagePeriod,
        granularity: UsageGranularity,
    ) -> Result<Vec<UsageBucket>, StoreError> {
        {
            let state = self.read();
            if !state.organizations.contains_key(organization_id) {
                return Err(unknown_organization(organization_id));
            }
            if !state.owns_key(organization_id, key_id) {
                return Err(unknown_key(key_id));
            }
        }
        let (from, to) = (millis(period.from), millis(period.to));
        let mut buckets: BTreeMap<(i64, UsageRoute, UsageOutcome), u64> = BTreeMap::new();
        let usage = self.usage();
        let start = (
            key_id.to_owned(),
            i64::MIN,
            UsageRoute::Me,
            UsageOutcome::Ok,
        );
        for ((id, hour, route, outcome), count) in usage.range(start..) {
            if id != key_id {
                break;
            }
            if *hour < from || *hour >= to {
                continue;
            }
            let bucket = match granularity {
                UsageGranularity::Day => day_of_millis(*hour),
                _ => *hour,
            };
            let held = buckets.entry((bucket, *route, *outcome)).or_default();
            *held = held.saturating_add(*count);
        }
        Ok(buckets
            .into_iter()
            .filter_map(|((start, route, outcome), count)| {
                Some(UsageBucket {
                    start: Timestamp::from_unix_millis(start)?,
                    route,
                    outcome,
                    count,
                })
            })
            .collect())
    }

    async fn usage_totals(
        &self,
        organization_id: &str,
        period: UsagePeriod,
    ) -> Result<Vec<KeyUsageTotal>, StoreError> {
        let key_ids = self.read().key_ids_of(organization_id)?;
        let (from, to) = (millis(period.from), millis(period.to));
        let usage = self.usage();
        let mut totals: BTreeMap<(String, UsageOutcome), u64> = BTreeMap::new();
        for key_id in key_ids {
            let start = (key_id.clone(), i64::MIN, UsageRoute::Me, UsageOutcome::Ok);
            for ((id, hour, _, outcome), count) in usage.range(start..) {
                if *id != key_id {
                    break;
                }
                if *hour >= from && *hour < to {
                    let held = totals.entry((key_id.clone(), *outcome)).or_default();
                    *held = held.saturating_add(*count);
                }
            }
        }
        Ok(totals
            .into_iter()
            .map(|((key_id, outcome), count)| KeyUsageTotal {
                key_id,
                outcome,
                count,
            })
            .collect())
    }

    async fn prune_usage(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        let cutoff = millis(Timestamp::now())
            .saturating_sub(i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX));
        let mut usage = self.usage();
        let old: Vec<_> = usage
            .keys()
            .filter(|(_, hour, _, _)| *hour < cutoff)
            .take(batch as usize)
            .cloned()
            .collect();
        for key in &old {
            usage.remove(key);
        }
        Ok(old.len() as u64)
    }
}
