//! What keys must obey: how a roll is asked for ([`RollKey`]), an organization's
//! [`KeyPolicy`], and the refusals a caller may read (`KeyRefusal`, made by [`StoreError::refusal`]).

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::{DEFAULT_MAX_ACTIVE_KEYS, DEFAULT_MAX_WEBHOOK_ENDPOINTS};
use crate::model::Timestamp;
use crate::store::{StoreError, StoreErrorKind};
use crate::versions::ApiVersion;

/// How to roll a key: how long the old key keeps working, and how long the new one lives.
///
/// ```
/// use std::time::Duration;
/// use partner_api::store::RollKey;
///
/// let roll = RollKey::new(Duration::from_secs(3600)).with_expires_in(Duration::from_secs(30 * 86_400));
/// assert_eq!(roll.expires_in(), Some(Duration::from_secs(30 * 86_400)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RollKey {
    overlap: Duration,
    expires_in: Option<Duration>,
}

impl RollKey {
    /// A roll whose old key keeps working for `overlap`, and whose new key keeps the old
    /// one's lifetime.
    pub fn new(overlap: Duration) -> Self {
        Self {
            overlap,
            expires_in: None,
        }
    }

    /// Makes the new key expire `expires_in` from now instead.
    #[must_use]
    pub fn with_expires_in(mut self, expires_in: Duration) -> Self {
        self.expires_in = Some(expires_in);
        self
    }

    /// Returns how long the old key keeps working.
    pub fn overlap(&self) -> Duration {
        self.overlap
    }

    /// Returns the new key's lifetime, when the caller chose one.
    pub fn expires_in(&self) -> Option<Duration> {
        self.expires_in
    }
}

/// What an organization's keys (and webhook endpoints) must obey, as GitHub's organizations
/// set a maximum lifetime for their members' tokens, and the API version they get when none
/// is named: serializes as `{"maxKeyLifetimeSeconds": n or null, "maxActiveKeys": n,
/// "maxWebhookEndpoints": n, "defaultApiVersion": "YYYY-MM-DD" or null}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct KeyPolicy {
    /// The longest a key may live from its issue or roll; `None` for no limit. With a limit,
    /// a key without expiry is refused too.
    #[serde(rename = "maxKeyLifetimeSeconds", with = "optional_seconds")]
    pub max_lifetime: Option<Duration>,
    /// The most active keys the organization may have (see [`KeyManager::roll`](super::KeyManager::roll) for the one
    /// a roll's overlap adds).
    pub max_active_keys: u32,
    /// The most webhook endpoints the organization may have (enabled or not).
    #[serde(default = "default_max_webhook_endpoints")]
    pub max_webhook_endpoints: u32,
    /// The API version new keys and webhook endpoints of the organization are pinned to when
    /// their admin names none; `None` for the API's newest. Whether the API offers it is the
    /// caller's to check (one it no longer offers reads as `None`).
    #[serde(default)]
    pub default_api_version: Option<ApiVersion>,
}

fn default_max_webhook_endpoints() -> u32 {
    DEFAULT_MAX_WEBHOOK_ENDPOINTS
}

impl Default for KeyPolicy {
    fn default() -> Self {
        Self {
            max_lifetime: None,
            max_active_keys: DEFAULT_MAX_ACTIVE_KEYS,
            max_webhook_endpoints: DEFAULT_MAX_WEBHOOK_ENDPOINTS,
            default_api_version: None,
        }
    }
}

impl KeyPolicy {
    /// The default policy (no maximum lifetime, [`DEFAULT_MAX_ACTIVE_KEYS`],
    /// [`DEFAULT_MAX_WEBHOOK_ENDPOINTS`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the maximum lifetime of keys.
    #[must_use]
    pub fn with_max_lifetime(mut self, max_lifetime: Option<Duration>) -> Self {
        self.max_lifetime = max_lifetime;
        self
    }

    /// Sets the most active keys.
    #[must_use]
    pub fn with_max_active_keys(mut self, max_active_keys: u32) -> Self {
        self.max_active_keys = max_active_keys;
        self
    }

    /// Sets the most webhook endpoints.
    #[must_use]
    pub fn with_max_webhook_endpoints(mut self, max_webhook_endpoints: u32) -> Self {
        self.max_webhook_endpoints = max_webhook_endpoints;
        self
    }

    /// Sets the API version new keys and endpoints get when none is named.
    #[must_use]
    pub fn with_default_api_version(mut self, version: Option<ApiVersion>) -> Self {
        self.default_api_version = version;
        self
    }

    /// Checks that one more webhook endpoint may be added when the organization has
    /// `endpoints` of them.
    ///
    /// # Errors
    ///
    /// `Conflict` at the cap.
    pub fn check_webhook_endpoints(&self, endpoints: u64) -> Result<(), StoreError> {
        if endpoints >= u64::from(self.max_webhook_endpoints) {
            return Err(KeyRefusal::conflict(format!(
                "this organization has {endpoints} webhook endpoints, the most it may have: \
                 remove one first"
            )));
        }
        Ok(())
    }

    /// Checks a new key's `lifetime` (`None`: it never expires) against the policy.
    ///
    /// # Errors
    ///
    /// `InvalidData` for a lifetime over the maximum, or none when there is a maximum.
    pub fn check_lifetime(&self, lifetime: Option<Duration>) -> Result<(), StoreError> {
        let Some(max) = self.max_lifetime else {
            return Ok(());
        };
        match lifetime {
            None => Err(KeyRefusal::invalid(format!(
                "keys of this organization must expire within {} seconds",
                max.as_secs()
            ))),
            // A second of slack for the time between the caller's clock and the store's.
            Some(lifetime) if lifetime > max + Duration::from_secs(1) => {
                Err(KeyRefusal::invalid(format!(
                    "the key would live longer than this organization's maximum of {} seconds",
                    max.as_secs()
                )))
            }
            Some(_) => Ok(()),
        }
    }

    /// Checks that one more key may be issued when the organization has `active` active keys
    /// (`extra`: how many over the cap are allowed, 1 for a roll's overlap).
    ///
    /// # Errors
    ///
    /// `Conflict` at the cap.
    pub fn check_active_keys(&self, active: u64, extra: u32) -> Result<(), StoreError> {
        if active >= u64::from(self.max_active_keys) + u64::from(extra) {
            return Err(KeyRefusal::conflict(format!(
                "this organization has {active} active keys, the most it may have: \
                 revoke one first"
            )));
        }
        Ok(())
    }
}

/// `Option<Duration>` as whole seconds or `null`.
pub(super) mod optional_seconds {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(in crate::store) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(duration) => serializer.serialize_u64(duration.as_secs()),
            None => serializer.serialize_none(),
        }
    }

    pub(in crate::store) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(deserializer)?.map(Duration::from_secs))
    }
}

/// Why key management refused a request, in words the caller may read: a store returns it as
/// the source of a `Conflict` (the key's or the organization's state forbids it: 409) or an
/// `InvalidData` (what was asked breaks a rule: 422) [`StoreError`], and the management API
/// shows its message. Any other store error's text is logged only, never shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeyRefusal {
    message: String,
}

impl KeyRefusal {
    /// A refusal saying `message`.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The `Conflict` store error of a refusal saying `message`.
    pub(crate) fn conflict(message: impl Into<String>) -> StoreError {
        StoreError::refusal(StoreErrorKind::Conflict, message)
    }

    /// The `InvalidData` store error of a refusal saying `message`.
    pub(crate) fn invalid(message: impl Into<String>) -> StoreError {
        StoreError::refusal(StoreErrorKind::InvalidData, message)
    }
}

impl fmt::Display for KeyRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for KeyRefusal {}

/// The lifetime of a key issued at `issued_at` that expires at `expires_at`: whole seconds,
/// rounded, at least one; `None` when it expires before its issue.
pub(crate) fn lifetime_until(expires_at: Timestamp, issued_at: Timestamp) -> Option<Duration> {
    let until = expires_at.duration_since(issued_at)?;
    let seconds = u64::try_from(until.as_millis().saturating_add(500) / 1000).unwrap_or(u64::MAX);
    Some(Duration::from_secs(seconds.max(1)))
}
