//! The same check across a real process boundary: two standalone hosts (processes) on one
//! PostgreSQL, each through a proxy that stalls and cuts its connections (its listening
//! connection among them), clients over HTTP, revocations by the `keys revoke` command and
//! by SQL. A 200 for a key whose revocation committed more than 1 s before the request was
//! sent is a violation.
//!
//! `PARTNER_API_HISTORY_PROCESS_SECONDS` sets the duration (default 15).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::StatusCode;
use http_body_util::{BodyExt, Empty};
use partner_api::KeyDigest;
use sqlx::{Connection, PgConnection};

use super::{faults_near, seed, seeded_database, setting, Random, BOUND};
use crate::common::net::{http1, HttpClient};
use crate::common::pg::{kill_listeners, Proxy};
use crate::common::{keys_command, Process};

const KEYS: usize = 60;
const HOSTS: usize = 2;

/// What happened: (sent, host, key, status) for each answered request; when each revoked
/// key's revocation had committed; the faults, for the report.
#[derive(Default)]
struct History {
    requests: Vec<(Instant, usize, usize, StatusCode)>,
    revoked: HashMap<usize, Instant>,
    faults: Vec<(Instant, String)>,
}

/// The status of `GET /v1/me` with `key` from `base`, or `None` when the request failed
/// (a connection the host closed) or took longer than 5 s.
async fn status(client: &HttpClient, base: &str, key: &str) -> Option<StatusCode> {
    let request = http::Request::get(format!("{base}/v1/me"))
        .header("authorization", format!("Bearer {key}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let answered = tokio::time::timeout(Duration::from_secs(5), async {
        let response = client.request(request).await.ok()?;
        let status = response.status();
        response.into_body().collect().await.ok()?;
        Some(status)
    });
    answered.await.ok().flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_history_across_processes_serves_a_revoked_key_past_the_bound() {
    crate::common::needs::needs!(Postgres, Examples);
    let seconds: u64 = setting("PARTNER_API_HISTORY_PROCESS_SECONDS").unwrap_or(15);
    let seed = seed();
    println!("history across processes: {seconds} s, PARTNER_API_HISTORY_SEED={seed}");
    let (url, store) = seeded_database().await;
    let names: Vec<String> = (0..KEYS)
        .map(|n| format!("pk_test_processes_{n:03}_abcdefghijklmnop"))
        .collect();
    let mut ids = Vec::new();
    for name in &names {
        ids.push(store.add_key(name, "org_other").await.unwrap());
    }

    let mut proxies = Vec::new();
    let mut hosts = Vec::new();
    let mut bases = Vec::new();
    for _ in 0..HOSTS {
        let (proxy, proxied) = Proxy::in_front_of(&url).await;
        let mut host = Process::spawn(&[
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            &proxied,
            "--no-migrate",
            "--no-webhooks",
            // Clients ask for revoked keys on purpose, from one address.
            "--auth-failure-limit",
            "0",
            "--max-connections-per-ip",
            "0",
            "--request-timeout",
            "3",
        ]);
        bases.push(host.base_url().await);
        hosts.push(host);
        proxies.push(proxy);
    }
    wait_until_serving(&bases, &names[0]).await;

    let history = Arc::new(Mutex::new(History::default()));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let bases = Arc::new(bases);
    let names = Arc::new(names);
    let clients: Vec<_> = (0..4_u64)
        .map(|client| {
            let (bases, names, history) = (bases.clone(), names.clone(), history.clone());
            tokio::spawn(async move {
                let http = http1();
                let mut random = Random(seed ^ (client + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                while Instant::now() < deadline {
                    let key = random.below(KEYS);
                    let at = random.below(HOSTS);
                    let sent = Instant::now();
                    if let Some(status) = status(&http, &bases[at], &names[key]).await {
                        let mut history = history.lock().unwrap();
                        history.requests.push((sent, at, key, status));
                    }
                    tokio::time::sleep(Duration::from_millis(random.below(3) as u64)).await;
                }
            })
        })
        .collect();

    let mut random = Random(seed);
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let mut live: Vec<usize> = (0..KEYS).collect();
    let mut stalled_until = [Instant::now(); HOSTS];
    while Instant::now() < deadline {
        for (at, proxy) in proxies.iter().enumerate() {
            if stalled_until[at] <= Instant::now() {
                proxy.stall(false);
            }
        }
        let fault = match random.below(100) {
            // Revoke with the keys command, as an operator would.
            0..=19 if !live.is_empty() => {
                let key = live.swap_remove(random.below(live.len()));
                let revoke = ["revoke", "--organization", "org_other", "--id", &ids[key]];
                let (ok, _, stderr) = keys_command(Some(&url), &revoke).await;
                assert!(ok, "{stderr}");
                // The commit is before the command's exit, by the milliseconds it takes to
                // print and close its connection: noted at the exit, the bound is checked
                // that much later than it holds, never earlier (no false violation).
                history.lock().unwrap().revoked.insert(key, Instant::now());
                None
            }
            // Revoke by plain SQL.
            20..=39 if !live.is_empty() => {
                let key = live.swap_remove(random.below(live.len()));
                sqlx::query("UPDATE partner_api_keys SET revoked_at = now() WHERE key_sha256 = $1")
                    .bind(&KeyDigest::of(&names[key]).as_bytes()[..])
                    .execute(&mut admin)
                    .await
                    .unwrap();
                history.lock().unwrap().revoked.insert(key, Instant::now());
                None
            }
            // Stall a host's connections to the database (its listener's among them).
            40..=59 => {
                let at = random.below(HOSTS);
                if stalled_until[at] <= Instant::now() {
                    proxies[at].stall(true);
                    stalled_until[at] = Instant::now() + random.millis(50, 1_500);
                    Some(format!("host {at} stalled"))
                } else {
                    None
                }
            }
            // Cut every connection of a host to the database, and let it connect again.
            60..=64 => {
                let at = random.below(HOSTS);
                proxies[at].stop().await;
                tokio::time::sleep(random.millis(10, 200)).await;
                proxies[at].resume().await;
                Some(format!("host {at} cut off"))
            }
            // Kill the listening connections of this database.
            65..=67 => {
                kill_listeners(&mut admin).await;
                Some("listening connections killed".to_owned())
            }
            _ => None,
        };
        if let Some(fault) = fault {
            history.lock().unwrap().faults.push((Instant::now(), fault));
        }
        tokio::time::sleep(random.millis(20, 150)).await;
    }
    for proxy in &proxies {
        proxy.stall(false);
    }
    for client in clients {
        client.await.unwrap();
    }
    for host in hosts {
        host.terminate().await;
    }

    let history = history.lock().unwrap();
    let started = history.requests.first().map(|(sent, ..)| *sent).unwrap();
    let seconds_in = |at: Instant| at.saturating_duration_since(started).as_secs_f64();
    let mut violations = Vec::new();
    for (sent, at, key, status) in &history.requests {
        let Some(revoked) = history.revoked.get(key) else {
            continue;
        };
        if *status == StatusCode::OK && sent.saturating_duration_since(*revoked) > BOUND {
            let faults = faults_near(&history.faults, *revoked, &seconds_in);
            violations.push(format!(
                "200 from host {at} at {:.3}s for key {key}, revoked at {:.3}s; faults near: {faults:?}",
                seconds_in(*sent),
                seconds_in(*revoked),
            ));
        }
    }
    let statuses = history
        .requests
        .iter()
        .fold(HashMap::new(), |mut counts, request| {
            *counts.entry(request.3.as_u16()).or_insert(0) += 1;
            counts
        });
    println!(
        "history across processes: {} requests {statuses:?}, {} revocations, {} faults",
        history.requests.len(),
        history.revoked.len(),
        history.faults.len()
    );
    assert!(history.revoked.len() >= 10, "too few revocations to check");
    assert!(
        violations.is_empty(),
        "seed {seed}: {} violations:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

/// Waits (up to 20 s) until every host serves `key`.
async fn wait_until_serving(bases: &[String], key: &str) {
    let http = http1();
    for base in bases {
        let started = Instant::now();
        while status(&http, base, key).await != Some(StatusCode::OK) {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{base} never served"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
