//! What the management service offers besides the keys themselves, asked one way: by
//! `GET /abilities` (which the Settings page reads to hide what is not offered), by every
//! optional route before it answers (404 `this host does not offer ...` when not), and by the
//! OpenAPI document the service serves (the paths of an ability not offered are left out).
//!
//! An ability is offered when the store says so (`KeyManager::supports`,
//! `WebhookManager::supports`) or when the host gave the service its capability (the usage
//! store, the audit log, the webhook manager).

use super::bodies::Failure;
use crate::store::{KeyAbility, KeyManager};
#[cfg(feature = "webhooks")]
use crate::webhooks::{WebhookAbility, WebhookManager};

/// An optional ability of the service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ability {
    KeyPolicy,
    LeakReports,
    LastUse,
    ApiVersions,
    ApiVersionPreview,
    Restrictions,
    Webhooks,
    WebhookTestEvents,
    WebhookDeliveryHistory,
    WebhookApiVersions,
    Usage,
    DeprecatedCalls,
    AuditLog,
}

impl Ability {
    const ALL: [Self; 13] = [
        Self::KeyPolicy,
        Self::LeakReports,
        Self::LastUse,
        Self::ApiVersions,
        Self::ApiVersionPreview,
        Self::Restrictions,
        Self::Webhooks,
        Self::WebhookTestEvents,
        Self::WebhookDeliveryHistory,
        Self::WebhookApiVersions,
        Self::Usage,
        Self::DeprecatedCalls,
        Self::AuditLog,
    ];

    /// Its member in `GET /abilities`.
    fn name(self) -> &'static str {
        match self {
            Self::KeyPolicy => "keyPolicy",
            Self::LeakReports => "leakReports",
            Self::LastUse => "lastUse",
            Self::ApiVersions => "apiVersions",
            Self::ApiVersionPreview => "apiVersionPreview",
            Self::Restrictions => "restrictions",
            Self::Webhooks => "webhooks",
            Self::WebhookTestEvents => "webhookTestEvents",
            Self::WebhookDeliveryHistory => "webhookDeliveryHistory",
            Self::WebhookApiVersions => "webhookApiVersions",
            Self::Usage => "usage",
            Self::DeprecatedCalls => "deprecatedCalls",
            Self::AuditLog => "auditLog",
        }
    }

    /// What the 404 of a route of it says is not offered.
    fn what(self) -> &'static str {
        match self {
            Self::KeyPolicy => "key policies",
            Self::LeakReports => "leak reports",
            Self::LastUse => "the keys' last use",
            Self::ApiVersions => "keys' API versions",
            Self::ApiVersionPreview => "previews of API versions",
            Self::Restrictions => "keys' restrictions",
            Self::Webhooks => "webhooks",
            Self::WebhookTestEvents => "webhook test events",
            Self::WebhookDeliveryHistory => "the webhook delivery history",
            Self::WebhookApiVersions => "webhook endpoints' API versions",
            Self::Usage => "usage",
            Self::DeprecatedCalls => "deprecated-call counts",
            Self::AuditLog => "an audit log",
        }
    }

    /// The ability an OpenAPI path of the service needs, if any.
    fn of_path(path: &str) -> Option<Self> {
        match path {
            "/policy" => Some(Self::KeyPolicy),
            "/keys/{id}/api-version" | "/keys/{id}/api-version/rollback" => Some(Self::ApiVersions),
            "/keys/{id}/api-version/preview" => Some(Self::ApiVersionPreview),
            "/keys/{id}/permissions" | "/keys/{id}/providers" => Some(Self::Restrictions),
            "/usage" | "/keys/{id}/usage" => Some(Self::Usage),
            "/audit" => Some(Self::AuditLog),
            "/deprecated-calls" | "/api-versions/calls" => Some(Self::DeprecatedCalls),
            "/webhooks/{id}/test" => Some(Self::WebhookTestEvents),
            "/webhooks/{id}/attempts" | "/webhooks/{id}/retry" | "/webhooks/{id}/recover" => {
                Some(Self::WebhookDeliveryHistory)
            }
            "/webhooks/{id}/api-version" => Some(Self::WebhookApiVersions),
            _ if path.starts_with("/webhooks") => Some(Self::Webhooks),
            _ => None,
        }
    }
}

/// What the service was given, asked which abilities it offers.
pub(super) struct Offered<'a> {
    pub(super) keys: &'a dyn KeyManager,
    pub(super) usage: bool,
    pub(super) deprecated_calls: bool,
    pub(super) audit_log: bool,
    pub(super) preview: bool,
    #[cfg(feature = "webhooks")]
    pub(super) webhooks: Option<&'a dyn WebhookManager>,
}

impl Offered<'_> {
    /// Whether the service offers `ability`.
    fn offers(&self, ability: Ability) -> bool {
        match ability {
            Ability::KeyPolicy => self.keys.supports(KeyAbility::KeyPolicy),
            Ability::LeakReports => self.keys.supports(KeyAbility::LeakReports),
            Ability::LastUse => self.keys.supports(KeyAbility::LastUse),
            Ability::ApiVersions => self.keys.supports(KeyAbility::ApiVersions),
            Ability::Restrictions => self.keys.supports(KeyAbility::Restrictions),
            Ability::ApiVersionPreview => {
                self.preview && self.keys.supports(KeyAbility::ApiVersions)
            }
            Ability::Webhooks
            | Ability::WebhookTestEvents
            | Ability::WebhookDeliveryHistory
            | Ability::WebhookApiVersions => self.offers_webhooks(ability),
            Ability::Usage => self.usage,
            Ability::DeprecatedCalls => self.deprecated_calls,
            Ability::AuditLog => self.audit_log,
        }
    }

    #[cfg(feature = "webhooks")]
    fn offers_webhooks(&self, ability: Ability) -> bool {
        let Some(manager) = self.webhooks else {
            return false;
        };
        match ability {
            Ability::WebhookTestEvents => manager.supports(WebhookAbility::TestEvents),
            Ability::WebhookDeliveryHistory => manager.supports(WebhookAbility::DeliveryHistory),
            Ability::WebhookApiVersions => manager.supports(WebhookAbility::ApiVersions),
            Ability::Webhooks
            | Ability::KeyPolicy
            | Ability::LeakReports
            | Ability::LastUse
            | Ability::ApiVersions
            | Ability::ApiVersionPreview
            | Ability::Restrictions
            | Ability::Usage
            | Ability::DeprecatedCalls
            | Ability::AuditLog => true,
        }
    }

    #[cfg(not(feature = "webhooks"))]
    fn offers_webhooks(&self, _ability: Ability) -> bool {
        false
    }

    /// Refuses a request for an ability the service does not offer: 404, saying which.
    pub(super) fn require(&self, ability: Ability) -> Result<(), Failure> {
        if self.offers(ability) {
            Ok(())
        } else {
            Err(Failure::not_offered(ability.what()))
        }
    }

    /// The `abilities` object of `GET /abilities`: every ability, offered or not.
    pub(super) fn abilities(&self) -> serde_json::Value {
        Ability::ALL
            .into_iter()
            .map(|ability| (ability.name().to_owned(), self.offers(ability).into()))
            .collect::<serde_json::Map<_, _>>()
            .into()
    }

    /// Leaves the paths of the abilities not offered out of the OpenAPI `document`.
    pub(super) fn keep_offered_paths(&self, document: &mut serde_json::Value) {
        if let Some(paths) = document.get_mut("paths").and_then(|p| p.as_object_mut()) {
            paths.retain(|path, _| Ability::of_path(path).is_none_or(|need| self.offers(need)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_optional_path_of_the_document_names_its_ability() {
        let document: serde_json::Value =
            serde_json::from_str(include_str!("openapi.json")).unwrap();
        let paths = document["paths"].as_object().unwrap();
        for ability in Ability::ALL {
            let served: Vec<&String> = paths
                .keys()
                .filter(|path| Ability::of_path(path) == Some(ability))
                .collect();
            // The key abilities without routes of their own (leak reports arrive through the
            // secret scanning endpoint; last use shows in the records) have no path.
            let pathless = matches!(ability, Ability::LeakReports | Ability::LastUse);
            assert_eq!(served.is_empty(), pathless, "{ability:?}: {served:?}");
        }
    }
}
