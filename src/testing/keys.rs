//! The conformance suite for [`KeyManager`]s: every operation, the cross-organization rules,
//! expiry, the roll's overlap, last uses, and the error kinds both shipped stores report.

use std::time::Duration;

use super::calls::{issue, key, lookup, organization, record_of, resolves};
use super::report::{ensure, failed, kind_of, Check, Report};
use super::StoreFixtures;
use super::{key_lifecycle as lifecycle, key_policy as policy, key_restrictions, namespace};
use crate::key::KeyDigest;
use crate::key::KeyEnvironment;
use crate::model::Timestamp;
use crate::store::StoreErrorKind;
use crate::store::{IssuedKey, KeyManager, NewKey, RollKey};

/// Runs the checks of [`KeyManager`]'s required methods against the store of `fixtures`,
/// and checks that each optional ability the store does not claim
/// ([`KeyManager::supports`]) answers `Unsupported`. Two checks wait for keys to expire, so
/// the suite takes a few seconds; each check uses organizations of its own. The abilities
/// have suites of their own: [`run_key_policy`](super::run_key_policy),
/// [`run_leak_reports`](super::run_leak_reports), [`run_last_use`](super::run_last_use).
pub async fn run_key_manager<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let mut report = Report::default();
    let mut record = |name, result| report.results.push((name, result));
    record(
        "an issued key resolves to its organization and is shown once",
        issued(fixtures).await,
    );
    record(
        "a list is newest first and never holds a secret",
        listed(fixtures).await,
    );
    record(
        "a key revoked by id stops resolving at once, others do not",
        revoked_by_id(fixtures).await,
    );
    record(
        "another organization's key is not found for every operation, and nothing changes",
        other_organization(fixtures).await,
    );
    record(
        "an unknown organization or key id is not found",
        unknown(fixtures).await,
    );
    record(
        "an expiry in the past is refused; a key stops resolving at its expiry",
        lifecycle::expiry(fixtures).await,
    );
    record(
        "a roll keeps label and environment, and both keys work until the overlap ends",
        lifecycle::rolled(fixtures).await,
    );
    record(
        "a roll never revives an expired key, and passes on the lifetime or takes the one given",
        policy::roll_keeps_expiry(fixtures).await,
    );
    record(
        "a key's allowed address ranges are kept, seen by the next lookup and passed on by a roll",
        key_restrictions::allowed_ips(fixtures).await,
    );
    record(
        "a duplicate is a conflict and an unknown organization not found",
        lifecycle::error_kinds(fixtures).await,
    );
    record(
        "an ability the store does not claim answers Unsupported",
        super::key_abilities::unclaimed_abilities(fixtures).await,
    );
    report
}

async fn issued<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let before = Timestamp::now();
    let issued = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Test).with_label("Reporting"),
    )
    .await?;
    let plaintext = issued.plaintext();
    let record = issued.record();
    ensure!(
        plaintext.starts_with("pk_test_") && plaintext.len() == 38,
        "a test key reads {} characters",
        plaintext.len()
    );
    let principal = lookup(fixtures, plaintext)
        .await?
        .ok_or("the issued key does not resolve")?;
    ensure!(
        *principal.organization == org,
        "the key resolved to {:?}",
        principal.organization
    );
    ensure!(
        *principal.key_id == record.id,
        "the principal's key id {} is not the record's {}",
        principal.key_id,
        record.id
    );
    ensure!(
        record.label.as_deref() == Some("Reporting"),
        "label {:?}",
        record.label
    );
    let hint = format!("pk_test_...{}", &plaintext[plaintext.len() - 4..]);
    ensure!(
        record.hint.as_deref() == Some(hint.as_str()),
        "hint {:?}, want {hint}",
        record.hint
    );
    ensure!(
        record.environment == Some(KeyEnvironment::Test),
        "environment {:?}",
        record.environment
    );
    let minute = Duration::from_secs(60);
    ensure!(
        record.created_at.saturating_add(minute) >= before
            && before.saturating_add(minute) >= record.created_at,
        "created at {}, issued at {before}",
        record.created_at
    );
    ensure!(
        record.expires_at.is_none() && record.last_used_at.is_none() && record.revoked_at.is_none(),
        "a new key has {record:?}"
    );
    let listed = fixtures
        .store()
        .list(&org.id)
        .await
        .map_err(failed("list"))?;
    ensure!(listed == [record.clone()], "the list holds {listed:?}");
    Ok(())
}

async fn listed<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let mut issued = Vec::new();
    for (index, environment) in [
        KeyEnvironment::Live,
        KeyEnvironment::Test,
        KeyEnvironment::Live,
    ]
    .into_iter()
    .enumerate()
    {
        let new = NewKey::new(environment).with_label(format!("key {index}"));
        issued.push(issue(fixtures, &org.id, new).await?);
    }
    // A key added the host's way is listed too, with what is known of it.
    let added = key(fixtures, &ns, "added", &org.id).await?;
    let listed = fixtures
        .store()
        .list(&org.id)
        .await
        .map_err(failed("list"))?;
    ensure!(listed.len() == 4, "listed {} keys of 4", listed.len());
    let listed_ids: Vec<&str> = listed[1..]
        .iter()
        .map(|record| record.id.as_str())
        .collect();
    let issued_ids: Vec<&str> = issued
        .iter()
        .rev()
        .map(|key| key.record().id.as_str())
        .collect();
    ensure!(
        listed_ids == issued_ids,
        "listed {listed_ids:?}, newest first is {issued_ids:?}"
    );
    let added_principal = lookup(fixtures, &added)
        .await?
        .ok_or("the added key does not resolve")?;
    ensure!(
        *listed[0].id == *added_principal.key_id,
        "the newest key is {:?}",
        listed[0].id
    );
    let json = serde_json::to_value(&listed).map_err(|err| err.to_string())?;
    let text = json.to_string();
    for secret in issued
        .iter()
        .map(IssuedKey::plaintext)
        .chain([added.as_str()])
    {
        ensure!(!text.contains(secret), "a list holds a plaintext key");
        let digest = KeyDigest::of(secret);
        let hex: String = digest
            .as_bytes()
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        ensure!(!text.contains(&hex), "a list holds a key's digest");
    }
    for record in json.as_array().into_iter().flatten() {
        let mut members: Vec<&str> = record
            .as_object()
            .into_iter()
            .flat_map(|object| object.keys().map(String::as_str))
            .collect();
        members.sort_unstable();
        ensure!(
            members
                == [
                    "allowedIps",
                    "apiVersion",
                    "apiVersionRollback",
                    "createdAt",
                    "environment",
                    "expiresAt",
                    "hint",
                    "id",
                    "label",
                    "lastUsedAt",
                    "leak",
                    "lifetimeSeconds",
                    "permissions",
                    "providers",
                    "revokedAt",
                    "revokedReason"
                ],
            "a record's JSON has the members {members:?}"
        );
    }
    Ok(())
}

async fn revoked_by_id<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let revoked = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Live)).await?;
    let kept = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Live)).await?;
    let record = fixtures
        .store()
        .revoke(&org.id, &revoked.record().id)
        .await
        .map_err(failed("revoke"))?;
    let Some(revoked_at) = record.revoked_at else {
        return Err(format!(
            "a revoked key's record has no revocation time: {record:?}"
        ));
    };
    ensure!(
        !resolves(fixtures, revoked.plaintext(), &org).await?,
        "the revoked key still resolves"
    );
    ensure!(
        resolves(fixtures, kept.plaintext(), &org).await?,
        "revoking one key revoked another"
    );
    let again = fixtures
        .store()
        .revoke(&org.id, &revoked.record().id)
        .await
        .map_err(failed("revoke again"))?;
    ensure!(
        again.revoked_at == Some(revoked_at),
        "revoking twice moved the time to {:?}",
        again.revoked_at
    );
    let got = record_of(fixtures, &org.id, &revoked.record().id).await?;
    ensure!(
        got.revoked_at == Some(revoked_at),
        "get shows {:?}",
        got.revoked_at
    );
    Ok(())
}

async fn other_organization<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let a = organization(fixtures, &ns, "a").await?;
    let b = organization(fixtures, &ns, "b").await?;
    let of_a = issue(
        fixtures,
        &a.id,
        NewKey::new(KeyEnvironment::Live).with_label("A's"),
    )
    .await?;
    let id = &of_a.record().id;
    let store = fixtures.store();
    ensure!(
        kind_of(store.get(&b.id, id).await) == Some(StoreErrorKind::NotFound),
        "B can get A's key"
    );
    ensure!(
        kind_of(store.revoke(&b.id, id).await) == Some(StoreErrorKind::NotFound),
        "B can revoke A's key"
    );
    ensure!(
        kind_of(store.roll(&b.id, id, RollKey::new(Duration::ZERO)).await)
            == Some(StoreErrorKind::NotFound),
        "B can roll A's key"
    );
    let listed = store.list(&b.id).await.map_err(failed("list"))?;
    ensure!(listed.is_empty(), "B lists {listed:?}");
    ensure!(
        resolves(fixtures, of_a.plaintext(), &a).await?,
        "A's key stopped resolving"
    );
    let after = record_of(fixtures, &a.id, id).await?;
    ensure!(after == *of_a.record(), "A's key changed: {after:?}");
    Ok(())
}

async fn unknown<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let missing = format!("{ns}_missing");
    let store = fixtures.store();
    let not_found = Some(StoreErrorKind::NotFound);
    ensure!(
        kind_of(
            store
                .issue(&missing, NewKey::new(KeyEnvironment::Live))
                .await
        ) == not_found,
        "issue for an unknown organization"
    );
    ensure!(
        kind_of(store.list(&missing).await) == not_found,
        "list of an unknown organization"
    );
    for key_id in ["0", "999999999", "key_999999999", "not an id", ""] {
        ensure!(
            kind_of(store.get(&org.id, key_id).await) == not_found,
            "get of key id {key_id:?}"
        );
        ensure!(
            kind_of(store.revoke(&org.id, key_id).await) == not_found,
            "revoke of key id {key_id:?}"
        );
        ensure!(
            kind_of(
                store
                    .roll(&org.id, key_id, RollKey::new(Duration::ZERO))
                    .await
            ) == not_found,
            "roll of key id {key_id:?}"
        );
        ensure!(
            kind_of(store.get(&missing, key_id).await) == not_found,
            "get in an unknown organization"
        );
    }
    Ok(())
}
