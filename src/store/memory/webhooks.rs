//! [`WebhookManager`] over the memory store, and what it and the outbox ([`outbox`]) hold:
//! the same rules as PostgreSQL's, in process and without durability.

mod outbox;

use std::collections::BTreeMap;
use std::sync::{MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::events::Change;
use super::{unknown_organization, MemoryStore};
use crate::model::Timestamp;
use crate::store::audit::url_origin;
use crate::store::webhooks::{
    payload, Attempt, CreatedEndpoint, Endpoint, EventType, NewEndpoint, WebhookAbility,
    WebhookManager, WebhookSecret, MAX_RECOVERED,
};
use crate::store::StoreError;
use crate::store::{AuditAction, AuditRecord, EventId};
use crate::versions::ApiVersion;

#[derive(Default)]
pub(super) struct Outbox {
    endpoints: BTreeMap<u64, EndpointEntry>,
    deliveries: BTreeMap<u64, DeliveryEntry>,
    /// Every attempt, oldest first, with its endpoint.
    attempts: Vec<(u64, Attempt)>,
    next_id: u64,
}

struct EndpointEntry {
    record: Endpoint,
    secret: WebhookSecret,
    previous: Option<(WebhookSecret, Timestamp)>,
    failing_since: Option<Timestamp>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Pending,
    Succeeded,
    Failed,
}

struct DeliveryEntry {
    message_id: String,
    endpoint: u64,
    order_id: Option<String>,
    kind: EventType,
    body: Body,
    raised_at: Timestamp,
    state: State,
    due: Timestamp,
    attempts: u32,
    /// `attempts` when the current round of tries began (a retry or recovery starts one).
    round_start: u32,
}

/// What a delivery sends, made at each attempt as the real store makes it: an order's body at
/// the endpoint's API version of that moment.
enum Body {
    /// Sent as it is: a test, a deletion.
    Fixed(Bytes),
    /// An order's event: its id, its time, and the order in the newest shape.
    Order {
        event_id: String,
        at: Timestamp,
        newest: Bytes,
    },
}

impl Body {
    fn render(&self, kind: EventType, endpoint: &Endpoint) -> Bytes {
        match self {
            Self::Fixed(body) => body.clone(),
            Self::Order {
                event_id,
                at,
                newest,
            } => {
                let data = crate::versions::webhook_order(newest.clone(), endpoint.api_version);
                payload(Some(event_id), kind, *at, &data)
            }
        }
    }
}

impl Outbox {
    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn endpoint_mut(
        &mut self,
        organization_id: &str,
        endpoint_id: &str,
    ) -> Result<(u64, &mut EndpointEntry), StoreError> {
        let id = endpoint_id.parse::<u64>().ok();
        match id.and_then(|id| self.endpoints.get_mut(&id).map(|entry| (id, entry))) {
            Some((id, entry)) if entry.record.organization_id == organization_id => Ok((id, entry)),
            _ => Err(StoreError::not_found(format!(
                "no webhook endpoint {:?} in this organization",
                endpoint_id.chars().take(64).collect::<String>()
            ))),
        }
    }

    fn queue(
        &mut self,
        endpoint: u64,
        kind: EventType,
        order_id: Option<String>,
        body: Body,
    ) -> String {
        let id = self.next_id();
        let message_id = format!("msg_{}", uuid::Uuid::new_v4().simple());
        let now = Timestamp::now();
        self.deliveries.insert(
            id,
            DeliveryEntry {
                message_id: message_id.clone(),
                endpoint,
                order_id,
                kind,
                body,
                raised_at: now,
                state: State::Pending,
                due: now,
                attempts: 0,
                round_start: 0,
            },
        );
        message_id
    }

    /// Queues `changes` of `organization_id` for its enabled endpoints that hear of them
    /// (in their view of providers, each change of its type there) and subscribe to that
    /// type, each body naming its event's id and time.
    pub(super) fn raise(&mut self, organization_id: &str, changes: &[Change]) {
        for change in changes {
            let heard: Vec<(u64, crate::store::FeedEvent)> = self
                .endpoints
                .iter()
                .filter(|(_, entry)| {
                    entry.record.enabled && entry.record.organization_id == organization_id
                })
                .filter_map(|(id, entry)| {
                    let event = change.in_view(entry.record.providers.as_deref())?;
                    entry
                        .record
                        .subscribes_to(EventType::from(event.change))
                        .then_some((*id, event))
                })
                .collect();
            if heard.is_empty() {
                continue;
            }
            let id = EventId::new(organization_id, change.event.id).to_string();
            for (endpoint, event) in heard {
                let kind = EventType::from(event.change);
                let body = match event.change {
                    crate::store::OrderChange::Deleted => {
                        Body::Fixed(payload(Some(&id), kind, event.created_at, &event.data))
                    }
                    _ => Body::Order {
                        event_id: id.clone(),
                        at: event.created_at,
                        newest: event.data,
                    },
                };
                self.queue(endpoint, kind, Some(change.order_id.clone()), body);
            }
        }
    }
}

impl EndpointEntry {
    fn secrets(&self, now: Timestamp) -> Vec<WebhookSecret> {
        let mut secrets = vec![self.secret.clone()];
        if let Some((previous, until)) = &self.previous {
            if *until > now {
                secrets.push(previous.clone());
            }
        }
        secrets
    }
}

impl MemoryStore {
    pub(super) fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.webhooks.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn check_organization(&self, organization_id: &str) -> Result<(), StoreError> {
        if self.read().organizations.contains_key(organization_id) {
            Ok(())
        } else {
            Err(unknown_organization(organization_id))
        }
    }
}

fn new_secret() -> Result<WebhookSecret, StoreError> {
    WebhookSecret::generate().map_err(StoreError::other)
}

#[async_trait]
impl WebhookManager for MemoryStore {
    async fn add_endpoint(
        &self,
        organization_id: &str,
        new: NewEndpoint,
    ) -> Result<CreatedEndpoint, StoreError> {
        let events = new.check()?;
        let providers = new.checked_providers()?;
        let policy = self.read().policy(organization_id)?;
        let secret = new_secret()?;
        let mut outbox = self.outbox();
        let endpoints = outbox
            .endpoints
            .values()
            .filter(|entry| entry.record.organization_id == organization_id)
            .count();
        policy.check_webhook_endpoints(endpoints as u64)?;
        let id = outbox.next_id();
        let mut record = Endpoint::new(id.to_string(), organization_id, new.url, Timestamp::now());
        record.events = events;
        record.description = new.description;
        record.api_version = Some(new.api_version);
        record.providers = providers;
        outbox.endpoints.insert(
            id,
            EndpointEntry {
                record: record.clone(),
                secret: secret.clone(),
                previous: None,
                failing_since: None,
            },
        );
        self.audit(
            AuditRecord::new(organization_id, AuditAction::WebhookAdded, Some(&record.id))
                .with_detail(url_origin(&record.url)),
        );
        Ok(CreatedEndpoint { record, secret })
    }

    async fn endpoints(&self, organization_id: &str) -> Result<Vec<Endpoint>, StoreError> {
        self.check_organization(organization_id)?;
        Ok(self
            .outbox()
            .endpoints
            .values()
            .rev()
            .filter(|entry| entry.record.organization_id == organization_id)
            .map(|entry| entry.record.clone())
            .collect())
    }

    async fn endpoint(
        &self,
        organization_id: &str,
        endpoint_id: &str,
    ) -> Result<Endpoint, StoreError> {
        Ok(self
            .outbox()
            .endpoint_mut(organization_id, endpoint_id)?
            .1
            .record
            .clone())
    }

    async fn rotate_secret(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        overlap: Duration,
    ) -> Result<CreatedEndpoint, StoreError> {
        let secret = new_secret()?;
        let mut outbox = self.outbox();
        let (_, entry) = outbox.endpoint_mut(organization_id, endpoint_id)?;
        let old = std::mem::replace(&mut entry.secret, secret.clone());
        entry.previous =
            (!overlap.is_zero()).then(|| (old, Timestamp::now().saturating_add(overlap)));
        self.audit(AuditRecord::new(
            organization_id,
            AuditAction::WebhookSecretRotated,
            Some(endpoint_id),
        ));
        Ok(CreatedEndpoint {
            record: entry.record.clone(),
            secret,
        })
    }

    async fn set_enabled(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        enabled: bool,
    ) -> Result<Endpoint, StoreError> {
        let mut outbox = self.outbox();
        let (_, entry) = outbox.endpoint_mut(organization_id, endpoint_id)?;
        if enabled && !entry.record.enabled {
            entry.failing_since = None;
        }
        if entry.record.enabled != enabled {
            let action = if enabled {
                AuditAction::WebhookEnabled
            } else {
                AuditAction::WebhookDisabled
            };
            self.audit(AuditRecord::new(organization_id, action, Some(endpoint_id)));
        }
        entry.record.enabled = enabled;
        Ok(entry.record.clone())
    }

    async fn remove_endpoint(
        &self,
        organization_id: &str,
        endpoint_id: &str,
    ) -> Result<(), StoreError> {
        let mut outbox = self.outbox();
        let (id, _) = outbox.endpoint_mut(organization_id, endpoint_id)?;
        outbox.endpoints.remove(&id);
        outbox
            .deliveries
            .retain(|_, delivery| delivery.endpoint != id);
        outbox.attempts.retain(|(endpoint, _)| *endpoint != id);
        self.audit(AuditRecord::new(
            organization_id,
            AuditAction::WebhookRemoved,
            Some(endpoint_id),
        ));
        Ok(())
    }

    fn supports(&self, ability: WebhookAbility) -> bool {
        match ability {
            WebhookAbility::TestEvents
            | WebhookAbility::DeliveryHistory
            | WebhookAbility::ApiVersions => true,
        }
    }

    async fn pin_api_version(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        version: ApiVersion,
    ) -> Result<Endpoint, StoreError> {
        let mut outbox = self.outbox();
        let (_, entry) = outbox.endpoint_mut(organization_id, endpoint_id)?;
        let before = entry.record.api_version.unwrap_or(crate::versions::FIRST);
        if before != version {
            entry.record.api_version = Some(version);
            self.audit(
                AuditRecord::new(
                    organization_id,
                    AuditAction::WebhookApiVersionPinned,
                    Some(endpoint_id),
                )
                .with_detail(crate::store::key_manager::version_change(before, version)),
            );
        }
        Ok(entry.record.clone())
    }

    async fn send_test(
        &self,
        organization_id: &str,
        endpoint_id: &str,
    ) -> Result<String, StoreError> {
        let mut outbox = self.outbox();
        let (id, entry) = outbox.endpoint_mut(organization_id, endpoint_id)?;
        if !entry.record.enabled {
            return Err(StoreError::conflict(
                "the endpoint is disabled; enable it first",
            ));
        }
        let data = serde_json::to_vec(&serde_json::json!({ "endpointId": entry.record.id }))
            .map_err(StoreError::other)?;
        let body = payload(None, EventType::WebhookTest, Timestamp::now(), &data);
        let message_id = outbox.queue(id, EventType::WebhookTest, None, Body::Fixed(body));
        self.audit(
            AuditRecord::new(
                organization_id,
                AuditAction::WebhookTestSent,
                Some(endpoint_id),
            )
            .with_detail(message_id.clone()),
        );
        Ok(message_id)
    }

    async fn attempts(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        limit: usize,
    ) -> Result<Vec<Attempt>, StoreError> {
        let mut outbox = self.outbox();
        let (id, _) = outbox.endpoint_mut(organization_id, endpoint_id)?;
        Ok(outbox
            .attempts
            .iter()
            .rev()
            .filter(|(endpoint, _)| *endpoint == id)
            .take(limit)
            .map(|(_, attempt)| attempt.clone())
            .collect())
    }

    async fn retry_message(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        let mut outbox = self.outbox();
        let (id, _) = outbox.endpoint_mut(organization_id, endpoint_id)?;
        let delivery = outbox
            .deliveries
            .values_mut()
            .find(|delivery| delivery.endpoint == id && delivery.message_id == message_id)
            .ok_or_else(|| StoreError::not_found("no such message to this endpoint"))?;
        // A pending one is queued already (perhaps in flight: its lease stands): nothing
        // changes, and no entry is written.
        if delivery.state != State::Pending {
            delivery.requeue();
            self.audit(
                AuditRecord::new(
                    organization_id,
                    AuditAction::WebhookMessageRetried,
                    Some(endpoint_id),
                )
                .with_detail(message_id),
            );
        }
        Ok(())
    }

    async fn recover(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        since: Timestamp,
    ) -> Result<u64, StoreError> {
        let mut outbox = self.outbox();
        let (id, _) = outbox.endpoint_mut(organization_id, endpoint_id)?;
        // Oldest first, as PostgreSQL orders them: (raised, delivery id).
        let mut failed: Vec<_> = outbox
            .deliveries
            .iter_mut()
            .filter(|(_, delivery)| {
                delivery.endpoint == id
                    && delivery.state == State::Failed
                    && delivery.raised_at >= since
            })
            .collect();
        failed.sort_by_key(|(key, delivery)| (delivery.raised_at, **key));
        let mut recovered = 0;
        for (_, delivery) in failed
            .into_iter()
            .take(usize::try_from(MAX_RECOVERED).unwrap_or(usize::MAX))
        {
            delivery.requeue();
            recovered += 1;
        }
        if recovered > 0 {
            self.audit(
                AuditRecord::new(
                    organization_id,
                    AuditAction::WebhookMessagesRecovered,
                    Some(endpoint_id),
                )
                .with_detail(recovered.to_string()),
            );
        }
        Ok(recovered)
    }
}

impl DeliveryEntry {
    fn requeue(&mut self) {
        self.state = State::Pending;
        self.due = Timestamp::now();
        self.round_start = self.attempts;
    }
}
