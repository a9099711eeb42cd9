//! Webhooks (feature `webhooks`): partners hear about their orders as they change, as signed
//! [Standard Webhooks](https://www.standardwebhooks.com/) from a transactional outbox,
//! delivered by every replica.
//!
//! - [`EventType`]: `order.created`, `order.updated`, `order.deleted`, and `webhook.test` on
//!   request. A payload is `{"type", "timestamp", "data"}`; `data` of a created or updated
//!   order is the order exactly as `GET /v1/orders` shows it, of a deleted one `{"id"}`.
//! - [`WebhookManager`]: an organization's endpoints (add, list, rotate the secret, enable,
//!   disable, remove, send a test event, list attempts, retry, recover), implemented by
//!   [`MemoryStore`](crate::MemoryStore) and `PgStore`.
//! - [`WebhookOutbox`]: what the delivery workers claim and finish, implemented by the same
//!   stores. On `PgStore` the outbox is written by a trigger on `partner_orders`, in the
//!   transaction of the change, and only for organizations with an enabled endpoint
//!   subscribed to the event's type; the memory store raises the same events in process.
//! - [`Dispatcher`]: the delivery worker every replica runs: leases, retries on a schedule,
//!   one order's events in commit order, a bounded HTTP client that never connects to a
//!   blocked address ([`DestinationPolicy`]).
//! - [`WebhookSecret`], [`sign`] and [`verify`]: the signature scheme, and the verifier a
//!   partner writing Rust checks deliveries with.
//!
//! How delivery behaves, and why it is correct across replicas, is in
//! [`docs::webhooks`](crate::docs::webhooks).

mod attempts;
mod config;
mod destination;
mod dispatcher;
mod in_flight;
mod retention;
mod signing;

pub use config::{DeliveryConfig, DEFAULT_RETRY_SCHEDULE};
pub use destination::{BlockedDestination, DestinationPolicy};
pub use dispatcher::{DisabledEndpoint, Dispatcher};
pub(crate) use retention::prune_messages;
pub use retention::{DEFAULT_RETENTION, RETENTION_INTERVAL};
pub use signing::{sign, verify, VerifyError, TIMESTAMP_TOLERANCE};

// The traits stores implement and their records live in the store layer, below the
// dispatcher and the management service that call them.
pub use crate::store::webhooks::{
    payload, Attempt, AttemptOutcome, Backlog, ClaimRequest, CreatedEndpoint, Delivery,
    DisableReason, Endpoint, EventType, Finish, FinishedAttempt, InvalidSecret, NewEndpoint,
    NextStep, UnknownEventType, WebhookAbility, WebhookManager, WebhookOutbox, WebhookSecret,
    MAX_DESCRIPTION_CHARS, MAX_RECOVERED, MAX_URL_BYTES,
};
