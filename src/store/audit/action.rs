//! [`AuditAction`]: what a change did, by the name its entries carry (`key.issued`, ...).

use std::fmt;
use std::str::FromStr;

use serde::{Serialize, Serializer};

use crate::store::StoreError;

/// What a change did.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum AuditAction {
    /// `key.issued`.
    KeyIssued,
    /// `key.rolled`: the target is the old key; the new key's id is the entry's detail.
    KeyRolled,
    /// `key.revoked`, by a person or a program.
    KeyRevoked,
    /// `key.leaked`: revoked by a leak report; the detail is the report's URL.
    KeyLeaked,
    /// `key.restricted`: the key's allowed addresses were set.
    KeyRestricted,
    /// `key.api_version_pinned`: the key's API version was set; the detail is `from to to`.
    KeyApiVersionPinned,
    /// `key.permissions_changed`: the routes the key may call were set; the detail is the
    /// permissions it now holds (`orders events`, `orders`, or `none`).
    KeyPermissionsChanged,
    /// `key.providers_changed`: the providers whose orders the key may read were set; the
    /// detail is the providers (`google, meta`) or `any`.
    KeyProvidersChanged,
    /// `key.api_version_rolled_back`: the key's last upgrade was undone; the detail is `from
    /// to to`.
    KeyApiVersionRolledBack,
    /// `policy.changed`: the organization's key policy was set.
    PolicyChanged,
    /// `webhook.added`.
    WebhookAdded,
    /// `webhook.secret_rotated`.
    WebhookSecretRotated,
    /// `webhook.enabled`.
    WebhookEnabled,
    /// `webhook.disabled`: by an admin, or by webhook delivery ([`DELIVERY_ACTOR`](super::DELIVERY_ACTOR), the
    /// reason as the detail).
    WebhookDisabled,
    /// `webhook.removed`.
    WebhookRemoved,
    /// `webhook.test_sent`.
    WebhookTestSent,
    /// `webhook.message_retried`: the detail is the message's id.
    WebhookMessageRetried,
    /// `webhook.messages_recovered`: the detail is how many.
    WebhookMessagesRecovered,
    /// `webhook.api_version_pinned`: the endpoint's API version was set; the detail is `from
    /// to to`.
    WebhookApiVersionPinned,
    /// `audit.pruned`: retention deleted entries of the organization older than its
    /// retention; the detail is how many (one entry per organization and pruned batch).
    AuditPruned,
    /// An action of the host's own, appended with [`AuditLog::append`](super::AuditLog::append) or by SQL: a name of
    /// lowercase letters, digits and `_` with at least one `.` (`user.invited`).
    Host(String),
}

impl AuditAction {
    /// Every action, in order.
    pub const ALL: &'static [Self] = &[
        Self::KeyIssued,
        Self::KeyRolled,
        Self::KeyRevoked,
        Self::KeyLeaked,
        Self::KeyRestricted,
        Self::KeyApiVersionPinned,
        Self::KeyApiVersionRolledBack,
        Self::KeyPermissionsChanged,
        Self::KeyProvidersChanged,
        Self::PolicyChanged,
        Self::WebhookAdded,
        Self::WebhookSecretRotated,
        Self::WebhookEnabled,
        Self::WebhookDisabled,
        Self::WebhookRemoved,
        Self::WebhookTestSent,
        Self::WebhookMessageRetried,
        Self::WebhookMessagesRecovered,
        Self::WebhookApiVersionPinned,
        Self::AuditPruned,
    ];

    /// Its name in the API and the database.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Host(name) => name,
            Self::KeyIssued => "key.issued",
            Self::KeyRolled => "key.rolled",
            Self::KeyRevoked => "key.revoked",
            Self::KeyLeaked => "key.leaked",
            Self::KeyRestricted => "key.restricted",
            Self::KeyApiVersionPinned => "key.api_version_pinned",
            Self::KeyApiVersionRolledBack => "key.api_version_rolled_back",
            Self::KeyPermissionsChanged => "key.permissions_changed",
            Self::KeyProvidersChanged => "key.providers_changed",
            Self::PolicyChanged => "policy.changed",
            Self::WebhookAdded => "webhook.added",
            Self::WebhookSecretRotated => "webhook.secret_rotated",
            Self::WebhookEnabled => "webhook.enabled",
            Self::WebhookDisabled => "webhook.disabled",
            Self::WebhookRemoved => "webhook.removed",
            Self::WebhookTestSent => "webhook.test_sent",
            Self::WebhookMessageRetried => "webhook.message_retried",
            Self::WebhookMessagesRecovered => "webhook.messages_recovered",
            Self::WebhookApiVersionPinned => "webhook.api_version_pinned",
            Self::AuditPruned => "audit.pruned",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AuditAction {
    type Err = StoreError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(action) = Self::ALL.iter().find(|action| action.as_str() == text) {
            return Ok(action.clone());
        }
        let named = text.len() <= 100
            && text.contains('.')
            && !text.starts_with('.')
            && !text.ends_with('.')
            && text
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
        if named {
            Ok(Self::Host(text.to_owned()))
        } else {
            Err(StoreError::invalid_data(format!(
                "{text:?} is no audit action: lowercase letters, digits and _, with a dot"
            )))
        }
    }
}

impl Serialize for AuditAction {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}
