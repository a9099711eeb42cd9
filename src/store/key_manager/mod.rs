//! The write side of keys: [`KeyManager`], the trait a store implements so a Settings page
//! can manage an organization's keys, and the records it takes and returns. The services
//! above it ([`KeyManagementService`](crate::management::KeyManagementService), the
//! standalone host's `keys` command) only call it.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Serialize, Serializer};

use crate::key::{AllowedIps, ApiKey, KeyEnvironment, Permissions, LIVE_PREFIX, TEST_PREFIX};
use crate::model::Timestamp;
use crate::store::StoreError;
use crate::versions::ApiVersion;

mod leaks;
mod new_key;
mod policy;

pub use leaks::{Leak, LeakReport, LeakedKey, RevocationReason};
pub(crate) use new_key::check_label;
pub use new_key::NewKey;
pub(crate) use policy::lifetime_until;
pub(crate) use policy::KeyRefusal;
pub use policy::{KeyPolicy, RollKey};

/// The longest label a key may have, in characters.
pub const MAX_LABEL_CHARS: usize = 100;

/// The most active (neither revoked nor expired) keys an organization may have, by default.
pub const DEFAULT_MAX_ACTIVE_KEYS: u32 = 100;

/// The most webhook endpoints an organization may have, by default.
pub const DEFAULT_MAX_WEBHOOK_ENDPOINTS: u32 = 20;

/// Manages the API keys of organizations: what a host's Settings page (and the
/// `keys` command of the standalone host) calls.
///
/// Every operation is scoped to one organization: a key id of another organization's key is
/// [`NotFound`](crate::StoreErrorKind::NotFound), exactly like an id that does not exist, so
/// one organization can never see, revoke or roll another's key. An unknown organization is
/// `NotFound` too. The plaintext of a key is returned once, by the call that creates it
/// ([`issue`](Self::issue), [`roll`](Self::roll)); stores keep only its digest.
///
/// A host's own key table implements the six required methods (issue, list, get, revoke,
/// restrict, roll) and has a working Settings page. The optional abilities (organizations'
/// key policies, leak reports from secret scanners, keys' last use) are methods with
/// defaults that answer [`Unsupported`](crate::StoreErrorKind::Unsupported); a store that
/// implements one says so in [`supports`](Self::supports), and the management service and
/// the Settings page hide what is not supported.
///
/// Implemented in full by [`MemoryStore`](crate::MemoryStore) and `PgStore` with the same
/// semantics; `testing::run_key_manager` checks the required methods of any implementation,
/// and `run_key_policy`, `run_leak_reports` and `run_last_use` the abilities.
///
/// # Rules
///
/// A store that also keeps the [`AuditLog`](crate::store::AuditLog) keeps two rules in the
/// calls that change a key or a policy ([`issue`](Self::issue), [`revoke`](Self::revoke),
/// [`restrict`](Self::restrict), [`roll`](Self::roll), [`revoke_leaked`](Self::revoke_leaked),
/// [`set_key_policy`](Self::set_key_policy)); `testing::run_audit_log` checks both, and a
/// failure names the rule:
///
/// - rule `audit-in-the-change`: each change writes its one entry inside the same call, in
///   the same transaction as the change, with the actor and request details of
///   [`AuditContext::current`](crate::store::AuditContext::current) (an entry without its
///   change, or a change without its entry, is never committed);
/// - rule `audit-only-changes`: a refused call, or one that changes nothing (a second
///   revocation, the same ranges or policy again), writes no entry.
#[async_trait]
pub trait KeyManager: Send + Sync {
    /// Issues a new key for `organization_id` as `new` describes, and returns its plaintext
    /// (this once) with its record. The key's lifetime is the time from now to its expiry.
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown organization; `InvalidData` for an expiry that is not in the
    /// future, a label over [`MAX_LABEL_CHARS`], or a lifetime the organization's
    /// [`KeyPolicy`] does not allow (longer than its maximum, or none when it has one);
    /// `Conflict` when the organization has [`KeyPolicy::max_active_keys`] active keys.
    ///
    /// Audited as `key.issued` (rules `audit-in-the-change`, `audit-only-changes`).
    async fn issue(&self, organization_id: &str, new: NewKey) -> Result<IssuedKey, StoreError>;

    /// Returns the records of `organization_id`'s keys, newest first (revoked and expired ones
    /// included).
    async fn list(&self, organization_id: &str) -> Result<Vec<KeyRecord>, StoreError>;

    /// Returns the record of the key `key_id` of `organization_id`.
    async fn get(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError>;

    /// Revokes the key `key_id` of `organization_id` at once and returns its record. Revoking
    /// a revoked key changes nothing (it keeps its first revocation time). Audited as
    /// `key.revoked` (rules `audit-in-the-change`, `audit-only-changes`).
    async fn revoke(&self, organization_id: &str, key_id: &str) -> Result<KeyRecord, StoreError>;

    /// Sets the address ranges the key `key_id` of `organization_id` may be used from
    /// ([`AllowedIps::any`] lifts the restriction), and returns its record. Takes effect like
    /// a revocation: the very next lookup, and the caches as they learn of revocations.
    ///
    /// # Errors
    ///
    /// `NotFound` as for [`get`](Self::get).
    ///
    /// Audited as `key.restricted` (rules `audit-in-the-change`, `audit-only-changes`).
    async fn restrict(
        &self,
        organization_id: &str,
        key_id: &str,
        allowed_ips: AllowedIps,
    ) -> Result<KeyRecord, StoreError>;

    /// Rolls the key `key_id` of `organization_id`: issues a new key with the same label,
    /// environment and allowed address ranges, and makes the old key expire [`RollKey::overlap`] from now, or at its own
    /// expiry if that is sooner, so clients can move to the new key in between; without
    /// overlap the old key is revoked at once ([`RevocationReason::Rolled`]), never expired
    /// "now", which a wall clock stepped back would undo. The new key
    /// lives for [`RollKey::expires_in`] when given, else for the lifetime the old key was
    /// issued with (counted from now; none for a key without expiry). Returns the new key.
    ///
    /// Only an active key rolls: rolling must never bring back a key that no longer works.
    /// The overlap lets one key more than [`KeyPolicy::max_active_keys`] exist, so that an
    /// organization at its cap can still rotate; a second roll then waits for the overlap.
    ///
    /// # Errors
    ///
    /// `NotFound` as for [`get`](Self::get); `Conflict` for a revoked or expired key, or an
    /// organization over its cap of active keys; `InvalidData` for a lifetime the policy
    /// does not allow.
    ///
    /// Audited as `key.rolled`, naming the new key (rules `audit-in-the-change`,
    /// `audit-only-changes`).
    async fn roll(
        &self,
        organization_id: &str,
        key_id: &str,
        roll: RollKey,
    ) -> Result<IssuedKey, StoreError>;

    /// Whether the store offers `ability` (implements its methods): the default says no to
    /// every one.
    fn supports(&self, ability: KeyAbility) -> bool {
        let _ = ability;
        false
    }

    /// Revokes the keys that a secret scanner found in public, whichever organizations they
    /// belong to, in one call for the whole report ([`KeyAbility::LeakReports`]). Answers
    /// each report in order: the key's record when the store knows the key (active, expired
    /// or already revoked: a true positive), `None` otherwise. A key keeps its first
    /// revocation (time and reason) and its first leak, so a report sent again changes
    /// nothing. The default answers `Unsupported`. Audited as `key.leaked` by
    /// [`SECRET_SCANNING_ACTOR`](crate::store::SECRET_SCANNING_ACTOR) (rules
    /// `audit-in-the-change`, `audit-only-changes`).
    async fn revoke_leaked(
        &self,
        reports: &[LeakReport],
    ) -> Result<Vec<Option<LeakedKey>>, StoreError> {
        let _ = reports;
        Err(StoreError::unsupported("leak reports"))
    }

    /// Returns the key policy of `organization_id` (the default one until
    /// [`set_key_policy`](Self::set_key_policy)) ([`KeyAbility::KeyPolicy`]). The default
    /// answers `Unsupported`.
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown organization.
    async fn key_policy(&self, organization_id: &str) -> Result<KeyPolicy, StoreError> {
        let _ = organization_id;
        Err(StoreError::unsupported("key policies"))
    }

    /// Sets the key policy of `organization_id`, for the keys issued and rolled from now on
    /// (keys that exist keep their expiry) ([`KeyAbility::KeyPolicy`]). An operator's call:
    /// the organization's own Settings page only reads it. The default answers
    /// `Unsupported`. Audited as `policy.changed` (rules `audit-in-the-change`,
    /// `audit-only-changes`).
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown organization.
    async fn set_key_policy(
        &self,
        organization_id: &str,
        policy: KeyPolicy,
    ) -> Result<KeyPolicy, StoreError> {
        let _ = (organization_id, policy);
        Err(StoreError::unsupported("key policies"))
    }

    /// Pins the key `key_id` of `organization_id` to the API version `version`
    /// ([`KeyAbility::ApiVersions`]): what its requests without a version header are answered
    /// at, from the very next lookup (caches learn of it as of a revocation). Pinning to a
    /// later version than the key's (an upgrade) records the way back
    /// ([`KeyRecord::api_version_rollback`]: the version it had, for
    /// [`VERSION_ROLLBACK_WINDOW`]); to an earlier one clears it; to its own changes nothing.
    /// The caller checks that the API offers `version`. The default answers `Unsupported`.
    ///
    /// # Errors
    ///
    /// `NotFound` as for [`get`](Self::get).
    ///
    /// Audited as `key.api_version_pinned`, the versions as the detail (`2026-11-27 to
    /// 2026-11-28`) (rules `audit-in-the-change`, `audit-only-changes`).
    async fn pin_api_version(
        &self,
        organization_id: &str,
        key_id: &str,
        version: ApiVersion,
    ) -> Result<KeyRecord, StoreError> {
        let _ = (organization_id, key_id, version);
        Err(StoreError::unsupported("API versions of keys"))
    }

    /// Rolls back the last upgrade of the key `key_id` of `organization_id`
    /// ([`KeyAbility::ApiVersions`]): back to the version it had, while its
    /// [`KeyRecord::api_version_rollback`] is open. The default answers `Unsupported`.
    ///
    /// # Errors
    ///
    /// `NotFound` as for [`get`](Self::get); `Conflict` when the key has no upgrade to roll
    /// back, or its window has passed.
    ///
    /// Audited as `key.api_version_rolled_back`, the versions as the detail (rule
    /// `audit-in-the-change`).
    async fn roll_back_api_version(
        &self,
        organization_id: &str,
        key_id: &str,
    ) -> Result<KeyRecord, StoreError> {
        let _ = (organization_id, key_id);
        Err(StoreError::unsupported("API versions of keys"))
    }

    /// Sets the routes the key `key_id` of `organization_id` may call
    /// ([`KeyAbility::Restrictions`]; [`Permissions::ALL`] lifts the restriction), and returns
    /// its record. Takes effect like a revocation: the very next lookup, and the caches as
    /// they learn of revocations. A roll passes the permissions on. The default answers
    /// `Unsupported`.
    ///
    /// # Errors
    ///
    /// `NotFound` as for [`get`](Self::get).
    ///
    /// Audited as `key.permissions_changed`, the permissions it now holds as the detail
    /// ([`permissions_detail`]) (rules `audit-in-the-change`, `audit-only-changes`).
    async fn set_permissions(
        &self,
        organization_id: &str,
        key_id: &str,
        permissions: Permissions,
    ) -> Result<KeyRecord, StoreError> {
        let _ = (organization_id, key_id, permissions);
        Err(StoreError::unsupported("permissions of keys"))
    }

    /// Limits the key `key_id` of `organization_id` to the orders of `providers` (`None`
    /// lifts the limit) ([`KeyAbility::Restrictions`]), and returns its record. Takes effect
    /// like a revocation. A roll passes the providers on. The default answers `Unsupported`.
    ///
    /// # Errors
    ///
    /// `NotFound` as for [`get`](Self::get); `InvalidData` for a list
    /// [`canonical_providers`](crate::key::canonical_providers) refuses, or for a key that
    /// holds the `events` permission (see [`NewKey::with_providers`]).
    ///
    /// Audited as `key.providers_changed`, the providers as the detail ([`providers_detail`])
    /// (rules `audit-in-the-change`, `audit-only-changes`).
    async fn set_providers(
        &self,
        organization_id: &str,
        key_id: &str,
        providers: Option<Vec<String>>,
    ) -> Result<KeyRecord, StoreError> {
        let _ = (organization_id, key_id, providers);
        Err(StoreError::unsupported("providers of keys"))
    }

    /// Records the last use of keys, as [`LastUsedRecorder`](crate::last_used::LastUsedRecorder)
    /// gathered them ([`KeyAbility::LastUse`]): for each key, its last use becomes the later
    /// of the recorded one and the given one. Ids of keys that no longer exist are skipped.
    /// The default answers `Unsupported`.
    async fn record_last_used(&self, uses: &[KeyUse]) -> Result<(), StoreError> {
        let _ = uses;
        Err(StoreError::unsupported("recording the last use of keys"))
    }
}

/// An optional ability of a [`KeyManager`]: its methods have defaults that answer
/// [`Unsupported`](crate::StoreErrorKind::Unsupported), and [`KeyManager::supports`] says
/// whether a store implements them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyAbility {
    /// [`key_policy`](KeyManager::key_policy) and [`set_key_policy`](KeyManager::set_key_policy):
    /// organizations' maximum key lifetime and caps (which issue and roll then obey).
    KeyPolicy,
    /// [`revoke_leaked`](KeyManager::revoke_leaked): reports of secret scanners.
    LeakReports,
    /// [`record_last_used`](KeyManager::record_last_used): each key's last use.
    LastUse,
    /// [`pin_api_version`](KeyManager::pin_api_version) and
    /// [`roll_back_api_version`](KeyManager::roll_back_api_version): each key's API version.
    ApiVersions,
    /// [`set_permissions`](KeyManager::set_permissions) and
    /// [`set_providers`](KeyManager::set_providers), and the restrictions a key is issued with
    /// ([`NewKey::with_permissions`], [`NewKey::with_providers`]): the routes each key may
    /// call and the providers whose orders it may read.
    Restrictions,
}

impl KeyAbility {
    /// Every ability.
    pub const ALL: [Self; 5] = [
        Self::KeyPolicy,
        Self::LeakReports,
        Self::LastUse,
        Self::ApiVersions,
        Self::Restrictions,
    ];
}

/// The detail of a `key.providers_changed` entry: the providers, comma-separated, or `any`.
pub fn providers_detail(providers: Option<&[String]>) -> String {
    providers.map_or_else(|| "any".to_owned(), |providers| providers.join(", "))
}

/// The detail of a `key.permissions_changed` entry: the permissions the key now holds,
/// space-separated, or `none`.
pub fn permissions_detail(permissions: Permissions) -> String {
    if permissions == Permissions::NONE {
        "none".to_owned()
    } else {
        permissions.to_string()
    }
}

/// The refusal of a rollback the key `key_id` has none of (or whose window passed).
pub(crate) fn no_rollback(key_id: &str) -> StoreError {
    StoreError::conflict(format!(
        "key {key_id:?} has no upgrade of its API version to roll back (an upgrade can be rolled back for 72 hours)"
    ))
}

/// The detail of a change of a key's version: `from to to`.
pub(crate) fn version_change(from: ApiVersion, to: ApiVersion) -> String {
    format!("{from} to {to}")
}

/// A new key: its plaintext, shown once, and its record.
pub struct IssuedKey {
    key: ApiKey,
    record: KeyRecord,
}

impl IssuedKey {
    /// Pairs a generated key with the record its store made of it.
    pub fn new(key: ApiKey, record: KeyRecord) -> Self {
        Self { key, record }
    }

    /// Returns the plaintext key: show it once, it cannot be had again.
    pub fn plaintext(&self) -> &str {
        self.key.plaintext()
    }

    /// Returns the key's record.
    pub fn record(&self) -> &KeyRecord {
        &self.record
    }

    /// Returns the record, dropping the plaintext.
    pub fn into_record(self) -> KeyRecord {
        self.record
    }
}

impl fmt::Debug for IssuedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedKey")
            .field("record", &self.record)
            .finish_non_exhaustive()
    }
}

/// What a store knows of one key: never its plaintext or its digest.
///
/// Serializes as the JSON object a Settings page and the `keys` command show: `id`, `label`,
/// `hint`, `environment` (`"live"`, `"test"` or `null`), `createdAt`, `expiresAt`,
/// `lastUsedAt`, `revokedAt` (RFC 3339 UTC or `null`), `revokedReason` (`"manual"`,
/// `"leaked"`, `"rolled"` or `null`), `leak` (`{"url", "source", "reportedAt"}` for a leaked key, else
/// `null`), `lifetimeSeconds` (the lifetime it was issued with, which a roll passes on, or
/// `null`), `allowedIps` (CIDR ranges; empty for any address), `permissions` (the routes the
/// key may call: `orders`, `events`; both for a key without restrictions), `providers` (the
/// providers whose orders it may read, or `null` for every order), `apiVersion` (the API version
/// the key is pinned to: the first for a key whose store recorded none) and
/// `apiVersionRollback` (`{"to", "until"}`: the version a recent upgrade can be rolled back
/// to, and until when; else `null`). Keys that came from a seed or a host's
/// older format carry what is known of them (no label, a hint and environment only when
/// the store saw the key).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct KeyRecord {
    /// The key's id, the one [`Principal::key_id`](crate::Principal::key_id) carries.
    pub id: String,
    /// The organization the key belongs to.
    #[serde(skip)]
    pub organization_id: String,
    /// A name for people.
    pub label: Option<String>,
    /// A short form that identifies the key without revealing it (`pk_live_...Xy12`).
    pub hint: Option<String>,
    /// The environment of the key, when its prefix tells.
    #[serde(serialize_with = "environment_name")]
    pub environment: Option<KeyEnvironment>,
    /// When the key was created.
    pub created_at: Timestamp,
    /// When the key expires, if it does.
    pub expires_at: Option<Timestamp>,
    /// When the key was last used (recorded with a delay; see
    /// [`last_used`](crate::last_used)).
    pub last_used_at: Option<Timestamp>,
    /// When the key was revoked, if it was.
    pub revoked_at: Option<Timestamp>,
    /// Why the key was revoked, if it was.
    pub revoked_reason: Option<RevocationReason>,
    /// Where the key was found in public, if a secret scanner reported it.
    pub leak: Option<Leak>,
    /// The lifetime the key was issued with (from its creation to its expiry then), which a
    /// roll gives the new key; `None` for a key that was issued without expiry.
    #[serde(rename = "lifetimeSeconds", with = "policy::optional_seconds")]
    pub lifetime: Option<Duration>,
    /// The address ranges the key may be used from.
    pub allowed_ips: AllowedIps,
    /// The routes the key may call ([`Permissions::ALL`] for a key without restrictions).
    pub permissions: Permissions,
    /// The providers whose orders the key may read (sorted, each once); `None` for every
    /// order of its organization.
    pub providers: Option<Vec<String>>,
    /// The API version the key is pinned to; `None` (a key issued before versions, or by a
    /// store that records none) is the first version, and is listed as it.
    #[serde(serialize_with = "crate::versions::serialize_pinned")]
    pub api_version: Option<ApiVersion>,
    /// The version a recent upgrade of the key can be rolled back to, and until when.
    pub api_version_rollback: Option<VersionRollback>,
}

/// The way back from an upgrade of a key's API version: to the version it had, until 72 hours
/// ([`VERSION_ROLLBACK_WINDOW`]) after the upgrade.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct VersionRollback {
    /// The version the key had before the upgrade.
    pub to: ApiVersion,
    /// Until when the upgrade can be rolled back.
    pub until: Timestamp,
}

impl VersionRollback {
    /// The way back to `to` from an upgrade made at `upgraded_at`.
    pub fn new(to: ApiVersion, upgraded_at: Timestamp) -> Self {
        Self {
            to,
            until: upgraded_at.saturating_add(VERSION_ROLLBACK_WINDOW),
        }
    }
}

/// How long an upgrade of a key's API version can be rolled back: 72 hours.
pub const VERSION_ROLLBACK_WINDOW: Duration = Duration::from_secs(72 * 3600);

/// A key's pinned version as listed: the first version when none is recorded.
impl KeyRecord {
    /// Creates the record of a key `id` of `organization_id` created at `created_at`, with
    /// nothing else known.
    pub fn new(
        id: impl Into<String>,
        organization_id: impl Into<String>,
        created_at: Timestamp,
    ) -> Self {
        Self {
            id: id.into(),
            organization_id: organization_id.into(),
            label: None,
            hint: None,
            environment: None,
            created_at,
            expires_at: None,
            last_used_at: None,
            revoked_at: None,
            revoked_reason: None,
            leak: None,
            lifetime: None,
            allowed_ips: AllowedIps::any(),
            permissions: Permissions::ALL,
            providers: None,
            api_version: None,
            api_version_rollback: None,
        }
    }

    /// Returns whether the key is usable at `now`: not revoked and not expired.
    pub fn is_active_at(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|expires_at| expires_at > now)
    }

    /// The lifetime a roll gives the new key when the roll names none: the one the key was
    /// issued with, or for a key whose expiry was set another way (by SQL, a seed) the span
    /// from its creation to that expiry; `None` for a key that never expires. A roll never
    /// turns an expiring key into one that does not expire.
    pub fn lifetime_for_roll(&self) -> Option<Duration> {
        self.lifetime.or_else(|| {
            self.expires_at.map(|expires_at| {
                expires_at
                    .duration_since(self.created_at)
                    .unwrap_or_default()
            })
        })
    }
}

fn environment_name<S: Serializer>(
    environment: &Option<KeyEnvironment>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match environment {
        Some(environment) => serializer.serialize_str(environment.name()),
        None => serializer.serialize_none(),
    }
}

/// One key's last use, as [`KeyManager::record_last_used`] takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyUse {
    /// The key's id.
    pub key_id: String,
    /// When it was used.
    pub at: Timestamp,
}

/// What the plaintext `key` tells of itself: its hint and, from its prefix, its environment.
pub(crate) fn describe_plaintext(key: &str) -> (String, Option<KeyEnvironment>) {
    let environment = if key.starts_with(LIVE_PREFIX) {
        Some(KeyEnvironment::Live)
    } else if key.starts_with(TEST_PREFIX) {
        Some(KeyEnvironment::Test)
    } else {
        None
    };
    (crate::key::hint_of(key), environment)
}
