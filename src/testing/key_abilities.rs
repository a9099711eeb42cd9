//! The conformance suites of [`KeyManager`]'s optional abilities ([`KeyAbility`]): key
//! policies, leak reports, last use, keys' API versions, restrictions; and the check that an ability a store does not claim
//! answers `Unsupported`.

use super::calls::organization;
use super::report::kind_of;
use super::report::{ensure, Check, Report};
use super::StoreFixtures;
use super::{
    key_access, key_lifecycle as lifecycle, key_policy as policy, key_restrictions, key_versions,
    namespace,
};
use crate::store::StoreErrorKind;
use crate::store::{KeyAbility, KeyManager};

/// Runs the checks of [`KeyAbility::KeyPolicy`] (which the store must claim).
pub async fn run_key_policy<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    ability_report(
        fixtures,
        KeyAbility::KeyPolicy,
        "an organization's maximum lifetime and cap on active keys hold for issue and roll",
        policy::organization_policy(fixtures).await,
    )
}

/// Runs the checks of [`KeyAbility::LeakReports`] (which the store must claim).
pub async fn run_leak_reports<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    ability_report(
        fixtures,
        KeyAbility::LeakReports,
        "leaked keys are revoked in any organization, keeping their first revocation",
        key_restrictions::leaked(fixtures).await,
    )
}

/// Runs the checks of [`KeyAbility::LastUse`] (which the store must claim).
pub async fn run_last_use<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    ability_report(
        fixtures,
        KeyAbility::LastUse,
        "the latest recorded use is the key's last use",
        lifecycle::last_used(fixtures).await,
    )
}

/// Runs the checks of [`KeyAbility::ApiVersions`] (which the store must claim).
pub async fn run_api_versions<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    ability_report(
        fixtures,
        KeyAbility::ApiVersions,
        "each key's API version holds on issue, lookup, pin, roll and the 72 hours' way back",
        key_versions::api_versions(fixtures).await,
    )
}

/// Runs the checks of [`KeyAbility::Restrictions`] (which the store must claim).
pub async fn run_restrictions<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    ability_report(
        fixtures,
        KeyAbility::Restrictions,
        "each key's permissions and providers hold on issue, lookup, change and roll",
        key_access::permissions_and_providers(fixtures).await,
    )
}

/// The report of an ability's check, with whether the store claims it.
fn ability_report<F>(fixtures: &F, ability: KeyAbility, name: &'static str, result: Check) -> Report
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let mut report = Report::default();
    let claimed = if fixtures.store().supports(ability) {
        Ok(())
    } else {
        Err(format!(
            "the store does not claim {ability:?} (KeyManager::supports)"
        ))
    };
    report
        .results
        .push(("the store claims the ability", claimed));
    report.results.push((name, result));
    report
}

/// Each optional method of an ability the store does not claim answers `Unsupported`, so the
/// management service and the Settings page can hide it.
pub(super) async fn unclaimed_abilities<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "abilities").await?;
    let store = fixtures.store();
    let unsupported = Some(StoreErrorKind::Unsupported);
    for ability in KeyAbility::ALL {
        if store.supports(ability) {
            continue;
        }
        let answers = match ability {
            KeyAbility::KeyPolicy => vec![
                kind_of(store.key_policy(&org.id).await),
                kind_of(
                    store
                        .set_key_policy(&org.id, crate::store::KeyPolicy::new())
                        .await,
                ),
            ],
            KeyAbility::LeakReports => vec![kind_of(store.revoke_leaked(&[]).await)],
            KeyAbility::LastUse => vec![kind_of(store.record_last_used(&[]).await)],
            KeyAbility::ApiVersions => vec![
                kind_of(
                    store
                        .pin_api_version(&org.id, "key_0", crate::versions::FIRST)
                        .await,
                ),
                kind_of(store.roll_back_api_version(&org.id, "key_0").await),
            ],
            KeyAbility::Restrictions => vec![
                kind_of(
                    store
                        .set_permissions(&org.id, "key_0", crate::key::Permissions::ALL)
                        .await,
                ),
                kind_of(store.set_providers(&org.id, "key_0", None).await),
            ],
        };
        ensure!(
            answers.iter().all(|answer| *answer == unsupported),
            "{ability:?} is not claimed, yet its methods answered {answers:?}"
        );
    }
    Ok(())
}
