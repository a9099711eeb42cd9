//! What the request path reads: a key's principal and an organization's orders.

use std::sync::Arc;

use async_trait::async_trait;

use super::{OrderQuery, StoreError};
use crate::key::{AllowedIps, KeyDigest, Permissions};
#[cfg(doc)]
use crate::model::MAX_ORDERS;
use crate::model::{OrderPage, Organization, Timestamp};
use crate::versions::ApiVersion;

/// What a valid API key resolves to.
///
/// Its parts are shared, so a store that keeps principals in memory hands out reference
/// counts instead of copies. Built with [`Principal::new`] and its `with_*` setters; later
/// versions may add parts (a key's expiry, its label) without breaking stores that build one.
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
    /// The API version the key is pinned to: what a request without a version header is
    /// answered at. `None` (a key of a store that records no version, every key issued before
    /// versions existed) is the first version, [`versions::FIRST`](crate::versions::FIRST).
    pub api_version: Option<ApiVersion>,
    /// What restricts the key beyond its organization, `None` for a key without
    /// restrictions: kept apart so that the principal of nearly every key, moved and cloned
    /// along each request's path, carries one empty pointer for them.
    restrictions: Option<Arc<KeyRestrictions>>,
}

/// What restricts a key beyond its organization: the addresses it may be used from, the
/// routes it may call, the providers whose orders it reads. Every part at its default is no
/// restriction at all, which a [`Principal`] holds as none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyRestrictions {
    pub(crate) allowed_ips: AllowedIps,
    pub(crate) permissions: Permissions,
    pub(crate) providers: Option<Arc<[String]>>,
    /// The tag of `providers` ([`tag_of`]), made with them by [`Principal::with_providers`],
    /// the one place that sets them (a key's principal is kept and read by every request of
    /// the key): private, so the two cannot disagree.
    providers_tag: Option<[u8; 8]>,
}

impl KeyRestrictions {
    /// The tag that binds the page tokens and entity tags of a key limited to providers to
    /// them, so another view's do not pass for them; `None` for a key without providers.
    pub(crate) fn providers_tag(&self) -> Option<[u8; 8]> {
        self.providers_tag
    }
}

/// A key without restrictions.
static UNRESTRICTED: KeyRestrictions = KeyRestrictions {
    allowed_ips: AllowedIps::any(),
    permissions: Permissions::ALL,
    providers: None,
    providers_tag: None,
};

/// The tag of a key's `providers`: the first 8 bytes of a SHA-256 over them, which a page
/// token and an entity tag of the key's pages carry, so another view's do not pass for them.
fn tag_of(providers: &[String]) -> [u8; 8] {
    use sha2::Digest;
    let mut hasher = sha2::Sha256::new();
    hasher.update(b"partner-api key providers\0");
    for provider in providers {
        hasher.update(provider.as_bytes());
        hasher.update([0]);
    }
    let mut tag = [0; 8];
    tag.copy_from_slice(&hasher.finalize()[..8]);
    tag
}

impl Principal {
    /// Creates the principal of the key `key_id` of `organization`, without restrictions.
    pub fn new(key_id: impl Into<Arc<str>>, organization: impl Into<Arc<Organization>>) -> Self {
        Self {
            key_id: key_id.into(),
            organization: organization.into(),
            expires_at: None,
            api_version: None,
            restrictions: None,
        }
    }

    /// The key's restrictions, changed by `change`: none again when they are all lifted.
    fn restricted(mut self, change: impl FnOnce(&mut KeyRestrictions)) -> Self {
        let mut restrictions = self
            .restrictions
            .as_deref()
            .unwrap_or(&UNRESTRICTED)
            .clone();
        change(&mut restrictions);
        self.restrictions = (restrictions != UNRESTRICTED).then(|| Arc::new(restrictions));
        self
    }

    /// Sets the providers whose orders the key may read (`None`: every order).
    #[must_use]
    pub fn with_providers(self, providers: Option<Arc<[String]>>) -> Self {
        self.restricted(|restrictions| {
            restrictions.providers_tag = providers.as_deref().map(tag_of);
            restrictions.providers = providers;
        })
    }

    /// Sets the routes the key may call.
    #[must_use]
    pub fn with_permissions(self, permissions: Permissions) -> Self {
        self.restricted(|restrictions| restrictions.permissions = permissions)
    }

    /// Sets the API version the key is pinned to.
    #[must_use]
    pub fn with_api_version(mut self, api_version: Option<ApiVersion>) -> Self {
        self.api_version = api_version;
        self
    }

    /// Sets when the key expires.
    #[must_use]
    pub fn with_expires_at(mut self, expires_at: Option<Timestamp>) -> Self {
        self.expires_at = expires_at;
        self
    }

    /// Sets the address ranges the key may be used from.
    #[must_use]
    pub fn with_allowed_ips(self, allowed_ips: AllowedIps) -> Self {
        self.restricted(|restrictions| restrictions.allowed_ips = allowed_ips)
    }

    /// Returns the key's id.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Returns the organization the key belongs to.
    pub fn organization(&self) -> &Organization {
        &self.organization
    }

    /// The address ranges the key may be used from ([`AllowedIps::any`] for any): the API
    /// answers 403 to a request from elsewhere.
    pub fn allowed_ips(&self) -> &AllowedIps {
        &self.restrictions().allowed_ips
    }

    /// The routes the key may call beyond those open to every key ([`Permissions::ALL`] for
    /// a key without restrictions): the API answers 403 `insufficient_scope` to a route it
    /// lacks.
    pub fn permissions(&self) -> Permissions {
        self.restrictions().permissions
    }

    /// The providers whose orders the key may read (sorted, each once), or `None` for every
    /// order of its organization: the API reads its pages with them as the provider filter.
    pub fn providers(&self) -> Option<&Arc<[String]>> {
        self.restrictions().providers.as_ref()
    }

    /// Whether anything restricts the key beyond its organization.
    pub fn is_restricted(&self) -> bool {
        self.restrictions.is_some()
    }

    pub(crate) fn restrictions(&self) -> &KeyRestrictions {
        self.restrictions.as_deref().unwrap_or(&UNRESTRICTED)
    }

    /// The shared restrictions, for a request's values to hold without copying them.
    pub(crate) fn shared_restrictions(&self) -> Option<&Arc<KeyRestrictions>> {
        self.restrictions.as_ref()
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
    Revoked {
        /// The key's id, when the store tells it: the key's usage counts the refusal.
        key_id: Option<Arc<str>>,
    },
    /// The key expired.
    Expired {
        /// The key's id, when the store tells it: the key's usage counts the refusal.
        key_id: Option<Arc<str>>,
    },
}

impl KeyLookup {
    /// Returns whether the key is valid.
    pub fn is_valid(&self) -> bool {
        matches!(self, Self::Valid(_))
    }

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
    /// A principal is a valid key; nothing is an unknown one (for a store that keeps no
    /// refused keys).
    fn from(found: Option<Principal>) -> Self {
        found.map_or(Self::Unknown, Self::Valid)
    }
}

/// Resolves API keys (by digest) to the organization they belong to, or says why not.
///
/// A store implements [`lookup`](Self::lookup), and [`lookup_now`](Self::lookup_now) if it
/// has answers at hand without waiting (it keeps keys in memory). The API asks `lookup_now`
/// first, then `lookup`.
#[async_trait]
pub trait KeyStore: Send + Sync {
    /// What the store knows of the key whose SHA-256 digest is `digest`: its principal
    /// ([`KeyLookup::Valid`]), or why there is none ([`KeyLookup::Unknown`],
    /// [`Revoked`](KeyLookup::Revoked), [`Expired`](KeyLookup::Expired)). A store that does not
    /// keep refused keys answers `Unknown` for them. A revocation must be visible to the very
    /// next call (a cache in front of a store, such as
    /// [`CachingKeyStore`](crate::cache::CachingKeyStore), makes that a bounded delay); a
    /// valid key's principal carries the key's expiry, which caches enforce on every hit.
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError>;

    /// The answer of [`lookup`](Self::lookup) when the store has it at hand without waiting,
    /// or `None` to be asked through `lookup`. The default is `None`. A store that answers
    /// here must answer exactly as `lookup` would; the service then builds the response
    /// without a future.
    fn lookup_now(&self, digest: &KeyDigest) -> Option<Result<KeyLookup, StoreError>> {
        let _ = digest;
        None
    }
}

/// Lists the digests of a store's usable keys: what [`KnownKeys`](crate::cache::KnownKeys)
/// loads, so the failed-authentication throttle can tell a token that may be a key from one
/// that certainly is not. A capability of its own: a store without it leaves the throttle as
/// it was.
#[async_trait]
pub trait KeyDigests: Send + Sync {
    /// The digests of the keys that are neither revoked nor expired: all of them with `ids`
    /// `None`, else those among the keys whose ids are given (ids the store does not know are
    /// skipped).
    async fn key_digests(&self, ids: Option<&[String]>) -> Result<Vec<KeyDigest>, StoreError>;
}

/// Reads an organization's orders, a page at a time.
#[async_trait]
pub trait OrderStore: Send + Sync {
    /// The page of the organization `organization_id`'s orders that `query` asks for: in the
    /// order the API serves them (newest by `createdAt` first, ties by `id` descending in
    /// byte order), the first [`query.limit()`](OrderQuery::limit) of those that the
    /// [`query.filter()`](OrderQuery::filter) holds and that come after
    /// [`query.position()`](OrderQuery::position) (from the newest when it is `None`), and whether
    /// any such order follows them ([`OrderPage::has_more`]). An unknown organization has no
    /// orders. The filter binds it (rule `filters-hold`): a page holds only orders the filter holds, and every one
    /// of them in its range ([`OrderFilter::holds`](crate::store::OrderFilter::holds));
    /// `testing::run` checks it. Each order carries its last change (rule `last-change`):
    /// [`Order::updated_at`](crate::Order::updated_at) is `None` until a write changes one of
    /// its fields, then the time of that change, which a write that changes nothing leaves.
    ///
    /// The position is a keyset, not an offset: an order created or deleted before it never
    /// shifts what comes after it. A store reads `limit + 1` orders and builds the page with
    /// [`OrderPage::first`], which keeps `limit` of them and says whether there were more.
    async fn orders(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Result<OrderPage, StoreError>;

    /// The answer of [`orders`](Self::orders) when the store has it at hand without waiting,
    /// or `None` to be asked through `orders`; as [`KeyStore::lookup_now`].
    fn orders_now(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Option<Result<OrderPage, StoreError>> {
        let _ = (organization_id, query);
        None
    }
}
