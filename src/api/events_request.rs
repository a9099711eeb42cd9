//! `GET /events`' query parameters (`after`, `limit`, `types`) and the `Link: <...>;
//! rel="next"` every answer carries: a feed has no last page, so the link is where the
//! partner resumes, after the last event the read went through (of a type asked for or not),
//! or the `after` given when the feed holds nothing after it.

use bytes::BytesMut;
use http::HeaderValue;

use crate::model::MAX_ORDERS;
use crate::store::{BadEventId, EventId, EventQuery, OrderChange, OrderChanges};

/// The longest `after` read: an event id is 26 characters.
const MAX_AFTER_CHARS: usize = 64;

/// What the query string of `GET /events` asks for, before the organization is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EventsRequest {
    /// `after` as given, decoded once the organization is known.
    after: Option<Box<str>>,
    /// `limit` as given, if it was.
    limit: Option<usize>,
    /// `types` as given, if it was.
    types: Option<OrderChanges>,
}

/// Why a query string of `GET /events` was refused: the message of its 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadEventsRequest {
    /// `limit` is not a whole number from 1 to 100.
    Limit,
    /// `types` is not a comma-separated list of event types.
    Types,
    /// `after` is not an event id of this API.
    MalformedAfter,
    /// `after` is another organization's event id.
    ForeignAfter,
    /// `after` names no event of the organization's feed.
    UnknownAfter,
    /// A parameter is given twice.
    Repeated(EventsParameter),
}

/// A query parameter of `GET /events`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EventsParameter {
    After,
    Limit,
    Types,
}

impl EventsRequest {
    /// The request of `query` (a URI's query string): `after`, `limit` and `types` count;
    /// other parameters are ignored, as on `/orders`.
    pub(crate) fn parse(query: Option<&str>) -> Result<Self, BadEventsRequest> {
        let mut request = Self {
            after: None,
            limit: None,
            types: None,
        };
        let Some(query) = query else {
            return Ok(request);
        };
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            match &*name {
                "after" => {
                    if request.after.is_some() {
                        return Err(BadEventsRequest::Repeated(EventsParameter::After));
                    }
                    if value.is_empty() || value.len() > MAX_AFTER_CHARS {
                        return Err(BadEventsRequest::MalformedAfter);
                    }
                    request.after = Some(value.into());
                }
                "limit" => {
                    if request.limit.is_some() {
                        return Err(BadEventsRequest::Repeated(EventsParameter::Limit));
                    }
                    request.limit = Some(parse_limit(&value)?);
                }
                "types" => {
                    if request.types.is_some() {
                        return Err(BadEventsRequest::Repeated(EventsParameter::Types));
                    }
                    request.types = Some(parse_types(&value)?);
                }
                _ => {}
            }
        }
        Ok(request)
    }

    /// The store query for the organization `organization_id`, or the 400 of an `after` that
    /// is not one of its event ids.
    pub(crate) fn query_for(&self, organization_id: &str) -> Result<EventQuery, BadEventsRequest> {
        let limit = self.limit.unwrap_or(MAX_ORDERS);
        let query = match &self.after {
            None => EventQuery::oldest(limit),
            Some(after) => match EventId::parse(after, organization_id) {
                Ok(number) => EventQuery::after(number, limit),
                Err(BadEventId::Foreign) => return Err(BadEventsRequest::ForeignAfter),
                Err(_) => return Err(BadEventsRequest::MalformedAfter),
            },
        };
        Ok(query.with_types(self.types.unwrap_or_default()))
    }

    /// The `Link` of an answer: the request's `path` with `after` the event `last` (the last
    /// returned, else the `after` given, else none), and the `limit` and `types` it was given.
    pub(crate) fn next_link(
        &self,
        path: &str,
        organization_id: &str,
        last: Option<u64>,
    ) -> Option<HeaderValue> {
        let after = match last {
            Some(number) => Some(EventId::new(organization_id, number).to_string()),
            None => self.after.as_deref().map(str::to_owned),
        };
        let mut link = BytesMut::with_capacity(path.len() + 96);
        link.extend_from_slice(b"<");
        link.extend_from_slice(path.as_bytes());
        let mut separator = b'?';
        let mut parameter = |link: &mut BytesMut, name: &str, value: &str| {
            link.extend_from_slice(&[separator]);
            link.extend_from_slice(name.as_bytes());
            link.extend_from_slice(b"=");
            link.extend_from_slice(value.as_bytes());
            separator = b'&';
        };
        if let Some(after) = &after {
            // An id of this feed (checked before the store was asked): base64url, no escaping.
            parameter(&mut link, "after", after);
        }
        if let Some(limit) = self.limit {
            parameter(&mut link, "limit", &limit.to_string());
        }
        if let Some(types) = self.types {
            parameter(
                &mut link,
                "types",
                &types.names().collect::<Vec<_>>().join(","),
            );
        }
        link.extend_from_slice(b">; rel=\"next\"");
        HeaderValue::from_maybe_shared(link.freeze()).ok()
    }
}

/// A `limit` value: digits only, from 1 to 100.
fn parse_limit(value: &str) -> Result<usize, BadEventsRequest> {
    if value.is_empty() || value.len() > 3 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BadEventsRequest::Limit);
    }
    match value.parse() {
        Ok(limit) if (1..=MAX_ORDERS).contains(&limit) => Ok(limit),
        _ => Err(BadEventsRequest::Limit),
    }
}

/// A `types` value: one or more event type names, comma-separated; one given twice counts
/// once.
fn parse_types(value: &str) -> Result<OrderChanges, BadEventsRequest> {
    value
        .split(',')
        .try_fold(OrderChanges::NONE, |types, name| {
            OrderChange::from_name(name)
                .map(|change| types.with(change))
                .ok_or(BadEventsRequest::Types)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_query_is_the_oldest_100_of_every_type() {
        for query in [None, Some(""), Some("foo=bar")] {
            let request = EventsRequest::parse(query).unwrap();
            assert_eq!(request.query_for("org").unwrap(), EventQuery::oldest(100));
            assert_eq!(
                request.next_link("/v1/events", "org", None).unwrap(),
                "</v1/events>; rel=\"next\""
            );
        }
    }

    #[test]
    fn the_link_resumes_after_the_last_event_with_the_same_limit_and_types() {
        let request =
            EventsRequest::parse(Some("limit=5&types=order.deleted,order.created")).unwrap();
        let link = request.next_link("/v1/events", "org_a", Some(9)).unwrap();
        let after = EventId::new("org_a", 9).to_string();
        assert_eq!(
            link,
            format!("</v1/events?after={after}&limit=5&types=order.created,order.deleted>; rel=\"next\"").as_str()
        );
        let next = EventsRequest::parse(Some(&format!(
            "after={after}&limit=5&types=order.created,order.deleted"
        )))
        .unwrap();
        let types = OrderChanges::NONE
            .with(OrderChange::Created)
            .with(OrderChange::Deleted);
        assert_eq!(
            next.query_for("org_a").unwrap(),
            EventQuery::after(9, 5).with_types(types)
        );
        assert_eq!(next.query_for("org_b"), Err(BadEventsRequest::ForeignAfter));
        // Nothing new: the link keeps the `after` given.
        assert_eq!(next.next_link("/v1/events", "org_a", None).unwrap(), link);
    }

    #[test]
    fn bad_values_are_refused() {
        for (query, bad) in [
            ("limit=0", BadEventsRequest::Limit),
            ("limit=101", BadEventsRequest::Limit),
            ("limit=1e2", BadEventsRequest::Limit),
            ("limit=", BadEventsRequest::Limit),
            ("types=", BadEventsRequest::Types),
            ("types=order.created,", BadEventsRequest::Types),
            ("types=webhook.test", BadEventsRequest::Types),
            ("types=ORDER.CREATED", BadEventsRequest::Types),
            ("after=", BadEventsRequest::MalformedAfter),
            (
                "limit=1&limit=2",
                BadEventsRequest::Repeated(EventsParameter::Limit),
            ),
            (
                "types=order.created&types=order.created",
                BadEventsRequest::Repeated(EventsParameter::Types),
            ),
            (
                "after=evt_x&after=evt_x",
                BadEventsRequest::Repeated(EventsParameter::After),
            ),
        ] {
            assert_eq!(EventsRequest::parse(Some(query)), Err(bad), "{query}");
        }
        let made_up = EventsRequest::parse(Some("after=evt_AAAAAAAAAAAAAAAAAAAAAA")).unwrap();
        assert_eq!(
            made_up.query_for("org"),
            Err(BadEventsRequest::MalformedAfter)
        );
    }
}
