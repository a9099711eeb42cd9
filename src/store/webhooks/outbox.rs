//! The outbox as the delivery workers see it: claim what is due under a lease, finish an
//! attempt if it is still the current one.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::{AttemptOutcome, Endpoint, EventType, WebhookSecret};
use crate::model::Timestamp;
use crate::store::StoreError;

/// The body of an event: `{"id":...,"type":...,"timestamp":...,"data":...}`, with `id` the
/// event's id in the events feed ([`EventId`](crate::store::EventId); left out when there is
/// none, as for `webhook.test`), `data` the given JSON bytes as they are (for an order,
/// [`EncodedOrder::json`](crate::EncodedOrder::json), the bytes `GET /v1/orders` serves) and
/// `timestamp` (the event's `createdAt` in the feed) in milliseconds with `Z`.
///
/// ```
/// use partner_api::webhooks::{payload, EventType};
///
/// let timestamp = "2026-11-23T10:00:00Z".parse()?;
/// let body = payload(Some("evt_1"), EventType::OrderDeleted, timestamp, br#"{"id":"ord_1"}"#);
/// assert_eq!(
///     body,
///     r#"{"id":"evt_1","type":"order.deleted","timestamp":"2026-11-23T10:00:00.000Z","data":{"id":"ord_1"}}"#
/// );
/// # Ok::<(), partner_api::TimestampParseError>(())
/// ```
pub fn payload(id: Option<&str>, kind: EventType, timestamp: Timestamp, data: &[u8]) -> Bytes {
    let mut body = Vec::with_capacity(data.len() + 112);
    body.push(b'{');
    if let Some(id) = id {
        // An event id is `evt_` and base64url: nothing to escape.
        body.extend_from_slice(br#""id":""#);
        body.extend_from_slice(id.as_bytes());
        body.extend_from_slice(br#"","#);
    }
    body.extend_from_slice(br#""type":""#);
    body.extend_from_slice(kind.as_str().as_bytes());
    body.extend_from_slice(br#"","timestamp":""#);
    body.extend_from_slice(timestamp.to_string().as_bytes());
    body.extend_from_slice(br#"","data":"#);
    body.extend_from_slice(data);
    body.push(b'}');
    Bytes::from(body)
}

/// What a worker asks for: at most `limit` due deliveries, per endpoint at most
/// `per_endpoint` and per organization at most `per_organization` at once, counting the ones
/// it already has in flight, and at most `failing_room` to endpoints whose deliveries fail.
///
/// With `slots` set (the worker's slots, [`with_slots`](Self::with_slots)), each
/// organization holds at most an equal part of them, `part = max(1, slots / (k + 1))` in
/// flight with `k` the organizations in flight or due, and `part` of the free slots are kept
/// for organizations with nothing in flight: a delivery is claimed only if at least `part`
/// slots stay free after it, unless it is the first of such an organization. So a claim never
/// hands every free slot to the organizations that happen to be due, however they arrive,
/// and the next organization due finds a slot free.
///
/// Which due deliveries a store takes first, when there are more than it may: those of
/// organizations with nothing in flight in this worker, then those to endpoints that do not
/// fail; within them, in any fair order (at random on PostgreSQL). So an organization whose
/// endpoint answers is never queued behind others' hanging endpoints: it takes the next slot
/// that frees, and slots held by failing endpoints free within the failing time-out.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimRequest {
    /// The most deliveries to claim.
    pub limit: usize,
    /// The most deliveries per endpoint in flight at once in this worker.
    pub per_endpoint: usize,
    /// The endpoints this worker has deliveries in flight to, and how many.
    pub in_flight: Vec<(String, usize)>,
    /// The most deliveries per organization in flight at once in this worker, so that one
    /// organization's slow or hanging endpoints never hold every slot.
    pub per_organization: usize,
    /// The organizations this worker has deliveries in flight for, and how many.
    pub organizations_in_flight: Vec<(String, usize)>,
    /// The most deliveries to endpoints whose deliveries fail (`failing_since` set) to claim.
    pub failing_room: usize,
    /// The worker's slots, shared in equal parts among the organizations in flight or due
    /// (`usize::MAX`: no parts).
    pub slots: usize,
    /// How long a claimed delivery is this worker's: after that it is due again, for any
    /// worker (this one died, or hangs).
    pub lease: Duration,
}

impl ClaimRequest {
    /// Asks for `limit` deliveries, `per_endpoint` per endpoint, leased for `lease`.
    pub fn new(limit: usize, per_endpoint: usize, lease: Duration) -> Self {
        Self {
            limit,
            per_endpoint,
            in_flight: Vec::new(),
            per_organization: usize::MAX,
            organizations_in_flight: Vec::new(),
            failing_room: usize::MAX,
            slots: usize::MAX,
            lease,
        }
    }

    /// Allows at most `per_organization` deliveries in flight per organization, counting
    /// `in_flight` (organization, count) the worker has already.
    #[must_use]
    pub fn with_organizations(
        mut self,
        per_organization: usize,
        in_flight: Vec<(String, usize)>,
    ) -> Self {
        self.per_organization = per_organization;
        self.organizations_in_flight = in_flight;
        self
    }

    /// Allows at most `room` deliveries to endpoints whose deliveries fail.
    #[must_use]
    pub fn with_failing_room(mut self, room: usize) -> Self {
        self.failing_room = room;
        self
    }

    /// Whether this worker has nothing in flight for the organization `organization_id`.
    pub fn is_idle(&self, organization_id: &str) -> bool {
        !self
            .organizations_in_flight
            .iter()
            .any(|(id, count)| id == organization_id && *count > 0)
    }

    /// Shares the worker's `slots` in equal parts among the organizations in flight or due.
    #[must_use]
    pub fn with_slots(mut self, slots: usize) -> Self {
        self.slots = slots;
        self
    }

    /// The most one organization holds in flight when `organizations` are in flight or due:
    /// an equal part of the slots, leaving one part free (no bound without `slots`).
    pub fn equal_part(&self, organizations: usize) -> usize {
        if self.slots == usize::MAX {
            return usize::MAX;
        }
        (self.slots / organizations.saturating_add(1)).max(1)
    }

    /// How many more this worker may claim for the organization `organization_id`.
    pub fn room_for_organization(&self, organization_id: &str) -> usize {
        let busy = self
            .organizations_in_flight
            .iter()
            .find(|(id, _)| id == organization_id)
            .map_or(0, |(_, count)| *count);
        self.per_organization.saturating_sub(busy)
    }

    /// Says which endpoints already have deliveries in flight.
    #[must_use]
    pub fn with_in_flight(mut self, in_flight: Vec<(String, usize)>) -> Self {
        self.in_flight = in_flight;
        self
    }

    /// How many more this worker may claim for `endpoint_id`.
    pub fn room_for(&self, endpoint_id: &str) -> usize {
        let busy = self
            .in_flight
            .iter()
            .find(|(id, _)| id == endpoint_id)
            .map_or(0, |(_, count)| *count);
        self.per_endpoint.saturating_sub(busy)
    }
}

/// A claimed delivery: one message to one endpoint, one attempt, signed with the endpoint's
/// current secrets.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Delivery {
    /// The store's handle of the delivery.
    pub delivery_id: String,
    /// The `webhook-id`: one per message and endpoint, the same on every attempt.
    pub message_id: String,
    /// The endpoint's id.
    pub endpoint_id: String,
    /// The endpoint's organization.
    pub organization_id: String,
    /// Where to post.
    pub url: String,
    /// The secrets that sign it: the newest, and the previous one during a rotation's overlap.
    pub secrets: Vec<WebhookSecret>,
    /// The event's type.
    pub event_type: EventType,
    /// The body, the same bytes on every attempt.
    pub body: Bytes,
    /// Which attempt this is, from 1 and across retries on request: a finish with another
    /// number is not current.
    pub attempt: u32,
    /// Which try of the current round this is, from 1: the retry schedule counts these (a
    /// message retried or recovered on request gets a fresh round).
    pub tries: u32,
    /// Since when every delivery to the endpoint has failed, if its last one did.
    pub failing_since: Option<Timestamp>,
}

impl Delivery {
    /// Creates a delivery (for stores).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        delivery_id: String,
        message_id: String,
        endpoint: &Endpoint,
        secrets: Vec<WebhookSecret>,
        event_type: EventType,
        body: Bytes,
        attempt: u32,
        tries: u32,
        failing_since: Option<Timestamp>,
    ) -> Self {
        Self {
            delivery_id,
            message_id,
            endpoint_id: endpoint.id.clone(),
            organization_id: endpoint.organization_id.clone(),
            url: endpoint.url.clone(),
            secrets,
            event_type,
            body,
            attempt,
            tries,
            failing_since,
        }
    }
}

/// How an attempt ended and what comes next, as the worker reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FinishedAttempt {
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// The endpoint's status, if it answered.
    pub response_status: Option<u16>,
    /// Why it failed.
    pub error: Option<String>,
    /// The start of the response body.
    pub response_body: Option<String>,
    /// How long it took.
    pub duration: Duration,
    /// When it started.
    pub attempted_at: Timestamp,
    /// What the delivery does next.
    pub next: NextStep,
    /// Whether the endpoint is to be disabled (it answered 410 Gone, or has failed for too
    /// long).
    pub disable_endpoint: bool,
}

impl FinishedAttempt {
    /// Why this attempt disables its endpoint, if it does (`disable_endpoint`): it answered
    /// 410 Gone, or the endpoint has failed for the disable period.
    pub fn disable_reason(&self) -> Option<DisableReason> {
        if !self.disable_endpoint {
            None
        } else if self.response_status == Some(410) {
            Some(DisableReason::Gone)
        } else {
            Some(DisableReason::Failing)
        }
    }

    /// A finished attempt that started at `attempted_at` and took `duration`.
    pub fn new(outcome: AttemptOutcome, attempted_at: Timestamp, duration: Duration) -> Self {
        Self {
            outcome,
            response_status: None,
            error: None,
            response_body: None,
            duration,
            attempted_at,
            next: match outcome {
                AttemptOutcome::Succeeded => NextStep::Done,
                AttemptOutcome::Failed => NextStep::GiveUp,
            },
            disable_endpoint: false,
        }
    }
}

/// Why a delivery disabled an endpoint. Its [`as_str`](Self::as_str) is the detail of the
/// endpoint's `webhook.disabled` audit entry (by [`DELIVERY_ACTOR`](crate::store::DELIVERY_ACTOR)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisableReason {
    /// The endpoint answered 410 Gone.
    Gone,
    /// Every delivery to it failed for the configured period.
    Failing,
}

impl DisableReason {
    /// Returns the reason's name: `gone` or `failing`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Gone => "gone",
            Self::Failing => "failing",
        }
    }
}

/// What a delivery does after an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NextStep {
    /// It succeeded: nothing more.
    Done,
    /// Try again at this time.
    RetryAt(Timestamp),
    /// It ran out of tries (or was refused for good): failed, until retried or recovered.
    GiveUp,
}

/// What finishing an attempt did.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Finish {
    /// Whether the attempt was still the current one and was recorded. A worker whose lease
    /// ran out finds that another took the delivery over; nothing it reports is written.
    pub current: bool,
    /// The endpoint's record, when this finish disabled it.
    pub disabled: Option<Endpoint>,
}

/// How much is waiting, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Backlog {
    /// Deliveries due now to enabled endpoints.
    pub due: u64,
    /// How long the longest-waiting of them has been due.
    pub oldest_due: Option<Duration>,
}

/// The outbox of deliveries, as the [`Dispatcher`](crate::webhooks::Dispatcher) works it off.
///
/// Each delivery is one message to one endpoint. The rules every store keeps (the
/// conformance suite, `testing::run_webhooks`, checks them; a failure names the rule):
///
/// - rule `outbox-with-the-order`: the store's order writes fill the outbox. Each change of
///   an order (created, updated, deleted) queues its event, as [`payload`] writes it, for
///   each enabled endpoint of the organization subscribed to its type, in the same
///   transaction as the change (`PgStore`: the triggers, on its own order table and on a
///   host's), and one order's events go out in the order of its changes.
///
/// - **Claim** returns due deliveries (pending, due time passed) of enabled endpoints, first
///   attempts before retries, at most one per endpoint whose deliveries fail (`failing_since`),
///   and never a delivery while an earlier one of the same order to the same endpoint is
///   pending: one order's events go out in commit order. Claiming a
///   delivery increments its attempt number and makes it due again `lease` later, in the
///   same committed write, so a worker that dies loses only its lease, and concurrent
///   workers never claim the same delivery.
/// - **Finish** writes the attempt only if the delivery is still pending at that attempt
///   number; a late worker whose delivery was taken over changes nothing. When it disables
///   the endpoint ([`FinishedAttempt::disable_reason`]), a store that keeps an audit log
///   ([`AuditLog`](crate::store::AuditLog)) writes `webhook.disabled` by
///   [`DELIVERY_ACTOR`](crate::store::DELIVERY_ACTOR), the reason as its detail, with the
///   change.
#[async_trait]
pub trait WebhookOutbox: Send + Sync {
    /// Claims due deliveries as [`ClaimRequest`] allows.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<Delivery>, StoreError>;

    /// Records how the attempt of `delivery` ended, if it is still current.
    async fn finish(
        &self,
        delivery: &Delivery,
        attempt: &FinishedAttempt,
    ) -> Result<Finish, StoreError>;

    /// Returns how much is due.
    async fn backlog(&self) -> Result<Backlog, StoreError>;

    /// Deletes at most `batch` of the messages raised more than `older_than` ago by the
    /// store's own clock (the oldest first), with their deliveries and attempts, and returns
    /// how many it deleted: the retention of
    /// [`Maintenance::with_webhook_retention`](crate::maintenance::Maintenance::with_webhook_retention).
    /// The store's clock, not the replica's, so a replica whose clock is off deletes nothing
    /// early. Replicas may prune at once. The default deletes nothing, for a store that keeps its history
    /// bounded another way.
    async fn prune(&self, older_than: Duration, batch: usize) -> Result<u64, StoreError> {
        let _ = (older_than, batch);
        Ok(0)
    }
}
