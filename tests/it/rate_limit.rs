//! Per-key rate limits (issue 8): opt-in, keyed on the key's identity, 429 with `Retry-After`
//! in the JSON envelope, the budget in `X-RateLimit-*` on every response to a valid key, and
//! the trait a shared limiter plugs into.

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::*;
use async_trait::async_trait;
use http::{Request, StatusCode};
use partner_api::{LocalRateLimiter, PartnerApi, RateLimitDecision, RateLimiter, StoreError};

fn limited(burst: u32, period: Duration) -> PartnerApi {
    api().with_rate_limiter(LocalRateLimiter::new(
        period,
        NonZeroU32::new(burst).unwrap(),
    ))
}

fn number(response: &Collected, name: &str) -> u64 {
    response
        .header(name)
        .unwrap_or_else(|| panic!("no {name}"))
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_flood_gets_429s_with_a_correct_retry_after() {
    let api = limited(3, Duration::from_secs(20));
    for (index, path) in ["/v1/me", "/v1/orders", "/v1/me"].into_iter().enumerate() {
        let response = call(&api, get(path, Some(KEY_A))).await;
        assert_eq!(response.status, StatusCode::OK);
        assert_eq!(number(&response, "x-ratelimit-limit"), 3);
        assert_eq!(number(&response, "x-ratelimit-remaining"), 2 - index as u64);
        assert_eq!(response.header("retry-after"), None);
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for path in ["/v1/orders", "/v1/me"] {
        let refused = call(&api, get(path, Some(KEY_A))).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert!(refused.error_message().contains("rate limit"));
        // One request comes back every 20 s; the first of the three went about now.
        let retry_after = number(&refused, "retry-after");
        assert!((19..=20).contains(&retry_after), "{retry_after}");
        assert_eq!(number(&refused, "x-ratelimit-remaining"), 0);
        let reset = number(&refused, "x-ratelimit-reset");
        assert!((now + 59..=now + 61).contains(&reset), "{reset} vs {now}");
        assert_eq!(refused.header("cache-control"), Some("no-store"));
    }
    // Another key of the same organization has its own budget; 401s spend none.
    for _ in 0..5 {
        assert_eq!(
            call(&api, get("/v1/me", Some("pk_test_unknown")))
                .await
                .status,
            401
        );
    }
    let other = call(&api, get("/v1/me", Some(KEY_B))).await;
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(number(&other, "x-ratelimit-remaining"), 2);
}

#[tokio::test]
async fn a_refused_client_that_waits_retry_after_is_served() {
    let api = limited(1, Duration::from_millis(300));
    assert_eq!(call(&api, get("/v1/me", Some(KEY_A))).await.status, 200);
    let refused = call(&api, get("/v1/me", Some(KEY_A))).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    // Whole seconds, rounded up: never an invitation to retry at once.
    assert_eq!(refused.header("retry-after"), Some("1"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(call(&api, get("/v1/me", Some(KEY_A))).await.status, 200);
}

#[tokio::test]
async fn a_304_still_reports_the_budget_and_spends_from_it() {
    let api = limited(2, Duration::from_secs(60));
    let first = call(&api, get("/v1/orders", Some(KEY_A))).await;
    let mut again: Request<()> = get("/v1/orders", Some(KEY_A));
    again.headers_mut().insert(
        "if-none-match",
        first.header("etag").unwrap().parse().unwrap(),
    );
    let unchanged = call(&api, again).await;
    assert_eq!(unchanged.status, StatusCode::NOT_MODIFIED);
    assert_eq!(number(&unchanged, "x-ratelimit-remaining"), 0);
    assert_eq!(call(&api, get("/v1/orders", Some(KEY_A))).await.status, 429);
}

#[tokio::test]
async fn without_a_limiter_there_are_no_limit_headers() {
    for _ in 0..50 {
        let response = call(&api(), get("/v1/me", Some(KEY_A))).await;
        assert_eq!(response.status, StatusCode::OK);
        assert_eq!(response.header("x-ratelimit-limit"), None);
    }
}

/// A limiter that answers only through the async `check`, as a shared (Redis) one would, and
/// records the key ids it is asked about.
#[derive(Default)]
struct SharedCounter {
    asked: Mutex<Vec<String>>,
    served: AtomicUsize,
    down: bool,
}

#[async_trait]
impl RateLimiter for SharedCounter {
    async fn check(&self, budget: &str) -> Result<RateLimitDecision, StoreError> {
        tokio::task::yield_now().await;
        if self.down {
            return Err(StoreError::unavailable("counter store unreachable"));
        }
        self.asked.lock().unwrap().push(budget.to_owned());
        let served = self.served.fetch_add(1, Ordering::SeqCst) as u32;
        Ok(if served < 2 {
            RateLimitDecision::allowed(2, 1 - served, Duration::from_secs(10))
        } else {
            RateLimitDecision::refused(2, Duration::from_millis(2500), Duration::from_secs(10))
        })
    }

    fn refund(&self, _: &str) {}
}

#[tokio::test]
async fn a_shared_limiter_plugs_in_through_the_trait_keyed_on_the_key_id() {
    let limiter = Arc::new(SharedCounter::default());
    let api = api().with_rate_limiter(limiter.clone());
    assert_eq!(call(&api, get("/v1/orders", Some(KEY_A))).await.status, 200);
    assert_eq!(call(&api, get("/v1/me", Some(KEY_B))).await.status, 200);
    let refused = call(&api, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(refused.header("retry-after"), Some("3"));
    let asked = limiter.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 3);
    // The limiter sees the store's key id, never the key.
    for id in &asked {
        assert!(![KEY_A, KEY_B]
            .iter()
            .any(|key| key.contains(id.as_str()) || id.contains(key)));
    }
    assert_eq!(asked[0], asked[2]);
    assert_ne!(asked[0], asked[1]);
}

#[cfg(feature = "testing")]
#[tokio::test]
async fn limiters_pass_the_conformance_suite_and_a_broken_one_fails_it() {
    let local = LocalRateLimiter::new(Duration::from_secs(60), NonZeroU32::new(3).unwrap());
    let report = partner_api::testing::run_rate_limiter(&local, 3).await;
    report.assert_passed();
    assert_eq!(report.len(), 4);

    /// Counts down but never refuses.
    struct NeverRefuses(AtomicUsize);
    #[async_trait]
    impl RateLimiter for NeverRefuses {
        async fn check(&self, _: &str) -> Result<RateLimitDecision, StoreError> {
            let used = self.0.fetch_add(1, Ordering::SeqCst) as u32;
            Ok(RateLimitDecision::allowed(
                3,
                2u32.saturating_sub(used),
                Duration::ZERO,
            ))
        }

        fn refund(&self, _: &str) {}
    }
    let report =
        partner_api::testing::run_rate_limiter(&NeverRefuses(AtomicUsize::new(0)), 3).await;
    let failed: Vec<_> = report.failures().map(|(name, _)| name).collect();
    assert!(
        failed.iter().any(|name| name.contains("refused")),
        "{report}"
    );
    assert!(
        failed.iter().any(|name| name.contains("budget of its own")),
        "{report}"
    );
}

#[tokio::test]
async fn a_failing_limiter_lets_requests_through_and_is_logged() {
    let logs = CapturedLogs::default();
    let _guard = logs.install();
    let api = api().with_rate_limiter(SharedCounter {
        down: true,
        ..SharedCounter::default()
    });
    let response = call(&api, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.header("x-ratelimit-limit"), None);
    assert!(
        logs.text().contains("rate limiter failed"),
        "{}",
        logs.text()
    );
}

#[tokio::test]
async fn an_order_store_failure_after_the_limiter_still_reports_the_budget() {
    // Keys resolve; orders fail: the 500 is a response to a valid key, and says its budget.
    let orders = Arc::new(FailingStore(|| StoreError::other("down")));
    let api = PartnerApi::new(Arc::new(store()), orders)
        .with_rate_limiter(LocalRateLimiter::per_second(NonZeroU32::new(5).unwrap()));
    let response = call(&api, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(number(&response, "x-ratelimit-limit"), 5);
    assert_eq!(number(&response, "x-ratelimit-remaining"), 4);
    // A key lookup that fails has no key, so no budget to report.
    let failing = PartnerApi::from_store(FailingStore(|| StoreError::other("down")))
        .with_rate_limiter(LocalRateLimiter::per_second(NonZeroU32::new(5).unwrap()));
    let response = call(&failing, get("/v1/me", Some(KEY_A))).await;
    assert_eq!(response.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(response.header("x-ratelimit-limit"), None);
}

#[tokio::test]
async fn stores_that_must_be_waited_for_are_limited_alike() {
    let slow = SlowStore {
        inner: store(),
        delay: Duration::from_millis(1),
    };
    let api = PartnerApi::from_store(slow).with_rate_limiter(LocalRateLimiter::new(
        Duration::from_secs(60),
        NonZeroU32::new(2).unwrap(),
    ));
    for expected in [200, 200, 429] {
        let response = call(&api, get("/v1/orders", Some(KEY_A))).await;
        assert_eq!(response.status, expected);
    }
}
