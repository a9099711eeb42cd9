//! Soak: the standalone host under many concurrent connections for a fixed time, with valid,
//! revoked and unknown keys mixed. Every response must be the exact expected one for its key
//! (a 200 with that organization's bytes, or a 401), and the host's resident memory must stay
//! flat between the first and the last third of the run.
//!
//! Ignored by default; CI runs it: `cargo test --all-features --test it soak:: -- --ignored --nocapture`
//! (`SOAK_SECONDS`, default 20; `SOAK_CONNECTIONS`, default 64).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::order;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use partner_api::seed::{Seed, SeedKey, SeedOrder};
use partner_api::{Organization, PartnerApi};
use tower::ServiceExt;

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Six organizations with 0 to 150 orders, two live keys and one revoked key each.
fn world() -> Seed {
    let mut seed = Seed::default();
    for org in 0..6_i64 {
        let id = format!("org{org}");
        seed.organizations.push(Organization {
            id: id.clone(),
            name: format!("Organization {org}"),
        });
        for (n, revoked) in [(0, false), (1, false), (2, true)] {
            seed.api_keys.push(SeedKey {
                key: format!("soak_key_{org}_{n}"),
                organization_id: id.clone(),
                revoked,
                ..SeedKey::default()
            });
        }
        for n in 0..org * 30 {
            seed.orders.push(SeedOrder {
                organization_id: id.clone(),
                order: order(
                    &format!("o{org}-{n}"),
                    crate::common::BASE_MILLIS + n * 1000 + org,
                ),
            });
        }
    }
    seed
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|line| line.starts_with("VmRSS:"))
                .and_then(|line| line.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a soak test: run with --ignored"]
async fn the_host_holds_mixed_load_with_exact_answers_and_flat_memory() {
    let seconds = env_number("SOAK_SECONDS", 20);
    let connections = env_number("SOAK_CONNECTIONS", 64);
    let seed = world();

    // The expected answer for every (key, path), from the same data in process.
    let reference = PartnerApi::from_store(seed.to_memory_store().unwrap());
    let mut keys: Vec<String> = seed.api_keys.iter().map(|k| k.key.clone()).collect();
    keys.push("soak_key_never_issued".into());
    let mut expected: HashMap<(String, &str), (StatusCode, Bytes)> = HashMap::new();
    for key in &keys {
        for path in ["/v1/me", "/v1/orders"] {
            let request = Request::get(path)
                .header("authorization", format!("Bearer {key}"))
                .body(())
                .unwrap();
            let response = reference.clone().oneshot(request).await.unwrap();
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            expected.insert((key.clone(), path), (status, body));
        }
    }
    let expected = Arc::new(expected);

    let seed_file = crate::common::scratch::scratch_path("soak.json");
    std::fs::write(&seed_file, serde_json::to_string(&seed).unwrap()).unwrap();
    let mut process = crate::common::Process::spawn_with_env(
        &[
            "--listen",
            "127.0.0.1:0",
            "--seed",
            seed_file.to_str().unwrap(),
            // Exact answers: one address retrying revoked keys this fast would be throttled
            // (429), which tests/it/fairness.rs checks on its own.
            "--auth-failure-limit",
            "0",
            // One address, as behind a load balancer: the client's pool may briefly hold more
            // than the per-address cap of connections.
            "--max-connections-per-ip",
            "0",
        ],
        &[("RUST_LOG", "warn")],
    );
    let pid = process.child.id().unwrap();
    let base = process.base_url().await;

    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(connections as usize)
        .build_http();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let ok = Arc::new(AtomicU64::new(0));
    let unauthorized = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop_sampling = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn({
        let stop = stop_sampling.clone();
        async move {
            let mut samples = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                samples.push(rss_kib(pid));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            samples
        }
    });
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..connections {
        let (client, base, keys, expected) =
            (client.clone(), base.clone(), keys.clone(), expected.clone());
        let (ok, unauthorized, failures) = (ok.clone(), unauthorized.clone(), failures.clone());
        workers.push(tokio::spawn(async move {
            let mut n = worker as usize;
            while Instant::now() < deadline {
                n = n.wrapping_mul(31).wrapping_add(7);
                let key = &keys[n % keys.len()];
                let path = if n % 3 == 0 { "/v1/me" } else { "/v1/orders" };
                let request = Request::get(format!("{base}{path}"))
                    .header("authorization", format!("Bearer {key}"))
                    .body(Empty::new())
                    .unwrap();
                let outcome = match client.request(request).await {
                    Ok(response) => {
                        let status = response.status();
                        match response.into_body().collect().await {
                            Ok(body) => Ok((status, body.to_bytes())),
                            Err(err) => Err(format!("body: {err}")),
                        }
                    }
                    Err(err) => Err(format!("request: {err}")),
                };
                let want = &expected[&(key.clone(), path)];
                match outcome {
                    Ok((status, body)) if (status, &body) == (want.0, &want.1) => {
                        if status == StatusCode::OK {
                            &ok
                        } else {
                            &unauthorized
                        }
                        .fetch_add(1, Ordering::Relaxed);
                    }
                    Ok((status, _)) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{key} {path}: {status}, wrong answer")),
                    Err(err) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{key} {path}: {err}")),
                }
            }
        }));
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let elapsed = started.elapsed();
    stop_sampling.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    assert!(process.terminate().await.success());
    let _ = std::fs::remove_file(seed_file);

    let (ok, unauthorized) = (
        ok.load(Ordering::Relaxed),
        unauthorized.load(Ordering::Relaxed),
    );
    let third = samples.len() / 3;
    let mean = |s: &[u64]| s.iter().sum::<u64>() / s.len().max(1) as u64;
    let (first, last) = (
        mean(&samples[..third]),
        mean(&samples[samples.len() - third..]),
    );
    println!(
        "soak: {seconds} s, {connections} connections: {} requests ({:.0}/s), {ok} x 200, {unauthorized} x 401; \
         RSS first third {first} KiB, last third {last} KiB, peak {} KiB",
        ok + unauthorized,
        (ok + unauthorized) as f64 / elapsed.as_secs_f64(),
        samples.iter().max().unwrap_or(&0)
    );
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} failures, first: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    assert!(
        ok > 0 && unauthorized > 0,
        "both valid and refused keys were exercised"
    );
    assert!(third >= 2, "too few memory samples");
    assert!(
        last <= first + first / 10 + 1024,
        "RSS grew from {first} KiB to {last} KiB"
    );
}
