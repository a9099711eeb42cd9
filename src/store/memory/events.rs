//! The memory store's events feed: each organization's events in a list, appended by the
//! order writers while they hold `order_writer`, so ids, positions and commit order are one
//! and the same order (a memory write is visible the moment it returns).

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{MemoryStore, PoisonError};
use crate::model::Timestamp;
use crate::store::{
    EventFeed, EventQuery, EventsPage, FeedEvent, OrderChange, StoreError,
    MAX_EVENTS_LOOKED_AT_IN_VIEW,
};

/// One change of an order as a writer records it: what happened, to which order, its `data`,
/// and the order's providers before the change and after it (`None`: no order before, a
/// creation; no order after, a deletion), which decide what it is in a view.
pub(super) struct Written {
    pub(super) change: OrderChange,
    pub(super) order_id: String,
    pub(super) data: Bytes,
    pub(super) before: Option<Vec<String>>,
    pub(super) after: Option<Vec<String>>,
}

/// How long a tombstone is kept at the least, whatever the retention: a day.
const TOMBSTONES_AT_LEAST: Duration = Duration::from_secs(24 * 3600);

/// Every organization's feed, the number of the last event, and the last revision handed
/// out (rule `feed-revision`: one counter for every feed, raised with each change to one of
/// them, so no feed's revision is ever one it had before).
#[derive(Default)]
pub(super) struct Feeds {
    last_id: u64,
    last_revision: u64,
    /// A feed is never removed, so an organization without one has had no event: its
    /// revision is 0, below every revision handed out.
    by_organization: HashMap<String, Feed>,
}

/// One change of an order as the feed keeps it (and the webhooks' outbox hears of it): its
/// event as every order's view sees it, the order it is about, and the order's providers
/// before and after the change (for the views of providers).
#[derive(Clone)]
pub(super) struct Change {
    pub(super) event: FeedEvent,
    pub(super) order_id: String,
    before: Option<Vec<String>>,
    after: Option<Vec<String>>,
}

impl Change {
    /// The event in the view of `providers` (`None`: every order's view), if it is in it.
    pub(super) fn in_view(&self, providers: Option<&[String]>) -> Option<FeedEvent> {
        let Some(view) = providers else {
            return Some(self.event.clone());
        };
        let seen = |side: &Option<Vec<String>>| {
            side.as_ref()
                .is_some_and(|held| held.iter().any(|provider| view.contains(provider)))
        };
        let change = self
            .event
            .change
            .in_view(seen(&self.before), seen(&self.after))?;
        // Left the view: its id only. Else the order after the change, as the feed has it.
        let data = if change == OrderChange::Deleted && self.event.change != change {
            deleted_data(&self.order_id)
        } else {
            self.event.data.clone()
        };
        Some(FeedEvent {
            change,
            data,
            ..self.event.clone()
        })
    }
}

/// The `data` of an order's deletion: `{"id":...}`.
pub(super) fn deleted_data(order_id: &str) -> Bytes {
    serde_json::to_vec(&serde_json::json!({ "id": order_id }))
        .unwrap_or_default()
        .into()
}

#[derive(Default)]
struct Feed {
    /// Oldest first; ids increase along it.
    events: VecDeque<Change>,
    /// The tombstones of the events retention deleted, oldest first (ids increase along it):
    /// each one's id and when it was deleted. Kept as long as events are (a day at least),
    /// the newest for ever: a reader at it missed nothing.
    pruned: VecDeque<(u64, Timestamp)>,
    /// Raised past every revision before with each change to `events` or `pruned`.
    revision: u64,
}

impl Feeds {
    /// Appends one event per written change to `organization_id`'s feed, all written at
    /// `at`; returns them with their orders.
    fn append(
        &mut self,
        organization_id: &str,
        at: Timestamp,
        changes: impl IntoIterator<Item = Written>,
    ) -> Vec<Change> {
        let feed = self
            .by_organization
            .entry(organization_id.to_owned())
            .or_default();
        self.last_revision += 1;
        feed.revision = self.last_revision;
        changes
            .into_iter()
            .map(|written| {
                self.last_id += 1;
                let event = FeedEvent {
                    id: self.last_id,
                    change: written.change,
                    created_at: at,
                    data: written.data,
                };
                let change = Change {
                    event,
                    order_id: written.order_id,
                    before: written.before,
                    after: written.after,
                };
                feed.events.push_back(change.clone());
                change
            })
            .collect()
    }
}

impl MemoryStore {
    /// Records `changes` of `organization_id`'s orders, made at `at`, in its feed and raises
    /// their webhooks (the caller holds `order_writer`).
    pub(super) fn record_changes(
        &self,
        organization_id: &str,
        at: Timestamp,
        changes: impl IntoIterator<Item = Written>,
    ) {
        let recorded = self
            .events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .append(organization_id, at, changes);
        #[cfg(feature = "webhooks")]
        self.outbox().raise(organization_id, &recorded);
        #[cfg(not(feature = "webhooks"))]
        drop(recorded);
    }
}

#[async_trait]
impl EventFeed for MemoryStore {
    async fn events(
        &self,
        organization_id: &str,
        query: &EventQuery,
    ) -> Result<EventsPage, StoreError> {
        let feeds = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(feed) = feeds.by_organization.get(organization_id) else {
            return Ok(match query.after_id() {
                None => EventsPage::Events {
                    events: Vec::new(),
                    through: None,
                },
                Some(_) => EventsPage::Unknown,
            });
        };
        let start = match query.after_id() {
            None => 0,
            Some(after) => match feed
                .events
                .binary_search_by_key(&after, |kept| kept.event.id)
            {
                Ok(index) => index + 1,
                // Deleted, and the last one deleted: every event after it is kept.
                Err(_) if feed.pruned.back().is_some_and(|(id, _)| *id == after) => 0,
                Err(_)
                    if feed
                        .pruned
                        .binary_search_by_key(&after, |(id, _)| *id)
                        .is_ok() =>
                {
                    return Ok(EventsPage::Expired)
                }
                Err(_) => return Ok(EventsPage::Unknown),
            },
        };
        // A view looks at a bounded part of the feed, as a store's query would.
        let looked_at = match query.providers() {
            None => feed.events.len(),
            Some(_) => MAX_EVENTS_LOOKED_AT_IN_VIEW.max(query.limit()),
        };
        let end = feed.events.len().min(start.saturating_add(looked_at));
        let (types, limit) = (query.types(), query.limit());
        // Sized once (a page is usually full), and an event cloned only once it is taken.
        let mut events = Vec::with_capacity(limit.min(end - start));
        for kept in feed.events.range(start..end) {
            if events.len() == limit {
                break;
            }
            let event = match query.providers() {
                None if types.contains(kept.event.change) => kept.event.clone(),
                None => continue,
                Some(view) => match kept.in_view(Some(view)) {
                    Some(event) if types.contains(event.change) => event,
                    _ => continue,
                },
            };
            events.push(event);
        }
        let through = match events.last() {
            Some(last) if events.len() == limit => Some(last.id),
            // Not full: through everything looked at.
            _ => end
                .checked_sub(1)
                .filter(|&last| last >= start)
                .map(|last| feed.events[last].event.id),
        };
        Ok(EventsPage::Events { events, through })
    }

    fn serves_provider_views(&self) -> bool {
        true
    }

    fn revision_now(&self, organization_id: &str) -> Option<u64> {
        let feeds = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        Some(
            feeds
                .by_organization
                .get(organization_id)
                .map_or(0, |feed| feed.revision),
        )
    }

    async fn prune_events(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError> {
        let now = Timestamp::now();
        let ago = |keep: Duration| {
            chrono::Duration::from_std(keep)
                .ok()
                .and_then(|keep| now.as_datetime().checked_sub_signed(keep))
        };
        // Longer ago than the clock reaches: nothing is that old.
        let Some(cutoff) = ago(older_than) else {
            return Ok(0);
        };
        // Tombstones are kept as long as events are, a day at least.
        let tombstones_cutoff = ago(older_than.max(TOMBSTONES_AT_LEAST));
        let mut feeds = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        let mut deleted = 0;
        let Feeds {
            by_organization,
            last_revision,
            ..
        } = &mut *feeds;
        for feed in by_organization.values_mut() {
            let (events, tombstones) = (feed.events.len(), feed.pruned.len());
            // From the front only: what a feed keeps stays a suffix of it; and never the
            // newest, where a reader that has it resumes, however quiet the feed. An event is
            // readable from its write (appended under the feed's lock), so its `created_at`
            // (read just before, in milliseconds) is when it became part of the feed, to the
            // millisecond.
            while deleted < u64::from(batch) && feed.events.len() > 1 {
                match feed.events.front().map(|kept| &kept.event) {
                    Some(oldest) if oldest.created_at.as_datetime() < cutoff => {
                        feed.pruned.push_back((oldest.id, now));
                        feed.events.pop_front();
                        deleted += 1;
                    }
                    _ => break,
                }
            }
            // Tombstones as old as the events they stand for go, but the newest.
            while feed.pruned.len() > 1
                && feed
                    .pruned
                    .front()
                    .is_some_and(|(_, at)| Some(at.as_datetime()) < tombstones_cutoff)
            {
                feed.pruned.pop_front();
            }
            if (events, tombstones) != (feed.events.len(), feed.pruned.len()) {
                *last_revision += 1;
                feed.revision = *last_revision;
            }
        }
        Ok(deleted)
    }
}
