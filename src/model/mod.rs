//! The resources of contract section 2: [`Organization`], [`Order`] and their wire formats.

use std::borrow::Cow;
use std::fmt;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use chrono::{Datelike, NaiveDate};
use http::HeaderValue;
use serde::{Deserialize, Deserializer, Serialize};

mod timestamp;

pub use timestamp::{Timestamp, TimestampParseError};

/// The most orders one `GET /orders` response holds (contract 4.2 rule 1, section 8).
pub const MAX_ORDERS: usize = 100;

/// The largest budget the API serves: 2^53 - 1, the largest integer that every JSON
/// client (JavaScript's `Number` included) represents exactly.
pub const MAX_BUDGET_DKK: u64 = (1 << 53) - 1;

/// An organization: the owner of API keys and orders (contract 2.2).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Organization {
    /// Identifier of the organization.
    pub id: String,
    /// Name of the organization.
    pub name: String,
}

/// A media buy (contract 2.3): exactly the ten fields the contract names, in its camelCase.
///
/// Every field is required and never `null`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Order {
    /// Identifier of the order, unique within its organization.
    pub id: String,
    /// The media providers of the buy, as opaque provider identifiers.
    pub providers: Vec<String>,
    /// Name of the advertiser.
    pub advertiser_name: String,
    /// Name of the campaign.
    pub campaign_name: String,
    /// Budget in whole Danish kroner, at most [`MAX_BUDGET_DKK`]. Read from JSON as a whole
    /// number, `1000` or `1000.0`; always written as an integer.
    #[serde(deserialize_with = "whole_number")]
    pub budget_dkk: u64,
    /// First day of the buy, served as `YYYY-MM-DD`.
    pub start_date: NaiveDate,
    /// Last day of the buy, served as `YYYY-MM-DD`.
    pub end_date: NaiveDate,
    /// Status of the order, an opaque string (the contract does not fix its values).
    pub status: String,
    /// Reference used by an external party.
    pub external_reference: String,
    /// When the order was created; orders are served newest first by this field.
    pub created_at: Timestamp,
    /// When the order last changed (`updatedAt`, from API version
    /// [`UPDATED_AT`](crate::versions::UPDATED_AT)); `None` when it never changed since its
    /// creation, which is served as its `createdAt`. A store records it at each change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<Timestamp>,
}

/// A non-negative whole number, written as an integer or as a float without a fraction.
fn whole_number<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Number {
        Integer(u64),
        Float(f64),
    }
    match Number::deserialize(deserializer)? {
        Number::Integer(value) => Ok(value),
        Number::Float(value)
            if value.fract() == 0.0 && (0.0..=MAX_BUDGET_DKK as f64).contains(&value) =>
        {
            Ok(value as u64)
        }
        Number::Float(value) => Err(serde::de::Error::custom(format!(
            "budgetDkk must be a whole number of kroner from 0 to 2^53 - 1, not {value}"
        ))),
    }
}

impl Order {
    /// When the order last changed: [`updated_at`](Self::updated_at), else its creation.
    pub fn last_changed_at(&self) -> Timestamp {
        self.updated_at.unwrap_or(self.created_at)
    }

    /// Compares in the order in which the API serves orders, newest first: `createdAt` descending, ties
    /// broken by `id` descending in byte order (in SQL: `ORDER BY created_at DESC,
    /// id COLLATE "C" DESC`).
    pub fn cmp_newest_first(&self, other: &Self) -> std::cmp::Ordering {
        other
            .created_at
            .cmp(&self.created_at)
            .then_with(|| other.id.as_bytes().cmp(self.id.as_bytes()))
    }
}

/// An [`Order`] together with its JSON encoding, computed once.
///
/// This is what an [`OrderStore`](crate::OrderStore) hands to the service: a response is then
/// the concatenation of ready fragments, and cloning is one reference-count increment. A store
/// that keeps orders in memory keeps them encoded; a store that reads rows per request (a
/// database) builds one with [`EncodedOrder::new`] per row and pays only that encoding.
#[derive(Clone)]
pub struct EncodedOrder(Arc<EncodedInner>);

struct EncodedInner {
    order: Order,
    json: Box<[u8]>,
    /// The order in older versions' shapes, made when first read so: a page built afresh
    /// for each request (a key's view of providers, a filter) walks back only orders no
    /// earlier page had walked back. Allocated for the first such read only.
    renditions: OnceLock<Box<OrderRenditions>>,
}

/// An order's JSON in other shapes: as many as a page keeps ([`RENDITIONS`]), each tagged
/// with its shape's day.
type OrderRenditions = [OnceLock<(NaiveDate, Box<[u8]>)>; RENDITIONS];

/// What `slots` keep for `shape`: the slot that holds it, or the first free one, filled by
/// `make`; `Err` of `make`'s value when every slot holds another shape. (Two threads filling
/// the last free slot at once: the one that lost makes its value again, the same value.)
fn kept_for_shape<T>(
    slots: &[OnceLock<(NaiveDate, T)>],
    shape: NaiveDate,
    mut make: impl FnMut() -> T,
) -> Result<&T, T> {
    for slot in slots {
        let (held, kept) = slot.get_or_init(|| (shape, make()));
        if *held == shape {
            return Ok(kept);
        }
    }
    Err(make())
}

/// The JSON array of `elements`, each a JSON value.
fn json_array<E: AsRef<[u8]>>(elements: impl Iterator<Item = E> + Clone) -> Vec<u8> {
    let length = 2 + elements
        .clone()
        .map(|element| element.as_ref().len() + 1)
        .sum::<usize>();
    let mut json = Vec::with_capacity(length);
    json.push(b'[');
    for (index, element) in elements.enumerate() {
        if index > 0 {
            json.push(b',');
        }
        json.extend_from_slice(element.as_ref());
    }
    json.push(b']');
    json
}

impl EncodedOrder {
    /// Checks `order` against the wire contract and encodes it.
    ///
    /// # Errors
    ///
    /// [`InvalidOrder`] when the order cannot be served as the contract requires: a budget
    /// above [`MAX_BUDGET_DKK`], or a date whose year is outside 0000..=9999 (it would not
    /// print as `YYYY-MM-DD`). It converts into a [`StoreError`](crate::StoreError) of kind
    /// [`InvalidData`](crate::StoreErrorKind::InvalidData).
    pub fn new(order: Order) -> Result<Self, InvalidOrder> {
        if order.budget_dkk > MAX_BUDGET_DKK {
            return Err(invalid_order(&order, "budgetDkk is above 2^53 - 1"));
        }
        let years = [
            order.start_date.year(),
            order.end_date.year(),
            order.created_at.as_datetime().year(),
            order.last_changed_at().as_datetime().year(),
        ];
        if years.iter().any(|year| !(0..=9999).contains(year)) {
            return Err(invalid_order(
                &order,
                "a date's year is outside 0000..=9999",
            ));
        }
        let mut json =
            serde_json::to_vec(&order).map_err(|err| invalid_order(&order, &err.to_string()))?;
        if order.updated_at.is_none() {
            // Served in the newest shape, which always has `updatedAt`: the object's last
            // member, written after its `createdAt` (a timestamp needs no escaping).
            json.pop();
            json.extend_from_slice(br#","updatedAt":""#);
            order.created_at.write_rfc3339(&mut json);
            json.extend_from_slice(br#""}"#);
        }
        let json = json.into_boxed_slice();
        Ok(Self(Arc::new(EncodedInner {
            order,
            json,
            renditions: OnceLock::new(),
        })))
    }

    /// The order's JSON in the shape named `shape` (an API version's day), made by `make`
    /// from the newest JSON the first time and kept with the order (`None` from `make`: the
    /// same as the newest); made afresh each time once the order keeps as many other shapes
    /// as it can.
    pub(crate) fn rendition(
        &self,
        shape: NaiveDate,
        make: impl Fn(&[u8]) -> Option<Box<[u8]>>,
    ) -> Cow<'_, [u8]> {
        let json = &self.0.json;
        let slots = self.0.renditions.get_or_init(Box::default);
        match kept_for_shape(&slots[..], shape, || {
            make(json).unwrap_or_else(|| json.clone())
        }) {
            Ok(kept) => Cow::Borrowed(kept),
            Err(made) => Cow::Owned(made.into_vec()),
        }
    }

    /// Returns the order.
    pub fn order(&self) -> &Order {
        &self.0.order
    }

    /// Returns the order's JSON object, exactly as it is served at the newest API version
    /// (an older version's is made from it, [`Versions::render`](crate::versions::Versions::render)).
    pub fn json(&self) -> &[u8] {
        &self.0.json
    }
}

fn invalid_order(order: &Order, problem: &str) -> InvalidOrder {
    InvalidOrder(format!("order {:?}: {problem}", order.id))
}

/// An order that breaks the wire contract, with what is wrong (the message names the order
/// by id).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidOrder(String);

impl fmt::Display for InvalidOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InvalidOrder {}

impl fmt::Debug for EncodedOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0.order, f)
    }
}

impl TryFrom<Order> for EncodedOrder {
    type Error = InvalidOrder;

    fn try_from(order: Order) -> Result<Self, Self::Error> {
        Self::new(order)
    }
}

/// Orders of one organization, newest first, with their JSON array encoded once: what an
/// [`OrderStore`](crate::OrderStore) returns for `GET /orders`.
///
/// Construction sorts the orders newest first ([`Order::cmp_newest_first`]) and joins their
/// ready JSON, so the order of a page is a property of the type, and serving a page is writing
/// its bytes. Clones share both (two reference counts): a store that keeps orders in memory
/// can keep its pages and hand out clones.
#[derive(Clone)]
pub struct OrderPage {
    orders: Arc<[EncodedOrder]>,
    /// The JSON array of the orders in the newest shape, with the `ETag` of the `GET /orders`
    /// body around it (computed the first time it is asked for and shared by every clone, so
    /// a stored page is hashed once).
    newest: Arc<Rendition>,
    /// Whether more orders follow the page's last one.
    has_more: bool,
    /// The `Link` to the next page as the first request that needed it was answered, with
    /// what it depends on: a page is asked for again and again the same way, and the link
    /// costs a hash and an encoding (about 9,000 instructions) to make.
    next_link: Arc<OnceLock<NextLink>>,
    /// The page's JSON in other shapes (an older API version's), each made once for the
    /// stored page and shared by its clones, so an older version costs its transform once
    /// per page a cache holds, not per request.
    renditions: Arc<[OnceLock<(NaiveDate, Rendition)>; RENDITIONS]>,
}

/// How many other shapes of one page are kept: versions read at once beyond the newest.
const RENDITIONS: usize = 4;

/// A page's JSON in another shape, with the entity tag of the body around it.
pub(crate) struct Rendition {
    pub(crate) json: Bytes,
    etag: KeptTag,
}

impl Rendition {
    fn new(json: Bytes) -> Self {
        Self {
            json,
            etag: KeptTag::default(),
        }
    }

    /// The entity tag of the body around this JSON for a key of the view `view` (the tag of
    /// its providers, `None` for a key without), computed by `compute` once for the first view
    /// asked ([`KeptTag`]).
    pub(crate) fn etag(
        &self,
        view: Option<[u8; 8]>,
        compute: impl FnOnce(&Bytes) -> HeaderValue,
    ) -> Cow<'_, HeaderValue> {
        self.etag.get(view, &self.json, compute)
    }
}

/// The entity tag of a body kept for the view it was first asked for: a page is read by the
/// keys of one view (a filter of providers is a page of its own), so a tag of another view
/// is computed afresh each time.
#[derive(Default)]
pub(crate) struct KeptTag(OnceLock<(Option<[u8; 8]>, HeaderValue)>);

impl KeptTag {
    fn get(
        &self,
        view: Option<[u8; 8]>,
        json: &Bytes,
        compute: impl FnOnce(&Bytes) -> HeaderValue,
    ) -> Cow<'_, HeaderValue> {
        if let Some((kept_view, tag)) = self.0.get() {
            return if *kept_view == view {
                Cow::Borrowed(tag)
            } else {
                Cow::Owned(compute(json))
            };
        }
        let tag = compute(json);
        // A request of another view that kept its tag first keeps it: this one is this view's.
        let _ = self.0.set((view, tag.clone()));
        Cow::Owned(tag)
    }
}

/// A next-page link made for one organization, one request path and query and one view.
struct NextLink {
    organization_id: Box<str>,
    path_and_query: Box<str>,
    view: Option<[u8; 8]>,
    link: HeaderValue,
}

impl OrderPage {
    /// Creates a page of the first `limit` of `orders` (sorted newest first) that says
    /// whether more followed: a store reads one order more than the page holds and builds
    /// the page with this.
    pub fn first(mut orders: Vec<EncodedOrder>, limit: usize) -> Self {
        sort_newest_first(&mut orders);
        let has_more = orders.len() > limit;
        orders.truncate(limit);
        Self::new(orders).with_more(has_more)
    }

    /// Says whether more orders follow this page (default: none do).
    #[must_use]
    pub fn with_more(mut self, has_more: bool) -> Self {
        self.has_more = has_more;
        self
    }

    /// Returns whether more orders follow the page's last one: `GET /orders` then links the
    /// next page.
    pub fn has_more(&self) -> bool {
        self.has_more
    }

    /// Creates a page of `orders`, sorted newest first, after which no order follows.
    pub fn new(mut orders: Vec<EncodedOrder>) -> Self {
        sort_newest_first(&mut orders);
        let json = json_array(orders.iter().map(EncodedOrder::json));
        Self {
            orders: orders.into(),
            newest: Arc::new(Rendition::new(json.into())),
            has_more: false,
            next_link: Arc::default(),
            renditions: Arc::default(),
        }
    }

    /// Returns the orders, newest first.
    pub fn orders(&self) -> &[EncodedOrder] {
        &self.orders
    }

    /// Returns the number of orders.
    pub fn len(&self) -> usize {
        self.orders.len()
    }

    /// Returns whether the page has no order.
    pub fn is_empty(&self) -> bool {
        self.orders.is_empty()
    }

    /// Returns the JSON array of the orders, exactly as it is served at the newest API
    /// version.
    pub fn json(&self) -> &Bytes {
        &self.newest.json
    }

    /// The `Link` to the page after this one for a request of `organization_id` that came
    /// in on `path_and_query` with a key of the view `view`: made by `make` the first time,
    /// then the same for the same organization, request and view (any other is made afresh
    /// each time).
    pub(crate) fn next_link(
        &self,
        organization_id: &str,
        path_and_query: &str,
        view: Option<[u8; 8]>,
        make: impl FnOnce() -> Option<HeaderValue>,
    ) -> Option<HeaderValue> {
        if let Some(made) = self.next_link.get() {
            if *made.organization_id == *organization_id
                && *made.path_and_query == *path_and_query
                && made.view == view
            {
                return Some(made.link.clone());
            }
            return make();
        }
        let link = make()?;
        let _ = self.next_link.set(NextLink {
            organization_id: organization_id.into(),
            path_and_query: path_and_query.into(),
            view,
            link: link.clone(),
        });
        Some(link)
    }

    /// The page's JSON in the newest shape, with its tag.
    pub(crate) fn newest(&self) -> &Rendition {
        &self.newest
    }

    /// The page's JSON in the shape named `shape` (an API version's day): its orders' JSON in
    /// that shape ([`EncodedOrder::rendition`], `make` of an order's newest JSON, `None` for
    /// the same), joined the first time and kept with the page; joined afresh each time when
    /// the page keeps as many other shapes as it can.
    pub(crate) fn rendition(
        &self,
        shape: NaiveDate,
        make: impl Fn(&[u8]) -> Option<Box<[u8]>>,
    ) -> RenditionRef<'_> {
        let join = || {
            let orders = self
                .orders
                .iter()
                .map(|order| order.rendition(shape, &make));
            Rendition::new(json_array(orders.collect::<Vec<_>>().iter()).into())
        };
        match kept_for_shape(&self.renditions[..], shape, join) {
            Ok(kept) => RenditionRef::Kept(kept),
            Err(made) => RenditionRef::Made(made),
        }
    }

    /// Returns this page cut to its newest `limit` orders (more follow when it was cut).
    pub fn truncated(&self, limit: usize) -> Self {
        if self.len() <= limit {
            return self.clone();
        }
        Self::new(self.orders[..limit].to_vec()).with_more(true)
    }
}

/// A rendition of a page: kept with it, or made for one answer.
pub(crate) enum RenditionRef<'a> {
    Kept(&'a Rendition),
    Made(Rendition),
}

impl std::ops::Deref for RenditionRef<'_> {
    type Target = Rendition;

    fn deref(&self) -> &Rendition {
        match self {
            Self::Kept(rendition) => rendition,
            Self::Made(rendition) => rendition,
        }
    }
}

fn sort_newest_first(orders: &mut [EncodedOrder]) {
    if !orders.is_sorted_by(|a, b| a.order().cmp_newest_first(b.order()).is_le()) {
        orders.sort_by(|a, b| a.order().cmp_newest_first(b.order()));
    }
}

impl Default for OrderPage {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

impl FromIterator<EncodedOrder> for OrderPage {
    fn from_iter<I: IntoIterator<Item = EncodedOrder>>(orders: I) -> Self {
        Self::new(orders.into_iter().collect())
    }
}

impl fmt::Debug for OrderPage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.orders.iter().map(|order| &order.order().id))
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_pages_tag_and_link_are_kept_for_the_first_view_and_made_afresh_for_others() {
        let page = OrderPage::new(vec![EncodedOrder::new(order(
            "ord_1",
            "2026-01-01T00:00:00Z",
        ))
        .unwrap()]);
        let computed = std::cell::Cell::new(0);
        let tag_of = |view: Option<[u8; 8]>| {
            page.newest()
                .etag(view, |json| {
                    computed.set(computed.get() + 1);
                    let seen = view.map_or(0, |view| view[0]);
                    HeaderValue::from_str(&format!("\"{}-{seen}\"", json.len())).unwrap()
                })
                .into_owned()
        };
        let meta = Some([1; 8]);
        let google = Some([2; 8]);
        let kept = tag_of(meta);
        assert_eq!(tag_of(meta), kept);
        assert_eq!(computed.get(), 1, "kept for its view");
        // Another view, or none: its own tag, every time.
        assert_ne!(tag_of(google), kept);
        assert_ne!(tag_of(None), kept);
        assert_ne!(tag_of(google), kept);
        assert_eq!(computed.get(), 4);
        assert_eq!(tag_of(meta), kept);
        assert_eq!(computed.get(), 4);

        let made = std::cell::Cell::new(0);
        let link_of = |organization: &str, path: &str, view: Option<[u8; 8]>| {
            page.next_link(organization, path, view, || {
                made.set(made.get() + 1);
                let seen = view.map_or(0, |view| view[0]);
                Some(HeaderValue::from_str(&format!("<{path}>; {organization}; {seen}")).unwrap())
            })
        };
        let link = link_of("org_a", "/v1/orders", meta).unwrap();
        assert_eq!(link_of("org_a", "/v1/orders", meta).unwrap(), link);
        assert_eq!(made.get(), 1);
        for (organization, path, view) in [
            ("org_a", "/v1/orders", google),
            ("org_a", "/v1/orders", None),
            ("org_b", "/v1/orders", meta),
            ("org_a", "/v1/orders?limit=5", meta),
        ] {
            assert_ne!(link_of(organization, path, view).unwrap(), link);
        }
        assert_eq!(made.get(), 5);
    }

    #[test]
    fn an_orders_older_shapes_are_made_once_each_and_kept() {
        let encoded = EncodedOrder::new(order("ord_1", "2026-01-01T00:00:00Z")).unwrap();
        let made = std::cell::Cell::new(0);
        let shape = |day: u32| {
            let day = NaiveDate::from_ymd_opt(2026, 1, day).unwrap();
            encoded
                .rendition(day, |newest| {
                    made.set(made.get() + 1);
                    Some(format!("{day} {}", newest.len()).into_bytes().into())
                })
                .into_owned()
        };
        let newest_len = encoded.json().len();
        assert_eq!(shape(1), format!("2026-01-01 {newest_len}").into_bytes());
        assert_eq!(shape(1), format!("2026-01-01 {newest_len}").into_bytes());
        assert_eq!(made.get(), 1, "kept after the first read");
        for day in 2..=4 {
            assert_eq!(
                shape(day),
                format!("2026-01-0{day} {newest_len}").into_bytes()
            );
        }
        assert_eq!(made.get(), 4, "as many shapes as a page keeps");
        // One shape more than it keeps: made afresh on every read, the kept ones still kept.
        assert_eq!(shape(5), format!("2026-01-05 {newest_len}").into_bytes());
        assert_eq!(shape(5), format!("2026-01-05 {newest_len}").into_bytes());
        assert_eq!(shape(1), format!("2026-01-01 {newest_len}").into_bytes());
        assert_eq!(made.get(), 6);
        // A shape the order reads the same in is its newest JSON.
        let same = encoded.rendition(NaiveDate::from_ymd_opt(2026, 2, 1).unwrap(), |_| None);
        assert_eq!(&*same, encoded.json());
    }

    /// An order for tests elsewhere in the crate too.
    pub(crate) fn order(id: &str, created_at: &str) -> Order {
        Order {
            id: id.to_owned(),
            providers: vec!["meta".to_owned(), "google".to_owned()],
            advertiser_name: "Advertiser".to_owned(),
            campaign_name: "Campaign".to_owned(),
            budget_dkk: 125_000,
            start_date: NaiveDate::from_ymd_opt(2026, 3, 1).unwrap(),
            end_date: NaiveDate::from_ymd_opt(2026, 3, 31).unwrap(),
            status: "booked".to_owned(),
            external_reference: "PO-1".to_owned(),
            created_at: created_at.parse().unwrap(),
            updated_at: None,
        }
    }

    #[test]
    fn timestamp_serializes_with_milliseconds_and_z() {
        let stamp: Timestamp = "2026-03-01T08:00:00Z".parse().unwrap();
        assert_eq!(stamp.to_string(), "2026-03-01T08:00:00.000Z");
        let stamp: Timestamp = "2026-03-01T10:00:00.123456789+02:00".parse().unwrap();
        assert_eq!(stamp.to_string(), "2026-03-01T08:00:00.123Z");
        assert_eq!(
            serde_json::to_string(&stamp).unwrap(),
            "\"2026-03-01T08:00:00.123Z\""
        );
    }

    #[test]
    fn timestamp_truncates_so_equal_display_means_equal() {
        let a: Timestamp = "2026-03-01T08:00:00.1231Z".parse().unwrap();
        let b: Timestamp = "2026-03-01T08:00:00.1239Z".parse().unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn timestamp_holds_the_years_rfc_3339_can_write() {
        let earliest = Timestamp::from_unix_millis(-62_167_219_200_000).unwrap();
        assert_eq!(earliest.to_string(), "0000-01-01T00:00:00.000Z");
        let latest = Timestamp::from_unix_millis(253_402_300_799_999).unwrap();
        assert_eq!(latest.to_string(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp::from_unix_millis(-62_167_219_200_001), None);
        assert_eq!(Timestamp::from_unix_millis(253_402_300_800_000), None);
        assert_eq!(Timestamp::from_unix_millis(-300_000_000_000_000), None);
        assert_eq!(Timestamp::from_unix_millis(i64::MAX), None);
    }

    #[test]
    fn timestamp_rejects_non_rfc3339() {
        assert!("2026-03-01".parse::<Timestamp>().is_err());
        assert!("yesterday".parse::<Timestamp>().is_err());
        assert!(serde_json::from_str::<Timestamp>("12").is_err());
    }

    #[test]
    fn order_encodes_the_newest_shape_in_camel_case_updated_at_last() {
        let encoded = EncodedOrder::new(order("o1", "2026-03-01T08:00:00Z")).unwrap();
        assert_eq!(
            std::str::from_utf8(encoded.json()).unwrap(),
            r#"{"id":"o1","providers":["meta","google"],"advertiserName":"Advertiser","campaignName":"Campaign","budgetDkk":125000,"startDate":"2026-03-01","endDate":"2026-03-31","status":"booked","externalReference":"PO-1","createdAt":"2026-03-01T08:00:00.000Z","updatedAt":"2026-03-01T08:00:00.000Z"}"#
        );
        let mut changed = order("o1", "2026-03-01T08:00:00Z");
        changed.updated_at = Some("2026-03-02T09:00:00.5Z".parse().unwrap());
        let encoded = EncodedOrder::new(changed).unwrap();
        assert!(std::str::from_utf8(encoded.json()).unwrap().ends_with(
            r#""createdAt":"2026-03-01T08:00:00.000Z","updatedAt":"2026-03-02T09:00:00.500Z"}"#
        ));
    }

    #[test]
    fn a_page_sorts_newest_first_and_joins_the_json() {
        let encode = |id, at| EncodedOrder::new(order(id, at)).unwrap();
        let page = OrderPage::new(vec![
            encode("a", "2026-03-01T08:00:00Z"),
            encode("c", "2026-03-02T08:00:00Z"),
            encode("b", "2026-03-01T08:00:00Z"),
        ]);
        let ids: Vec<&str> = page
            .orders()
            .iter()
            .map(|o| o.order().id.as_str())
            .collect();
        assert_eq!(ids, ["c", "b", "a"]);
        let json: serde_json::Value = serde_json::from_slice(page.json()).unwrap();
        let json_ids: Vec<&str> = json
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["id"].as_str().unwrap())
            .collect();
        assert_eq!(json_ids, ids);
        let cut = page.truncated(2);
        assert_eq!(cut.len(), 2);
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(cut.json())
                .unwrap()
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(OrderPage::default().json().as_ref(), b"[]");
    }

    #[test]
    fn encoding_rejects_what_cannot_be_served() {
        let mut big = order("o1", "2026-03-01T08:00:00Z");
        big.budget_dkk = MAX_BUDGET_DKK + 1;
        assert!(EncodedOrder::new(big).is_err());
        let mut far = order("o2", "2026-03-01T08:00:00Z");
        far.end_date = NaiveDate::from_ymd_opt(10_000, 1, 1).unwrap();
        assert!(EncodedOrder::new(far).is_err());
        let mut max = order("o3", "2026-03-01T08:00:00Z");
        max.budget_dkk = MAX_BUDGET_DKK;
        assert!(EncodedOrder::new(max).is_ok());
    }

    #[test]
    fn budget_never_deserializes_from_negative_or_fraction() {
        let json = serde_json::to_value(order("o1", "2026-03-01T08:00:00Z")).unwrap();
        for bad in [
            serde_json::json!(-1),
            serde_json::json!(1.5),
            serde_json::json!(-1.0),
            serde_json::json!(1e300),
            serde_json::json!("1000"),
        ] {
            let mut value = json.clone();
            value["budgetDkk"] = bad.clone();
            assert!(serde_json::from_value::<Order>(value).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_whole_float_budget_reads_and_writes_as_an_integer() {
        let mut value = serde_json::to_value(order("o1", "2026-03-01T08:00:00Z")).unwrap();
        value["budgetDkk"] = serde_json::json!(1000.0);
        let order: Order = serde_json::from_value(value).unwrap();
        assert_eq!(order.budget_dkk, 1000);
        let text = String::from_utf8(EncodedOrder::new(order).unwrap().json().to_vec()).unwrap();
        assert!(text.contains(r#""budgetDkk":1000,"#), "{text}");
    }
}
