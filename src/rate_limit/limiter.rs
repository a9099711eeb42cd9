//! The [`RateLimiter`] trait and the decision it answers with.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use http::header::{HeaderMap, HeaderValue, RETRY_AFTER};

#[cfg(doc)]
use super::LocalRateLimiter;
use super::{
    RATE_LIMIT, RATE_LIMIT_LIMIT, RATE_LIMIT_POLICY, RATE_LIMIT_REMAINING, RATE_LIMIT_RESET,
};
use crate::store::StoreError;

/// Counts requests against named budgets and decides whether one more may go on now.
///
/// The API asks it in two places, each with a limiter of its own: after a key is known, with
/// the budget named by the key's id ([`Principal::key_id`](crate::Principal::key_id), never
/// the raw key); and, for the throttle of failed authentication
/// ([`PartnerApi::with_auth_failure_limiter`](crate::PartnerApi::with_auth_failure_limiter)),
/// with the budget named by the client's address. Ship [`LocalRateLimiter`] for one process;
/// a deployment of several replicas uses one over a shared counter store (`RedisRateLimiter`)
/// so the budget is the key's or the address's, not the replica's.
///
/// When [`check`](Self::check) fails, the request is served without a limit (and the error
/// logged): an outage of the counter store does not take the API down with it.
#[async_trait]
pub trait RateLimiter: Send + Sync {
    /// Takes one request from the budget named `budget`, or refuses it.
    async fn check(&self, budget: &str) -> Result<RateLimitDecision, StoreError>;

    /// The answer of [`check`](Self::check) when the limiter has it at hand without waiting,
    /// or `None` to be asked through `check` (the default); as
    /// [`KeyStore::lookup_now`](crate::KeyStore::lookup_now).
    fn check_now(&self, budget: &str) -> Option<Result<RateLimitDecision, StoreError>> {
        let _ = budget;
        None
    }

    /// Gives back to `budget` one request that an allowed [`check`](Self::check) took,
    /// never filling it past full: the throttle of failed authentication takes one before
    /// it asks the store about a key, and gives it back when the key was valid.
    ///
    /// It must not wait: a limiter whose budgets are remote sends it in the background, and a
    /// refund that fails is lost (the budget refills with time anyway).
    fn refund(&self, budget: &str);
}

#[async_trait]
impl<T: RateLimiter + ?Sized> RateLimiter for Arc<T> {
    async fn check(&self, budget: &str) -> Result<RateLimitDecision, StoreError> {
        (**self).check(budget).await
    }

    fn check_now(&self, budget: &str) -> Option<Result<RateLimitDecision, StoreError>> {
        (**self).check_now(budget)
    }

    fn refund(&self, budget: &str) {
        (**self).refund(budget);
    }
}

/// A [`RateLimiter`]'s answer for one request, and the budget the response reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RateLimitDecision {
    limit: u32,
    remaining: u32,
    reset_after: Duration,
    retry_after: Option<Duration>,
    window: Option<Duration>,
}

impl RateLimitDecision {
    /// Creates the decision that the request may go on; `remaining` more may follow now, of a full budget of `limit`,
    /// which is whole again after `reset_after`.
    pub fn allowed(limit: u32, remaining: u32, reset_after: Duration) -> Self {
        Self {
            limit,
            remaining: remaining.min(limit),
            reset_after,
            retry_after: None,
            window: None,
        }
    }

    /// Creates the decision that the request is refused: the next one may succeed after `retry_after`; the budget of
    /// `limit` is whole again after `reset_after`.
    pub fn refused(limit: u32, retry_after: Duration, reset_after: Duration) -> Self {
        Self {
            limit,
            remaining: 0,
            reset_after: reset_after.max(retry_after),
            retry_after: Some(retry_after),
            window: None,
        }
    }

    /// Sets the policy's window: how long an empty budget takes to fill again (for a
    /// budget that refills one request every `period`, `period × limit`). Sent as `w` of
    /// `RateLimit-Policy`; without it the field gives the quota alone.
    #[must_use]
    pub fn with_window(mut self, window: Duration) -> Self {
        self.window = Some(window);
        self
    }

    /// Returns the policy's window, if the limiter set it.
    pub fn window(&self) -> Option<Duration> {
        self.window
    }

    /// Returns whether the request may be served.
    pub fn is_allowed(&self) -> bool {
        self.retry_after.is_none()
    }

    /// Returns the requests a full budget allows.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Returns the requests that may still be made now.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    /// Returns how long until the budget is full again.
    pub fn reset_after(&self) -> Duration {
        self.reset_after
    }

    /// Returns, for a refused request, how long until the next one may succeed.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Writes the budget headers (and `Retry-After` when refused) into `headers`.
    pub(crate) fn write_headers(&self, headers: &mut HeaderMap) {
        headers.insert(RATE_LIMIT_LIMIT, HeaderValue::from(self.limit));
        headers.insert(RATE_LIMIT_REMAINING, HeaderValue::from(self.remaining));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        headers.insert(
            RATE_LIMIT_RESET,
            HeaderValue::from(whole_seconds_up(now.saturating_add(self.reset_after))),
        );
        if let Some(retry_after) = self.retry_after {
            headers.insert(RETRY_AFTER, whole_seconds_at_least_one(retry_after));
        }
        // draft-ietf-httpapi-ratelimit-headers (-08 on): one policy, named "key" (each API
        // key has its own budget), with its quota and window; and what is left of it now.
        let policy = match self.window {
            Some(window) => format!("\"key\";q={};w={}", self.limit, whole_seconds_up(window)),
            None => format!("\"key\";q={}", self.limit),
        };
        let current = format!(
            "\"key\";r={};t={}",
            self.remaining,
            whole_seconds_up(self.reset_after)
        );
        // Digits, quotes and letters: always valid values.
        if let (Ok(policy), Ok(current)) = (
            HeaderValue::from_str(&policy),
            HeaderValue::from_str(&current),
        ) {
            headers.insert(RATE_LIMIT_POLICY, policy);
            headers.insert(RATE_LIMIT, current);
        }
    }
}

fn whole_seconds_up(duration: Duration) -> u64 {
    duration
        .as_secs()
        .saturating_add(u64::from(duration.subsec_nanos() > 0))
}

/// `result`'s decision, or none when the limiter failed (logged): a request is served without
/// a limit rather than refused because the limiter's own store is down.
pub(crate) fn or_unlimited(
    result: Result<RateLimitDecision, StoreError>,
) -> Option<RateLimitDecision> {
    result
        .inspect_err(|err| {
            tracing::warn!(
                kind = ?err.kind(),
                error = %crate::log::ErrorChain(err),
                "partner API rate limiter failed; serving without a limit"
            );
        })
        .ok()
}

/// A `Retry-After` value: `duration` in whole seconds, rounded up, and at least 1, since `0`
/// would invite an immediate retry that fails again.
pub(crate) fn whole_seconds_at_least_one(duration: Duration) -> HeaderValue {
    HeaderValue::from(whole_seconds_up(duration).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_report_the_budget_and_when_to_retry() {
        let mut headers = HeaderMap::new();
        RateLimitDecision::refused(5, Duration::from_millis(1500), Duration::from_secs(5))
            .write_headers(&mut headers);
        assert_eq!(headers[RATE_LIMIT_LIMIT], "5");
        assert_eq!(headers[RATE_LIMIT_REMAINING], "0");
        assert_eq!(headers[RETRY_AFTER], "2");
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let reset: u64 = headers[RATE_LIMIT_RESET].to_str().unwrap().parse().unwrap();
        assert!((now.as_secs() + 5..=now.as_secs() + 6).contains(&reset));

        let mut headers = HeaderMap::new();
        RateLimitDecision::allowed(5, 4, Duration::from_millis(200)).write_headers(&mut headers);
        assert_eq!(headers[RATE_LIMIT_REMAINING], "4");
        assert!(!headers.contains_key(RETRY_AFTER));
        let mut headers = HeaderMap::new();
        RateLimitDecision::refused(5, Duration::from_millis(1), Duration::ZERO)
            .write_headers(&mut headers);
        assert_eq!(
            headers[RETRY_AFTER], "1",
            "never tells a client to retry at once"
        );
    }
}
