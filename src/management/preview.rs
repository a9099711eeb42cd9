//! `GET /keys/{id}/api-version/preview?version=DATE`: what a key would read at another API
//! version, from the organization's own data. The first page of its orders (at most
//! [`PREVIEW_ORDERS`]) and the oldest events its feed keeps (at most [`PREVIEW_EVENTS`]; the
//! feed is read forwards only, and an event's order has the shape of an order in `/orders`),
//! each at the key's version and at the asked one, with what differs field by field.

use http::{Response, StatusCode};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use super::bodies::{json, offered_version, Failure};
use crate::api::body::ApiBody;
use crate::store::{EventFeed, EventId, EventQuery, EventsPage, KeyManager, OrderChange};
use crate::store::{OrderQuery, OrderStore};
use crate::versions::{ApiVersion, Fields, Resource, Versions, FIRST};

/// The most orders a preview shows.
pub(super) const PREVIEW_ORDERS: usize = 10;
/// The most events a preview shows.
pub(super) const PREVIEW_EVENTS: usize = 10;

/// One field that differs between the two renderings of a resource.
#[derive(Serialize)]
struct Difference {
    field: String,
    /// `added`, `removed` or `changed`, from the key's version to the asked one.
    change: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    from: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<Value>,
}

/// An order, or an event's order, at both versions.
#[derive(Serialize)]
struct Rendered {
    id: String,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    kind: Option<&'static str>,
    from: Box<RawValue>,
    to: Box<RawValue>,
    differences: Vec<Difference>,
}

/// The preview of key `key_id` of `organization` at the version `query` names.
pub(super) async fn preview(
    keys: &dyn KeyManager,
    orders: &dyn OrderStore,
    events: &dyn EventFeed,
    versions: &Versions,
    organization: &str,
    key_id: &str,
    query: Option<&str>,
) -> Result<Response<ApiBody>, Failure> {
    let asked = form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .find_map(|(name, value)| (name == "version").then_some(value))
        .ok_or_else(|| {
            Failure::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "the query parameter version (YYYY-MM-DD) is required",
            )
        })?;
    let to = offered_version(versions, &asked)?;
    let record = keys
        .get(organization, key_id)
        .await
        .map_err(Failure::from_store)?;
    let from = record.api_version.unwrap_or(FIRST);
    let page = orders
        .orders(organization, &OrderQuery::newest(PREVIEW_ORDERS))
        .await
        .map_err(Failure::from_store)?;
    let mut rendered_orders = Vec::new();
    for order in page.orders().iter().take(PREVIEW_ORDERS) {
        rendered_orders.push(both(
            versions,
            order.order().id.clone(),
            None,
            order.json(),
            from,
            to,
        )?);
    }
    let mut rendered_events = Vec::new();
    if let EventsPage::Events { events: feed, .. } = events
        .events(organization, &EventQuery::oldest(PREVIEW_EVENTS))
        .await
        .map_err(Failure::from_store)?
    {
        for event in feed
            .iter()
            .filter(|event| event.change != OrderChange::Deleted)
        {
            let id = EventId::new(organization, event.id).to_string();
            let kind = Some(event.change.as_str());
            rendered_events.push(both(versions, id, kind, &event.data, from, to)?);
        }
    }
    let changes: Vec<&str> = if from == to {
        Vec::new()
    } else {
        let (older, newer) = if from < to { (from, to) } else { (to, from) };
        versions
            .offered()
            .filter(|version| *version > older && *version <= newer)
            .flat_map(|version| versions.changes_of(version))
            .map(|change| change.description())
            .collect()
    };
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "data": {
            "keyId": record.id,
            "from": from,
            "to": to,
            "changes": changes,
            "orders": rendered_orders,
            "events": rendered_events,
        }}),
    ))
}

/// `newest` (an order in the newest shape) at `from` and at `to`, and what differs.
fn both(
    versions: &Versions,
    id: String,
    kind: Option<&'static str>,
    newest: &[u8],
    from: ApiVersion,
    to: ApiVersion,
) -> Result<Rendered, Failure> {
    let at = |version| -> Result<(Box<RawValue>, Fields), Failure> {
        let bytes = versions
            .render(Resource::Order, newest, version)
            .map_err(|_| unbuildable())?
            .unwrap_or_else(|| newest.to_vec());
        let fields = Fields::from_json(&bytes).map_err(|_| unbuildable())?;
        let raw = String::from_utf8(bytes).map_err(|_| unbuildable())?;
        let raw = RawValue::from_string(raw).map_err(|_| unbuildable())?;
        Ok((raw, fields))
    };
    let (from_json, from_fields) = at(from)?;
    let (to_json, to_fields) = at(to)?;
    Ok(Rendered {
        id,
        kind,
        from: from_json,
        to: to_json,
        differences: differences(&from_fields, &to_fields),
    })
}

fn unbuildable() -> Failure {
    Failure::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the preview could not be built from a stored order",
    )
}

/// The fields that differ between `from` and `to`, in `to`'s order, then those only `from`
/// has.
fn differences(from: &Fields, to: &Fields) -> Vec<Difference> {
    let mut found = Vec::new();
    for name in to.names() {
        match (from.get(name), to.get(name)) {
            (None, Some(value)) => found.push(Difference {
                field: name.to_owned(),
                change: "added",
                from: None,
                to: Some(value.clone()),
            }),
            (Some(old), Some(new)) if old != new => found.push(Difference {
                field: name.to_owned(),
                change: "changed",
                from: Some(old.clone()),
                to: Some(new.clone()),
            }),
            _ => {}
        }
    }
    for name in from.names().filter(|name| to.get(name).is_none()) {
        found.push(Difference {
            field: name.to_owned(),
            change: "removed",
            from: from.get(name).cloned(),
            to: None,
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn differences_name_each_field_added_changed_or_removed() {
        let from = Fields::from_json(br#"{"id":"o","a":1,"gone":true}"#).unwrap();
        let to = Fields::from_json(br#"{"id":"o","a":{"n":1},"new":"x"}"#).unwrap();
        let found: Vec<(String, &str)> = differences(&from, &to)
            .into_iter()
            .map(|difference| (difference.field, difference.change))
            .collect();
        assert_eq!(
            found,
            [
                ("a".to_owned(), "changed"),
                ("new".to_owned(), "added"),
                ("gone".to_owned(), "removed")
            ]
        );
        assert!(differences(&to, &to).is_empty());
    }
}
