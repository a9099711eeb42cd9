//! Leases: a hot key's tokens taken a few at a time by each worker thread, so that its requests
//! do not all write one cache line.
//!
//! A [`LocalRateLimiter`](super::LocalRateLimiter) decides most requests under its shard's
//! lock, writing the budget's arrival time: two threads deciding for one key take turns on
//! that line. A budget that refills at least one request every [`LEASE_MAX_PERIOD`] is *fast*;
//! when a thread decides the same fast budget twice within [`LEASE_LIFETIME`], it also takes a
//! **lease**: up to [`LEASE_MAX_TOKENS`] of the budget's free tokens, held for it and valid for
//! [`LEASE_LIFETIME`]. Its next requests for that key take a token from its lease (one
//! compare-and-swap on a line only it writes) until the lease is empty or expired, and only
//! then take the lock again.
//!
//! # Invariants, and why they hold
//!
//! Write `B` for the burst, `T` for the period, and *today's limiter* for the exact one: every
//! request decided under the lock, as budgets slower than `LEASE_MAX_PERIOD` still are.
//!
//! 1. **Never more than today's limiter allows.** A leased token is *held*, not spent: the
//!    budget's arrival time does not move, but every decision under the lock counts the held
//!    tokens as spent, so nobody else gets them. A request allowed from a lease was therefore
//!    one of the free tokens when the lease was granted, and time since has only added to the
//!    budget. The tokens a lease spent are debited to the arrival time (*folded*) by the next
//!    decision under the lock, at the time of the lease's last use: never earlier than any of
//!    them happened. Since GCRA's arrival time only grows when debits move later, the budget
//!    stays at or below what today's limiter would have after the same requests.
//! 2. **At most `LEASE_LIFETIME / T` requests fewer, each time the budget runs dry.**
//!    Debiting late is stricter only while the budget is full (a debit cannot refill it past
//!    full); a debit is at most a lease's lifetime late, so the arrival time is at most
//!    `LEASE_LIFETIME` later than today's: at most 5 ms of refill (5 requests at the slowest
//!    budget that leases, more at faster ones), and nothing when the budget was never full
//!    while leases were out. Held tokens are never lost: a request that finds no free token
//!    takes one from another thread's lease before it is refused, and an expired lease's
//!    tokens go back to the budget.
//! 3. **Bounded memory.** A budget keeps an entry per lease out, at most one per thread and
//!    key plus those a thread forgot (it remembers at most [`HELD_PER_THREAD`] leases, the
//!    least recently granted going first) until they expire; entries of expired leases are
//!    dropped by the next decision under the lock or by the purge.
//! 4. **Headers.** Every decision under the lock publishes the budget's arrival time; a
//!    request allowed from a lease reports from that and the clock, less its own lease's
//!    spending since the last fold. So it counts the refill and the thread's own requests, and
//!    reads at most the other threads' unfolded spending too high: at most one lease each
//!    (`LEASE_MAX_TOKENS`), since a thread folds its lease before it takes another. Decisions
//!    under the lock report exactly, as before.
//!
//! A budget that stays empty is decided under the lock for every request: its free tokens are
//! too few to lend (see [`lease_size`]), so a hot key over its limit still takes turns on the
//! lock; leases serve a hot key within it.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::RateLimitDecision;

/// The slowest refill that leases: a budget giving back fewer than one request a millisecond
/// is never hot enough for its lock to matter, and its partners read `X-RateLimit-Remaining`
/// to the request.
pub(super) const LEASE_MAX_PERIOD: Duration = Duration::from_millis(1);

/// How long a lease's tokens may be used, and how close together two decisions of a thread
/// for one key must be for it to take a lease.
pub(super) const LEASE_LIFETIME: Duration = Duration::from_millis(5);

/// The most tokens a lease holds; a lease also holds at most a share of the free tokens (see
/// [`lease_size`]).
pub(super) const LEASE_MAX_TOKENS: u32 = 32;

/// Leases a thread remembers at once.
const HELD_PER_THREAD: usize = 4;

/// A lease's tokens, on a cache line of their own (two: adjacent lines are prefetched
/// together), written by its thread on every request it allows and by others only to take a
/// token back.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(super) struct Lease {
    /// Tokens left.
    tokens: AtomicU32,
    /// When the thread last took a token (nanoseconds since the limiter's epoch), written
    /// before it takes one: a fold debits the spent tokens at this time, never earlier.
    last_use: AtomicU64,
    /// The tokens given since the last fold, written only under the budget's lock: what is
    /// not left of them is the lease's spending not yet debited.
    granted: AtomicU32,
}

impl Lease {
    fn granted(&self) -> u32 {
        self.granted.load(Ordering::Acquire)
    }

    /// Under the budget's lock.
    fn set_granted(&self, granted: u32) {
        self.granted.store(granted, Ordering::Release);
    }
}

/// The arrival time a budget's last decision under the lock left, which the requests from its
/// leases report from: on a line of its own, read by them and written once per lock.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(super) struct Published(AtomicU64);

impl Published {
    /// Publishes `tat`, under the budget's lock.
    pub(super) fn set(&self, tat: u64) {
        self.0.store(tat, Ordering::Release);
    }

    fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }
}

/// A lease as its budget knows it, under the shard's lock.
#[derive(Debug)]
pub(super) struct Granted {
    lease: Arc<Lease>,
    valid_until: u64,
}

/// The leases out on one budget, and the folds and thefts that keep its accounts.
#[derive(Debug, Default)]
pub(super) struct Leases(Vec<Granted>);

impl Leases {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Leases out holding tokens (a thread's own lease, folded empty, is not one).
    pub(super) fn holding(&self) -> usize {
        self.0
            .iter()
            .filter(|granted| granted.lease.granted() > 0)
            .count()
    }

    /// Debits to `tat` every token spent from a lease since the last fold, each at its
    /// lease's last use (or its end), and drops the leases expired at `now`, their tokens
    /// back in the budget. Returns the new arrival time.
    pub(super) fn fold(&mut self, mut tat: u64, now: u64, period: u64) -> u64 {
        self.0.retain_mut(|granted| {
            let expired = now >= granted.valid_until;
            let left = if expired {
                granted.lease.tokens.swap(0, Ordering::AcqRel)
            } else {
                granted.lease.tokens.load(Ordering::Acquire)
            };
            let spent = granted.lease.granted().saturating_sub(left);
            if spent > 0 {
                let used_at = granted
                    .lease
                    .last_use
                    .load(Ordering::Relaxed)
                    .min(granted.valid_until);
                tat = tat
                    .max(used_at)
                    .saturating_add(period.saturating_mul(u64::from(spent)));
            }
            granted.lease.set_granted(left);
            !expired
        });
        tat
    }

    /// Tokens held by leases now (after a fold).
    pub(super) fn held(&self) -> u64 {
        self.0
            .iter()
            .map(|granted| u64::from(granted.lease.granted()))
            .sum()
    }

    /// Takes one held token from any lease for a request that found no free one; `true` when
    /// one was taken (and counted as spent, to be debited by the caller now).
    pub(super) fn steal(&mut self) -> bool {
        for granted in &mut self.0 {
            let taken = granted
                .lease
                .tokens
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                    tokens.checked_sub(1)
                })
                .is_ok();
            if taken {
                granted.lease.set_granted(granted.lease.granted() - 1);
                return true;
            }
        }
        false
    }

    /// Gives `lease` `tokens` more, valid until `valid_until`.
    fn grant(&mut self, lease: &Arc<Lease>, tokens: u32, valid_until: u64) {
        match self.0.iter_mut().find(|g| Arc::ptr_eq(&g.lease, lease)) {
            Some(granted) => granted.valid_until = valid_until,
            None => {
                // Tokens it still has (none, unless its budget was forgotten with it out)
                // stay held.
                lease.set_granted(lease.tokens.load(Ordering::Acquire));
                self.0.push(Granted {
                    lease: lease.clone(),
                    valid_until,
                });
            }
        }
        lease.tokens.fetch_add(tokens, Ordering::AcqRel);
        lease.set_granted(lease.granted() + tokens);
    }
}

/// How many tokens a thread's lease takes when `free` tokens are neither spent nor held and
/// `leases` other leases are out: at most [`LEASE_MAX_TOKENS`], and at most half of what is
/// free shared among the leases, so a budget near empty is decided under the lock, exactly.
pub(super) fn lease_size(free: u64, leases: usize) -> u32 {
    let share = free / 2 / (leases as u64 + 1);
    u32::try_from(share.min(u64::from(LEASE_MAX_TOKENS))).unwrap_or(0)
}

/// A lease a thread holds: where it takes tokens from, until when, and where its budget
/// publishes its arrival time.
struct Held {
    limiter: u64,
    budget: Box<str>,
    lease: Arc<Lease>,
    valid_until: u64,
    /// The budget's arrival time as its last decision under the lock left it.
    published: Arc<Published>,
}

/// A thread's leases, and the last budget it decided under a lock (to tell a hot one).
#[derive(Default)]
struct Thread {
    held: Vec<Held>,
    last_locked: Option<(u64, u64, u64)>,
}

thread_local! {
    static THREAD: RefCell<Thread> = RefCell::new(Thread::default());
}

/// The figures of a limiter its decisions report with.
#[derive(Clone, Copy)]
pub(super) struct Terms {
    pub(super) limiter: u64,
    pub(super) limit: u32,
    pub(super) period: u64,
    pub(super) window: Duration,
}

impl Terms {
    /// The decision that a request at `now` is allowed, the budget's arrival time then being
    /// `tat` (this request debited), and the requests it leaves: the whole ones between `tat`
    /// and a full budget's.
    pub(super) fn allowed(self, now: u64, tat: u64) -> (RateLimitDecision, u64) {
        let full = u128::from(now) + u128::from(self.period) * u128::from(self.limit);
        let remaining = full.saturating_sub(u128::from(tat)) / u128::from(self.period);
        let decision = RateLimitDecision::allowed(
            self.limit,
            u32::try_from(remaining).unwrap_or(self.limit),
            Duration::from_nanos(tat.saturating_sub(now)),
        )
        .with_window(self.window);
        (decision, u64::try_from(remaining).unwrap_or(u64::MAX))
    }
}

/// The decision for a request of `budget` from this thread's lease on it, if it holds one with
/// a token left at `now`.
pub(super) fn take(terms: Terms, budget: &str, now: u64) -> Option<RateLimitDecision> {
    THREAD
        .try_with(|thread| {
            let thread = thread.try_borrow().ok()?;
            let held = thread
                .held
                .iter()
                .find(|held| held.limiter == terms.limiter && *held.budget == *budget)?;
            let lease = &*held.lease;
            // An empty lease is not used, so its last use stays that of its last token.
            if now >= held.valid_until || lease.tokens.load(Ordering::Relaxed) == 0 {
                return None;
            }
            lease.last_use.store(now, Ordering::Release);
            let before = lease
                .tokens
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |tokens| {
                    tokens.checked_sub(1)
                })
                .ok()?;
            // What the budget would say now: its published arrival time, refilled to now,
            // with this lease's spending not yet debited (this request's included) debited now.
            let unfolded = lease.granted().saturating_sub(before - 1);
            let tat = held
                .published
                .get()
                .max(now)
                .saturating_add(terms.period.saturating_mul(u64::from(unfolded)));
            Some(terms.allowed(now, tat).0)
        })
        .ok()
        .flatten()
}

/// Whether this thread decided `budget_hash` of the limiter under a lock within
/// [`LEASE_LIFETIME`] before `now`; remembers this decision for the next.
pub(super) fn is_hot(limiter: u64, budget_hash: u64, now: u64) -> bool {
    THREAD
        .try_with(|thread| {
            let Ok(mut thread) = thread.try_borrow_mut() else {
                return false;
            };
            let hot = thread.last_locked.is_some_and(|(id, hash, at)| {
                id == limiter && hash == budget_hash && now.saturating_sub(at) < lifetime_nanos()
            });
            thread.last_locked = Some((limiter, budget_hash, now));
            hot
        })
        .unwrap_or(false)
}

/// Grants this thread's lease on `budget` `tokens` more, under the budget's lock (`leases`
/// are its leases, `published` its published arrival time).
pub(super) fn grant(
    leases: &mut Leases,
    published: &Arc<Published>,
    terms: Terms,
    budget: &str,
    tokens: u32,
    now: u64,
) {
    let _ = THREAD.try_with(|thread| {
        let Ok(mut thread) = thread.try_borrow_mut() else {
            return;
        };
        let valid_until = now.saturating_add(lifetime_nanos());
        let position = thread
            .held
            .iter()
            .position(|held| held.limiter == terms.limiter && *held.budget == *budget);
        let mut held = match position {
            Some(position) => thread.held.remove(position),
            None => Held {
                limiter: terms.limiter,
                budget: budget.into(),
                lease: Arc::new(Lease::default()),
                valid_until,
                published: published.clone(),
            },
        };
        leases.grant(&held.lease, tokens, valid_until);
        held.valid_until = valid_until;
        // The budget may have been forgotten and made again since: follow the new one.
        held.published = published.clone();
        // Most recently granted first; the oldest goes when the thread holds too many.
        thread.held.insert(0, held);
        thread.held.truncate(HELD_PER_THREAD);
    });
}

fn lifetime_nanos() -> u64 {
    nanos(LEASE_LIFETIME)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}
