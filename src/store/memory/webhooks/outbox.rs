//! [`WebhookOutbox`] over the memory store: claims, finishes, the backlog and retention, by
//! the same rules as PostgreSQL's outbox.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use async_trait::async_trait;

use super::State;
use crate::model::Timestamp;
use crate::store::memory::MemoryStore;
use crate::store::webhooks::{
    Attempt, AttemptOutcome, Backlog, ClaimRequest, Delivery, Finish, FinishedAttempt, NextStep,
    WebhookOutbox,
};
use crate::store::StoreError;
use crate::store::{AuditAction, AuditContext, AuditRecord, DELIVERY_ACTOR};

#[async_trait]
impl WebhookOutbox for MemoryStore {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Delivery>, StoreError> {
        let now = Timestamp::now();
        let mut outbox = self.outbox();
        let outbox = &mut *outbox;
        // Pending deliveries in id order: the first pending one of an order to an endpoint is
        // the only one of that order that may go.
        let mut blocked: HashSet<(u64, &str)> = HashSet::new();
        let mut candidates: Vec<(bool, bool, bool, Timestamp, u64)> = Vec::new();
        for (id, delivery) in &outbox.deliveries {
            if delivery.state != State::Pending {
                continue;
            }
            if let Some(order_id) = &delivery.order_id {
                if !blocked.insert((delivery.endpoint, order_id)) {
                    continue;
                }
            }
            let Some(endpoint) = outbox
                .endpoints
                .get(&delivery.endpoint)
                .filter(|entry| entry.record.enabled)
            else {
                continue;
            };
            if delivery.due <= now {
                candidates.push((
                    !request.is_idle(&endpoint.record.organization_id),
                    endpoint.failing_since.is_some(),
                    delivery.attempts > delivery.round_start,
                    delivery.due,
                    *id,
                ));
            }
        }
        // Organizations with nothing in flight first, then endpoints that do not fail (as
        // `ClaimRequest` asks); then first attempts before retries, the longest due first.
        candidates.sort_unstable();
        let organizations: HashSet<&str> = candidates
            .iter()
            .map(|&(.., id)| {
                let endpoint = outbox.deliveries[&id].endpoint;
                outbox.endpoints[&endpoint].record.organization_id.as_str()
            })
            .chain(
                request
                    .organizations_in_flight
                    .iter()
                    .map(|(id, _)| id.as_str()),
            )
            .collect();
        let part = request.equal_part(organizations.len());
        let mut failing_taken = 0;
        let mut taken: BTreeMap<u64, usize> = BTreeMap::new();
        let mut taken_by_organization: HashMap<String, usize> = HashMap::new();
        let mut claimed = Vec::new();
        for (busy_organization, failing, _, _, id) in candidates {
            if claimed.len() >= request.limit {
                break;
            }
            if failing && failing_taken >= request.failing_room {
                continue;
            }
            // A part of the free slots is kept for organizations with nothing in flight: only
            // their first delivery may take it.
            let newcomer = !busy_organization
                && !taken_by_organization.contains_key(
                    &outbox.endpoints[&outbox.deliveries[&id].endpoint]
                        .record
                        .organization_id,
                );
            if !newcomer
                && part != usize::MAX
                && claimed.len() + 1 > request.limit.saturating_sub(part)
            {
                continue;
            }
            let delivery = &outbox.deliveries[&id];
            let endpoint = &outbox.endpoints[&delivery.endpoint];
            let count = taken.entry(delivery.endpoint).or_default();
            // An endpoint whose deliveries fail gets one slot, as on PostgreSQL.
            let room = if endpoint.failing_since.is_some() {
                request.room_for(&endpoint.record.id).min(1)
            } else {
                request.room_for(&endpoint.record.id)
            };
            if *count >= room {
                continue;
            }
            let organization = &endpoint.record.organization_id;
            let busy = request
                .organizations_in_flight
                .iter()
                .find(|(id, _)| id == organization)
                .map_or(0, |(_, count)| *count);
            let organization_room = request
                .room_for_organization(organization)
                .min(part.saturating_sub(busy));
            let organization_count = taken_by_organization
                .entry(organization.clone())
                .or_default();
            if *organization_count >= organization_room {
                continue;
            }
            *organization_count += 1;
            *count += 1;
            failing_taken += usize::from(failing);
            claimed.push(id);
        }
        let lease_end = now.saturating_add(request.lease);
        Ok(claimed
            .into_iter()
            .map(|id| {
                let delivery = outbox
                    .deliveries
                    .get_mut(&id)
                    .expect("claimed from the map");
                delivery.attempts += 1;
                delivery.due = lease_end;
                let endpoint = &outbox.endpoints[&delivery.endpoint];
                Delivery::new(
                    id.to_string(),
                    delivery.message_id.clone(),
                    &endpoint.record,
                    endpoint.secrets(now),
                    delivery.kind,
                    delivery.body.render(delivery.kind, &endpoint.record),
                    delivery.attempts,
                    delivery.attempts - delivery.round_start,
                    endpoint.failing_since,
                )
            })
            .collect())
    }

    async fn finish(
        &self,
        delivery: &Delivery,
        attempt: &FinishedAttempt,
    ) -> Result<Finish, StoreError> {
        let mut outbox = self.outbox();
        let id = delivery.delivery_id.parse::<u64>().unwrap_or(0);
        let Some(entry) = outbox.deliveries.get_mut(&id) else {
            return Ok(Finish::default());
        };
        if entry.state != State::Pending || entry.attempts != delivery.attempt {
            return Ok(Finish::default());
        }
        match attempt.next {
            NextStep::Done => entry.state = State::Succeeded,
            NextStep::GiveUp => entry.state = State::Failed,
            NextStep::RetryAt(at) => entry.due = at,
        }
        let endpoint_id = entry.endpoint;
        let record = Attempt {
            message_id: entry.message_id.clone(),
            event_type: entry.kind,
            attempt: delivery.attempt,
            outcome: attempt.outcome,
            response_status: attempt.response_status,
            error: attempt.error.clone(),
            response_body: attempt.response_body.clone(),
            duration_ms: u64::try_from(attempt.duration.as_millis()).unwrap_or(u64::MAX),
            attempted_at: attempt.attempted_at,
        };
        outbox.attempts.push((endpoint_id, record));
        let mut finish = Finish {
            current: true,
            disabled: None,
        };
        if let Some(endpoint) = outbox.endpoints.get_mut(&endpoint_id) {
            match attempt.outcome {
                AttemptOutcome::Succeeded => endpoint.failing_since = None,
                _ => {
                    endpoint.failing_since.get_or_insert(attempt.attempted_at);
                }
            }
            if let Some(reason) = attempt.disable_reason().filter(|_| endpoint.record.enabled) {
                endpoint.record.enabled = false;
                finish.disabled = Some(endpoint.record.clone());
                // Its entry under the outbox's lock, as the change's own (the audit lock last).
                self.audit_as(
                    AuditRecord::new(
                        &endpoint.record.organization_id,
                        AuditAction::WebhookDisabled,
                        Some(&endpoint.record.id),
                    )
                    .with_detail(reason.as_str()),
                    AuditContext::new(DELIVERY_ACTOR),
                );
            }
        }
        Ok(finish)
    }

    async fn backlog(&self) -> Result<Backlog, StoreError> {
        let now = Timestamp::now();
        let outbox = self.outbox();
        let mut backlog = Backlog::default();
        for delivery in outbox.deliveries.values() {
            let enabled = outbox
                .endpoints
                .get(&delivery.endpoint)
                .is_some_and(|entry| entry.record.enabled);
            if delivery.state == State::Pending && enabled && delivery.due <= now {
                backlog.due += 1;
                let waited = now.duration_since(delivery.due).unwrap_or_default();
                backlog.oldest_due = Some(
                    backlog
                        .oldest_due
                        .map_or(waited, |oldest| oldest.max(waited)),
                );
            }
        }
        Ok(backlog)
    }

    async fn prune(&self, older_than: Duration, batch: usize) -> Result<u64, StoreError> {
        let before = Timestamp::from_datetime(
            Timestamp::now()
                .as_datetime()
                .checked_sub_signed(
                    chrono::TimeDelta::from_std(older_than).unwrap_or(chrono::TimeDelta::MAX),
                )
                .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC),
        );
        let mut outbox = self.outbox();
        // The oldest messages first: deliveries are in the order their messages were raised.
        let mut old = std::collections::HashSet::new();
        for delivery in outbox.deliveries.values() {
            if delivery.raised_at >= before || old.contains(&delivery.message_id) {
                continue;
            }
            if old.len() == batch {
                break;
            }
            old.insert(delivery.message_id.clone());
        }
        outbox
            .deliveries
            .retain(|_, delivery| !old.contains(&delivery.message_id));
        outbox
            .attempts
            .retain(|(_, attempt)| !old.contains(&attempt.message_id));
        Ok(old.len() as u64)
    }
}
