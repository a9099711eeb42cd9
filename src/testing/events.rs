//! The conformance suite of [`EventFeed`]: rule `feed-exactly-once` as one writer sees it
//! (every change once, in order, resumable from each event, by page), the types filter, and
//! the feed's scope. Concurrent writers are the history checker's (`tests/it/events.rs`).

use std::time::Duration;

use super::calls::{add_orders, order, organization};
use super::report::{ensure, failed, Check, Report};
use super::{namespace, StoreFixtures};
use crate::model::{EncodedOrder, Order, Timestamp};
use crate::store::{EventFeed, EventQuery, EventsPage, FeedEvent, OrderChange, OrderChanges};

/// Runs the checks of an [`EventFeed`] against the store of `fixtures`. Each check writes
/// orders of organizations of its own, so it runs against a store that holds other data; no
/// check prunes anything but events older than 50 years.
pub async fn run_event_feed<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: EventFeed,
{
    let mut report = Report::default();
    let mut record = |name, result| report.results.push((name, result));
    record(
        "rule feed-exactly-once: every change of one writer once, in order, with the order as served",
        every_change_once(fixtures).await,
    );
    record(
        "rule feed-exactly-once: resuming after any event gives exactly the events after it, page by page",
        resumes_after_each(fixtures).await,
    );
    record(
        "types: only the events of the types asked, resumable after one of them",
        only_types(fixtures).await,
    );
    record(
        "scope: a feed holds its organization's events only; another's event or one never written is unknown",
        scoped(fixtures).await,
    );
    report
}

/// What the checks expect of an event: its type and data, the order as `GET /orders` serves
/// it without its last member, `updatedAt` (which [`seen`] checks is the event's time).
fn expected(change: OrderChange, order: &Order) -> Result<(OrderChange, Vec<u8>), String> {
    let data = match change {
        OrderChange::Deleted => serde_json::to_vec(&serde_json::json!({ "id": order.id }))
            .map_err(|err| err.to_string())?,
        OrderChange::Created | OrderChange::Updated => {
            let encoded = EncodedOrder::new(Order {
                updated_at: None,
                ..order.clone()
            })
            .map_err(|err| format!("EncodedOrder::new: {err}"))?;
            without_updated_at(encoded.json(), order.created_at)
        }
    };
    Ok((change, data))
}

/// `json`, an order's, without its last member when that is `"updatedAt"` at `at`: kept
/// whole otherwise, so a comparison shows what differs.
fn without_updated_at(json: &[u8], at: Timestamp) -> Vec<u8> {
    let last = format!(r#","updatedAt":"{at}"}}"#);
    match json.strip_suffix(last.as_bytes()) {
        Some(rest) => [rest, b"}"].concat(),
        None => json.to_vec(),
    }
}

/// The events as the checks compare them: a created or updated order's data without its
/// `updatedAt`, which must be the event's own time.
fn seen(events: &[FeedEvent]) -> Vec<(OrderChange, Vec<u8>)> {
    events
        .iter()
        .map(|event| {
            let data = match event.change {
                OrderChange::Deleted => event.data.to_vec(),
                _ => without_updated_at(&event.data, event.created_at),
            };
            (event.change, data)
        })
        .collect()
}

async fn read<F: StoreFixtures>(
    fixtures: &F,
    organization_id: &str,
    query: &EventQuery,
) -> Result<EventsPage, String>
where
    F::Store: EventFeed,
{
    fixtures
        .store()
        .events(organization_id, query)
        .await
        .map_err(failed("events"))
}

async fn events<F: StoreFixtures>(
    fixtures: &F,
    organization_id: &str,
    query: &EventQuery,
) -> Result<Vec<FeedEvent>, String>
where
    F::Store: EventFeed,
{
    match read(fixtures, organization_id, query).await? {
        EventsPage::Events { events, .. } => Ok(events),
        other => Err(format!("{query:?} answered {other:?}, not events")),
    }
}

/// Writes a history of changes to a fresh organization: two orders created, one updated,
/// one written unchanged (no event), one deleted; returns the organization and the events
/// expected, oldest first.
async fn history<F: StoreFixtures>(
    fixtures: &F,
    name: &str,
) -> Result<(String, Vec<(OrderChange, Vec<u8>)>), String>
where
    F::Store: EventFeed,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, name).await?;
    let first = order(format!("{ns}-a"), 1_000);
    let second = order(format!("{ns}-b"), 2_000);
    add_orders(fixtures, &org.id, std::slice::from_ref(&first)).await?;
    add_orders(fixtures, &org.id, std::slice::from_ref(&second)).await?;
    let mut changed = first.clone();
    changed.status = "running".into();
    fixtures
        .update_order(&org.id, &changed)
        .await
        .map_err(failed("update_order"))?;
    // The same order again: no change, no event.
    fixtures
        .update_order(&org.id, &changed)
        .await
        .map_err(failed("update_order"))?;
    fixtures
        .remove_order(&org.id, &second.id)
        .await
        .map_err(failed("remove_order"))?;
    let mut third = order(format!("{ns}-c"), 500);
    third.providers = vec!["ünïcode \"quoted\"".into()];
    add_orders(fixtures, &org.id, std::slice::from_ref(&third)).await?;
    let expected = vec![
        expected(OrderChange::Created, &first)?,
        expected(OrderChange::Created, &second)?,
        expected(OrderChange::Updated, &changed)?,
        expected(OrderChange::Deleted, &second)?,
        expected(OrderChange::Created, &third)?,
    ];
    Ok((org.id, expected))
}

async fn every_change_once<F: StoreFixtures>(fixtures: &F) -> Check
where
    F::Store: EventFeed,
{
    let (org, expected) = history(fixtures, "events").await?;
    let read = events(fixtures, &org, &EventQuery::oldest(100)).await?;
    ensure!(
        seen(&read) == expected,
        "the feed from its oldest event holds {:?}, not {:?}",
        read.iter().map(|e| e.change).collect::<Vec<_>>(),
        expected.iter().map(|e| e.0).collect::<Vec<_>>()
    );
    let mut ids: Vec<u64> = read.iter().map(|event| event.id).collect();
    ids.sort_unstable();
    ids.dedup();
    ensure!(ids.len() == read.len(), "two events share an id: {read:?}");
    // Read again: the same events, the same ids.
    let again = events(fixtures, &org, &EventQuery::oldest(100)).await?;
    ensure!(again == read, "a second read of the same feed differs");
    Ok(())
}

async fn resumes_after_each<F: StoreFixtures>(fixtures: &F) -> Check
where
    F::Store: EventFeed,
{
    let (org, expected) = history(fixtures, "resume").await?;
    let all = events(fixtures, &org, &EventQuery::oldest(100)).await?;
    ensure!(
        seen(&all) == expected,
        "the feed holds other events than were written"
    );
    for (index, event) in all.iter().enumerate() {
        let after = events(fixtures, &org, &EventQuery::after(event.id, 100)).await?;
        ensure!(
            after == all[index + 1..],
            "after event {} (the {}th) the feed gives {} events, not the {} after it",
            event.id,
            index + 1,
            after.len(),
            all.len() - index - 1
        );
    }
    // Pages of 2, each resumed after the last event of the one before.
    let mut walked = events(fixtures, &org, &EventQuery::oldest(2)).await?;
    ensure!(walked.len() == 2, "a page of 2 holds {}", walked.len());
    loop {
        let last = walked.last().map(|event| event.id).unwrap_or_default();
        let page = events(fixtures, &org, &EventQuery::after(last, 2)).await?;
        ensure!(page.len() <= 2, "a page of 2 holds {}", page.len());
        if page.is_empty() {
            break;
        }
        walked.extend(page);
        ensure!(walked.len() <= all.len(), "pages of 2 repeat events");
    }
    ensure!(walked == all, "pages of 2 give other events than one page");
    Ok(())
}

async fn only_types<F: StoreFixtures>(fixtures: &F) -> Check
where
    F::Store: EventFeed,
{
    let (org, expected) = history(fixtures, "types").await?;
    let all = events(fixtures, &org, &EventQuery::oldest(100)).await?;
    for types in [
        OrderChanges::NONE.with(OrderChange::Created),
        OrderChanges::NONE.with(OrderChange::Deleted),
        OrderChanges::NONE
            .with(OrderChange::Updated)
            .with(OrderChange::Deleted),
    ] {
        let want: Vec<&FeedEvent> = all
            .iter()
            .filter(|event| types.contains(event.change))
            .collect();
        let got = events(fixtures, &org, &EventQuery::oldest(100).with_types(types)).await?;
        ensure!(
            got.iter().collect::<Vec<_>>() == want,
            "types {:?} give {} events, not {}",
            types.names().collect::<Vec<_>>(),
            got.len(),
            want.len()
        );
        // Resumed after the first event of the feed, whatever its type.
        let first = all.first().map(|event| event.id).unwrap_or_default();
        let got = events(
            fixtures,
            &org,
            &EventQuery::after(first, 100).with_types(types),
        )
        .await?;
        let want_after: Vec<&FeedEvent> = want.iter().copied().filter(|e| e.id != first).collect();
        ensure!(
            got.iter().collect::<Vec<_>>() == want_after,
            "types {:?} after the first event give {} events, not {}",
            types.names().collect::<Vec<_>>(),
            got.len(),
            want_after.len()
        );
    }
    ensure!(expected.len() == all.len(), "the feed lost events");
    // A read of a type the feed's newest events are not: it goes through them all the same.
    let newest = all.last().map(|event| event.id);
    let deletions = OrderChanges::NONE.with(OrderChange::Deleted);
    let page = read(
        fixtures,
        &org,
        &EventQuery::oldest(100).with_types(deletions),
    )
    .await?;
    let EventsPage::Events { through, .. } = page else {
        return Err(format!("a read of deletions answered {page:?}"));
    };
    ensure!(
        through == newest,
        "a read of deletions went through {through:?}, not the newest event {newest:?}"
    );
    // A full page goes through its last event only.
    let page = read(fixtures, &org, &EventQuery::oldest(2)).await?;
    let EventsPage::Events { events, through } = page else {
        return Err(format!("a page of 2 answered {page:?}"));
    };
    ensure!(
        through == events.get(1).map(|event| event.id),
        "a full page of 2 went through {through:?}, past its last event"
    );
    Ok(())
}

async fn scoped<F: StoreFixtures>(fixtures: &F) -> Check
where
    F::Store: EventFeed,
{
    let (org, _) = history(fixtures, "scope").await?;
    let ns = namespace();
    let other = organization(fixtures, &ns, "scope-other").await?;
    let all = events(fixtures, &org, &EventQuery::oldest(100)).await?;
    let empty = events(fixtures, &other.id, &EventQuery::oldest(100)).await?;
    ensure!(
        empty.is_empty(),
        "a fresh organization's feed holds {} events",
        empty.len()
    );
    let newest = all.iter().map(|event| event.id).max().unwrap_or_default();
    let foreign = read(fixtures, &other.id, &EventQuery::after(newest, 100)).await?;
    ensure!(
        foreign == EventsPage::Unknown,
        "another organization's event id answered {foreign:?}, not Unknown"
    );
    let never = read(
        fixtures,
        &org,
        &EventQuery::after(newest.saturating_add(1 << 40), 100),
    )
    .await?;
    ensure!(
        never == EventsPage::Unknown,
        "an event id never written answered {never:?}, not Unknown"
    );
    // Retention of what is 50 years old keeps every event just written.
    fixtures
        .store()
        .prune_events(Duration::from_secs(50 * 365 * 24 * 3600), 100)
        .await
        .map_err(failed("prune_events"))?;
    let kept = events(fixtures, &org, &EventQuery::oldest(100)).await?;
    ensure!(kept == all, "retention of 50 years deleted new events");
    Ok(())
}
