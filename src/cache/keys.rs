//! [`CachingKeyStore`]: key lookups answered from memory, known keys and unknown ones alike.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use quick_cache::sync::Cache;

use super::notifications::{Gate, Invalidate, Mark, Notifications};
use super::DEFAULT_CAPACITY;
use crate::key::KeyDigest;
use crate::metrics::{self, CacheName, InvalidationScope};
use crate::model::Timestamp;
use crate::store::{KeyLookup, KeyStore, Principal, StoreError};

/// A [`KeyStore`] in front of another: a lookup it has answered before is answered at once
/// ([`KeyStore::lookup_now`]), a key's expiry checked on every hit; keys that resolved to
/// nothing (unknown, revoked, expired) are remembered too, so a client retrying a bad key costs
/// the inner store one query. At most `capacity` keys of each kind are kept (the least
/// recently useful ones go first).
///
/// The host tells it of changes ([`invalidate_key`](Self::invalidate_key),
/// [`invalidate_all`](Self::invalidate_all)), or it follows a [`Notifications`] hub
/// ([`with_notifications`](Self::with_notifications)) and then answers from memory only while
/// the hub is connected. Clones share the cache.
///
/// ```
/// use partner_api::cache::CachingKeyStore;
/// use partner_api::MemoryStore;
///
/// let keys = CachingKeyStore::new(MemoryStore::new()).with_capacity(10_000);
/// ```
#[derive(Clone)]
pub struct CachingKeyStore<S> {
    inner: S,
    cache: Arc<KeyCache>,
}

struct KeyCache {
    /// Keys that resolved to a principal, with the [`Mark::at`] of the read.
    found: Cache<KeyDigest, (Principal, u64)>,
    /// The digests held in `found` for each key id, so that a change to one key drops its
    /// entries at once instead of scanning the cache: a burst of changes costs each of them
    /// O(1), not O(cached keys). Ids whose digests were evicted since are pruned now and then.
    by_key_id: Mutex<HashMap<Arc<str>, Vec<KeyDigest>>>,
    /// Keys that resolved to nothing, and why (unknown, revoked, expired), with the
    /// [`Mark::at`] of the read.
    absent: Cache<KeyDigest, (KeyLookup, u64)>,
    gate: Gate,
}

impl<S: KeyStore> CachingKeyStore<S> {
    /// Creates a cache of [`DEFAULT_CAPACITY`] keys of each kind in front of `inner`, which
    /// its host keeps informed of changes.
    pub fn new(inner: S) -> Self {
        Self::with_gate(inner, Gate::default(), DEFAULT_CAPACITY)
    }

    fn with_gate(inner: S, gate: Gate, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        let cache = Arc::new(KeyCache {
            found: Cache::new(capacity),
            by_key_id: Mutex::default(),
            absent: Cache::new(capacity),
            gate,
        });
        cache.gate.register(&cache);
        Self { inner, cache }
    }

    /// Keeps at most `capacity` keys of each kind (known, and unknown or revoked). Drops what
    /// the cache held.
    #[must_use]
    pub fn with_capacity(self, capacity: usize) -> Self {
        let gate = self.cache.gate.clone();
        Self::with_gate(self.inner, gate, capacity)
    }

    /// Follows `notifications`: the cache is told of every change through it, and answers
    /// from memory only while it is connected. Drops what the cache held.
    #[must_use]
    pub fn with_notifications(self, notifications: &Notifications) -> Self {
        let capacity = self.cache.found.capacity() as usize;
        let gate = self.cache.gate.following(notifications);
        Self::with_gate(self.inner, gate, capacity)
    }

    /// Answers from an entry for at most `max_age` after the read that made it (default
    /// [`DEFAULT_MAX_AGE`](super::DEFAULT_MAX_AGE)); then the store is asked again. This bounds
    /// how long a change that no notification reported (one that bypassed the triggers) is
    /// missed. Drops what the cache held.
    #[must_use]
    pub fn with_max_age(self, max_age: std::time::Duration) -> Self {
        let capacity = self.cache.found.capacity() as usize;
        let gate = self.cache.gate.clone().with_max_age(max_age);
        Self::with_gate(self.inner, gate, capacity)
    }

    /// Forgets the key `key_id` (changed or removed), and every key remembered as unknown (one
    /// of them may just have been added).
    pub fn invalidate_key(&self, key_id: &str) {
        self.cache.key_changed(key_id);
    }

    /// Forgets everything.
    pub fn invalidate_all(&self) {
        self.cache.clear();
    }

    /// Returns the wrapped store.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Returns the number of keys held, known and unknown.
    pub fn len(&self) -> usize {
        self.cache.found.len() + self.cache.absent.len()
    }

    /// Returns whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl KeyCache {
    /// The remembered answer for `digest`, if the cache may answer (a hit).
    fn answer(&self, digest: &KeyDigest) -> Option<KeyLookup> {
        let now = self.gate.now_if_open()?;
        let answer = if let Some((principal, read_at)) = self.found.get(digest) {
            if !self.gate.fresh(read_at, now) {
                self.found.remove(digest);
                return None;
            }
            // Expiry holds on every hit; the clock is read only for a key that expires.
            let expired = principal
                .expires_at
                .is_some_and(|expires_at| expires_at <= Timestamp::now());
            if expired {
                KeyLookup::Expired {
                    key_id: Some(principal.key_id.clone()),
                }
            } else {
                KeyLookup::Valid(principal)
            }
        } else {
            let (refused, read_at) = self.absent.get(digest)?;
            if !self.gate.fresh(read_at, now) {
                self.absent.remove(digest);
                return None;
            }
            refused
        };
        metrics::cache_hit(CacheName::Keys);
        Some(answer)
    }

    /// Keeps what the store answered for `digest`, unless a change came in since `mark`.
    fn keep(&self, digest: KeyDigest, answer: &KeyLookup, mark: Mark) {
        let key_id = answer.principal().map(|principal| &*principal.key_id);
        let changes = self.gate.changes();
        if changes != mark.changes {
            journal_read(&self.gate, key_id, answer, mark, changes, "discarded");
            return;
        }
        match answer {
            KeyLookup::Valid(principal) => {
                self.found.insert(digest, (principal.clone(), mark.at));
                self.index(&principal.key_id, digest);
            }
            refused => self.absent.insert(digest, (refused.clone(), mark.at)),
        }
        // A change that came in while inserting may have missed the new entry.
        let changes = self.gate.changes();
        if changes != mark.changes {
            self.found.remove(&digest);
            self.absent.remove(&digest);
            journal_read(
                &self.gate,
                key_id,
                answer,
                mark,
                changes,
                "kept, then dropped",
            );
        } else {
            journal_read(&self.gate, key_id, answer, mark, changes, "kept");
        }
    }
}

/// The [`JOURNAL`](super::JOURNAL) event of a read from the store: what the cache did with it.
fn journal_read(
    gate: &Gate,
    key_id: Option<&str>,
    answer: &KeyLookup,
    mark: Mark,
    changes: u64,
    done: &'static str,
) {
    tracing::trace!(
        target: super::JOURNAL,
        hub = gate.hub_id(),
        key_id,
        answer = match answer {
            KeyLookup::Valid(_) => "valid",
            KeyLookup::Unknown => "unknown",
            KeyLookup::Revoked { .. } => "revoked",
            KeyLookup::Expired { .. } => "expired",
        },
        read_at = mark.at,
        mark_changes = mark.changes,
        changes,
        done,
        "key read"
    );
}

impl KeyCache {
    /// Notes that `found` holds `digest` for the key `key_id`.
    fn index(&self, key_id: &Arc<str>, digest: KeyDigest) {
        let mut index = self.index_guard();
        let digests = index.entry(key_id.clone()).or_default();
        if !digests.contains(&digest) {
            digests.push(digest);
        }
        // Entries leave `found` by eviction too; once the index holds twice as many ids as
        // the cache can, the ids of evicted entries go (amortized O(1) per insert).
        let capacity = usize::try_from(self.found.capacity()).unwrap_or(usize::MAX);
        if index.len() > capacity.saturating_mul(2) {
            index.retain(|_, digests| {
                digests.retain(|digest| self.found.contains_key(digest));
                !digests.is_empty()
            });
        }
    }

    fn index_guard(&self) -> MutexGuard<'_, HashMap<Arc<str>, Vec<KeyDigest>>> {
        self.by_key_id
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Invalidate for KeyCache {
    fn key_changed(&self, key_id: &str) {
        self.gate.note_change();
        let digests = self.index_guard().remove(key_id).unwrap_or_default();
        for digest in &digests {
            self.found.remove(digest);
        }
        // One of the keys remembered as unknown may just have been added.
        self.absent.clear();
        metrics::cache_invalidated(CacheName::Keys, InvalidationScope::Key);
    }

    fn orders_changed(&self, _organization_id: &str) {}

    fn clear(&self) {
        self.gate.note_change();
        self.found.clear();
        self.index_guard().clear();
        self.absent.clear();
        metrics::cache_invalidated(CacheName::Keys, InvalidationScope::All);
    }
}

#[async_trait]
impl<S: KeyStore> KeyStore for CachingKeyStore<S> {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        if let Some(answer) = self.cache.answer(digest) {
            return Ok(answer);
        }
        metrics::cache_missed(CacheName::Keys);
        let mark = self.cache.gate.mark();
        let answer = self.inner.lookup(digest).await?;
        self.cache.keep(*digest, &answer, mark);
        Ok(answer)
    }

    fn lookup_now(&self, digest: &KeyDigest) -> Option<Result<KeyLookup, StoreError>> {
        self.cache.answer(digest).map(Ok)
    }
}

impl<S> fmt::Debug for CachingKeyStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CachingKeyStore")
            .field("known", &self.cache.found.len())
            .field("unknown", &self.cache.absent.len())
            .field("answering", &self.cache.gate.open())
            .field("max_age", &self.cache.gate.max_age())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::super::store_of_one_organization;
    use super::*;

    #[tokio::test]
    async fn a_change_no_one_reported_is_seen_after_the_maximum_age() {
        let store = store_of_one_organization();
        store.add_key("pk_test_aging_key", "org").unwrap();
        let digest = KeyDigest::of("pk_test_aging_key");
        let unknown = KeyDigest::of("pk_test_never_issued");
        let hub = Notifications::new();
        hub.connected();
        let max_age = std::time::Duration::from_millis(300);
        let cache = CachingKeyStore::new(store.clone())
            .with_max_age(max_age)
            .with_notifications(&hub);
        assert!(cache.lookup(&digest).await.unwrap().is_valid());
        assert_eq!(cache.lookup(&unknown).await.unwrap(), KeyLookup::Unknown);
        // Revoked behind the cache's back, as a write with the triggers disabled would.
        assert!(store.revoke_key("pk_test_aging_key"));
        store.add_key("pk_test_never_issued", "org").unwrap();
        assert!(
            matches!(cache.lookup_now(&digest), Some(Ok(KeyLookup::Valid(_)))),
            "within the maximum age, the cache answers what it read"
        );
        let read = std::time::Instant::now();
        let deadline = read + max_age * 20;
        while cache.lookup_now(&digest).is_some() || cache.lookup_now(&unknown).is_some() {
            // Fresh evidence: only the age can turn the entries away.
            hub.confirmed(std::time::Instant::now());
            assert!(
                std::time::Instant::now() < deadline,
                "entries outlived their age"
            );
            tokio::time::sleep(max_age / 10).await;
        }
        assert!(read.elapsed() >= max_age / 2, "turned away before its age");
        assert!(matches!(
            cache.lookup(&digest).await.unwrap(),
            KeyLookup::Revoked { .. }
        ));
        assert!(cache.lookup(&unknown).await.unwrap().is_valid());
    }

    #[tokio::test]
    async fn reads_while_the_evidence_is_stale_are_kept_for_when_it_is_fresh_again() {
        let store = store_of_one_organization();
        store.add_key("pk_test_read_while_stale", "org").unwrap();
        let changed = store.add_key("pk_test_changed_while_stale", "org").unwrap();
        let digest = KeyDigest::of("pk_test_read_while_stale");
        let other = KeyDigest::of("pk_test_changed_while_stale");
        // No evidence (as when a heartbeat is late): the store answers...
        let hub = Notifications::new();
        let cache = CachingKeyStore::new(store.clone()).with_notifications(&hub);
        assert!(cache.lookup(&digest).await.unwrap().is_valid());
        assert!(cache.lookup(&other).await.unwrap().is_valid());
        assert!(
            cache.lookup_now(&digest).is_none(),
            "answered without evidence"
        );
        // ...and a change told meanwhile still drops what it touched.
        hub.key_changed(&changed);
        // Fresh evidence: what was read, and not changed since, answers from memory.
        hub.confirmed(std::time::Instant::now());
        assert!(matches!(
            cache.lookup_now(&digest),
            Some(Ok(KeyLookup::Valid(_)))
        ));
        assert!(cache.lookup_now(&other).is_none(), "a changed key was kept");
    }

    #[tokio::test]
    async fn a_cache_hears_of_changes_whatever_order_its_builder_ran_in() {
        let store = store_of_one_organization();
        let id = store.add_key("pk_test_cached_key", "org").unwrap();
        let digest = KeyDigest::of("pk_test_cached_key");
        let hub = Notifications::new();
        hub.connected();
        for cache in [
            CachingKeyStore::new(store.clone())
                .with_notifications(&hub)
                .with_capacity(10),
            CachingKeyStore::new(store.clone())
                .with_capacity(10)
                .with_notifications(&hub),
        ] {
            assert!(cache.lookup(&digest).await.unwrap().principal().is_some());
            assert!(
                matches!(cache.lookup_now(&digest), Some(Ok(KeyLookup::Valid(_)))),
                "cached"
            );
            hub.key_changed(&id);
            assert!(
                cache.lookup_now(&digest).is_none(),
                "the change reached the cache"
            );
            hub.disconnected();
            assert!(
                cache.lookup_now(&digest).is_none(),
                "no answers while disconnected"
            );
            hub.connected();
        }
    }
}
