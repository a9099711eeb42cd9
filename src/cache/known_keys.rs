//! [`KnownKeys`]: the fingerprints of every usable key, kept by the change feed, so the
//! failed-authentication throttle never refuses a key that is valid.

use std::collections::HashSet;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Duration;

use tokio::sync::Notify;

use super::notifications::{Invalidate, Notifications};
use crate::hashing::BuildPrehashed;
use crate::key::KeyDigest;
use crate::store::KeyDigests;

/// The keys a replica knows to be usable, as 64-bit fingerprints of their digests: loaded from
/// the store at start ([`KeyDigests`]) and kept by the change feed of a [`Notifications`] hub
/// (a key added or changed is read again by id; the whole set on every reconnect or `*`).
///
/// The failed-authentication throttle asks it about a key that the key cache cannot answer
/// from memory ([`PartnerApi::with_known_keys`](crate::PartnerApi::with_known_keys)):
///
/// - a token it holds may be a key, and is looked up whatever its client's budget of failures,
///   which is charged only if the lookup fails: a valid key is never refused because others at
///   its address (a NAT, a corporate egress, one IPv6 /64) sent bad tokens;
/// - a token it does not hold is throttled as before: one failure is taken from the budget
///   first, so a flood of made-up tokens reaches the store no faster than the budget allows.
///
/// A fingerprint is the first 8 bytes of a SHA-256 digest: the chance that a made-up token
/// matches one of `n` keys is `n / 2^64` (5 in 10^15 for 100,000 keys), and a match costs one
/// lookup. It holds about 16 bytes per key (1.6 MB for 100,000). A key that stops being usable
/// (revoked, expired) leaves it at its first failed lookup ([`forget`](Self::forget)) or the
/// next full load; that lookup is charged. A key issued moments ago is held once its
/// notification arrives (within the caches' bound), and every key once the first full load
/// is done; until then it is throttled like any token, which refuses it only when its address
/// has spent its budget.
///
/// Clones share the set. The task that keeps it ends when the last clone is dropped.
#[derive(Clone)]
pub struct KnownKeys {
    shared: Arc<Shared>,
}

struct Shared {
    /// The hub whose changes keep the set: its source lives as long as someone follows it.
    _hub: Notifications,
    fingerprints: RwLock<HashSet<u64, BuildPrehashed>>,
    /// Whether a full load has completed.
    loaded: AtomicBool,
    pending: Mutex<Pending>,
    wake: Arc<Notify>,
}

/// Changes told by the hub and not read from the store yet.
#[derive(Default)]
struct Pending {
    everything: bool,
    ids: Vec<String>,
}

/// Past this many ids waiting, the whole set is loaded again instead.
const MOST_PENDING_IDS: usize = 10_000;
/// The pause before a failed read of the store is tried again.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// The first 8 bytes of the digest: as uniform as the SHA-256 they come from.
fn fingerprint(digest: &KeyDigest) -> u64 {
    let [a, b, c, d, e, f, g, h, ..] = *digest.as_bytes();
    u64::from_le_bytes([a, b, c, d, e, f, g, h])
}

impl KnownKeys {
    /// Loads the usable keys of `store` and keeps them by the changes `notifications` tells,
    /// in a task on the current Tokio runtime. Outside a runtime no task starts (the log
    /// says so), never a panic: the set stays empty, and every failure counts.
    pub fn following<S: KeyDigests + 'static>(store: S, notifications: &Notifications) -> Self {
        let wake = Arc::new(Notify::new());
        let shared = Arc::new(Shared {
            _hub: notifications.clone(),
            fingerprints: RwLock::default(),
            loaded: AtomicBool::new(false),
            pending: Mutex::new(Pending {
                everything: true,
                ids: Vec::new(),
            }),
            wake: wake.clone(),
        });
        notifications.register(&shared);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn(keep(store, Arc::downgrade(&shared), wake))),
            Err(_) => tracing::warn!(
                "KnownKeys::following outside a tokio runtime: the set of usable keys is never \
                 loaded"
            ),
        }
        Self { shared }
    }

    /// Whether the key whose digest is `digest` may be usable: its fingerprint is held.
    pub fn may_be_usable(&self, digest: &KeyDigest) -> bool {
        self.shared
            .fingerprints
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(&fingerprint(digest))
    }

    /// Forgets `digest`: its lookup found no usable key (revoked, expired, deleted), which is
    /// final, so the next token with it is throttled like any other. The change feed only
    /// adds, so this is how a key that stopped being usable leaves the set before the next
    /// full load; without it a leaked and revoked key, sent from anywhere, would reach the
    /// store past every budget.
    pub fn forget(&self, digest: &KeyDigest) {
        self.shared
            .fingerprints
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fingerprint(digest));
    }

    /// Whether the whole set has been loaded at least once.
    pub fn is_loaded(&self) -> bool {
        self.shared.loaded.load(Ordering::Acquire)
    }

    /// The number of fingerprints held.
    pub fn len(&self) -> usize {
        self.shared
            .fingerprints
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no fingerprint is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for KnownKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KnownKeys")
            .field("keys", &self.len())
            .field("loaded", &self.is_loaded())
            .finish()
    }
}

impl Shared {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Invalidate for Shared {
    fn key_changed(&self, key_id: &str) {
        let mut pending = self.pending();
        if !pending.everything {
            pending.ids.push(key_id.to_owned());
            if pending.ids.len() > MOST_PENDING_IDS {
                pending.everything = true;
                pending.ids = Vec::new();
            }
        }
        drop(pending);
        self.wake.notify_one();
    }

    fn orders_changed(&self, _organization_id: &str) {}

    fn clear(&self) {
        let mut pending = self.pending();
        pending.everything = true;
        pending.ids = Vec::new();
        drop(pending);
        self.wake.notify_one();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Ends the task: it finds the set gone.
        self.wake.notify_one();
    }
}

/// Reads what changed from `store` into the set, for as long as the set lives.
async fn keep<S: KeyDigests>(store: S, shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let Some(known) = shared.upgrade() else {
            return;
        };
        let Pending { everything, ids } = {
            let mut pending = known.pending();
            std::mem::take(&mut *pending)
        };
        if !everything && ids.is_empty() {
            drop(known);
            wake.notified().await;
            continue;
        }
        // A read that panicked is a failed read: what it was to read is read again.
        let read = crate::supervise::caught(
            "known_keys",
            store.key_digests((!everything).then_some(&ids[..])),
        )
        .await
        .unwrap_or_else(|| Err(crate::store::StoreError::other("the read panicked")));
        match read {
            Ok(digests) => {
                {
                    let mut fingerprints = known
                        .fingerprints
                        .write()
                        .unwrap_or_else(PoisonError::into_inner);
                    if everything {
                        fingerprints.clear();
                        fingerprints.shrink_to(digests.len());
                    }
                    fingerprints.extend(digests.iter().map(fingerprint));
                }
                if everything {
                    known.loaded.store(true, Ordering::Release);
                }
            }
            Err(err) => {
                tracing::warn!(
                    error = %crate::log::ErrorChain(&err),
                    "the known keys were not read; trying again"
                );
                {
                    let mut pending = known.pending();
                    pending.everything |= everything;
                    if !pending.everything {
                        pending.ids.extend(ids);
                    }
                }
                drop(known);
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::store_of_one_organization;
    use super::*;
    use crate::store::{KeyManager, NewKey};

    async fn until(mut done: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "never happened");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn holds_the_usable_keys_and_follows_the_changes() {
        let store = store_of_one_organization();
        store.add_key("pk_test_known_at_start", "org").unwrap();
        let revoked = store.add_key("pk_test_revoked_at_start", "org").unwrap();
        store.revoke_key("pk_test_revoked_at_start");
        let hub = Notifications::new();
        let known = KnownKeys::following(store.clone(), &hub);
        until(|| known.is_loaded()).await;
        assert!(known.may_be_usable(&KeyDigest::of("pk_test_known_at_start")));
        assert!(!known.may_be_usable(&KeyDigest::of("pk_test_revoked_at_start")));
        assert!(!known.may_be_usable(&KeyDigest::of("pk_test_never_issued")));
        assert_eq!(known.len(), 1);

        // A key issued later is held once its change is told.
        let issued = store
            .issue("org", NewKey::new(crate::key::KeyEnvironment::Test))
            .await
            .unwrap();
        let digest = KeyDigest::of(issued.plaintext());
        hub.key_changed(&issued.record().id);
        until(|| known.may_be_usable(&digest)).await;
        // Ids that name no usable key add nothing.
        hub.key_changed(&revoked);
        hub.key_changed("not an id");
        // Everything changed: loaded again, without what was revoked meanwhile.
        store.revoke_key("pk_test_known_at_start");
        hub.clear();
        until(|| !known.may_be_usable(&KeyDigest::of("pk_test_known_at_start"))).await;
        assert!(known.may_be_usable(&digest));
        assert_eq!(known.len(), 1);
    }

    #[tokio::test]
    async fn a_key_forgotten_at_its_refusal_leaves_the_set() {
        let store = store_of_one_organization();
        store.add_key("pk_test_known_then_revoked", "org").unwrap();
        let hub = Notifications::new();
        let known = KnownKeys::following(store, &hub);
        until(|| known.is_loaded()).await;
        let digest = KeyDigest::of("pk_test_known_then_revoked");
        assert!(known.may_be_usable(&digest));
        known.forget(&digest);
        assert!(!known.may_be_usable(&digest));
        assert!(known.is_empty());
    }

    #[tokio::test]
    async fn its_task_ends_with_the_set() {
        let store = store_of_one_organization();
        let hub = Notifications::new();
        let known = KnownKeys::following(store, &hub);
        until(|| known.is_loaded()).await;
        let weak = Arc::downgrade(&known.shared);
        drop(known);
        // The task holds the set only while it reads the store.
        until(|| weak.upgrade().is_none()).await;
        hub.key_changed("1");
    }
}
