//! Date-named versions of the API: which shape a key is answered in.
//!
//! A version is named by the day it was released ([`ApiVersion`], `YYYY-MM-DD`). The API
//! builds every answer in the newest shape only; an older version's answer is the newest one
//! walked back through each change released after it, newest first ([`VersionChange`]: a
//! change's transforms turn the newer shape into the older). The chain the crate serves is
//! declared in one place, [`Versions::shipped`]; its changelog is made from the changes'
//! descriptions ([`Versions::changelog`]), never written twice.
//!
//! A request names its version in a header (`Api-Version` by default); without one it is
//! answered at its key's pinned version, and a key whose store records none (every key that
//! existed before versions, a seed file's) at the first version, which is the API's shape
//! before versions existed, byte for byte. [`docs::versions`](crate::docs::versions) says it
//! all from a partner's side.
//!
//! ```
//! use partner_api::versions::{ApiVersion, Versions};
//!
//! let versions = Versions::shipped();
//! assert_eq!(versions.first(), partner_api::versions::FIRST);
//! assert_eq!(versions.newest(), partner_api::versions::KEY_ACCESS);
//! assert!(versions.offers("2026-11-27".parse::<ApiVersion>().unwrap()));
//! assert!("2026-2-1".parse::<ApiVersion>().is_err());
//! ```

mod fields;
mod key_access;
mod updated_at;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use chrono::NaiveDate;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub use fields::Fields;
pub use key_access::MeKeyAccess;
pub use updated_at::OrderUpdatedAt;

/// The first version: the API's shape before versions existed, byte for byte. Every key
/// whose store records no version is answered at it.
pub const FIRST: ApiVersion = ApiVersion::from_ymd(2026, 11, 27);

/// The version that added `updatedAt` to orders and the `updated_since` and
/// `updated_before` filters ([`OrderUpdatedAt`]).
pub const UPDATED_AT: ApiVersion = ApiVersion::from_ymd(2026, 11, 28);

/// The version that added what the key may read to `GET /me` ([`MeKeyAccess`]): the newest.
pub const KEY_ACCESS: ApiVersion = ApiVersion::from_ymd(2026, 12, 1);

/// The newest version the crate serves: what a key is pinned to when issued, unless its
/// issuer names another.
pub const NEWEST: ApiVersion = KEY_ACCESS;

/// The default name of the request header that names a request's version, and of the
/// response header that says which version answered.
pub const DEFAULT_VERSION_HEADER: &str = "api-version";

/// A version of the API, named by the day it was released: `YYYY-MM-DD`.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion(NaiveDate);

impl ApiVersion {
    /// The version released on `year-month-day`.
    ///
    /// # Panics
    ///
    /// When that is no date (a constant's mistake, caught at compile time in a `const`).
    pub const fn from_ymd(year: i32, month: u32, day: u32) -> Self {
        match NaiveDate::from_ymd_opt(year, month, day) {
            Some(date) => Self(date),
            None => panic!("an API version is named by a real date"),
        }
    }

    /// The version released on `date`.
    pub fn from_date(date: NaiveDate) -> Self {
        Self(date)
    }

    /// The day the version was released.
    pub fn date(self) -> NaiveDate {
        self.0
    }
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.format("%Y-%m-%d"))
    }
}

impl fmt::Debug for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A version name that is not `YYYY-MM-DD` with a real date.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidVersionName;

impl fmt::Display for InvalidVersionName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an API version is a date written YYYY-MM-DD")
    }
}

impl std::error::Error for InvalidVersionName {}

impl FromStr for ApiVersion {
    type Err = InvalidVersionName;

    /// Reads exactly `YYYY-MM-DD` (ten characters, a real date): one version has one name.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        let bytes = name.as_bytes();
        let shaped = bytes.len() == 10
            && bytes[4] == b'-'
            && bytes[7] == b'-'
            && bytes
                .iter()
                .enumerate()
                .all(|(index, byte)| index == 4 || index == 7 || byte.is_ascii_digit());
        if !shaped {
            return Err(InvalidVersionName);
        }
        NaiveDate::parse_from_str(name, "%Y-%m-%d")
            .map(Self)
            .map_err(|_| InvalidVersionName)
    }
}

impl Serialize for ApiVersion {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ApiVersion {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

/// A resource whose shape a change touches, wherever it is served.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resource {
    /// An order: in `GET /orders`, in an event's `data`, in a webhook's body.
    Order,
    /// The organization of `GET /me` (`data.organization`).
    Organization,
    /// The members of `GET /me`'s `data` beside its `organization` (what the key may read,
    /// from [`KEY_ACCESS`]).
    Me,
}

/// One breaking change: what a version changed, with the transforms that answer the version
/// before it as that version answered.
///
/// Each change is a unit of its own (the crate's are files of `src/versions/`). Its
/// transforms take the newer shape and give the older one; the request path builds the
/// newest shape only and walks it back through the changes released after the version asked
/// for, newest first.
pub trait VersionChange: Send + Sync + 'static {
    /// What changed, as the changelog and `GET /versions` say it.
    fn description(&self) -> &'static str;

    /// The routes whose answers or requests the change touches (paths below the prefix, such
    /// as `/orders`): a test checks that each is a route of the API.
    fn routes(&self) -> &'static [&'static str];

    /// The resources whose shape the change touches: [`order`](Self::order) and
    /// [`organization`](Self::organization) are called only for those.
    fn resources(&self) -> &'static [Resource] {
        &[]
    }

    /// Turns an order in the newer shape into the older one.
    fn order(&self, order: &mut Fields) {
        let _ = order;
    }

    /// Turns the organization of `GET /me` in the newer shape into the older one.
    fn organization(&self, organization: &mut Fields) {
        let _ = organization;
    }

    /// Turns the members of `GET /me`'s `data` beside its `organization` in the newer shape
    /// into the older ones (the organization itself is [`organization`](Self::organization)'s).
    fn me(&self, data: &mut Fields) {
        let _ = data;
    }

    /// Turns a request's query parameters (each `name=value` as sent, undecoded) of `route`
    /// into what the older version read: a parameter the older version did not have is
    /// removed, so it is answered as that version answered an unknown parameter.
    fn query(&self, route: &str, parameters: &mut Vec<String>) {
        let _ = (route, parameters);
    }

    /// The routes the change added: not found at the versions before it.
    fn added_routes(&self) -> &'static [&'static str] {
        &[]
    }
}

/// One released version after the first: its date and its changes.
struct Release {
    version: ApiVersion,
    changes: Vec<Arc<dyn VersionChange>>,
}

/// A chain of versions: the first, and each later one with its changes, oldest first.
///
/// Cloning shares the chain.
#[derive(Clone)]
pub struct Versions {
    first: ApiVersion,
    releases: Arc<[Release]>,
    /// What the changes after each offered version touch, worked out once when the chain is
    /// declared: the request path asks it of every request, and a walk of the chain per
    /// question would cost each request more with every version released.
    after: Arc<[AfterVersion]>,
}

/// What the changes released after `version` touch.
struct AfterVersion {
    version: ApiVersion,
    /// The resources they reshape.
    resources: Vec<Resource>,
    /// The routes they added.
    added_routes: Vec<&'static str>,
}

impl AfterVersion {
    fn of(version: ApiVersion, releases: &[Release]) -> Self {
        let mut facts = Self {
            version,
            resources: Vec::new(),
            added_routes: Vec::new(),
        };
        let changes = releases
            .iter()
            .filter(|release| release.version > version)
            .flat_map(|release| release.changes.iter());
        for change in changes {
            for resource in change.resources() {
                if !facts.resources.contains(resource) {
                    facts.resources.push(*resource);
                }
            }
            facts.added_routes.extend(change.added_routes());
        }
        facts.added_routes.sort_unstable();
        facts.added_routes.dedup();
        facts
    }
}

/// A version declared out of order: each must be later than the one before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionOutOfOrder {
    /// The version declared.
    pub version: ApiVersion,
    /// The newest version before it, which it does not follow.
    pub after: ApiVersion,
}

impl fmt::Display for VersionOutOfOrder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "API version {} must be later than the version before it, {}",
            self.version, self.after
        )
    }
}

impl std::error::Error for VersionOutOfOrder {}

impl Versions {
    /// A chain of one version, `first`: every request is answered in the newest shape.
    pub fn new(first: ApiVersion) -> Self {
        Self::of(first, Vec::new())
    }

    /// The chain of `first` and `releases`, with what follows each version worked out.
    fn of(first: ApiVersion, releases: Vec<Release>) -> Self {
        let after = std::iter::once(first)
            .chain(releases.iter().map(|release| release.version))
            .map(|version| AfterVersion::of(version, &releases))
            .collect();
        Self {
            first,
            releases: releases.into(),
            after,
        }
    }

    /// What follows `version`, when it is one of the chain's.
    fn after(&self, version: ApiVersion) -> Option<&AfterVersion> {
        self.after.iter().find(|after| after.version == version)
    }

    /// The crate's chain, declared here and nowhere else: [`FIRST`], then [`UPDATED_AT`]
    /// with [`OrderUpdatedAt`], then [`KEY_ACCESS`] with [`MeKeyAccess`].
    pub fn shipped() -> Self {
        Self::new(FIRST)
            .with_version(UPDATED_AT, [Arc::new(OrderUpdatedAt) as _])
            .and_then(|versions| versions.with_version(KEY_ACCESS, [Arc::new(MeKeyAccess) as _]))
            .expect("the shipped versions are in order (tested)")
    }

    /// The chain with `version`, released after the newest so far with `changes`.
    ///
    /// # Errors
    ///
    /// [`VersionOutOfOrder`] when `version` is not later than the newest so far.
    pub fn with_version(
        self,
        version: ApiVersion,
        changes: impl IntoIterator<Item = Arc<dyn VersionChange>>,
    ) -> Result<Self, VersionOutOfOrder> {
        let newest = self.newest();
        if version <= newest {
            return Err(VersionOutOfOrder {
                version,
                after: newest,
            });
        }
        let mut releases: Vec<Release> = Vec::with_capacity(self.releases.len() + 1);
        for release in self.releases.iter() {
            releases.push(Release {
                version: release.version,
                changes: release.changes.clone(),
            });
        }
        releases.push(Release {
            version,
            changes: changes.into_iter().collect(),
        });
        Ok(Self::of(self.first, releases))
    }

    /// Whether `other` is this chain, not merely an equal one: what a cache of answers keys on.
    pub(crate) fn is(&self, other: &Self) -> bool {
        self.first == other.first && Arc::ptr_eq(&self.releases, &other.releases)
    }

    /// The first version.
    pub fn first(&self) -> ApiVersion {
        self.first
    }

    /// The newest version: the shape the request path builds.
    pub fn newest(&self) -> ApiVersion {
        self.releases
            .last()
            .map_or(self.first, |release| release.version)
    }

    /// Whether `version` is one of the chain's.
    pub fn offers(&self, version: ApiVersion) -> bool {
        version == self.first || self.releases.iter().any(|r| r.version == version)
    }

    /// The versions, newest first.
    pub fn offered(&self) -> impl Iterator<Item = ApiVersion> + '_ {
        self.releases
            .iter()
            .rev()
            .map(|release| release.version)
            .chain(std::iter::once(self.first))
    }

    /// The changes `version` brought, in their declared order (none for the first).
    pub fn changes_of(&self, version: ApiVersion) -> impl Iterator<Item = &dyn VersionChange> {
        self.releases
            .iter()
            .filter(move |release| release.version == version)
            .flat_map(|release| release.changes.iter().map(|change| &**change))
    }

    /// The changes released after `version`, newest first: what an answer in the newest
    /// shape is walked back through to be `version`'s.
    pub fn changes_after(&self, version: ApiVersion) -> impl Iterator<Item = &dyn VersionChange> {
        self.releases
            .iter()
            .rev()
            .take_while(move |release| release.version > version)
            .flat_map(|release| release.changes.iter().rev().map(|change| &**change))
    }

    /// Whether an answer at `version` differs from the newest in `resource`'s shape.
    pub fn reshapes(&self, version: ApiVersion, resource: Resource) -> bool {
        match self.after(version) {
            Some(after) => after.resources.contains(&resource),
            None => self
                .changes_after(version)
                .any(|change| change.resources().contains(&resource)),
        }
    }

    /// The JSON object `newest` of a `resource` (an order, an organization) in the newest
    /// shape, as `version` answers it; `None` when `version` answers it as the newest does.
    ///
    /// # Errors
    ///
    /// When `newest` is not a JSON object.
    pub fn render(
        &self,
        resource: Resource,
        newest: &[u8],
        version: ApiVersion,
    ) -> Result<Option<Vec<u8>>, serde_json::Error> {
        if !self.reshapes(version, resource) {
            return Ok(None);
        }
        let mut fields = Fields::from_json(newest)?;
        self.walk_back(resource, &mut fields, version);
        Ok(Some(fields.to_json()))
    }

    /// The `data` object of `GET /me` as `version` answers it: `organization` (the
    /// organization's JSON object) and `beside` (a JSON object of the members that follow it),
    /// both in the newest shape. The organization stays the first member, its bytes as given
    /// when no change after `version` reshapes it.
    ///
    /// # Errors
    ///
    /// When `organization` or `beside` is not a JSON object.
    pub fn me_data(
        &self,
        version: ApiVersion,
        organization: &[u8],
        beside: &[u8],
    ) -> Result<Vec<u8>, serde_json::Error> {
        let older;
        let organization = match self.render(Resource::Organization, organization, version)? {
            Some(shaped) => {
                older = shaped;
                older.as_slice()
            }
            None => organization,
        };
        let beside = match self.render(Resource::Me, beside, version)? {
            Some(shaped) => shaped,
            None => beside.to_vec(),
        };
        let mut data = Vec::with_capacity(organization.len() + beside.len() + 16);
        data.extend_from_slice(br#"{"organization":"#);
        data.extend_from_slice(organization);
        match beside.strip_prefix(b"{") {
            Some(rest) if rest != b"}" => {
                data.push(b',');
                data.extend_from_slice(rest);
            }
            _ => data.push(b'}'),
        }
        Ok(data)
    }

    /// Turns `fields`, a `resource` in the newest shape, into `version`'s.
    pub fn walk_back(&self, resource: Resource, fields: &mut Fields, version: ApiVersion) {
        for change in self.changes_after(version) {
            if change.resources().contains(&resource) {
                match resource {
                    Resource::Order => change.order(fields),
                    Resource::Organization => change.organization(fields),
                    Resource::Me => change.me(fields),
                }
            }
        }
    }

    /// The query string `query` of a request to `route` as `version` reads it; `None` when
    /// it reads it as the newest does.
    pub fn query_at(&self, route: &str, query: &str, version: ApiVersion) -> Option<String> {
        // A change only removes parameters (`VersionChange::query`), so a request without
        // any reads the same at every version: most requests, spared the chain's walk.
        if query.is_empty() {
            return None;
        }
        let mut changes = self
            .changes_after(version)
            .filter(|change| change.routes().contains(&route))
            .peekable();
        changes.peek()?;
        let mut parameters: Vec<String> = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(str::to_owned)
            .collect();
        for change in changes {
            change.query(route, &mut parameters);
        }
        let older = parameters.join("&");
        (older != query).then_some(older)
    }

    /// Whether `route` exists at `version`: not when a later change added it.
    pub fn has_route(&self, route: &str, version: ApiVersion) -> bool {
        match self.after(version) {
            Some(after) => !after.added_routes.contains(&route),
            None => !self
                .changes_after(version)
                .any(|change| change.added_routes().contains(&route)),
        }
    }

    /// The changelog, made from the changes' descriptions: a Markdown section per version,
    /// newest first.
    pub fn changelog(&self) -> String {
        let mut log = String::new();
        for version in self.offered() {
            log.push_str(&format!("## {version}\n\n"));
            let mut any = false;
            for change in self.changes_of(version) {
                any = true;
                log.push_str(&format!("- {}\n", change.description()));
            }
            if !any {
                log.push_str("- The first version: the API's shape before versions.\n");
            }
            log.push('\n');
        }
        log
    }
}

/// The `data` of an order's webhook, `newest` in the newest shape, as an endpoint pinned to
/// `version` is sent it (`None`: an endpoint added before endpoints had versions, which reads
/// the first, so none of its bodies changes by a byte). Webhooks follow the shipped chain.
#[cfg(feature = "webhooks")]
pub(crate) fn webhook_order(newest: bytes::Bytes, version: Option<ApiVersion>) -> bytes::Bytes {
    static SHIPPED: std::sync::OnceLock<Versions> = std::sync::OnceLock::new();
    let shipped = SHIPPED.get_or_init(Versions::shipped);
    match shipped.render(Resource::Order, &newest, version.unwrap_or(FIRST)) {
        Ok(Some(older)) => older.into(),
        // The newest shape, or not an object (the unshowable mark, the same at every version).
        Ok(None) | Err(_) => newest,
    }
}

/// Serializes a pinned version as the version it reads: `None` (a record from before
/// versions, or from a store that records none) as the first.
pub(crate) fn serialize_pinned<S: serde::Serializer>(
    version: &Option<ApiVersion>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serde::Serialize::serialize(&version.unwrap_or(FIRST), serializer)
}

impl Default for Versions {
    /// [`Versions::shipped`].
    fn default() -> Self {
        Self::shipped()
    }
}

impl fmt::Debug for Versions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.offered()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_exactly_a_real_date() {
        assert_eq!("2026-11-27".parse::<ApiVersion>(), Ok(FIRST));
        assert_eq!(FIRST.to_string(), "2026-11-27");
        for bad in [
            "",
            "2026-11-7",
            "2026-13-01",
            "2026-02-30",
            "20261127",
            " 2026-11-27",
            "2026-11-27T00:00:00Z",
            "+026-11-27",
        ] {
            assert_eq!(
                bad.parse::<ApiVersion>(),
                Err(InvalidVersionName),
                "{bad:?}"
            );
        }
        assert_eq!(
            serde_json::to_string(&UPDATED_AT).unwrap(),
            "\"2026-11-28\""
        );
    }

    /// A change that adds a route and reshapes the organization, for the facts' test.
    struct AddsRoute;

    impl VersionChange for AddsRoute {
        fn description(&self) -> &'static str {
            "adds /reports"
        }
        fn routes(&self) -> &'static [&'static str] {
            &["/reports"]
        }
        fn resources(&self) -> &'static [Resource] {
            &[Resource::Organization]
        }
        fn added_routes(&self) -> &'static [&'static str] {
            &["/reports"]
        }
    }

    #[test]
    fn the_facts_kept_per_version_agree_with_a_walk_of_the_chain() {
        let chain = Versions::shipped()
            .with_version(ApiVersion::from_ymd(2027, 1, 1), [Arc::new(AddsRoute) as _])
            .unwrap();
        let unknown = ApiVersion::from_ymd(2026, 11, 30);
        for version in chain.offered().chain([unknown]) {
            for resource in [Resource::Order, Resource::Organization, Resource::Me] {
                assert_eq!(
                    chain.reshapes(version, resource),
                    chain
                        .changes_after(version)
                        .any(|change| change.resources().contains(&resource)),
                    "{version} {resource:?}"
                );
            }
            for route in ["/reports", "/orders", "/me"] {
                assert_eq!(
                    chain.has_route(route, version),
                    !chain
                        .changes_after(version)
                        .any(|change| change.added_routes().contains(&route)),
                    "{version} {route}"
                );
            }
        }
        assert!(!chain.has_route("/reports", KEY_ACCESS));
        assert!(chain.has_route("/reports", ApiVersion::from_ymd(2027, 1, 1)));
        assert!(chain.reshapes(FIRST, Resource::Organization));
    }

    #[test]
    fn the_shipped_chain_is_in_order_and_offered_newest_first() {
        let versions = Versions::shipped();
        assert_eq!(
            versions.offered().collect::<Vec<_>>(),
            [KEY_ACCESS, UPDATED_AT, FIRST]
        );
        assert_eq!(versions.newest(), NEWEST);
        assert!(versions.offers(FIRST) && versions.offers(UPDATED_AT));
        assert!(!versions.offers(ApiVersion::from_ymd(2026, 11, 29)));
        assert_eq!(
            versions.clone().with_version(UPDATED_AT, []).err(),
            Some(VersionOutOfOrder {
                version: UPDATED_AT,
                after: KEY_ACCESS
            })
        );
        assert!(versions.reshapes(FIRST, Resource::Order));
        assert!(!versions.reshapes(UPDATED_AT, Resource::Order));
        assert!(!versions.reshapes(FIRST, Resource::Organization));
        assert!(versions.reshapes(UPDATED_AT, Resource::Me));
        assert!(!versions.reshapes(KEY_ACCESS, Resource::Me));
        let log = versions.changelog();
        assert!(log.starts_with("## 2026-12-01\n\n- `GET /me` has"), "{log}");
        assert!(log.contains("## 2026-11-28\n\n- Orders have"), "{log}");
        assert!(
            log.contains("## 2026-11-27\n\n- The first version"),
            "{log}"
        );
    }
}
