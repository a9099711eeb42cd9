//! [`RedisRateLimiter`]: one budget per key shared by every replica, in Redis (feature
//! `redis`).

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

use super::{RateLimitDecision, RateLimiter};
use crate::store::StoreError;

/// How long a check may take before the request is served without a limit, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// GCRA in one atomic script: the key's "theoretical arrival time" (TAT) in microseconds of
/// Redis's own clock, so replicas with drifting clocks share one budget. Returns
/// `{allowed, remaining or retry-after µs, reset-after µs}`.
const GCRA: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local period = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or now)
if tat < now then tat = now end
local allowed_from = tat - (burst - 1) * period
if now < allowed_from then
  return {0, allowed_from - now, tat - now}
end
local next_tat = tat + period
redis.call('SET', KEYS[1], next_tat, 'PX', math.ceil((next_tat - now) / 1000))
return {1, math.floor((now + burst * period - next_tat) / period), next_tat - now}
";

/// A refund: the arrival time moves back one period, never before now (a full budget, which
/// is deleted).
const REFUND: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tat = tonumber(redis.call('GET', KEYS[1]))
if not tat then return 0 end
tat = tat - tonumber(ARGV[1])
if tat <= now then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], tat, 'PX', math.ceil((tat - now) / 1000))
end
return 1
";

/// A token bucket per budget (API key, client address) in Redis (GCRA, one atomic script per check), so that all
/// replicas share one budget per key: the limit is the key's, not the replica's.
///
/// Each key starts with a full budget of `burst` requests; one comes back every `period`.
/// Budgets live under `partner_api:rate:{key id}` ([`with_key_prefix`](Self::with_key_prefix))
/// and expire when full again. When Redis is
/// down or slower than the timeout (default [`DEFAULT_TIMEOUT`]), a check fails and the API
/// serves the request without a limit and logs it (the [`RateLimiter`] contract): never a
/// hung request. It connects on first use and reconnects by itself.
pub struct RedisRateLimiter {
    client: redis::Client,
    connection: OnceCell<ConnectionManager>,
    script: redis::Script,
    refund_script: redis::Script,
    limit: u32,
    period: Duration,
    timeout: Duration,
    prefix: String,
}

/// The prefix of the Redis keys that hold budgets, by default.
pub const DEFAULT_KEY_PREFIX: &str = "partner_api:rate:";

impl RedisRateLimiter {
    /// Creates a limiter of `requests` per second per key (burst `requests`) in the Redis at
    /// `url` (`redis://host:port/db`).
    ///
    /// # Errors
    ///
    /// When `url` is not a Redis URL.
    pub fn per_second(url: &str, requests: NonZeroU32) -> Result<Self, StoreError> {
        Self::new(url, Duration::from_secs(1) / requests.get(), requests)
    }

    /// Creates a limiter of one request per `period` per key, with bursts of up to `burst`.
    ///
    /// # Errors
    ///
    /// When `url` is not a Redis URL.
    pub fn new(url: &str, period: Duration, burst: NonZeroU32) -> Result<Self, StoreError> {
        let client = redis::Client::open(url).map_err(StoreError::other)?;
        Ok(Self {
            client,
            connection: OnceCell::new(),
            script: redis::Script::new(GCRA),
            refund_script: redis::Script::new(REFUND),
            limit: burst.get(),
            period: period.max(Duration::from_micros(1)),
            timeout: DEFAULT_TIMEOUT,
            prefix: DEFAULT_KEY_PREFIX.to_owned(),
        })
    }

    /// Bounds the time a check may take (default [`DEFAULT_TIMEOUT`]); past it the request is
    /// served without a limit.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Keeps budgets under Redis keys that start with `prefix` (default
    /// [`DEFAULT_KEY_PREFIX`]), for several APIs, or environments, on one Redis.
    #[must_use]
    pub fn with_key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    async fn connection(&self) -> Result<ConnectionManager, redis::RedisError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(self.timeout)
            .set_response_timeout(self.timeout)
            .set_number_of_retries(1);
        self.connection
            .get_or_try_init(|| ConnectionManager::new_with_config(self.client.clone(), config))
            .await
            .cloned()
    }

    async fn decide(&self, budget: &str) -> Result<RateLimitDecision, StoreError> {
        let mut connection = self.connection().await.map_err(StoreError::unavailable)?;
        let period = u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX);
        let (allowed, first, reset): (i64, i64, i64) = self
            .script
            .key(format!("{}{budget}", self.prefix))
            .arg(period)
            .arg(self.limit)
            .invoke_async(&mut connection)
            .await
            .map_err(StoreError::unavailable)?;
        let micros = |value: i64| Duration::from_micros(u64::try_from(value).unwrap_or(0));
        Ok(if allowed == 1 {
            let remaining = u32::try_from(first.max(0)).unwrap_or(u32::MAX);
            RateLimitDecision::allowed(self.limit, remaining, micros(reset))
        } else {
            RateLimitDecision::refused(self.limit, micros(first), micros(reset))
        }
        .with_window(self.period.saturating_mul(self.limit)))
    }
}

#[async_trait]
impl RateLimiter for RedisRateLimiter {
    async fn check(&self, budget: &str) -> Result<RateLimitDecision, StoreError> {
        match tokio::time::timeout(self.timeout, self.decide(budget)).await {
            Ok(decided) => decided,
            Err(_) => Err(StoreError::unavailable(format!(
                "no answer from Redis within {:?}",
                self.timeout
            ))),
        }
    }

    fn refund(&self, budget: &str) {
        // Only after a check, so the connection is up; without a runtime there is nothing to
        // send it on, and the budget refills with time anyway.
        let (Some(connection), Ok(runtime)) = (
            self.connection.get().cloned(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let mut connection = connection;
        let script = self.refund_script.clone();
        let name = format!("{}{budget}", self.prefix);
        let period = u64::try_from(self.period.as_micros()).unwrap_or(u64::MAX);
        let timeout = self.timeout;
        runtime.spawn(async move {
            let mut invocation = script.key(name);
            invocation.arg(period);
            let sent = invocation.invoke_async::<i64>(&mut connection);
            if let Ok(Err(err)) = tokio::time::timeout(timeout, sent).await {
                tracing::debug!(error = %err, "a rate-limit refund was lost");
            }
        });
    }
}

impl fmt::Debug for RedisRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisRateLimiter")
            .field("limit", &self.limit)
            .field("period", &self.period)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}
