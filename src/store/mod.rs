//! The storage traits behind the API, their error, and the shipped stores.
//!
//! A host implements [`KeyStore`] and [`OrderStore`] over its own storage (or uses
//! [`MemoryStore`]) and checks its implementation with the conformance suite in
//! `partner_api::testing` (feature `testing`).

use std::sync::Arc;

use async_trait::async_trait;

use crate::key::KeyDigest;
use crate::model::{OrderPage, Organization, Timestamp};

mod error;
mod manage;
mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;

pub use error::{StoreError, StoreErrorKind};
pub(crate) use manage::{check_label, describe_plaintext};
pub use manage::{IssuedKey, KeyManager, KeyRecord, KeyUse, NewKey, MAX_LABEL_CHARS};
pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use postgres::PgStore;

/// What a valid API key resolves to.
///
/// Its parts are shared, so a store that keeps principals in memory hands out reference
/// counts instead of copies. Built with [`Principal::new`]; later versions may add parts
/// (a key's expiry, its label) without breaking stores that build one.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Principal {
    /// The store's identifier of the key: stable, safe to log and to key a rate limit on.
    /// Never the key or its digest.
    pub key_id: Arc<str>,
    /// The organization that the key belongs to, the only one whose data it reaches.
    pub organization: Arc<Organization>,
    /// When the key expires, if it does: a cache of principals checks it on every hit.
    pub expires_at: Option<Timestamp>,
}

impl Principal {
    /// Creates the principal of the key `key_id` of `organization`.
    pub fn new(key_id: impl Into<Arc<str>>, organization: impl Into<Arc<Organization>>) -> Self {
        Self {
            key_id: key_id.into(),
            organization: organization.into(),
            expires_at: None,
        }
    }

    /// Sets when the key expires.
    #[must_use]
    pub fn with_expires_at(mut self, expires_at: Option<Timestamp>) -> Self {
        self.expires_at = expires_at;
        self
    }

    /// Returns the key's id.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Returns the organization the key belongs to.
    pub fn organization(&self) -> &Organization {
        &self.organization
    }
}

/// What a key store knows of a presented key: its principal, or why there is none.
///
/// The API answers every kind of refusal with the same 401; the reason only goes to the
/// operator's metrics (`partner_api_auth_failures_total{reason}`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyLookup {
    /// A usable key, and what it resolves to.
    Valid(Principal),
    /// No key has this digest (or the store does not say why it refuses it).
    Unknown,
    /// The key was revoked.
    Revoked,
    /// The key expired.
    Expired,
}

impl KeyLookup {
    /// Returns the principal of a valid key.
    pub fn principal(&self) -> Option<&Principal> {
        match self {
            Self::Valid(principal) => Some(principal),
            _ => None,
        }
    }

    /// Returns the principal of a valid key, by value.
    pub fn into_principal(self) -> Option<Principal> {
        match self {
            Self::Valid(principal) => Some(principal),
            _ => None,
        }
    }
}

impl From<Option<Principal>> for KeyLookup {
    /// A principal is a valid key; nothing is an unknown one.
    fn from(found: Option<Principal>) -> Self {
        found.map_or(Self::Unknown, Self::Valid)
    }
}

/// Resolves API keys (by digest) to the organization they belong to.
///
/// A store implements [`lookup`](Self::lookup) (and [`lookup_now`](Self::lookup_now) if it
/// has answers at hand); one that keeps revoked and expired keys also implements
/// [`lookup_outcome`](Self::lookup_outcome) so that the metrics can tell why a key was
/// refused. The API asks `lookup_outcome_now`, then `lookup_outcome`.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// The principal of the key whose SHA-256 digest is `digest`, or `None` when no such key
    /// exists, it was revoked or it expired: the API treats all alike. A revocation must be
    /// visible to the very next call (a cache in front of a store, such as
    /// [`CachingKeyStore`](crate::cache::CachingKeyStore), makes that a bounded delay).
    async fn lookup(&self, digest: &KeyDigest) -> Result<Option<Principal>, StoreError>;

    /// The answer of [`lookup`](Self::lookup) when the store has it at hand without waiting
    /// (it keeps keys in memory), or `None` to be asked through `lookup`. The default is
    /// `None`. A store that answers here must answer exactly as `lookup` would; the service
    /// then builds the response without a future.
    fn lookup_now(&self, digest: &KeyDigest) -> Option<Result<Option<Principal>, StoreError>> {
        let _ = digest;
        None
    }

    /// The key whose digest is `digest`, or why there is no principal for it. Its principal
    /// must be [`lookup`](Self::lookup)'s. The default asks `lookup` and calls every refused
    /// key [`KeyLookup::Unknown`].
    async fn lookup_outcome(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        self.lookup(digest).await.map(KeyLookup::from)
    }

    /// The answer of [`lookup_outcome`](Self::lookup_outcome) when the store has it at hand,
    /// as [`lookup_now`](Self::lookup_now). The default asks `lookup_now`.
    fn lookup_outcome_now(&self, digest: &KeyDigest) -> Option<Result<KeyLookup, StoreError>> {
        self.lookup_now(digest)
            .map(|found| found.map(KeyLookup::from))
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

    async fn lookup_outcome(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        (**self).lookup_outcome(digest).await
    }

    fn lookup_outcome_now(&self, digest: &KeyDigest) -> Option<Result<KeyLookup, StoreError>> {
        (**self).lookup_outcome_now(digest)
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
