//! [`UsageCounters`]: the per-organization (and per-key) series, bounded.

use std::sync::atomic::{AtomicUsize, Ordering};

use ::metrics::{Key, Label};
use dashmap::DashMap;
use xxhash_rust::xxh3::xxh3_64;

use crate::hashing::BuildPrehashed;

use super::{counter, ORGANIZATION_REQUESTS, OTHER, RATE_LIMIT_REFUSALS};

/// The per-organization (and per-key) series, bounded: see the module docs.
pub(crate) struct UsageCounters {
    organizations: SeriesMap<OrganizationSeries>,
    /// Each key's requests series; none when `max` is 0 (no `key_id` label).
    keys: SeriesMap<Key>,
    /// The series of every organization beyond the bound.
    other: OrganizationSeries,
}

/// The keys of one organization's series.
struct OrganizationSeries {
    /// Its `organization_id` label (the id, or [`OTHER`]).
    label: Label,
    /// Its requests (with `key_id="_other"` when key ids are labels).
    requests: Key,
    refusals: Key,
}

impl OrganizationSeries {
    fn new(organization: &str, key_ids: bool) -> Self {
        let label = Label::new("organization_id", organization.to_owned());
        let mut request_labels = vec![label.clone()];
        if key_ids {
            request_labels.push(Label::from_static_parts("key_id", OTHER));
        }
        Self {
            requests: Key::from_parts(ORGANIZATION_REQUESTS, request_labels),
            refusals: Key::from_parts(RATE_LIMIT_REFUSALS, vec![label.clone()]),
            label,
        }
    }
}

impl UsageCounters {
    pub(crate) fn new(max_organizations: usize, max_keys: usize) -> Self {
        Self {
            organizations: SeriesMap::new(max_organizations),
            keys: SeriesMap::new(max_keys),
            other: OrganizationSeries::new(OTHER, max_keys > 0),
        }
    }

    pub(crate) fn max_organizations(&self) -> usize {
        self.organizations.max
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.keys.max
    }

    /// Counts an authenticated request with key `key_id` of organization `organization_id`.
    pub(crate) fn request(&self, organization_id: &str, key_id: &str) {
        if self.keys.max == 0 {
            return self.with_organization(organization_id, |series| {
                counter(&series.requests).increment(1);
            });
        }
        let key_series = || {
            let organization =
                self.with_organization(organization_id, |series| series.label.clone());
            let labels = vec![organization, Label::new("key_id", key_id.to_owned())];
            Key::from_parts(ORGANIZATION_REQUESTS, labels)
        };
        self.keys.with(key_id, key_series, |found| match found {
            Some(key) => counter(key).increment(1),
            None => self.with_organization(organization_id, |series| {
                counter(&series.requests).increment(1);
            }),
        });
    }

    /// Counts a request of organization `organization_id` refused by the rate limiter.
    pub(crate) fn rate_limited(&self, organization_id: &str) {
        self.with_organization(organization_id, |series| {
            counter(&series.refusals).increment(1);
        });
    }

    fn with_organization<T>(
        &self,
        organization_id: &str,
        f: impl FnOnce(&OrganizationSeries) -> T,
    ) -> T {
        let key_ids = self.keys.max > 0;
        self.organizations.with(
            organization_id,
            || OrganizationSeries::new(organization_id, key_ids),
            |found| f(found.unwrap_or(&self.other)),
        )
    }
}

/// At most `max` values, each for an id (an organization's or a key's), found by the id's
/// XXH3 hash. Ids come from the stores, not from callers, so an unkeyed hash is safe here;
/// the entry keeps its id, and an id whose hash another one holds already counts as beyond
/// the bound.
struct SeriesMap<V> {
    max: usize,
    /// Entries made, reserved before an insert so the bound holds under concurrent first
    /// requests.
    taken: AtomicUsize,
    entries: DashMap<u64, (Box<str>, V), BuildPrehashed>,
}

impl<V> SeriesMap<V> {
    fn new(max: usize) -> Self {
        Self {
            max,
            taken: AtomicUsize::new(0),
            entries: DashMap::default(),
        }
    }

    /// Calls `found` with the value of `id`, made by `make` if there is room for it, or
    /// `None` when the map is full.
    fn with<T>(
        &self,
        id: &str,
        make: impl FnOnce() -> V,
        found: impl FnOnce(Option<&V>) -> T,
    ) -> T {
        let hash = xxh3_64(id.as_bytes());
        if let Some(entry) = self.entries.get(&hash) {
            return found(same_id(&entry, id));
        }
        if !take_slot(&self.taken, self.max) {
            // The last slot may have gone to this very id, made by a request beside this one.
            let entry = self.entries.get(&hash);
            return found(entry.as_deref().and_then(|entry| same_id(entry, id)));
        }
        let mut made = false;
        let entry = self.entries.entry(hash).or_insert_with(|| {
            made = true;
            (id.into(), make())
        });
        if !made {
            // Another request made it first.
            self.taken.fetch_sub(1, Ordering::Relaxed);
        }
        found(same_id(&entry, id))
    }
}

/// The value of `entry` if it is `id`'s.
fn same_id<'e, V>(entry: &'e (Box<str>, V), id: &str) -> Option<&'e V> {
    (*entry.0 == *id).then_some(&entry.1)
}

/// Takes one of `max` slots, if one is left.
fn take_slot(taken: &AtomicUsize, max: usize) -> bool {
    taken
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < max).then_some(n + 1)
        })
        .is_ok()
}
