//! [`NewKey`]: what a key to issue is to be, and the checks of its label and expiry.

use std::time::Duration;

use super::policy::lifetime_until;
use super::MAX_LABEL_CHARS;
use crate::key::{AllowedIps, KeyEnvironment, Permissions};
use crate::model::Timestamp;
use crate::store::StoreError;
use crate::versions::ApiVersion;

/// What a new key is to be: its environment, and optionally a label and an expiry.
///
/// ```
/// use partner_api::key::KeyEnvironment;
/// use partner_api::store::NewKey;
///
/// let new = NewKey::new(KeyEnvironment::Live).with_label("Reporting");
/// assert_eq!(new.label(), Some("Reporting"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewKey {
    environment: KeyEnvironment,
    label: Option<String>,
    expires_at: Option<Timestamp>,
    lifetime: Option<Duration>,
    allowed_ips: AllowedIps,
    permissions: Permissions,
    providers: Option<Vec<String>>,
    api_version: ApiVersion,
}

impl NewKey {
    /// Describes a key for `environment`, without label or expiry.
    pub fn new(environment: KeyEnvironment) -> Self {
        Self {
            environment,
            label: None,
            expires_at: None,
            lifetime: None,
            allowed_ips: AllowedIps::any(),
            permissions: Permissions::ALL,
            providers: None,
            api_version: crate::versions::NEWEST,
        }
    }

    /// Pins the key to the API version `api_version` (default: the newest,
    /// [`versions::NEWEST`](crate::versions::NEWEST)): what a request without a version header
    /// is answered at. The caller checks that the API offers it.
    #[must_use]
    pub fn with_api_version(mut self, api_version: ApiVersion) -> Self {
        self.api_version = api_version;
        self
    }

    /// Returns the API version the key is pinned to.
    pub fn api_version(&self) -> ApiVersion {
        self.api_version
    }

    /// Sets the key's label, a name for people (at most [`MAX_LABEL_CHARS`] characters).
    #[must_use]
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Sets when the key expires; its lifetime is the time from its issue to then, in whole
    /// seconds.
    #[must_use]
    pub fn with_expires_at(mut self, expires_at: Timestamp) -> Self {
        self.expires_at = Some(expires_at);
        self.lifetime = None;
        self
    }

    /// Makes the key expire `lifetime` from now: its lifetime, exactly, for later rolls.
    #[must_use]
    pub fn with_expires_in(mut self, lifetime: Duration) -> Self {
        self.expires_at = Some(Timestamp::now().saturating_add(lifetime));
        self.lifetime = Some(lifetime);
        self
    }

    /// Limits the key to the address ranges `allowed_ips`.
    #[must_use]
    pub fn with_allowed_ips(mut self, allowed_ips: AllowedIps) -> Self {
        self.allowed_ips = allowed_ips;
        self
    }

    /// Returns the address ranges the key may be used from.
    pub fn allowed_ips(&self) -> &AllowedIps {
        &self.allowed_ips
    }

    /// Limits the routes the key may call to `permissions` (default: every one,
    /// [`Permissions::ALL`]).
    #[must_use]
    pub fn with_permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = permissions;
        self
    }

    /// Returns the routes the key may call.
    pub fn permissions(&self) -> Permissions {
        self.permissions
    }

    /// Limits the key to the orders of `providers` (kept sorted, each once; checked by
    /// [`check`](Self::check) with [`canonical_providers`](crate::key::canonical_providers)).
    /// Its pages and its events feed are those of these providers' orders.
    #[must_use]
    pub fn with_providers<S: AsRef<str>>(mut self, providers: &[S]) -> Self {
        self.providers = Some(providers.iter().map(|p| p.as_ref().to_owned()).collect());
        self
    }

    /// Returns the providers whose orders the key may read, as given (`None`: every order).
    pub fn providers(&self) -> Option<&[String]> {
        self.providers.as_deref()
    }

    /// The providers as the key keeps them (sorted, each once), after [`check`](Self::check).
    pub(crate) fn canonical_providers(&self) -> Option<Vec<String>> {
        self.providers
            .as_deref()
            .and_then(|providers| crate::key::canonical_providers(providers).ok())
    }

    /// Returns the key's lifetime when issued at `issued_at`: as given to
    /// [`with_expires_in`](Self::with_expires_in), else the time to its expiry rounded to whole
    /// seconds (at least one); `None` without expiry.
    pub fn lifetime_at(&self, issued_at: Timestamp) -> Option<Duration> {
        if self.lifetime.is_some() {
            return self.lifetime;
        }
        lifetime_until(self.expires_at?, issued_at)
    }

    /// Returns the environment.
    pub fn environment(&self) -> KeyEnvironment {
        self.environment
    }

    /// Returns the label.
    pub fn label(&self) -> Option<&str> {
        self.label.as_deref()
    }

    /// Returns the expiry.
    pub fn expires_at(&self) -> Option<Timestamp> {
        self.expires_at
    }

    /// Checks the description against the rules every store applies, at `now`.
    ///
    /// # Errors
    ///
    /// `InvalidData` for an expiry not after `now`, or a label over [`MAX_LABEL_CHARS`]
    /// characters or with control characters.
    pub fn check(&self, now: Timestamp) -> Result<(), StoreError> {
        if self.expires_at.is_some_and(|expires_at| expires_at <= now) {
            return Err(StoreError::invalid_data("the expiry is not in the future"));
        }
        if let Some(label) = &self.label {
            check_label(label)?;
        }
        if let Some(providers) = &self.providers {
            crate::key::canonical_providers(providers).map_err(StoreError::invalid_data)?;
        }
        Ok(())
    }
}

/// Checks a key's label: at most [`MAX_LABEL_CHARS`] characters, no control characters.
pub(crate) fn check_label(label: &str) -> Result<(), StoreError> {
    if label.chars().count() > MAX_LABEL_CHARS {
        return Err(StoreError::invalid_data(format!(
            "the label is longer than {MAX_LABEL_CHARS} characters"
        )));
    }
    if label.chars().any(char::is_control) {
        return Err(StoreError::invalid_data(
            "the label holds control characters",
        ));
    }
    Ok(())
}
