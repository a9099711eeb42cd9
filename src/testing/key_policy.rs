//! The key-management checks of the policy keys obey: a roll never revives a key nor drops
//! its expiry, and an organization's maximum lifetime and cap on active keys hold.

use std::time::Duration;

use super::calls::organization;
use super::calls::{issue, record_of, resolves, EXPIRY};
use super::namespace;
use super::report::kind_of;
use super::report::{ensure, failed, Check};
use super::StoreFixtures;
use crate::key::KeyEnvironment;
use crate::model::Timestamp;
use crate::store::StoreErrorKind;
use crate::store::{KeyManager, KeyPolicy, NewKey, RollKey};

const DAY: Duration = Duration::from_secs(86_400);

/// Whether `at` is `expected` give or take a few seconds (the stores' clocks and the check's).
fn about(at: Option<Timestamp>, expected: Timestamp) -> bool {
    let slack = Duration::from_secs(5);
    at.is_some_and(|at| {
        at.saturating_add(slack) >= expected && expected.saturating_add(slack) >= at
    })
}

pub(super) async fn roll_keeps_expiry<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let store = fixtures.store();
    let expiring = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Live)
            .with_expires_at(Timestamp::now().saturating_add(30 * DAY)),
    )
    .await?;
    ensure!(
        expiring
            .record()
            .lifetime
            .is_some_and(|lifetime| lifetime.abs_diff(30 * DAY) < Duration::from_secs(5)),
        "a key issued for 30 days has the lifetime {:?}",
        expiring.record().lifetime
    );
    // Rolled later, the new key lives as long as the old one was issued for, from the roll.
    let rolled = store
        .roll(&org.id, &expiring.record().id, RollKey::new(EXPIRY))
        .await
        .map_err(failed("roll"))?;
    ensure!(
        about(
            rolled.record().expires_at,
            Timestamp::now().saturating_add(30 * DAY)
        ),
        "a 30-day key rolled into one expiring at {:?}",
        rolled.record().expires_at
    );
    ensure!(
        rolled.record().lifetime == expiring.record().lifetime,
        "the lifetime {:?} was not passed on: {:?}",
        expiring.record().lifetime,
        rolled.record().lifetime
    );
    // A lifetime the caller gives wins.
    let chosen = store
        .roll(
            &org.id,
            &rolled.record().id,
            RollKey::new(Duration::ZERO).with_expires_in(7 * DAY),
        )
        .await
        .map_err(failed("roll with a lifetime"))?;
    ensure!(
        about(
            chosen.record().expires_at,
            Timestamp::now().saturating_add(7 * DAY)
        ),
        "a roll asked for 7 days gave a key expiring at {:?}",
        chosen.record().expires_at
    );
    // A key without expiry rolls into a key without expiry.
    let forever = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Live)).await?;
    let still = store
        .roll(&org.id, &forever.record().id, RollKey::new(Duration::ZERO))
        .await
        .map_err(failed("roll"))?;
    ensure!(
        still.record().expires_at.is_none() && still.record().lifetime.is_none(),
        "a key without expiry rolled into {:?}",
        still.record()
    );
    // An expired key is refused, whatever was asked, and nothing new works.
    let short = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Live).with_expires_at(Timestamp::now().saturating_add(EXPIRY)),
    )
    .await?;
    tokio::time::sleep(EXPIRY + Duration::from_millis(500)).await;
    let before = store.list(&org.id).await.map_err(failed("list"))?.len();
    for roll in [
        RollKey::new(DAY),
        RollKey::new(Duration::ZERO).with_expires_in(DAY),
    ] {
        ensure!(
            kind_of(store.roll(&org.id, &short.record().id, roll).await)
                == Some(StoreErrorKind::Conflict),
            "an expired key was rolled ({roll:?})"
        );
    }
    let after = store.list(&org.id).await.map_err(failed("list"))?.len();
    ensure!(before == after, "a refused roll added a key");
    let record = record_of(fixtures, &org.id, &short.record().id).await?;
    ensure!(
        !record.is_active_at(Timestamp::now()),
        "a refused roll revived the expired key: {record:?}"
    );
    ensure!(
        !resolves(fixtures, short.plaintext(), &org).await?,
        "the expired key resolves"
    );
    Ok(())
}

pub(super) async fn organization_policy<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let store = fixtures.store();
    let default = store
        .key_policy(&org.id)
        .await
        .map_err(failed("key_policy"))?;
    ensure!(
        default == KeyPolicy::default(),
        "a new organization's policy is {default:?}"
    );
    ensure!(
        kind_of(store.key_policy(&format!("{ns}_missing")).await) == Some(StoreErrorKind::NotFound),
        "an unknown organization has a policy"
    );
    let forever = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Live)).await?;
    let policy = KeyPolicy::new()
        .with_max_lifetime(Some(30 * DAY))
        .with_max_active_keys(3)
        .with_default_api_version(Some(crate::versions::FIRST));
    let set = store
        .set_key_policy(&org.id, policy)
        .await
        .map_err(failed("set_key_policy"))?;
    ensure!(set == policy, "set {policy:?}, got {set:?}");
    let read = store
        .key_policy(&org.id)
        .await
        .map_err(failed("key_policy"))?;
    ensure!(read == policy, "set {policy:?}, read {read:?}");
    let live = NewKey::new(KeyEnvironment::Live);
    ensure!(
        kind_of(store.issue(&org.id, live.clone()).await) == Some(StoreErrorKind::InvalidData),
        "a key without expiry was issued under a maximum lifetime"
    );
    let long = live
        .clone()
        .with_expires_at(Timestamp::now().saturating_add(31 * DAY));
    ensure!(
        kind_of(store.issue(&org.id, long).await) == Some(StoreErrorKind::InvalidData),
        "a key longer than the maximum lifetime was issued"
    );
    // The key issued before the policy keeps working, but rolls only into a key that obeys.
    ensure!(
        kind_of(
            store
                .roll(&org.id, &forever.record().id, RollKey::new(Duration::ZERO))
                .await
        ) == Some(StoreErrorKind::InvalidData),
        "a key without expiry was rolled into another under a maximum lifetime"
    );
    let within = store
        .roll(
            &org.id,
            &forever.record().id,
            RollKey::new(Duration::ZERO).with_expires_in(30 * DAY),
        )
        .await
        .map_err(failed("roll within the maximum"))?;
    ensure!(
        about(
            within.record().expires_at,
            Timestamp::now().saturating_add(30 * DAY)
        ),
        "rolled within the maximum, expires at {:?}",
        within.record().expires_at
    );
    // The cap: `within` is one active key; two more fit, the fourth does not.
    let month = || {
        live.clone()
            .with_expires_at(Timestamp::now().saturating_add(DAY))
    };
    let second = issue(fixtures, &org.id, month()).await?;
    issue(fixtures, &org.id, month()).await?;
    ensure!(
        kind_of(store.issue(&org.id, month()).await) == Some(StoreErrorKind::Conflict),
        "a key beyond the cap of active keys was issued"
    );
    // At the cap a roll still works (its overlap makes one more), a second one does not.
    let rolled = store
        .roll(&org.id, &second.record().id, RollKey::new(DAY))
        .await
        .map_err(failed("roll at the cap"))?;
    ensure!(
        kind_of(
            store
                .roll(&org.id, &rolled.record().id, RollKey::new(DAY))
                .await
        ) == Some(StoreErrorKind::Conflict),
        "a roll beyond the cap and its one overlap was made"
    );
    // Revoked keys do not count.
    store
        .revoke(&org.id, &second.record().id)
        .await
        .map_err(failed("revoke"))?;
    store
        .revoke(&org.id, &rolled.record().id)
        .await
        .map_err(failed("revoke"))?;
    issue(fixtures, &org.id, month()).await?;
    Ok(())
}
