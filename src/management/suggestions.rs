//! Which permissions a key needs, from its own calls: `GET /keys/{id}/permissions/suggestion`
//! and `GET /permissions/suggestions` (every key not revoked), over the key's usage per route
//! of the last 30 days ([`DEFAULT_USAGE_PERIOD`]).
//!
//! The suggestion is the narrowest set of permissions that would have allowed every call the
//! key made in the period: a route's permission when the key called the route at all,
//! whatever the answer (a call refused for the missing permission counts: the key wanted
//! it). `unused` flags the permissions it holds and never called. The period starts at the
//! hour of the key's creation when that is later. Providers are not suggested: usage counts calls per
//! route, not the providers of the orders they read.

use http::{Response, StatusCode};

use super::bodies::{json, Failure};
use super::usage::DEFAULT_USAGE_PERIOD;
use crate::api::body::ApiBody;
use crate::key::{Permission, Permissions};
use crate::model::Timestamp;
use crate::store::{KeyManager, KeyRecord, UsageGranularity, UsagePeriod, UsageRoute, UsageStore};

/// `GET /keys/{id}/permissions/suggestion`.
pub(super) async fn key_suggestion(
    keys: &dyn KeyManager,
    usage: &dyn UsageStore,
    organization_id: &str,
    key_id: &str,
    query: Option<&str>,
) -> Result<Response<ApiBody>, Failure> {
    no_parameters(query)?;
    let record = keys
        .get(organization_id, key_id)
        .await
        .map_err(Failure::from_store)?;
    let suggestion = suggest(usage, organization_id, &record, last_30_days()).await?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "data": { "suggestion": suggestion } }),
    ))
}

/// `GET /permissions/suggestions`: every key of the organization that is not revoked.
pub(super) async fn suggestions(
    keys: &dyn KeyManager,
    usage: &dyn UsageStore,
    organization_id: &str,
    query: Option<&str>,
) -> Result<Response<ApiBody>, Failure> {
    no_parameters(query)?;
    let period = last_30_days();
    let records = keys
        .list(organization_id)
        .await
        .map_err(Failure::from_store)?;
    let mut suggestions = Vec::new();
    for record in records.iter().filter(|record| record.revoked_at.is_none()) {
        suggestions.push(suggest(usage, organization_id, record, period).await?);
    }
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "data": { "suggestions": suggestions } }),
    ))
}

fn no_parameters(query: Option<&str>) -> Result<(), Failure> {
    match query {
        None | Some("") => Ok(()),
        Some(_) => Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "a suggestion takes no query parameters: it reads the last 30 days",
        )),
    }
}

fn last_30_days() -> UsagePeriod {
    let to = Timestamp::now();
    UsagePeriod {
        from: to.saturating_sub(DEFAULT_USAGE_PERIOD),
        to,
    }
}

/// The route a permission allows.
fn route_of(permission: Permission) -> UsageRoute {
    match permission {
        Permission::Orders => UsageRoute::Orders,
        Permission::Events => UsageRoute::Events,
    }
}

/// The suggestion for `record` over `period` (from its creation, when later).
async fn suggest(
    usage: &dyn UsageStore,
    organization_id: &str,
    record: &KeyRecord,
    period: UsagePeriod,
) -> Result<serde_json::Value, Failure> {
    // From the hour the key was created in: usage is counted per hour.
    let created = record.created_at.as_datetime().timestamp_millis();
    let created_hour = Timestamp::from_unix_millis(created - created.rem_euclid(3_600_000))
        .unwrap_or(record.created_at);
    let period = UsagePeriod {
        from: period.from.max(created_hour),
        to: period.to,
    };
    let buckets = usage
        .key_usage(organization_id, &record.id, period, UsageGranularity::Day)
        .await
        .map_err(Failure::from_store)?;
    let calls = |permission: Permission| -> u64 {
        buckets
            .iter()
            .filter(|bucket| bucket.route == route_of(permission))
            .map(|bucket| bucket.count)
            .sum()
    };
    let mut used = serde_json::Map::new();
    for permission in Permission::ALL {
        used.insert(permission.as_str().to_owned(), calls(permission).into());
    }
    let suggested = Permissions::of(
        Permission::ALL
            .into_iter()
            .filter(|permission| calls(*permission) > 0),
    );
    let unused = Permissions::of(
        record
            .permissions
            .iter()
            .filter(|permission| !suggested.allows(*permission)),
    );
    Ok(serde_json::json!({
        "keyId": record.id,
        "from": period.from,
        "to": period.to,
        "held": record.permissions,
        "used": used,
        "suggested": suggested,
        "unused": unused,
    }))
}
