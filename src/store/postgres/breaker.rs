//! A circuit breaker for the request path: once the database has been unreachable, requests
//! fail at once instead of each waiting out the pool's acquire timeout, while a probe in the
//! background finds out when it is back.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::error::{is_pool_timeout, is_unreachable};
use crate::store::StoreError;

/// Consecutive failures that say the database is unreachable that open the breaker.
const THRESHOLD: u32 = 2;
/// How long an open breaker waits before it probes the database again.
pub(crate) const COOLDOWN: Duration = Duration::from_millis(500);
/// How long a probe may take before another may start: a probe whose task was lost (its
/// runtime shut down, say) never holds the breaker open for good.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) struct Breaker {
    epoch: Instant,
    consecutive: AtomicU32,
    /// Milliseconds after `epoch` until which no probe starts; 0 when closed.
    open_until: AtomicU64,
    /// Milliseconds after `epoch` at which the probe under way started; 0 for none.
    probing_since: AtomicU64,
}

/// The answer of an open breaker.
pub(crate) enum Refusal {
    /// Fail at once.
    Fail(StoreError),
    /// Fail at once, and start the probe (the caller owns it until [`Breaker::probed`]).
    FailAndProbe(StoreError),
}

impl Breaker {
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            consecutive: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing_since: AtomicU64::new(0),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// `Ok` to call the database, or why not.
    pub(crate) fn admit(&self) -> Result<(), Refusal> {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Ok(());
        }
        let err = StoreError::unavailable(
            "the database was unreachable moments ago; not asking it again until a probe finds it back",
        );
        let now = self.now();
        if now >= open_until && self.start_probe(now) {
            return Err(Refusal::FailAndProbe(err));
        }
        Err(Refusal::Fail(err))
    }

    /// Whether the caller may start a probe now: none is under way, or the one under way
    /// started more than [`PROBE_TIMEOUT`] ago (it was lost).
    fn start_probe(&self, now: u64) -> bool {
        let since = self.probing_since.load(Ordering::Acquire);
        let timeout = u64::try_from(PROBE_TIMEOUT.as_millis()).unwrap_or(u64::MAX);
        let free = since == 0 || now.saturating_sub(since) > timeout;
        free && self
            .probing_since
            .compare_exchange(since, now.max(1), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// Notes how a call ended. `pool_holds_connections` tells a pool that timed out because
    /// every connection is busy (load, not an outage: it does not open the breaker) from one
    /// that cannot connect at all.
    pub(crate) fn record<T>(&self, result: &Result<T, StoreError>, pool_holds_connections: bool) {
        let outage = matches!(result, Err(err)
            if is_unreachable(err) && !(pool_holds_connections && is_pool_timeout(err)));
        if outage {
            let failures = self.consecutive.fetch_add(1, Ordering::AcqRel) + 1;
            if failures >= THRESHOLD {
                if failures == THRESHOLD {
                    tracing::warn!(
                        "the database is unreachable: failing fast, probing every {COOLDOWN:?}"
                    );
                }
                self.open_for_cooldown();
            }
        } else {
            self.close();
        }
    }

    /// Notes how the probe ended: the database is back, or not yet.
    pub(crate) fn probed(&self, back: bool) {
        if back {
            tracing::info!("the database is reachable again");
            self.close();
        } else {
            self.open_for_cooldown();
        }
        self.probing_since.store(0, Ordering::Release);
    }

    fn open_for_cooldown(&self) {
        let until = self.now() + u64::try_from(COOLDOWN.as_millis()).unwrap_or(u64::MAX);
        self.open_until.store(until.max(1), Ordering::Release);
    }

    fn close(&self) {
        self.consecutive.store(0, Ordering::Release);
        self.open_until.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down() -> Result<(), StoreError> {
        Err(StoreError::unavailable("down"))
    }

    #[test]
    fn opens_after_failures_fails_fast_and_lets_one_probe_decide() {
        let breaker = Breaker::new();
        for _ in 0..THRESHOLD {
            assert!(breaker.admit().is_ok());
            breaker.record(&down(), false);
        }
        assert!(
            matches!(breaker.admit(), Err(Refusal::Fail(_))),
            "open: fails at once"
        );
        std::thread::sleep(COOLDOWN + Duration::from_millis(20));
        assert!(
            matches!(breaker.admit(), Err(Refusal::FailAndProbe(_))),
            "one probe"
        );
        assert!(
            matches!(breaker.admit(), Err(Refusal::Fail(_))),
            "one probe at a time"
        );
        breaker.probed(false);
        assert!(
            matches!(breaker.admit(), Err(Refusal::Fail(_))),
            "still down: open again"
        );
        std::thread::sleep(COOLDOWN + Duration::from_millis(20));
        assert!(matches!(breaker.admit(), Err(Refusal::FailAndProbe(_))));
        breaker.probed(true);
        assert!(breaker.admit().is_ok(), "closed again");
        breaker.record(&Err::<(), _>(StoreError::other("a bug")), false);
        breaker.record(&Err::<(), _>(StoreError::other("a bug")), false);
        assert!(breaker.admit().is_ok(), "only unavailability counts");
    }

    #[test]
    fn a_busy_pool_is_no_outage_and_a_lost_probe_is_replaced() {
        let breaker = Breaker::new();
        let timed_out = || {
            Err::<(), _>(crate::store::postgres::store_error(
                sqlx::Error::PoolTimedOut,
            ))
        };
        for _ in 0..THRESHOLD * 3 {
            breaker.record(&timed_out(), true);
        }
        assert!(
            breaker.admit().is_ok(),
            "every connection busy: load, not an outage"
        );
        for _ in 0..THRESHOLD {
            breaker.record(&timed_out(), false);
        }
        assert!(
            matches!(breaker.admit(), Err(Refusal::Fail(_))),
            "no connection at all"
        );
        std::thread::sleep(COOLDOWN + Duration::from_millis(20));
        assert!(matches!(breaker.admit(), Err(Refusal::FailAndProbe(_))));
        // The probe's task is lost: never `probed`. Another starts once it is overdue.
        assert!(matches!(breaker.admit(), Err(Refusal::Fail(_))));
        std::thread::sleep(PROBE_TIMEOUT + Duration::from_millis(20));
        assert!(matches!(breaker.admit(), Err(Refusal::FailAndProbe(_))));
    }
}
