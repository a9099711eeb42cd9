//! The bodies of `GET /events` pages, kept per worker thread for the pages it served last:
//! partners poll the same pages, and a page's body is the same whenever its feed returns the
//! same events (an event never changes once written, see
//! [`FeedEvent`](crate::store::FeedEvent)), so a hit is answered without encoding a hundred
//! events again (their ids' checksums and times were four fifths of the route's own work).
//!
//! A page is kept by its events' numbers *and types*: in a key's view of providers an event
//! may be another type than in the feed (an order that left the view is its deletion, `{"id"}`
//! only), and a number and a type decide an event's bytes in every view, so two keys of
//! different views share a body only when their pages are the same bytes.
//!
//! A feed that says its revision at hand ([`EventFeed::revision_now`]) is not even read for a
//! read answered before at the same revision: each thread also keeps its last answers by
//! read (organization, query, version, and the request's own words and path) and revision,
//! the body and the `Link` to where the next read resumes. Why that is exact is rule `feed-revision`'s argument, on the trait.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use chrono::Datelike as _;
use http::HeaderValue;

use crate::api::events_request::EventsRequest;
use crate::store::{EventFeed, EventQuery, FeedEvent, OrderChange};
use crate::versions::{ApiVersion, Versions};

/// Pages each worker thread keeps: a power of two, indexed by bits of a mixed hash.
const RECENT_PAGES: usize = 4;
const _: () = assert!(RECENT_PAGES.is_power_of_two());

/// Answers by read and revision each worker thread keeps: a power of two, as above.
const RECENT_READS: usize = 8;
const _: () = assert!(RECENT_READS.is_power_of_two());

/// Bodies longer than this are not kept (a page of large orders), so a thread keeps at most
/// `RECENT_PAGES + RECENT_READS` times this (3 MiB; a body kept both ways is one).
const MAX_KEPT_BODY: usize = 256 * 1024;

/// A page as it was served: whose feed, which organization, which events, and its body.
struct Kept {
    /// Weakly held: the address names the feed while the page is kept (a weak reference keeps
    /// the allocation, so the address is not reused), without keeping a dropped feed's store
    /// (a pool of connections, say) alive.
    feed: Weak<dyn EventFeed>,
    organization_id: Box<str>,
    /// The chain the body was shaped by (two services may share a feed, each its chain).
    chain: Versions,
    version: ApiVersion,
    events: Box<[(u64, OrderChange)]>,
    body: Bytes,
}

impl Kept {
    fn is(
        &self,
        feed: &Arc<dyn EventFeed>,
        organization_id: &str,
        chain: &Versions,
        version: ApiVersion,
        events: &[FeedEvent],
    ) -> bool {
        std::ptr::addr_eq(self.feed.as_ptr(), Arc::as_ptr(feed))
            && *self.organization_id == *organization_id
            && self.version == version
            && self.chain.is(chain)
            && self.events.len() == events.len()
            && self
                .events
                .iter()
                .zip(events)
                .all(|(kept, event)| *kept == (event.id, event.change))
    }
}

/// The body of the page of `events` that `feed` returned for `organization_id`, at `version`
/// of `chain`: the one this thread encoded last time it served exactly these events of that
/// feed and organization at that version of that chain, or `encode`'s, kept for the next time.
pub(crate) fn events_body(
    feed: &Arc<dyn EventFeed>,
    organization_id: &str,
    chain: &Versions,
    version: ApiVersion,
    events: &[FeedEvent],
    encode: impl FnOnce() -> Bytes,
) -> Bytes {
    thread_local! {
        static RECENT: RefCell<[Option<Kept>; RECENT_PAGES]> =
            const { RefCell::new([const { None }; RECENT_PAGES]) };
    }
    let index = slot(organization_id, version, events);
    // A thread being torn down encodes every page.
    let kept = RECENT
        .try_with(|recent| {
            recent.borrow()[index]
                .as_ref()
                .filter(|kept| kept.is(feed, organization_id, chain, version, events))
                .map(|kept| kept.body.clone())
        })
        .ok()
        .flatten();
    if let Some(body) = kept {
        return body;
    }
    let body = encode();
    if body.len() <= MAX_KEPT_BODY {
        let kept = Kept {
            feed: Arc::downgrade(feed),
            organization_id: organization_id.into(),
            chain: chain.clone(),
            version,
            events: events
                .iter()
                .map(|event| (event.id, event.change))
                .collect(),
            body: body.clone(),
        };
        // The entry it replaces is dropped once the borrow ends.
        let replaced = RECENT.try_with(|recent| recent.borrow_mut()[index].replace(kept));
        drop(replaced);
    }
    body
}

/// A read as it was answered: whose feed, which organization, at which revision, version
/// and query, asked how and where, its body, and its `Link` to where the next read resumes.
struct KeptRead {
    /// Weakly held, as [`Kept::feed`].
    feed: Weak<dyn EventFeed>,
    organization_id: Box<str>,
    revision: u64,
    /// As [`Kept::chain`].
    chain: Versions,
    version: ApiVersion,
    query: EventQuery,
    /// As the request said it (the `Link` repeats its `limit` and `types` as given), and the
    /// path it came in on.
    request: EventsRequest,
    path: Box<str>,
    body: Bytes,
    link: Option<HeaderValue>,
}

impl KeptRead {
    fn is(&self, read: &Read<'_>) -> bool {
        std::ptr::addr_eq(self.feed.as_ptr(), Arc::as_ptr(read.feed))
            && self.revision == read.revision
            && self.version == read.version
            && self.chain.is(read.chain)
            && *self.organization_id == *read.organization_id
            && self.query == *read.query
            && self.request == *read.request
            && *self.path == *read.path
    }
}

/// One read of a feed at a revision: what an answer is kept by.
pub(crate) struct Read<'a> {
    /// The feed read.
    pub(crate) feed: &'a Arc<dyn EventFeed>,
    /// Whose feed.
    pub(crate) organization_id: &'a str,
    /// The feed's revision taken before the read ([`EventFeed::revision_now`]).
    pub(crate) revision: u64,
    /// The chain of versions the answer is shaped by, and its version.
    pub(crate) chain: &'a Versions,
    /// The version the answer is in.
    pub(crate) version: ApiVersion,
    /// What was read.
    pub(crate) query: &'a EventQuery,
    /// The request, as it said it, and the path it came in on: the `Link` repeats both.
    pub(crate) request: &'a EventsRequest,
    pub(crate) path: &'a str,
}

thread_local! {
    static READS: RefCell<[Option<KeptRead>; RECENT_READS]> =
        const { RefCell::new([const { None }; RECENT_READS]) };
}

/// The body and `Link` this thread answered `read` with, if it kept them: the answer of the
/// feed at `read`'s revision or later.
pub(crate) fn answered_read(read: &Read<'_>) -> Option<(Bytes, Option<HeaderValue>)> {
    let index = read_slot(read);
    READS
        .try_with(|reads| {
            reads.borrow()[index]
                .as_ref()
                .filter(|kept| kept.is(read))
                .map(|kept| (kept.body.clone(), kept.link.clone()))
        })
        .ok()
        .flatten()
}

/// Keeps `body` and `link`, the answer of a read of the feed made after `read`'s revision
/// was taken, for the next time this thread is asked `read`.
pub(crate) fn keep_read(read: &Read<'_>, body: &Bytes, link: Option<&HeaderValue>) {
    if body.len() > MAX_KEPT_BODY {
        return;
    }
    let kept = KeptRead {
        feed: Arc::downgrade(read.feed),
        organization_id: read.organization_id.into(),
        revision: read.revision,
        chain: read.chain.clone(),
        version: read.version,
        query: read.query.clone(),
        request: read.request.clone(),
        path: read.path.into(),
        body: body.clone(),
        link: link.cloned(),
    };
    let index = read_slot(read);
    // The entry it replaces is dropped once the borrow ends.
    let replaced = READS.try_with(|reads| reads.borrow_mut()[index].replace(kept));
    drop(replaced);
}

/// The slot of a read, below `RECENT_READS`: as [`slot`], a hash of what tells reads apart
/// most often ([`KeptRead::is`] decides a hit).
fn read_slot(read: &Read<'_>) -> usize {
    let query = read.query;
    slot_of(
        read.organization_id,
        read.version,
        [
            read.revision,
            query.after_id().map_or(u64::MAX, |after| after),
            query.limit() as u64,
            u64::from(query.types().bits()),
            query.providers().map_or(0, <[String]>::len) as u64,
        ],
        RECENT_READS,
    )
}

/// The slot of a page, below `RECENT_PAGES`: a hash of its organization, version and events.
/// Only where a page is kept depends on it ([`Kept::is`] decides a hit), so it is a fold of a
/// multiply and a rotation per event (a streaming hasher's call per event cost more than
/// the page's encoding saved on `/events`).
fn slot(organization_id: &str, version: ApiVersion, events: &[FeedEvent]) -> usize {
    slot_of(
        organization_id,
        version,
        events
            .iter()
            .map(|event| event.id ^ ((event.change as u64) << 58)),
        RECENT_PAGES,
    )
}

/// The slot, below `slots` (a power of two), of `organization_id`'s entry at `version` told
/// apart by `parts`: a fold of a multiply and a rotation per part, then mixed (the parts are
/// counters: event numbers, revisions).
fn slot_of(
    organization_id: &str,
    version: ApiVersion,
    parts: impl IntoIterator<Item = u64>,
    slots: usize,
) -> usize {
    const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
    let seed = xxhash_rust::xxh3::xxh3_64(organization_id.as_bytes())
        ^ u64::from(version.date().num_days_from_ce().unsigned_abs());
    let hash = parts.into_iter().fold(seed, |hash, part| {
        (hash.rotate_left(23) ^ part).wrapping_mul(MIX)
    });
    // The mask keeps the index below `slots`, so the cast cannot truncate.
    #[allow(clippy::cast_possible_truncation)]
    let index = (crate::hashing::mix64(hash) >> 32) as usize & (slots - 1);
    index
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::model::Timestamp;
    use crate::store::{OrderChange, OrderChanges};
    use crate::MemoryStore;

    fn event(id: u64) -> FeedEvent {
        FeedEvent {
            id,
            change: OrderChange::Created,
            created_at: Timestamp::from_unix_millis(0).expect("in range"),
            data: Bytes::from_static(b"{}"),
        }
    }

    /// One chain for every call, as a service's configuration holds one.
    fn chain() -> &'static Versions {
        static SHIPPED: std::sync::OnceLock<Versions> = std::sync::OnceLock::new();
        SHIPPED.get_or_init(Versions::shipped)
    }

    /// The body `events_body` answers with, and whether it had to encode it.
    fn served(
        feed: &Arc<dyn EventFeed>,
        organization_id: &str,
        numbers: &[u64],
        body: &'static str,
    ) -> (Bytes, bool) {
        let events: Vec<FeedEvent> = numbers.iter().copied().map(event).collect();
        let encoded = Cell::new(false);
        let answered = events_body(
            feed,
            organization_id,
            chain(),
            crate::versions::FIRST,
            &events,
            || {
                encoded.set(true);
                Bytes::from_static(body.as_bytes())
            },
        );
        (answered, encoded.get())
    }

    #[test]
    fn the_same_events_of_the_same_feed_and_organization_are_served_as_encoded_before() {
        let feed: Arc<dyn EventFeed> = Arc::new(MemoryStore::new());
        let other_feed: Arc<dyn EventFeed> = Arc::new(MemoryStore::new());
        assert_eq!(
            served(&feed, "org_a", &[1, 2, 3], "first"),
            ("first".into(), true)
        );
        assert_eq!(
            served(&feed, "org_a", &[1, 2, 3], "again"),
            ("first".into(), false)
        );
        // Another chain of versions (another service sharing the feed) shapes its own.
        let another_chain = Versions::shipped();
        let reshaped = events_body(
            &feed,
            "org_a",
            &another_chain,
            crate::versions::FIRST,
            &[1, 2, 3].map(event),
            || Bytes::from_static(b"its own"),
        );
        assert_eq!(reshaped, "its own");
        // Anything else is encoded afresh: other events, another organization, another feed.
        for (feed, organization, numbers) in [
            (&feed, "org_a", &[1, 2][..]),
            (&feed, "org_a", &[1, 2, 4]),
            (&feed, "org_a", &[1, 2, 3, 4]),
            (&feed, "org_b", &[1, 2, 3]),
            (&other_feed, "org_a", &[1, 2, 3]),
        ] {
            let (body, encoded) = served(feed, organization, numbers, "fresh");
            assert!(encoded && body == "fresh", "{organization} {numbers:?}");
        }
    }

    #[test]
    fn the_same_numbers_of_other_types_are_encoded_afresh() {
        // Two views of one feed: an event that is an update in one is a deletion in another.
        let feed: Arc<dyn EventFeed> = Arc::new(MemoryStore::new());
        let page = |change| vec![event(1), FeedEvent { change, ..event(2) }];
        let serve = |events: Vec<FeedEvent>, body: &'static str| {
            events_body(
                &feed,
                "org_views",
                chain(),
                crate::versions::FIRST,
                &events,
                || Bytes::from_static(body.as_bytes()),
            )
        };
        assert_eq!(serve(page(OrderChange::Updated), "updated"), "updated");
        assert_eq!(serve(page(OrderChange::Deleted), "deleted"), "deleted");
        assert_eq!(serve(page(OrderChange::Deleted), "again"), "deleted");
    }

    #[test]
    fn a_read_is_answered_as_kept_at_its_revision_only() {
        let feed: Arc<dyn EventFeed> = Arc::new(MemoryStore::new());
        let other_feed: Arc<dyn EventFeed> = Arc::new(MemoryStore::new());
        let query = EventQuery::oldest(100);
        // An equal query, not the same value.
        let same_query = query.clone();
        let another_chain = Versions::shipped();
        let request = EventsRequest::parse(None).expect("no query");
        let read = |feed, organization_id, revision, version, query| Read {
            feed,
            organization_id,
            revision,
            chain: chain(),
            version,
            query,
            request: &request,
            path: "/v1/events",
        };
        let first = crate::versions::FIRST;
        let kept = read(&feed, "org_reads", 7, first, &query);
        let kept_entry = KeptRead {
            feed: Arc::downgrade(&feed),
            organization_id: "org_reads".into(),
            revision: 7,
            chain: chain().clone(),
            version: first,
            query: query.clone(),
            request: request.clone(),
            path: "/v1/events".into(),
            body: Bytes::new(),
            link: None,
        };
        assert!(kept_entry.is(&kept));
        assert_eq!(answered_read(&kept), None);
        let link = HeaderValue::from_static("</v1/events?after=x>; rel=\"next\"");
        keep_read(&kept, &Bytes::from_static(b"page"), Some(&link));
        assert_eq!(
            answered_read(&read(&feed, "org_reads", 7, first, &same_query)),
            Some((Bytes::from_static(b"page"), Some(link)))
        );
        // Anything else is not that answer: another revision, organization, feed, version,
        // or query (position, limit, types, view).
        let later = crate::versions::ApiVersion::from_date(
            chrono::NaiveDate::from_ymd_opt(2030, 1, 1).expect("a date"),
        );
        let view = Some(Arc::<[String]>::from(vec!["meta".to_owned()]));
        let others = [
            EventQuery::after(3, 100),
            EventQuery::oldest(99),
            EventQuery::oldest(100).with_types(OrderChanges::NONE.with(OrderChange::Deleted)),
            EventQuery::oldest(100).with_providers(view),
        ];
        // The same query, asked in other words (its `limit` given: the `Link` repeats it) or
        // on another path (a host's prefix).
        let limit_given = EventsRequest::parse(Some("limit=100")).expect("a limit");
        let mut reads = vec![
            Read {
                request: &limit_given,
                ..read(&feed, "org_reads", 7, first, &query)
            },
            Read {
                path: "/partner/v1/events",
                ..read(&feed, "org_reads", 7, first, &query)
            },
            read(&feed, "org_reads", 8, first, &query),
            read(&feed, "org_reads", 6, first, &query),
            read(&feed, "org_other", 7, first, &query),
            read(&other_feed, "org_reads", 7, first, &query),
            read(&feed, "org_reads", 7, later, &query),
            Read {
                chain: &another_chain,
                ..read(&feed, "org_reads", 7, first, &query)
            },
        ];
        reads.extend(
            others
                .iter()
                .map(|other| read(&feed, "org_reads", 7, first, other)),
        );
        for other in &reads {
            // Whatever slot it hashes to: the kept entry itself is not it.
            let described = format!(
                "{} {} {:?}",
                other.organization_id, other.revision, other.query
            );
            assert!(!kept_entry.is(other), "{described}");
            assert_eq!(answered_read(other), None, "{described}");
        }
        // Kept side by side, as far as the slots go: each its own.
        keep_read(&reads[0], &Bytes::from_static(b"newer"), None);
        assert_eq!(
            answered_read(&reads[0]),
            Some((Bytes::from_static(b"newer"), None))
        );
    }

    #[test]
    fn a_body_past_the_bound_is_not_kept() {
        let feed: Arc<dyn EventFeed> = Arc::new(MemoryStore::new());
        let large: &'static str = Box::leak("x".repeat(MAX_KEPT_BODY + 1).into_boxed_str());
        assert!(served(&feed, "org_large", &[7], large).1);
        assert!(served(&feed, "org_large", &[7], large).1, "encoded again");
        let query = EventQuery::oldest(100);
        let request = EventsRequest::parse(None).expect("no query");
        let read = Read {
            feed: &feed,
            organization_id: "org_large",
            revision: 1,
            chain: chain(),
            version: crate::versions::FIRST,
            query: &query,
            request: &request,
            path: "/v1/events",
        };
        keep_read(&read, &Bytes::from_static(large.as_bytes()), None);
        assert_eq!(answered_read(&read), None, "not kept by its read either");
    }
}
