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

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use bytes::Bytes;
use chrono::Datelike as _;

use crate::store::{EventFeed, FeedEvent, OrderChange};
use crate::versions::ApiVersion;

/// Pages each worker thread keeps: a power of two, indexed by the low bits of a hash.
const RECENT_PAGES: usize = 4;
const _: () = assert!(RECENT_PAGES.is_power_of_two());

/// Bodies longer than this are not kept (a page of large orders), so a thread keeps at most
/// `RECENT_PAGES` times this.
const MAX_KEPT_BODY: usize = 256 * 1024;

/// A page as it was served: whose feed, which organization, which events, and its body.
struct Kept {
    /// Weakly held: the address names the feed while the page is kept (a weak reference keeps
    /// the allocation, so the address is not reused), without keeping a dropped feed's store
    /// (a pool of connections, say) alive.
    feed: Weak<dyn EventFeed>,
    organization_id: Box<str>,
    version: ApiVersion,
    events: Box<[(u64, OrderChange)]>,
    body: Bytes,
}

impl Kept {
    fn is(
        &self,
        feed: &Arc<dyn EventFeed>,
        organization_id: &str,
        version: ApiVersion,
        events: &[FeedEvent],
    ) -> bool {
        std::ptr::addr_eq(self.feed.as_ptr(), Arc::as_ptr(feed))
            && *self.organization_id == *organization_id
            && self.version == version
            && self.events.len() == events.len()
            && self
                .events
                .iter()
                .zip(events)
                .all(|(kept, event)| *kept == (event.id, event.change))
    }
}

/// The body of the page of `events` that `feed` returned for `organization_id`, at `version`:
/// the one this thread encoded last time it served exactly these events of that feed and
/// organization at that version, or `encode`'s, kept for the next time.
pub(crate) fn events_body(
    feed: &Arc<dyn EventFeed>,
    organization_id: &str,
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
                .filter(|kept| kept.is(feed, organization_id, version, events))
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

/// The slot of a page, below `RECENT_PAGES`: a hash of its organization, version and events.
/// Only where a page is kept depends on it ([`Kept::is`] decides a hit), so it is a fold of a
/// multiply and a rotation per event (a streaming hasher's call per event cost more than
/// the page's encoding saved on `/events`).
fn slot(organization_id: &str, version: ApiVersion, events: &[FeedEvent]) -> usize {
    const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut hash = xxhash_rust::xxh3::xxh3_64(organization_id.as_bytes())
        ^ u64::from(version.date().num_days_from_ce().unsigned_abs());
    for event in events {
        hash = (hash.rotate_left(23) ^ event.id ^ ((event.change as u64) << 58)).wrapping_mul(MIX);
    }
    // The high bits are the best mixed; the mask keeps the index below RECENT_PAGES, so the
    // cast cannot truncate.
    #[allow(clippy::cast_possible_truncation)]
    let index = (hash >> 32) as usize & (RECENT_PAGES - 1);
    index
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::model::Timestamp;
    use crate::store::OrderChange;
    use crate::MemoryStore;

    fn event(id: u64) -> FeedEvent {
        FeedEvent {
            id,
            change: OrderChange::Created,
            created_at: Timestamp::from_unix_millis(0).expect("in range"),
            data: Bytes::from_static(b"{}"),
        }
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
            events_body(&feed, "org_views", crate::versions::FIRST, &events, || {
                Bytes::from_static(body.as_bytes())
            })
        };
        assert_eq!(serve(page(OrderChange::Updated), "updated"), "updated");
        assert_eq!(serve(page(OrderChange::Deleted), "deleted"), "deleted");
        assert_eq!(serve(page(OrderChange::Deleted), "again"), "deleted");
    }

    #[test]
    fn a_body_past_the_bound_is_not_kept() {
        let feed: Arc<dyn EventFeed> = Arc::new(MemoryStore::new());
        let large: &'static str = Box::leak("x".repeat(MAX_KEPT_BODY + 1).into_boxed_str());
        assert!(served(&feed, "org_large", &[7], large).1);
        assert!(served(&feed, "org_large", &[7], large).1, "encoded again");
    }
}
