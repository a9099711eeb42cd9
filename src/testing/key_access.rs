//! The key-management checks of [`KeyAbility::Restrictions`](crate::store::KeyAbility): what
//! a key may read, its permissions and providers, on issue, lookup, change and roll.

use std::time::Duration;

use super::calls::{issue, lookup, organization, record_of};
use super::namespace;
use super::report::kind_of;
use super::report::{ensure, failed, Check};
use super::StoreFixtures;
use crate::key::{KeyEnvironment, Permission, Permissions, MAX_KEY_PROVIDERS};
use crate::store::{KeyManager, NewKey, Principal, RollKey, StoreErrorKind};

/// What `principal` may read, for the messages.
fn access(principal: Option<&Principal>) -> Option<(Permissions, Option<Vec<String>>)> {
    principal.map(|principal| {
        (
            principal.permissions(),
            principal.providers().map(|providers| providers.to_vec()),
        )
    })
}

pub(super) async fn permissions_and_providers<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let other = organization(fixtures, &ns, "b").await?;
    let store = fixtures.store();
    let orders = Permissions::of([Permission::Orders]);
    let providers = |names: &[&str]| Some(names.iter().map(|&name| name.to_owned()).collect());

    // A key issued without restrictions reads everything.
    let full = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Live)).await?;
    let principal = lookup(fixtures, full.plaintext()).await?;
    ensure!(
        full.record().permissions == Permissions::ALL
            && full.record().providers.is_none()
            && access(principal.as_ref()) == Some((Permissions::ALL, None)),
        "a key issued without restrictions has {:?} and {:?}, and resolves to {:?}",
        full.record().permissions,
        full.record().providers,
        access(principal.as_ref())
    );

    // Issued with both: kept as given, the providers sorted and each once, and resolved so.
    let limited = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Live)
            .with_permissions(orders)
            .with_providers(&["p2", "p1", "p2"]),
    )
    .await?;
    let id = limited.record().id.clone();
    let want = (orders, providers(&["p1", "p2"]));
    let record = record_of(fixtures, &org.id, &id).await?;
    ensure!(
        (record.permissions, record.providers.clone()) == want,
        "a key issued for orders of p2, p1, p2 is recorded as {:?} and {:?}",
        record.permissions,
        record.providers
    );
    let principal = lookup(fixtures, limited.plaintext()).await?;
    ensure!(
        access(principal.as_ref()) == Some(want.clone()),
        "a key issued for orders of p1 and p2 resolves to {:?}",
        access(principal.as_ref())
    );

    // Providers alone: every permission, the events feed in the providers' view.
    let viewer = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Live).with_providers(&["p1"]),
    )
    .await?;
    let principal = lookup(fixtures, viewer.plaintext()).await?;
    ensure!(
        access(principal.as_ref()) == Some((Permissions::ALL, providers(&["p1"]))),
        "a key issued for the orders of p1 alone resolves to {:?}",
        access(principal.as_ref())
    );

    // Providers that are no list of 1 to 50 ids are refused, and nothing changes.
    let too_many: Vec<String> = (0..=MAX_KEY_PROVIDERS).map(|n| format!("p{n}")).collect();
    for bad in [
        Vec::new(),
        too_many,
        vec!["p\u{7}".to_owned()],
        vec![String::new()],
    ] {
        let answer = kind_of(store.set_providers(&org.id, &id, Some(bad.clone())).await);
        ensure!(
            answer == Some(StoreErrorKind::InvalidData),
            "providers {bad:?} answered {answer:?}, not InvalidData"
        );
    }
    ensure!(
        record_of(fixtures, &org.id, &id).await? == record,
        "a refused change of providers changed the key"
    );

    // Changed: seen by the very next lookup; a change to what the key has changes nothing.
    let changed = store
        .set_providers(&org.id, &id, providers(&["p3"]))
        .await
        .map_err(failed("set_providers"))?;
    let principal = lookup(fixtures, limited.plaintext()).await?;
    ensure!(
        changed.providers == providers(&["p3"])
            && access(principal.as_ref()) == Some((orders, providers(&["p3"]))),
        "after a change to p3 the key has {:?} and resolves to {:?}",
        changed.providers,
        access(principal.as_ref())
    );
    let again = store
        .set_providers(&org.id, &id, providers(&["p3"]))
        .await
        .map_err(failed("set_providers to the same providers"))?;
    ensure!(
        again == changed,
        "setting a key's own providers changed its record: {again:?}"
    );
    let none = store
        .set_permissions(&org.id, &id, Permissions::NONE)
        .await
        .map_err(failed("set_permissions"))?;
    let principal = lookup(fixtures, limited.plaintext()).await?;
    ensure!(
        none.permissions == Permissions::NONE
            && access(principal.as_ref()).map(|(permissions, _)| permissions)
                == Some(Permissions::NONE),
        "after a change to no permissions the key has {:?} and resolves to {:?}",
        none.permissions,
        access(principal.as_ref())
    );

    // A roll passes both on.
    let rolled = store
        .roll(&org.id, &id, RollKey::new(Duration::from_secs(60)))
        .await
        .map_err(failed("roll"))?;
    let principal = lookup(fixtures, rolled.plaintext()).await?;
    ensure!(
        (
            rolled.record().permissions,
            rolled.record().providers.clone()
        ) == (Permissions::NONE, providers(&["p3"]))
            && access(principal.as_ref()) == Some((Permissions::NONE, providers(&["p3"]))),
        "the key rolled from one of no permissions and p3 has {:?} and {:?}",
        rolled.record().permissions,
        rolled.record().providers
    );

    // Lifted: every order again, every permission again.
    let new_id = rolled.record().id.clone();
    store
        .set_providers(&org.id, &new_id, None)
        .await
        .map_err(failed("set_providers to none"))?;
    let lifted = store
        .set_permissions(&org.id, &new_id, Permissions::ALL)
        .await
        .map_err(failed("set_permissions to all"))?;
    let principal = lookup(fixtures, rolled.plaintext()).await?;
    ensure!(
        lifted.providers.is_none()
            && lifted.permissions == Permissions::ALL
            && access(principal.as_ref()) == Some((Permissions::ALL, None)),
        "a key whose restrictions were lifted has {:?} and {:?}",
        lifted.permissions,
        lifted.providers
    );

    for answer in [
        kind_of(store.set_permissions(&other.id, &new_id, orders).await),
        kind_of(store.set_providers(&other.id, &new_id, None).await),
    ] {
        ensure!(
            answer == Some(StoreErrorKind::NotFound),
            "another organization's key answered {answer:?}, not NotFound"
        );
    }
    Ok(())
}
