//! [`MemoryStore`]: both store traits over process memory, for tests, demos and benchmarks.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use async_trait::async_trait;

use super::{KeyLookup, KeyStore, OrderQuery, OrderStore, Principal, StoreError};
use crate::hashing::BuildPrehashed;
use crate::key::KeyDigest;
use crate::key::{is_valid_key, ApiKey, KeyEnvironment};
use crate::model::{EncodedOrder, Order, OrderPage, Organization, Timestamp};
use crate::seed::{Seed, SeedError};
use crate::store::{
    check_label, describe_plaintext, IssuedKey, KeyRecord, NewKey, RevocationReason,
};

mod audit;
mod deprecated_calls;
mod events;
mod manage;
mod order_writes;
mod orders;
mod usage;
#[cfg(feature = "webhooks")]
mod webhooks;

use orders::OrganizationOrders;

/// An in-memory [`KeyStore`] and [`OrderStore`] with the semantics of a real store: keys are
/// held only as digests, a revoked key stays known but resolves to nothing, and every change
/// is visible to the very next request.
///
/// Clones share the same data, so a host can keep one handle to add or revoke keys while the
/// service serves from another.
///
/// What a request can wait for: a read takes a read lock for a hash lookup and two reference
/// counts. Writers build every new page of orders (sorting, encoding, joining) before they
/// take the write lock, which they hold only to swap it in; so a request never waits for a
/// sort, only for another map insert.
///
/// Its audit log keeps at most 100,000 entries: past that, the oldest tenth goes at once, so a
/// process's memory bounds it even where retention never runs.
///
/// ```
/// use partner_api::{MemoryStore, Organization};
///
/// let store = MemoryStore::new();
/// store.add_organization(Organization { id: "org_1".into(), name: "Acme".into() })?;
/// store.add_key("pk_test_acme", "org_1")?;
/// assert!(store.revoke_key("pk_test_acme"));
/// # Ok::<(), partner_api::StoreError>(())
/// ```
#[derive(Clone, Default)]
pub struct MemoryStore {
    state: Arc<RwLock<State>>,
    /// Held by writers of orders from their snapshot to their swap, so two writers never
    /// build on the same snapshot; readers never take it.
    order_writer: Arc<Mutex<()>>,
    /// The webhook endpoints and their deliveries; raised into by order writers while they
    /// hold `order_writer`, so one order's events queue in the order of its changes.
    #[cfg(feature = "webhooks")]
    webhooks: Arc<Mutex<webhooks::Outbox>>,
    /// Each key's requests per hour, route and outcome; apart from `state`, so the recorder's
    /// writes never hold the lock requests read keys under.
    usage: Arc<Mutex<usage::Usage>>,
    /// Each key's calls of deprecated targets per day; apart from `state`, as `usage`.
    deprecated_calls: Arc<Mutex<deprecated_calls::Calls>>,
    /// The audit log; appended to under the lock of each change, and always locked last.
    audit: Arc<Mutex<audit::Audit>>,
    /// Each organization's events feed; appended to by order writers while they hold
    /// `order_writer`, before they raise the webhooks of the same changes.
    events: Arc<Mutex<events::Feeds>>,
}

#[derive(Default)]
struct State {
    organizations: HashMap<String, Arc<Organization>>,
    keys: HashMap<KeyDigest, KeyEntry, BuildPrehashed>,
    /// Each key's id, for the management operations.
    key_ids: HashMap<String, KeyDigest>,
    /// Per organization, its orders newest first, so a read never scans other organizations
    /// or sorts; replaced whole by a writer, never changed in place.
    orders: HashMap<String, Arc<OrganizationOrders>>,
    /// The key policies organizations have other than the default.
    policies: HashMap<String, crate::store::KeyPolicy>,
    next_key_number: u64,
}

struct KeyEntry {
    principal: Principal,
    record: KeyRecord,
    /// The order of creation, to list keys created in the same millisecond newest first.
    number: u64,
}

impl KeyEntry {
    /// The principal if the key is usable now, or why not: the clock is read only for a key
    /// that expires.
    fn outcome(&self) -> KeyLookup {
        if self.record.revoked_at.is_some() {
            return KeyLookup::Revoked {
                key_id: Some(self.principal.key_id.clone()),
            };
        }
        match self.record.expires_at {
            Some(expires_at) if expires_at <= Timestamp::now() => KeyLookup::Expired {
                key_id: Some(self.principal.key_id.clone()),
            },
            _ => KeyLookup::Valid(self.principal.clone()),
        }
    }
}

impl MemoryStore {
    /// Creates an empty store.
    pub fn new() -> Self {
        Self::default()
    }

    // A panic while the lock was held cannot leave `State` half-changed: every method checks
    // before it mutates. So a poisoned lock is still consistent and is used as it is.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    fn audit_log(&self) -> std::sync::MutexGuard<'_, audit::Audit> {
        self.audit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, usage::Usage> {
        self.usage.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds an organization.
    ///
    /// # Errors
    ///
    /// [`Conflict`](crate::StoreErrorKind::Conflict) if an organization with that id exists.
    pub fn add_organization(&self, organization: Organization) -> Result<(), StoreError> {
        let mut state = self.write();
        if state.organizations.contains_key(&organization.id) {
            return Err(StoreError::conflict(format!(
                "organization {:?} exists",
                organization.id
            )));
        }
        state
            .organizations
            .insert(organization.id.clone(), Arc::new(organization));
        Ok(())
    }

    /// Adds the API key `key` for the organization `organization_id`; only its digest is kept
    /// (with its hint and, from its prefix, its environment). Returns the key's id, the one
    /// [`Principal::key_id`] carries.
    ///
    /// # Errors
    ///
    /// [`InvalidData`](crate::StoreErrorKind::InvalidData) if the key is not a valid bearer
    /// token ([`is_valid_key`]); [`NotFound`](crate::StoreErrorKind::NotFound) if the
    /// organization is unknown; [`Conflict`](crate::StoreErrorKind::Conflict) if the key
    /// exists (revoked or not).
    pub fn add_key(&self, key: &str, organization_id: &str) -> Result<String, StoreError> {
        self.add_described_key(key, organization_id, None, None)
    }

    /// [`add_key`](Self::add_key) with a label and an expiry, as a seed gives them.
    pub(crate) fn add_described_key(
        &self,
        key: &str,
        organization_id: &str,
        label: Option<&str>,
        expires_at: Option<Timestamp>,
    ) -> Result<String, StoreError> {
        if !is_valid_key(key) {
            return Err(StoreError::invalid_data(
                "the key is not an RFC 6750 bearer token of at most 4096 bytes",
            ));
        }
        if let Some(label) = label {
            check_label(label)?;
        }
        let (hint, environment) = describe_plaintext(key);
        let mut state = self.write();
        let record = state.insert_key(
            KeyDigest::of(key),
            organization_id,
            label.map(str::to_owned),
            Some(hint),
            environment,
            expires_at,
            Timestamp::now(),
        )?;
        Ok(record.id)
    }

    /// Revokes the API key `key`: from now on it resolves to nothing. Returns whether a live
    /// key was revoked (`false` for an unknown or already revoked key).
    pub fn revoke_key(&self, key: &str) -> bool {
        let digest = KeyDigest::of(key);
        match self.write().keys.get_mut(&digest) {
            Some(entry) if entry.record.revoked_at.is_none() => {
                entry.record.revoked_at = Some(Timestamp::now());
                entry.record.revoked_reason = Some(RevocationReason::Manual);
                true
            }
            _ => false,
        }
    }
}

fn unknown_organization(organization_id: &str) -> StoreError {
    StoreError::not_found(format!("unknown organization {organization_id:?}"))
}

fn unknown_key(key_id: &str) -> StoreError {
    StoreError::not_found(format!("no key {key_id:?} in this organization"))
}

impl State {
    /// Adds a key of `organization_id` under `digest`, created at `created_at`; returns its
    /// record.
    #[allow(clippy::too_many_arguments)]
    fn insert_key(
        &mut self,
        digest: KeyDigest,
        organization_id: &str,
        label: Option<String>,
        hint: Option<String>,
        environment: Option<KeyEnvironment>,
        expires_at: Option<Timestamp>,
        created_at: Timestamp,
    ) -> Result<KeyRecord, StoreError> {
        let Some(organization) = self.organizations.get(organization_id).cloned() else {
            return Err(unknown_organization(organization_id));
        };
        if self.keys.contains_key(&digest) {
            return Err(StoreError::conflict("the key exists"));
        }
        self.next_key_number += 1;
        let number = self.next_key_number;
        let key_id = format!("key_{number}");
        let mut record = KeyRecord::new(key_id.clone(), organization_id, created_at);
        record.lifetime =
            expires_at.and_then(|expires_at| crate::store::lifetime_until(expires_at, created_at));
        record.label = label;
        record.hint = hint;
        record.environment = environment;
        record.expires_at = expires_at;
        let mut principal = Principal::new(key_id.as_str(), organization);
        principal.expires_at = expires_at;
        self.key_ids.insert(key_id, digest);
        self.keys.insert(
            digest,
            KeyEntry {
                principal,
                record: record.clone(),
                number,
            },
        );
        Ok(record)
    }

    /// The entry of the key `key_id` of `organization_id`; another organization's key is
    /// unknown.
    fn entry_mut(
        &mut self,
        organization_id: &str,
        key_id: &str,
    ) -> Result<&mut KeyEntry, StoreError> {
        if !self.organizations.contains_key(organization_id) {
            return Err(unknown_organization(organization_id));
        }
        self.key_ids
            .get(key_id)
            .and_then(|digest| self.keys.get_mut(digest))
            .filter(|entry| entry.record.organization_id == organization_id)
            .ok_or_else(|| unknown_key(key_id))
    }

    /// Issues `key` as `new` describes, for `organization_id`, created at `created_at`.
    fn issue(
        &mut self,
        organization_id: &str,
        key: ApiKey,
        new: &NewKey,
        created_at: Timestamp,
    ) -> Result<IssuedKey, StoreError> {
        let record = self.insert_key(
            key.digest(),
            organization_id,
            new.label().map(str::to_owned),
            Some(key.hint()),
            Some(key.environment()),
            new.expires_at(),
            created_at,
        )?;
        // The lifetime as the caller gave it, not as rounded through the expiry.
        let mut record = record;
        record.lifetime = new.lifetime_at(created_at);
        record.allowed_ips = new.allowed_ips().clone();
        record.api_version = Some(new.api_version());
        record.permissions = new.permissions();
        record.providers = new.canonical_providers();
        if let Some(entry) = self.keys.get_mut(&key.digest()) {
            entry.principal = entry
                .principal
                .clone()
                .with_providers(record.providers.as_deref().map(Into::into))
                .with_allowed_ips(record.allowed_ips.clone())
                .with_permissions(record.permissions);
            entry.principal.api_version = record.api_version;
            entry.record = record.clone();
        }
        Ok(IssuedKey::new(key, record))
    }
}

/// A key from the operating system's CSPRNG, for `environment`.
fn generate(environment: KeyEnvironment) -> Result<ApiKey, StoreError> {
    ApiKey::generate(environment).map_err(StoreError::other)
}

impl Seed {
    /// Loads the seed into a new [`MemoryStore`].
    ///
    /// # Errors
    ///
    /// When an entry breaks the rules of the store: a duplicate organization, key or order
    /// id, a reference to an unknown organization, a key that is no bearer token, an order
    /// that cannot be served. The message names the entry (keys by index, never by value).
    pub fn to_memory_store(&self) -> Result<MemoryStore, SeedError> {
        let store = MemoryStore::new();
        for (index, organization) in self.organizations.iter().enumerate() {
            store
                .add_organization(organization.clone())
                .map_err(|err| SeedError::new(format!("organizations[{index}]"), err))?;
        }
        for (index, key) in self.api_keys.iter().enumerate() {
            store
                .add_described_key(
                    &key.key,
                    &key.organization_id,
                    key.label.as_deref(),
                    key.expires_at,
                )
                .map_err(|err| SeedError::new(format!("apiKeys[{index}]"), err))?;
            if key.revoked {
                store.revoke_key(&key.key);
            }
        }
        let mut by_organization: BTreeMap<&str, Vec<Order>> = BTreeMap::new();
        for seed_order in &self.orders {
            by_organization
                .entry(&seed_order.organization_id)
                .or_default()
                .push(seed_order.order.clone());
        }
        for (organization_id, orders) in by_organization {
            store.add_orders(organization_id, orders).map_err(|err| {
                SeedError::new(format!("orders of organization {organization_id:?}"), err)
            })?;
        }
        Ok(store)
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.read();
        f.debug_struct("MemoryStore")
            .field("organizations", &state.organizations.len())
            .field("keys", &state.keys.len())
            .field(
                "orders",
                &state.orders.values().map(|o| o.len()).sum::<usize>(),
            )
            .finish()
    }
}

impl MemoryStore {
    fn outcome(&self, digest: &KeyDigest) -> KeyLookup {
        let state = self.read();
        state
            .keys
            .get(digest)
            .map_or(KeyLookup::Unknown, KeyEntry::outcome)
    }

    fn page(&self, organization_id: &str, query: &OrderQuery) -> OrderPage {
        let orders = self.read().orders.get(organization_id).cloned();
        orders.map_or_else(OrderPage::default, |orders| orders.page(query))
    }
}

// Everything is at hand: the `_now` answers are the answers.
#[async_trait]
impl KeyStore for MemoryStore {
    async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
        Ok(self.outcome(digest))
    }

    fn lookup_now(&self, digest: &KeyDigest) -> Option<Result<KeyLookup, StoreError>> {
        Some(Ok(self.outcome(digest)))
    }
}

#[async_trait]
impl super::KeyDigests for MemoryStore {
    async fn key_digests(&self, ids: Option<&[String]>) -> Result<Vec<KeyDigest>, StoreError> {
        let state = self.read();
        let usable = |digest: &KeyDigest| {
            state
                .keys
                .get(digest)
                .is_some_and(|entry| entry.outcome().is_valid())
        };
        Ok(match ids {
            None => state.keys.keys().filter(|d| usable(d)).copied().collect(),
            Some(ids) => ids
                .iter()
                .filter_map(|id| state.key_ids.get(id))
                .filter(|d| usable(d))
                .copied()
                .collect(),
        })
    }
}

#[async_trait]
impl OrderStore for MemoryStore {
    async fn orders(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Result<OrderPage, StoreError> {
        Ok(self.page(organization_id, query))
    }

    fn orders_now(
        &self,
        organization_id: &str,
        query: &OrderQuery,
    ) -> Option<Result<OrderPage, StoreError>> {
        Some(Ok(self.page(organization_id, query)))
    }
}

#[cfg(test)]
mod tests;
