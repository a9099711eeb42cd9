//! [`EventFeed`]: an organization's order events, oldest first, resumable from any event it
//! still holds; the ids partners see ([`EventId`]); and what a read asks ([`EventQuery`]).
//!
//! The feed's invariant and its argument are on [`EventFeed`].

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::model::{Timestamp, MAX_ORDERS};
use crate::store::StoreError;

/// How long events are kept by default: 30 days.
pub const DEFAULT_EVENTS_RETENTION: std::time::Duration =
    std::time::Duration::from_secs(30 * 24 * 3600);

/// What happened to an order: the `type` of its event (and of its webhook).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OrderChange {
    /// `order.created`: an order was written for the first time (or moved into the
    /// organization).
    Created,
    /// `order.updated`: any field of an order changed.
    Updated,
    /// `order.deleted`: an order was removed (or moved out of the organization).
    Deleted,
}

impl OrderChange {
    /// Every change, in the order of [`OrderChanges`]' bits.
    pub const ALL: [Self; 3] = [Self::Created, Self::Updated, Self::Deleted];

    /// The event type's name: `order.created`, `order.updated` or `order.deleted`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Created => "order.created",
            Self::Updated => "order.updated",
            Self::Deleted => "order.deleted",
        }
    }

    /// The change named `name` ([`as_str`](Self::as_str)), if it is one.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|change| change.as_str() == name)
    }

    /// What this change of an order is in a view that saw the order before it (`was_in`:
    /// a provider of the view was among the order's providers before the change, as the feed
    /// showed it) and sees it after (`is_in`): `None` when the view sees neither, a creation
    /// when the order comes into the view, a deletion when it leaves it, else the change
    /// itself. A feed read in a view ([`EventQuery::with_providers`]) gives each event this
    /// type, so every view's history of an order is well formed (created, updated, deleted)
    /// when the feed's is.
    pub const fn in_view(self, was_in: bool, is_in: bool) -> Option<Self> {
        match (was_in, is_in) {
            (false, false) => None,
            (false, true) => Some(Self::Created),
            (true, false) => Some(Self::Deleted),
            (true, true) => Some(self),
        }
    }

    const fn bit(self) -> u8 {
        match self {
            Self::Created => 1,
            Self::Updated => 2,
            Self::Deleted => 4,
        }
    }
}

/// A set of [`OrderChange`]s: the event types a read asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OrderChanges(u8);

impl OrderChanges {
    /// Every type.
    pub const ALL: Self = Self(7);
    /// No type.
    pub const NONE: Self = Self(0);

    /// This set with `change` in it.
    #[must_use]
    pub const fn with(self, change: OrderChange) -> Self {
        Self(self.0 | change.bit())
    }

    /// Whether `change` is in the set.
    pub const fn contains(self, change: OrderChange) -> bool {
        self.0 & change.bit() != 0
    }

    /// Whether the set holds every type.
    pub const fn is_all(self) -> bool {
        self.0 == Self::ALL.0
    }

    /// The set as bits, one per type (for a hash).
    pub(crate) const fn bits(self) -> u8 {
        self.0
    }

    /// The names of the types in the set, in [`OrderChange::ALL`]'s order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        OrderChange::ALL
            .into_iter()
            .filter(move |change| self.contains(*change))
            .map(OrderChange::as_str)
    }
}

impl Default for OrderChanges {
    fn default() -> Self {
        Self::ALL
    }
}

/// One event of an organization's feed, as a read sees it (in its view, for a read limited to
/// providers: [`EventQuery::with_providers`]).
///
/// An event never changes once written, and its number is never reused: the API keeps the
/// body it encoded of a page and serves it again when the feed returns the same events. In
/// every view an event's number and `change` decide its `data`: the order after the change,
/// or `{"id":...}` when `change` is [`OrderChange::Deleted`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeedEvent {
    /// The event's number in the store: unique in the store, taken when the change was
    /// written (what its webhook's `id` names, through [`EventId`]), never reused.
    pub id: u64,
    /// What happened.
    pub change: OrderChange,
    /// When the change was written, to the millisecond.
    pub created_at: Timestamp,
    /// The event's `data`, JSON: the order as `GET /v1/orders` serves it after the change
    /// ([`EncodedOrder::json`](crate::EncodedOrder::json)), or `{"id":...}` for a deletion,
    /// or `{"id":...,"unshowable":true}` for an order that could not be shown in the
    /// contract's form when the change was written (a budget above 2^53 - 1, a provider that
    /// is NULL, a row of a host's table outside the contract): the partner reads the order
    /// again; the store logs it and counts it in `partner_api_store_errors_total`.
    pub data: Bytes,
}

/// The most events of a feed one read in a view ([`EventQuery::with_providers`]) looks at:
/// a read of a rare provider's orders returns at most this many events' worth of the feed,
/// and its `through` is the last it looked at, so each read costs a bounded amount and the
/// reader moves on.
pub const MAX_EVENTS_LOOKED_AT_IN_VIEW: usize = 1_000;

/// Which events of an organization's feed a read asks for: those after an event (or from
/// the oldest kept), of some types, at most a number of them, in the view of some providers
/// or of every order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventQuery {
    after: Option<u64>,
    limit: usize,
    types: OrderChanges,
    providers: Option<Arc<[String]>>,
}

impl EventQuery {
    /// The oldest `limit` events the feed keeps (clamped to 1..=100), of every type.
    pub fn oldest(limit: usize) -> Self {
        Self {
            after: None,
            limit: limit.clamp(1, MAX_ORDERS),
            types: OrderChanges::ALL,
            providers: None,
        }
    }

    /// The `limit` events (clamped to 1..=100) after the event numbered `id`, of every type.
    pub fn after(id: u64, limit: usize) -> Self {
        Self {
            after: Some(id),
            ..Self::oldest(limit)
        }
    }

    /// Only events of `types`.
    #[must_use]
    pub fn with_types(mut self, types: OrderChanges) -> Self {
        self.types = types;
        self
    }

    /// The feed in the view of a key limited to `providers` (sorted, each once; `None`: every
    /// order, the feed as it is). The read returns the events of the orders whose providers
    /// include one of them before or after the change, each with its type in the view
    /// ([`OrderChange::in_view`]): an order that comes into the view is created for it, one
    /// that leaves it deleted (`{"id":...}` only), the changes of an order outside it are
    /// not in it. It looks at [`MAX_EVENTS_LOOKED_AT_IN_VIEW`] events of the feed at most, and
    /// its `through` is the last it looked at (the last returned when the page is full).
    #[must_use]
    pub fn with_providers(mut self, providers: Option<Arc<[String]>>) -> Self {
        self.providers = providers;
        self
    }

    /// The providers whose view is read; `None`: every order.
    pub fn providers(&self) -> Option<&[String]> {
        self.providers.as_deref()
    }

    /// The event after which the read starts; `None`: from the oldest kept.
    pub fn after_id(&self) -> Option<u64> {
        self.after
    }

    /// At most this many events.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The types asked for.
    pub fn types(&self) -> OrderChanges {
        self.types
    }
}

/// A store's answer to an [`EventQuery`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventsPage {
    /// What the feed holds after the position asked.
    Events {
        /// The events after the position asked, in feed order (oldest first), at most the
        /// limit, only of the types asked; empty when none is new.
        events: Vec<FeedEvent>,
        /// The last event of the feed the read went past, of any type: where the next read
        /// resumes. The last of `events` when they are as many as the limit; else the newest
        /// event of the feed (which may be of a type not asked for, so a reader of rare types
        /// moves on past the others); `None` when the feed holds nothing after the position.
        through: Option<u64>,
    },
    /// The event asked to resume after was deleted by retention, and events after it were
    /// too: the reader missed events the feed no longer holds. (A reader at the last event
    /// retention deleted missed nothing: it is served the events after it.)
    Expired,
    /// The event asked to resume after is not one of this organization's feed: never was,
    /// or was deleted longer ago than its tombstone is kept (the retention period again).
    Unknown,
}

/// An organization's order events, oldest first, resumable by event id: what
/// `GET /v1/events` serves.
///
/// A write that changes nothing makes no event; an order moved between organizations is a
/// deletion in one feed and a creation in the other. `partner_api::testing::run_event_feed`
/// checks a store against the rule below as one writer sees it; `tests/it/feed_history.rs`
/// under concurrent writers.
///
/// # The rule, and its argument
///
/// **The feed's rule, rule `feed-exactly-once`**: a reader that starts anywhere and then always resumes after
/// the last event it was given sees every committed change of the organization's orders
/// exactly once, never one of a rolled-back write, and each order's changes in the order they
/// were committed, however the writers' transactions interleave.
///
/// An event's id (its number in the store, what its webhook names) is taken when the change is
/// written, and writers commit out of order: ids are no place to resume from, since an event
/// with a smaller id may become visible after a reader went past a larger one. So a store
/// gives each event a **position** in its organization's feed only once its write is visible,
/// and serves the feed in position order:
/// - positions are handed out by one stamper at a time per organization, each round after the
///   last round's positions are visible, to the events visible then that have none, in id
///   order, above every position handed out before: an event becomes part of the feed behind
///   everything a reader may have seen already, so resuming after a position misses nothing;
/// - one order's later change is written after its earlier change committed (the row is
///   locked by the earlier writer until then), so its id is larger, and whenever it is visible
///   the earlier one is too: a round that stamps the later one stamps the earlier one first, if
///   an earlier round did not;
/// - a rolled-back write's event is never visible, so it never gets a position.
///
/// A reader asks by event id; the store finds the event's position (stamping first when the
/// event has none yet) and returns the events after it. Retention deletes events in position
/// order only, so what a feed keeps is always a suffix of it, and remembers what it deleted
/// (a tombstone per event, kept as long as events are and a day at least, the newest for ever): an `after`
/// that retention deleted is [`EventsPage::Expired`] when events after it were deleted too,
/// never a feed with a hole, and resumes as any other when it is the last one deleted (the
/// reader missed nothing, however quiet the feed was); an id that was never this feed's is
/// [`EventsPage::Unknown`].
///
/// # In a view of providers
///
/// A read with [`EventQuery::with_providers`] (a key limited to providers) serves the feed in
/// that view, for a store whose [`serves_provider_views`](Self::serves_provider_views) says so:
/// the events of the orders whose providers, as the feed showed them, include one of the
/// view's before or after the change, each of its type there ([`OrderChange::in_view`]).
/// The store records with each event the order's providers before the change, when the
/// change is written; one order's changes are serialized by its row lock, so each event's
/// "before" is the "after" of the order's event before it, and every view's history of an
/// order is well formed when the feed's is. A view's read is the feed's read filtered and
/// retyped event by event, so rule `feed-exactly-once` holds from the view:
/// **rule `feed-in-view`** (`partner_api::testing::run_event_feed` checks it as one writer
/// sees it; `tests/it/feed_history.rs` under concurrent writers). It looks at [`MAX_EVENTS_LOOKED_AT_IN_VIEW`] events at most.
///
/// A stored event never fails a read: the `data` of an order that cannot be shown in the
/// contract's form (a row written outside it) is the order's id and `"unshowable": true`
/// (see [`FeedEvent::data`]).
///
/// An event never changes once written: a feed returns the same `change`, `created_at` and
/// `data` for an event number every time (it stores them; it does not render them when read).
/// The API relies on it: a worker thread serves the body it encoded of a page again when the
/// feed returns the same events.
#[async_trait]
pub trait EventFeed: Send + Sync {
    /// The events of `organization_id`'s feed that `query` asks for.
    async fn events(
        &self,
        organization_id: &str,
        query: &EventQuery,
    ) -> Result<EventsPage, StoreError>;

    /// Whether [`events`](Self::events) reads the feed in a view of providers
    /// ([`EventQuery::with_providers`]). `false` (the default, for a store written before
    /// views): the API answers a key limited to providers 403 on `GET /events` rather than
    /// serve it every order's events.
    fn serves_provider_views(&self) -> bool {
        false
    }

    /// The revision of `organization_id`'s feed when the store has it at hand without waiting
    /// (as [`KeyStore::lookup_now`](crate::store::KeyStore::lookup_now)), or `None` (the
    /// default): then the API reads the feed for every request.
    ///
    /// **The promise, rule `feed-revision`**: a change to what any read of the organization's
    /// feed returns (an event appended, one deleted by retention, a tombstone forgotten) makes
    /// the calls from then on return a revision this one never returned for the organization
    /// before. A counter raised under the feed's lock is one.
    ///
    /// A worker thread keeps what it answered for a read at a revision and, while the feed
    /// says the same revision, answers the same read again with it, without reading the
    /// feed. Why that is exact: a kept answer is of a read made after its revision was
    /// taken, so of the feed at that revision or later; a thread takes the revision and looks
    /// for a kept answer in one go, so when it finds one, the revision was current when it
    /// asked and the answer's read was made before it looked: the answer is of the feed
    /// between the request's start and its end. A store that cannot say it without waiting
    /// (a database) answers `None`.
    fn revision_now(&self, organization_id: &str) -> Option<u64> {
        let _ = organization_id;
        None
    }

    /// Deletes at most `batch` events that became part of the feed (readable: a position in
    /// it) more than `older_than` ago, by the store's clock, in feed order, never one after an
    /// event it keeps, and never a feed's newest event. An event is counted from when it
    /// became readable, not from when it was written (they differ by a writer's long
    /// transaction, or a change capture's lag): a reader that reads its feed to the end at
    /// least once every `older_than` (less the moment a position takes to commit after the
    /// store's clock was read for it) is never told [`EventsPage::Expired`]. A store that
    /// hands positions out when reading gives them to the events it finds without one here
    /// (every one, however young: they are readable from now), so a feed nobody reads is
    /// pruned too.
    ///
    /// It remembers each deleted event's id (its tombstone) until its tombstone is as old as
    /// `older_than` and a day (the newest of a feed for ever), and forgets older ones. Returns
    /// how many it deleted: fewer than `batch` means nothing more was due (or the store
    /// stopped to keep its call short; the next call goes on).
    async fn prune_events(
        &self,
        older_than: std::time::Duration,
        batch: u32,
    ) -> Result<u64, StoreError>;
}

/// The id partners see for an event: `evt_` and 22 characters of base64url that carry the
/// event's number, bound to its organization and checksummed, so a cut, altered or
/// another organization's id is refused instead of read as a position. Not a secret, and
/// no MAC: it grants nothing, as a page token does not.
///
/// ```
/// use partner_api::store::EventId;
///
/// let id = EventId::new("org_demo", 42).to_string();
/// assert!(id.starts_with("evt_"));
/// assert_eq!(EventId::parse(&id, "org_demo"), Ok(42));
/// assert!(EventId::parse(&id, "org_other").is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventId<'a> {
    organization_id: &'a str,
    number: u64,
}

/// Why an event id was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BadEventId {
    /// Not an event id of this API (cut, altered or made up).
    Malformed,
    /// Another organization's event id.
    Foreign,
}

const EVENT_ID_PREFIX: &str = "evt_";
/// Number (8), organization tag (4), checksum (4).
const EVENT_ID_BYTES: usize = 16;
/// Those bytes in base64url without padding.
const EVENT_ID_TEXT_LEN: usize = 22;

impl<'a> EventId<'a> {
    /// The id of the event numbered `number` in `organization_id`'s feed.
    pub fn new(organization_id: &'a str, number: u64) -> Self {
        Self {
            organization_id,
            number,
        }
    }

    /// The number of the event `text` names in `organization_id`'s feed.
    ///
    /// # Errors
    ///
    /// [`BadEventId::Malformed`] for anything not made by [`EventId`]'s `Display`;
    /// [`BadEventId::Foreign`] for another organization's id.
    pub fn parse(text: &str, organization_id: &str) -> Result<u64, BadEventId> {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine as _;
        let encoded = text
            .strip_prefix(EVENT_ID_PREFIX)
            .filter(|rest| rest.len() == EVENT_ID_TEXT_LEN)
            .ok_or(BadEventId::Malformed)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(encoded)
            .map_err(|_| BadEventId::Malformed)?;
        let Some((head, sum)) = bytes
            .split_first_chunk::<12>()
            .filter(|_| bytes.len() == EVENT_ID_BYTES)
        else {
            return Err(BadEventId::Malformed);
        };
        if remembered_checksum(head) != sum {
            return Err(BadEventId::Malformed);
        }
        if bytes[8..12] != organization_tag(organization_id) {
            return Err(BadEventId::Foreign);
        }
        let mut number = [0; 8];
        number.copy_from_slice(&bytes[..8]);
        Ok(u64::from_be_bytes(number))
    }
}

impl std::fmt::Display for EventId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&EventIds::of(self.organization_id).id(self.number))
    }
}

/// The ids of one organization's events, its tag hashed once: for a page of them.
pub(crate) struct EventIds {
    tag: [u8; 4],
}

impl EventIds {
    pub(crate) fn of(organization_id: &str) -> Self {
        Self {
            tag: organization_tag(organization_id),
        }
    }

    /// The id of the event numbered `number`, as [`EventId`] writes it.
    pub(crate) fn id(&self, number: u64) -> String {
        let mut id = Vec::with_capacity(EVENT_ID_PREFIX.len() + EVENT_ID_TEXT_LEN);
        self.write_id_with(number, &mut id, remembered_checksum);
        String::from_utf8(id).expect("a prefix and base64url are ASCII")
    }

    /// Appends the id of the event numbered `number` to `out`, as [`id`](Self::id) makes it.
    pub(crate) fn write_id(&self, number: u64, out: &mut Vec<u8>) {
        self.write_id_with(number, out, checksum);
    }

    fn write_id_with(&self, number: u64, out: &mut Vec<u8>, checksum: fn(&[u8; 12]) -> [u8; 4]) {
        use base64::engine::general_purpose::URL_SAFE_NO_PAD;
        use base64::Engine as _;
        let mut head = [0; 12];
        head[..8].copy_from_slice(&number.to_be_bytes());
        head[8..].copy_from_slice(&self.tag);
        let mut bytes = [0; EVENT_ID_BYTES];
        bytes[..12].copy_from_slice(&head);
        bytes[12..].copy_from_slice(&checksum(&head));
        let mut text = [0; EVENT_ID_TEXT_LEN];
        let written = URL_SAFE_NO_PAD
            .encode_slice(bytes, &mut text)
            .expect("16 bytes are 22 characters of base64url");
        out.extend_from_slice(EVENT_ID_PREFIX.as_bytes());
        out.extend_from_slice(&text[..written]);
    }
}

/// The 4 bytes of `organization_id` in its events' ids. A worker thread keeps the last one it
/// worked out: a page's `Link` and the next request's `after` are of the same organization,
/// and a SHA-256 is most of an id's cost where the processor has no SHA instructions.
fn organization_tag(organization_id: &str) -> [u8; 4] {
    thread_local! {
        static LAST: std::cell::RefCell<(String, [u8; 4])> =
            const { std::cell::RefCell::new((String::new(), [0; 4])) };
    }
    // A thread being torn down works it out afresh.
    LAST.try_with(|last| {
        let mut last = last.borrow_mut();
        if last.0 != organization_id || last.0.is_empty() {
            last.1 = organization_tag_of(organization_id);
            last.0.clear();
            last.0.push_str(organization_id);
        }
        last.1
    })
    .unwrap_or_else(|_| organization_tag_of(organization_id))
}

fn organization_tag_of(organization_id: &str) -> [u8; 4] {
    let mut hasher = Sha256::new();
    hasher.update(b"partner-api event id\0");
    hasher.update(organization_id.as_bytes());
    let digest = hasher.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

fn checksum(head: &[u8; 12]) -> [u8; 4] {
    let digest = Sha256::digest(head);
    [digest[0], digest[1], digest[2], digest[3]]
}

/// [`checksum`], of the last id a worker thread checked or wrote alone: a page's `Link` names
/// the id its next request brings as `after`, and a poll at the feed's end brings the same
/// one again. A page's ids are each checked once and do not pass here.
fn remembered_checksum(head: &[u8; 12]) -> [u8; 4] {
    thread_local! {
        static LAST: std::cell::Cell<Option<([u8; 12], [u8; 4])>> =
            const { std::cell::Cell::new(None) };
    }
    // A thread being torn down works it out afresh.
    LAST.try_with(|last| match last.get() {
        Some((known, sum)) if known == *head => sum,
        _ => {
            let sum = checksum(head);
            last.set(Some((*head, sum)));
            sum
        }
    })
    .unwrap_or_else(|_| checksum(head))
}

/// Deletes `feed`'s events readable for more than `older_than` ([`EventFeed::prune_events`]),
/// `batch` at a time, at most `batches` batches; returns how many it deleted.
///
/// # Errors
///
/// The store's, from the batch that failed (the batches before it stay deleted).
pub async fn prune_event_batches(
    feed: &(impl EventFeed + ?Sized),
    older_than: std::time::Duration,
    batch: u32,
    batches: u32,
) -> Result<u64, StoreError> {
    crate::store::audit::in_batches(batch, batches, || feed.prune_events(older_than, batch)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_round_trips_for_its_organization_only() {
        for number in [0, 1, 42, u64::MAX] {
            let id = EventId::new("org_a", number).to_string();
            assert_eq!(id.len(), 26, "{id}");
            assert_eq!(EventId::parse(&id, "org_a"), Ok(number));
            assert_eq!(EventId::parse(&id, "org_b"), Err(BadEventId::Foreign));
        }
    }

    #[test]
    fn every_altered_or_cut_id_is_malformed() {
        let id = EventId::new("org_a", 7).to_string();
        for cut in 0..id.len() {
            assert_eq!(
                EventId::parse(&id[..cut], "org_a"),
                Err(BadEventId::Malformed)
            );
        }
        for at in 4..id.len() {
            let mut altered = id.clone().into_bytes();
            altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(altered).unwrap();
            assert!(EventId::parse(&altered, "org_a").is_err(), "{altered}");
        }
        assert_eq!(EventId::parse("evt_", "org_a"), Err(BadEventId::Malformed));
        assert_eq!(
            EventId::parse(&format!("ord_{}", &id[4..]), "org_a"),
            Err(BadEventId::Malformed)
        );
    }

    #[test]
    fn what_a_thread_remembers_never_passes_a_forged_or_foreign_id() {
        // The thread's last organization and checksum are remembered: the same id with another
        // checksum, and another organization's id, are refused right after the real one passed.
        let id = EventId::new("org_a", 9).to_string();
        assert_eq!(EventId::parse(&id, "org_a"), Ok(9));
        let mut forged = id.clone().into_bytes();
        // A character of the checksum's, decodable either way.
        let at = forged.len() - 3;
        forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
        let forged = String::from_utf8(forged).unwrap();
        assert_eq!(
            EventId::parse(&forged, "org_a"),
            Err(BadEventId::Malformed),
            "{forged}"
        );
        assert_eq!(EventId::parse(&id, "org_b"), Err(BadEventId::Foreign));
        assert_eq!(EventId::parse(&id, "org_a"), Ok(9));
        // An organization with an empty id is no match for a thread that remembers none yet.
        let empty = std::thread::spawn(|| {
            let id = EventId::new("", 3).to_string();
            (EventId::parse(&id, ""), EventId::parse(&id, "org_a"))
        })
        .join()
        .unwrap();
        assert_eq!(empty, (Ok(3), Err(BadEventId::Foreign)));
    }

    #[test]
    fn change_names_round_trip() {
        for change in OrderChange::ALL {
            assert_eq!(OrderChange::from_name(change.as_str()), Some(change));
        }
        assert_eq!(OrderChange::from_name("webhook.test"), None);
        let set = OrderChanges::NONE.with(OrderChange::Deleted);
        assert_eq!(set.names().collect::<Vec<_>>(), ["order.deleted"]);
        assert!(OrderChanges::ALL.is_all() && !set.is_all());
    }
}
