//! Pages of `GET /orders`: the query parameters `limit` and `page_token` (and the filters,
//! read by [`order_filters`](super::order_filters)), the opaque token, and the
//! `Link: <...>; rel="next"` header (RFC 8288) of a page that more orders follow.
//!
//! A token is base64url (no padding) of: a version byte, 8 bytes that bind it to the
//! organization (a SHA-256 prefix of its id), for a filtered page (version 2) 8 bytes that
//! bind it to the filters, the `createdAt` of the page's last order in milliseconds (8 bytes,
//! big-endian), that order's id, and 8 bytes of SHA-256 over all of the former, so a token
//! that was cut or altered is refused instead of read as another position. An unfiltered
//! page's token (version 1) is as it always was. The token names a position, not an offset: a page after it holds the orders
//! that come after that position in the served order, whatever was created or deleted since.
//!
//! The checksum is no MAC: anyone can make a token, and that is by design (contract 4.2, the
//! crate's choice). A token is a position hint that grants nothing: the page is always read
//! from the key's own organization, a token bound to another is refused, and the position is
//! range-checked here (a time in the years 0000 to 9999, an id without NUL) so that no made-up
//! token reaches the store with a value it cannot read: it is a 400, never a 500.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::BytesMut;
use http::HeaderValue;
use sha2::{Digest, Sha256};

use crate::api::order_filters::{
    append_to_query, filter_tag, BadFilter, FilterParameter, FilterParameters,
};
use crate::model::{Timestamp, MAX_ORDERS};
use crate::store::read::KeyRestrictions;
use crate::store::{OrderFilter, OrderPosition, OrderQuery};

/// The version of the token format of an unfiltered page.
const VERSION: u8 = 1;
/// The version of a filtered page's token, which carries the filters' tag.
const FILTERED_VERSION: u8 = 2;
/// The longest token read: longer ones are refused before decoding.
const MAX_TOKEN_CHARS: usize = 1024;
/// Bytes of a token around the order id: version, organization, time, checksum.
const FIXED_BYTES: usize = 1 + 8 + 8 + 8;

/// What the query string of `GET /orders` asks for, before the organization is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PageRequest {
    /// `limit` as given, if it was (1 to 100: a byte keeps the request small, for it is
    /// moved along the request's path).
    limit: Option<u8>,
    /// The decoded `page_token`, if one was given.
    token: Option<PageToken>,
    /// The filters given (none: every order), boxed so an unfiltered request allocates
    /// nothing for them.
    filter: Option<Box<OrderFilter>>,
    /// The restrictions of a key limited to providers ([`within`](Self::within)): its pages
    /// are read with its providers as the provider filter, and its tokens are bound to them.
    /// The principal's shared restrictions, so a request holds one pointer for them.
    view: Option<std::sync::Arc<KeyRestrictions>>,
}

/// A decoded `page_token`: its organization binding, its filters' (for a filtered page), and
/// position.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PageToken {
    organization: [u8; 8],
    filter: Option<[u8; 8]>,
    position: OrderPosition,
}

/// Why a query string was refused: the message of its 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BadPageRequest {
    /// `limit` is not a whole number from 1 to 100.
    Limit,
    /// `limit` or `page_token` is given twice.
    Repeated,
    /// `page_token` is not a token of this API (cut, altered, or made up).
    MalformedToken,
    /// `page_token` is another organization's.
    ForeignToken,
    /// `page_token` was made for other filters than the ones given.
    OtherFilters,
    /// A filter parameter's value is not one this API takes.
    Filter(FilterParameter),
    /// A filter parameter is given twice.
    RepeatedFilter(FilterParameter),
    /// `created_since` is not before `created_before`.
    EmptyRange,
    /// `updated_since` is not before `updated_before`.
    EmptyUpdatedRange,
}

impl From<BadFilter> for BadPageRequest {
    fn from(bad: BadFilter) -> Self {
        match bad {
            BadFilter::Invalid(parameter) => Self::Filter(parameter),
            BadFilter::Repeated(parameter) => Self::RepeatedFilter(parameter),
            BadFilter::EmptyRange => Self::EmptyRange,
            BadFilter::EmptyUpdatedRange => Self::EmptyUpdatedRange,
        }
    }
}

impl PageRequest {
    /// The request of `query` (a URI's query string): `limit`, `page_token` and the filters
    /// count; other parameters are ignored.
    pub(crate) fn parse(query: Option<&str>) -> Result<Self, BadPageRequest> {
        let mut request = Self {
            limit: None,
            token: None,
            filter: None,
            view: None,
        };
        let Some(query) = query else {
            return Ok(request);
        };
        let mut filters = FilterParameters::default();
        let mut seen_token = false;
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            match &*name {
                "limit" => {
                    if request.limit.is_some() {
                        return Err(BadPageRequest::Repeated);
                    }
                    request.limit = Some(parse_limit(&value)?);
                }
                "page_token" => {
                    if seen_token {
                        return Err(BadPageRequest::Repeated);
                    }
                    seen_token = true;
                    request.token = Some(PageToken::decode(&value)?);
                }
                name => {
                    filters.take(name, &value)?;
                }
            }
        }
        let filter = filters.finish()?;
        request.filter = (!filter.is_empty()).then(|| Box::new(filter));
        Ok(request)
    }

    /// Limits the request to the orders of `providers` (a key's, sorted): a `provider` filter
    /// may narrow them, never reach past them (the provider it names that is not among them
    /// is the error); without one, they are the filter. Page tokens are bound to them.
    ///
    /// # Errors
    ///
    /// The first provider of the request's filter that is not among `providers`.
    pub(crate) fn within(
        &mut self,
        restrictions: std::sync::Arc<KeyRestrictions>,
    ) -> Result<(), String> {
        let providers: &[String] = restrictions.providers.as_deref().unwrap_or_default();
        if let Some(outside) = self.filter.as_deref().and_then(|filter| {
            filter
                .providers()
                .iter()
                .find(|asked| providers.binary_search(asked).is_err())
        }) {
            return Err(outside.clone());
        }
        self.view = Some(restrictions);
        Ok(())
    }

    /// The providers of the key's view, if it is limited to them.
    fn view_providers(&self) -> Option<&[String]> {
        self.view
            .as_deref()
            .and_then(|restrictions| restrictions.providers.as_deref())
    }

    /// The tag that binds this request's tokens to a key's providers, if it has them.
    pub(crate) fn view_tag(&self) -> Option<[u8; 8]> {
        self.view
            .as_deref()
            .and_then(KeyRestrictions::providers_tag)
    }

    /// The store query for the organization `organization_id`, or the 400 of a token that
    /// another organization's page links to, or a page of other filters.
    pub(crate) fn query_for(&self, organization_id: &str) -> Result<OrderQuery, BadPageRequest> {
        let limit = self.limit.map_or(MAX_ORDERS, usize::from);
        let query = match &self.token {
            None => OrderQuery::newest(limit),
            Some(token) if token.organization != organization_tag(organization_id) => {
                return Err(BadPageRequest::ForeignToken);
            }
            Some(token) if token.filter != self.filter_tag() => {
                return Err(BadPageRequest::OtherFilters);
            }
            Some(token) => OrderQuery::after(token.position.clone(), limit),
        };
        let filter = match (&self.filter, self.view_providers()) {
            (None, None) => return Ok(query),
            (Some(filter), None) => OrderFilter::clone(filter),
            // The key's providers are the filter unless the request narrows them.
            (filter, Some(view)) => {
                let filter = filter.as_deref().cloned().unwrap_or_default();
                if filter.providers().is_empty() {
                    filter.with_key_providers(view)
                } else {
                    filter
                }
            }
        };
        Ok(query.with_filter(filter))
    }

    /// The tag of the request's filters and the key's providers, `None` when it has neither
    /// (so a token of a key without providers is what it always was).
    fn filter_tag(&self) -> Option<[u8; 8]> {
        let filters = self.filter.as_deref().map(filter_tag);
        let Some(view) = self.view_tag() else {
            return filters;
        };
        let mut tag = view;
        for (byte, filter) in tag.iter_mut().zip(filters.unwrap_or_default()) {
            *byte ^= filter;
        }
        Some(tag)
    }

    /// The `Link` header of a page whose last order is at `last` and that more orders follow:
    /// the request's `path` with a token for the next page, and the `limit` it was given.
    pub(crate) fn next_link(
        &self,
        path: &str,
        organization_id: &str,
        last: &OrderPosition,
    ) -> Option<HeaderValue> {
        let token = PageToken {
            organization: organization_tag(organization_id),
            filter: self.filter_tag(),
            position: last.clone(),
        }
        .encode();
        let mut link = BytesMut::with_capacity(path.len() + token.len() + 48);
        link.extend_from_slice(b"<");
        link.extend_from_slice(path.as_bytes());
        link.extend_from_slice(b"?page_token=");
        link.extend_from_slice(token.as_bytes());
        if let Some(limit) = self.limit {
            link.extend_from_slice(format!("&limit={limit}").as_bytes());
        }
        if let Some(filter) = &self.filter {
            let mut filters = String::new();
            append_to_query(filter, &mut filters);
            link.extend_from_slice(filters.as_bytes());
        }
        link.extend_from_slice(b">; rel=\"next\"");
        // A path the request came in on is visible ASCII; the token is base64url.
        HeaderValue::from_maybe_shared(link.freeze()).ok()
    }
}

impl PageToken {
    fn encode(&self) -> String {
        let id = self.position.id.as_bytes();
        let mut bytes = Vec::with_capacity(FIXED_BYTES + 8 + id.len());
        bytes.push(if self.filter.is_some() {
            FILTERED_VERSION
        } else {
            VERSION
        });
        bytes.extend_from_slice(&self.organization);
        if let Some(filter) = &self.filter {
            bytes.extend_from_slice(filter);
        }
        let millis = self.position.created_at.as_datetime().timestamp_millis();
        bytes.extend_from_slice(&millis.to_be_bytes());
        bytes.extend_from_slice(id);
        let checksum = checksum(&bytes);
        bytes.extend_from_slice(&checksum);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn decode(text: &str) -> Result<Self, BadPageRequest> {
        if text.is_empty() || text.len() > MAX_TOKEN_CHARS {
            return Err(BadPageRequest::MalformedToken);
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|_| BadPageRequest::MalformedToken)?;
        let filtered = match bytes.first() {
            Some(&VERSION) => false,
            Some(&FILTERED_VERSION) => true,
            _ => return Err(BadPageRequest::MalformedToken),
        };
        let fixed = FIXED_BYTES + if filtered { 8 } else { 0 };
        if bytes.len() < fixed {
            return Err(BadPageRequest::MalformedToken);
        }
        let (signed, sum) = bytes.split_at(bytes.len() - 8);
        if checksum(signed) != sum {
            return Err(BadPageRequest::MalformedToken);
        }
        let organization = array(&signed[1..9]);
        let (filter, rest) = if filtered {
            (Some(array(&signed[9..17])), &signed[17..])
        } else {
            (None, &signed[9..])
        };
        let millis = i64::from_be_bytes(array(&rest[..8]));
        let created_at =
            Timestamp::from_unix_millis(millis).ok_or(BadPageRequest::MalformedToken)?;
        // No order id holds a NUL (a database's text cannot): refused here, not by the query.
        let id = std::str::from_utf8(&rest[8..])
            .ok()
            .filter(|id| !id.contains('\0'))
            .ok_or(BadPageRequest::MalformedToken)?
            .to_owned();
        Ok(Self {
            organization,
            filter,
            position: OrderPosition { created_at, id },
        })
    }
}

fn array(bytes: &[u8]) -> [u8; 8] {
    let mut array = [0; 8];
    array.copy_from_slice(bytes);
    array
}

fn checksum(bytes: &[u8]) -> [u8; 8] {
    array(&Sha256::digest(bytes)[..8])
}

/// The 8 bytes that bind a token to the organization `organization_id`.
fn organization_tag(organization_id: &str) -> [u8; 8] {
    let mut hasher = Sha256::new();
    hasher.update(b"partner-api page token\0");
    hasher.update(organization_id.as_bytes());
    array(&hasher.finalize()[..8])
}

/// A `limit` value: digits only, from 1 to [`MAX_ORDERS`].
fn parse_limit(value: &str) -> Result<u8, BadPageRequest> {
    if value.is_empty() || value.len() > 3 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(BadPageRequest::Limit);
    }
    match value.parse::<usize>() {
        Ok(limit) if (1..=MAX_ORDERS).contains(&limit) => {
            u8::try_from(limit).map_err(|_| BadPageRequest::Limit)
        }
        _ => Err(BadPageRequest::Limit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position(millis: i64, id: &str) -> OrderPosition {
        OrderPosition {
            created_at: Timestamp::from_unix_millis(millis).unwrap(),
            id: id.to_owned(),
        }
    }

    fn token_of(link: &HeaderValue) -> String {
        let link = link.to_str().unwrap();
        let start = link.find("page_token=").unwrap() + "page_token=".len();
        let end = link[start..].find(['&', '>']).unwrap() + start;
        link[start..end].to_owned()
    }

    /// A key's providers are its pages' filter marked as the key's own list (a store may
    /// keep a statement for it); a `provider` filter that narrows them is a request's list.
    #[test]
    fn a_keys_providers_are_its_filter_marked_as_its_own() {
        let principal = crate::Principal::new(
            "key",
            crate::Organization {
                id: "org".into(),
                name: "Org".into(),
            },
        )
        .with_providers(Some(vec!["google".to_owned(), "meta".to_owned()].into()));
        let restrictions = principal.shared_restrictions().unwrap().clone();
        for (query, providers, the_keys) in [
            (None, &["google", "meta"][..], true),
            (Some("provider=meta"), &["meta"][..], false),
        ] {
            let mut request = PageRequest::parse(query).unwrap();
            request.within(restrictions.clone()).unwrap();
            let read = request.query_for("org").unwrap();
            assert_eq!(read.filter().providers(), providers);
            assert_eq!(read.filter().providers_are_the_keys(), the_keys);
        }
    }

    #[test]
    fn no_query_is_the_first_page_of_100() {
        for query in [None, Some(""), Some("foo=bar&x")] {
            let request = PageRequest::parse(query).unwrap();
            assert_eq!(request.query_for("org").unwrap(), OrderQuery::newest(100));
        }
    }

    #[test]
    fn a_token_round_trips_for_its_organization_only() {
        let request = PageRequest::parse(Some("limit=5")).unwrap();
        let last = position(1_700_000_000_123, "order-ü/7");
        let link = request
            .next_link("/partner/v1/orders", "org_a", &last)
            .unwrap();
        let token = token_of(&link);
        assert_eq!(
            link.to_str().unwrap(),
            format!("</partner/v1/orders?page_token={token}&limit=5>; rel=\"next\"")
        );
        let next = PageRequest::parse(Some(&format!("page_token={token}&limit=5"))).unwrap();
        assert_eq!(next.query_for("org_a").unwrap(), OrderQuery::after(last, 5));
        assert_eq!(next.query_for("org_b"), Err(BadPageRequest::ForeignToken));
    }

    #[test]
    fn every_altered_or_cut_token_is_malformed() {
        let request = PageRequest::parse(None).unwrap();
        let link = request
            .next_link("/v1/orders", "org", &position(5, "o1"))
            .unwrap();
        let token = token_of(&link);
        for at in 0..token.len() {
            let mut altered = token.clone().into_bytes();
            altered[at] = if altered[at] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(altered).unwrap();
            assert_eq!(
                PageRequest::parse(Some(&format!("page_token={altered}"))),
                Err(BadPageRequest::MalformedToken),
                "{altered}"
            );
        }
        for cut in 0..token.len() {
            assert_eq!(
                PageRequest::parse(Some(&format!("page_token={}", &token[..cut]))),
                Err(BadPageRequest::MalformedToken)
            );
        }
        for bad in ["page_token=%%%", "page_token=a+b", "page_token=////"] {
            assert_eq!(
                PageRequest::parse(Some(bad)),
                Err(BadPageRequest::MalformedToken)
            );
        }
    }

    /// A token made by hand, with a checksum as the server computes it (no secret is needed).
    fn made_up(organization_id: &str, millis: i64, id: &[u8]) -> String {
        let mut bytes = vec![VERSION];
        bytes.extend_from_slice(&organization_tag(organization_id));
        bytes.extend_from_slice(&millis.to_be_bytes());
        bytes.extend_from_slice(id);
        let sum = checksum(&bytes);
        bytes.extend_from_slice(&sum);
        URL_SAFE_NO_PAD.encode(bytes)
    }

    #[test]
    fn a_made_up_position_no_store_can_read_is_malformed() {
        let read = |millis, id: &[u8]| {
            PageRequest::parse(Some(&format!("page_token={}", made_up("org", millis, id))))
                .map(|request| request.query_for("org"))
        };
        // Any position in the years 0000 to 9999 is the key's own organization's to ask for.
        assert!(read(-62_167_219_200_000, b"o1").unwrap().is_ok());
        assert!(read(253_402_300_799_999, b"o1").unwrap().is_ok());
        for millis in [
            -300_000_000_000_000,
            -62_167_219_200_001,
            253_402_300_800_000,
        ] {
            assert_eq!(read(millis, b"o1"), Err(BadPageRequest::MalformedToken));
        }
        for millis in [i64::MIN, i64::MAX] {
            assert_eq!(read(millis, b"o1"), Err(BadPageRequest::MalformedToken));
        }
        assert_eq!(read(5, b"o\0x"), Err(BadPageRequest::MalformedToken));
        assert_eq!(read(5, b"\xff"), Err(BadPageRequest::MalformedToken));
    }

    #[test]
    fn limits_are_whole_numbers_from_1_to_100() {
        for good in ["1", "100", "007", "%35%30"] {
            assert!(
                PageRequest::parse(Some(&format!("limit={good}"))).is_ok(),
                "{good}"
            );
        }
        for bad in [
            "0", "101", "-1", "+5", "5.0", "", "1e2", "abc", "1000", " 5",
        ] {
            assert_eq!(
                PageRequest::parse(Some(&format!("limit={bad}"))),
                Err(BadPageRequest::Limit),
                "{bad}"
            );
        }
        assert_eq!(
            PageRequest::parse(Some("limit=5&limit=5")),
            Err(BadPageRequest::Repeated)
        );
    }
}
