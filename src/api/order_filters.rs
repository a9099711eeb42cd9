//! The filters of `GET /orders`: `status` and `provider` (comma-separated values, any of
//! which an order must match), `created_since` and `updated_since` (inclusive),
//! `created_before` and `updated_before` (exclusive), RFC 3339 date-times (the `updated_`
//! pair from API version [`UPDATED_AT`](crate::versions::UPDATED_AT)). Combined with AND. Parsed here from the query string, bound into the
//! page tokens of filtered pages (a token of other filters is refused), and kept in the next
//! page's link.
//!
//! Bounds: at most [`MAX_VALUES`] values a parameter, each from 1 to [`MAX_VALUE_BYTES`]
//! bytes without control characters. A date-time finer than a millisecond is rounded up to
//! the next one, which keeps both bounds exact: an order's `createdAt` has milliseconds. So a
//! range that holds no millisecond (both bounds within the same one) is refused as empty.

use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use crate::model::Timestamp;
use crate::store::OrderFilter;

/// The most values one of `status` and `provider` takes.
pub(crate) const MAX_VALUES: usize = 20;
/// The longest value of `status` or `provider`, in bytes.
pub(crate) const MAX_VALUE_BYTES: usize = 200;

/// Which filter parameter a refusal names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FilterParameter {
    Status,
    Provider,
    CreatedSince,
    CreatedBefore,
    UpdatedSince,
    UpdatedBefore,
}

/// The filters a query string gave, as they are gathered.
#[derive(Default)]
pub(crate) struct FilterParameters {
    statuses: Option<Vec<String>>,
    providers: Option<Vec<String>>,
    since: Option<Timestamp>,
    before: Option<Timestamp>,
    updated_since: Option<Timestamp>,
    updated_before: Option<Timestamp>,
}

/// Why a filter parameter was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadFilter {
    /// The parameter's value is not one this API takes.
    Invalid(FilterParameter),
    /// The parameter is given twice.
    Repeated(FilterParameter),
    /// `created_since` is not before `created_before`.
    EmptyRange,
    /// `updated_since` is not before `updated_before`.
    EmptyUpdatedRange,
}

impl FilterParameters {
    /// Takes the parameter `name` with `value` if it is a filter's: `Ok(false)` for another
    /// parameter.
    pub(crate) fn take(&mut self, name: &str, value: &str) -> Result<bool, BadFilter> {
        match name {
            "status" => {
                let parameter = FilterParameter::Status;
                set(&mut self.statuses, values(value, parameter)?, parameter)
            }
            "provider" => {
                let parameter = FilterParameter::Provider;
                set(&mut self.providers, values(value, parameter)?, parameter)
            }
            "created_since" => {
                let parameter = FilterParameter::CreatedSince;
                set(&mut self.since, date_time(value, parameter)?, parameter)
            }
            "created_before" => {
                let parameter = FilterParameter::CreatedBefore;
                set(&mut self.before, date_time(value, parameter)?, parameter)
            }
            "updated_since" => {
                let parameter = FilterParameter::UpdatedSince;
                set(
                    &mut self.updated_since,
                    date_time(value, parameter)?,
                    parameter,
                )
            }
            "updated_before" => {
                let parameter = FilterParameter::UpdatedBefore;
                set(
                    &mut self.updated_before,
                    date_time(value, parameter)?,
                    parameter,
                )
            }
            _ => return Ok(false),
        }?;
        Ok(true)
    }

    /// The filter, once every parameter is read.
    pub(crate) fn finish(self) -> Result<OrderFilter, BadFilter> {
        if let (Some(since), Some(before)) = (self.since, self.before) {
            if since >= before {
                return Err(BadFilter::EmptyRange);
            }
        }
        if let (Some(since), Some(before)) = (self.updated_since, self.updated_before) {
            if since >= before {
                return Err(BadFilter::EmptyUpdatedRange);
            }
        }
        let mut filter = OrderFilter::default()
            .with_statuses(self.statuses.unwrap_or_default())
            .with_providers(self.providers.unwrap_or_default());
        if let Some(since) = self.since {
            filter = filter.with_created_since(since);
        }
        if let Some(before) = self.before {
            filter = filter.with_created_before(before);
        }
        if let Some(since) = self.updated_since {
            filter = filter.with_updated_since(since);
        }
        if let Some(before) = self.updated_before {
            filter = filter.with_updated_before(before);
        }
        Ok(filter)
    }
}

/// Sets `slot` to `value`, unless the parameter was given already.
fn set<T>(slot: &mut Option<T>, value: T, parameter: FilterParameter) -> Result<(), BadFilter> {
    if slot.is_some() {
        return Err(BadFilter::Repeated(parameter));
    }
    *slot = Some(value);
    Ok(())
}

/// The comma-separated values of `text`: each present, bounded, without control
/// characters; repeats kept once.
fn values(text: &str, parameter: FilterParameter) -> Result<Vec<String>, BadFilter> {
    let mut values: Vec<String> = Vec::new();
    for value in text.split(',') {
        let fits =
            (1..=MAX_VALUE_BYTES).contains(&value.len()) && !value.chars().any(char::is_control);
        if !fits {
            return Err(BadFilter::Invalid(parameter));
        }
        if values.iter().any(|held| held == value) {
            continue;
        }
        // Refused at the first value past the bound: the work stays linear in the text.
        if values.len() == MAX_VALUES {
            return Err(BadFilter::Invalid(parameter));
        }
        values.push(value.to_owned());
    }
    Ok(values)
}

/// An RFC 3339 date-time (`Z` or an offset), in the years 0000 to 9999, rounded up to the
/// millisecond.
fn date_time(text: &str, parameter: FilterParameter) -> Result<Timestamp, BadFilter> {
    // RFC 3339's date-time separates date and time with `T` (section 5.6); the space its note
    // allows is not one, as JSON Schema's `date-time` says.
    if !matches!(text.as_bytes().get(10), Some(b'T' | b't')) {
        return Err(BadFilter::Invalid(parameter));
    }
    let instant = DateTime::parse_from_rfc3339(text)
        .map_err(|_| BadFilter::Invalid(parameter))?
        .with_timezone(&Utc);
    let millis = instant.timestamp_millis();
    let finer = instant.timestamp_subsec_nanos() % 1_000_000 != 0;
    millis
        .checked_add(i64::from(finer))
        .and_then(Timestamp::from_unix_millis)
        .ok_or(BadFilter::Invalid(parameter))
}

/// The 8 bytes that bind a page token to `filter`: the same for the same filter, whatever the
/// order of its values.
pub(crate) fn filter_tag(filter: &OrderFilter) -> [u8; 8] {
    let mut hasher = Sha256::new();
    hasher.update(b"partner-api order filter\0");
    for values in [filter.statuses(), filter.providers()] {
        let mut sorted: Vec<&str> = values.iter().map(String::as_str).collect();
        sorted.sort_unstable();
        for value in sorted {
            hasher.update(value.as_bytes());
            hasher.update([0]);
        }
        hasher.update([1]);
    }
    for bound in [filter.created_since(), filter.created_before()] {
        match bound {
            Some(at) => hasher.update(at.as_datetime().timestamp_millis().to_be_bytes()),
            None => hasher.update([2]),
        }
    }
    // Hashed only when given, so the tokens of filters without them stay what they were.
    for (mark, bound) in [(3, filter.updated_since()), (4, filter.updated_before())] {
        if let Some(at) = bound {
            hasher.update([mark]);
            hasher.update(at.as_datetime().timestamp_millis().to_be_bytes());
        }
    }
    let mut tag = [0; 8];
    tag.copy_from_slice(&hasher.finalize()[..8]);
    tag
}

/// Appends `filter`'s parameters to a link's query (`&status=...`), as the next page must
/// carry them: values percent-encoded, date-times in UTC with milliseconds.
pub(crate) fn append_to_query(filter: &OrderFilter, query: &mut String) {
    let mut pairs = form_urlencoded::Serializer::new(String::new());
    if !filter.statuses().is_empty() {
        pairs.append_pair("status", &filter.statuses().join(","));
    }
    if !filter.providers().is_empty() {
        pairs.append_pair("provider", &filter.providers().join(","));
    }
    if let Some(since) = filter.created_since() {
        pairs.append_pair("created_since", &since.to_string());
    }
    if let Some(before) = filter.created_before() {
        pairs.append_pair("created_before", &before.to_string());
    }
    if let Some(since) = filter.updated_since() {
        pairs.append_pair("updated_since", &since.to_string());
    }
    if let Some(before) = filter.updated_before() {
        pairs.append_pair("updated_before", &before.to_string());
    }
    let pairs = pairs.finish();
    if !pairs.is_empty() {
        query.push('&');
        query.push_str(&pairs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(pairs: &[(&str, &str)]) -> Result<OrderFilter, BadFilter> {
        let mut parameters = FilterParameters::default();
        for (name, value) in pairs {
            assert!(parameters.take(name, value)?);
        }
        parameters.finish()
    }

    #[test]
    fn values_are_comma_separated_bounded_and_kept_once() {
        let filter = parse(&[("status", "running,paused,running"), ("provider", "p1")]).unwrap();
        assert_eq!(filter.statuses(), ["running", "paused"]);
        assert_eq!(filter.providers(), ["p1"]);
        for bad in ["", "a,", ",a", "a,,b", "a\u{7}", &"x".repeat(201)] {
            assert_eq!(
                parse(&[("status", bad)]),
                Err(BadFilter::Invalid(FilterParameter::Status)),
                "{bad:?}"
            );
        }
        let many = (0..21).map(|n| n.to_string()).collect::<Vec<_>>().join(",");
        assert_eq!(
            parse(&[("provider", &many)]),
            Err(BadFilter::Invalid(FilterParameter::Provider))
        );
        assert_eq!(
            parse(&[("status", "a"), ("status", "b")]),
            Err(BadFilter::Repeated(FilterParameter::Status))
        );
    }

    #[test]
    fn date_times_take_any_offset_keep_milliseconds_and_round_finer_ones_up() {
        let filter = parse(&[
            ("created_since", "2026-11-26T11:15:02.113+01:00"),
            ("created_before", "2026-11-26T10:15:02.1131Z"),
        ])
        .unwrap();
        assert_eq!(
            filter.created_since().unwrap().to_string(),
            "2026-11-26T10:15:02.113Z"
        );
        assert_eq!(
            filter.created_before().unwrap().to_string(),
            "2026-11-26T10:15:02.114Z"
        );
        for bad in [
            "2026-11-26",
            "2026-11-26T10:15:02",
            "2026-11-26 10:15:02Z",
            "yesterday",
            "10000-01-01T00:00:00Z",
        ] {
            assert_eq!(
                parse(&[("created_since", bad)]),
                Err(BadFilter::Invalid(FilterParameter::CreatedSince)),
                "{bad}"
            );
        }
    }

    #[test]
    fn since_must_come_before_before() {
        for (since, before) in [
            ("2026-01-02T00:00:00Z", "2026-01-01T00:00:00Z"),
            ("2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z"),
        ] {
            assert_eq!(
                parse(&[("created_since", since), ("created_before", before)]),
                Err(BadFilter::EmptyRange)
            );
        }
    }

    #[test]
    fn the_tag_is_the_filters_whatever_the_order_of_values() {
        let a = parse(&[("status", "a,b")]).unwrap();
        let b = parse(&[("status", "b,a")]).unwrap();
        let c = parse(&[("provider", "a,b")]).unwrap();
        assert_eq!(filter_tag(&a), filter_tag(&b));
        assert_ne!(filter_tag(&a), filter_tag(&c));
        assert_ne!(filter_tag(&a), filter_tag(&OrderFilter::default()));
    }

    #[test]
    fn a_link_carries_the_filters_encoded() {
        let filter = parse(&[
            ("status", "on hold,running"),
            ("created_since", "2026-11-26T11:15:02.113+01:00"),
        ])
        .unwrap();
        let mut query = String::from("page_token=t");
        append_to_query(&filter, &mut query);
        assert_eq!(
            query,
            "page_token=t&status=on+hold%2Crunning&created_since=2026-11-26T10%3A15%3A02.113Z"
        );
    }
}
