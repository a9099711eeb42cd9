//! The webhooks suite: endpoints scoped to their organization, order events into the outbox,
//! and the outbox's claims and finishes (order per order, leases, current attempts, rounds of
//! tries, rotation, disabling).
//!
//! Claims are global to the store: run the suite where no dispatcher works the outbox.

use std::time::Duration;

mod audit_log;
mod fairness;
mod outbox;
mod versions;
mod views;

pub use audit_log::run_webhook_audit_log;

use super::calls::{order, organization};
use super::namespace;
use super::report::kind_of;
use super::report::{ensure, failed, Check, Report};
use super::StoreFixtures;
use crate::model::{EncodedOrder, Timestamp};
use crate::store::StoreErrorKind;
use crate::store::DEFAULT_MAX_WEBHOOK_ENDPOINTS;
use crate::webhooks::{
    AttemptOutcome, ClaimRequest, Delivery, EventType, FinishedAttempt, NewEndpoint, NextStep,
    WebhookManager, WebhookOutbox,
};

/// Runs every webhooks check against the store of `fixtures`. Its claims and its retention
/// check act on the whole outbox (retention deletes every message): run it on a store of its
/// own, where no dispatcher works.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = partner_api::MemoryStore::new();
/// partner_api::testing::run_webhooks(&store).await.assert_passed();
/// # }
/// ```
pub async fn run_webhooks<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let mut report = Report::default();
    report.results.push((
        "webhooks: endpoints are scoped and checked",
        endpoints(fixtures).await,
    ));
    report.results.push((
        "rule outbox-with-the-order: order writes raise events in order",
        outbox::order_events(fixtures).await,
    ));
    report.results.push((
        "webhooks: leases and current attempts",
        outbox::leases(fixtures).await,
    ));
    report.results.push((
        "webhooks: give up, retry, recover",
        outbox::rounds(fixtures).await,
    ));
    report.results.push((
        "webhooks: rotation, disabling, room per endpoint",
        endpoint_state(fixtures).await,
    ));
    report.results.push((
        "webhooks: room per organization",
        outbox::organization_room(fixtures).await,
    ));
    report.results.push((
        "webhooks: a claim shares the slots in equal parts",
        fairness::equal_parts(fixtures).await,
    ));
    report.results.push((
        "webhooks: endpoints per organization capped by its policy",
        endpoint_cap(fixtures).await,
    ));
    report.results.push((
        "webhooks: bodies at each endpoint's API version",
        versions::endpoint_versions(fixtures).await,
    ));
    report.results.push((
        "webhooks: an endpoint limited to providers hears of its view, as a key reads it",
        views::endpoint_views(fixtures).await,
    ));
    report.results.push((
        "webhooks: retention deletes old messages in batches",
        outbox::retention(fixtures).await,
    ));
    report
}

/// An organization has at most its policy's endpoints (by default
/// [`DEFAULT_MAX_WEBHOOK_ENDPOINTS`]): one more is a conflict, another organization is not
/// counted, and removing one makes room.
async fn endpoint_cap<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "capped").await?;
    let other = organization(fixtures, &ns, "beside").await?;
    let store = fixtures.store();
    let url = |n: usize| NewEndpoint::new(format!("https://example.com/hooks/cap/{n}"));
    let mut ids = Vec::new();
    for n in 0..DEFAULT_MAX_WEBHOOK_ENDPOINTS as usize {
        ids.push(add(store, &org.id, url(n)).await?.record.id);
    }
    ensure!(
        kind_of(store.add_endpoint(&org.id, url(99)).await) == Some(StoreErrorKind::Conflict),
        "an endpoint past the default cap of {DEFAULT_MAX_WEBHOOK_ENDPOINTS} was added"
    );
    let beside = add(store, &other.id, url(0)).await?;
    remove(store, &org.id, &ids.remove(0)).await?;
    ids.push(add(store, &org.id, url(100)).await?.record.id);
    for id in &ids {
        remove(store, &org.id, id).await?;
    }
    remove(store, &other.id, &beside.record.id).await
}

const LEASE: Duration = Duration::from_secs(60);

/// Claims everything due and keeps the deliveries to `endpoint_id`.
async fn claim_for<S: WebhookOutbox>(
    store: &S,
    endpoint_id: &str,
    request: ClaimRequest,
) -> Result<Vec<Delivery>, String> {
    let claimed = store.claim(&request).await.map_err(failed("claim"))?;
    Ok(claimed
        .into_iter()
        .filter(|delivery| delivery.endpoint_id == endpoint_id)
        .collect())
}

/// Claims everything due once, and splits it between `endpoints` (what each was claimed).
async fn claim_split<S: WebhookOutbox, const N: usize>(
    store: &S,
    endpoints: [&str; N],
) -> Result<[Vec<Delivery>; N], String> {
    let claimed = store
        .claim(&ClaimRequest::new(10_000, 10_000, LEASE))
        .await
        .map_err(failed("claim"))?;
    Ok(endpoints.map(|endpoint| {
        claimed
            .iter()
            .filter(|delivery| delivery.endpoint_id == endpoint)
            .cloned()
            .collect()
    }))
}

async fn claim_all<S: WebhookOutbox>(
    store: &S,
    endpoint_id: &str,
) -> Result<Vec<Delivery>, String> {
    claim_for(store, endpoint_id, ClaimRequest::new(10_000, 10_000, LEASE)).await
}

async fn finish<S: WebhookOutbox>(
    store: &S,
    delivery: &Delivery,
    outcome: AttemptOutcome,
    next: NextStep,
) -> Result<crate::webhooks::Finish, String> {
    let mut attempt = FinishedAttempt::new(outcome, Timestamp::now(), Duration::from_millis(3));
    attempt.next = next;
    if outcome == AttemptOutcome::Failed {
        attempt.response_status = Some(500);
    }
    store
        .finish(delivery, &attempt)
        .await
        .map_err(failed("finish"))
}

/// Adds an endpoint for a check.
async fn add<S: WebhookManager>(
    store: &S,
    organization_id: &str,
    new: NewEndpoint,
) -> Result<crate::webhooks::CreatedEndpoint, String> {
    store
        .add_endpoint(organization_id, new)
        .await
        .map_err(failed("add_endpoint"))
}

/// Removes an endpoint a check added, so that a shared store's outbox keeps nothing of it.
async fn remove<S: WebhookManager>(store: &S, organization_id: &str, endpoint_id: &str) -> Check {
    store
        .remove_endpoint(organization_id, endpoint_id)
        .await
        .map_err(failed("remove_endpoint"))
}

fn body_json(delivery: &Delivery) -> Result<serde_json::Value, String> {
    serde_json::from_slice(&delivery.body).map_err(|err| format!("a body is not JSON: {err}"))
}

async fn endpoints<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let other = organization(fixtures, &ns, "b").await?;
    let store = fixtures.store();
    let first = add(
        store,
        &org.id,
        NewEndpoint::new("https://example.com/hooks/1"),
    )
    .await?;
    let second = add(
        store,
        &org.id,
        NewEndpoint::new("https://example.com/hooks/2")
            .with_events([
                EventType::OrderDeleted,
                EventType::OrderCreated,
                EventType::OrderDeleted,
            ])
            .with_description("ops"),
    )
    .await?;
    ensure!(
        first.secret.expose().starts_with("whsec_") && first.secret != second.secret,
        "secrets are not distinct whsec_ secrets"
    );
    ensure!(
        second.record.events == [EventType::OrderCreated, EventType::OrderDeleted]
            && second.record.description == "ops"
            && second.record.enabled
            && second.record.organization_id == org.id,
        "the record of an added endpoint is {:?}",
        second.record
    );
    let listed = store
        .endpoints(&org.id)
        .await
        .map_err(failed("endpoints"))?;
    ensure!(
        listed == [second.record.clone(), first.record.clone()],
        "endpoints are not the organization's, newest first: {listed:?}"
    );
    ensure!(
        store
            .endpoints(&other.id)
            .await
            .map_err(failed("endpoints"))?
            .is_empty(),
        "another organization lists the endpoints"
    );
    let id = &first.record.id;
    ensure!(
        kind_of(store.endpoint(&other.id, id).await) == Some(StoreErrorKind::NotFound)
            && kind_of(store.rotate_secret(&other.id, id, LEASE).await)
                == Some(StoreErrorKind::NotFound)
            && kind_of(store.set_enabled(&other.id, id, false).await)
                == Some(StoreErrorKind::NotFound)
            && kind_of(store.send_test(&other.id, id).await) == Some(StoreErrorKind::NotFound)
            && kind_of(store.attempts(&other.id, id, 10).await) == Some(StoreErrorKind::NotFound)
            && kind_of(store.remove_endpoint(&other.id, id).await)
                == Some(StoreErrorKind::NotFound),
        "another organization reaches an endpoint"
    );
    ensure!(
        kind_of(store.endpoint(&org.id, "no-such-endpoint").await)
            == Some(StoreErrorKind::NotFound),
        "a made-up id is not NotFound"
    );
    ensure!(
        kind_of(
            store
                .add_endpoint(
                    &format!("{ns}_none"),
                    NewEndpoint::new("https://example.com/")
                )
                .await
        ) == Some(StoreErrorKind::NotFound),
        "an unknown organization got an endpoint"
    );
    for url in [
        "ftp://example.com/",
        "https://user:pw@example.com/",
        "/relative",
        "https://example.com/#x",
    ] {
        ensure!(
            kind_of(store.add_endpoint(&org.id, NewEndpoint::new(url)).await)
                == Some(StoreErrorKind::InvalidData),
            "the URL {url:?} was accepted"
        );
    }
    remove(store, &org.id, id).await?;
    ensure!(
        kind_of(store.endpoint(&org.id, id).await) == Some(StoreErrorKind::NotFound),
        "a removed endpoint is still found"
    );
    remove(store, &org.id, &second.record.id).await?;
    Ok(())
}

async fn endpoint_state<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let store = fixtures.store();
    let added = add(store, &org.id, NewEndpoint::new("https://example.com/")).await?;
    let id = &added.record.id;
    let rotated = store
        .rotate_secret(&org.id, id, Duration::from_secs(3600))
        .await
        .map_err(failed("rotate_secret"))?;
    store
        .send_test(&org.id, id)
        .await
        .map_err(failed("send_test"))?;
    let claimed = claim_all(store, id).await?;
    ensure!(
        claimed.len() == 1 && claimed[0].secrets == [rotated.secret.clone(), added.secret.clone()],
        "during the overlap a delivery is not signed with the new and the old secret"
    );
    // Disabled by a finish: reported once, then nothing is claimed and no test is taken.
    let mut attempt =
        FinishedAttempt::new(AttemptOutcome::Failed, Timestamp::now(), Duration::ZERO);
    attempt.response_status = Some(410);
    attempt.disable_endpoint = true;
    let done = store
        .finish(&claimed[0], &attempt)
        .await
        .map_err(failed("finish"))?;
    ensure!(
        done.current
            && done
                .disabled
                .as_ref()
                .is_some_and(|endpoint| !endpoint.enabled && endpoint.id == *id),
        "a finish that disables did not report the endpoint: {done:?}"
    );
    ensure!(
        kind_of(store.send_test(&org.id, id).await) == Some(StoreErrorKind::Conflict),
        "a disabled endpoint took a test"
    );
    store
        .set_enabled(&org.id, id, true)
        .await
        .map_err(failed("set_enabled"))?;
    let rotated_again = store
        .rotate_secret(&org.id, id, Duration::ZERO)
        .await
        .map_err(failed("rotate_secret"))?;
    for _ in 0..3 {
        store
            .send_test(&org.id, id)
            .await
            .map_err(failed("send_test"))?;
    }
    let two = claim_for(store, id, ClaimRequest::new(100, 2, LEASE)).await?;
    ensure!(
        two.len() == 2,
        "with room for 2 per endpoint, {} were claimed",
        two.len()
    );
    ensure!(
        two.iter().all(
            |delivery| delivery.secrets == [rotated_again.secret.clone()]
                && delivery.failing_since.is_none()
        ),
        "after a rotation without overlap, or re-enabling, deliveries are {two:?}"
    );
    let busy = ClaimRequest::new(100, 2, LEASE).with_in_flight(vec![(id.clone(), 2)]);
    ensure!(
        claim_for(store, id, busy).await?.is_empty(),
        "an endpoint at its room got more"
    );
    for delivery in &two {
        finish(store, delivery, AttemptOutcome::Succeeded, NextStep::Done).await?;
    }
    let rest = claim_all(store, id).await?;
    ensure!(
        rest.len() == 1,
        "the third test message is not due: {rest:?}"
    );
    finish(store, &rest[0], AttemptOutcome::Succeeded, NextStep::Done).await?;
    remove(store, &org.id, id).await?;
    Ok(())
}
