//! [`DeliveryConfig`]: how a delivery worker delivers: retries, time-outs, concurrency and
//! its shares, where deliveries may go, and how long messages are kept.

use std::time::Duration;

use super::DestinationPolicy;

/// The waits before the retries of a failed delivery, each counted from the attempt before:
/// 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h (eight tries over about 27 hours), each
/// with ±20 % jitter.
pub const DEFAULT_RETRY_SCHEDULE: [Duration; 7] = [
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 3600),
    Duration::from_secs(5 * 3600),
    Duration::from_secs(10 * 3600),
    Duration::from_secs(10 * 3600),
];

/// How a [`Dispatcher`](super::Dispatcher) delivers.
#[derive(Clone, Debug)]
pub struct DeliveryConfig {
    pub(super) retry_schedule: Vec<Duration>,
    pub(super) timeout: Duration,
    /// The time-out of an attempt to an endpoint whose deliveries fail.
    pub(super) failing_timeout: Duration,
    pub(super) disable_after: Duration,
    pub(super) concurrency: usize,
    pub(super) per_endpoint: usize,
    /// Set by `with_per_organization`; half the concurrency otherwise.
    pub(super) per_organization: Option<usize>,
    /// Set by `with_failing_share`; half the concurrency otherwise.
    pub(super) failing_share: Option<usize>,
    pub(super) poll_interval: Duration,
    pub(super) max_retry_after: Duration,
    pub(super) response_body_bytes: usize,
    pub(super) destinations: DestinationPolicy,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        Self {
            retry_schedule: DEFAULT_RETRY_SCHEDULE.to_vec(),
            timeout: Duration::from_secs(15),
            failing_timeout: Duration::from_secs(3),
            disable_after: Duration::from_secs(5 * 24 * 3600),
            concurrency: 32,
            per_endpoint: 4,
            per_organization: None,
            failing_share: None,
            poll_interval: Duration::from_millis(200),
            max_retry_after: Duration::from_secs(3600),
            response_body_bytes: 1024,
            destinations: DestinationPolicy::default(),
        }
    }
}

impl DeliveryConfig {
    /// The defaults: [`DEFAULT_RETRY_SCHEDULE`], a 15 s time-out per attempt (3 s to an
    /// endpoint whose attempts time out, but for every fourth), endpoints disabled after 5 days of failures only, 32
    /// deliveries in flight per replica, 4 per endpoint, half of them (16) per organization
    /// and fewer as more organizations have deliveries in flight, half of them (16) to
    /// endpoints whose deliveries fail, the outbox polled every 200 ms,
    /// `Retry-After` honoured up to an hour, 1 KiB of each response body kept, the
    /// default [`DestinationPolicy`], and messages kept for [`DEFAULT_RETENTION`](super::DEFAULT_RETENTION)
    /// (30 days).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the waits before the retries (none: one try only).
    #[must_use]
    pub fn with_retry_schedule(mut self, schedule: Vec<Duration>) -> Self {
        self.retry_schedule = schedule;
        self
    }

    /// Sets the time-out of one attempt (connecting, sending, and reading the answer), from
    /// 1 ms to a day.
    #[must_use]
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.clamp(Duration::from_millis(1), Duration::from_secs(86_400));
        self
    }

    /// Sets the time-out of an attempt to an endpoint whose last attempt on this replica timed
    /// out, at most the time-out of the others (3 s by default): an endpoint that hangs holds
    /// a slot this long, not the full time-out, once it is known to hang. Every fourth attempt
    /// in such a streak gets the full time-out, so a receiver that is slow, not dead, still
    /// gets to answer.
    #[must_use]
    pub fn with_failing_timeout(mut self, timeout: Duration) -> Self {
        self.failing_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// The time-out of an attempt: the hanging one, or the full one.
    pub(super) fn attempt_timeout(&self, hanging: bool) -> Duration {
        if hanging {
            self.failing_timeout.min(self.timeout)
        } else {
            self.timeout
        }
    }

    /// Sets how many of this replica's slots endpoints whose deliveries fail may hold at
    /// once (from one to the concurrency; half of it by default): the rest stay free for
    /// endpoints that answer, however many fail.
    #[must_use]
    pub fn with_failing_share(mut self, slots: usize) -> Self {
        self.failing_share = Some(slots);
        self
    }

    /// The most deliveries to failing endpoints in flight.
    pub(super) fn failing_share(&self) -> usize {
        self.failing_share
            .unwrap_or(self.concurrency / 2)
            .clamp(1, self.concurrency)
    }

    /// Sets how long every delivery to an endpoint must have failed before it is disabled.
    #[must_use]
    pub fn with_disable_after(mut self, disable_after: Duration) -> Self {
        self.disable_after = disable_after;
        self
    }

    /// Sets how many deliveries this replica has in flight at most, and how many of them to
    /// one endpoint (at least one each).
    #[must_use]
    pub fn with_concurrency(mut self, total: usize, per_endpoint: usize) -> Self {
        self.concurrency = total.max(1);
        self.per_endpoint = per_endpoint.clamp(1, self.concurrency);
        self
    }

    /// Sets how many deliveries of one organization this replica has in flight at most (from
    /// one to the concurrency; half of it by default): the slots one organization's slow or
    /// hanging endpoints can hold, the rest staying free for the others. The share shrinks as
    /// more organizations have deliveries in flight or due: with `n` of them, each may hold
    /// at most `concurrency / (n + 1)` (at least one), so some slots stay free for one more.
    #[must_use]
    pub fn with_per_organization(mut self, per_organization: usize) -> Self {
        self.per_organization = Some(per_organization);
        self
    }

    /// The most deliveries of one organization in flight.
    pub(super) fn per_organization(&self) -> usize {
        self.per_organization
            .unwrap_or(self.concurrency / 2)
            .clamp(1, self.concurrency)
    }

    /// Sets how often the outbox is asked for due deliveries when there was nothing to do:
    /// about half of it is the median wait of an event before its first attempt.
    #[must_use]
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Sets the longest `Retry-After` honoured.
    #[must_use]
    pub fn with_max_retry_after(mut self, bound: Duration) -> Self {
        self.max_retry_after = bound;
        self
    }

    /// Sets where deliveries may go.
    #[must_use]
    pub fn with_destinations(mut self, destinations: DestinationPolicy) -> Self {
        self.destinations = destinations;
        self
    }

    /// Returns where deliveries may go.
    pub fn destinations(&self) -> &DestinationPolicy {
        &self.destinations
    }

    /// The lease of a claimed delivery: the attempt's time-out and time to record it. A
    /// worker that is still busy after it has hung or lost its database; the delivery is
    /// then due for another worker.
    pub(super) fn lease(&self) -> Duration {
        self.timeout.saturating_add(Duration::from_secs(15))
    }
}
