//! The key-management checks of [`KeyAbility::ApiVersions`](crate::store::KeyAbility): each
//! key's pinned API version on issue, lookup, pin, roll and the 72 hours' way back.

use std::time::Duration;

use super::calls::{issue, lookup, organization, record_of};
use super::namespace;
use super::report::kind_of;
use super::report::{ensure, failed, Check};
use super::StoreFixtures;
use crate::key::KeyEnvironment;
use crate::model::Timestamp;
use crate::store::{KeyManager, NewKey, RollKey, StoreErrorKind, VERSION_ROLLBACK_WINDOW};
use crate::versions::{FIRST, NEWEST, UPDATED_AT};

pub(super) async fn api_versions<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let other = organization(fixtures, &ns, "b").await?;
    let store = fixtures.store();
    let newest = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Live)).await?;
    ensure!(
        newest.record().api_version == Some(NEWEST),
        "a key issued without a version is pinned to {:?}, not the newest",
        newest.record().api_version
    );
    let principal = lookup(fixtures, newest.plaintext()).await?;
    ensure!(
        principal.as_ref().and_then(|p| p.api_version) == Some(NEWEST),
        "a key issued at the newest version resolves to {principal:?}"
    );
    let first = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Live).with_api_version(FIRST),
    )
    .await?;
    let id = first.record().id.clone();
    ensure!(
        record_of(fixtures, &org.id, &id).await?.api_version == Some(FIRST),
        "get does not show the version the key was issued with"
    );
    // An upgrade: seen by the very next lookup, with the way back for 72 hours.
    let before = Timestamp::now();
    let upgraded = store
        .pin_api_version(&org.id, &id, UPDATED_AT)
        .await
        .map_err(failed("pin_api_version"))?;
    let after = Timestamp::now();
    let rollback = upgraded.api_version_rollback;
    ensure!(
        upgraded.api_version == Some(UPDATED_AT)
            && rollback.is_some_and(|rollback| rollback.to == FIRST
                && rollback.until
                    >= before.saturating_add(VERSION_ROLLBACK_WINDOW - Duration::from_secs(60))
                && rollback.until
                    <= after.saturating_add(VERSION_ROLLBACK_WINDOW + Duration::from_secs(60))),
        "an upgrade from {FIRST} to {UPDATED_AT} recorded {upgraded:?}"
    );
    let principal = lookup(fixtures, first.plaintext()).await?;
    ensure!(
        principal.as_ref().and_then(|p| p.api_version) == Some(UPDATED_AT),
        "after the upgrade the key resolves to {principal:?}"
    );
    let again = store
        .pin_api_version(&org.id, &id, UPDATED_AT)
        .await
        .map_err(failed("pin_api_version to the same version"))?;
    ensure!(
        again == upgraded,
        "pinning a key to its own version changed its record: {again:?}"
    );
    // The way back, once.
    let back = store
        .roll_back_api_version(&org.id, &id)
        .await
        .map_err(failed("roll_back_api_version"))?;
    ensure!(
        back.api_version == Some(FIRST) && back.api_version_rollback.is_none(),
        "a rollback of the upgrade gave {back:?}"
    );
    let principal = lookup(fixtures, first.plaintext()).await?;
    ensure!(
        principal.as_ref().and_then(|p| p.api_version) == Some(FIRST),
        "after the rollback the key resolves to {principal:?}"
    );
    let twice = kind_of(store.roll_back_api_version(&org.id, &id).await);
    ensure!(
        twice == Some(StoreErrorKind::Conflict),
        "a second rollback answered {twice:?}, not Conflict"
    );
    // Down is no upgrade: nothing to roll back.
    let down = store
        .pin_api_version(&org.id, newest.record().id.as_str(), FIRST)
        .await
        .map_err(failed("pin_api_version to an earlier version"))?;
    ensure!(
        down.api_version == Some(FIRST) && down.api_version_rollback.is_none(),
        "a pin to an earlier version gave {down:?}"
    );
    // A roll keeps the version.
    let rolled = store
        .roll(&org.id, &id, RollKey::new(Duration::from_secs(60)))
        .await
        .map_err(failed("roll"))?;
    ensure!(
        rolled.record().api_version == Some(FIRST),
        "the key rolled from one at {FIRST} is at {:?}",
        rolled.record().api_version
    );
    for answer in [
        kind_of(store.pin_api_version(&other.id, &id, UPDATED_AT).await),
        kind_of(store.roll_back_api_version(&other.id, &id).await),
    ] {
        ensure!(
            answer == Some(StoreErrorKind::NotFound),
            "another organization's key answered {answer:?}, not NotFound"
        );
    }
    Ok(())
}
