//! The usage routes of the management service: `GET /keys/{id}/usage` (one key's buckets by
//! hour or day) and `GET /usage` (every key's totals per outcome), over a [`UsageStore`].

use std::collections::BTreeMap;
use std::time::Duration;

use http::{Response, StatusCode};

use super::bodies::{json, Failure};
use crate::api::body::ApiBody;
use crate::model::Timestamp;
use crate::store::{UsageGranularity, UsagePeriod, UsageStore};

/// The period a usage read covers when the query names none: the last 30 days.
pub const DEFAULT_USAGE_PERIOD: Duration = Duration::from_secs(30 * 24 * 3600);
/// The longest period one usage read may cover: 400 days.
pub const MAX_USAGE_PERIOD: Duration = Duration::from_secs(400 * 24 * 3600);

/// A usage query: `from`, `to` (RFC 3339) and, for one key, `granularity`.
struct UsageQuery {
    period: UsagePeriod,
    granularity: UsageGranularity,
}

fn bad(message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, message)
}

fn parse(query: Option<&str>, with_granularity: bool) -> Result<UsageQuery, Failure> {
    let (mut from, mut to, mut granularity) = (None, None, None);
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        let slot = match &*name {
            "from" => &mut from,
            "to" => &mut to,
            "granularity" if with_granularity => &mut granularity,
            _ => return Err(bad(format!("unknown query parameter {name:?}"))),
        };
        if slot.replace(value.into_owned()).is_some() {
            return Err(bad(format!("{name} is given twice")));
        }
    }
    let instant = |name: &str, text: Option<String>| -> Result<Option<Timestamp>, Failure> {
        text.map(|text| {
            text.parse::<Timestamp>().map_err(|_| {
                bad(format!(
                    "{name} is not an RFC 3339 date-time (a `+` of an offset is sent as %2B)"
                ))
            })
        })
        .transpose()
    };
    let to = instant("to", to)?.unwrap_or_else(Timestamp::now);
    let from = match instant("from", from)? {
        Some(from) => from,
        None => Timestamp::from_unix_millis(
            to.as_datetime().timestamp_millis() - DEFAULT_USAGE_PERIOD.as_millis() as i64,
        )
        .ok_or_else(|| bad("to is too early"))?,
    };
    let span = to
        .duration_since(from)
        .filter(|span| !span.is_zero())
        .ok_or_else(|| bad("from must be before to"))?;
    if span > MAX_USAGE_PERIOD {
        return Err(bad("a usage period is at most 400 days"));
    }
    let granularity = match granularity.as_deref() {
        None | Some("day") => UsageGranularity::Day,
        Some("hour") => UsageGranularity::Hour,
        Some(_) => return Err(bad("granularity is hour or day")),
    };
    Ok(UsageQuery {
        period: UsagePeriod { from, to },
        granularity,
    })
}

/// `GET /keys/{id}/usage`.
pub(super) async fn key_usage(
    store: &dyn UsageStore,
    organization_id: &str,
    key_id: &str,
    query: Option<&str>,
) -> Result<Response<ApiBody>, Failure> {
    let UsageQuery {
        period,
        granularity,
    } = parse(query, true)?;
    let buckets = store
        .key_usage(organization_id, key_id, period, granularity)
        .await
        .map_err(Failure::from_store)?;
    let total: u64 = buckets.iter().map(|bucket| bucket.count).sum();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "data": {
            "keyId": key_id,
            "from": period.from,
            "to": period.to,
            "granularity": granularity.as_str(),
            "total": total,
            "buckets": buckets,
        } }),
    ))
}

/// `GET /usage`.
pub(super) async fn usage_totals(
    store: &dyn UsageStore,
    organization_id: &str,
    query: Option<&str>,
) -> Result<Response<ApiBody>, Failure> {
    let UsageQuery { period, .. } = parse(query, false)?;
    let totals = store
        .usage_totals(organization_id, period)
        .await
        .map_err(Failure::from_store)?;
    let mut keys: BTreeMap<String, (u64, serde_json::Map<String, serde_json::Value>)> =
        BTreeMap::new();
    for total in totals {
        let (sum, outcomes) = keys.entry(total.key_id).or_default();
        *sum += total.count;
        outcomes.insert(total.outcome.as_str().to_owned(), total.count.into());
    }
    let keys: Vec<serde_json::Value> = keys
        .into_iter()
        .map(|(key_id, (total, outcomes))| {
            serde_json::json!({ "keyId": key_id, "total": total, "outcomes": outcomes })
        })
        .collect();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "data": { "from": period.from, "to": period.to, "keys": keys } }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_period_and_refuses_what_is_not_one() {
        let query = parse(
            Some("from=2026-11-01T00:00:00Z&to=2026-11-02T00:00:00%2B00:00&granularity=hour"),
            true,
        )
        .ok()
        .unwrap();
        assert_eq!(query.granularity, UsageGranularity::Hour);
        assert_eq!(
            query.period.to.duration_since(query.period.from),
            Some(Duration::from_secs(86_400))
        );
        let defaults = parse(None, true).ok().unwrap();
        assert_eq!(
            defaults.period.to.duration_since(defaults.period.from),
            Some(DEFAULT_USAGE_PERIOD)
        );
        for bad in [
            "from=yesterday",
            "from=2026-11-02T00:00:00Z&to=2026-11-01T00:00:00Z",
            "from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            "granularity=week",
            "limit=5",
            "to=2026-11-01T00:00:00Z&to=2026-11-01T00:00:00Z",
        ] {
            assert!(parse(Some(bad), true).is_err(), "{bad}");
        }
        assert!(parse(Some("granularity=day"), false).is_err());
    }
}
