//! [`StoreError`]: the one error of every store operation, and its kinds.

use std::error::Error as StdError;
use std::fmt;

use crate::log::ErrorChain;
use crate::model::InvalidOrder;

type BoxError = Box<dyn StdError + Send + Sync>;

/// What went wrong in a store, classified by what the API answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store cannot be reached or did not answer in time: the API answers 503.
    Unavailable,
    /// The store holds or was given data that breaks the contract (an order that cannot be
    /// served, a key that is no bearer token, an expiry in the past): the API answers 500.
    InvalidData,
    /// What was asked for does not exist, or belongs to another organization (an unknown
    /// organization, a key id of another organization's key).
    NotFound,
    /// What was to be added exists already (an organization, a key, an order id), or the
    /// thing is in a state that forbids the change (rolling a revoked key).
    Conflict,
    /// Any other failure: the API answers 500.
    Other,
    /// The store does not offer this (an optional ability of a trait, such as
    /// [`KeyManager::key_policy`](crate::store::KeyManager::key_policy), left at its
    /// default): the management API answers 501.
    Unsupported,
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unavailable => "store unavailable",
            Self::InvalidData => "invalid data",
            Self::NotFound => "not found",
            Self::Conflict => "conflict",
            Self::Other => "store failure",
            Self::Unsupported => "not supported by this store",
        })
    }
}

/// The error of every store operation. It keeps its source error, which reaches the logs
/// (`tracing`, error level) and never a response body.
///
/// Build one with [`StoreError::unavailable`], [`StoreError::invalid_data`],
/// [`StoreError::not_found`], [`StoreError::conflict`] or [`StoreError::other`]; each takes
/// any error or message. Its `Debug` shows the source by its `Display` chain only, never a
/// driver's own `Debug` (which for a duplicate key can quote the key's digest).
pub struct StoreError {
    kind: StoreErrorKind,
    source: BoxError,
}

impl StoreError {
    /// Creates an error of `kind` caused by `source`.
    pub fn new(kind: StoreErrorKind, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            source: source.into(),
        }
    }

    /// Creates an error for a store that cannot be reached or timed out.
    pub fn unavailable(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::Unavailable, source)
    }

    /// Creates an error for data that breaks the contract.
    pub fn invalid_data(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::InvalidData, source)
    }

    /// Creates an error for something that does not exist (for the asker).
    pub fn not_found(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::NotFound, source)
    }

    /// Creates an error for something that exists already, or a change its state forbids.
    pub fn conflict(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::Conflict, source)
    }

    /// Creates an error for any other failure.
    pub fn other(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::Other, source)
    }

    /// Creates the error of an optional ability the store does not offer: `what` names it.
    pub fn unsupported(what: &'static str) -> Self {
        Self::new(
            StoreErrorKind::Unsupported,
            format!("this store does not support {what}"),
        )
    }

    /// Creates a refusal in the store's own words, meant for the caller: a `Conflict` (a
    /// change the key's or organization's state forbids, answered 409) or an `InvalidData`
    /// (a request the organization's policy refuses, answered 422) whose `message` the
    /// management service shows as is. Any other kind is answered as a plain error of it.
    pub fn refusal(kind: StoreErrorKind, message: impl Into<String>) -> Self {
        Self::new(kind, crate::store::KeyRefusal::new(message))
    }

    /// The message of a [`refusal`](Self::refusal), which the caller may read.
    pub(crate) fn refusal_message(&self) -> Option<String> {
        self.source
            .downcast_ref::<crate::store::KeyRefusal>()
            .map(ToString::to_string)
    }

    /// Returns what kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Takes the source error out.
    pub fn into_source(self) -> BoxError {
        self.source
    }
}

impl fmt::Debug for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreError")
            .field("kind", &self.kind)
            .field("source", &format_args!("{}", ErrorChain(&*self.source)))
            .finish()
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The source is reported through `Error::source`, not repeated here.
        fmt::Display::fmt(&self.kind, f)
    }
}

impl StdError for StoreError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

/// An order that breaks the wire contract is invalid data.
impl From<InvalidOrder> for StoreError {
    fn from(err: InvalidOrder) -> Self {
        Self::invalid_data(err)
    }
}
