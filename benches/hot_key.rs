//! A hot key on the local rate limiter: the cost of one decision when every thread decides
//! for the same key at once, from one thread to as many as the machine has CPUs (and twice
//! that, to show contention past them), and for each thread its own key as the baseline. Runs
//! as is on any machine; `cargo bench --bench hot_key`.
//!
//! The budget refills every nanosecond, so each thread takes leases of its tokens and spends
//! them without the budget's lock (#47): the cost per decision should stay flat from one
//! thread to as many as there are CPUs, one key or a key each. When every decision wrote the
//! key's budget, two threads on one key made each four times as costly.

use std::num::NonZeroU32;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use partner_api::{LocalRateLimiter, RateLimiter};

/// Decisions per thread and measurement.
const DECISIONS: u32 = 400_000;

/// Nanoseconds per decision, with `threads` threads deciding at once, each for the key
/// `key(thread)`; the median of three measurements.
fn per_decision(threads: usize, key: fn(usize) -> String) -> f64 {
    let mut runs: Vec<f64> = (0..3)
        .map(|_| {
            // A budget no run exhausts, refilling fast enough to lease.
            let limiter = Arc::new(LocalRateLimiter::new(
                Duration::from_nanos(1),
                NonZeroU32::new(u32::MAX).expect("not zero"),
            ));
            let start = Arc::new(Barrier::new(threads + 1));
            let workers: Vec<_> = (0..threads)
                .map(|thread| {
                    let (limiter, start) = (limiter.clone(), start.clone());
                    let key = key(thread);
                    std::thread::spawn(move || {
                        start.wait();
                        let began = Instant::now();
                        for _ in 0..DECISIONS {
                            let decided = limiter.check_now(&key);
                            std::hint::black_box(decided);
                        }
                        began.elapsed()
                    })
                })
                .collect();
            start.wait();
            let elapsed: Duration = workers
                .into_iter()
                .map(|worker| worker.join().expect("a worker"))
                .max()
                .unwrap_or_default();
            // Per decision as one thread sees it: flat when threads do not slow each other.
            elapsed.as_nanos() as f64 / f64::from(DECISIONS)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    runs[1]
}

fn main() {
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let mut counts: Vec<usize> = std::iter::successors(Some(1), |n| Some(n * 2))
        .take_while(|n| *n <= cpus * 2)
        .collect();
    if !counts.contains(&cpus) {
        counts.push(cpus);
        counts.sort_unstable();
    }
    println!("local rate limiter, ns per decision as each thread sees it ({cpus} CPUs):");
    println!("{:>8} {:>12} {:>14}", "threads", "one key", "a key each");
    for threads in counts {
        let shared = per_decision(threads, |_| "pk_hot".to_owned());
        let own = per_decision(threads, |thread| format!("pk_thread_{thread}"));
        println!("{threads:>8} {shared:>12.1} {own:>14.1}");
    }
}
