//! `RedisRateLimiter` against a real Redis server: it passes the rate-limiter conformance
//! suite, two API instances share one budget per key, and a Redis that is down or silent fails
//! open within a bounded time.
#![cfg(feature = "redis")]

use std::num::NonZeroU32;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use http::StatusCode;
use partner_api::rate_limit::redis::RedisRateLimiter;
use partner_api::PartnerApi;

fn redis_url() -> String {
    std::env::var("PARTNER_API_TEST_REDIS_URL")
        .expect("the Redis tests need a server: run them with bash .ci/test, which starts one")
}

/// A limiter of `burst` requests a minute per key: none comes back while a test runs.
fn limiter(url: &str, burst: u32) -> RedisRateLimiter {
    RedisRateLimiter::new(
        url,
        Duration::from_secs(60),
        NonZeroU32::new(burst).unwrap(),
    )
    .unwrap()
    .with_timeout(Duration::from_millis(500))
}

#[tokio::test]
async fn the_redis_limiter_passes_the_conformance_suite() {
    crate::common::needs::needs!(Redis);
    let report = partner_api::testing::run_rate_limiter(&limiter(&redis_url(), 5), 5).await;
    report.assert_passed();
}

#[tokio::test]
async fn two_api_instances_share_one_budget_per_key() {
    crate::common::needs::needs!(Redis);
    let url = redis_url();
    // A store of its own, so its key ids are this test's alone on the shared server.
    let store = store();
    let key = format!("pk_test_shared_{}", std::process::id());
    store.add_key(&key, "org_b").unwrap();
    let prefix = format!(
        "partner_api_test:shared:{}:{}:",
        std::process::id(),
        key.len()
    );
    let shared = || limiter(&url, 3).with_key_prefix(prefix.clone());
    let replicas = [
        PartnerApi::from_store(store.clone()).with_rate_limiter(shared()),
        PartnerApi::from_store(store.clone()).with_rate_limiter(shared()),
    ];
    let mut remaining = Vec::new();
    for replica in replicas.iter().cycle().take(3) {
        let answer = call(replica, get("/v1/me", Some(&key))).await;
        assert_eq!(answer.status, StatusCode::OK);
        remaining.push(answer.header("x-ratelimit-remaining").unwrap().to_owned());
    }
    assert_eq!(
        remaining,
        ["2", "1", "0"],
        "one budget across both instances"
    );
    for replica in &replicas {
        let refused = call(replica, get("/v1/me", Some(&key))).await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
    }
}

#[tokio::test]
async fn a_redis_that_is_down_or_silent_fails_open_within_the_timeout() {
    // A server of this test's own, stopped halfway.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    let url = format!("redis://127.0.0.1:{port}/");
    let api = PartnerApi::from_store(store()).with_rate_limiter(
        RedisRateLimiter::new(&url, Duration::from_secs(60), NonZeroU32::new(100).unwrap())
            .unwrap()
            .with_timeout(Duration::from_millis(100)),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = call(&api, get("/v1/me", Some(KEY_A))).await;
        if answer.header("x-ratelimit-limit").is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "redis-server never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.kill().unwrap();
    server.wait().unwrap();
    for _ in 0..5 {
        let started = Instant::now();
        let answer = call(&api, get("/v1/me", Some(KEY_A))).await;
        assert_eq!(answer.status, StatusCode::OK, "served without a limit");
        assert!(answer.header("x-ratelimit-limit").is_none());
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "took {:?}",
            started.elapsed()
        );
    }

    // A server that accepts and never answers: the same, after the timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_url = format!("redis://{}/", silent.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let api = PartnerApi::from_store(store()).with_rate_limiter(
        RedisRateLimiter::new(
            &silent_url,
            Duration::from_secs(60),
            NonZeroU32::new(100).unwrap(),
        )
        .unwrap()
        .with_timeout(Duration::from_millis(100)),
    );
    for _ in 0..3 {
        let started = Instant::now();
        let answer = call(&api, get("/v1/me", Some(KEY_A))).await;
        assert_eq!(answer.status, StatusCode::OK);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "took {:?}",
            started.elapsed()
        );
    }
    held.abort();
}
