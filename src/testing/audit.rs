//! The conformance suite of [`AuditLog`]: each change a store's key manager makes is logged
//! once, with the caller's context, only when it happens; reads are scoped, newest first and
//! paginated; retention deletes the oldest.

use std::time::Duration;

use super::calls::{issue, organization};
use super::report::{ensure, failed, kind_of, Check, Report};
use super::{namespace, StoreFixtures};
use crate::key::{AllowedIps, KeyEnvironment};
use crate::store::StoreErrorKind;
use crate::store::{
    AuditAction, AuditContext, AuditEntry, AuditLog, AuditPosition, AuditQuery, AuditRecord,
    KeyManager, KeyPolicy, NewKey, RollKey,
};

/// Runs the checks of an [`AuditLog`] (over a store whose [`KeyManager`] writes its entries)
/// against the store of `fixtures`. Each check uses organizations of its own; the retention
/// check deletes only entries older than 100 years, so none of another's.
pub async fn run_audit_log<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: KeyManager + AuditLog,
{
    let mut report = Report::default();
    let mut record = |name, result| report.results.push((name, result));
    record(
        "rule audit-in-the-change: each change of a key is logged once, with the caller's context",
        key_changes(fixtures).await,
    );
    record(
        "rule audit-only-changes: a refused change logs nothing, a repeated revocation nothing more",
        refused_changes(fixtures).await,
    );
    record(
        "rule audit-only-changes: a change that changes nothing logs nothing",
        unchanged(fixtures).await,
    );
    record(
        "entries are read newest first, in pages, filtered, and only by their organization",
        pages(fixtures).await,
    );
    record(
        "a host appends entries of its own; retention keeps what is younger",
        appended(fixtures).await,
    );
    report
}

async fn unchanged<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager + AuditLog,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "unchanged").await?;
    let store = fixtures.store();
    let issued = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Test)).await?;
    let id = issued.record().id.clone();
    let ranges = AllowedIps::parse(["192.0.2.0/24", "2001:db8::/32"])
        .map_err(|_| "192.0.2.0/24 is no range")?;
    let policy = KeyPolicy::default().with_max_active_keys(7);
    for _ in 0..3 {
        store
            .restrict(&org.id, &id, ranges.clone())
            .await
            .map_err(failed("restrict"))?;
        store
            .set_key_policy(&org.id, policy)
            .await
            .map_err(failed("set_key_policy"))?;
    }
    let actions: Vec<String> = all_entries(fixtures, &org.id)
        .await?
        .iter()
        .map(|entry| entry.action.to_string())
        .collect();
    ensure!(
        actions == ["policy.changed", "key.restricted", "key.issued"],
        "the same restriction and policy set three times logged {actions:?}"
    );
    Ok(())
}

async fn all_entries<F>(fixtures: &F, organization_id: &str) -> Result<Vec<AuditEntry>, String>
where
    F: StoreFixtures,
    F::Store: AuditLog,
{
    let query = AuditQuery {
        limit: 100,
        ..AuditQuery::default()
    };
    Ok(fixtures
        .store()
        .audit_entries(organization_id, &query)
        .await
        .map_err(failed("audit_entries"))?
        .entries)
}

fn context() -> AuditContext {
    AuditContext::new("alice@example.com")
        .with_source_address([192, 0, 2, 7].into())
        .with_user_agent("conformance/1")
        .with_request_id("req-1")
}

async fn key_changes<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager + AuditLog,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "audit").await?;
    let store = fixtures.store();
    let (issued, rolled) = context()
        .scope(async {
            let issued = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Test)).await?;
            let id = issued.record().id.clone();
            let ranges = AllowedIps::parse(["198.51.100.0/24"])
                .map_err(|_| "198.51.100.0/24 is no range")?;
            store
                .restrict(&org.id, &id, ranges)
                .await
                .map_err(failed("restrict"))?;
            let rolled = store
                .roll(&org.id, &id, RollKey::new(Duration::from_secs(60)))
                .await
                .map_err(failed("roll"))?;
            store
                .revoke(&org.id, &rolled.record().id)
                .await
                .map_err(failed("revoke"))?;
            Ok::<_, String>((id, rolled.record().id.clone()))
        })
        .await?;
    let entries = all_entries(fixtures, &org.id).await?;
    let seen: Vec<(AuditAction, Option<&str>)> = entries
        .iter()
        .map(|entry| (entry.action.clone(), entry.target.as_deref()))
        .collect();
    ensure!(
        seen == [
            (AuditAction::KeyRevoked, Some(rolled.as_str())),
            (AuditAction::KeyRolled, Some(issued.as_str())),
            (AuditAction::KeyRestricted, Some(issued.as_str())),
            (AuditAction::KeyIssued, Some(issued.as_str())),
        ],
        "the log reads {seen:?}"
    );
    let rolled_entry = &entries[1];
    ensure!(
        rolled_entry.detail.as_deref() == Some(rolled.as_str()),
        "a roll's entry names its new key: {rolled_entry:?}"
    );
    for entry in &entries {
        ensure!(
            entry.actor == "alice@example.com"
                && entry.source_address.as_deref() == Some("192.0.2.7")
                && entry.user_agent.as_deref() == Some("conformance/1")
                && entry.request_id.as_deref() == Some("req-1")
                && entry.organization_id == org.id,
            "an entry lost its context: {entry:?}"
        );
    }
    Ok(())
}

async fn refused_changes<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager + AuditLog,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "refused").await?;
    let store = fixtures.store();
    let issued = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Test)).await?;
    let id = issued.record().id.clone();
    store.revoke(&org.id, &id).await.map_err(failed("revoke"))?;
    store
        .revoke(&org.id, &id)
        .await
        .map_err(failed("revoke again"))?;
    let refused = kind_of(store.roll(&org.id, &id, RollKey::new(Duration::ZERO)).await);
    ensure!(
        refused == Some(StoreErrorKind::Conflict),
        "rolling a revoked key answered {refused:?}"
    );
    let unknown = kind_of(store.revoke(&org.id, "no-such-key").await);
    ensure!(
        unknown == Some(StoreErrorKind::NotFound),
        "revoking an unknown key answered {unknown:?}"
    );
    let entries = all_entries(fixtures, &org.id).await?;
    let actions: Vec<AuditAction> = entries.iter().map(|entry| entry.action.clone()).collect();
    ensure!(
        actions == [AuditAction::KeyRevoked, AuditAction::KeyIssued],
        "the log reads {actions:?}"
    );
    ensure!(
        entries
            .iter()
            .all(|entry| entry.actor == crate::store::UNATTRIBUTED),
        "changes made without a context are not unattributed: {entries:?}"
    );
    Ok(())
}

async fn pages<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager + AuditLog,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "pages").await?;
    let other = organization(fixtures, &ns, "other").await?;
    let store = fixtures.store();
    for max in 1..=5 {
        store
            .set_key_policy(&org.id, KeyPolicy::new().with_max_active_keys(max))
            .await
            .map_err(failed("set_key_policy"))?;
    }
    let issued = issue(fixtures, &org.id, NewKey::new(KeyEnvironment::Test)).await?;
    let mut read = Vec::new();
    let mut after: Option<AuditPosition> = None;
    loop {
        let query = AuditQuery {
            limit: 2,
            after: after.take(),
            ..AuditQuery::default()
        };
        let page = store
            .audit_entries(&org.id, &query)
            .await
            .map_err(failed("audit_entries"))?;
        ensure!(
            page.entries.len() <= 2,
            "a page of 2 has {}",
            page.entries.len()
        );
        read.extend(page.entries.iter().cloned());
        after = page.next_position();
        if after.is_none() {
            break;
        }
        ensure!(read.len() <= 6, "the pages never end");
    }
    let ids: Vec<&str> = read.iter().map(|entry| entry.id.as_str()).collect();
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    ensure!(
        read.len() == 6 && unique.len() == 6,
        "pages of 2 read {ids:?} of 6 entries"
    );
    ensure!(
        read.windows(2).all(|pair| pair[0].at >= pair[1].at)
            && read[0].action == AuditAction::KeyIssued,
        "the pages are not newest first: {read:?}"
    );
    let only = AuditQuery {
        limit: 100,
        action: Some(AuditAction::KeyIssued),
        target: Some(issued.record().id.clone()),
        ..AuditQuery::default()
    };
    let filtered = store
        .audit_entries(&org.id, &only)
        .await
        .map_err(failed("audit_entries"))?;
    ensure!(
        filtered.entries.len() == 1 && !filtered.more,
        "filtered by action and target: {:?}",
        filtered.entries
    );
    let theirs = all_entries(fixtures, &other.id).await?;
    ensure!(theirs.is_empty(), "another organization reads {theirs:?}");
    let missing = format!("{ns}_missing");
    ensure!(
        kind_of(store.audit_entries(&missing, &AuditQuery::default()).await)
            == Some(StoreErrorKind::NotFound),
        "an unknown organization's log is not NotFound"
    );
    Ok(())
}

async fn appended<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: KeyManager + AuditLog,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "host").await?;
    let store = fixtures.store();
    let action: AuditAction = "user.invited"
        .parse()
        .map_err(|_| "a host's action name is refused")?;
    AuditContext::new("bob@example.com")
        .scope(store.append(
            AuditRecord::new(&org.id, action.clone(), Some("user-7")).with_detail("as viewer"),
        ))
        .await
        .map_err(failed("append"))?;
    let entries = all_entries(fixtures, &org.id).await?;
    ensure!(
        entries.len() == 1
            && entries[0].action == action
            && entries[0].actor == "bob@example.com"
            && entries[0].detail.as_deref() == Some("as viewer"),
        "the appended entry reads {entries:?}"
    );
    // A host's entry is marked as the host's: its own action, its own actor.
    ensure!(
        store
            .append(AuditRecord::new(
                &org.id,
                AuditAction::KeyRevoked,
                Some("1")
            ))
            .await
            .is_err(),
        "append wrote an action of the crate's own (key.revoked) for the host"
    );
    ensure!(
        store
            .append(AuditRecord::new(
                &org.id,
                AuditAction::Host("key.revoked".to_owned()),
                Some("1")
            ))
            .await
            .is_err(),
        "append wrote key.revoked, an action of the crate's own, named as a host's"
    );
    for actor in [
        crate::store::DELIVERY_ACTOR,
        crate::store::SECRET_SCANNING_ACTOR,
        " Webhook  Delivery ",
    ] {
        ensure!(
            AuditContext::new(actor)
                .scope(store.append(AuditRecord::new(&org.id, action.clone(), None)))
                .await
                .is_err(),
            "append wrote an entry as {actor:?}, an actor of the crate's own"
        );
    }
    ensure!(
        all_entries(fixtures, &org.id).await?.len() == 1,
        "a refused entry was written"
    );
    let missing = format!("{ns}_missing");
    ensure!(
        kind_of(store.append(AuditRecord::new(&missing, action, None)).await)
            == Some(StoreErrorKind::NotFound),
        "an entry of an unknown organization was appended"
    );
    // Nothing is a century old: retention deletes none of it.
    let deleted = store
        .prune_audit(Duration::from_secs(100 * 366 * 24 * 3600), 500)
        .await
        .map_err(failed("prune_audit"))?;
    ensure!(deleted == 0, "retention of a century deleted {deleted}");
    ensure!(
        all_entries(fixtures, &org.id).await?.len() == 1,
        "retention deleted a young entry"
    );
    Ok(())
}
