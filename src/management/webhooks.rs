//! The webhook routes of [`KeyManagementService`](super::KeyManagementService) (feature
//! `webhooks`): an organization's endpoints, below `/webhooks`.

use std::time::Duration;

use http::request::Parts;
use http::{Method, Response, StatusCode};
use http_body::Body;
use serde::Deserialize;

use super::bodies::{caller_message, json, offered_version, read_json, Failure, PinVersionRequest};
use super::limits::MAX_OVERLAP;
use crate::api::body::ApiBody;
use crate::model::Timestamp;
use crate::store::{StoreError, StoreErrorKind};
use crate::versions::Versions;
use crate::webhooks::{EventType, NewEndpoint, WebhookManager};

/// The most attempts `GET /webhooks/{id}/attempts` lists.
const ATTEMPTS_LISTED: usize = 100;

/// A webhook route, below `/webhooks`.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub(super) enum WebhookRoute<'p> {
    Endpoints,
    Endpoint(&'p str),
    Attempts(&'p str),
    /// A state change of one endpoint: `rotate`, `enable`, `disable`, `remove`, `test`,
    /// `retry`, `recover`, `api-version`.
    Action(&'p str, &'p str),
}

impl<'p> WebhookRoute<'p> {
    /// Whether the route queues messages (`test`, `retry`, `recover`): rate-limited per
    /// organization, as each is a delivery to make.
    pub(super) fn queues_messages(&self) -> bool {
        matches!(self, Self::Action(_, "test" | "retry" | "recover"))
    }

    /// The route of `segments` (the path's, after `webhooks`).
    pub(super) fn at(segments: &[&'p str], valid_id: impl Fn(&str) -> bool) -> Option<Self> {
        const ACTIONS: [&str; 8] = [
            "rotate",
            "enable",
            "disable",
            "remove",
            "test",
            "retry",
            "recover",
            "api-version",
        ];
        match segments {
            [] => Some(Self::Endpoints),
            [id] if valid_id(id) => Some(Self::Endpoint(id)),
            [id, "attempts"] if valid_id(id) => Some(Self::Attempts(id)),
            [id, action] if valid_id(id) && ACTIONS.contains(action) => {
                Some(Self::Action(id, action))
            }
            _ => None,
        }
    }

    /// The methods it answers.
    pub(super) fn methods(self) -> &'static str {
        match self {
            Self::Endpoints => "GET, HEAD, POST",
            Self::Endpoint(_) | Self::Attempts(_) => "GET, HEAD",
            Self::Action(..) => "POST",
        }
    }

    /// Whether `method` is one of them.
    pub(super) fn allows(self, method: &Method) -> bool {
        let reading = method == Method::GET || method == Method::HEAD;
        match self {
            Self::Endpoints => reading || method == Method::POST,
            Self::Endpoint(_) | Self::Attempts(_) => reading,
            Self::Action(..) => method == Method::POST,
        }
    }
}

/// The body of `POST /webhooks`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct AddRequest {
    url: String,
    #[serde(default)]
    events: Vec<EventType>,
    #[serde(default)]
    description: String,
    /// Absent: the organization's default (its key policy's), else the newest.
    api_version: Option<String>,
    /// Absent or `null`: every order.
    #[serde(default)]
    providers: Option<Vec<String>>,
}

/// The body of `POST /webhooks/{id}/rotate`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RotateRequest {
    /// Absent: a day.
    #[serde(default = "a_day")]
    overlap_seconds: u64,
}

fn a_day() -> u64 {
    86_400
}

/// The body of `POST /webhooks/{id}/retry`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RetryRequest {
    message_id: String,
}

/// The body of `POST /webhooks/{id}/recover`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RecoverRequest {
    since: Timestamp,
}

/// The body of the other actions: an empty object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Empty {}

/// A store's error, in the words of endpoints; a refusal in the store's own words (the
/// organization's cap of endpoints) as it says it.
fn failure(err: StoreError) -> Failure {
    if err.refusal_message().is_some() {
        return Failure::from_store(err);
    }
    match err.kind() {
        StoreErrorKind::NotFound => Failure::new(
            StatusCode::NOT_FOUND,
            "no webhook endpoint (or message) with this id in this organization",
        ),
        StoreErrorKind::Conflict => Failure::new(
            StatusCode::CONFLICT,
            "the endpoint is disabled; enable it first",
        ),
        _ => Failure::from_store(err),
    }
}

fn data(status: StatusCode, value: serde_json::Value) -> Response<ApiBody> {
    json(status, &serde_json::json!({ "data": value }))
}

/// Answers `route` for `organization`; the method is allowed and a state change passed the
/// service's checks.
pub(super) async fn answer<B>(
    manager: &dyn WebhookManager,
    versions: &Versions,
    new_endpoints: crate::versions::ApiVersion,
    route: WebhookRoute<'_>,
    organization: &str,
    parts: &Parts,
    body: B,
) -> Result<Response<ApiBody>, Failure>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let reading = parts.method == Method::GET || parts.method == Method::HEAD;
    match route {
        WebhookRoute::Endpoints if reading => {
            let endpoints = manager.endpoints(organization).await.map_err(failure)?;
            Ok(data(
                StatusCode::OK,
                serde_json::json!({ "endpoints": endpoints }),
            ))
        }
        WebhookRoute::Endpoints => {
            let AddRequest {
                url,
                events,
                description,
                api_version,
                providers,
            } = read_json(body).await?;
            let version = match api_version {
                Some(name) => offered_version(versions, &name)?,
                None => new_endpoints,
            };
            let mut new = NewEndpoint::new(url)
                .with_events(events)
                .with_description(description)
                .with_api_version(version);
            if let Some(providers) = providers {
                new = new.with_providers(&providers);
            }
            new.check().map_err(|err| {
                Failure::new(StatusCode::UNPROCESSABLE_ENTITY, caller_message(&err))
            })?;
            let added = manager
                .add_endpoint(organization, new)
                .await
                .map_err(failure)?;
            Ok(data(
                StatusCode::CREATED,
                serde_json::json!({ "endpoint": added }),
            ))
        }
        WebhookRoute::Endpoint(id) => {
            let endpoint = manager.endpoint(organization, id).await.map_err(failure)?;
            Ok(data(
                StatusCode::OK,
                serde_json::json!({ "endpoint": endpoint }),
            ))
        }
        WebhookRoute::Attempts(id) => {
            let attempts = manager
                .attempts(organization, id, ATTEMPTS_LISTED)
                .await
                .map_err(failure)?;
            Ok(data(
                StatusCode::OK,
                serde_json::json!({ "attempts": attempts }),
            ))
        }
        WebhookRoute::Action(id, "rotate") => {
            let RotateRequest { overlap_seconds } = read_json(body).await?;
            let overlap = Duration::from_secs(overlap_seconds);
            if overlap > MAX_OVERLAP {
                return Err(Failure::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "overlapSeconds is more than a year",
                ));
            }
            let rotated = manager
                .rotate_secret(organization, id, overlap)
                .await
                .map_err(failure)?;
            Ok(data(
                StatusCode::OK,
                serde_json::json!({ "endpoint": rotated }),
            ))
        }
        WebhookRoute::Action(id, action @ ("enable" | "disable")) => {
            let Empty {} = read_json(body).await?;
            let endpoint = manager
                .set_enabled(organization, id, action == "enable")
                .await
                .map_err(failure)?;
            Ok(data(
                StatusCode::OK,
                serde_json::json!({ "endpoint": endpoint }),
            ))
        }
        WebhookRoute::Action(id, "remove") => {
            let Empty {} = read_json(body).await?;
            manager
                .remove_endpoint(organization, id)
                .await
                .map_err(failure)?;
            Ok(data(StatusCode::OK, serde_json::json!({ "removed": id })))
        }
        WebhookRoute::Action(id, "test") => {
            let Empty {} = read_json(body).await?;
            let message_id = manager.send_test(organization, id).await.map_err(failure)?;
            Ok(data(
                StatusCode::ACCEPTED,
                serde_json::json!({ "messageId": message_id }),
            ))
        }
        WebhookRoute::Action(id, "api-version") => {
            let PinVersionRequest { api_version } = read_json(body).await?;
            let version = offered_version(versions, &api_version)?;
            let endpoint = manager
                .pin_api_version(organization, id, version)
                .await
                .map_err(failure)?;
            Ok(data(
                StatusCode::OK,
                serde_json::json!({ "endpoint": endpoint }),
            ))
        }
        WebhookRoute::Action(id, "retry") => {
            let RetryRequest { message_id } = read_json(body).await?;
            manager
                .retry_message(organization, id, &message_id)
                .await
                .map_err(failure)?;
            Ok(data(
                StatusCode::ACCEPTED,
                serde_json::json!({ "messageId": message_id }),
            ))
        }
        WebhookRoute::Action(id, _) => {
            let RecoverRequest { since } = read_json(body).await?;
            let recovered = manager
                .recover(organization, id, since)
                .await
                .map_err(failure)?;
            Ok(data(
                StatusCode::ACCEPTED,
                serde_json::json!({ "recovered": recovered }),
            ))
        }
    }
}
