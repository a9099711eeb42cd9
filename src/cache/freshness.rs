//! [`Notifications`]: how caches learn of changes, and whether they may answer from memory.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// What a cache drops when it is told of a change.
pub(crate) trait Invalidate: Send + Sync {
    /// The key `key_id` changed (revoked, expired, rolled, deleted) or a key was added.
    fn key_changed(&self, key_id: &str);
    /// The orders of `organization_id` changed.
    fn orders_changed(&self, organization_id: &str);
    /// Anything may have changed.
    fn clear(&self);
}

/// The hub between a source of change notifications (the PostgreSQL listener of
/// [`postgres::listen`](super::postgres::listen), or a host's own) and the caches that follow
/// it ([`CachingKeyStore::with_notifications`](super::CachingKeyStore::with_notifications)).
///
/// Caches that follow a hub answer from memory only while it is *connected*: a source that
/// loses its connection says so ([`disconnected`](Self::disconnected)), and the caches go to
/// their store for every request until it is connected again, when they start empty. Clones
/// share the hub.
#[derive(Clone)]
pub struct Notifications {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    connected: AtomicBool,
    /// Counts changes: a cache stores what it read only if no change came in meanwhile.
    changes: AtomicU64,
    targets: Mutex<Vec<Weak<dyn Invalidate>>>,
}

impl Notifications {
    /// Creates a hub that is not connected yet: its caches answer from their stores until
    /// [`connected`](Self::connected).
    pub fn new() -> Self {
        crate::metrics::cache_notifications_connected(false);
        Self {
            shared: Arc::new(Shared {
                connected: AtomicBool::new(false),
                changes: AtomicU64::new(0),
                targets: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Says the source is connected and missed nothing from now on: the caches drop all they
    /// hold (they may have missed changes before) and answer from memory again.
    pub fn connected(&self) {
        self.clear();
        self.shared.connected.store(true, Ordering::SeqCst);
        crate::metrics::cache_notifications_connected(true);
    }

    /// Says the source lost its connection: from now on, until
    /// [`connected`](Self::connected), the caches answer from their stores only.
    pub fn disconnected(&self) {
        self.shared.connected.store(false, Ordering::SeqCst);
        self.note_change();
        crate::metrics::cache_notifications_connected(false);
    }

    /// Returns whether the source is connected.
    pub fn is_connected(&self) -> bool {
        self.shared.connected.load(Ordering::SeqCst)
    }

    /// Tells the caches the key `key_id` changed, or a key was added.
    pub fn key_changed(&self, key_id: &str) {
        self.note_change();
        self.each(|target| target.key_changed(key_id));
    }

    /// Tells the caches the orders of `organization_id` changed.
    pub fn orders_changed(&self, organization_id: &str) {
        self.note_change();
        self.each(|target| target.orders_changed(organization_id));
    }

    /// Tells the caches anything may have changed.
    pub fn clear(&self) {
        self.note_change();
        self.each(|target| target.clear());
    }

    /// The hub's state, whose reference count tells the listener whether anyone still
    /// follows the hub.
    #[cfg(feature = "postgres")]
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Tells `target` of every change from now on, for as long as it lives.
    pub(crate) fn register<T: Invalidate + 'static>(&self, target: &Arc<T>) {
        let target: Weak<dyn Invalidate> = Arc::downgrade(target) as Weak<dyn Invalidate>;
        let mut targets = self
            .shared
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        targets.retain(|target| target.strong_count() > 0);
        targets.push(target);
    }

    fn note_change(&self) {
        self.shared.changes.fetch_add(1, Ordering::SeqCst);
    }

    fn each(&self, mut invalidate: impl FnMut(&dyn Invalidate)) {
        let targets: Vec<Arc<dyn Invalidate>> = self
            .shared
            .targets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for target in targets {
            invalidate(&*target);
        }
    }
}

impl Default for Notifications {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Notifications {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifications")
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

/// Whether a cache may answer from memory, and the change count its reads are checked
/// against.
#[derive(Clone, Default)]
pub(crate) struct Gate {
    /// The hub the cache follows; none for a cache its host invalidates.
    hub: Option<Notifications>,
    /// Changes told to the cache itself (by its host, or the hub).
    own_changes: Arc<AtomicU64>,
}

impl Gate {
    pub(crate) fn following(hub: &Notifications) -> Self {
        Self {
            hub: Some(hub.clone()),
            own_changes: Arc::default(),
        }
    }

    /// Whether the cache may answer from memory now.
    pub(crate) fn open(&self) -> bool {
        self.hub.as_ref().is_none_or(Notifications::is_connected)
    }

    /// A mark to take before reading the store: [`unchanged_since`](Self::unchanged_since)
    /// says whether what was read may be kept.
    pub(crate) fn mark(&self) -> u64 {
        let hub = self
            .hub
            .as_ref()
            .map_or(0, |hub| hub.shared.changes.load(Ordering::SeqCst));
        hub.wrapping_add(self.own_changes.load(Ordering::SeqCst))
    }

    /// Whether no change came in since `mark`, and the cache may answer from memory.
    pub(crate) fn unchanged_since(&self, mark: u64) -> bool {
        self.open() && self.mark() == mark
    }

    pub(crate) fn note_change(&self) {
        self.own_changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Has the hub this gate follows (if any) tell `target` of every change: called for every
    /// cache built on the gate, so a rebuilt cache (a new capacity) is told as well.
    pub(crate) fn register<T: Invalidate + 'static>(&self, target: &Arc<T>) {
        if let Some(hub) = &self.hub {
            hub.register(target);
        }
    }
}
