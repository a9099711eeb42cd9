//! The webhooks suite beside an audit log: delivery's disabling is logged once with its reason,
//! an endpoint's URL only as its origin, and what changes nothing logs nothing.

use super::*;
use crate::store::{AuditAction, AuditContext, AuditLog, AuditQuery, DELIVERY_ACTOR};

/// Runs the check of a store that keeps an audit log beside its webhooks: an endpoint that a
/// finish disables gets one `webhook.disabled` entry by
/// [`DELIVERY_ACTOR`](crate::store::DELIVERY_ACTOR) whose detail is
/// [`FinishedAttempt::disable_reason`], whatever context the finish runs in, and an admin's
/// disabling only the admin's own. Claims act on the whole outbox, as in [`run_webhooks`].
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let store = partner_api::MemoryStore::new();
/// partner_api::testing::run_webhook_audit_log(&store).await.assert_passed();
/// # }
/// ```
pub async fn run_webhook_audit_log<F>(fixtures: &F) -> Report
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox + AuditLog,
{
    let mut report = Report::default();
    report.results.push((
        "rule audit-in-the-change: webhooks: delivery's disabling is logged once, with its reason; \
         an admin's as the admin's",
        disabled_by_delivery(fixtures).await,
    ));
    report.results.push((
        "rule audit-only-changes: webhooks: an endpoint's URL is logged as its origin; what \
         changes nothing logs nothing",
        logged_only_when_changed(fixtures).await,
    ));
    report
}

async fn logged_only_when_changed<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox + AuditLog,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "unchanged").await?;
    let store = fixtures.store();
    let id = add(
        store,
        &org.id,
        NewEndpoint::new("https://hooks.example.com:8443/in/t0ken?key=s3cret"),
    )
    .await?
    .record
    .id;
    store
        .send_test(&org.id, &id)
        .await
        .map_err(failed("send_test"))?;
    let claimed = claim_all(store, &id).await?;
    ensure!(
        claimed.len() == 1,
        "{} deliveries claimed, not 1",
        claimed.len()
    );
    // Pending (in flight): a retry queues nothing; no message ran out of tries: a recovery
    // queues nothing. Neither is a change, so neither is logged.
    store
        .retry_message(&org.id, &id, &claimed[0].message_id)
        .await
        .map_err(failed("retry_message"))?;
    let recovered = store
        .recover(
            &org.id,
            &id,
            Timestamp::from_unix_millis(0).unwrap_or_else(Timestamp::now),
        )
        .await
        .map_err(failed("recover"))?;
    ensure!(recovered == 0, "recover queued {recovered} of none failed");
    let entries = endpoint_entries(store, &org.id, &id).await?;
    let logged: Vec<(&str, Option<&str>)> = entries
        .iter()
        .map(|entry| {
            let detail = entry.detail.as_deref();
            // A test event's detail is its message id, another each time.
            let detail = detail.filter(|_| entry.action == AuditAction::WebhookAdded);
            (entry.action.as_str(), detail)
        })
        .collect();
    ensure!(
        logged
            == [
                ("webhook.test_sent", None),
                ("webhook.added", Some("https://hooks.example.com:8443")),
            ],
        "the endpoint's entries, newest first, are {logged:?} (its URL's path and query, \
         where a receiver's token rides, are not the log's to keep)"
    );
    remove(store, &org.id, &id).await
}

async fn disabled_by_delivery<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox + AuditLog,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "disabled").await?;
    let store = fixtures.store();
    let id = add(store, &org.id, NewEndpoint::new("https://example.com/"))
        .await?
        .record
        .id;
    let admin = || AuditContext::new("admin@conformance");
    // A test event's delivery finished by an attempt answered `status` that disables, in an
    // admin's context (delivery's entry must not take it).
    let deliver_and_disable = |status: u16| {
        let (org, id) = (org.id.clone(), id.clone());
        async move {
            store
                .send_test(&org, &id)
                .await
                .map_err(failed("send_test"))?;
            let claimed = claim_all(store, &id).await?;
            ensure!(
                claimed.len() == 1,
                "{} deliveries claimed, not 1",
                claimed.len()
            );
            let mut attempt =
                FinishedAttempt::new(AttemptOutcome::Failed, Timestamp::now(), Duration::ZERO);
            attempt.response_status = Some(status);
            attempt.disable_endpoint = true;
            let done = admin()
                .scope(store.finish(&claimed[0], &attempt))
                .await
                .map_err(failed("finish"))?;
            ensure!(
                done.disabled.is_some(),
                "a finish that disables reported no endpoint"
            );
            Ok(())
        }
    };
    let set_enabled = |enabled: bool| {
        let (org, id) = (org.id.clone(), id.clone());
        async move {
            admin()
                .scope(store.set_enabled(&org, &id, enabled))
                .await
                .map(|_| ())
                .map_err(failed("set_enabled"))
        }
    };
    deliver_and_disable(410).await?;
    set_enabled(true).await?;
    deliver_and_disable(500).await?;
    set_enabled(true).await?;
    set_enabled(false).await?;
    let entries = endpoint_entries(store, &org.id, &id).await?;
    let disablings: Vec<(&str, Option<&str>)> = entries
        .iter()
        .filter(|entry| entry.action == AuditAction::WebhookDisabled)
        .map(|entry| (entry.actor.as_str(), entry.detail.as_deref()))
        .collect();
    ensure!(
        disablings
            == [
                ("admin@conformance", None),
                (DELIVERY_ACTOR, Some("failing")),
                (DELIVERY_ACTOR, Some("gone")),
            ],
        "the endpoint's disablings, newest first, are {disablings:?}"
    );
    ensure!(
        entries
            .iter()
            .filter(|entry| entry.actor == DELIVERY_ACTOR)
            .all(|entry| entry.organization_id == org.id
                && entry.target.as_deref() == Some(id.as_str())
                && entry.source_address.is_none()
                && entry.request_id.is_none()),
        "delivery's entries carry another organization, target or context: {entries:?}"
    );
    remove(store, &org.id, &id).await
}

/// The audit entries of the endpoint `id`, newest first (at most 100).
async fn endpoint_entries<S: AuditLog>(
    store: &S,
    organization_id: &str,
    id: &str,
) -> Result<Vec<crate::store::AuditEntry>, String> {
    let query = AuditQuery {
        limit: 100,
        target: Some(id.to_owned()),
        ..AuditQuery::default()
    };
    Ok(store
        .audit_entries(organization_id, &query)
        .await
        .map_err(failed("audit_entries"))?
        .entries)
}
