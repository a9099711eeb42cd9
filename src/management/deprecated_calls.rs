//! `GET /deprecated-calls` of the management service: for each deprecation, the keys of the
//! organization that called it in the last 30 days, how often and when last, over a
//! [`DeprecatedCallStore`].

use std::collections::BTreeMap;

use http::{Response, StatusCode};

use super::bodies::{json, Failure};
use crate::api::body::ApiBody;
use crate::deprecation::Deprecation;
use crate::store::deprecated_calls::period_start;
use crate::store::{DeprecatedCallStore, DeprecatedCallTotal};

/// `GET /deprecated-calls`: the `declared` deprecations in their order (with no key when none
/// called them), then any other target the store counted calls of (a deprecation since
/// withdrawn, or declared on another replica only), by target.
pub(super) async fn deprecated_calls(
    store: &dyn DeprecatedCallStore,
    declared: &[Deprecation],
    organization_id: &str,
) -> Result<Response<ApiBody>, Failure> {
    let (since, totals) = last_30_days(store, organization_id).await?;
    let mut by_target: BTreeMap<String, Vec<DeprecatedCallTotal>> = BTreeMap::new();
    for total in totals {
        by_target
            .entry(total.target.clone())
            .or_default()
            .push(total);
    }
    let keys = |calls: Vec<DeprecatedCallTotal>| -> Vec<serde_json::Value> {
        calls
            .into_iter()
            .map(|total| {
                serde_json::json!({
                    "keyId": total.key_id,
                    "calls": total.calls,
                    "lastCallAt": total.last_call_at,
                })
            })
            .collect()
    };
    let mut listed: Vec<serde_json::Value> = Vec::new();
    for deprecation in declared {
        let target = deprecation.target();
        let calls = by_target.remove(&target).unwrap_or_default();
        let mut entry = serde_json::to_value(deprecation).unwrap_or_default();
        entry["declared"] = true.into();
        entry["keys"] = keys(calls).into();
        listed.push(entry);
    }
    // A version's calls not deprecated are calls per version (`GET /api-versions/calls`).
    for (target, calls) in by_target
        .into_iter()
        .filter(|(target, _)| target.starts_with('/'))
    {
        let (route, parameter) = match target.split_once('?') {
            Some((route, parameter)) => (route.to_owned(), Some(parameter.to_owned())),
            None => (target.clone(), None),
        };
        listed.push(serde_json::json!({
            "target": target,
            "route": route,
            "parameter": parameter,
            "deprecatedOn": null,
            "sunsetOn": null,
            "link": null,
            "enforced": false,
            "declared": false,
            "keys": keys(calls),
        }));
    }
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "data": { "since": since, "deprecations": listed } }),
    ))
}

/// `GET /api-versions/calls`: each key of the organization that called the API in the last 30
/// days, with its calls per version (counted with `PartnerApi::with_calls_per_version`, or
/// for a deprecated version), the newest version first; the keys by id.
pub(super) async fn version_calls(
    store: &dyn DeprecatedCallStore,
    versions: &crate::versions::Versions,
    organization_id: &str,
) -> Result<Response<ApiBody>, Failure> {
    let (since, totals) = last_30_days(store, organization_id).await?;
    let mut by_key: BTreeMap<String, Vec<(crate::versions::ApiVersion, DeprecatedCallTotal)>> =
        BTreeMap::new();
    for total in totals {
        let Ok(version) = total.target.parse::<crate::versions::ApiVersion>() else {
            continue;
        };
        if versions.offers(version) {
            by_key
                .entry(total.key_id.clone())
                .or_default()
                .push((version, total));
        }
    }
    let keys: Vec<serde_json::Value> = by_key
        .into_iter()
        .map(|(key_id, mut calls)| {
            calls.sort_by_key(|(version, _)| std::cmp::Reverse(*version));
            let versions: Vec<serde_json::Value> = calls
                .into_iter()
                .map(|(version, total)| {
                    serde_json::json!({
                        "version": version,
                        "calls": total.calls,
                        "lastCallAt": total.last_call_at,
                    })
                })
                .collect();
            serde_json::json!({ "keyId": key_id, "versions": versions })
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "data": { "since": since, "keys": keys } }),
    ))
}

/// The organization's counted calls of the period both listings show, and its start.
async fn last_30_days(
    store: &dyn DeprecatedCallStore,
    organization_id: &str,
) -> Result<(crate::model::Timestamp, Vec<DeprecatedCallTotal>), Failure> {
    let since = period_start();
    let totals = store
        .deprecated_calls(organization_id, None, since)
        .await
        .map_err(Failure::from_store)?;
    Ok((since, totals))
}
