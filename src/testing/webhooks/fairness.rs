//! The fairness of claims ([`ClaimRequest`]'s equal parts): with the worker's slots given,
//! an organization with many due deliveries takes at most its part of them, and one with a
//! single due delivery still gets it in the same claim.

use super::*;

/// Two organizations of the check's own: one with twelve due deliveries, one with one; a claim
/// sharing 6 slots gives the first at most its part (6 / 3 with both due, less with others
/// due in the store), and the second its one.
pub(super) async fn equal_parts<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let busy = organization(fixtures, &ns, "many").await?;
    let newcomer = organization(fixtures, &ns, "one").await?;
    let store = fixtures.store();
    let mut busy_endpoints = Vec::new();
    for n in 0..3 {
        let url = format!("https://example.com/many/{n}");
        let id = add(store, &busy.id, NewEndpoint::new(url)).await?.record.id;
        for _ in 0..4 {
            store
                .send_test(&busy.id, &id)
                .await
                .map_err(failed("send_test"))?;
        }
        busy_endpoints.push(id);
    }
    let single = add(
        store,
        &newcomer.id,
        NewEndpoint::new("https://example.com/one"),
    )
    .await?
    .record
    .id;
    store
        .send_test(&newcomer.id, &single)
        .await
        .map_err(failed("send_test"))?;
    let shared = ClaimRequest::new(100, 100, LEASE).with_slots(6);
    let claimed = store.claim(&shared).await.map_err(failed("claim"))?;
    let of = |organization_id: &str| {
        claimed
            .iter()
            .filter(|delivery| delivery.organization_id == organization_id)
            .count()
    };
    let (many, one) = (of(&busy.id), of(&newcomer.id));
    ensure!(
        (1..=2).contains(&many),
        "with 6 slots shared by at least 2 organizations due, one took {many} (at most 2)"
    );
    ensure!(one == 1, "the organization with one due delivery got {one}");
    // What is left, claimed without parts, and everything finished, for the next checks.
    let rest = store
        .claim(&ClaimRequest::new(10_000, 10_000, LEASE))
        .await
        .map_err(failed("claim"))?;
    for delivery in claimed.iter().chain(&rest) {
        finish(store, delivery, AttemptOutcome::Succeeded, NextStep::Done).await?;
    }
    for id in &busy_endpoints {
        remove(store, &busy.id, id).await?;
    }
    remove(store, &newcomer.id, &single).await
}
