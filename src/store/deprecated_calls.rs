//! Who still calls what is deprecated: [`DeprecatedCallStore`], the capability trait a store
//! implements to keep each key's calls of deprecated routes and parameters per UTC day, and
//! the records it takes and returns.
//!
//! The request path counts in memory and writes the counts in batches
//! ([`DeprecatedCallRecorder`](crate::deprecated_calls::DeprecatedCallRecorder)); the
//! management service (`GET /deprecated-calls`) and the partner itself (`GET /deprecations`)
//! read them.

use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;

use crate::model::Timestamp;
use crate::store::StoreError;

/// How far back a read of deprecated calls looks: the last 30 days.
pub const DEPRECATED_CALLS_PERIOD: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long deprecated calls are kept, by default: 31 days, the period read and the day it
/// began in.
pub const DEFAULT_DEPRECATED_CALLS_RETENTION: Duration = Duration::from_secs(31 * 24 * 3600);

/// Calls of one key on one UTC day of one deprecated target: what the recorder writes. A
/// store adds `calls` to what it holds for the same key, day and target, and keeps the later
/// of the two last calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeprecatedCallCount {
    /// The key's id.
    pub key_id: String,
    /// The start of the UTC day.
    pub day: Timestamp,
    /// What was called: a route (`/orders`), a route's parameter (`/orders?provider`), or an
    /// API version (`2026-11-28`, a call served at it), as
    /// [`Deprecation::target`](crate::deprecation::Deprecation::target) names it.
    pub target: String,
    /// How many calls.
    pub calls: u64,
    /// The last of them.
    pub last_call_at: Timestamp,
}

/// One key's calls of one deprecated target since a time: how many, and the last.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeprecatedCallTotal {
    /// The key's id.
    pub key_id: String,
    /// What was called, as in [`DeprecatedCallCount::target`].
    pub target: String,
    /// How many calls.
    pub calls: u64,
    /// The last of them.
    pub last_call_at: Timestamp,
}

/// Keeps each key's calls of deprecated routes and parameters per UTC day: a capability of
/// its own, which a host's store may leave out (the management service then answers
/// `GET /deprecated-calls` 404, `GET /abilities` says `"deprecatedCalls": false`, and
/// `GET /deprecations` tells a partner no last call).
///
/// Scoped like [`UsageStore`](crate::store::UsageStore): a read names the organization, and
/// sees only its keys. [`MemoryStore`](crate::MemoryStore) and `PgStore` implement it with
/// the same semantics; `testing::run_deprecated_calls` checks any implementation.
#[async_trait]
pub trait DeprecatedCallStore: Send + Sync {
    /// Adds `counts` to the stored calls, in one write: a count for a key, day and target
    /// already held is added to, and its last call is the later of the two. Counts of keys
    /// the store does not know are dropped.
    ///
    /// # Errors
    ///
    /// The store's; nothing is written then, so the caller may send the same counts again.
    async fn record_deprecated_calls(
        &self,
        counts: &[DeprecatedCallCount],
    ) -> Result<(), StoreError>;

    /// Reads the calls of the organization's keys (of the key `key_id` only, when given) on
    /// the UTC days from the one `since` falls in, summed per key and target, by target then
    /// key id.
    ///
    /// # Errors
    ///
    /// `NotFound` for an unknown organization when no key is given (with a key, a key of no
    /// such organization simply has no calls); the store's.
    async fn deprecated_calls(
        &self,
        organization_id: &str,
        key_id: Option<&str>,
        since: Timestamp,
    ) -> Result<Vec<DeprecatedCallTotal>, StoreError>;

    /// Deletes at most `batch` counts (one key's calls of one target on one day), oldest
    /// first, of days that began more than `older_than` ago by the store's clock, and returns
    /// how many it deleted.
    ///
    /// # Errors
    ///
    /// The store's.
    async fn prune_deprecated_calls(
        &self,
        older_than: Duration,
        batch: u32,
    ) -> Result<u64, StoreError>;
}

/// The start of the day `DEPRECATED_CALLS_PERIOD` before now: what a read of the last 30 days
/// passes as `since`.
pub(crate) fn period_start() -> Timestamp {
    let now = Timestamp::now().as_datetime().timestamp_millis();
    let period = i64::try_from(DEPRECATED_CALLS_PERIOD.as_millis()).unwrap_or(i64::MAX);
    Timestamp::from_unix_millis(now.saturating_sub(period)).unwrap_or_else(Timestamp::now)
}
