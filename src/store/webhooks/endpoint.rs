//! An organization's webhook endpoints and their delivery attempts, and the trait a store
//! implements to manage them.

use std::time::Duration;

use async_trait::async_trait;
use serde::{Serialize, Serializer};

use super::{EventType, WebhookSecret};
use crate::model::Timestamp;
use crate::store::StoreError;
use crate::versions::ApiVersion;

/// The longest endpoint URL, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// The longest endpoint description, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 200;

/// The most messages one [`WebhookManager::recover`] queues again: a tenant that recovers
/// thousands of failed messages to a hanging endpoint puts them back a hundred at a time, at
/// the management API's rate, never all at once ahead of every other organization's.
pub const MAX_RECOVERED: u64 = 100;

/// An endpoint's record, without its secret. Serializes in camelCase: `id`,
/// `organizationId`, `url`, `events` (empty: every type), `description`, `enabled`,
/// `createdAt`, `apiVersion`, `providers` (`null`: every order).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Endpoint {
    /// The store's id of the endpoint.
    pub id: String,
    /// The organization whose orders it hears about.
    pub organization_id: String,
    /// Where events are posted.
    pub url: String,
    /// The event types it is subscribed to; empty for every type.
    pub events: Vec<EventType>,
    /// What the organization wrote about it.
    pub description: String,
    /// Whether events are written for it and delivered to it.
    pub enabled: bool,
    /// When it was added.
    pub created_at: Timestamp,
    /// The API version its orders' bodies are rendered at; `None` (an endpoint added before
    /// endpoints had versions, or by a store that records none) is the first version, and is
    /// listed as it.
    #[serde(serialize_with = "crate::versions::serialize_pinned")]
    pub api_version: Option<ApiVersion>,
    /// The providers whose orders it hears of (sorted, each once), as a key limited to them
    /// reads the events feed: an order that comes into their view is `order.created` for the
    /// endpoint, one that leaves it `order.deleted` (its id only). `None`: every order.
    pub providers: Option<Vec<String>>,
}

impl Endpoint {
    /// Creates a record (for stores).
    pub fn new(
        id: impl Into<String>,
        organization_id: impl Into<String>,
        url: impl Into<String>,
        created_at: Timestamp,
    ) -> Self {
        Self {
            id: id.into(),
            organization_id: organization_id.into(),
            url: url.into(),
            events: Vec::new(),
            description: String::new(),
            enabled: true,
            created_at,
            api_version: None,
            providers: None,
        }
    }

    /// Returns whether it hears about events of type `kind` (a test is always heard).
    pub fn subscribes_to(&self, kind: EventType) -> bool {
        kind == EventType::WebhookTest || self.events.is_empty() || self.events.contains(&kind)
    }
}

/// An endpoint as [`WebhookManager::add_endpoint`] and [`WebhookManager::rotate_secret`]
/// return it: its record and its newest secret, the only time the secret is shown.
/// Serializes as the record with `secret`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatedEndpoint {
    /// The endpoint's record.
    pub record: Endpoint,
    /// The secret deliveries are signed with from now on.
    pub secret: WebhookSecret,
}

impl Serialize for CreatedEndpoint {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct WithSecret<'a> {
            #[serde(flatten)]
            record: &'a Endpoint,
            secret: &'a str,
        }
        WithSecret {
            record: &self.record,
            secret: self.secret.expose(),
        }
        .serialize(serializer)
    }
}

/// What to add: a URL, the event types (none for all), a description and the API version.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NewEndpoint {
    /// Where events are posted: an absolute `https` (or `http`, when the delivering host
    /// allows it) URL without credentials.
    pub url: String,
    /// The event types to hear about; empty for every type.
    pub events: Vec<EventType>,
    /// Free text for the organization, at most [`MAX_DESCRIPTION_CHARS`] characters.
    pub description: String,
    /// The API version its orders' bodies are rendered at: by default the newest
    /// ([`versions::NEWEST`](crate::versions::NEWEST)), as for a new key. The caller checks
    /// that the API offers it.
    pub api_version: ApiVersion,
    /// The providers whose orders it hears of ([`Endpoint::providers`]); `None`: every order.
    pub providers: Option<Vec<String>>,
}

impl Default for NewEndpoint {
    fn default() -> Self {
        Self {
            url: String::new(),
            events: Vec::new(),
            description: String::new(),
            api_version: crate::versions::NEWEST,
            providers: None,
        }
    }
}

impl NewEndpoint {
    /// An endpoint at `url` for every event type, at the newest API version.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            ..Self::default()
        }
    }

    /// Renders its orders' bodies at `version`.
    #[must_use]
    pub fn with_api_version(mut self, version: ApiVersion) -> Self {
        self.api_version = version;
        self
    }

    /// Subscribes to these event types only.
    #[must_use]
    pub fn with_events(mut self, events: impl IntoIterator<Item = EventType>) -> Self {
        self.events = events.into_iter().collect();
        self
    }

    /// Sets the description.
    #[must_use]
    pub fn with_description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// Limits it to the orders of `providers` ([`Endpoint::providers`]).
    #[must_use]
    pub fn with_providers<S: AsRef<str>>(mut self, providers: &[S]) -> Self {
        self.providers = Some(providers.iter().map(|p| p.as_ref().to_owned()).collect());
        self
    }

    /// The providers as a store keeps them: sorted, each once (`None`: every order).
    ///
    /// # Errors
    ///
    /// `InvalidData` for a list [`canonical_providers`](crate::key::canonical_providers)
    /// refuses (none, more than 50, an empty id or one with control characters).
    pub fn checked_providers(&self) -> Result<Option<Vec<String>>, StoreError> {
        self.providers
            .as_deref()
            .map(|providers| {
                crate::key::canonical_providers(providers).map_err(|message| {
                    StoreError::refusal(crate::store::StoreErrorKind::InvalidData, message)
                })
            })
            .transpose()
    }

    /// Checks what a store must refuse (`InvalidData`), and returns the event types sorted
    /// and without repeats. Stores call it before they write.
    ///
    /// # Errors
    ///
    /// `InvalidData` for a URL that is not absolute `http`/`https` with a host, holds
    /// credentials or a fragment, or is longer than [`MAX_URL_BYTES`]; a description over
    /// [`MAX_DESCRIPTION_CHARS`] or with control characters; providers that
    /// [`checked_providers`](Self::checked_providers) refuses.
    pub fn check(&self) -> Result<Vec<EventType>, StoreError> {
        check_url(&self.url)?;
        self.checked_providers()?;
        if self.description.chars().count() > MAX_DESCRIPTION_CHARS {
            return Err(StoreError::invalid_data(format!(
                "the description is longer than {MAX_DESCRIPTION_CHARS} characters"
            )));
        }
        if self.description.chars().any(char::is_control) {
            return Err(StoreError::invalid_data(
                "the description holds control characters",
            ));
        }
        let mut events = self.events.clone();
        events.sort_unstable();
        events.dedup();
        Ok(events)
    }
}

fn check_url(url: &str) -> Result<(), StoreError> {
    let invalid = |why: &str| StoreError::invalid_data(format!("the URL {why}"));
    if url.len() > MAX_URL_BYTES {
        return Err(invalid(&format!("is longer than {MAX_URL_BYTES} bytes")));
    }
    if url.contains('#') {
        return Err(invalid("has a fragment"));
    }
    let uri: http::Uri = url
        .parse()
        .map_err(|_| invalid("is not an absolute http or https URL"))?;
    match uri.scheme_str() {
        Some("https" | "http") => {}
        _ => return Err(invalid("is not an absolute http or https URL")),
    }
    let Some(authority) = uri.authority() else {
        return Err(invalid("has no host"));
    };
    if authority.as_str().contains('@') {
        return Err(invalid("holds credentials (user:password@), which would be shown to anyone who lists endpoints"));
    }
    if authority.host().is_empty() {
        return Err(invalid("has no host"));
    }
    Ok(())
}

/// How a delivery attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The endpoint answered 2xx.
    Succeeded,
    /// Anything else: another status, a time-out, a connection error, a refused
    /// destination.
    Failed,
}

impl AttemptOutcome {
    /// Returns the outcome's name: `succeeded` or `failed`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }
}

impl Serialize for AttemptOutcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One delivery attempt of one message to one endpoint. Serializes in camelCase:
/// `messageId` (the `webhook-id`), `eventType`, `attempt` (1, 2, ...), `outcome`,
/// `responseStatus` (or null), `error` (or null), `responseBody` (truncated, or null),
/// `durationMs`, `attemptedAt`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Attempt {
    /// The message's `webhook-id`, the same on every attempt.
    pub message_id: String,
    /// The event's type.
    pub event_type: EventType,
    /// Which attempt of the message this was, from 1.
    pub attempt: u32,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The endpoint's status, if it answered.
    pub response_status: Option<u16>,
    /// Why it failed, if it did not get an answer (or the answer was not 2xx).
    pub error: Option<String>,
    /// The start of the endpoint's response body.
    pub response_body: Option<String>,
    /// How long the attempt took, in milliseconds.
    pub duration_ms: u64,
    /// When it started.
    pub attempted_at: Timestamp,
}

/// Manages the webhook endpoints of organizations: what a host's Settings page and the
/// standalone host's `webhooks` command call.
///
/// Scoped like [`KeyManager`](crate::store::KeyManager): an endpoint id of another
/// organization is `NotFound`, exactly like an id that does not exist, and so is an unknown
/// organization. A secret is returned only by the calls that make one
/// ([`add_endpoint`](Self::add_endpoint), [`rotate_secret`](Self::rotate_secret)).
///
/// A host's own endpoint table implements the six required methods (add, list, get, rotate
/// the secret, enable or disable, remove) and has a working Webhooks section. The optional
/// abilities (test events; the delivery history with its retries and recovery) are methods
/// with defaults that answer [`Unsupported`](crate::StoreErrorKind::Unsupported); a store
/// that implements one says so in [`supports`](Self::supports), and the management service
/// and the Settings page leave out what is not supported (404, like every ability a host does
/// not offer).
///
/// Implemented in full by [`MemoryStore`](crate::MemoryStore) and `PgStore` with the same
/// semantics; `testing::run_webhooks` checks any implementation.
///
/// # Rules
///
/// A store that also keeps the [`AuditLog`](crate::store::AuditLog) audits every change of an
/// endpoint as [`KeyManager`](crate::store::KeyManager)'s changes are (`webhook.added`,
/// `webhook.secret_rotated`, `webhook.enabled`, `webhook.disabled`, `webhook.removed`,
/// `webhook.test_sent`, `webhook.message_retried`, `webhook.messages_recovered`,
/// `webhook.api_version_pinned`), under the
/// same two rules, `audit-in-the-change` and `audit-only-changes`; an endpoint's URL is
/// logged as its origin only. `testing::run_webhook_audit_log` checks them, and a failure
/// names the rule.
#[async_trait]
pub trait WebhookManager: Send + Sync {
    /// Adds an endpoint for `organization_id` with a new secret, and returns it with the
    /// secret.
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown organization; `InvalidData` for what
    /// [`NewEndpoint::check`] refuses.
    async fn add_endpoint(
        &self,
        organization_id: &str,
        new: NewEndpoint,
    ) -> Result<CreatedEndpoint, StoreError>;

    /// Returns the records of `organization_id`'s endpoints, newest first.
    async fn endpoints(&self, organization_id: &str) -> Result<Vec<Endpoint>, StoreError>;

    /// Returns the record of the endpoint `endpoint_id` of `organization_id`.
    async fn endpoint(
        &self,
        organization_id: &str,
        endpoint_id: &str,
    ) -> Result<Endpoint, StoreError>;

    /// Gives the endpoint a new secret and returns it. The previous secret keeps signing
    /// beside the new one for `overlap` (deliveries then carry two signatures), so the
    /// receiver can move to the new secret without refusing a delivery; a secret older than
    /// the previous one stops at once.
    async fn rotate_secret(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        overlap: Duration,
    ) -> Result<CreatedEndpoint, StoreError>;

    /// Enables or disables the endpoint and returns its record. A disabled endpoint gets no
    /// new events and no deliveries; enabled again, it gets what was still due, and its
    /// failure streak starts afresh.
    async fn set_enabled(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        enabled: bool,
    ) -> Result<Endpoint, StoreError>;

    /// Removes the endpoint with its messages and attempts.
    async fn remove_endpoint(
        &self,
        organization_id: &str,
        endpoint_id: &str,
    ) -> Result<(), StoreError>;

    /// Whether the store offers `ability`: `false` for every ability by default. A store
    /// that overrides the methods of an ability says `true` for it here.
    fn supports(&self, ability: WebhookAbility) -> bool {
        let _ = ability;
        false
    }

    /// Queues a `webhook.test` event for the endpoint and returns its message id
    /// ([`WebhookAbility::TestEvents`]).
    ///
    /// # Errors
    ///
    /// `Conflict` for a disabled endpoint (it would never be delivered); `Unsupported` by
    /// default.
    async fn send_test(
        &self,
        organization_id: &str,
        endpoint_id: &str,
    ) -> Result<String, StoreError> {
        let _ = (organization_id, endpoint_id);
        Err(StoreError::unsupported("webhook test events"))
    }

    /// Returns the endpoint's latest `limit` delivery attempts, newest first
    /// ([`WebhookAbility::DeliveryHistory`]; `Unsupported` by default).
    async fn attempts(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        limit: usize,
    ) -> Result<Vec<Attempt>, StoreError> {
        let _ = (organization_id, endpoint_id, limit);
        Err(StoreError::unsupported("webhook delivery history"))
    }

    /// Queues the message `message_id` (a `webhook-id`) to the endpoint again, due now, with a
    /// fresh round of tries, when it succeeded or ran out of tries; a message still pending
    /// (waiting for a retry, or in flight) is left as it is, so its lease stands, and no audit
    /// entry is written for it.
    ///
    /// ([`WebhookAbility::DeliveryHistory`].)
    ///
    /// # Errors
    ///
    /// `NotFound` for a message the endpoint never had; `Unsupported` by default.
    async fn retry_message(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        let _ = (organization_id, endpoint_id, message_id);
        Err(StoreError::unsupported("webhook delivery history"))
    }

    /// Queues again the messages to the endpoint that ran out of tries and were raised at or
    /// after `since`, oldest first and at most [`MAX_RECOVERED`] of them, due now, and returns
    /// how many (a caller with more to recover calls again). A call that recovers none writes
    /// no audit entry. ([`WebhookAbility::DeliveryHistory`]; `Unsupported` by default.)
    async fn recover(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        since: Timestamp,
    ) -> Result<u64, StoreError> {
        let _ = (organization_id, endpoint_id, since);
        Err(StoreError::unsupported("webhook delivery history"))
    }

    /// Pins the endpoint to the API version `version` and returns its record
    /// ([`WebhookAbility::ApiVersions`]): the bodies of its orders' events are rendered at it
    /// from its next delivery attempt on (a retry of an earlier message included; the
    /// signature covers the rendered body). A pin to its own version changes nothing and
    /// writes no audit entry. The caller checks that the API offers `version`.
    ///
    /// # Errors
    ///
    /// `NotFound` for an endpoint the organization does not have; `Unsupported` by default.
    ///
    /// Audited as `webhook.api_version_pinned`, the versions as the detail (`2026-11-27 to
    /// 2026-11-28`).
    async fn pin_api_version(
        &self,
        organization_id: &str,
        endpoint_id: &str,
        version: ApiVersion,
    ) -> Result<Endpoint, StoreError> {
        let _ = (organization_id, endpoint_id, version);
        Err(StoreError::unsupported("API versions of webhook endpoints"))
    }
}

/// An optional ability of a [`WebhookManager`], as [`WebhookManager::supports`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WebhookAbility {
    /// [`WebhookManager::send_test`]: a `webhook.test` event queued on demand.
    TestEvents,
    /// [`WebhookManager::attempts`], [`WebhookManager::retry_message`] and
    /// [`WebhookManager::recover`]: the delivery history and what is sent again from it.
    DeliveryHistory,
    /// [`WebhookManager::pin_api_version`]: an endpoint's API version changed after it was
    /// added.
    ApiVersions,
}

impl WebhookAbility {
    /// Every ability.
    pub const ALL: [Self; 3] = [Self::TestEvents, Self::DeliveryHistory, Self::ApiVersions];
}
