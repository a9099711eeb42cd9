//! What only the API knows, as metrics through the [`metrics`](https://docs.rs/metrics) facade: why requests
//! were refused, which organizations (and keys) call how much, how the stores and caches fare.
//!
//! The host picks the exporter (for Prometheus, `metrics-exporter-prometheus`) and installs
//! it; without one every metric is a no-op. [`describe`] gives each metric its help text and
//! unit. Names follow Prometheus conventions with the prefix `partner_api_`; labels that have
//! an OpenTelemetry HTTP semantic convention use its name (`http_request_method`,
//! `http_route`, `http_response_status_code`, `error_type`).
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | [`RESPONSES`] | counter | `http_request_method`, `http_route` (absent for an unknown path), `http_response_status_code` |
//! | [`AUTH_FAILURES`] | counter | `reason`: `missing`, `malformed`, `bad_checksum`, `unknown`, `revoked`, `expired`, `throttled`, `address_not_allowed`, `permission_missing` |
//! | [`ORGANIZATION_REQUESTS`] | counter | `organization_id`, and `key_id` when the host opts in |
//! | [`RATE_LIMIT_REFUSALS`] | counter | `organization_id` |
//! | [`STORE_CALL_DURATION`] | histogram (seconds) | `store`, `operation`; `error_type` when the call failed |
//! | [`STORE_ERRORS`] | counter | `store`, `operation`, `error_type` (an order an event or webhook could not show: `store` `events` or `webhooks`, `operation` `show_order`) |
//! | [`CACHE_HITS`], [`CACHE_MISSES`] | counter | `cache`: `keys`, `orders` |
//! | [`CACHE_INVALIDATIONS`] | counter | `cache`, `scope`: `key`, `organization`, `all` |
//! | [`CACHE_NOTIFICATIONS_CONNECTED`] | gauge (one per process) | none |
//! | [`CACHE_EVIDENCE`] | gauge (Unix seconds) | none |
//! | [`CACHE_NOTIFICATION_LAG`] | histogram (seconds) | none |
//! | [`LAST_USED_BATCH_KEYS`] | histogram (keys) | none |
//! | [`LAST_USED_FLUSH_FAILURES`], [`LAST_USED_DROPPED`] | counter | none |
//! | [`USAGE_BATCH_COUNTS`] | histogram (counts) | none |
//! | [`USAGE_FLUSH_FAILURES`], [`USAGE_DROPPED`] | counter | none |
//! | [`DEPRECATED_CALLS_DROPPED`] | counter | none |
//! | [`WEBHOOK_DELIVERIES`] | counter | `outcome`: `succeeded`, `failed` |
//! | [`WEBHOOK_ATTEMPT_DURATION`] | histogram (seconds) | `outcome` |
//! | [`WEBHOOK_DUE`] | gauge (deliveries) | none |
//! | [`WEBHOOK_OLDEST_DUE`] | gauge (seconds) | none |
//! | [`ORDER_CAPTURE_LAG_BYTES`] (feature `postgres`) | gauge (bytes) | none |
//! | [`ORDER_CAPTURE_LAG_SECONDS`] (feature `postgres`) | gauge (seconds) | none |
//! | [`WEBHOOK_ENDPOINTS_DISABLED`] | counter | `reason`: `gone`, `failing` |
//! | [`BACKGROUND_TASK_PANICS`] | counter | `task`: `webhook_dispatcher`, `webhook_delivery`, `webhook_retention`, `events_retention`, `audit_retention`, `cache_listener`, `known_keys`, `usage_recorder`, `last_used_recorder`, `deprecated_call_recorder`, `order_capture` |
//! | [`SECRET_SCANNING_REPORTS`] | counter | `label`: `true_positive`, `false_positive`; `source`: where GitHub found the match (`content`, `commit`, `issue_comment`, ... its documented values; anything else as `other`) |
//!
//! `store` and `operation` are `keys`/`lookup`, `orders`/`newest_orders`, `events`/`events`,
//! `rate_limiter`/`check`, `keys`/`record_last_used`, `usage`/`record_usage`,
//! `deprecated_calls`/`record_deprecated_calls` and `deprecated_calls`/`deprecated_calls`; `error_type` is `unavailable`,
//! `timeout`, `conflict`, `not_found`, `invalid_data` or `other`. Store calls are timed
//! when the API waits for them: an answer a store or cache has at hand
//! ([`KeyStore::lookup_now`](crate::KeyStore::lookup_now)) costs no store call and shows in
//! the cache metrics instead.
//!
//! **Bounded labels.** No label ever carries a key, its digest or its hint. The organization
//! and key-id labels are bounded per API: the first
//! [`DEFAULT_MAX_ORGANIZATIONS`] organizations that call get a series each
//! ([`PartnerApi::with_organization_labels`](crate::PartnerApi::with_organization_labels)),
//! every later one is counted under [`OTHER`]; key ids are labels only when the host opts in
//! ([`PartnerApi::with_key_id_labels`](crate::PartnerApi::with_key_id_labels)), again the
//! first N, the rest as `key_id="_other"` of their organization. So a metric has at most
//! `organizations + 1` series (with key ids, `keys + organizations + 1`) whatever the number
//! of organizations and keys, and a series once created stays for the life of the process.
//! The bound is per process and first come, first served: each replica labels the
//! organizations it saw first, and one that first calls after the bound is reached stays
//! `_other` until the process restarts (raise the bound above the number of organizations to
//! label them all).
//!
//! A response is counted when its future completes: a request whose future the host drops
//! (the client went away, the host's own timeout) is not counted.

use std::time::Duration;

use ::metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Unit};

use crate::store::{StoreError, StoreErrorKind};

/// Responses of the API, by method, route and status.
pub const RESPONSES: &str = "partner_api_responses_total";
/// Refused authentications, by reason (every one is the same 401 to the client).
pub const AUTH_FAILURES: &str = "partner_api_auth_failures_total";
/// Authenticated requests, by organization (and key id, when the host opts in).
pub const ORGANIZATION_REQUESTS: &str = "partner_api_organization_requests_total";
/// Requests refused by the rate limiter (429), by organization.
pub const RATE_LIMIT_REFUSALS: &str = "partner_api_rate_limit_refusals_total";
/// Time the API waited for a store call, in seconds, by store and operation.
pub const STORE_CALL_DURATION: &str = "partner_api_store_call_duration_seconds";
/// Failed store calls, by store, operation and error type.
pub const STORE_ERRORS: &str = "partner_api_store_errors_total";
/// Lookups a cache answered from memory, by cache.
pub const CACHE_HITS: &str = "partner_api_cache_hits_total";
/// Lookups a cache passed on to its store, by cache.
pub const CACHE_MISSES: &str = "partner_api_cache_misses_total";
/// Changes that made a cache forget entries, by cache and scope.
pub const CACHE_INVALIDATIONS: &str = "partner_api_cache_invalidations_total";
/// 1 while the caches' change notifications are connected (they answer from memory), 0 while
/// not (every lookup goes to the store).
pub const CACHE_NOTIFICATIONS_CONNECTED: &str = "partner_api_cache_notifications_connected";
/// The Unix time of the caches' latest evidence (every change committed before it applied):
/// its age, `time() - partner_api_cache_evidence_timestamp_seconds`, is what the caches'
/// answers from memory may lag behind the database (bounded by the maximum evidence age).
pub const CACHE_EVIDENCE: &str = "partner_api_cache_evidence_timestamp_seconds";
/// Time from a heartbeat's send to its hearing by the cache listener: how far the change
/// notifications lag behind the database.
pub const CACHE_NOTIFICATION_LAG: &str = "partner_api_cache_notification_lag_seconds";
/// Keys per batch the last-use recorder wrote.
pub const LAST_USED_BATCH_KEYS: &str = "partner_api_last_used_batch_keys";
/// Batches of last uses the store refused (kept and written with the next batch).
pub const LAST_USED_FLUSH_FAILURES: &str = "partner_api_last_used_flush_failures_total";
/// Last uses the recorder could not keep because it was full.
pub const LAST_USED_DROPPED: &str = "partner_api_last_used_dropped_total";
/// Counts (of one key, hour, route and outcome) per batch the usage recorder wrote.
pub const USAGE_BATCH_COUNTS: &str = "partner_api_usage_batch_counts";
/// Batches of usage the store refused (kept and written with the next batch).
pub const USAGE_FLUSH_FAILURES: &str = "partner_api_usage_flush_failures_total";
/// Requests the usage recorder could not count because it was full, or could not keep
/// through a store outage.
pub const USAGE_DROPPED: &str = "partner_api_usage_dropped_total";
/// Deprecated calls the recorder could not count because it was full, or could not keep
/// through a store outage.
pub const DEPRECATED_CALLS_DROPPED: &str = "partner_api_deprecated_calls_dropped_total";

/// Matches in verified secret scanning reports, by label and source.
pub const SECRET_SCANNING_REPORTS: &str = "partner_api_secret_scanning_reports_total";

/// Webhook delivery attempts, by outcome (`succeeded`, `failed`).
pub const WEBHOOK_DELIVERIES: &str = "partner_api_webhook_deliveries_total";
/// Time a webhook delivery attempt took, in seconds.
pub const WEBHOOK_ATTEMPT_DURATION: &str = "partner_api_webhook_attempt_duration_seconds";
/// Webhook deliveries due now to enabled endpoints.
pub const WEBHOOK_DUE: &str = "partner_api_webhook_due_messages";
/// How long the longest-waiting due webhook delivery has been due, in seconds.
pub const WEBHOOK_OLDEST_DUE: &str = "partner_api_webhook_oldest_due_seconds";
/// In the capture mode, the write-ahead log the capture's slot holds that the reader has not
/// confirmed, in bytes (as the replica holding the lease last measured).
#[cfg(feature = "postgres")]
pub const ORDER_CAPTURE_LAG_BYTES: &str = crate::store::postgres::CAPTURE_LAG_BYTES;
/// In the capture mode, how long since the reader last decoded everything there was, in
/// seconds (0 while it keeps up): how old the oldest order change without its event may be.
#[cfg(feature = "postgres")]
pub const ORDER_CAPTURE_LAG_SECONDS: &str = crate::store::postgres::CAPTURE_LAG_SECONDS;
/// Webhook endpoints disabled by delivery, by reason (`gone`: the endpoint answered 410;
/// `failing`: every delivery failed for the disable period).
pub const WEBHOOK_ENDPOINTS_DISABLED: &str = "partner_api_webhook_endpoints_disabled_total";

/// Rounds of a background task that panicked, by task: each was logged, dropped, and the
/// task went on with its next round. Any increase is a bug to report (or a host store's).
pub const BACKGROUND_TASK_PANICS: &str = crate::supervise::TASK_PANICS;

/// The label value of every organization or key id beyond the bound.
pub const OTHER: &str = "_other";
/// How many organizations get a series of their own, by default.
pub const DEFAULT_MAX_ORGANIZATIONS: usize = 1_000;

/// Describes every metric of the API (help text and unit) to the installed recorder. Call it
/// once after installing the exporter; the metrics work without it.
pub fn describe() {
    use ::metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        RESPONSES,
        "Responses of the partner API, by method, route and status."
    );
    describe_counter!(
        AUTH_FAILURES,
        "Refused authentications (401, the throttle's 429, the 403 of a key used outside its address ranges or without the permission its route needs), by reason: missing, malformed, bad_checksum, unknown, revoked, expired, throttled, address_not_allowed, permission_missing."
    );
    describe_counter!(
        ORGANIZATION_REQUESTS,
        "Authenticated requests, by organization (bounded; later ones as _other)."
    );
    describe_counter!(
        WEBHOOK_DELIVERIES,
        "Webhook delivery attempts, by outcome (succeeded, failed)."
    );
    describe_histogram!(
        WEBHOOK_ATTEMPT_DURATION,
        Unit::Seconds,
        "Time a webhook delivery attempt took, by outcome."
    );
    describe_gauge!(
        WEBHOOK_DUE,
        "Webhook deliveries due now to enabled endpoints (as this replica last counted)."
    );
    describe_gauge!(
        WEBHOOK_OLDEST_DUE,
        Unit::Seconds,
        "How long the longest-waiting due webhook delivery has been due."
    );
    #[cfg(feature = "postgres")]
    describe_gauge!(
        ORDER_CAPTURE_LAG_BYTES,
        Unit::Bytes,
        "Write-ahead log held by the order capture's slot and not yet confirmed by its reader."
    );
    #[cfg(feature = "postgres")]
    describe_gauge!(
        ORDER_CAPTURE_LAG_SECONDS,
        Unit::Seconds,
        "Time since the order capture's reader last decoded everything there was."
    );
    describe_counter!(
        WEBHOOK_ENDPOINTS_DISABLED,
        "Webhook endpoints disabled by delivery, by reason (gone, failing)."
    );
    describe_counter!(
        RATE_LIMIT_REFUSALS,
        "Requests refused by the rate limiter (429), by organization."
    );
    describe_histogram!(
        STORE_CALL_DURATION,
        Unit::Seconds,
        "Time the partner API waited for a store call, by store and operation."
    );
    describe_counter!(
        STORE_ERRORS,
        "Failed store calls, by store, operation and error type."
    );
    describe_counter!(CACHE_HITS, "Lookups answered from a cache, by cache.");
    describe_counter!(
        CACHE_MISSES,
        "Lookups a cache passed to its store, by cache."
    );
    describe_counter!(
        CACHE_INVALIDATIONS,
        "Changes that made a cache forget entries, by cache and scope."
    );
    describe_gauge!(
        CACHE_NOTIFICATIONS_CONNECTED,
        "1 while the caches' change notifications are connected, 0 while they answer from their stores only."
    );
    describe_gauge!(
        CACHE_EVIDENCE,
        Unit::Seconds,
        "Unix time of the caches' latest evidence that they applied every earlier change."
    );
    describe_histogram!(
        CACHE_NOTIFICATION_LAG,
        Unit::Seconds,
        "Time from a cache listener's heartbeat to its hearing: the lag of change notifications."
    );
    describe_histogram!(
        LAST_USED_BATCH_KEYS,
        Unit::Count,
        "Keys per batch written by the last-use recorder."
    );
    describe_counter!(
        LAST_USED_FLUSH_FAILURES,
        "Batches of last uses the store refused (retried with the next batch)."
    );
    describe_counter!(
        LAST_USED_DROPPED,
        "Last uses not recorded because the recorder was full."
    );
    describe_histogram!(
        USAGE_BATCH_COUNTS,
        Unit::Count,
        "Counts (of one key, hour, route and outcome) per batch written by the usage recorder."
    );
    describe_counter!(
        USAGE_FLUSH_FAILURES,
        "Batches of usage the store refused (kept and written with the next batch)."
    );
    describe_counter!(
        USAGE_DROPPED,
        "Requests the usage recorder could not count: it was full, or its kept batch past its bound."
    );
    describe_counter!(
        DEPRECATED_CALLS_DROPPED,
        "Deprecated calls the recorder could not count: it was full, or its kept batch past its bound."
    );
    describe_counter!(
        BACKGROUND_TASK_PANICS,
        "Rounds of a background task that panicked (logged and dropped; the task went on), by task."
    );
    describe_counter!(
        SECRET_SCANNING_REPORTS,
        "Matches in verified secret scanning reports, by label (true_positive: a key of ours, revoked) and source."
    );
}

/// The `source` values GitHub documents for a secret scanning match; any other is counted as
/// `other`, so the label stays bounded.
#[cfg(feature = "secret-scanning")]
const SCANNING_SOURCES: &[&str] = &[
    "content",
    "commit",
    "pull_request_title",
    "pull_request_description",
    "pull_request_comment",
    "pull_request_review",
    "pull_request_review_comment",
    "issue_title",
    "issue_description",
    "issue_comment",
    "discussion_title",
    "discussion_body",
    "discussion_comment",
    "commit_comment",
    "gist_content",
    "gist_comment",
    "wiki_content",
    "wiki_commit",
    "npm",
    "unknown",
];

/// Counts one match of a verified secret scanning report.
#[cfg(feature = "secret-scanning")]
pub(crate) fn secret_scanning_report(true_positive: bool, source: &str) {
    let label = if true_positive {
        "true_positive"
    } else {
        "false_positive"
    };
    let source = SCANNING_SOURCES
        .iter()
        .find(|known| **known == source)
        .copied()
        .unwrap_or("other");
    ::metrics::counter!(SECRET_SCANNING_REPORTS, "label" => label, "source" => source).increment(1);
}

/// The metadata of every metric of the crate.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

pub(crate) fn counter(key: &Key) -> Counter {
    ::metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA))
}

fn gauge(key: &Key) -> Gauge {
    ::metrics::with_recorder(|recorder| recorder.register_gauge(key, &METADATA))
}

fn histogram(key: &Key) -> Histogram {
    ::metrics::with_recorder(|recorder| recorder.register_histogram(key, &METADATA))
}

/// A key of static labels, built at compile time: counting it allocates nothing.
macro_rules! static_key {
    ($name:expr $(, $label:literal => $value:literal)*) => {{
        static LABELS: &[::metrics::Label] =
            &[$(::metrics::Label::from_static_parts($label, $value)),*];
        static KEY: ::metrics::Key = ::metrics::Key::from_static_parts($name, LABELS);
        &KEY
    }};
}

/// Why a request was not authenticated: the `reason` label of [`AUTH_FAILURES`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AuthFailureReason {
    Missing,
    Malformed,
    BadChecksum,
    Unknown,
    Revoked,
    Expired,
    /// Refused without a look-up: the client is past its budget of failed authentications.
    Throttled,
    /// A valid key used from an address outside its allowed ranges (the 403).
    AddressNotAllowed,
    /// A valid key that lacks the permission its route needs (the 403 `insufficient_scope`).
    PermissionMissing,
}

pub(crate) fn auth_failed(reason: AuthFailureReason) {
    let key = match reason {
        AuthFailureReason::Missing => static_key!(AUTH_FAILURES, "reason" => "missing"),
        AuthFailureReason::Malformed => static_key!(AUTH_FAILURES, "reason" => "malformed"),
        AuthFailureReason::BadChecksum => {
            static_key!(AUTH_FAILURES, "reason" => "bad_checksum")
        }
        AuthFailureReason::Unknown => static_key!(AUTH_FAILURES, "reason" => "unknown"),
        AuthFailureReason::Revoked => static_key!(AUTH_FAILURES, "reason" => "revoked"),
        AuthFailureReason::Expired => static_key!(AUTH_FAILURES, "reason" => "expired"),
        AuthFailureReason::Throttled => static_key!(AUTH_FAILURES, "reason" => "throttled"),
        AuthFailureReason::AddressNotAllowed => {
            static_key!(AUTH_FAILURES, "reason" => "address_not_allowed")
        }
        AuthFailureReason::PermissionMissing => {
            static_key!(AUTH_FAILURES, "reason" => "permission_missing")
        }
    };
    counter(key).increment(1);
}

/// A call to a store: its `store` and `operation` labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreCall {
    KeyLookup,
    NewestOrders,
    OrderEvents,
    PruneEvents,
    RateLimitCheck,
    AuthFailureCheck,
    RecordLastUsed,
    RecordUsage,
    RecordDeprecatedCalls,
    DeprecatedCalls,
}

impl StoreCall {
    fn duration_key(self) -> &'static Key {
        match self {
            Self::KeyLookup => {
                static_key!(STORE_CALL_DURATION, "store" => "keys", "operation" => "lookup")
            }
            Self::NewestOrders => static_key!(
                STORE_CALL_DURATION, "store" => "orders", "operation" => "newest_orders"
            ),
            Self::OrderEvents => {
                static_key!(STORE_CALL_DURATION, "store" => "events", "operation" => "events")
            }
            Self::PruneEvents => static_key!(
                STORE_CALL_DURATION, "store" => "events", "operation" => "prune_events"
            ),
            Self::RateLimitCheck => {
                static_key!(STORE_CALL_DURATION, "store" => "rate_limiter", "operation" => "check")
            }
            Self::AuthFailureCheck => static_key!(
                STORE_CALL_DURATION, "store" => "auth_failure_limiter", "operation" => "check"
            ),
            Self::RecordLastUsed => static_key!(
                STORE_CALL_DURATION, "store" => "keys", "operation" => "record_last_used"
            ),
            Self::RecordUsage => static_key!(
                STORE_CALL_DURATION, "store" => "usage", "operation" => "record_usage"
            ),
            Self::RecordDeprecatedCalls => static_key!(
                STORE_CALL_DURATION,
                "store" => "deprecated_calls", "operation" => "record_deprecated_calls"
            ),
            Self::DeprecatedCalls => static_key!(
                STORE_CALL_DURATION, "store" => "deprecated_calls", "operation" => "deprecated_calls"
            ),
        }
    }

    /// Records a call the API waited `elapsed` for, and its error if it failed. A failed
    /// call's duration carries its `error_type` too (OpenTelemetry's `error.type`), so the
    /// latency of calls that succeeded stays apart from instant refusals.
    pub(crate) fn finished(self, elapsed: Duration, error: Option<&StoreError>) {
        match error {
            None => histogram(self.duration_key()).record(elapsed.as_secs_f64()),
            Some(err) => self.failed(elapsed, error_type(err.kind())),
        }
    }

    /// Records a call the API stopped waiting for after `elapsed`.
    pub(crate) fn timed_out(self, elapsed: Duration) {
        self.failed(elapsed, "timeout");
    }

    /// Counts a call that failed with an answer at hand (no wait to time).
    pub(crate) fn failed_at_once(self, error: &StoreError) {
        counter(&self.failure_key(STORE_ERRORS, error_type(error.kind()))).increment(1);
    }

    /// Records a failed call. Failures are rare: their keys are built when one happens.
    fn failed(self, elapsed: Duration, error_type: &'static str) {
        histogram(&self.failure_key(STORE_CALL_DURATION, error_type)).record(elapsed.as_secs_f64());
        counter(&self.failure_key(STORE_ERRORS, error_type)).increment(1);
    }

    /// The key of metric `name` for this call's `store` and `operation`, and `error_type`.
    fn failure_key(self, name: &'static str, error_type: &'static str) -> Key {
        let labels = self
            .duration_key()
            .labels()
            .cloned()
            .chain([Label::from_static_parts("error_type", error_type)])
            .collect::<Vec<_>>();
        Key::from_parts(name, labels)
    }
}

fn error_type(kind: StoreErrorKind) -> &'static str {
    match kind {
        StoreErrorKind::Unavailable => "unavailable",
        StoreErrorKind::Conflict => "conflict",
        StoreErrorKind::NotFound => "not_found",
        StoreErrorKind::InvalidData => "invalid_data",
        StoreErrorKind::Unsupported => "unsupported",
        _ => "other",
    }
}

/// Records a batch of `keys` last uses: written, or refused by the store.
pub(crate) fn last_used_batch(keys: usize, written: bool) {
    if written {
        histogram(static_key!(LAST_USED_BATCH_KEYS)).record(keys as f64);
    } else {
        counter(static_key!(LAST_USED_FLUSH_FAILURES)).increment(1);
    }
}

/// Counts `count` last uses dropped because the recorder was full.
pub(crate) fn last_used_dropped(count: u64) {
    counter(static_key!(LAST_USED_DROPPED)).increment(count);
}

/// Records a batch of `counts` usage counts: written, or refused by the store.
pub(crate) fn usage_batch(counts: usize, written: bool) {
    if written {
        histogram(static_key!(USAGE_BATCH_COUNTS)).record(counts as f64);
    } else {
        counter(static_key!(USAGE_FLUSH_FAILURES)).increment(1);
    }
}

/// Counts `requests` the usage recorder could not count or keep.
pub(crate) fn usage_dropped(requests: u64) {
    counter(static_key!(USAGE_DROPPED)).increment(requests);
}

/// Counts `calls` the deprecated-call recorder could not count or keep.
pub(crate) fn deprecated_calls_dropped(calls: u64) {
    counter(static_key!(DEPRECATED_CALLS_DROPPED)).increment(calls);
}

mod caches;
mod usage;

#[cfg(feature = "postgres")]
pub(crate) use caches::cache_notification_lag;
pub(crate) use caches::{
    cache_evidence, cache_hit, cache_invalidated, cache_missed, cache_notifications_connected,
    CacheName, InvalidationScope,
};
pub(crate) use usage::UsageCounters;
