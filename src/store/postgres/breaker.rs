//! A circuit breaker for the request path: once the database has been unreachable, requests
//! fail at once instead of each waiting out the pool's acquire timeout, and one probe at a
//! time finds out when it is back.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::store::{StoreError, StoreErrorKind};

/// Consecutive "unavailable" failures that open the breaker.
const THRESHOLD: u32 = 2;
/// How long an open breaker fails calls at once before it lets a probe through.
pub(crate) const COOLDOWN: Duration = Duration::from_millis(500);

pub(crate) struct Breaker {
    epoch: Instant,
    consecutive: AtomicU32,
    /// Milliseconds after `epoch` until which calls fail at once; 0 when closed.
    open_until: AtomicU64,
    probing: AtomicBool,
}

/// Leave to make one call; a probe's leave frees the probe's place when dropped, whatever
/// became of the call.
pub(crate) struct Leave<'b> {
    breaker: &'b Breaker,
    probe: bool,
}

impl Breaker {
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            consecutive: AtomicU32::new(0),
            open_until: AtomicU64::new(0),
            probing: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Leave to call the database, or the error to answer with at once.
    pub(crate) fn admit(&self) -> Result<Leave<'_>, StoreError> {
        let open_until = self.open_until.load(Ordering::Acquire);
        if open_until == 0 {
            return Ok(Leave {
                breaker: self,
                probe: false,
            });
        }
        if self.now() < open_until || self.probing.swap(true, Ordering::AcqRel) {
            return Err(StoreError::unavailable(
                "the database was unreachable moments ago; not asking it again yet",
            ));
        }
        Ok(Leave {
            breaker: self,
            probe: true,
        })
    }

    /// Notes how the call ended.
    pub(crate) fn record<T>(&self, leave: Leave<'_>, result: &Result<T, StoreError>) {
        let unavailable = matches!(result, Err(err) if err.kind() == StoreErrorKind::Unavailable);
        if !unavailable {
            self.consecutive.store(0, Ordering::Release);
            self.open_until.store(0, Ordering::Release);
        } else {
            let failures = self.consecutive.fetch_add(1, Ordering::AcqRel) + 1;
            if failures >= THRESHOLD || leave.probe {
                let until = self.now() + u64::try_from(COOLDOWN.as_millis()).unwrap_or(u64::MAX);
                self.open_until.store(until.max(1), Ordering::Release);
                if failures == THRESHOLD {
                    tracing::warn!(
                        "the database is unreachable: failing fast, probing every {COOLDOWN:?}"
                    );
                }
            }
        }
        drop(leave);
    }
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if self.probe {
            self.breaker.probing.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down() -> Result<(), StoreError> {
        Err(StoreError::unavailable("down"))
    }

    #[test]
    fn opens_after_failures_fails_fast_then_probes_one_at_a_time() {
        let breaker = Breaker::new();
        for _ in 0..THRESHOLD {
            let leave = breaker.admit().unwrap();
            breaker.record(leave, &down());
        }
        assert!(breaker.admit().is_err(), "open: fails at once");
        std::thread::sleep(COOLDOWN + Duration::from_millis(20));
        let probe = breaker.admit().expect("a probe after the cooldown");
        assert!(breaker.admit().is_err(), "one probe at a time");
        breaker.record(probe, &down());
        assert!(breaker.admit().is_err(), "a failed probe opens it again");
        std::thread::sleep(COOLDOWN + Duration::from_millis(20));
        let probe = breaker.admit().unwrap();
        drop(probe);
        let probe = breaker.admit().expect("a dropped probe frees its place");
        breaker.record(probe, &Ok::<(), StoreError>(()));
        assert!(
            breaker.admit().is_ok() && breaker.admit().is_ok(),
            "closed again"
        );
        let leave = breaker.admit().unwrap();
        breaker.record(leave, &Err::<(), _>(StoreError::other("a bug")));
        assert!(breaker.admit().is_ok(), "only unavailability counts");
    }
}
