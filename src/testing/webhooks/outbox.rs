//! The outbox's checks of the webhooks suite: order events raised in order, claims within
//! their rooms, leases and current attempts, rounds of tries, retention.

use super::*;

/// [`WebhookOutbox::prune`] deletes the messages raised before its time, with their
/// deliveries (pending ones too) and attempts, at most a batch a call, and nothing newer.
/// Prunes the whole outbox: the suite's earlier messages go too.
pub(super) async fn retention<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "retained").await?;
    let store = fixtures.store();
    let endpoint = add(
        store,
        &org.id,
        NewEndpoint::new("https://example.com/hooks/retained"),
    )
    .await?;
    let id = &endpoint.record.id;
    for _ in 0..3 {
        store
            .send_test(&org.id, id)
            .await
            .map_err(failed("send_test"))?;
    }
    // Two attempted, one left pending.
    let two = claim_for(store, id, ClaimRequest::new(2, 10, LEASE)).await?;
    ensure!(two.len() == 2, "{} of 3 test messages claimed", two.len());
    for delivery in &two {
        finish(store, delivery, AttemptOutcome::Succeeded, NextStep::Done).await?;
    }
    store
        .prune(Duration::from_secs(60), 1_000)
        .await
        .map_err(failed("prune"))?;
    let kept = store
        .attempts(&org.id, id, 100)
        .await
        .map_err(failed("attempts"))?;
    ensure!(
        kept.len() == 2,
        "pruning what is older than a minute left {} of their 2 attempts",
        kept.len()
    );
    // By the store's clock, a moment after the messages were raised.
    tokio::time::sleep(Duration::from_millis(5)).await;
    for _ in 0..100_000 {
        let deleted = store
            .prune(Duration::ZERO, 1)
            .await
            .map_err(failed("prune"))?;
        ensure!(deleted <= 1, "a batch of 1 deleted {deleted} messages");
        if deleted == 0 {
            break;
        }
    }
    let attempts = store
        .attempts(&org.id, id, 100)
        .await
        .map_err(failed("attempts"))?;
    ensure!(
        attempts.is_empty(),
        "{} attempts of pruned messages remain",
        attempts.len()
    );
    ensure!(
        claim_all(store, id).await?.is_empty(),
        "a pruned message is still delivered"
    );
    remove(store, &org.id, id).await
}

/// A claim takes at most an organization's room, counting what the worker has in flight for
/// it: one organization's endpoints never take every slot.
pub(super) async fn organization_room<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "busy").await?;
    let store = fixtures.store();
    let mut ids = Vec::new();
    for n in 0..3 {
        let url = format!("https://example.com/{n}");
        let id = add(store, &org.id, NewEndpoint::new(url)).await?.record.id;
        for _ in 0..2 {
            store
                .send_test(&org.id, &id)
                .await
                .map_err(failed("send_test"))?;
        }
        ids.push(id);
    }
    let ours = |claimed: Vec<Delivery>| -> Vec<Delivery> {
        claimed
            .into_iter()
            .filter(|delivery| delivery.organization_id == org.id)
            .collect()
    };
    let two = ClaimRequest::new(100, 100, LEASE).with_organizations(2, Vec::new());
    let first = ours(store.claim(&two).await.map_err(failed("claim"))?);
    ensure!(
        first.len() == 2,
        "with room for 2 per organization, {} of its 6 were claimed",
        first.len()
    );
    let busy = ClaimRequest::new(100, 100, LEASE).with_organizations(3, vec![(org.id.clone(), 2)]);
    let more = ours(store.claim(&busy).await.map_err(failed("claim"))?);
    ensure!(
        more.len() == 1,
        "with 2 of 3 in flight, {} more were claimed",
        more.len()
    );
    let rest = ours(
        store
            .claim(&ClaimRequest::new(100, 100, LEASE))
            .await
            .map_err(failed("claim"))?,
    );
    ensure!(rest.len() == 3, "the other 3 were not claimed: {rest:?}");
    for delivery in first.iter().chain(&more).chain(&rest) {
        finish(store, delivery, AttemptOutcome::Succeeded, NextStep::Done).await?;
    }
    for id in &ids {
        remove(store, &org.id, id).await?;
    }
    Ok(())
}

pub(super) async fn order_events<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let store = fixtures.store();
    let all = add(store, &org.id, NewEndpoint::new("https://example.com/all"))
        .await?
        .record;
    let deletions = add(
        store,
        &org.id,
        NewEndpoint::new("https://example.com/deleted").with_events([EventType::OrderDeleted]),
    )
    .await?
    .record;
    let off = add(store, &org.id, NewEndpoint::new("https://example.com/off"))
        .await?
        .record;
    store
        .set_enabled(&org.id, &off.id, false)
        .await
        .map_err(failed("set_enabled"))?;

    let created = order(format!("{ns}_o1"), 1);
    let mut updated = created.clone();
    updated.status = "running".into();
    fixtures
        .add_orders(&org.id, std::slice::from_ref(&created))
        .await
        .map_err(failed("add_orders"))?;
    fixtures
        .update_order(&org.id, &updated)
        .await
        .map_err(failed("update_order"))?;
    fixtures
        .remove_order(&org.id, &created.id)
        .await
        .map_err(failed("remove_order"))?;

    // One claim: the deletions-only endpoint has its one event at once, the other endpoint
    // only the first change of the order.
    let [to_deletions, all_claimed] = claim_split(store, [&deletions.id, &all.id]).await?;
    let mut first_claim = Some(all_claimed);
    ensure!(
        to_deletions.len() == 1 && to_deletions[0].event_type == EventType::OrderDeleted,
        "an endpoint subscribed to order.deleted got {:?}",
        to_deletions
            .iter()
            .map(|d| d.event_type)
            .collect::<Vec<_>>()
    );
    let body = body_json(&to_deletions[0])?;
    ensure!(
        body["data"] == serde_json::json!({ "id": created.id }),
        "order.deleted carries {body}"
    );
    ensure!(
        claim_all(store, &off.id).await?.is_empty(),
        "a disabled endpoint got events"
    );

    // The other endpoint: one order's events one at a time, in the order of the changes.
    let mut message_ids = Vec::new();
    for (kind, state) in [
        (EventType::OrderCreated, Some(&created)),
        (EventType::OrderUpdated, Some(&updated)),
        (EventType::OrderDeleted, None),
    ] {
        let claimed = match first_claim.take() {
            Some(claimed) => claimed,
            None => claim_all(store, &all.id).await?,
        };
        ensure!(
            claimed.len() == 1 && claimed[0].event_type == kind,
            "expected only {kind} due, got {:?}",
            claimed.iter().map(|d| d.event_type).collect::<Vec<_>>()
        );
        let delivery = &claimed[0];
        let body = body_json(delivery)?;
        ensure!(
            body["type"] == kind.as_str(),
            "the body's type is {}",
            body["type"]
        );
        let timestamp = body["timestamp"].as_str().unwrap_or_default();
        ensure!(
            timestamp.len() == 24
                && timestamp.ends_with('Z')
                && timestamp.parse::<Timestamp>().is_ok(),
            "the timestamp {timestamp:?} is not ISO 8601 UTC with milliseconds"
        );
        if let Some(state) = state {
            // The endpoint reads the newest version: the order with the event's own time as
            // its `updatedAt`, in the bytes `GET /v1/orders` would serve for it.
            let mut state = state.clone();
            state.updated_at = timestamp.parse().ok();
            let expected = EncodedOrder::new(state).map_err(|err| err.to_string())?;
            let expected = expected.json();
            let data = format!(",\"data\":{}}}", String::from_utf8_lossy(expected));
            ensure!(
                String::from_utf8_lossy(&delivery.body).ends_with(&data),
                "the data of {kind} is not the order's bytes as GET /v1/orders serves them: {}",
                String::from_utf8_lossy(&delivery.body)
            );
        }
        ensure!(
            delivery.attempt == 1 && delivery.tries == 1 && delivery.secrets.len() == 1,
            "a first attempt is {delivery:?}"
        );
        message_ids.push(delivery.message_id.clone());
        let done = finish(store, delivery, AttemptOutcome::Succeeded, NextStep::Done).await?;
        ensure!(done.current, "finishing a current attempt did not count");
    }
    ensure!(
        claim_all(store, &all.id).await?.is_empty(),
        "a delivered event came again"
    );
    message_ids.push(to_deletions[0].message_id.clone());
    message_ids.sort();
    message_ids.dedup();
    ensure!(
        message_ids.len() == 4,
        "message ids repeat across messages or endpoints"
    );
    for endpoint in [&all, &deletions, &off] {
        remove(store, &org.id, &endpoint.id).await?;
    }
    Ok(())
}

pub(super) async fn leases<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let store = fixtures.store();
    let endpoint = add(store, &org.id, NewEndpoint::new("https://example.com/"))
        .await?
        .record;
    let message_id = store
        .send_test(&org.id, &endpoint.id)
        .await
        .map_err(failed("send_test"))?;
    let first = claim_all(store, &endpoint.id).await?;
    ensure!(
        first.len() == 1
            && first[0].message_id == message_id
            && first[0].event_type == EventType::WebhookTest,
        "the test message is not claimed: {first:?}"
    );
    ensure!(
        claim_all(store, &endpoint.id).await?.is_empty(),
        "a leased delivery was claimed twice"
    );
    // A failure with a retry due now: the next claim is attempt 2, same message.
    let retry = NextStep::RetryAt(Timestamp::now());
    finish(store, &first[0], AttemptOutcome::Failed, retry).await?;
    let second = claim_all(store, &endpoint.id).await?;
    ensure!(
        second.len() == 1
            && second[0].attempt == 2
            && second[0].tries == 2
            && second[0].message_id == message_id,
        "the retry is {second:?}"
    );
    ensure!(
        second[0].failing_since.is_some(),
        "a failed attempt did not start the endpoint's failure streak"
    );
    // Attempt 1 finishing late changes nothing.
    let late = finish(store, &first[0], AttemptOutcome::Succeeded, NextStep::Done).await?;
    ensure!(
        !late.current,
        "a late finish of attempt 1 counted over attempt 2"
    );
    // A lease that ends: another worker takes the delivery over, and the first one's finish
    // is no longer current.
    finish(
        store,
        &second[0],
        AttemptOutcome::Failed,
        NextStep::RetryAt(Timestamp::now()),
    )
    .await?;
    let short = claim_for(
        store,
        &endpoint.id,
        ClaimRequest::new(100, 100, Duration::ZERO),
    )
    .await?;
    ensure!(
        short.len() == 1 && short[0].attempt == 3,
        "attempt 3 is {short:?}"
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    let taken = claim_all(store, &endpoint.id).await?;
    ensure!(
        taken.len() == 1 && taken[0].attempt == 4,
        "an ended lease was not taken over: {taken:?}"
    );
    ensure!(
        !finish(store, &short[0], AttemptOutcome::Succeeded, NextStep::Done)
            .await?
            .current,
        "a finish after the lease was taken over counted"
    );
    ensure!(
        finish(store, &taken[0], AttemptOutcome::Succeeded, NextStep::Done)
            .await?
            .current,
        "the current attempt's finish did not count"
    );
    let attempts = store
        .attempts(&org.id, &endpoint.id, 10)
        .await
        .map_err(failed("attempts"))?;
    let numbers: Vec<u32> = attempts.iter().map(|attempt| attempt.attempt).collect();
    ensure!(
        numbers == [4, 2, 1],
        "attempts, newest first, are {numbers:?}"
    );
    ensure!(
        attempts[0].outcome == AttemptOutcome::Succeeded
            && attempts[1].outcome == AttemptOutcome::Failed
            && attempts[1].response_status == Some(500)
            && attempts
                .iter()
                .all(|a| a.message_id == message_id && a.event_type == EventType::WebhookTest),
        "the attempts are {attempts:?}"
    );
    ensure!(
        claim_all(store, &endpoint.id).await?.is_empty(),
        "a succeeded delivery is due again"
    );
    remove(store, &org.id, &endpoint.id).await?;
    Ok(())
}

pub(super) async fn rounds<F>(fixtures: &F) -> Check
where
    F: StoreFixtures,
    F::Store: WebhookManager + WebhookOutbox,
{
    let ns = namespace();
    let org = organization(fixtures, &ns, "a").await?;
    let store = fixtures.store();
    let endpoint = add(store, &org.id, NewEndpoint::new("https://example.com/"))
        .await?
        .record;
    // A second early, for stores whose clock is the database's.
    let before =
        Timestamp::from_datetime(Timestamp::now().as_datetime() - chrono::Duration::seconds(1));
    let message_id = store
        .send_test(&org.id, &endpoint.id)
        .await
        .map_err(failed("send_test"))?;
    let claimed = claim_all(store, &endpoint.id).await?;
    ensure!(claimed.len() == 1, "the test message was not claimed");
    finish(store, &claimed[0], AttemptOutcome::Failed, NextStep::GiveUp).await?;
    ensure!(
        claim_all(store, &endpoint.id).await?.is_empty(),
        "a given-up delivery is due"
    );
    let recovered = store
        .recover(&org.id, &endpoint.id, before)
        .await
        .map_err(failed("recover"))?;
    ensure!(recovered == 1, "recover queued {recovered} messages, not 1");
    let again = claim_all(store, &endpoint.id).await?;
    ensure!(
        again.len() == 1
            && again[0].message_id == message_id
            && again[0].tries == 1
            && again[0].attempt == 2,
        "a recovered message is {again:?}"
    );
    finish(store, &again[0], AttemptOutcome::Failed, NextStep::GiveUp).await?;
    let later = Timestamp::now().saturating_add(Duration::from_secs(3600));
    ensure!(
        store
            .recover(&org.id, &endpoint.id, later)
            .await
            .map_err(failed("recover"))?
            == 0,
        "recover took a message raised before its time"
    );
    store
        .retry_message(&org.id, &endpoint.id, &message_id)
        .await
        .map_err(failed("retry_message"))?;
    let retried = claim_all(store, &endpoint.id).await?;
    ensure!(
        retried.len() == 1 && retried[0].tries == 1 && retried[0].attempt == 3,
        "a retried message is {retried:?}"
    );
    finish(
        store,
        &retried[0],
        AttemptOutcome::Succeeded,
        NextStep::Done,
    )
    .await?;
    ensure!(
        kind_of(
            store
                .retry_message(&org.id, &endpoint.id, "msg_unknown")
                .await
        ) == Some(StoreErrorKind::NotFound),
        "retrying an unknown message is not NotFound"
    );
    remove(store, &org.id, &endpoint.id).await?;
    Ok(())
}
