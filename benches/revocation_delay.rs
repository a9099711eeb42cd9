//! How long a revocation takes to reach another replica's cache: many trials of "issue a key,
//! warm a replica's cache with it, revoke it by plain SQL on another connection, and ask the
//! replica until it answers 401", on a real PostgreSQL.
//!
//! Then the same under bursts (BURST_KEYS, default `10000,100000`; `0` skips them): that many
//! keys cached by the replica, then one statement that changes all of them and a revocation,
//! three times; then that many single-row transactions from eight connections and a
//! revocation. The bound is 1 s; the bench fails past it.
//!
//! `PARTNER_API_TEST_DATABASE_URL=postgres://... cargo bench --features postgres --bench
//! revocation_delay` (benches/load.sh runs it beside its own server); TRIALS sets the number.

mod common;

use std::time::{Duration, Instant};

use http::{Request, StatusCode};
use partner_api::cache::{CachingKeyStore, CachingOrderStore};
use partner_api::key::KeyEnvironment;
use partner_api::store::{KeyManager, NewKey};
use partner_api::KeyDigest;
use partner_api::PgStore;
use partner_api::{Organization, PartnerApi};
use sqlx::{Connection, Executor, PgConnection};
use tower::ServiceExt;

async fn status(api: &PartnerApi, key: &str) -> StatusCode {
    let request = Request::get("/v1/me")
        .header("authorization", format!("Bearer {key}"))
        .body(())
        .expect("request");
    api.clone()
        .oneshot(request)
        .await
        .expect("infallible")
        .status()
}

#[tokio::main]
async fn main() {
    let Ok(admin) = std::env::var("PARTNER_API_TEST_DATABASE_URL") else {
        eprintln!("revocation_delay: set PARTNER_API_TEST_DATABASE_URL (benches/load.sh does)");
        return;
    };
    let trials: usize = std::env::var("TRIALS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let name = format!("partner_api_revocation_{}", std::process::id());
    let (mut connection, url) = common::scratch_database(&admin, &name).await;
    let writer = PgStore::connect_lazy(&url).expect("url");
    writer.migrate().await.expect("migrate");
    writer
        .add_organization(&Organization {
            id: "org".into(),
            name: "Org".into(),
        })
        .await
        .expect("organization");
    // The replica: a pool of its own, its listener and its caches.
    let replica_store = PgStore::connect_lazy(&url).expect("url");
    let notifications = partner_api::cache::postgres::listen(replica_store.pool().clone());
    let keys = CachingKeyStore::new(replica_store.clone()).with_notifications(&notifications);
    let orders = CachingOrderStore::new(replica_store).with_notifications(&notifications);
    let replica = PartnerApi::new(keys.clone(), orders);
    while !notifications.is_connected() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut admin_connection = PgConnection::connect(&url).await.expect("connect");
    let mut delays = Vec::with_capacity(trials);
    for _ in 0..trials {
        let issued = writer
            .issue("org", NewKey::new(KeyEnvironment::Test))
            .await
            .expect("issue");
        let key = issued.plaintext().to_owned();
        // Warm: the issue's own notification may still be on its way, and a lookup that
        // overlaps a change is not kept; ask until the cache holds the key.
        let warming = Instant::now();
        while keys.lookup_now_for_bench(&key) != Some(true) {
            assert_eq!(status(&replica, &key).await, StatusCode::OK);
            assert!(
                warming.elapsed() < Duration::from_secs(5),
                "the cache never held the key"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let revoked = Instant::now();
        sqlx::query("UPDATE partner_api_keys SET revoked_at = now() WHERE key_sha256 = $1")
            .bind(&KeyDigest::of(&key).as_bytes()[..])
            .execute(&mut admin_connection)
            .await
            .expect("revoke");
        while status(&replica, &key).await != StatusCode::UNAUTHORIZED {
            tokio::task::yield_now().await;
        }
        delays.push(revoked.elapsed());
    }
    delays.sort();
    let at = |quantile: f64| delays[((delays.len() - 1) as f64 * quantile).round() as usize];
    println!(
        "revocation delay over {trials} trials (SQL UPDATE committed -> 401 from another replica's cache): \
         median {:?}, p90 {:?}, p99 {:?}, worst {:?}",
        at(0.5),
        at(0.9),
        at(0.99),
        delays[delays.len() - 1]
    );
    for count in burst_sizes() {
        burst(&url, &writer, &replica, &keys, count).await;
    }
    drop(replica);
    connection
        .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await
        .ok();
}

/// Whether the replica's cache answers for a key from memory, and with a principal.
trait CachedForBench {
    fn lookup_now_for_bench(&self, key: &str) -> Option<bool>;
}

impl<S: partner_api::KeyStore> CachedForBench for CachingKeyStore<S> {
    fn lookup_now_for_bench(&self, key: &str) -> Option<bool> {
        use partner_api::KeyStore;
        self.lookup_now(&KeyDigest::of(key))
            .map(|answer| matches!(answer, Ok(partner_api::KeyLookup::Valid(_))))
    }
}

fn burst_sizes() -> Vec<usize> {
    std::env::var("BURST_KEYS")
        .unwrap_or_else(|_| "10000,100000".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .filter(|&n| n > 0)
        .collect()
}

/// The delay until `key`, revoked now by `admin`, is refused by `replica`.
async fn revocation_delay(admin: &mut PgConnection, replica: &PartnerApi, key: &str) -> Duration {
    let revoked = Instant::now();
    sqlx::query("UPDATE partner_api_keys SET revoked_at = now() WHERE key_sha256 = $1")
        .bind(&KeyDigest::of(key).as_bytes()[..])
        .execute(&mut *admin)
        .await
        .expect("revoke");
    while status(replica, key).await != StatusCode::UNAUTHORIZED {
        tokio::task::yield_now().await;
    }
    let delay = revoked.elapsed();
    assert!(
        delay < Duration::from_secs(1),
        "revocation refused only after {delay:?}"
    );
    delay
}

/// `count` cached keys, changed in bursts, then revocations.
async fn burst<S: partner_api::KeyStore + Clone + 'static>(
    url: &str,
    writer: &PgStore,
    replica: &PartnerApi,
    keys: &CachingKeyStore<S>,
    count: usize,
) {
    let prefix = format!("pk_test_burst{count}_");
    sqlx::query(
        "INSERT INTO partner_api_keys (organization_id, key_sha256) \
         SELECT 'org', sha256(convert_to($1 || n, 'UTF8')) FROM generate_series(1, $2) n",
    )
    .bind(&prefix)
    .bind(count as i64)
    .execute(writer.pool())
    .await
    .expect("keys");
    let mut admin = PgConnection::connect(url).await.expect("connect");
    let mut statement_delays = Vec::new();
    for trial in 0..3 {
        let warming = Instant::now();
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let keys = keys.clone();
                let prefix = prefix.clone();
                tokio::spawn(async move {
                    use partner_api::KeyStore;
                    for n in (1 + task..=count).step_by(8) {
                        let digest = KeyDigest::of(&format!("{prefix}{n}"));
                        keys.lookup(&digest).await.expect("lookup");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("warm");
        }
        let warmed = warming.elapsed();
        let target = format!("{prefix}{}", trial + 1);
        assert_eq!(status(replica, &target).await, StatusCode::OK);
        sqlx::query(
            "UPDATE partner_api_keys SET expires_at = now() + interval '30 days' \
             WHERE organization_id = 'org' AND revoked_at IS NULL",
        )
        .execute(&mut admin)
        .await
        .expect("burst");
        statement_delays.push(revocation_delay(&mut admin, replica, &target).await);
        if trial == 0 {
            println!("  {count} keys warmed in {warmed:?} ({} held)", keys.len());
        }
    }
    statement_delays.sort();
    println!(
        "revocation after one statement changing {count} cached keys: median {:?}, worst {:?} (3 trials)",
        statement_delays[1], statement_delays[2]
    );
    // Warm again, then the burst as single-row transactions from eight connections.
    for n in 10..10 + 1_000.min(count - 10) {
        use partner_api::KeyStore;
        keys.lookup(&KeyDigest::of(&format!("{prefix}{n}")))
            .await
            .expect("lookup");
    }
    let target = format!("{prefix}9");
    assert_eq!(status(replica, &target).await, StatusCode::OK);
    let started = Instant::now();
    let writers: Vec<_> = (0..8)
        .map(|task| {
            let url = url.to_owned();
            let prefix = prefix.clone();
            tokio::spawn(async move {
                let mut connection = PgConnection::connect(&url).await.expect("connect");
                for n in (10 + task..=count).step_by(8) {
                    sqlx::query(
                        "UPDATE partner_api_keys SET expires_at = now() + interval '60 days' \
                         WHERE key_sha256 = sha256(convert_to($1, 'UTF8'))",
                    )
                    .bind(format!("{prefix}{n}"))
                    .execute(&mut connection)
                    .await
                    .expect("update");
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.expect("writer");
    }
    let written = started.elapsed();
    let delay = revocation_delay(&mut admin, replica, &target).await;
    println!("revocation after {count} single-row transactions ({written:?} to write): {delay:?}");
}
