//! The key-management checks of what restricts a key beyond its lifetime: the address ranges
//! it may be used from, and its revocation when a secret scanner reports it leaked.

use std::time::Duration;

use super::calls::{issue, record_of};
use super::calls::{lookup, lookup_outcome, organization};
use super::namespace;
use super::report::kind_of;
use super::report::{ensure, failed, Check};
use super::StoreFixtures;
use crate::key::KeyDigest;
use crate::key::{AllowedIps, KeyEnvironment};
use crate::model::Timestamp;
use crate::store::{KeyLookup, StoreErrorKind};
use crate::store::{KeyManager, Leak, LeakReport, NewKey, RevocationReason, RollKey};

fn ranges(texts: &[&str]) -> Result<AllowedIps, String> {
    AllowedIps::parse(texts).map_err(|err| format!("the check's ranges do not parse: {err}"))
}

pub(super) async fn allowed_ips<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let other = organization(fixtures, &ns, "b").await?;
    let store = fixtures.store();
    let pinned = ranges(&["127.0.0.2/32", "2001:db8::/48"])?;
    let issued = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Live).with_allowed_ips(pinned.clone()),
    )
    .await?;
    let id = issued.record().id.clone();
    ensure!(
        issued.record().allowed_ips == pinned,
        "a key issued with {pinned:?} has the record {:?}",
        issued.record().allowed_ips
    );
    ensure!(
        record_of(fixtures, &org.id, &id).await?.allowed_ips == pinned,
        "get does not show the ranges the key was issued with"
    );
    let principal = lookup(fixtures, issued.plaintext()).await?;
    ensure!(
        principal
            .as_ref()
            .is_some_and(|p| *p.allowed_ips() == pinned),
        "a pinned key resolves to {principal:?}"
    );
    // A change is seen by the very next lookup, as a revocation is.
    let changed = ranges(&["198.51.100.0/24"])?;
    let record = store
        .restrict(&org.id, &id, changed.clone())
        .await
        .map_err(failed("restrict"))?;
    ensure!(
        record.allowed_ips == changed,
        "restrict returned {record:?}"
    );
    let principal = lookup(fixtures, issued.plaintext()).await?;
    ensure!(
        principal
            .as_ref()
            .is_some_and(|p| *p.allowed_ips() == changed),
        "after restrict the key resolves to {principal:?}"
    );
    // Another organization cannot touch it.
    ensure!(
        kind_of(store.restrict(&other.id, &id, AllowedIps::any()).await)
            == Some(StoreErrorKind::NotFound),
        "another organization restricted the key"
    );
    ensure!(
        record_of(fixtures, &org.id, &id).await?.allowed_ips == changed,
        "another organization's restrict changed the key"
    );
    // A roll keeps the restriction: rotating must never widen where a key works.
    let rolled = store
        .roll(&org.id, &id, RollKey::new(Duration::ZERO))
        .await
        .map_err(failed("roll"))?;
    ensure!(
        rolled.record().allowed_ips == changed,
        "a roll dropped the ranges: {:?}",
        rolled.record().allowed_ips
    );
    let principal = lookup(fixtures, rolled.plaintext()).await?;
    ensure!(
        principal
            .as_ref()
            .is_some_and(|p| *p.allowed_ips() == changed),
        "the rolled key resolves to {principal:?}"
    );
    // No ranges lifts the restriction.
    let lifted = store
        .restrict(&org.id, &rolled.record().id, AllowedIps::any())
        .await
        .map_err(failed("restrict"))?;
    let principal = lookup(fixtures, rolled.plaintext()).await?;
    ensure!(
        lifted.allowed_ips.is_any() && principal.is_some_and(|p| p.allowed_ips().is_any()),
        "a lifted restriction is still there: {lifted:?}"
    );
    Ok(())
}

pub(super) async fn leaked<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let a = organization(fixtures, &ns, "a").await?;
    let b = organization(fixtures, &ns, "b").await?;
    let store = fixtures.store();
    let in_a = issue(fixtures, &a.id, NewKey::new(KeyEnvironment::Live)).await?;
    let in_b = issue(fixtures, &b.id, NewKey::new(KeyEnvironment::Test)).await?;
    let revoked = issue(fixtures, &a.id, NewKey::new(KeyEnvironment::Live)).await?;
    let untouched = issue(fixtures, &a.id, NewKey::new(KeyEnvironment::Live)).await?;
    let first_revocation = store
        .revoke(&a.id, &revoked.record().id)
        .await
        .map_err(failed("revoke"))?;
    ensure!(
        first_revocation.revoked_reason == Some(RevocationReason::Manual)
            && first_revocation.leak.is_none(),
        "a key revoked by id reads {first_revocation:?}"
    );
    let reported_at = Timestamp::now();
    let report = |key: &str, n: u32| LeakReport {
        digest: KeyDigest::of(key),
        leak: Leak {
            url: format!("https://github.com/example/repo/blob/main/config-{n}.env"),
            source: "content".to_owned(),
            reported_at,
        },
    };
    let reports = [
        report(in_a.plaintext(), 1),
        report("pk_live_not-a-key-any-store-knows", 2),
        report(in_b.plaintext(), 3),
        report(revoked.plaintext(), 4),
        report(in_a.plaintext(), 5),
    ];
    let found = store
        .revoke_leaked(&reports)
        .await
        .map_err(failed("revoke_leaked"))?;
    ensure!(
        found.len() == reports.len(),
        "{} answers to {} reports",
        found.len(),
        reports.len()
    );
    let shape: Vec<Option<(String, bool)>> = found
        .iter()
        .map(|leaked| {
            leaked
                .as_ref()
                .map(|l| (l.record.id.clone(), l.first_report))
        })
        .collect();
    let expected = vec![
        Some((in_a.record().id.clone(), true)),
        None,
        Some((in_b.record().id.clone(), true)),
        Some((revoked.record().id.clone(), true)),
        Some((in_a.record().id.clone(), false)),
    ];
    ensure!(
        shape == expected,
        "the reports were answered {shape:?}, not {expected:?}"
    );
    for (key, org, n) in [(&in_a, &a, 1), (&in_b, &b, 3)] {
        let record = record_of(fixtures, &org.id, &key.record().id).await?;
        ensure!(
            record.revoked_at.is_some() && record.revoked_reason == Some(RevocationReason::Leaked),
            "a reported key reads {record:?}"
        );
        ensure!(
            record.leak.as_ref() == Some(&report(key.plaintext(), n).leak),
            "a reported key's leak reads {:?}",
            record.leak
        );
        let outcome = lookup_outcome(fixtures, key.plaintext()).await?;
        ensure!(
            matches!(outcome, KeyLookup::Revoked { .. }),
            "a reported key looks up as {outcome:?}"
        );
    }
    // An earlier revocation stays the first: its time and its reason.
    let record = record_of(fixtures, &a.id, &revoked.record().id).await?;
    ensure!(
        record.revoked_at == first_revocation.revoked_at
            && record.revoked_reason == Some(RevocationReason::Manual)
            && record.leak.is_some(),
        "a key revoked by hand, then reported, reads {record:?}"
    );
    // The same report again changes nothing, and is not a first report.
    let before = record_of(fixtures, &a.id, &in_a.record().id).await?;
    let again = store
        .revoke_leaked(&[report(in_a.plaintext(), 9)])
        .await
        .map_err(failed("revoke_leaked"))?;
    ensure!(
        matches!(again.as_slice(), [Some(leaked)] if !leaked.first_report && leaked.record == before),
        "a replayed report gave {again:?}, the key was {before:?}"
    );
    ensure!(
        lookup(fixtures, untouched.plaintext()).await?.is_some(),
        "a key nobody reported stopped resolving"
    );
    ensure!(
        store
            .revoke_leaked(&[])
            .await
            .map_err(failed("revoke_leaked"))?
            .is_empty(),
        "an empty report had answers"
    );
    Ok(())
}
