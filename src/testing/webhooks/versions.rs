//! The check that a store renders each endpoint's order bodies at the endpoint's API version.

use super::{add, body_json, claim_all, claim_split, finish, remove};
use crate::testing::calls::{order, organization};
use crate::testing::namespace;
use crate::testing::report::{ensure, failed, Check};
use crate::testing::StoreFixtures;
use crate::versions::{FIRST, NEWEST};
use crate::webhooks::{
    AttemptOutcome, NewEndpoint, NextStep, WebhookAbility, WebhookManager, WebhookOutbox,
};

/// An endpoint added at the first version gets an order's `data` without `updatedAt`, one at
/// the newest with it, the rest the same; each lists its version. A store that
/// offers [`WebhookAbility::ApiVersions`] renders a pinned endpoint's next attempt (a retry of
/// an earlier message) at the new version.
pub(super) async fn endpoint_versions<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "versions").await?;
    let store = fixtures.store();
    let first = add(
        store,
        &org.id,
        NewEndpoint::new("https://example.com/first").with_api_version(FIRST),
    )
    .await?
    .record;
    let newest = add(
        store,
        &org.id,
        NewEndpoint::new("https://example.com/newest"),
    )
    .await?
    .record;
    let listed = store
        .endpoints(&org.id)
        .await
        .map_err(failed("endpoints"))?;
    let version_of = |id: &str| {
        listed
            .iter()
            .find(|endpoint| endpoint.id == id)
            .map(|endpoint| endpoint.api_version)
    };
    ensure!(
        version_of(&first.id) == Some(Some(FIRST)) && version_of(&newest.id) == Some(Some(NEWEST)),
        "endpoints added at {FIRST} and by default are listed at {:?} and {:?}",
        version_of(&first.id),
        version_of(&newest.id)
    );

    fixtures
        .add_orders(&org.id, &[order(format!("{ns}_v1"), 1)])
        .await
        .map_err(failed("add_orders"))?;
    let [at_first, at_newest] = claim_split(store, [&first.id, &newest.id]).await?;
    ensure!(
        at_first.len() == 1 && at_newest.len() == 1,
        "one order change gave {} and {} deliveries",
        at_first.len(),
        at_newest.len()
    );
    let (old, new) = (body_json(&at_first[0])?, body_json(&at_newest[0])?);
    let mut without = new["data"].clone();
    let updated_at = without
        .as_object_mut()
        .and_then(|data| data.remove("updatedAt"));
    ensure!(
        old["data"].get("updatedAt").is_none() && updated_at.is_some(),
        "the endpoint at {FIRST} got {} and the one at {NEWEST} got {}",
        old["data"],
        new["data"]
    );
    ensure!(
        without == old["data"] && old["id"] == new["id"],
        "beyond updatedAt, the bodies differ: {old} and {new}"
    );
    finish(
        store,
        &at_newest[0],
        AttemptOutcome::Succeeded,
        NextStep::Done,
    )
    .await?;

    if store.supports(WebhookAbility::ApiVersions) {
        let retry = NextStep::RetryAt(crate::model::Timestamp::now());
        finish(store, &at_first[0], AttemptOutcome::Failed, retry).await?;
        let pinned = store
            .pin_api_version(&org.id, &first.id, NEWEST)
            .await
            .map_err(failed("pin_api_version"))?;
        ensure!(
            pinned.api_version == Some(NEWEST),
            "a pinned endpoint lists {:?}",
            pinned.api_version
        );
        let retried = claim_all(store, &first.id).await?;
        ensure!(
            retried.len() == 1,
            "the retry was claimed {} times",
            retried.len()
        );
        ensure!(
            body_json(&retried[0])? == new,
            "a retry after the pin was sent {}, not the body at {NEWEST}",
            body_json(&retried[0])?
        );
        finish(
            store,
            &retried[0],
            AttemptOutcome::Succeeded,
            NextStep::Done,
        )
        .await?;
    } else {
        finish(
            store,
            &at_first[0],
            AttemptOutcome::Succeeded,
            NextStep::Done,
        )
        .await?;
    }
    remove(store, &org.id, &first.id).await?;
    remove(store, &org.id, &newest.id).await
}
