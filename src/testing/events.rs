//! The conformance suite of [`EventFeed`]: rule `feed-exactly-once` as one writer sees it
//! (every change once, in order, resumable from each event, by page), the types filter, the
//! feed's scope, and the feed in a view of providers (rule `feed-in-view`, for a store that
//! serves views), and its revision (rule `feed-revision`, for a store that says it).
//! Concurrent writers are the history checker's (`tests/it/events.rs`).

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
    if fixtures.store().serves_provider_views() {
        record(
            "rule feed-in-view: a view of providers holds the events of its orders, an order coming in created and one leaving deleted, by page and type",
            in_view(fixtures).await,
        );
    }
    if fixtures.store().revision_now(&namespace()).is_some() {
        record(
            "rule feed-revision: after each write that makes an event, the feed's revision is one it never was",
            revisions(fixtures).await,
        );
    }
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

/// Writes `order` of `organization_id` as running; returns it so.
async fn set_running<F: StoreFixtures>(
    fixtures: &F,
    organization_id: &str,
    order: &Order,
) -> Result<Order, String> {
    let mut changed = order.clone();
    changed.status = "running".into();
    fixtures
        .update_order(organization_id, &changed)
        .await
        .map_err(failed("update_order"))?;
    Ok(changed)
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
    let changed = set_running(fixtures, &org.id, &first).await?;
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

/// Writes a history in which orders come into the view of `p1` and leave it; returns the
/// organization and the events the view of `p1` holds, oldest first.
async fn view_history<F: StoreFixtures>(
    fixtures: &F,
) -> Result<(String, Vec<(OrderChange, Vec<u8>)>), String>
where
    F::Store: EventFeed,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "views").await?;
    let with = |mut order: Order, providers: &[&str]| {
        order.providers = providers.iter().map(|&p| p.to_owned()).collect();
        order
    };
    let update = |order: &Order| {
        let order = order.clone();
        let org = org.id.clone();
        async move {
            fixtures
                .update_order(&org, &order)
                .await
                .map_err(failed("update_order"))
        }
    };
    let inside = with(order(format!("{ns}-in"), 1_000), &["p1"]);
    let outside = with(order(format!("{ns}-out"), 2_000), &["p2"]);
    let never = with(order(format!("{ns}-never"), 3_000), &["p3"]);
    add_orders(fixtures, &org.id, &[inside.clone(), outside.clone()]).await?;
    add_orders(fixtures, &org.id, std::slice::from_ref(&never)).await?;
    // Outside the view: nothing. Into it: created, as the order is after the change.
    let mut never_changed = never.clone();
    never_changed.status = "running".into();
    update(&never_changed).await?;
    let came_in = with(outside.clone(), &["p2", "p1"]);
    update(&came_in).await?;
    // Inside it: the change itself. Out of it: deleted. Back: created again.
    let mut inside_changed = inside.clone();
    inside_changed.budget_dkk += 1;
    update(&inside_changed).await?;
    let left = with(inside_changed.clone(), &["p3"]);
    update(&left).await?;
    let back = with(left.clone(), &["p3", "p1"]);
    update(&back).await?;
    fixtures
        .remove_order(&org.id, &came_in.id)
        .await
        .map_err(failed("remove_order"))?;
    fixtures
        .remove_order(&org.id, &never.id)
        .await
        .map_err(failed("remove_order"))?;
    let expected = vec![
        expected(OrderChange::Created, &inside)?,
        expected(OrderChange::Created, &came_in)?,
        expected(OrderChange::Updated, &inside_changed)?,
        expected(OrderChange::Deleted, &left)?,
        expected(OrderChange::Created, &back)?,
        expected(OrderChange::Deleted, &came_in)?,
    ];
    Ok((org.id, expected))
}

async fn in_view<F: StoreFixtures>(fixtures: &F) -> Check
where
    F::Store: EventFeed,
{
    let (org, expected) = view_history(fixtures).await?;
    let view = |providers: &[&str]| -> Option<std::sync::Arc<[String]>> {
        Some(providers.iter().map(|&p| p.to_owned()).collect())
    };
    let all = events(fixtures, &org, &EventQuery::oldest(100)).await?;
    let p1 = EventQuery::oldest(100).with_providers(view(&["p1"]));
    let read_p1 = events(fixtures, &org, &p1).await?;
    ensure!(
        seen(&read_p1) == expected,
        "the view of p1 holds {:?}, not {:?}",
        read_p1.iter().map(|e| e.change).collect::<Vec<_>>(),
        expected.iter().map(|e| e.0).collect::<Vec<_>>()
    );
    // Each of its events is the feed's event of that number, in the feed's order.
    let numbers: Vec<u64> = read_p1.iter().map(|event| event.id).collect();
    let in_feed: Vec<u64> = all
        .iter()
        .map(|event| event.id)
        .filter(|id| numbers.contains(id))
        .collect();
    ensure!(
        numbers == in_feed,
        "the view of p1 has events {numbers:?}, not the feed's {in_feed:?} in its order"
    );
    // A read that went through the whole feed resumes after its newest event.
    let page = read(fixtures, &org, &p1).await?;
    let newest = all.last().map(|event| event.id);
    ensure!(
        matches!(page, EventsPage::Events { through, .. } if through == newest),
        "the view of p1 read to the end went through {page:?}, not the newest event {newest:?}"
    );
    // By pages of 1, each resumed after the last one, and after every event of the feed.
    let mut walked: Vec<FeedEvent> = Vec::new();
    let mut after = None;
    for _ in 0..=all.len() {
        let query = match after {
            None => EventQuery::oldest(1),
            Some(id) => EventQuery::after(id, 1),
        }
        .with_providers(view(&["p1"]));
        let EventsPage::Events { events, through } = read(fixtures, &org, &query).await? else {
            return Err(format!(
                "a page of 1 of the view answered otherwise: {query:?}"
            ));
        };
        walked.extend(events);
        if through.is_none() {
            break;
        }
        after = through;
    }
    ensure!(
        walked == read_p1,
        "pages of 1 of the view of p1 give other events than one page"
    );
    for (index, event) in all.iter().enumerate() {
        let after = events(
            fixtures,
            &org,
            &EventQuery::after(event.id, 100).with_providers(view(&["p1"])),
        )
        .await?;
        let want: Vec<&FeedEvent> = read_p1
            .iter()
            .filter(|seen| all[index + 1..].iter().any(|later| later.id == seen.id))
            .collect();
        ensure!(
            after.iter().collect::<Vec<_>>() == want,
            "the view of p1 after event {} gives {} events, not {}",
            event.id,
            after.len(),
            want.len()
        );
    }
    // Types in the view are the view's types.
    let created = OrderChanges::NONE.with(OrderChange::Created);
    let got = events(fixtures, &org, &p1.clone().with_types(created)).await?;
    let want: Vec<&FeedEvent> = read_p1
        .iter()
        .filter(|event| event.change == OrderChange::Created)
        .collect();
    ensure!(
        got.iter().collect::<Vec<_>>() == want,
        "the creations of the view of p1 are {} events, not {}",
        got.len(),
        want.len()
    );
    // A view of two providers: the order moved between them is updated in it; one of
    // nobody's providers holds nothing; the view of every order is the feed.
    let both = events(
        fixtures,
        &org,
        &EventQuery::oldest(100).with_providers(view(&["p1", "p3"])),
    )
    .await?;
    let kinds: Vec<OrderChange> = both.iter().map(|event| event.change).collect();
    let want = [
        OrderChange::Created,
        OrderChange::Created,
        OrderChange::Updated,
        OrderChange::Created,
        OrderChange::Updated,
        OrderChange::Updated,
        OrderChange::Updated,
        OrderChange::Deleted,
        OrderChange::Deleted,
    ];
    ensure!(
        kinds == want,
        "the view of p1 and p3 holds {kinds:?}, not {want:?}"
    );
    let nobody = events(
        fixtures,
        &org,
        &EventQuery::oldest(100).with_providers(view(&["p9"])),
    )
    .await?;
    ensure!(
        nobody.is_empty(),
        "the view of p9 holds {} events",
        nobody.len()
    );
    let every = events(
        fixtures,
        &org,
        &EventQuery::oldest(100).with_providers(None),
    )
    .await?;
    ensure!(every == all, "the view of every order is not the feed");
    Ok(())
}

/// Checks that the revision of `organization_id`'s feed, `after` a write, is one it never was
/// (`seen`), and adds it to them.
fn new_revision<S: EventFeed>(
    store: &S,
    organization_id: &str,
    seen: &mut Vec<u64>,
    after: &str,
) -> Check {
    let revision = store
        .revision_now(organization_id)
        .ok_or_else(|| format!("no revision after {after}, where there was one before"))?;
    ensure!(
        !seen.contains(&revision),
        "the feed's revision after {after} is {revision}, one it was before: {seen:?}"
    );
    seen.push(revision);
    Ok(())
}

async fn revisions<F: StoreFixtures>(fixtures: &F) -> Check
where
    F::Store: EventFeed,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "revisions").await?;
    let store = fixtures.store();
    let mut seen = Vec::new();
    new_revision(store, &org.id, &mut seen, "the organization was made")?;
    let first = order(format!("{ns}-a"), 1_000);
    add_orders(fixtures, &org.id, std::slice::from_ref(&first)).await?;
    new_revision(store, &org.id, &mut seen, "an order was added")?;
    add_orders(fixtures, &org.id, &[order(format!("{ns}-b"), 2_000)]).await?;
    new_revision(store, &org.id, &mut seen, "a second order was added")?;
    set_running(fixtures, &org.id, &first).await?;
    new_revision(store, &org.id, &mut seen, "an order was updated")?;
    fixtures
        .remove_order(&org.id, &first.id)
        .await
        .map_err(failed("remove_order"))?;
    new_revision(store, &org.id, &mut seen, "an order was removed")?;
    Ok(())
}
