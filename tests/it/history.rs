//! A checker over histories: two replicas on one PostgreSQL, clients, revocations, rolls,
//! bursts and faults (stalled listeners, killed listening connections) mixed at random for a
//! bounded time; every request is recorded with its send time and answer, every revocation
//! with its commit, and the whole history is checked afterwards: a 200 for a key whose
//! revocation committed more than 1 s before the request was sent is a violation.
//!
//! `PARTNER_API_HISTORY_SECONDS` sets the duration (default 20), `PARTNER_API_HISTORY_SEED`
//! the random seed (printed, to replay a run).
#![cfg(feature = "postgres")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::StatusCode;
use partner_api::cache::{CachingKeyStore, CachingOrderStore};
use partner_api::management::KeyManager;
use partner_api::seed::Seed;
use partner_api::store::postgres::PgStore;
use partner_api::{KeyDigest, PartnerApi};
use sqlx::{Connection, PgConnection};

use crate::common::pg::{fresh_database, until_answering, Proxy};
use crate::common::*;

const BOUND: Duration = Duration::from_secs(1);
const KEYS: usize = 200;

/// A small deterministic generator (xorshift64*), so a failing run can be replayed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What happened, in the order it was recorded.
#[derive(Default)]
struct History {
    /// (sent, replica, key, status)
    requests: Vec<(Instant, usize, String, StatusCode)>,
    /// key -> when its revocation (or a roll that ended it) had committed
    revoked: HashMap<String, Instant>,
    faults: Vec<(Instant, String)>,
}

struct HistoryReplica {
    api: PartnerApi,
    proxy: Proxy,
}

async fn replica(url: &str) -> HistoryReplica {
    let store = PgStore::connect_lazy(url).unwrap();
    let (proxy, proxied) = Proxy::in_front_of(url).await;
    let listening = PgStore::connect_lazy(&proxied).unwrap();
    let notifications = partner_api::cache::postgres::listen(listening.pool().clone());
    let keys = CachingKeyStore::new(store.clone()).with_notifications(&notifications);
    let orders = CachingOrderStore::new(store).with_notifications(&notifications);
    let api = PartnerApi::new(keys, orders).with_store_timeout(Some(Duration::from_millis(500)));
    until_answering(&notifications).await;
    // The hub lives as long as the caches that follow it.
    HistoryReplica { api, proxy }
}

/// A live key, taken out of `live`, if any is left.
fn take_live(live: &Mutex<Vec<String>>, random: &mut Random) -> Option<String> {
    let mut live = live.lock().unwrap();
    let count = live.len();
    (count > 0).then(|| live.swap_remove(random.below(count)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_history_serves_a_revoked_key_past_the_bound() {
    let seconds: u64 = std::env::var("PARTNER_API_HISTORY_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let seed: u64 = std::env::var("PARTNER_API_HISTORY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    println!("history: {seconds} s, PARTNER_API_HISTORY_SEED={seed}");
    let url = fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
    // The history issues keys by the hundred: past the default cap of active keys.
    store
        .set_key_policy(
            "org_demo",
            partner_api::management::KeyPolicy::new().with_max_active_keys(1_000_000),
        )
        .await
        .unwrap();
    let keys: Vec<String> = (0..KEYS)
        .map(|n| format!("pk_test_history_{n:02}_abcdefghijklmnop"))
        .collect();
    for key in &keys {
        store.add_key(key, "org_demo").await.unwrap();
    }
    let replicas = Arc::new([replica(&url).await, replica(&url).await]);
    let history = Arc::new(Mutex::new(History::default()));
    let live = Arc::new(Mutex::new(keys.clone()));
    let deadline = Instant::now() + Duration::from_secs(seconds);

    // Clients: any live or revoked key, on either replica.
    let clients: Vec<_> = (0..4_u64)
        .map(|client| {
            let (replicas, history, keys) = (replicas.clone(), history.clone(), keys.clone());
            tokio::spawn(async move {
                let mut random = Random(seed ^ (client + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                while Instant::now() < deadline {
                    let key = &keys[random.below(keys.len())];
                    let at = random.below(2);
                    let sent = Instant::now();
                    let status = call(&replicas[at].api, get("/v1/me", Some(key)))
                        .await
                        .status;
                    history
                        .lock()
                        .unwrap()
                        .requests
                        .push((sent, at, key.clone(), status));
                    tokio::time::sleep(Duration::from_millis(random.below(3) as u64)).await;
                }
            })
        })
        .collect();

    // Changes and faults, one at a time.
    let mut random = Random(seed);
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let mut stalled: Option<(usize, Instant)> = None;
    while Instant::now() < deadline {
        if let Some((at, until)) = stalled {
            if Instant::now() >= until {
                replicas[at].proxy.stall(false);
                stalled = None;
            }
        }
        let choice = random.below(100);
        let event = match choice {
            // Revoke a live key by plain SQL.
            0..=29 => {
                let key = take_live(&live, &mut random);
                if let Some(key) = key {
                    sqlx::query(
                        "UPDATE partner_api_keys SET revoked_at = now() WHERE key_sha256 = $1",
                    )
                    .bind(&KeyDigest::of(&key).as_bytes()[..])
                    .execute(&mut admin)
                    .await
                    .unwrap();
                    history.lock().unwrap().revoked.insert(key, Instant::now());
                }
                None
            }
            // Roll a live key with no overlap: the old one ends at the roll's commit.
            30..=34 => {
                let key = take_live(&live, &mut random);
                if let Some(key) = key {
                    let id: i64 =
                        sqlx::query_scalar("SELECT id FROM partner_api_keys WHERE key_sha256 = $1")
                            .bind(&KeyDigest::of(&key).as_bytes()[..])
                            .fetch_one(&mut admin)
                            .await
                            .unwrap();
                    store
                        .roll(
                            "org_demo",
                            &id.to_string(),
                            partner_api::management::RollKey::new(Duration::ZERO),
                        )
                        .await
                        .unwrap();
                    history.lock().unwrap().revoked.insert(key, Instant::now());
                }
                None
            }
            // A burst: one statement over every key, then single-row changes.
            35..=39 => {
                sqlx::query(
                    "UPDATE partner_api_keys SET expires_at = now() + interval '1 day' \
                     WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())",
                )
                .execute(&mut admin)
                .await
                .unwrap();
                for _ in 0..50 {
                    sqlx::query(
                        "UPDATE partner_api_keys SET expires_at = expires_at + interval '1 second' \
                         WHERE id = (SELECT id FROM partner_api_keys WHERE expires_at > now() \
                                     ORDER BY random() LIMIT 1)",
                    )
                    .execute(&mut admin)
                    .await
                    .unwrap();
                }
                Some("burst".to_owned())
            }
            // Stall a replica's listening connection for 1 to 2.8 s.
            40..=59 if stalled.is_none() => {
                let at = random.below(2);
                replicas[at].proxy.stall(true);
                let until =
                    Instant::now() + Duration::from_millis(200 + random.below(1_300) as u64);
                stalled = Some((at, until));
                Some(format!("listener of replica {at} stalled"))
            }
            // Kill every listening connection of this test's database (only this one's: the
            // server is shared with the tests running beside it).
            60..=62 => {
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = current_database() \
                     AND application_name = 'partner_api_cache_listener'",
                )
                .execute(&mut admin)
                .await
                .unwrap();
                Some("listening connections killed".to_owned())
            }
            _ => None,
        };
        if let Some(event) = event {
            history.lock().unwrap().faults.push((Instant::now(), event));
        }
        tokio::time::sleep(Duration::from_millis(20 + random.below(150) as u64)).await;
    }
    if let Some((at, _)) = stalled {
        replicas[at].proxy.stall(false);
    }
    for client in clients {
        client.await.unwrap();
    }

    let history = history.lock().unwrap();
    let started = history.requests.first().map(|(sent, ..)| *sent).unwrap();
    let seconds_in = |at: Instant| at.saturating_duration_since(started).as_secs_f64();
    let mut violations = Vec::new();
    let mut served_after_revocation = 0;
    for (sent, at, key, status) in &history.requests {
        let Some(revoked) = history.revoked.get(key) else {
            continue;
        };
        if *status == StatusCode::OK && sent > revoked {
            served_after_revocation += 1;
            if sent.saturating_duration_since(*revoked) > BOUND {
                let faults: Vec<String> = history
                    .faults
                    .iter()
                    .filter(|(when, _)| when.saturating_duration_since(*revoked) < BOUND * 2)
                    .filter(|(when, _)| revoked.saturating_duration_since(*when) < BOUND * 2)
                    .map(|(when, what)| format!("{:.3}s {what}", seconds_in(*when)))
                    .collect();
                violations.push(format!(
                    "200 from replica {at} at {:.3}s for {key}, revoked at {:.3}s ({:?} before); faults near: {faults:?}",
                    seconds_in(*sent),
                    seconds_in(*revoked),
                    sent.saturating_duration_since(*revoked)
                ));
            }
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
        "history: {} requests {statuses:?}, {} revocations, {} faults and bursts, {served_after_revocation} \
         answered 200 within the bound after a revocation",
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
