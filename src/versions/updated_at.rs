//! The change of [`UPDATED_AT`](super::UPDATED_AT): when an order last changed.

use super::{Fields, Resource, VersionChange};

/// Orders gained `updatedAt` (the time of their last change; an order never changed since
/// its creation has its `createdAt`), and `GET /orders` the filters `updated_since`
/// (inclusive) and `updated_before` (exclusive).
///
/// Before it, an order had no `updatedAt`, and the two parameters were unknown ones, which
/// `GET /orders` ignores.
#[derive(Clone, Copy, Debug, Default)]
pub struct OrderUpdatedAt;

/// The filters the change added.
const ADDED_PARAMETERS: [&str; 2] = ["updated_since", "updated_before"];

impl VersionChange for OrderUpdatedAt {
    fn description(&self) -> &'static str {
        "Orders have `updatedAt`, the time of their last change (an order never changed has its \
         `createdAt`), in `GET /orders`, in events' `data` and in webhooks; `GET /orders` takes \
         the filters `updated_since` (inclusive) and `updated_before` (exclusive)."
    }

    fn routes(&self) -> &'static [&'static str] {
        &["/orders", "/events"]
    }

    fn resources(&self) -> &'static [Resource] {
        &[Resource::Order]
    }

    fn order(&self, order: &mut Fields) {
        order.remove("updatedAt");
    }

    fn query(&self, route: &str, parameters: &mut Vec<String>) {
        if route == "/orders" {
            parameters.retain(|pair| {
                let name = pair.split_once('=').map_or(pair.as_str(), |(name, _)| name);
                !ADDED_PARAMETERS.contains(&name)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::versions::{Versions, FIRST, UPDATED_AT};

    #[test]
    fn the_first_version_reads_neither_the_field_nor_the_filters() {
        let versions = Versions::shipped();
        let newest = br#"{"id":"o1","createdAt":"2026-01-01T00:00:00.000Z","updatedAt":"2026-01-02T00:00:00.000Z"}"#;
        let older = versions
            .render(Resource::Order, newest, FIRST)
            .unwrap()
            .unwrap();
        assert_eq!(
            older,
            br#"{"id":"o1","createdAt":"2026-01-01T00:00:00.000Z"}"#
        );
        assert_eq!(
            versions
                .render(Resource::Order, newest, UPDATED_AT)
                .unwrap(),
            None
        );
        assert_eq!(
            versions.query_at(
                "/orders",
                "limit=2&updated_since=x&status=a&updated_before",
                FIRST
            ),
            Some("limit=2&status=a".to_owned())
        );
        assert_eq!(versions.query_at("/orders", "limit=2", FIRST), None);
        assert_eq!(versions.query_at("/orders", "", FIRST), None);
        assert_eq!(
            versions.query_at("/orders", "updated_since=x", FIRST),
            Some(String::new())
        );
        assert_eq!(
            versions.query_at("/orders", "updated_since=x", UPDATED_AT),
            None
        );
        assert_eq!(versions.query_at("/me", "updated_since=x", FIRST), None);
    }
}
