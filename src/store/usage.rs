//! Per-key usage: [`UsageStore`], the capability trait a store implements to keep each key's
//! answered requests per hour, route and outcome, and the records it takes and returns.
//!
//! The request path counts in memory and writes the counts in batches
//! ([`UsageRecorder`](crate::usage::UsageRecorder)); the management service reads them. A
//! store without it simply has no usage: the Settings page hides its charts.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Serialize, Serializer};

use crate::model::Timestamp;
use crate::store::StoreError;

/// How long usage is kept, by default: 90 days.
pub const DEFAULT_USAGE_RETENTION: Duration = Duration::from_secs(90 * 24 * 3600);

/// The route of `/v1` a request was answered on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum UsageRoute {
    /// `GET /v1/me`.
    Me,
    /// `GET /v1/orders`.
    Orders,
    /// `GET /v1/events`.
    Events,
    /// `GET /v1/deprecations`.
    Deprecations,
}

/// How a request with a key was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum UsageOutcome {
    /// `200`.
    Ok,
    /// `304`: the client's representation was current.
    NotModified,
    /// `401`: the key was revoked.
    Revoked,
    /// `401`: the key had expired.
    Expired,
    /// `403`: the key may not be used from the client's address.
    AddressNotAllowed,
    /// `403`: the key lacks the permission the route needs (`insufficient_scope`).
    PermissionMissing,
    /// `429`: the key's rate limit refused it.
    RateLimited,
    /// Any other answer to a request with a usable key: a bad query (`400`), a store that
    /// failed or was too slow (`5xx`).
    Error,
}

macro_rules! names {
    ($type:ty, $unknown:literal, $($variant:ident = $name:literal),+ $(,)?) => {
        impl $type {
            /// Every value, in order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// Its name in the API and the database.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $name),+
                }
            }
        }

        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $type {
            type Err = StoreError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                match text {
                    $($name => Ok(Self::$variant),)+
                    _ => Err(StoreError::invalid_data(format!(concat!($unknown, " {:?}"), text))),
                }
            }
        }

        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }
    };
}

names!(
    UsageRoute,
    "unknown usage route",
    Me = "/me",
    Orders = "/orders",
    Events = "/events",
    Deprecations = "/deprecations"
);
names!(
    UsageOutcome,
    "unknown usage outcome",
    Ok = "ok",
    NotModified = "not_modified",
    Revoked = "revoked",
    Expired = "expired",
    AddressNotAllowed = "address_not_allowed",
    PermissionMissing = "permission_missing",
    RateLimited = "rate_limited",
    Error = "error",
);

/// How finely usage is read: per hour or per day (UTC).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UsageGranularity {
    /// One bucket per hour.
    Hour,
    /// One bucket per UTC day.
    Day,
}

names!(
    UsageGranularity,
    "unknown granularity",
    Hour = "hour",
    Day = "day"
);

/// Requests of one key in one hour on one route with one outcome: what the recorder writes.
/// A store adds `count` to what it holds for the same key, hour, route and outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageCount {
    /// The key's id.
    pub key_id: String,
    /// The start of the hour (UTC), to the hour.
    pub hour: Timestamp,
    /// The route.
    pub route: UsageRoute,
    /// The outcome.
    pub outcome: UsageOutcome,
    /// How many requests.
    pub count: u64,
}

/// One bucket of a key's usage: its requests from `start` for an hour or a day, per route
/// and outcome. Buckets without requests are left out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct UsageBucket {
    /// The start of the bucket (UTC).
    pub start: Timestamp,
    /// The route.
    pub route: UsageRoute,
    /// The outcome.
    pub outcome: UsageOutcome,
    /// How many requests.
    pub count: u64,
}

/// One key's requests over a period, per outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyUsageTotal {
    /// The key's id.
    pub key_id: String,
    /// The outcome.
    pub outcome: UsageOutcome,
    /// How many requests.
    pub count: u64,
}

/// The period a usage read covers: from `from` (inclusive) to `to` (exclusive).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsagePeriod {
    /// The first instant.
    pub from: Timestamp,
    /// The end, not included.
    pub to: Timestamp,
}

/// Keeps each key's usage per hour, route and outcome: a capability of its own, which a
/// host's store may leave out (the management service then answers its usage routes 404,
/// `GET /abilities` says `"usage": false`, and the Settings page hides usage).
///
/// Scoped like [`KeyManager`](crate::store::KeyManager): reading the usage of another
/// organization's key is `NotFound`, as for a key that does not exist.
/// [`MemoryStore`](crate::MemoryStore) and `PgStore` implement it with the same semantics;
/// `testing::run_usage` checks any implementation.
#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Adds `counts` to the stored usage, in one write: a count for a key, hour, route and
    /// outcome already held is added to. Counts of keys the store does not know are
    /// dropped.
    ///
    /// # Errors
    ///
    /// The store's; nothing is written then, so the caller may send the same counts again.
    async fn record_usage(&self, counts: &[UsageCount]) -> Result<(), StoreError>;

    /// Reads the usage of the key `key_id` of the organization over `period`, in buckets of
    /// `granularity`, oldest first, then by route and outcome.
    ///
    /// # Errors
    ///
    /// `NotFound` when the organization has no such key; the store's.
    async fn key_usage(
        &self,
        organization_id: &str,
        key_id: &str,
        period: UsagePeriod,
        granularity: UsageGranularity,
    ) -> Result<Vec<UsageBucket>, StoreError>;

    /// Reads the totals of every key of the organization over `period`, per outcome, by key
    /// id then outcome; keys without requests are left out.
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown organization; the store's.
    async fn usage_totals(
        &self,
        organization_id: &str,
        period: UsagePeriod,
    ) -> Result<Vec<KeyUsageTotal>, StoreError>;

    /// Deletes at most `batch` counts (one key's requests in one hour on one route with one
    /// outcome), oldest first, of hours that began more than `older_than` ago by the store's
    /// clock, and returns how many it deleted, so a retention task deletes in small steps.
    ///
    /// # Errors
    ///
    /// The store's.
    async fn prune_usage(&self, older_than: Duration, batch: u32) -> Result<u64, StoreError>;
}

/// The start of the hour of `millis`, in milliseconds since the Unix epoch.
pub(crate) fn hour_of_millis(millis: i64) -> i64 {
    millis - millis.rem_euclid(3_600_000)
}

/// The start of the UTC day of `millis`, in milliseconds since the Unix epoch.
pub(crate) fn day_of_millis(millis: i64) -> i64 {
    millis - millis.rem_euclid(86_400_000)
}
