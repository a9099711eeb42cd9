//! The conformance suite for [`KeyManager`]s: every operation, the cross-organization rules,
//! expiry, the roll's overlap, last uses, and the error kinds both shipped stores report.

use std::time::Duration;

use super::namespace;
use super::report::{ensure, failed, Check, Report};
use super::store::{key, lookup, lookup_outcome, organization, StoreFixtures};
use crate::key::{KeyDigest, KeyEnvironment};
use crate::management::{IssuedKey, KeyManager, KeyRecord, KeyUse, NewKey};
use crate::model::{Organization, Timestamp};
use crate::store::{KeyLookup, StoreError, StoreErrorKind};

/// How long the checks of expiry and overlap wait for a key to expire.
const EXPIRY: Duration = Duration::from_millis(1500);

/// Runs every key-management check against the store of `fixtures`. Two checks wait for keys
/// to expire, so the suite takes a few seconds; each check uses organizations of its own.
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
        expiry(fixtures).await,
    );
    record(
        "a roll keeps label and environment, and both keys work until the overlap ends",
        rolled(fixtures).await,
    );
    record(
        "the latest recorded use is the key's last use",
        last_used(fixtures).await,
    );
    record(
        "a duplicate is a conflict and an unknown organization not found",
        error_kinds(fixtures).await,
    );
    report
}

fn kind_of<T>(result: Result<T, StoreError>) -> Option<StoreErrorKind> {
    result.err().map(|err| err.kind())
}

async fn issue<F>(fixtures: &F, organization_id: &str, new: NewKey) -> Result<IssuedKey, String>
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    fixtures
        .store()
        .issue(organization_id, new)
        .await
        .map_err(failed("issue"))
}

async fn record_of<F>(
    fixtures: &F,
    organization_id: &str,
    key_id: &str,
) -> Result<KeyRecord, String>
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    fixtures
        .store()
        .get(organization_id, key_id)
        .await
        .map_err(failed("get"))
}

/// Whether `key` resolves to a principal of `organization`.
async fn resolves<F: StoreFixtures>(
    fixtures: &F,
    key: &str,
    organization: &Organization,
) -> Result<bool, String> {
    Ok(lookup(fixtures, key)
        .await?
        .is_some_and(|principal| *principal.organization == *organization))
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
                    "createdAt",
                    "environment",
                    "expiresAt",
                    "hint",
                    "id",
                    "label",
                    "lastUsedAt",
                    "revokedAt"
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
        kind_of(store.roll(&b.id, id, Duration::ZERO).await) == Some(StoreErrorKind::NotFound),
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
            kind_of(store.roll(&org.id, key_id, Duration::ZERO).await) == not_found,
            "roll of key id {key_id:?}"
        );
        ensure!(
            kind_of(store.get(&missing, key_id).await) == not_found,
            "get in an unknown organization"
        );
    }
    Ok(())
}

async fn expiry<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let past = NewKey::new(KeyEnvironment::Live).with_expires_at(Timestamp::from_datetime(
        Timestamp::now().as_datetime() - chrono::TimeDelta::seconds(1),
    ));
    ensure!(
        kind_of(fixtures.store().issue(&org.id, past).await) == Some(StoreErrorKind::InvalidData),
        "a key expiring in the past was issued"
    );
    let expires_at = Timestamp::now().saturating_add(EXPIRY);
    let expiring = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Live).with_expires_at(expires_at),
    )
    .await?;
    ensure!(
        expiring.record().expires_at == Some(expires_at),
        "expires at {:?}, want {expires_at}",
        expiring.record().expires_at
    );
    ensure!(
        resolves(fixtures, expiring.plaintext(), &org).await?,
        "the key does not resolve before its expiry"
    );
    tokio::time::sleep(EXPIRY + Duration::from_millis(500)).await;
    let expired = lookup_outcome(fixtures, expiring.plaintext()).await?;
    ensure!(
        matches!(expired, KeyLookup::Expired | KeyLookup::Unknown),
        "the key is {expired:?} after its expiry, not expired (or unknown)"
    );
    let listed = fixtures
        .store()
        .list(&org.id)
        .await
        .map_err(failed("list"))?;
    ensure!(
        listed.len() == 1,
        "an expired key is still listed, as known: {listed:?}"
    );
    Ok(())
}

async fn rolled<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let store = fixtures.store();
    let old = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Test).with_label("CI"),
    )
    .await?;
    let before = Timestamp::now();
    let new = store
        .roll(&org.id, &old.record().id, EXPIRY)
        .await
        .map_err(failed("roll"))?;
    ensure!(
        new.plaintext() != old.plaintext() && new.record().id != old.record().id,
        "the roll made no new key"
    );
    ensure!(
        new.record().label.as_deref() == Some("CI"),
        "the new key's label is {:?}",
        new.record().label
    );
    ensure!(
        new.record().environment == Some(KeyEnvironment::Test),
        "the new key's environment is {:?}",
        new.record().environment
    );
    ensure!(
        new.plaintext().starts_with("pk_test_"),
        "the new key is not a test key"
    );
    let old_record = record_of(fixtures, &org.id, &old.record().id).await?;
    let overlap_end = before.saturating_add(EXPIRY);
    let tolerance = Duration::from_secs(5);
    ensure!(
        old_record
            .expires_at
            .is_some_and(|at| at >= overlap_end && overlap_end.saturating_add(tolerance) >= at),
        "the old key expires at {:?}, want about {overlap_end}",
        old_record.expires_at
    );
    ensure!(
        resolves(fixtures, old.plaintext(), &org).await?,
        "the old key stopped at once"
    );
    ensure!(
        resolves(fixtures, new.plaintext(), &org).await?,
        "the new key does not resolve"
    );
    tokio::time::sleep(EXPIRY + Duration::from_millis(500)).await;
    ensure!(
        lookup(fixtures, old.plaintext()).await?.is_none(),
        "the old key resolves after the overlap"
    );
    ensure!(
        resolves(fixtures, new.plaintext(), &org).await?,
        "the new key stopped with the old one"
    );
    // No overlap: the old key stops at once. A revoked key cannot be rolled.
    let newer = store
        .roll(&org.id, &new.record().id, Duration::ZERO)
        .await
        .map_err(failed("roll"))?;
    ensure!(
        lookup(fixtures, new.plaintext()).await?.is_none(),
        "a roll without overlap left the old key working"
    );
    ensure!(
        resolves(fixtures, newer.plaintext(), &org).await?,
        "the newest key does not resolve"
    );
    store
        .revoke(&org.id, &newer.record().id)
        .await
        .map_err(failed("revoke"))?;
    ensure!(
        kind_of(store.roll(&org.id, &newer.record().id, EXPIRY).await)
            == Some(StoreErrorKind::Conflict),
        "a revoked key was rolled"
    );
    // A key that expires before the overlap ends keeps its own expiry.
    let soon = Timestamp::now().saturating_add(Duration::from_secs(60));
    let short = issue(
        fixtures,
        &org.id,
        NewKey::new(KeyEnvironment::Live).with_expires_at(soon),
    )
    .await?;
    store
        .roll(&org.id, &short.record().id, Duration::from_secs(3600))
        .await
        .map_err(failed("roll"))?;
    let short_after = record_of(fixtures, &org.id, &short.record().id).await?;
    ensure!(
        short_after.expires_at == Some(soon),
        "a roll moved an earlier expiry to {:?}",
        short_after.expires_at
    );
    Ok(())
}

async fn last_used<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let issued = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Live)).await?;
    let id = issued.record().id.clone();
    let at =
        |millis: i64| Timestamp::from_unix_millis(1_790_000_000_000 + millis).ok_or("a timestamp");
    let uses = [
        KeyUse {
            key_id: id.clone(),
            at: at(5_000)?,
        },
        KeyUse {
            key_id: id.clone(),
            at: at(1_000)?,
        },
        KeyUse {
            key_id: format!("{ns}_gone"),
            at: at(9_000)?,
        },
        KeyUse {
            key_id: "999999999".into(),
            at: at(9_000)?,
        },
    ];
    let store = fixtures.store();
    store
        .record_last_used(&uses)
        .await
        .map_err(failed("record_last_used"))?;
    let record = record_of(fixtures, &org.id, &id).await?;
    ensure!(
        record.last_used_at == Some(at(5_000)?),
        "last used {:?}, want the latest of the batch",
        record.last_used_at
    );
    store
        .record_last_used(&[KeyUse {
            key_id: id.clone(),
            at: at(2_000)?,
        }])
        .await
        .map_err(failed("record_last_used"))?;
    let record = record_of(fixtures, &org.id, &id).await?;
    ensure!(
        record.last_used_at == Some(at(5_000)?),
        "an older use moved the last use back to {:?}",
        record.last_used_at
    );
    store
        .record_last_used(&[KeyUse {
            key_id: id.clone(),
            at: at(8_000)?,
        }])
        .await
        .map_err(failed("record_last_used"))?;
    let record = record_of(fixtures, &org.id, &id).await?;
    ensure!(
        record.last_used_at == Some(at(8_000)?),
        "last used {:?} after a newer use",
        record.last_used_at
    );
    Ok(())
}

async fn error_kinds<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let again = fixtures.add_organization(&org).await;
    ensure!(
        kind_of(again) == Some(StoreErrorKind::Conflict),
        "a duplicate organization is not a conflict"
    );
    let plaintext = key(fixtures, &ns, "k", &org.id).await?;
    let duplicate = fixtures.add_key(&plaintext, &org.id, None).await;
    ensure!(
        kind_of(duplicate) == Some(StoreErrorKind::Conflict),
        "a duplicate key is not a conflict"
    );
    let orphan = fixtures
        .add_key(
            &format!("pk_test_{ns}_orphan"),
            &format!("{ns}_missing"),
            None,
        )
        .await;
    ensure!(
        kind_of(orphan) == Some(StoreErrorKind::NotFound),
        "a key of an unknown organization is not 'not found'"
    );
    Ok(())
}
