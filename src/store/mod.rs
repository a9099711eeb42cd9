//! The storage traits behind the API, their error, and the shipped stores.
//!
//! A host implements [`KeyStore`] and [`OrderStore`] over its own storage (or uses
//! [`MemoryStore`]) and checks its implementation with the conformance suite in
//! `partner_api::testing` (feature `testing`).

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::key::KeyDigest;
use crate::model::{OrderPage, Organization};

mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PgStore;

/// What a valid API key resolves to.
///
/// Both fields are shared, so a store that keeps principals in memory hands out reference
/// counts instead of copies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The store's identifier of the key: stable, safe to log and to key a rate limit on.
    /// Never the key or its digest.
    pub key_id: Arc<str>,
    /// The organization that the key belongs to, the only one whose data it reaches.
    pub organization: Arc<Organization>,
}

/// Resolves API keys (by digest) to the organization they belong to.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// The principal of the key whose SHA-256 digest is `digest`, or `None` when no such key
    /// exists or it was revoked: the API treats both alike. A revocation must be visible to
    /// the very next call.
    async fn lookup(&self, digest: &KeyDigest) -> Result<Option<Principal>, StoreError>;

    /// The answer of [`lookup`](Self::lookup) when the store has it at hand without waiting
    /// (it keeps keys in memory), or `None` to be asked through `lookup`. The default is
    /// `None`. A store that answers here must answer exactly as `lookup` would; the service
    /// then builds the response without a future.
    fn lookup_now(&self, digest: &KeyDigest) -> Option<Result<Option<Principal>, StoreError>> {
        let _ = digest;
        None
    }
}

/// Reads an organization's orders.
#[async_trait]
pub trait OrderStore: Send + Sync {
    /// The newest `limit` orders of the organization `organization_id` (all of them if it
    /// has fewer): newest by `createdAt`, ties broken by `id` descending (byte order). An
    /// unknown organization has no orders. [`OrderPage::new`] puts them in that order.
    async fn newest_orders(
        &self,
        organization_id: &str,
        limit: usize,
    ) -> Result<OrderPage, StoreError>;

    /// The answer of [`newest_orders`](Self::newest_orders) when the store has it at hand
    /// without waiting, or `None` to be asked through `newest_orders`; as
    /// [`KeyStore::lookup_now`].
    fn newest_orders_now(
        &self,
        organization_id: &str,
        limit: usize,
    ) -> Option<Result<OrderPage, StoreError>> {
        let _ = (organization_id, limit);
        None
    }
}

#[async_trait]
impl<T: KeyStore + ?Sized> KeyStore for std::sync::Arc<T> {
    async fn lookup(&self, digest: &KeyDigest) -> Result<Option<Principal>, StoreError> {
        (**self).lookup(digest).await
    }

    fn lookup_now(&self, digest: &KeyDigest) -> Option<Result<Option<Principal>, StoreError>> {
        (**self).lookup_now(digest)
    }
}

#[async_trait]
impl<T: OrderStore + ?Sized> OrderStore for std::sync::Arc<T> {
    async fn newest_orders(
        &self,
        organization_id: &str,
        limit: usize,
    ) -> Result<OrderPage, StoreError> {
        (**self).newest_orders(organization_id, limit).await
    }

    fn newest_orders_now(
        &self,
        organization_id: &str,
        limit: usize,
    ) -> Option<Result<OrderPage, StoreError>> {
        (**self).newest_orders_now(organization_id, limit)
    }
}

type BoxError = Box<dyn StdError + Send + Sync>;

/// What went wrong in a store, classified by what the API answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store cannot be reached or did not answer in time: the API answers 503.
    Unavailable,
    /// The store holds or was given data that breaks the contract (an order that cannot be
    /// served, a reference to an unknown organization, a duplicate): the API answers 500.
    InvalidData,
    /// Any other failure: the API answers 500.
    Other,
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Unavailable => "store unavailable",
            Self::InvalidData => "invalid data",
            Self::Other => "store failure",
        })
    }
}

/// The error of every store operation. It keeps its source error, which reaches the logs
/// (`tracing`, error level) and never a response body.
///
/// Build one with [`StoreError::unavailable`], [`StoreError::invalid_data`] or
/// [`StoreError::other`]; each takes any error or message.
#[derive(Debug)]
pub struct StoreError {
    kind: StoreErrorKind,
    source: BoxError,
}

impl StoreError {
    /// An error of `kind` caused by `source`.
    pub fn new(kind: StoreErrorKind, source: impl Into<BoxError>) -> Self {
        Self {
            kind,
            source: source.into(),
        }
    }

    /// The store cannot be reached or timed out.
    pub fn unavailable(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::Unavailable, source)
    }

    /// Data breaks the contract.
    pub fn invalid_data(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::InvalidData, source)
    }

    /// Any other failure.
    pub fn other(source: impl Into<BoxError>) -> Self {
        Self::new(StoreErrorKind::Other, source)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> StoreErrorKind {
        self.kind
    }

    /// Takes the source error out.
    pub fn into_source(self) -> BoxError {
        self.source
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

/// Displays an error with its chain of sources, for the log.
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}
