//! The conformance suite for [`RateLimiter`]s.

use std::time::Duration;

use super::namespace;
use super::report::{ensure, failed, Check, Report};
use crate::rate_limit::{RateLimitDecision, RateLimiter};

/// Runs every rate-limiter check against `limiter`, whose budget is `burst` requests and which
/// must not give a request back by itself within the run (a refill period of a second or more
/// does). Each check uses budget names of its own.
pub async fn run_rate_limiter<L: RateLimiter>(limiter: &L, burst: u32) -> Report {
    let mut report = Report::default();
    let mut record = |name, result| report.results.push((name, result));
    record(
        "a burst is served, counting down, then refused with a time to wait",
        burst_then_refused(limiter, burst).await,
    );
    record(
        "each budget name has a budget of its own",
        keys_apart(limiter, burst).await,
    );
    record(
        "an immediate answer spends the budget as an awaited one does",
        now_agrees(limiter, burst).await,
    );
    record(
        "a refund gives one request back, and never fills past full",
        refund_gives_back(limiter, burst).await,
    );
    report
}

async fn decide<L: RateLimiter>(limiter: &L, budget: &str) -> Result<RateLimitDecision, String> {
    limiter.check(budget).await.map_err(failed("check"))
}

async fn burst_then_refused<L: RateLimiter>(limiter: &L, burst: u32) -> Check {
    let principal = namespace();
    for served in 1..=burst {
        let decision = decide(limiter, &principal).await?;
        ensure!(
            decision.is_allowed(),
            "request {served} of a burst of {burst} was refused"
        );
        ensure!(
            decision.limit() == burst,
            "limit {} for a burst of {burst}",
            decision.limit()
        );
        ensure!(
            decision.remaining() == burst - served,
            "after {served} requests {} remain, not {}",
            decision.remaining(),
            burst - served
        );
    }
    let refused = decide(limiter, &principal).await?;
    ensure!(
        !refused.is_allowed(),
        "request {} of a burst of {burst} was served",
        burst + 1
    );
    ensure!(
        refused.remaining() == 0,
        "a refusal reports {} remaining",
        refused.remaining()
    );
    ensure!(
        refused.retry_after().is_some_and(|wait| !wait.is_zero()),
        "a refusal must say how long to wait, not {:?}",
        refused.retry_after()
    );
    Ok(())
}

async fn keys_apart<L: RateLimiter>(limiter: &L, burst: u32) -> Check {
    let ns = namespace();
    let spender = format!("{ns}_a");
    for _ in 0..=burst {
        decide(limiter, &spender).await?;
    }
    let other = format!("{ns}_b");
    let decision = decide(limiter, &other).await?;
    ensure!(
        decision.is_allowed() && decision.remaining() == burst - 1,
        "another key of the same organization started with {decision:?}"
    );
    Ok(())
}

async fn now_agrees<L: RateLimiter>(limiter: &L, burst: u32) -> Check {
    let principal = namespace();
    let Some(immediate) = limiter.check_now(&principal) else {
        return Ok(()); // answers only when awaited: nothing to compare
    };
    let immediate = immediate.map_err(failed("check_now"))?;
    let awaited = decide(limiter, &principal).await?;
    ensure!(
        immediate.remaining() == burst - 1 && awaited.remaining() == burst.saturating_sub(2),
        "check_now then check left {} and {} of {burst}",
        immediate.remaining(),
        awaited.remaining()
    );
    Ok(())
}

async fn refund_gives_back<L: RateLimiter>(limiter: &L, burst: u32) -> Check {
    let budget = namespace();
    for _ in 0..burst {
        decide(limiter, &budget).await?;
    }
    limiter.refund(&budget);
    // A remote limiter sends refunds in the background: wait for it to land.
    let mut decision = None;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        decision = Some(decide(limiter, &budget).await?);
        if decision.is_some_and(|decision| decision.is_allowed()) {
            break;
        }
    }
    ensure!(
        decision.is_some_and(|decision| decision.is_allowed()),
        "after a refund of an empty budget, the next request was refused: {decision:?}"
    );
    for _ in 0..burst.saturating_mul(2) {
        limiter.refund(&budget);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut allowed = 0;
    for _ in 0..=burst {
        if decide(limiter, &budget).await?.is_allowed() {
            allowed += 1;
        }
    }
    ensure!(
        allowed == burst,
        "after many refunds, {allowed} requests were allowed, not a full budget of {burst}"
    );
    Ok(())
}
