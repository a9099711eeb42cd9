//! Rate limits: the [`RateLimiter`] trait, which the API asks per key after authenticating a
//! request (opt-in) and per client address before a store is asked about an unknown key (the
//! throttle of failed authentication), its in-process implementation [`LocalRateLimiter`], and
//! the headers that tell a partner its budget.
//!
//! Headers follow GitHub's convention: `X-RateLimit-Limit` (requests in a full budget),
//! `X-RateLimit-Remaining` (requests left now), `X-RateLimit-Reset` (Unix time, in seconds,
//! when the budget is full again), and `Retry-After` (seconds) on a `429`. Beside them, the
//! IETF fields (draft-ietf-httpapi-ratelimit-headers, -08 on), with the same figures: one
//! policy named `"key"`, `RateLimit-Policy: "key";q=LIMIT;w=WINDOW` (the window in seconds:
//! how long an empty budget takes to fill, when the limiter says) and
//! `RateLimit: "key";r=REMAINING;t=SECONDS` (seconds until the budget is full again, as
//! `X-RateLimit-Reset` counts to; `Retry-After` is never more).

use http::header::HeaderName;

mod lease;
pub(crate) mod limiter;
pub(crate) mod local;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;

pub(crate) use limiter::{
    or_unlimited, whole_seconds_at_least_one, RateLimitDecision, RateLimiter,
};
pub(crate) use local::LocalRateLimiter;
pub use local::DEFAULT_PURGE_INTERVAL;

/// `X-RateLimit-Limit`: the requests a full budget allows.
pub const RATE_LIMIT_LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
/// `X-RateLimit-Remaining`: the requests the key may still make now.
pub const RATE_LIMIT_REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
/// `X-RateLimit-Reset`: the Unix time, in whole seconds rounded up, when the budget is full.
pub const RATE_LIMIT_RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");
/// `RateLimit-Policy` (IETF draft): the key's quota and its window.
pub const RATE_LIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit` (IETF draft): what is left of the quota now, and the seconds until it is full.
pub const RATE_LIMIT: HeaderName = HeaderName::from_static("ratelimit");
