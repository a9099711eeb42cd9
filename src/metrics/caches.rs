//! The caches' metrics: hits, misses and invalidations by cache, and the state of the change
//! notifications they follow.

#[cfg(feature = "postgres")]
use std::time::Duration;

use super::{
    counter, gauge, CACHE_EVIDENCE, CACHE_HITS, CACHE_INVALIDATIONS, CACHE_MISSES,
    CACHE_NOTIFICATIONS_CONNECTED,
};
#[cfg(feature = "postgres")]
use super::{histogram, CACHE_NOTIFICATION_LAG};

/// Which cache: the `cache` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CacheName {
    Keys,
    Orders,
}

pub(crate) fn cache_hit(cache: CacheName) {
    let key = match cache {
        CacheName::Keys => static_key!(CACHE_HITS, "cache" => "keys"),
        CacheName::Orders => static_key!(CACHE_HITS, "cache" => "orders"),
    };
    counter(key).increment(1);
}

pub(crate) fn cache_missed(cache: CacheName) {
    let key = match cache {
        CacheName::Keys => static_key!(CACHE_MISSES, "cache" => "keys"),
        CacheName::Orders => static_key!(CACHE_MISSES, "cache" => "orders"),
    };
    counter(key).increment(1);
}

/// What an invalidation covered: the `scope` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InvalidationScope {
    Key,
    Organization,
    All,
}

pub(crate) fn cache_invalidated(cache: CacheName, scope: InvalidationScope) {
    use InvalidationScope as Scope;
    let key = match (cache, scope) {
        (CacheName::Keys, Scope::Key) => {
            static_key!(CACHE_INVALIDATIONS, "cache" => "keys", "scope" => "key")
        }
        (CacheName::Keys, Scope::Organization) => {
            static_key!(CACHE_INVALIDATIONS, "cache" => "keys", "scope" => "organization")
        }
        (CacheName::Keys, Scope::All) => {
            static_key!(CACHE_INVALIDATIONS, "cache" => "keys", "scope" => "all")
        }
        (CacheName::Orders, Scope::Key) => {
            static_key!(CACHE_INVALIDATIONS, "cache" => "orders", "scope" => "key")
        }
        (CacheName::Orders, Scope::Organization) => {
            static_key!(CACHE_INVALIDATIONS, "cache" => "orders", "scope" => "organization")
        }
        (CacheName::Orders, Scope::All) => {
            static_key!(CACHE_INVALIDATIONS, "cache" => "orders", "scope" => "all")
        }
    };
    counter(key).increment(1);
}

/// Sets whether the caches' notifications are connected.
pub(crate) fn cache_notifications_connected(connected: bool) {
    gauge(static_key!(CACHE_NOTIFICATIONS_CONNECTED)).set(if connected { 1.0 } else { 0.0 });
}

/// Sets the caches' evidence to `at`.
pub(crate) fn cache_evidence(at: std::time::Instant) {
    let unix = std::time::SystemTime::now()
        .checked_sub(at.elapsed())
        .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |since| since.as_secs_f64());
    gauge(static_key!(CACHE_EVIDENCE)).set(unix);
}

/// Records the lag of a heartbeat.
#[cfg(feature = "postgres")]
pub(crate) fn cache_notification_lag(lag: Duration) {
    histogram(static_key!(CACHE_NOTIFICATION_LAG)).record(lag.as_secs_f64());
}
