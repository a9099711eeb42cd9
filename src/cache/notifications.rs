//! [`Notifications`]: how caches learn of changes, and whether they may answer from memory:
//! only with recent evidence that they applied every change committed before it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::{Duration, Instant};

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
/// # The invariant
///
/// A cache that follows a hub answers from memory only while the hub holds *evidence* younger
/// than its maximum age ([`DEFAULT_MAX_EVIDENCE_AGE`], 800 ms): an instant `E` such that every
/// change committed before `E` has been applied to the caches. Every hit reads the evidence
/// (one atomic load and the monotonic clock); older evidence, or none, sends the lookup to the
/// store.
///
/// Why that bounds a revocation's delay: say a revocation commits at `R` and a cache answers
/// the revoked key from memory at `t`. The revocation's notification was not applied yet, so
/// the evidence `E` the cache saw was taken before `R` (evidence comes from a heartbeat: the
/// listener notes the instant `E` at which it *sends* a `NOTIFY` to itself, and, when it hears
/// that heartbeat, PostgreSQL has delivered every notification committed before it, which the
/// listener has applied first; a heartbeat sent at `E` commits after `E`). So
/// `t − R < t − E ≤ max age`: no revoked key is answered from memory later than the maximum
/// age after its revocation committed, whatever delays the notifications (a burst, a stalled
/// or dead listener, a partition), because none of those can make evidence younger. A source
/// that loses its connection must [`connected`](Self::connected) again, which empties the
/// caches, before its new evidence counts: changes sent meanwhile were lost.
///
/// The argument reads only the monotonic clock, so it holds for revocations whatever the wall
/// clocks do. An expiry is the wall clock's to judge (the database's on a lookup, the
/// replica's on a hit): a clock stepped back makes an expired key valid again for as long as
/// the step. That is why a roll without overlap revokes the old key rather than expiring it
/// at the roll's instant: the history checker saw such a key served 1.14 s after its roll
/// when a virtual machine's clock was stepped back. A roll *with* an overlap still ends the
/// old key by its expiry, the overlap's end, which a clock stepped back past that end
/// extends by the step; a revocation is the only end no clock can move.
///
/// # Reads made while the evidence is stale
///
/// A cache keeps what it read from its store whenever no change was told to it during the
/// read, fresh evidence or not. Such an entry answers only once evidence is fresh again, and
/// the argument above covers it: a change committed during or after the read reaches the
/// cache before any heartbeat sent after it does (the notifications of one connection are
/// delivered in commit order), so an answer from memory at `t` still comes from an entry no
/// change older than `t − max age` has touched; a source that lost its connection empties
/// the caches when it connects again. On a loaded machine heartbeats come late and evidence
/// lapses often; a cache that kept nothing then would send every lookup to the database
/// exactly when the replica is busiest.
///
/// Clones share the hub.
#[derive(Clone)]
pub struct Notifications {
    shared: Arc<Shared>,
}

/// The longest the caches answer from memory after the last evidence: the bound on a
/// revocation's delay, below the promised second by the time a request takes to be answered.
pub const DEFAULT_MAX_EVIDENCE_AGE: Duration = Duration::from_millis(800);

pub(crate) struct Shared {
    /// This hub's number in the process, which names it in the [`JOURNAL`] events.
    id: u64,
    /// The evidence, as [`millis`] of its instant; 0 for none.
    evidence: AtomicU64,
    /// The maximum age of evidence, in milliseconds.
    max_age: u64,
    /// Counts changes: a cache stores what it read only if no change came in meanwhile.
    changes: AtomicU64,
    targets: Mutex<Vec<Weak<dyn Invalidate>>>,
}

/// The `tracing` target of the events that explain what the caches answer from memory, at
/// `TRACE` level: each hub's changes applied, evidence confirmed, connections, and every read
/// a cache kept or discarded (with its mark). Each event names its hub (`hub`, the number in a
/// hub's `Debug` output). Off the request path's hits; for tests and investigations.
pub(crate) const JOURNAL: &str = "partner_api::cache::journal";

/// `at` as milliseconds after this process's first use of the caches, plus one (0 is "never").
pub(crate) fn millis(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_millis())
        .unwrap_or(u64::MAX)
        .saturating_add(1)
}

/// The instant that [`millis`] gave `millis`, if it is one of this process's.
#[cfg(feature = "postgres")]
pub(crate) fn instant(millis: u64) -> Option<Instant> {
    let epoch = epoch();
    epoch.checked_add(Duration::from_millis(millis.checked_sub(1)?))
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(|| {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(1)).unwrap_or(now)
    })
}

impl Notifications {
    /// Creates a hub without evidence yet: its caches answer from their stores until the
    /// source says it is [`connected`](Self::connected).
    pub fn new() -> Self {
        crate::metrics::cache_notifications_connected(false);
        let max_age = DEFAULT_MAX_EVIDENCE_AGE.as_millis() as u64;
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Self {
            shared: Arc::new(Shared {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                evidence: AtomicU64::new(0),
                max_age,
                changes: AtomicU64::new(0),
                targets: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Says the source listens from now on: the caches drop all they hold (they may have
    /// missed changes before) and the instant now is evidence (nothing the caches hold from
    /// now on predates it).
    pub fn connected(&self) {
        tracing::trace!(target: JOURNAL, hub = self.id(), "connected: the caches are emptied");
        self.clear();
        self.confirmed(Instant::now());
        crate::metrics::cache_notifications_connected(true);
    }

    /// Says every change committed before `sent_at` has been applied (a heartbeat sent at
    /// `sent_at` was heard after the changes before it): evidence that lets the caches answer
    /// from memory for the maximum age after `sent_at`. Older evidence than the hub holds
    /// changes nothing.
    pub fn confirmed(&self, sent_at: Instant) {
        let evidence = millis(sent_at);
        if self.shared.evidence.fetch_max(evidence, Ordering::AcqRel) < evidence {
            // The evidence's age when confirmed (read only when the event is on).
            tracing::trace!(
                target: JOURNAL,
                hub = self.id(),
                evidence,
                age_us = u64::try_from(sent_at.elapsed().as_micros()).unwrap_or(u64::MAX),
                "evidence confirmed"
            );
            crate::metrics::cache_evidence(sent_at);
        }
    }

    /// Says the source lost its connection: the caches answer from their stores until it is
    /// [`connected`](Self::connected) again.
    pub fn disconnected(&self) {
        tracing::trace!(target: JOURNAL, hub = self.id(), "disconnected");
        self.shared.evidence.store(0, Ordering::Release);
        self.note_change();
        crate::metrics::cache_notifications_connected(false);
    }

    /// Returns whether the caches may answer from memory now: the hub holds evidence younger
    /// than its maximum age.
    pub fn is_connected(&self) -> bool {
        self.is_connected_at(millis(Instant::now()))
    }

    /// [`is_connected`](Self::is_connected) at `now` (a [`millis`] value).
    fn is_connected_at(&self, now: u64) -> bool {
        let evidence = self.shared.evidence.load(Ordering::Acquire);
        evidence != 0 && now.saturating_sub(evidence) <= self.shared.max_age
    }

    /// The age of the evidence in milliseconds, or `None` without evidence.
    fn evidence_age(&self) -> Option<u64> {
        let evidence = self.shared.evidence.load(Ordering::Acquire);
        (evidence != 0).then(|| millis(Instant::now()).saturating_sub(evidence))
    }

    /// Tells the caches the key `key_id` changed, or a key was added.
    pub fn key_changed(&self, key_id: &str) {
        tracing::trace!(target: JOURNAL, hub = self.id(), key_id, "key changed");
        self.note_change();
        self.each(|target| target.key_changed(key_id));
    }

    /// Tells the caches the orders of `organization_id` changed.
    pub fn orders_changed(&self, organization_id: &str) {
        tracing::trace!(target: JOURNAL, hub = self.id(), organization_id, "orders changed");
        self.note_change();
        self.each(|target| target.orders_changed(organization_id));
    }

    /// Tells the caches anything may have changed.
    pub fn clear(&self) {
        tracing::trace!(target: JOURNAL, hub = self.id(), "everything changed");
        self.note_change();
        self.each(|target| target.clear());
    }

    /// This hub's number in the process: the `hub` field of its [`JOURNAL`] events, and of
    /// its `Debug` output.
    pub(crate) fn id(&self) -> u64 {
        self.shared.id
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
            .field("id", &self.id())
            .field("answering", &self.is_connected())
            .field("evidence_age_ms", &self.evidence_age())
            .finish_non_exhaustive()
    }
}

/// Whether a cache may answer from memory, and the change count its reads are checked
/// against.
#[derive(Clone)]
pub(crate) struct Gate {
    /// The hub the cache follows; none for a cache its host invalidates.
    hub: Option<Notifications>,
    /// Changes told to the cache itself (by its host, or the hub).
    own_changes: Arc<AtomicU64>,
    /// The longest an entry answers, in milliseconds from the read that made it.
    max_age: u64,
}

/// Taken before a store is read: whether a change came in since, and when the read began.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mark {
    /// [`Gate::changes`] before the read.
    pub(crate) changes: u64,
    /// [`millis`] of the instant the read began: the age of what it returns counts from it.
    pub(crate) at: u64,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            hub: None,
            own_changes: Arc::default(),
            max_age: duration_millis(super::DEFAULT_MAX_AGE),
        }
    }
}

fn duration_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Gate {
    /// A gate that follows `hub`, with this gate's maximum age.
    pub(crate) fn following(&self, hub: &Notifications) -> Self {
        Self {
            hub: Some(hub.clone()),
            own_changes: Arc::default(),
            max_age: self.max_age,
        }
    }

    /// This gate with entries answering for at most `max_age`.
    pub(crate) fn with_max_age(mut self, max_age: Duration) -> Self {
        self.max_age = duration_millis(max_age);
        self
    }

    /// The maximum age of entries.
    pub(crate) fn max_age(&self) -> Duration {
        Duration::from_millis(self.max_age)
    }

    /// Whether an entry whose read began at `read_at` (a [`Mark::at`]) may still answer at
    /// `now` (both [`millis`] values, `now` from [`now_if_open`](Self::now_if_open)).
    pub(crate) fn fresh(&self, read_at: u64, now: u64) -> bool {
        now.saturating_sub(read_at) < self.max_age
    }

    /// Whether the cache may answer from memory now.
    pub(crate) fn open(&self) -> bool {
        self.now_if_open().is_some()
    }

    /// The present instant as [`millis`] if the cache may answer from memory now: one clock
    /// read for the gate and the entry's age alike.
    pub(crate) fn now_if_open(&self) -> Option<u64> {
        let now = millis(Instant::now());
        self.hub
            .as_ref()
            .is_none_or(|hub| hub.is_connected_at(now))
            .then_some(now)
    }

    /// A mark to take before reading the store: [`unchanged_since`](Self::unchanged_since)
    /// says whether what was read may be kept.
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            changes: self.changes(),
            at: millis(Instant::now()),
        }
    }

    /// The number of the hub this gate follows (0 for none), for the [`JOURNAL`].
    pub(crate) fn hub_id(&self) -> u64 {
        self.hub.as_ref().map_or(0, Notifications::id)
    }

    /// The count of changes told so far: a [`Mark`] holds the count at its read.
    pub(crate) fn changes(&self) -> u64 {
        let hub = self
            .hub
            .as_ref()
            .map_or(0, |hub| hub.shared.changes.load(Ordering::SeqCst));
        hub.wrapping_add(self.own_changes.load(Ordering::SeqCst))
    }

    /// Whether no change came in since `mark`: what was read may be kept. Kept whether or
    /// not the cache may answer from memory now (see [`Notifications`], "Reads made while
    /// the evidence is stale").
    pub(crate) fn unchanged_since(&self, mark: Mark) -> bool {
        self.changes() == mark.changes
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
