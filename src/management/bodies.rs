//! The JSON documents of the key-management API: the request bodies it reads, the answers
//! and errors it writes.

use bytes::{Buf, Bytes};
use http::header::{HeaderValue, ALLOW};
use http::{Response, StatusCode};
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use serde::Deserialize;

use super::limits::MAX_BODY_BYTES;
use crate::api::body::ApiBody;
use crate::api::request_id::REQUEST_ID_HEADER;
use crate::key::{AllowedIps, KeyEnvironment};
use crate::log::ErrorChain;
use crate::model::Timestamp;
use crate::store::{IssuedKey, KeyRecord};
use crate::store::{StoreError, StoreErrorKind};

/// Why a request is refused, and with which status.
#[derive(Debug)]
pub(super) struct Failure {
    pub(super) status: StatusCode,
    pub(super) message: String,
    pub(super) allow: Option<&'static str>,
    /// How long until a refused request may be made again (`Retry-After`).
    pub(super) retry_after: Option<std::time::Duration>,
}

impl Failure {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            allow: None,
            retry_after: None,
        }
    }

    pub(super) fn into_response(self) -> Response<ApiBody> {
        let body = serde_json::json!({ "error": { "message": self.message } });
        let mut response = json(self.status, &body);
        if let Some(allow) = self.allow {
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static(allow));
        }
        if let Some(wait) = self.retry_after {
            response.headers_mut().insert(
                http::header::RETRY_AFTER,
                crate::rate_limit::whole_seconds_at_least_one(wait),
            );
        }
        response
    }

    /// The answer to a request for an ability this host does not offer (a store without it,
    /// or a capability the host did not give the service): 404, like a path that does not
    /// exist, saying what is not offered. Every optional ability is answered so;
    /// `GET /abilities` says beforehand which are offered.
    pub(super) fn not_offered(what: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            format!("this host does not offer {what}"),
        )
    }

    /// The answer to a store's error: its kind decides the status; the detail of a failure
    /// goes to the log only.
    pub(super) fn from_store(err: StoreError) -> Self {
        // A refusal in the store's own words, meant for the caller.
        if let Some(refusal) = err.refusal_message() {
            let status = match err.kind() {
                StoreErrorKind::Conflict => Some(StatusCode::CONFLICT),
                StoreErrorKind::InvalidData => Some(StatusCode::UNPROCESSABLE_ENTITY),
                _ => None,
            };
            if let Some(status) = status {
                return Self::new(status, refusal);
            }
        }
        // What the caller sent is checked before the store is asked, so invalid data here is
        // the store's (a row that breaks the schema): a 500, its detail logged only.
        let status = match err.kind() {
            StoreErrorKind::NotFound => StatusCode::NOT_FOUND,
            StoreErrorKind::Conflict => StatusCode::CONFLICT,
            StoreErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            StoreErrorKind::Unsupported => return Self::not_offered("this"),
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        if status.is_server_error() {
            tracing::error!(kind = ?err.kind(), error = %ErrorChain(&err), "key management store failed");
            let message = if status == StatusCode::SERVICE_UNAVAILABLE {
                "the key store is unavailable, try again later"
            } else {
                "internal server error"
            };
            return Self::new(status, message);
        }
        // The caller hears the service's own words: a store's message may carry its
        // database's text (a constraint's name, a table), which is logged only.
        tracing::debug!(kind = ?err.kind(), error = %ErrorChain(&err), "key management refused");
        let message = if status == StatusCode::NOT_FOUND {
            "no key with this id in this organization"
        } else {
            "the key's state does not allow this: a revoked key cannot be rolled"
        };
        Self::new(status, message)
    }
}

/// A store error's own message (its source's), for a caller who may see it.
pub(super) fn caller_message(err: &StoreError) -> String {
    match std::error::Error::source(err) {
        Some(source) => source.to_string(),
        None => err.to_string(),
    }
}

/// A JSON response with the headers every response of the service carries: the API's own
/// (`Content-Type`, `Cache-Control: no-store`, `X-Content-Type-Options`), without a request id.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Response<ApiBody> {
    let mut response = crate::api::response::json(status, Bytes::from(value.to_string()));
    response.headers_mut().remove(REQUEST_ID_HEADER);
    response
}

/// The body of `POST /keys`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct IssueRequest {
    #[serde(default)]
    pub(super) label: Option<String>,
    pub(super) environment: KeyEnvironmentName,
    #[serde(default)]
    pub(super) expires_at: Option<Timestamp>,
    #[serde(default)]
    pub(super) allowed_ips: Option<AllowedIps>,
    #[serde(default)]
    pub(super) api_version: Option<String>,
    #[serde(default)]
    pub(super) permissions: Option<Vec<String>>,
    #[serde(default)]
    pub(super) providers: Option<Vec<String>>,
}

/// The body of `POST /keys/{id}/providers`: the providers whose orders the key may read,
/// `null` for every order.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct ProvidersRequest {
    /// Required: `null` lifts the limit, a missing member is refused rather than read so.
    #[serde(deserialize_with = "present_or_null")]
    pub(super) providers: Option<Vec<String>>,
}

/// A member that must be present, as a list or as `null` (serde reads a missing `Option`
/// member as `None` unless told otherwise).
fn present_or_null<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    Option::<Vec<String>>::deserialize(deserializer)
}

/// The body of `POST /keys/{id}/permissions`: the routes the key may call, all of them to
/// lift the restriction.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PermissionsRequest {
    pub(super) permissions: Vec<String>,
}

/// The permissions `names` names; else the 422 that lists those there are.
pub(super) fn key_permissions(names: &[String]) -> Result<crate::key::Permissions, Failure> {
    crate::key::Permissions::parse(names.iter().map(String::as_str)).map_err(|name| {
        Failure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "permissions: {name:?} is not a permission; the permissions are orders and events"
            ),
        )
    })
}

/// The body of `POST /keys/{id}/api-version`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct PinVersionRequest {
    pub(super) api_version: String,
}

/// The API version `name` names, if `versions` offers it; else the 422 that lists those
/// offered.
pub(super) fn offered_version(
    versions: &crate::versions::Versions,
    name: &str,
) -> Result<crate::versions::ApiVersion, Failure> {
    match name.parse() {
        Ok(version) if versions.offers(version) => Ok(version),
        _ => {
            let offered: Vec<String> = versions.offered().map(|v| v.to_string()).collect();
            Err(Failure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                format!(
                    "apiVersion must be a version of the API, one of {}",
                    offered.join(", ")
                ),
            ))
        }
    }
}

/// The body of `GET /api-versions`: the versions offered, newest first, each with its
/// changes, and the one new keys are pinned to (`new_keys`: the organization's default, else
/// the newest).
pub(super) fn api_versions(
    versions: &crate::versions::Versions,
    new_keys: crate::versions::ApiVersion,
) -> Response<ApiBody> {
    let listed: Vec<serde_json::Value> = versions
        .offered()
        .map(|version| {
            let changes: Vec<&str> = versions
                .changes_of(version)
                .map(|change| change.description())
                .collect();
            serde_json::json!({ "version": version, "changes": changes })
        })
        .collect();
    json(
        StatusCode::OK,
        &serde_json::json!({
            "data": { "versions": listed, "newKeys": new_keys }
        }),
    )
}

/// The body of `POST /keys/{id}/restrict`: the ranges, empty to lift the restriction.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RestrictRequest {
    pub(super) allowed_ips: AllowedIps,
}

/// `"live"` or `"test"`.
#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum KeyEnvironmentName {
    Live,
    Test,
}

impl From<KeyEnvironmentName> for KeyEnvironment {
    fn from(name: KeyEnvironmentName) -> Self {
        match name {
            KeyEnvironmentName::Live => Self::Live,
            KeyEnvironmentName::Test => Self::Test,
        }
    }
}

/// The body of `POST /keys/{id}/revoke`: an empty object.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RevokeRequest {}

/// The body of `POST /keys/{id}/roll`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(super) struct RollRequest {
    pub(super) overlap_seconds: u64,
    /// The new key's lifetime; absent: the old key's. `null` is refused: it could be read as
    /// "never expires", which a roll does not offer.
    #[serde(default, deserialize_with = "present_number")]
    pub(super) expires_in_seconds: Option<u64>,
}

/// A member that, when present, must be a number (not `null`).
fn present_number<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u64>, D::Error> {
    u64::deserialize(deserializer).map(Some)
}

/// The `200` of one record.
pub(super) fn one(record: &KeyRecord) -> Response<ApiBody> {
    json(
        StatusCode::OK,
        &serde_json::json!({ "data": { "record": record } }),
    )
}

/// The `201` of a new key: the one response that holds its plaintext.
pub(super) fn created(issued: &IssuedKey) -> Response<ApiBody> {
    json(
        StatusCode::CREATED,
        &serde_json::json!({ "data": { "key": issued.plaintext(), "record": issued.record() } }),
    )
}

/// Reads a JSON body of at most [`MAX_BODY_BYTES`] as `T`: 413 when larger, 400 when not JSON,
/// 422 when JSON of the wrong shape.
pub(super) async fn read_json<B, T>(body: B) -> Result<T, Failure>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    T: for<'de> Deserialize<'de>,
{
    let bytes = Limited::new(body, MAX_BODY_BYTES)
        .collect()
        .await
        .map_err(|err| {
            if err
                .downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Failure::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the body is larger than 16 KiB",
                )
            } else {
                Failure::new(StatusCode::BAD_REQUEST, "the body could not be read")
            }
        })?
        .aggregate();
    let value: serde_json::Value = serde_json::from_reader(bytes.reader()).map_err(|err| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            format!("the body is not JSON: {err}"),
        )
    })?;
    // serde reads a struct from an array of its fields too: every body is an object.
    if !value.is_object() {
        return Err(Failure::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "the body must be a JSON object",
        ));
    }
    T::deserialize(value)
        .map_err(|err| Failure::new(StatusCode::UNPROCESSABLE_ENTITY, err.to_string()))
}
