//! What the service answers, by method and path below its mount.

use super::*;
use crate::management::abilities::{Ability, Offered};

/// What the service can be asked, by method and path below the mount.
#[derive(Debug, PartialEq, Eq)]
enum Route<'p> {
    Keys,
    Key(&'p str),
    Revoke(&'p str),
    Roll(&'p str),
    Restrict(&'p str),
    Permissions(&'p str),
    Providers(&'p str),
    PinVersion(&'p str),
    RollBackVersion(&'p str),
    VersionPreview(&'p str),
    ApiVersions,
    VersionCalls,
    Policy,
    Abilities,
    Usage,
    KeyUsage(&'p str),
    PermissionSuggestions,
    PermissionSuggestion(&'p str),
    DeprecatedCalls,
    Audit,
    OpenApi,
    #[cfg(feature = "webhooks")]
    Webhooks(crate::management::webhooks::WebhookRoute<'p>),
}

impl<'p> Route<'p> {
    fn at(path: &'p str) -> Option<Self> {
        let rest = path.strip_prefix('/')?;
        let segments: Vec<&str> = rest.split('/').collect();
        let valid_id = |id: &str| {
            !id.is_empty()
                && id
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        };
        match segments.as_slice() {
            ["keys"] => Some(Self::Keys),
            ["openapi.json"] => Some(Self::OpenApi),
            ["policy"] => Some(Self::Policy),
            ["api-versions"] => Some(Self::ApiVersions),
            ["api-versions", "calls"] => Some(Self::VersionCalls),
            ["abilities"] => Some(Self::Abilities),
            ["usage"] => Some(Self::Usage),
            ["audit"] => Some(Self::Audit),
            ["deprecated-calls"] => Some(Self::DeprecatedCalls),
            ["keys", id, "usage"] if valid_id(id) => Some(Self::KeyUsage(id)),
            ["permissions", "suggestions"] => Some(Self::PermissionSuggestions),
            ["keys", id, "permissions", "suggestion"] if valid_id(id) => {
                Some(Self::PermissionSuggestion(id))
            }
            ["keys", id] if valid_id(id) => Some(Self::Key(id)),
            ["keys", id, "revoke"] if valid_id(id) => Some(Self::Revoke(id)),
            ["keys", id, "roll"] if valid_id(id) => Some(Self::Roll(id)),
            ["keys", id, "restrict"] if valid_id(id) => Some(Self::Restrict(id)),
            ["keys", id, "permissions"] if valid_id(id) => Some(Self::Permissions(id)),
            ["keys", id, "providers"] if valid_id(id) => Some(Self::Providers(id)),
            ["keys", id, "api-version"] if valid_id(id) => Some(Self::PinVersion(id)),
            ["keys", id, "api-version", "rollback"] if valid_id(id) => {
                Some(Self::RollBackVersion(id))
            }
            ["keys", id, "api-version", "preview"] if valid_id(id) => {
                Some(Self::VersionPreview(id))
            }
            #[cfg(feature = "webhooks")]
            ["webhooks", rest @ ..] => {
                crate::management::webhooks::WebhookRoute::at(rest, valid_id).map(Self::Webhooks)
            }
            _ => None,
        }
    }

    fn methods(&self) -> &'static str {
        match self {
            Self::Keys => "GET, HEAD, POST",
            Self::Key(_)
            | Self::Policy
            | Self::Abilities
            | Self::Usage
            | Self::KeyUsage(_)
            | Self::PermissionSuggestions
            | Self::PermissionSuggestion(_)
            | Self::DeprecatedCalls
            | Self::Audit
            | Self::ApiVersions
            | Self::VersionCalls
            | Self::VersionPreview(_)
            | Self::OpenApi => "GET, HEAD",
            Self::Revoke(_)
            | Self::Roll(_)
            | Self::Restrict(_)
            | Self::Permissions(_)
            | Self::Providers(_)
            | Self::PinVersion(_)
            | Self::RollBackVersion(_) => "POST",
            #[cfg(feature = "webhooks")]
            Self::Webhooks(route) => route.methods(),
        }
    }
}

impl Route<'_> {
    /// The abilities the route needs (none for the keys themselves).
    fn abilities(&self) -> Vec<Ability> {
        match self {
            Self::Policy => vec![Ability::KeyPolicy],
            Self::PinVersion(_) | Self::RollBackVersion(_) => vec![Ability::ApiVersions],
            Self::Permissions(_) | Self::Providers(_) => vec![Ability::Restrictions],
            Self::VersionPreview(_) => vec![Ability::ApiVersionPreview],
            Self::Usage | Self::KeyUsage(_) => vec![Ability::Usage],
            Self::PermissionSuggestions | Self::PermissionSuggestion(_) => {
                vec![Ability::Restrictions, Ability::Usage]
            }
            Self::Audit => vec![Ability::AuditLog],
            Self::DeprecatedCalls | Self::VersionCalls => vec![Ability::DeprecatedCalls],
            #[cfg(feature = "webhooks")]
            Self::Webhooks(route) => {
                use crate::management::webhooks::WebhookRoute;
                let beyond = match route {
                    WebhookRoute::Attempts(_) | WebhookRoute::Action(_, "retry" | "recover") => {
                        Some(Ability::WebhookDeliveryHistory)
                    }
                    WebhookRoute::Action(_, "test") => Some(Ability::WebhookTestEvents),
                    WebhookRoute::Action(_, "api-version") => Some(Ability::WebhookApiVersions),
                    WebhookRoute::Endpoints
                    | WebhookRoute::Endpoint(_)
                    | WebhookRoute::Action(..) => None,
                };
                [Ability::Webhooks].into_iter().chain(beyond).collect()
            }
            Self::Keys
            | Self::Key(_)
            | Self::Revoke(_)
            | Self::Roll(_)
            | Self::Restrict(_)
            | Self::Abilities
            | Self::ApiVersions
            | Self::OpenApi => Vec::new(),
        }
    }
}

impl KeyManagementService {
    /// The usage store, or the 404 of a host that passed none.
    fn usage_store(&self) -> Result<&dyn crate::store::UsageStore, Failure> {
        self.usage
            .as_deref()
            .ok_or_else(|| Failure::not_offered("usage"))
    }

    /// What the service was given, asked which abilities it offers.
    pub(super) fn offered(&self) -> Offered<'_> {
        Offered {
            keys: &*self.keys,
            usage: self.usage.is_some(),
            deprecated_calls: self.deprecated_calls.is_some(),
            audit_log: self.audit.is_some(),
            preview: self.preview.is_some(),
            #[cfg(feature = "webhooks")]
            webhooks: self.webhooks.as_deref(),
        }
    }

    /// The API version new keys and endpoints of `organization` get when none is named: its
    /// key policy's default when the store keeps policies and the API offers it, else the
    /// newest. A policy that cannot be read now gives the newest (the caller named none).
    pub(super) async fn default_version(&self, organization: &str) -> crate::versions::ApiVersion {
        if self.keys.supports(crate::store::KeyAbility::KeyPolicy) {
            if let Ok(policy) = self.keys.key_policy(organization).await {
                if let Some(version) = policy
                    .default_api_version
                    .filter(|version| self.versions.offers(*version))
                {
                    return version;
                }
            }
        }
        self.versions.newest()
    }

    /// The OpenAPI document, without the paths of the abilities not offered.
    pub(super) fn document(&self) -> Result<serde_json::Value, Failure> {
        let mut document: serde_json::Value =
            serde_json::from_str(OPENAPI_DOCUMENT).map_err(|_| {
                Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal server error")
            })?;
        self.offered().keep_offered_paths(&mut document);
        Ok(document)
    }

    pub(super) async fn route<B>(&self, parts: Parts, body: B) -> Result<Response<ApiBody>, Failure>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let not_found = || Failure::new(StatusCode::NOT_FOUND, "not found");
        let path = parts
            .uri
            .path()
            .strip_prefix(&*self.prefix)
            .ok_or_else(not_found)?;
        let route = Route::at(path).ok_or_else(not_found)?;
        // An ability not offered answers its 404 before anything else, as a path not served.
        let offered = self.offered();
        for ability in route.abilities() {
            offered.require(ability)?;
        }
        let reading = parts.method == Method::GET || parts.method == Method::HEAD;
        #[cfg(feature = "webhooks")]
        if let Route::Webhooks(route) = route {
            let manager = self
                .webhooks
                .as_deref()
                .ok_or_else(|| Failure::not_offered("webhooks"))?;
            if !route.allows(&parts.method) {
                let mut failure =
                    Failure::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
                failure.allow = Some(route.methods());
                return Err(failure);
            }
            let organization = self.acting_organization(&parts)?;
            if !reading {
                self.check_state_change(&parts)?;
                within_budget(
                    &self.writes,
                    organization.id(),
                    "too many changes for this organization; try again later",
                )
                .await?;
            }
            if route.queues_messages() {
                within_budget(
                    &self.webhook_actions,
                    organization.id(),
                    "too many test events, retries and recoveries for this organization; \
                     try again later",
                )
                .await?;
            }
            // Read only for an add: the policy is not the other routes' business.
            let new_endpoints =
                if route == crate::management::webhooks::WebhookRoute::Endpoints && !reading {
                    self.default_version(organization.id()).await
                } else {
                    self.versions.newest()
                };
            return crate::management::webhooks::answer(
                manager,
                &self.versions,
                new_endpoints,
                route,
                organization.id(),
                &parts,
                body,
            )
            .await;
        }
        let changes = matches!(
            route,
            Route::Revoke(_)
                | Route::Roll(_)
                | Route::Restrict(_)
                | Route::Permissions(_)
                | Route::Providers(_)
                | Route::PinVersion(_)
                | Route::RollBackVersion(_)
        );
        let allowed = if reading {
            !changes
        } else {
            parts.method == Method::POST && (changes || route == Route::Keys)
        };
        if !allowed {
            let mut failure = Failure::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
            failure.allow = Some(route.methods());
            return Err(failure);
        }
        if route == Route::OpenApi {
            return Ok(json(StatusCode::OK, &self.document()?));
        }
        let organization = self.acting_organization(&parts)?;
        let organization = organization.id();
        if !reading {
            self.check_state_change(&parts)?;
            within_budget(
                &self.writes,
                organization,
                "too many changes for this organization; try again later",
            )
            .await?;
        }
        let keys = &*self.keys;
        match route {
            Route::Keys if reading => {
                let records = keys.list(organization).await.map_err(Failure::from_store)?;
                Ok(json(
                    StatusCode::OK,
                    &serde_json::json!({ "data": { "keys": records } }),
                ))
            }
            Route::Keys => {
                let IssueRequest {
                    label,
                    environment,
                    expires_at,
                    allowed_ips,
                    api_version,
                    permissions,
                    providers,
                } = read_json(body).await?;
                let permissions = match permissions {
                    Some(names) => key_permissions(&names)?,
                    None => crate::key::Permissions::ALL,
                };
                // A store that keeps no permissions would issue a key that reaches more than
                // was asked: refused, never widened.
                let restricted = !permissions.is_all() || providers.is_some();
                if restricted && !keys.supports(crate::store::KeyAbility::Restrictions) {
                    return Err(Failure::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "this host's key store keeps no restrictions, so a key limited to some routes or providers cannot be issued",
                    ));
                }
                let api_version = match api_version {
                    Some(name) => offered_version(&self.versions, &name)?,
                    None => self.default_version(organization).await,
                };
                let mut new = NewKey::new(environment.into())
                    .with_allowed_ips(allowed_ips.unwrap_or_default())
                    .with_permissions(permissions)
                    .with_api_version(api_version);
                if let Some(providers) = &providers {
                    new = new.with_providers(providers);
                }
                if let Some(label) = label {
                    new = new.with_label(label);
                }
                if let Some(expires_at) = expires_at {
                    new = new.with_expires_at(expires_at);
                }
                // The caller's mistakes are told here; an `InvalidData` from the store after
                // this is the store's own fault.
                new.check(Timestamp::now()).map_err(|err| {
                    Failure::new(StatusCode::UNPROCESSABLE_ENTITY, caller_message(&err))
                })?;
                let issued = keys
                    .issue(organization, new)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(created(&issued))
            }
            Route::Key(id) => {
                let record = keys
                    .get(organization, id)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(one(&record))
            }
            Route::Revoke(id) => {
                let RevokeRequest {} = read_json(body).await?;
                let record = keys
                    .revoke(organization, id)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(one(&record))
            }
            Route::Restrict(id) => {
                let RestrictRequest { allowed_ips } = read_json(body).await?;
                let record = keys
                    .restrict(organization, id, allowed_ips)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(one(&record))
            }
            Route::Permissions(id) => {
                let PermissionsRequest { permissions } = read_json(body).await?;
                let record = keys
                    .set_permissions(organization, id, key_permissions(&permissions)?)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(one(&record))
            }
            Route::Providers(id) => {
                let ProvidersRequest { providers } = read_json(body).await?;
                if let Some(providers) = &providers {
                    crate::key::canonical_providers(providers).map_err(|message| {
                        Failure::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            format!("providers: {message}"),
                        )
                    })?;
                }
                let record = keys
                    .set_providers(organization, id, providers)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(one(&record))
            }
            Route::PinVersion(id) => {
                let PinVersionRequest { api_version } = read_json(body).await?;
                let version = offered_version(&self.versions, &api_version)?;
                let record = keys
                    .pin_api_version(organization, id, version)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(one(&record))
            }
            Route::RollBackVersion(id) => {
                let RevokeRequest {} = read_json(body).await?;
                let record = keys
                    .roll_back_api_version(organization, id)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(one(&record))
            }
            Route::ApiVersions => Ok(api_versions(
                &self.versions,
                self.default_version(organization).await,
            )),
            Route::VersionPreview(id) => {
                let (orders, events) = self
                    .preview
                    .as_ref()
                    .ok_or_else(|| Failure::not_offered("previews of API versions"))?;
                crate::management::preview::preview(
                    keys,
                    &**orders,
                    &**events,
                    &self.versions,
                    organization,
                    id,
                    parts.uri.query(),
                )
                .await
            }
            Route::Roll(id) => {
                let RollRequest {
                    overlap_seconds,
                    expires_in_seconds,
                } = read_json(body).await?;
                let overlap = Duration::from_secs(overlap_seconds);
                if overlap > MAX_OVERLAP {
                    return Err(Failure::new(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "overlapSeconds is more than a year",
                    ));
                }
                let mut roll = RollKey::new(overlap);
                match expires_in_seconds {
                    Some(0) => {
                        return Err(Failure::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "expiresInSeconds must be at least 1",
                        ))
                    }
                    Some(seconds) if Duration::from_secs(seconds) > MAX_LIFETIME => {
                        return Err(Failure::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "expiresInSeconds is more than a hundred years",
                        ))
                    }
                    Some(seconds) => roll = roll.with_expires_in(Duration::from_secs(seconds)),
                    None => {}
                }
                let issued = keys
                    .roll(organization, id, roll)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(created(&issued))
            }
            Route::Policy => {
                let policy = keys
                    .key_policy(organization)
                    .await
                    .map_err(Failure::from_store)?;
                Ok(json(
                    StatusCode::OK,
                    &serde_json::json!({ "data": { "policy": policy } }),
                ))
            }
            Route::Abilities => Ok(json(
                StatusCode::OK,
                &serde_json::json!({ "data": { "abilities": self.offered().abilities() } }),
            )),
            Route::Usage => {
                let store = self.usage_store()?;
                crate::management::usage::usage_totals(store, organization, parts.uri.query()).await
            }
            Route::KeyUsage(id) => {
                let store = self.usage_store()?;
                crate::management::usage::key_usage(store, organization, id, parts.uri.query())
                    .await
            }
            Route::PermissionSuggestions => {
                let usage = self.usage_store()?;
                crate::management::suggestions::suggestions(
                    keys,
                    usage,
                    organization,
                    parts.uri.query(),
                )
                .await
            }
            Route::PermissionSuggestion(id) => {
                let usage = self.usage_store()?;
                crate::management::suggestions::key_suggestion(
                    keys,
                    usage,
                    organization,
                    id,
                    parts.uri.query(),
                )
                .await
            }
            Route::DeprecatedCalls => {
                let store = self
                    .deprecated_calls
                    .as_deref()
                    .ok_or_else(|| Failure::not_offered("deprecated-call counts"))?;
                crate::management::deprecated_calls::deprecated_calls(
                    store,
                    &self.deprecations,
                    organization,
                )
                .await
            }
            Route::VersionCalls => {
                let store = self
                    .deprecated_calls
                    .as_deref()
                    .ok_or_else(|| Failure::not_offered("deprecated-call counts"))?;
                crate::management::deprecated_calls::version_calls(
                    store,
                    &self.versions,
                    organization,
                )
                .await
            }
            Route::Audit => {
                let log = self
                    .audit
                    .as_deref()
                    .ok_or_else(|| Failure::not_offered("an audit log"))?;
                crate::management::audit::entries(log, organization, parts.uri.query()).await
            }
            Route::OpenApi => Err(not_found()),
            #[cfg(feature = "webhooks")]
            Route::Webhooks(_) => Err(not_found()),
        }
    }
}
