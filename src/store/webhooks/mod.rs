//! The write side of webhooks: [`WebhookManager`] (an organization's endpoints) and
//! [`WebhookOutbox`] (what the delivery workers claim and finish), the traits a store
//! implements, with the records they take and return. The services above them (the
//! [`Dispatcher`](crate::store::webhooks::Dispatcher), the management service) only call them;
//! everything here is re-exported from [`webhooks`](crate::webhooks).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod endpoint;
mod outbox;
mod secret;

pub use endpoint::{
    Attempt, AttemptOutcome, CreatedEndpoint, Endpoint, NewEndpoint, WebhookAbility,
    WebhookManager, MAX_DESCRIPTION_CHARS, MAX_RECOVERED, MAX_URL_BYTES,
};
pub use outbox::{
    payload, Backlog, ClaimRequest, Delivery, DisableReason, Finish, FinishedAttempt, NextStep,
    WebhookOutbox,
};
pub use secret::{InvalidSecret, WebhookSecret};

/// The type of an event: what happened to an order, or a test on request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EventType {
    /// `order.created`: an order was written for the first time.
    OrderCreated,
    /// `order.updated`: any field of an order changed.
    OrderUpdated,
    /// `order.deleted`: an order was removed.
    OrderDeleted,
    /// `webhook.test`: sent on request to one endpoint, to try it.
    WebhookTest,
}

impl From<crate::store::OrderChange> for EventType {
    fn from(change: crate::store::OrderChange) -> Self {
        match change {
            crate::store::OrderChange::Created => Self::OrderCreated,
            crate::store::OrderChange::Updated => Self::OrderUpdated,
            crate::store::OrderChange::Deleted => Self::OrderDeleted,
        }
    }
}

impl EventType {
    /// Every event type.
    pub const ALL: [Self; 4] = [
        Self::OrderCreated,
        Self::OrderUpdated,
        Self::OrderDeleted,
        Self::WebhookTest,
    ];

    /// Returns the type's name, as payloads and subscriptions spell it.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::OrderCreated => "order.created",
            Self::OrderUpdated => "order.updated",
            Self::OrderDeleted => "order.deleted",
            Self::WebhookTest => "webhook.test",
        }
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an [`EventType`] from a name that is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownEventType(String);

impl fmt::Display for UnknownEventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown event type {:?} (known: order.created, order.updated, order.deleted, webhook.test)",
            self.0.chars().take(64).collect::<String>()
        )
    }
}

impl std::error::Error for UnknownEventType {}

impl FromStr for EventType {
    type Err = UnknownEventType;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
            .ok_or_else(|| UnknownEventType(name.to_owned()))
    }
}

impl Serialize for EventType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EventType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}
