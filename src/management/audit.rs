//! The security log route of the management service: `GET /audit`, the organization's audit
//! entries newest first, in pages as `/v1/orders` has them (`limit`, `page_token`), filtered
//! by `action` and `target`.

use http::{Response, StatusCode};

use super::bodies::{json, Failure};
use crate::api::body::ApiBody;
use crate::model::Timestamp;
use crate::store::{AuditAction, AuditLog, AuditPosition, AuditQuery, MAX_AUDIT_PAGE};

/// How many entries a page has when the query names no `limit`.
pub const DEFAULT_AUDIT_PAGE: usize = 50;

fn bad(message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, message)
}

/// The token of the page after the entry at `at` with id `id`: opaque to clients.
fn page_token(at: Timestamp, id: &str) -> String {
    format!("{}.{id}", at.as_datetime().timestamp_millis())
}

fn position(token: &str) -> Option<AuditPosition> {
    let (millis, id) = token.split_once('.')?;
    if id.is_empty() || id.len() > 40 || !id.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    Some(AuditPosition {
        at: Timestamp::from_unix_millis(millis.parse().ok()?)?,
        id: id.to_owned(),
    })
}

fn parse(query: Option<&str>) -> Result<AuditQuery, Failure> {
    let mut parsed = AuditQuery {
        limit: DEFAULT_AUDIT_PAGE,
        ..AuditQuery::default()
    };
    let mut seen = Vec::new();
    for (name, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        if seen.contains(&name) {
            return Err(bad(format!("{name} is given twice")));
        }
        match &*name {
            "limit" => {
                parsed.limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|limit| (1..=MAX_AUDIT_PAGE).contains(limit))
                    .ok_or_else(|| bad("limit is a whole number from 1 to 100"))?;
            }
            "page_token" => {
                parsed.after =
                    Some(position(&value).ok_or_else(|| bad("page_token is not one we gave"))?);
            }
            "action" => {
                parsed.action = Some(
                    value
                        .parse::<AuditAction>()
                        .map_err(|_| bad("action is not an action's name, such as key.revoked"))?,
                );
            }
            "target" => {
                if value.is_empty() || value.len() > 200 || value.chars().any(char::is_control) {
                    return Err(bad("target is a key's or an endpoint's id"));
                }
                parsed.target = Some(value.clone().into_owned());
            }
            _ => return Err(bad(format!("unknown query parameter {name:?}"))),
        }
        seen.push(name);
    }
    Ok(parsed)
}

/// `GET /audit`.
pub(super) async fn entries(
    log: &dyn AuditLog,
    organization_id: &str,
    query: Option<&str>,
) -> Result<Response<ApiBody>, Failure> {
    let query = parse(query)?;
    let page = log
        .audit_entries(organization_id, &query)
        .await
        .map_err(Failure::from_store)?;
    let next = page
        .more
        .then(|| page.entries.last())
        .flatten()
        .map(|last| page_token(last.at, &last.id));
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "data": { "entries": page.entries, "nextPageToken": next } }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_query_and_refuses_what_is_not_one() {
        let query = parse(Some("limit=2&action=key.revoked&target=17"))
            .ok()
            .unwrap();
        assert_eq!(query.limit, 2);
        assert_eq!(query.action, Some(AuditAction::KeyRevoked));
        assert_eq!(query.target.as_deref(), Some("17"));
        let at = Timestamp::from_unix_millis(1_767_225_600_123).unwrap();
        let token = page_token(at, "42");
        let next = parse(Some(&format!("page_token={token}"))).ok().unwrap();
        assert_eq!(
            next.after,
            Some(AuditPosition {
                at,
                id: "42".into()
            })
        );
        for bad in [
            "limit=0",
            "limit=101",
            "limit=x",
            "page_token=nonsense",
            "page_token=1.",
            "action=Key%20Revoked",
            "target=",
            "target=1%002",
            // Positions no database holds (the reproduction of #43: "timestamp out of range").
            "page_token=-300000000000000.1",
            "page_token=253402300800000.1",
            "page_token=9223372036854775807.1",
            "sort=asc",
            "limit=1&limit=2",
        ] {
            assert!(parse(Some(bad)).is_err(), "{bad}");
        }
    }
}
