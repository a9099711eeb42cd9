//! The per-organization budgets of the management service's changes: the check that answers
//! a request past its budget with a 429.

use super::bodies::Failure;

/// The 429 (with `Retry-After` and `message`) of a request past the organization's budget in
/// `limiter`, if it is.
pub(super) async fn within_budget(
    limiter: &crate::rate_limit::LocalRateLimiter,
    organization_id: &str,
    message: &str,
) -> Result<(), Failure> {
    use crate::rate_limit::RateLimiter as _;
    let decision = limiter.check(organization_id).await;
    match decision.ok().and_then(|decision| decision.retry_after()) {
        Some(wait) => {
            let mut failure = Failure::new(http::StatusCode::TOO_MANY_REQUESTS, message);
            failure.retry_after = Some(wait);
            Err(failure)
        }
        None => Ok(()),
    }
}
