//! The deprecations a host declared, as the request path uses them: which of them concern a
//! request (matched once per request, kept as a bitmask), the notices they add to its answer,
//! the 410 past an enforced sunset, the count of a key's deprecated calls, and what
//! `GET /deprecations` lists.

use std::sync::Arc;

use chrono::NaiveDate;
use http::{HeaderName, HeaderValue};

use crate::api::routes::Route;
use crate::deprecated_calls::DeprecatedCallRecorder;
use crate::deprecation::{DeprecatedRoute, Deprecation};
use crate::store::DeprecatedCallTotal;
use crate::versions::ApiVersion;

/// The most deprecations one API declares: one bit each in [`Concerned`].
pub(crate) const MAX_DEPRECATIONS: usize = 64;

/// The headers deprecations add to an answer, shared: an answer clones two reference counts.
pub(crate) type Notices = Arc<[(HeaderName, HeaderValue)]>;

/// The deprecations of an API, each with its target as one shared string (what a counted
/// call names, so counting one allocates nothing) and the headers it adds alone (what most
/// requests a deprecation concerns carry, made once).
#[derive(Clone, Default)]
pub(crate) struct Deprecations {
    declared: Arc<[(Deprecation, Arc<str>, Notices)]>,
}

/// Which of an API's deprecations concern a request: bit `i` for the `i`-th declared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Concerned(u64);

impl Concerned {
    pub(crate) fn is_none(self) -> bool {
        self.0 == 0
    }

    fn has(self, index: usize) -> bool {
        self.0 & (1 << index) != 0
    }
}

impl Deprecations {
    /// These and `deprecation`, which replaces one of the same target (a route, or a route's
    /// parameter, is deprecated once).
    ///
    /// # Panics
    ///
    /// Past [`MAX_DEPRECATIONS`] targets.
    pub(crate) fn with(&self, deprecation: Deprecation) -> Self {
        let target: Arc<str> = deprecation.target().into();
        let mut declared = self.declared.to_vec();
        declared.retain(|(_, held, _)| *held != target);
        assert!(
            declared.len() < MAX_DEPRECATIONS,
            "an API declares at most {MAX_DEPRECATIONS} deprecations"
        );
        let alone = crate::deprecation::notices([&deprecation]).into();
        declared.push((deprecation, target, alone));
        Self {
            declared: declared.into(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.declared.is_empty()
    }

    /// Every deprecation, in the order declared.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Deprecation> {
        self.declared.iter().map(|(deprecation, ..)| deprecation)
    }

    /// The deprecations that concern a request of `route` with `query`.
    pub(crate) fn concerning(&self, route: Route, query: Option<&str>) -> Concerned {
        let route = match route {
            Route::Me => DeprecatedRoute::Me,
            Route::Orders => DeprecatedRoute::Orders,
            Route::Events => DeprecatedRoute::Events,
            Route::Deprecations | Route::Versions | Route::OpenApi => return Concerned::default(),
        };
        let mut concerned = 0;
        for (index, (deprecation, ..)) in self.declared.iter().enumerate() {
            if deprecation.concerns(route, query) {
                concerned |= 1 << index;
            }
        }
        Concerned(concerned)
    }

    fn concerned(
        &self,
        concerned: Concerned,
    ) -> impl Iterator<Item = &(Deprecation, Arc<str>, Notices)> {
        self.declared
            .iter()
            .enumerate()
            .filter(move |(index, _)| concerned.has(*index))
            .map(|(_, declared)| declared)
    }

    /// The headers the `concerned` deprecations add to an answer: one deprecation's made
    /// once, several merged.
    pub(crate) fn notices(&self, concerned: Concerned) -> Notices {
        let mut each = self.concerned(concerned);
        match (each.next(), each.next()) {
            (Some((_, _, alone)), None) => alone.clone(),
            _ => crate::deprecation::notices(
                self.concerned(concerned)
                    .map(|(deprecation, ..)| deprecation),
            )
            .into(),
        }
    }

    /// The first of the `concerned` deprecations that is enforced and past its sunset on
    /// `today`, by its place among the declared.
    pub(crate) fn gone(&self, concerned: Concerned, today: NaiveDate) -> Option<usize> {
        self.declared
            .iter()
            .enumerate()
            .find(|(index, (deprecation, ..))| concerned.has(*index) && deprecation.is_gone(today))
            .map(|(index, _)| index)
    }

    /// The place among the declared of the deprecation of the API version `version`, if it is
    /// deprecated.
    pub(crate) fn of_version(&self, version: ApiVersion) -> Option<usize> {
        self.declared
            .iter()
            .position(|(deprecation, ..)| deprecation.version() == Some(version))
    }

    /// The headers the deprecation at `index` adds alone.
    pub(crate) fn notices_of(&self, index: usize) -> Option<&Notices> {
        self.declared.get(index).map(|(_, _, alone)| alone)
    }

    /// The deprecation declared at `index`.
    pub(crate) fn get(&self, index: usize) -> Option<&Deprecation> {
        self.declared
            .get(index)
            .map(|(deprecation, ..)| deprecation)
    }

    /// Counts a call of the key `key_id` of each of the `concerned` deprecations.
    pub(crate) fn count(
        &self,
        recorder: &DeprecatedCallRecorder,
        key_id: &Arc<str>,
        concerned: Concerned,
    ) {
        for (_, target, _) in self.concerned(concerned) {
            recorder.record(key_id, target);
        }
    }

    /// What `GET /deprecations` lists: each deprecation, with the key's calls of it in the
    /// last 30 days (`calls`, its totals; `None` when calls are not recorded).
    pub(crate) fn listed(&self, calls: Option<&[DeprecatedCallTotal]>) -> serde_json::Value {
        // A version's deprecation is in `GET /versions`: this list keeps its shape.
        let listed: Vec<serde_json::Value> = self
            .declared
            .iter()
            .filter(|(deprecation, ..)| deprecation.route().is_some())
            .map(|(deprecation, target, _)| {
                let total = calls.map(|calls| calls.iter().find(|t| *t.target == **target));
                let mut listed = serde_json::to_value(deprecation).unwrap_or_default();
                listed["calls"] = total
                    .map(|total| total.map_or(0, |total| total.calls))
                    .into();
                listed["lastCallAt"] =
                    serde_json::to_value(total.flatten().map(|t| t.last_call_at))
                        .unwrap_or_default();
                listed
            })
            .collect();
        listed.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared() -> Deprecations {
        let mut deprecations = Deprecations::default();
        for text in [
            "/orders?provider=2026-01-01,sunset=2026-02-01,enforce",
            "/me=2026-01-01",
            "/orders=2026-03-01",
        ] {
            deprecations = deprecations.with(text.parse().unwrap());
        }
        deprecations
    }

    #[test]
    fn a_request_is_matched_once_into_the_deprecations_that_concern_it() {
        let deprecations = declared();
        let concerned = deprecations.concerning(Route::Orders, Some("provider=x"));
        assert_eq!(concerned, Concerned(0b101));
        assert_eq!(
            deprecations.concerning(Route::Orders, None),
            Concerned(0b100)
        );
        assert!(deprecations
            .concerning(Route::Deprecations, Some("provider=x"))
            .is_none());
        let day = |text: &str| text.parse::<NaiveDate>().unwrap();
        assert!(deprecations.gone(concerned, day("2026-01-31")).is_none());
        assert_eq!(
            deprecations
                .gone(concerned, day("2026-02-01"))
                .and_then(|index| deprecations.get(index))
                .map(Deprecation::target),
            Some("/orders?provider".to_owned())
        );
        // Only the concerned: /me's is not enforced and /orders' alone has no sunset.
        assert!(deprecations
            .gone(Concerned(0b100), day("2030-01-01"))
            .is_none());
    }

    #[test]
    fn a_target_declared_again_replaces_its_deprecation() {
        let deprecations = Deprecations::default()
            .with("/me=2026-01-01".parse().unwrap())
            .with("/orders=2026-01-01".parse().unwrap())
            .with("/me=2026-03-01,sunset=2026-04-01".parse().unwrap());
        let listed: Vec<String> = deprecations
            .iter()
            .map(|deprecation| format!("{} {}", deprecation.target(), deprecation.since()))
            .collect();
        assert_eq!(listed, ["/orders 2026-01-01", "/me 2026-03-01"]);
        assert_eq!(
            deprecations.concerning(Route::Me, None),
            Concerned(0b10),
            "one bit, so one count"
        );
    }

    #[test]
    #[should_panic(expected = "at most 64")]
    fn more_than_a_mask_holds_is_refused() {
        let mut deprecations = Deprecations::default();
        for index in 0..=MAX_DEPRECATIONS {
            deprecations = deprecations.with(format!("/me?p{index}=2026-01-01").parse().unwrap());
        }
    }
}
