//! The check that an endpoint limited to providers hears of its view of the orders' changes,
//! as a key limited to them reads the events feed.

use std::collections::HashMap;

use super::{add, body_json, finish, remove};
use crate::model::Order;
use crate::store::StoreErrorKind;
use crate::testing::calls::{order, organization};
use crate::testing::namespace;
use crate::testing::report::{ensure, failed, kind_of, Check};
use crate::testing::StoreFixtures;
use crate::webhooks::{
    AttemptOutcome, ClaimRequest, EventType, NewEndpoint, NextStep, WebhookManager, WebhookOutbox,
};

/// What each endpoint was delivered: per order, the event types in the order delivered, and
/// the bodies.
type Heard = HashMap<String, HashMap<String, Vec<(EventType, serde_json::Value)>>>;

/// Claims and succeeds every delivery of `endpoints` until none is left (one order's
/// deliveries to an endpoint are claimed one at a time, in order).
async fn deliver_all<S: WebhookOutbox>(store: &S, endpoints: &[&str]) -> Result<Heard, String> {
    let mut heard = Heard::new();
    for _ in 0..20 {
        let claimed = store
            .claim(&ClaimRequest::new(10_000, 10_000, super::LEASE))
            .await
            .map_err(failed("claim"))?;
        let ours: Vec<_> = claimed
            .iter()
            .filter(|delivery| endpoints.contains(&delivery.endpoint_id.as_str()))
            .collect();
        for delivery in &claimed {
            finish(store, delivery, AttemptOutcome::Succeeded, NextStep::Done).await?;
        }
        if ours.is_empty() {
            return Ok(heard);
        }
        for delivery in ours {
            let body = body_json(delivery)?;
            let order_id = body["data"]["id"].as_str().unwrap_or_default().to_owned();
            heard
                .entry(delivery.endpoint_id.clone())
                .or_default()
                .entry(order_id)
                .or_default()
                .push((delivery.event_type, body));
        }
    }
    Err("deliveries never ran out".into())
}

/// An endpoint limited to `p1` hears of an order that comes into the view as its creation, of
/// one that leaves it as its deletion (`{"id"}` only), of nothing outside it; one that
/// subscribes to deletions alone hears of those in its view; an endpoint of every order hears
/// of each change as it is, with the same event ids. Providers that cannot limit a key are
/// refused.
pub(super) async fn endpoint_views<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "views").await?;
    let store = fixtures.store();
    let limited = add(
        store,
        &org.id,
        NewEndpoint::new("https://example.com/p1").with_providers(&["p1", "p1"]),
    )
    .await?
    .record;
    ensure!(
        limited.providers == Some(vec!["p1".to_owned()]),
        "an endpoint added for p1, p1 is recorded with {:?}",
        limited.providers
    );
    let deletions = add(
        store,
        &org.id,
        NewEndpoint::new("https://example.com/p1-deleted")
            .with_providers(&["p1"])
            .with_events([EventType::OrderDeleted]),
    )
    .await?
    .record;
    let every = add(store, &org.id, NewEndpoint::new("https://example.com/all"))
        .await?
        .record;
    for bad in [Vec::new(), vec![String::new()], vec!["p\u{7}".to_owned()]] {
        let answer = kind_of(
            store
                .add_endpoint(
                    &org.id,
                    NewEndpoint::new("https://example.com/bad").with_providers(&bad),
                )
                .await,
        );
        ensure!(
            answer == Some(StoreErrorKind::InvalidData),
            "an endpoint for providers {bad:?} answered {answer:?}, not InvalidData"
        );
    }

    let with = |id: &str, millis: i64, providers: &[&str]| Order {
        providers: providers.iter().map(|&p| p.to_owned()).collect(),
        ..order(format!("{ns}-{id}"), millis)
    };
    let (one, two) = (with("one", 1, &["p1"]), with("two", 2, &["p2"]));
    fixtures
        .add_orders(&org.id, &[one.clone(), two.clone()])
        .await
        .map_err(failed("add_orders"))?;
    for changed in [with("two", 2, &["p2", "p1"]), with("one", 1, &["p2"])] {
        fixtures
            .update_order(&org.id, &changed)
            .await
            .map_err(failed("update_order"))?;
    }
    fixtures
        .remove_order(&org.id, &two.id)
        .await
        .map_err(failed("remove_order"))?;

    let heard = deliver_all(store, &[&limited.id, &deletions.id, &every.id]).await?;
    let kinds = |endpoint: &str, order: &Order| -> Vec<EventType> {
        heard
            .get(endpoint)
            .and_then(|orders| orders.get(&order.id))
            .map(|seen| seen.iter().map(|(kind, _)| *kind).collect())
            .unwrap_or_default()
    };
    use EventType::{OrderCreated as Created, OrderDeleted as Deleted, OrderUpdated as Updated};
    for (endpoint, order, want) in [
        (&limited.id, &one, vec![Created, Deleted]),
        (&limited.id, &two, vec![Created, Deleted]),
        (&deletions.id, &one, vec![Deleted]),
        (&deletions.id, &two, vec![Deleted]),
        (&every.id, &one, vec![Created, Updated]),
        (&every.id, &two, vec![Created, Updated, Deleted]),
    ] {
        let got = kinds(endpoint, order);
        ensure!(
            got == want,
            "endpoint {endpoint} heard {got:?} of {}, not {want:?}",
            order.id
        );
    }
    // The order that left the view: its id only, under the id of the update it was.
    let left = &heard[&limited.id][&one.id][1].1;
    let update = &heard[&every.id][&one.id][1].1;
    ensure!(
        left["data"] == serde_json::json!({ "id": one.id }) && left["id"] == update["id"],
        "the order that left p1's view was delivered as {left}, its update as {update}"
    );
    // The one that came in: the order after the change.
    let came_in = &heard[&limited.id][&two.id][0].1;
    ensure!(
        came_in["data"]["providers"] == serde_json::json!(["p2", "p1"]),
        "the order that came into p1's view was delivered as {came_in}"
    );
    for endpoint in [&limited.id, &deletions.id, &every.id] {
        remove(store, &org.id, endpoint).await?;
    }
    Ok(())
}
