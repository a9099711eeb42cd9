//! The conformance suite for [`RateLimiter`]s.

use std::sync::Arc;

use super::namespace;
use super::report::{ensure, failed, Check, Report};
use crate::model::Organization;
use crate::rate_limit::{RateLimitDecision, RateLimiter};
use crate::store::Principal;

/// Runs every rate-limiter check against `limiter`, whose budget per key is `burst` requests
/// and which must not give a request back within the run (a refill period of a second or
/// more does). Each check uses key ids of its own.
pub async fn run_rate_limiter<L: RateLimiter>(limiter: &L, burst: u32) -> Report {
    let mut report = Report::default();
    let mut record = |name, result| report.results.push((name, result));
    record(
        "a burst is served, counting down, then refused with a time to wait",
        burst_then_refused(limiter, burst).await,
    );
    record(
        "each key id has a budget of its own, even within one organization",
        keys_apart(limiter, burst).await,
    );
    record(
        "an immediate answer spends the budget as an awaited one does",
        now_agrees(limiter, burst).await,
    );
    report
}

fn principal_of(key_id: String, organization_id: &str) -> Principal {
    Principal::new(
        key_id,
        Arc::new(Organization {
            id: organization_id.into(),
            name: "Rate limit conformance".into(),
        }),
    )
}

async fn decide<L: RateLimiter>(
    limiter: &L,
    principal: &Principal,
) -> Result<RateLimitDecision, String> {
    limiter.check(principal).await.map_err(failed("check"))
}

async fn burst_then_refused<L: RateLimiter>(limiter: &L, burst: u32) -> Check {
    let principal = principal_of(namespace(), "org");
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
    let spender = principal_of(format!("{ns}_a"), &ns);
    for _ in 0..=burst {
        decide(limiter, &spender).await?;
    }
    let other = principal_of(format!("{ns}_b"), &ns);
    let decision = decide(limiter, &other).await?;
    ensure!(
        decision.is_allowed() && decision.remaining() == burst - 1,
        "another key of the same organization started with {decision:?}"
    );
    Ok(())
}

async fn now_agrees<L: RateLimiter>(limiter: &L, burst: u32) -> Check {
    let principal = principal_of(namespace(), "org");
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
