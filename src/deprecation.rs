//! Deprecations a host declares ([`Deprecation`], for `PartnerApi::with_deprecation`): a route
//! (`/me`, `/orders`, `/events`), a query parameter of one (`/orders?provider`), or an API
//! version (`2026-11-27`, see [versions](crate::docs::versions)) deprecated from a date,
//! optionally with a sunset date and a link to what explains it.
//!
//! A version's deprecation concerns every answer served at that version, after the key is
//! known (the version a request is served at is the key's pinned one or its header's): the
//! same notices, the same 410 past an enforced sunset, its calls counted per key under the
//! target `2026-11-27`. `GET /versions` shows it (`deprecated`, `sunset`); `GET /deprecations`
//! lists the routes' and parameters' only, as it always did.
//!
//! Every answer to a request of a deprecated route, or one that uses a deprecated parameter,
//! carries `Deprecation: @<unix seconds>` (RFC 9745), `Sunset: <IMF-fixdate>` (RFC 8594) when
//! a sunset is set, and `Link: <URL>; rel="deprecation"` (and `rel="sunset"`) when a link is
//! set: on 2xx, 304 and 4xx alike. After the sunset the route keeps answering, unless the
//! deprecation is enforced: then it answers 410 Gone with a JSON error naming the sunset date
//! and the link. Dates are days, at 00:00 UTC.
//!
//! ```
//! use partner_api::deprecation::Deprecation;
//!
//! let deprecation: Deprecation =
//!     "/orders?provider=2026-12-01,sunset=2027-06-01,link=https://example.com/changes".parse()?;
//! assert_eq!(deprecation.target(), "/orders?provider");
//! assert!("/orders=2026-12-01,sunset=2026-11-01".parse::<Deprecation>().is_err());
//! # Ok::<(), partner_api::deprecation::DeprecationError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use chrono::NaiveDate;
use http::{HeaderName, HeaderValue};

use crate::versions::ApiVersion;

/// A route of the API that a deprecation names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeprecatedRoute {
    /// `GET /me`.
    Me,
    /// `GET /orders`.
    Orders,
    /// `GET /events`.
    Events,
}

impl DeprecatedRoute {
    /// The route's path below the prefix: `/me`, `/orders` or `/events`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Me => "/me",
            Self::Orders => "/orders",
            Self::Events => "/events",
        }
    }

    fn from_path(path: &str) -> Option<Self> {
        [Self::Me, Self::Orders, Self::Events]
            .into_iter()
            .find(|route| route.as_str() == path)
    }
}

/// A deprecation of a route, of a query parameter of one, or of an API version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deprecation {
    target: Target,
    since: NaiveDate,
    sunset: Option<NaiveDate>,
    link: Option<String>,
    enforced: bool,
}

/// As `GET /deprecations` and the management service's `GET /deprecated-calls` show it:
/// `{"target", "route", "parameter", "deprecatedOn", "sunsetOn", "link", "enforced"}`, days
/// as `YYYY-MM-DD`, `null` for what is not set (a version's `route`).
impl serde::Serialize for Deprecation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut fields = serializer.serialize_struct("Deprecation", 7)?;
        fields.serialize_field("target", &self.target())?;
        fields.serialize_field("route", &self.route().map(DeprecatedRoute::as_str))?;
        fields.serialize_field("parameter", &self.parameter())?;
        fields.serialize_field("deprecatedOn", &self.since.to_string())?;
        fields.serialize_field("sunsetOn", &self.sunset.map(|day| day.to_string()))?;
        fields.serialize_field("link", &self.link)?;
        fields.serialize_field("enforced", &self.enforced)?;
        fields.end()
    }
}

/// What a deprecation is of.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Target {
    /// A route, or a query parameter of one.
    Route(DeprecatedRoute, Option<String>),
    /// An API version.
    Version(ApiVersion),
}

/// Why a deprecation was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeprecationError(String);

impl fmt::Display for DeprecationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DeprecationError {}

fn refused(message: impl Into<String>) -> DeprecationError {
    DeprecationError(message.into())
}

impl Deprecation {
    /// `target` (`/orders`, `/orders?provider` for a query parameter, or `2026-11-27` for an
    /// API version) deprecated from the day `since`.
    ///
    /// # Errors
    ///
    /// When `target` is not `/me`, `/orders` or `/events`, with or without `?` and a
    /// parameter name (letters, digits and `_`, at most 64), nor a version's name
    /// (`YYYY-MM-DD`). Whether the API offers the version is the host's to check: a
    /// deprecation of a version it does not offer concerns no answer.
    pub fn new(target: &str, since: NaiveDate) -> Result<Self, DeprecationError> {
        if !target.starts_with('/') {
            let version: ApiVersion = target.parse().map_err(|_| {
                refused(format!(
                    "{target:?} is not a route of the API nor a version: use /me, /orders or /events, with ?PARAMETER for a query parameter, or a version YYYY-MM-DD"
                ))
            })?;
            return Ok(Self {
                target: Target::Version(version),
                since,
                sunset: None,
                link: None,
                enforced: false,
            });
        }
        let (path, parameter) = match target.split_once('?') {
            Some((path, parameter)) => (path, Some(parameter)),
            None => (target, None),
        };
        let route = DeprecatedRoute::from_path(path).ok_or_else(|| {
            refused(format!(
                "{target:?} is not a route of the API: use /me, /orders or /events, with ?PARAMETER for a query parameter"
            ))
        })?;
        if let Some(parameter) = parameter {
            if parameter.is_empty()
                || parameter.len() > 64
                || !parameter
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_')
            {
                return Err(refused(format!(
                    "{parameter:?} is not a query parameter name (letters, digits and _, at most 64)"
                )));
            }
        }
        Ok(Self {
            target: Target::Route(route, parameter.map(str::to_owned)),
            since,
            sunset: None,
            link: None,
            enforced: false,
        })
    }

    /// Sets the day after which the target may stop answering.
    ///
    /// # Errors
    ///
    /// When `sunset` is before the deprecation's day: a sunset is never before its
    /// deprecation.
    pub fn with_sunset(mut self, sunset: NaiveDate) -> Result<Self, DeprecationError> {
        if sunset < self.since {
            return Err(refused(format!(
                "the sunset {sunset} is before the deprecation {}",
                self.since
            )));
        }
        self.sunset = Some(sunset);
        Ok(self)
    }

    /// Sets the link to what explains the deprecation (sent as `rel="deprecation"`, and as
    /// `rel="sunset"` when a sunset is set).
    ///
    /// # Errors
    ///
    /// When `link` is not an absolute `http` or `https` URL of visible ASCII without `<`,
    /// `>`, `"` or `,`.
    pub fn with_link(mut self, link: &str) -> Result<Self, DeprecationError> {
        let plain = !link.is_empty()
            && link.len() <= 2048
            && link
                .bytes()
                .all(|b| b.is_ascii_graphic() && !matches!(b, b'<' | b'>' | b'"' | b','));
        let absolute = link.parse::<http::Uri>().ok().is_some_and(|uri| {
            matches!(uri.scheme_str(), Some("http" | "https")) && uri.host().is_some()
        });
        if !plain || !absolute {
            return Err(refused(format!(
                "{link:?} is not an absolute http or https URL (without <, >, \" or ,)"
            )));
        }
        self.link = Some(link.to_owned());
        Ok(self)
    }

    /// Makes the target answer 410 Gone from its sunset on.
    ///
    /// # Errors
    ///
    /// When no sunset is set: enforcement starts at the sunset.
    pub fn with_enforcement(mut self) -> Result<Self, DeprecationError> {
        if self.sunset.is_none() {
            return Err(refused("enforce needs a sunset date"));
        }
        self.enforced = true;
        Ok(self)
    }

    /// The route deprecated, or whose parameter is; `None` for a version's deprecation.
    pub fn route(&self) -> Option<DeprecatedRoute> {
        match self.target {
            Target::Route(route, _) => Some(route),
            Target::Version(_) => None,
        }
    }

    /// The API version deprecated, for a version's deprecation.
    pub fn version(&self) -> Option<ApiVersion> {
        match self.target {
            Target::Version(version) => Some(version),
            Target::Route(..) => None,
        }
    }

    /// The deprecated query parameter, when the deprecation is of one.
    pub fn parameter(&self) -> Option<&str> {
        match &self.target {
            Target::Route(_, parameter) => parameter.as_deref(),
            Target::Version(_) => None,
        }
    }

    /// What is deprecated: `/orders`, `/orders?provider`, or `2026-11-27`.
    pub fn target(&self) -> String {
        match &self.target {
            Target::Route(route, Some(parameter)) => format!("{}?{parameter}", route.as_str()),
            Target::Route(route, None) => route.as_str().to_owned(),
            Target::Version(version) => version.to_string(),
        }
    }

    /// The day it is deprecated from.
    pub fn since(&self) -> NaiveDate {
        self.since
    }

    /// The day after which it may stop answering, if set.
    pub fn sunset(&self) -> Option<NaiveDate> {
        self.sunset
    }

    /// What explains it, if set.
    pub fn link(&self) -> Option<&str> {
        self.link.as_deref()
    }

    /// Whether it answers 410 Gone from its sunset on.
    pub fn is_enforced(&self) -> bool {
        self.enforced
    }

    /// Whether a request to `route` whose query string is `query` is concerned: any request of
    /// the route, or, for a parameter, one that gives it.
    pub(crate) fn concerns(&self, route: DeprecatedRoute, query: Option<&str>) -> bool {
        let Target::Route(own, parameter) = &self.target else {
            return false;
        };
        if route != *own {
            return false;
        }
        let Some(parameter) = parameter else {
            return true;
        };
        query.is_some_and(|query| {
            form_urlencoded::parse(query.as_bytes()).any(|(name, _)| name == parameter.as_str())
        })
    }

    /// Whether `today` is past the sunset of an enforced deprecation.
    pub(crate) fn is_gone(&self, today: NaiveDate) -> bool {
        self.enforced && self.sunset.is_some_and(|sunset| today >= sunset)
    }
}

/// The headers of an answer that `concerned` deprecations concern (at least one): one
/// `Deprecation` (the earliest day: RFC 9745's field is one date), one `Sunset` (the earliest
/// set: RFC 8594's is one date), and each link once, as `rel="deprecation"` and, for a
/// deprecation with a sunset, `rel="sunset"`.
pub(crate) fn notices<'a>(
    concerned: impl IntoIterator<Item = &'a Deprecation>,
) -> Vec<(HeaderName, HeaderValue)> {
    let concerned: Vec<&Deprecation> = concerned.into_iter().collect();
    let mut headers = Vec::with_capacity(4);
    let Some(since) = concerned.iter().map(|deprecation| deprecation.since).min() else {
        return headers;
    };
    // Digits after `@`, and an HTTP date: always valid header values.
    if let Ok(value) = HeaderValue::from_str(&format!("@{}", unix_seconds(since))) {
        headers.push((HeaderName::from_static("deprecation"), value));
    }
    if let Some(sunset) = concerned
        .iter()
        .filter_map(|deprecation| deprecation.sunset)
        .min()
    {
        if let Ok(value) = HeaderValue::from_str(&imf_fixdate(sunset)) {
            headers.push((HeaderName::from_static("sunset"), value));
        }
    }
    let mut links: Vec<String> = Vec::new();
    for deprecation in &concerned {
        let Some(link) = &deprecation.link else {
            continue;
        };
        let mut rels = vec!["deprecation"];
        if deprecation.sunset.is_some() {
            rels.push("sunset");
        }
        for rel in rels {
            let value = format!("<{link}>; rel=\"{rel}\"");
            if !links.contains(&value) {
                links.push(value);
            }
        }
    }
    for link in links {
        if let Ok(value) = HeaderValue::from_str(&link) {
            headers.push((http::header::LINK, value));
        }
    }
    headers
}

/// Adds `notices` to `headers`, which may hold notices already (a route's deprecation and the
/// version's, on one answer): one `Deprecation` and one `Sunset`, the earliest of each, and
/// each link once.
pub(crate) fn add_notices(headers: &mut http::HeaderMap, notices: &[(HeaderName, HeaderValue)]) {
    for (name, value) in notices {
        let held = headers.get(name);
        let keep_held = match (name.as_str(), held) {
            (_, None) => false,
            ("deprecation", Some(held)) => {
                let seconds = |value: &HeaderValue| {
                    value
                        .to_str()
                        .ok()
                        .and_then(|text| text.strip_prefix('@'))
                        .and_then(|digits| digits.parse::<i64>().ok())
                };
                seconds(held) <= seconds(value)
            }
            ("sunset", Some(held)) => {
                let day = |value: &HeaderValue| {
                    value.to_str().ok().and_then(|text| {
                        NaiveDate::parse_from_str(text, "%a, %d %b %Y 00:00:00 GMT").ok()
                    })
                };
                day(held) <= day(value)
            }
            _ => {
                if !headers.get_all(name).iter().any(|held| held == value) {
                    headers.append(name.clone(), value.clone());
                }
                continue;
            }
        };
        if !keep_held {
            headers.insert(name.clone(), value.clone());
        }
    }
}

/// `date` at 00:00 UTC, in seconds since the epoch.
fn unix_seconds(date: NaiveDate) -> i64 {
    date.and_hms_opt(0, 0, 0)
        .map_or(0, |midnight| midnight.and_utc().timestamp())
}

/// `date` at 00:00 UTC as an HTTP date (IMF-fixdate): `Tue, 01 Jun 2027 00:00:00 GMT`.
pub(crate) fn imf_fixdate(date: NaiveDate) -> String {
    date.format("%a, %d %b %Y 00:00:00 GMT").to_string()
}

impl FromStr for Deprecation {
    type Err = DeprecationError;

    /// `TARGET=DATE[,sunset=DATE][,link=URL][,enforce]`, dates `YYYY-MM-DD`; the target a
    /// route (`/orders`), a route's parameter (`/orders?provider`) or an API version
    /// (`2026-11-27`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (target, rest) = text.split_once('=').ok_or_else(|| {
            refused("a deprecation is TARGET=DATE[,sunset=DATE][,link=URL][,enforce], the target /ROUTE[?PARAM] or a version YYYY-MM-DD")
        })?;
        let mut parts = rest.split(',');
        let since = date(parts.next().unwrap_or_default())?;
        let mut deprecation = Self::new(target, since)?;
        let mut enforce = false;
        let (mut sunset_seen, mut link_seen) = (false, false);
        for part in parts {
            match part.split_once('=') {
                Some(("sunset", value)) if !sunset_seen => {
                    sunset_seen = true;
                    deprecation = deprecation.with_sunset(date(value)?)?;
                }
                Some(("link", value)) if !link_seen => {
                    link_seen = true;
                    deprecation = deprecation.with_link(value)?;
                }
                None if part == "enforce" && !enforce => enforce = true,
                _ => {
                    return Err(refused(format!(
                        "{part:?}: after the date, each of sunset=DATE, link=URL and enforce may come once"
                    )))
                }
            }
        }
        if enforce {
            deprecation = deprecation.with_enforcement()?;
        }
        Ok(deprecation)
    }
}

fn date(text: &str) -> Result<NaiveDate, DeprecationError> {
    let well_formed = text.len() == 10
        && text.bytes().enumerate().all(|(i, b)| {
            if i == 4 || i == 7 {
                b == b'-'
            } else {
                b.is_ascii_digit()
            }
        });
    well_formed
        .then(|| NaiveDate::parse_from_str(text, "%Y-%m-%d").ok())
        .flatten()
        .ok_or_else(|| refused(format!("{text:?} is not a date YYYY-MM-DD")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Headers as text.
    fn rendered(headers: Vec<(HeaderName, HeaderValue)>) -> Vec<(String, String)> {
        headers
            .into_iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect()
    }

    /// The headers of a deprecation from 2026-12-01 with a sunset on 2027-06-01 and `link`.
    fn december_to_june(link: &str) -> Vec<(String, String)> {
        [
            ("deprecation", "@1796083200".to_owned()),
            ("sunset", "Tue, 01 Jun 2027 00:00:00 GMT".to_owned()),
            ("link", format!("<{link}>; rel=\"deprecation\"")),
            ("link", format!("<{link}>; rel=\"sunset\"")),
        ]
        .map(|(name, value)| (name.to_owned(), value))
        .into()
    }

    fn day(text: &str) -> NaiveDate {
        date(text).unwrap()
    }

    #[test]
    fn a_flag_reads_back_as_the_builder_makes_it() {
        let parsed: Deprecation =
            "/orders?provider=2026-12-01,sunset=2027-06-01,link=https://example.com/x,enforce"
                .parse()
                .unwrap();
        let built = Deprecation::new("/orders?provider", day("2026-12-01"))
            .unwrap()
            .with_sunset(day("2027-06-01"))
            .unwrap()
            .with_link("https://example.com/x")
            .unwrap()
            .with_enforcement()
            .unwrap();
        assert_eq!(parsed, built);
        assert_eq!(parsed.target(), "/orders?provider");
        assert_eq!(
            "/me=2026-01-01".parse::<Deprecation>().unwrap().target(),
            "/me"
        );
    }

    #[test]
    fn what_cannot_be_a_deprecation_is_refused() {
        for text in [
            "/orders",
            "/orders=",
            "/orders=2026-13-01",
            "/orders=26-01-01",
            "/orders=2026-1-01",
            "/v1/orders=2026-01-01",
            "/order=2026-01-01",
            "/orders?=2026-01-01",
            "/orders?pro-vider=2026-01-01",
            "/orders=2026-02-01,sunset=2026-01-31",
            "/orders=2026-01-01,enforce",
            "/orders=2026-01-01,sunset=2026-02-01,sunset=2026-03-01",
            "/orders=2026-01-01,link=ftp://example.com",
            "/orders=2026-01-01,link=/relative",
            "/orders=2026-01-01,link=https://example.com/<x>",
            "/orders=2026-01-01,later",
        ] {
            assert!(text.parse::<Deprecation>().is_err(), "{text}");
        }
        // A sunset on the deprecation's own day is allowed.
        assert!("/orders=2026-01-01,sunset=2026-01-01"
            .parse::<Deprecation>()
            .is_ok());
    }

    #[test]
    fn the_headers_are_rfc_9745_and_8594() {
        let deprecation: Deprecation =
            "/orders=2026-12-01,sunset=2027-06-01,link=https://example.com/x"
                .parse()
                .unwrap();
        let headers = rendered(notices([&deprecation]));
        assert_eq!(headers, december_to_june("https://example.com/x"));
    }

    #[test]
    fn two_deprecations_of_one_request_make_one_date_of_each_and_every_link_once() {
        let route: Deprecation = "/orders=2027-01-01,sunset=2027-09-01,link=https://example.com/a"
            .parse()
            .unwrap();
        let parameter: Deprecation =
            "/orders?provider=2026-12-01,sunset=2027-06-01,link=https://example.com/a"
                .parse()
                .unwrap();
        let headers = rendered(notices([&route, &parameter]));
        assert_eq!(headers, december_to_june("https://example.com/a"));
    }

    #[test]
    fn a_parameter_deprecation_concerns_requests_that_give_it() {
        let deprecation: Deprecation = "/orders?provider=2026-12-01".parse().unwrap();
        assert!(deprecation.concerns(DeprecatedRoute::Orders, Some("provider=meta")));
        assert!(deprecation.concerns(DeprecatedRoute::Orders, Some("limit=5&provider=")));
        assert!(!deprecation.concerns(DeprecatedRoute::Orders, Some("providers=meta")));
        assert!(!deprecation.concerns(DeprecatedRoute::Orders, None));
        assert!(!deprecation.concerns(DeprecatedRoute::Me, Some("provider=meta")));
        let route: Deprecation = "/me=2026-12-01".parse().unwrap();
        assert!(route.concerns(DeprecatedRoute::Me, None));
    }
}
