//! The key-management checks of a key's life after issue: expiry, the roll's overlap, last
//! uses, and the error kinds both shipped stores report.

use std::time::Duration;

use super::calls::{issue, record_of, resolves, EXPIRY};
use super::calls::{key, lookup, lookup_outcome, organization};
use super::namespace;
use super::report::kind_of;
use super::report::{ensure, failed, Check};
use super::StoreFixtures;
use crate::key::KeyEnvironment;
use crate::model::Timestamp;
use crate::store::{KeyLookup, StoreErrorKind};
use crate::store::{KeyManager, KeyUse, NewKey, RevocationReason, RollKey};

pub(super) async fn expiry<F>(fixtures: &F) -> Check
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
        matches!(expired, KeyLookup::Expired { .. } | KeyLookup::Unknown),
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

pub(super) async fn rolled<F>(fixtures: &F) -> Check
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
        .roll(&org.id, &old.record().id, RollKey::new(EXPIRY))
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
        .roll(&org.id, &new.record().id, RollKey::new(Duration::ZERO))
        .await
        .map_err(failed("roll"))?;
    // Revoked, not expired at the roll's instant: a wall clock stepped back must not bring
    // the old key back.
    ensure!(
        matches!(
            lookup_outcome(fixtures, new.plaintext()).await?,
            KeyLookup::Revoked { .. }
        ),
        "a roll without overlap left the old key working, or ended it by expiry"
    );
    let ended = record_of(fixtures, &org.id, &new.record().id).await?;
    ensure!(
        ended.revoked_reason == Some(RevocationReason::Rolled),
        "a key rolled without overlap is revoked as {:?}, not rolled",
        ended.revoked_reason
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
        kind_of(
            store
                .roll(&org.id, &newer.record().id, RollKey::new(EXPIRY))
                .await,
        ) == Some(StoreErrorKind::Conflict),
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
        .roll(
            &org.id,
            &short.record().id,
            RollKey::new(Duration::from_secs(3600)),
        )
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

pub(super) async fn last_used<F>(fixtures: &F) -> Check
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

pub(super) async fn error_kinds<F>(fixtures: &F) -> Check
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
