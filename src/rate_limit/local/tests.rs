//! The local rate limiter's tests: budgets decided under the lock, and leases of hot keys.

use super::*;
use http::header::HeaderMap;

fn principal(key_id: &str) -> &str {
    key_id
}

#[test]
fn a_burst_is_served_then_refused_with_the_time_to_wait() {
    let limiter = LocalRateLimiter::new(Duration::from_secs(60), NonZeroU32::new(3).unwrap());
    let key = principal("key_1");
    let remaining: Vec<u32> = (0..3).map(|_| limiter.decide(key).remaining()).collect();
    assert_eq!(remaining, [2, 1, 0]);
    let refused = limiter.decide(key);
    assert!(!refused.is_allowed());
    let wait = refused.retry_after().unwrap();
    assert!(
        wait > Duration::from_secs(58) && wait <= Duration::from_secs(60),
        "{wait:?}"
    );
    // Another key has its own budget.
    assert_eq!(limiter.decide(principal("key_2")).remaining(), 2);
}

#[test]
fn a_refund_gives_one_request_back() {
    let limiter = LocalRateLimiter::new(Duration::from_secs(60), NonZeroU32::new(2).unwrap());
    assert_eq!(limiter.decide("a").remaining(), 1);
    assert_eq!(limiter.decide("a").remaining(), 0);
    limiter.give_back("a");
    assert_eq!(limiter.decide("a").remaining(), 0, "one came back");
    assert!(!limiter.decide("a").is_allowed());
    limiter.give_back("a");
    limiter.give_back("a");
    limiter.give_back("a");
    assert_eq!(limiter.tracked_keys(), 0, "a full budget is forgotten");
    assert_eq!(
        limiter.decide("a").remaining(),
        1,
        "never more than a full budget"
    );
    limiter.give_back("unknown");
}

#[test]
fn idle_keys_are_purged_in_the_background_so_memory_stays_bounded() {
    // Budgets refill within a microsecond: every key is idle almost at once.
    let limiter = LocalRateLimiter::new(Duration::from_micros(1), NonZeroU32::new(1).unwrap())
        .with_purge_interval(Duration::from_millis(20));
    for index in 0..10_000 {
        limiter.decide(principal(&format!("key_{index}")));
    }
    // No request purged: the background thread does, within a few intervals.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while limiter.tracked_keys() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} keys still tracked",
            limiter.tracked_keys()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    limiter.decide(principal("key_again"));
    limiter.purge();
    std::thread::sleep(Duration::from_millis(1));
    limiter.purge();
    assert_eq!(limiter.tracked_keys(), 0);
}

#[test]
fn the_purge_thread_ends_with_its_limiter() {
    let limiter = LocalRateLimiter::new(Duration::from_secs(1), NonZeroU32::new(1).unwrap())
        .with_purge_interval(Duration::from_millis(1));
    limiter.decide("started");
    let weak = Arc::downgrade(&limiter.budgets);
    drop(limiter);
    // The thread holds the budgets only while it purges them, and then stops.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while weak.strong_count() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the budgets outlive their limiter"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]

    /// No period, burst or decision, however extreme, panics on the request path.
    #[test]
    fn extreme_durations_saturate_instead_of_panicking(
        period_nanos in proptest::prelude::any::<u64>(),
        period_secs in proptest::prop_oneof![proptest::prelude::Just(0_u64), proptest::prelude::any::<u64>()],
        burst in 1_u32..,
        remaining in proptest::prelude::any::<u32>(),
        reset_secs in proptest::prelude::any::<u64>(),
        retry_secs in proptest::prelude::any::<u64>(),
    ) {
        let period = Duration::new(period_secs, 0).saturating_add(Duration::from_nanos(period_nanos.max(1)));
        let limiter = LocalRateLimiter::new(period, NonZeroU32::new(burst).unwrap());
        let key = principal("key");
        for _ in 0..3 {
            let decision = limiter.decide(key);
            decision.write_headers(&mut HeaderMap::new());
        }
        let reset = Duration::new(reset_secs, 999_999_999);
        let retry = Duration::new(retry_secs, 1);
        RateLimitDecision::allowed(burst, remaining, reset).write_headers(&mut HeaderMap::new());
        RateLimitDecision::refused(burst, retry, reset).write_headers(&mut HeaderMap::new());
        RateLimitDecision::refused(burst, Duration::MAX, Duration::MAX).write_headers(&mut HeaderMap::new());
    }
}

// Leases. The budgets below refill once a millisecond or faster, so they lease; a test's
// figures allow for the refill over its own measured time.

/// Nanoseconds between two instants, as a count of `period`s, rounded up.
fn periods(elapsed: Duration, period: Duration) -> u64 {
    u64::try_from(elapsed.as_nanos().div_ceil(period.as_nanos())).unwrap_or(u64::MAX)
}

/// The accounts of `budget`: its arrival time and the tokens its leases hold.
fn accounts(limiter: &LocalRateLimiter, budget: &str) -> Option<(u64, u64)> {
    let budgets = &limiter.budgets;
    let shard = budgets.shard(budgets.hasher.hash_one(budget));
    shard
        .get(budget)
        .map(|entry| (entry.tat, entry.leases.held()))
}

/// A millisecond, in the limiter's nanoseconds.
const MS: u64 = 1_000_000;

/// A limiter of 1,000 requests refilling one a millisecond (so it leases), and an instant
/// well past its epoch to decide at: the tests below give every decision its time.
fn leasing() -> (LocalRateLimiter, u64) {
    let limiter = LocalRateLimiter::new(Duration::from_millis(1), NonZeroU32::new(1000).unwrap());
    (limiter, 1_000 * MS)
}

#[test]
fn a_thread_deciding_a_fast_budget_again_takes_a_lease_and_spends_it_without_the_lock() {
    let (limiter, t) = leasing();
    assert_eq!(limiter.decide_at("hot", t).remaining(), 999);
    assert_eq!(accounts(&limiter, "hot"), Some((t + MS, 0)));
    assert_eq!(limiter.decide_at("hot", t).remaining(), 998);
    assert_eq!(
        accounts(&limiter, "hot"),
        Some((t + 2 * MS, u64::from(lease::LEASE_MAX_TOKENS))),
        "a lease is taken, held and not debited"
    );
    // Each request from the lease reports as a decision under the lock would, and leaves
    // the budget's accounts alone: it took no lock and wrote nothing of the budget's.
    for spent in 1..=lease::LEASE_MAX_TOKENS {
        let decision = limiter.decide_at("hot", t);
        assert!(decision.is_allowed());
        assert_eq!(decision.remaining(), 998 - spent);
        assert_eq!(
            decision.reset_after(),
            Duration::from_millis(u64::from(2 + spent))
        );
    }
    assert_eq!(
        accounts(&limiter, "hot"),
        Some((t + 2 * MS, u64::from(lease::LEASE_MAX_TOKENS)))
    );
    // The lease is empty: the next request folds it (its 32 debited) and is debited itself.
    assert_eq!(limiter.decide_at("hot", t).remaining(), 965);
    let (tat, _) = accounts(&limiter, "hot").expect("tracked");
    assert_eq!(tat, t + 35 * MS);
}

#[test]
fn a_lease_is_debited_when_it_was_spent_never_when_it_was_granted() {
    let (limiter, t) = leasing();
    limiter.decide_at("hot", t);
    limiter.decide_at("hot", t);
    // One token spent 4 ms after the grant; the fold then debits it at 4 ms.
    assert!(limiter.decide_at("hot", t + 4 * MS).is_allowed());
    limiter.budgets.purge_at(t + 4 * MS + MS / 2);
    assert_eq!(
        accounts(&limiter, "hot"),
        Some((t + 5 * MS, u64::from(lease::LEASE_MAX_TOKENS) - 1)),
        "debited at its use (4 ms, the budget refilled to then), not at the grant (which says 3 ms)"
    );
    // Past its lifetime (5 ms) the lease ends: its tokens go back, and the budget, full by
    // then, is forgotten.
    limiter.budgets.purge_at(t + 5 * MS + MS / 2);
    assert_eq!(limiter.tracked_keys(), 0);
    // The thread's ended lease gives nothing: the budget starts again, full.
    let decision = limiter.decide_at("hot", t + 20 * MS);
    assert_eq!(decision.remaining(), 999);
}

#[test]
fn a_slow_budget_never_leases() {
    let limiter = LocalRateLimiter::new(Duration::from_millis(2), NonZeroU32::new(1000).unwrap());
    for _ in 0..10 {
        limiter.decide_at("steady", 0);
    }
    assert_eq!(accounts(&limiter, "steady").map(|(_, held)| held), Some(0));
}

#[test]
fn a_lease_is_the_limiters_own_and_the_keys_own() {
    let (fast, t) = leasing();
    fast.decide_at("key", t);
    fast.decide_at("key", t);
    assert!(accounts(&fast, "key").is_some_and(|(_, held)| held > 0));
    // Another limiter's budget of the same name, on the same thread, has its own tokens: its
    // request is decided under its own lock, not from the first limiter's lease.
    let (other, _) = leasing();
    assert_eq!(other.decide_at("key", t).remaining(), 999);
    assert_eq!(accounts(&other, "key").map(|(_, held)| held), Some(0));
    // And another key of the first limiter too.
    assert_eq!(fast.decide_at("other_key", t).remaining(), 999);
    assert!(accounts(&fast, "other_key").is_some());
}

#[test]
fn a_request_takes_a_token_back_from_another_threads_lease_before_it_is_refused() {
    let (limiter, t) = leasing();
    let limiter = Arc::new(limiter);
    // Another thread takes a lease and keeps it, unspent.
    let holder = limiter.clone();
    std::thread::spawn(move || {
        holder.decide_at("shared", t);
        holder.decide_at("shared", t);
    })
    .join()
    .expect("the holder");
    assert!(accounts(&limiter, "shared").is_some_and(|(_, held)| held > 0));
    // At the same instant (no refill, no lease ends), this thread is served the whole budget
    // less the holder's two: the holder's held tokens were taken back.
    let mut served = 0;
    while limiter.decide_at("shared", t).is_allowed() {
        served += 1;
    }
    assert_eq!(served, 998);
    assert_eq!(accounts(&limiter, "shared").map(|(_, held)| held), Some(0));
}

#[test]
fn a_lease_reports_what_other_threads_spent_up_to_their_last_lock() {
    let (limiter, t) = leasing();
    let limiter = Arc::new(limiter);
    // This thread leases; another then spends 100 through leases of its own.
    limiter.decide_at("shared", t);
    limiter.decide_at("shared", t);
    let spender = limiter.clone();
    std::thread::spawn(move || {
        for _ in 0..100 {
            assert!(spender.decide_at("shared", t).is_allowed());
        }
    })
    .join()
    .expect("the spender");
    // 103 requests so far: 897 remain. This thread's lease reports at most the other
    // thread's last lease (not yet folded) too many, never fewer.
    let remaining = limiter.decide_at("shared", t).remaining();
    assert!(
        (897..=897 + lease::LEASE_MAX_TOKENS).contains(&remaining),
        "{remaining}"
    );
}

#[test]
fn a_refund_with_a_lease_out_gives_one_request_back() {
    let (limiter, t) = leasing();
    for _ in 0..7 {
        limiter.decide_at("refunded", t);
    }
    // Two decided under the lock, five from the lease: the refund folds the five and gives
    // one back, so the next request leaves 993 (not 992).
    limiter.give_back("refunded");
    assert_eq!(limiter.decide_at("refunded", t).remaining(), 993);
}

/// Threads hammer one fast key; then one more decision under the lock reports what is left.
/// Served plus left must be the burst plus the refill over the run, give or take the bounds
/// of the `lease` module: never more, and never fewer than a lease's lifetime of refill.
///
/// The lower bound counts the refill from `first` to `last`, so it holds only while the
/// budget is never full between them (refill past full is lost by the exact limiter too).
/// Before `first`, this thread spends until the budget reports half the burst left: from then
/// on it is at least 25,000 requests (half a second of refill) below full, and it fills up
/// again only if all four threads stay off the CPU for half a second, or the joins take that
/// long. (A full budget at `first` lost its refill until the threads began: on CI's loaded
/// cores, 743 requests, 15 ms to start four threads. With 40 ms of refill as the burst, all
/// four threads off the CPU for 65 ms lost 1,250.) Whatever happened before `first`, the
/// budget there held at least the burst less what was spent, so served plus left is at least
/// the burst plus the refill since `first`, less the leases' slack.
#[test]
fn threads_on_one_hot_key_are_served_exactly_the_budget_and_its_refill() {
    let period = Duration::from_micros(20);
    let burst = 50_000_u32;
    let limiter = Arc::new(LocalRateLimiter::new(
        period,
        NonZeroU32::new(burst).unwrap(),
    ));
    let before = std::time::Instant::now();
    let mut spent_before = 0_u64;
    loop {
        let decision = limiter.decide("hammered");
        assert!(decision.is_allowed());
        spent_before += 1;
        if decision.remaining() <= burst / 2 {
            break;
        }
    }
    let first = std::time::Instant::now();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let limiter = limiter.clone();
            std::thread::spawn(move || {
                let until = std::time::Instant::now() + Duration::from_millis(150);
                let mut served = 0_u64;
                while std::time::Instant::now() < until {
                    if limiter.decide("hammered").is_allowed() {
                        served += 1;
                    }
                }
                served
            })
        })
        .collect();
    let served: u64 = spent_before
        + threads
            .into_iter()
            .map(|thread| thread.join().expect("a thread"))
            .sum::<u64>();
    let last = std::time::Instant::now();
    let left = limiter.decide("hammered");
    let after = std::time::Instant::now();
    // `left` counts the request it allowed too.
    let total = served + u64::from(left.remaining()) + u64::from(left.is_allowed());
    let most = u64::from(burst) + periods(after - before, period) + 1;
    let lifetime = periods(lease::LEASE_LIFETIME, period);
    let least = (u64::from(burst) + periods(last - first, period)).saturating_sub(lifetime + 2);
    assert!(
        (least..=most).contains(&total),
        "served {served} and {} left: {total}, not within {least}..={most}",
        left.remaining()
    );
}
