//! The revocation bound under load and faults: a revoked key is refused within a second on a
//! replica that verifies keys from memory, after a burst of key changes, with its listener
//! stopped or its listening connection stalled, and with its request pool saturated.
//!
//! `PARTNER_API_BURST_KEYS` sets the number of cached keys of the burst test (default 20,000;
//! the benchmark `benches/revocation_delay.rs` and `docs::performance` go to 100,000).
#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use http::StatusCode;
use partner_api::cache::{CachingKeyStore, CachingOrderStore, Notifications};
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::PgStore;
use partner_api::{KeyDigest, KeyLookup, KeyStore, PartnerApi};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, Executor, PgConnection};

use crate::common::pg::{fresh_database, remembered, until_answering, Proxy};
use crate::common::*;

/// The promise: a revoked key is refused within this of its revocation's commit.
const BOUND: Duration = Duration::from_secs(1);

async fn seeded() -> String {
    let url = fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
    url
}

/// An API on `store` verifying keys through a cache that follows `notifications`.
fn cached_api(
    store: &PgStore,
    notifications: &Notifications,
) -> (PartnerApi, CachingKeyStore<PgStore>) {
    let keys = CachingKeyStore::new(store.clone()).with_notifications(notifications);
    let orders = CachingOrderStore::new(store.clone()).with_notifications(notifications);
    let api =
        PartnerApi::new(keys.clone(), orders).with_store_timeout(Some(Duration::from_millis(300)));
    (api, keys)
}

/// Revokes `key` by plain SQL and returns when the revocation committed.
async fn revoke(admin: &mut PgConnection, key: &str) -> Instant {
    sqlx::query("UPDATE partner_api_keys SET revoked_at = now() WHERE key_sha256 = $1")
        .bind(&KeyDigest::of(key).as_bytes()[..])
        .execute(admin)
        .await
        .unwrap();
    Instant::now()
}

/// Asks `api` for `/v1/me` with `key` until `BOUND * 2` after `revoked`: no 200 after `BOUND`.
/// Returns the last 200's delay after the revocation, if any was seen.
async fn never_served_past_the_bound(
    api: &PartnerApi,
    key: &str,
    revoked: Instant,
) -> Option<Duration> {
    let mut last_served = None;
    while revoked.elapsed() < BOUND * 2 {
        let asked = Instant::now();
        let status = call(api, get("/v1/me", Some(key))).await.status;
        if status == StatusCode::OK {
            let delay = asked.saturating_duration_since(revoked);
            assert!(
                delay <= BOUND,
                "a revoked key was served {delay:?} after its revocation"
            );
            last_served = Some(delay);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    last_served
}

fn burst_keys() -> usize {
    std::env::var("PARTNER_API_BURST_KEYS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_key_changes_does_not_delay_a_revocation() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let count = burst_keys();
    // `count` keys of the demo organization, each cached by the replica.
    sqlx::query(
        "INSERT INTO partner_api_keys (organization_id, key_sha256) \
         SELECT 'org_demo', sha256(convert_to('pk_test_burst_' || n, 'UTF8')) \
         FROM generate_series(1, $1) n",
    )
    .bind(count as i64)
    .execute(&mut admin)
    .await
    .unwrap();
    let notifications = partner_api::cache::postgres::listen(store.pool().clone());
    until_answering(&notifications).await;
    let keys = CachingKeyStore::new(store.clone()).with_notifications(&notifications);
    // Each key read until the cache holds it: a read is kept only while the cache may answer
    // from memory, and on a loaded machine a late heartbeat closes it now and then.
    let warm = |range: std::ops::Range<usize>| {
        let keys = keys.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(120);
            for n in range {
                let digest = KeyDigest::of(&format!("pk_test_burst_{n}"));
                while keys.lookup_now(&digest).is_none() {
                    assert!(Instant::now() < deadline, "the cache would not warm up");
                    assert!(matches!(
                        keys.lookup(&digest).await.unwrap(),
                        KeyLookup::Valid(_)
                    ));
                }
            }
        }
    };
    let quarter = count / 4;
    tokio::join!(
        warm(1..quarter),
        warm(quarter..2 * quarter),
        warm(2 * quarter..3 * quarter),
        warm(3 * quarter..count + 1)
    );
    assert!(keys.len() >= count, "{} keys cached", keys.len());
    let api = PartnerApi::new(keys.clone(), store.clone());
    assert_eq!(
        call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
        StatusCode::OK
    );

    // One statement changes every other key, then the demo key is revoked.
    sqlx::query(
        "UPDATE partner_api_keys SET expires_at = now() + interval '30 days' \
         WHERE key_sha256 <> $1",
    )
    .bind(&KeyDigest::of(DEMO_KEY).as_bytes()[..])
    .execute(&mut admin)
    .await
    .unwrap();
    let revoked = revoke(&mut admin, DEMO_KEY).await;
    let served = never_served_past_the_bound(&api, DEMO_KEY, revoked).await;
    println!("one statement over {count} keys, then a revocation: last served {served:?} after it");

    // The burst as single-row transactions from four connections, then another revocation.
    let other = "pk_test_burst_1";
    for n in 2..200 {
        let _ = keys
            .lookup(&KeyDigest::of(&format!("pk_test_burst_{n}")))
            .await;
    }
    assert_eq!(
        call(&api, get("/v1/me", Some(other))).await.status,
        StatusCode::OK
    );
    let single = (count / 4).max(1_000);
    let writers = (0..4).map(|writer| {
        let url = url.clone();
        tokio::spawn(async move {
            let mut connection = PgConnection::connect(&url).await.unwrap();
            for n in (2 + writer..single).step_by(4) {
                sqlx::query(
                    "UPDATE partner_api_keys SET expires_at = now() + interval '60 days' \
                     WHERE key_sha256 = sha256(convert_to('pk_test_burst_' || $1, 'UTF8'))",
                )
                .bind(n as i64)
                .execute(&mut connection)
                .await
                .unwrap();
            }
        })
    });
    for writer in writers.collect::<Vec<_>>() {
        writer.await.unwrap();
    }
    let revoked = revoke(&mut admin, other).await;
    let served = never_served_past_the_bound(&api, other, revoked).await;
    println!(
        "{single} single-row transactions, then a revocation: last served {served:?} after it"
    );
}

#[test]
fn a_stopped_listener_turns_the_caches_off_by_itself() {
    crate::common::needs::needs!(Postgres);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let url = runtime.block_on(seeded());
    // The listener runs on a runtime of its own, which is then dropped: its task stops without
    // a word, as a panicking or starved one would.
    let listener_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(async { PgStore::connect_lazy(&url).unwrap() });
    let notifications = {
        let _entered = listener_runtime.enter();
        partner_api::cache::postgres::listen(store.pool().clone())
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listening = std::thread::spawn(move || {
        listener_runtime.block_on(async {
            let _ = stopped.await;
        });
        drop(listener_runtime);
    });
    runtime.block_on(async {
        until_answering(&notifications).await;
        let (api, keys) = cached_api(&store, &notifications);
        assert_eq!(
            call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
            StatusCode::OK
        );
        assert!(matches!(
            remembered(&api, &keys, DEMO_KEY).await,
            KeyLookup::Valid(_)
        ));
        stop.send(()).unwrap();
        listening.join().unwrap();
        let mut admin = PgConnection::connect(&url).await.unwrap();
        let revoked = revoke(&mut admin, DEMO_KEY).await;
        never_served_past_the_bound(&api, DEMO_KEY, revoked).await;
        assert_eq!(
            call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
            StatusCode::UNAUTHORIZED
        );
        assert!(
            !notifications.is_connected(),
            "no evidence without a listener"
        );
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_listening_connection_turns_the_caches_off_and_they_come_back() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    // Only the listener goes through the proxy: requests reach the database directly.
    let (proxy, proxied) = Proxy::in_front_of(&url).await;
    let listening = PgStore::connect_lazy(&proxied).unwrap();
    let notifications = partner_api::cache::postgres::listen(listening.pool().clone());
    until_answering(&notifications).await;
    let (api, keys) = cached_api(&store, &notifications);
    assert_eq!(
        call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
        StatusCode::OK
    );
    proxy.stall(true);
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let revoked = revoke(&mut admin, DEMO_KEY).await;
    never_served_past_the_bound(&api, DEMO_KEY, revoked).await;
    assert!(
        !notifications.is_connected(),
        "a stalled listener gives no evidence"
    );
    // The network heals: the caches answer from memory again by themselves.
    proxy.stall(false);
    let healed = Instant::now();
    let other = partner_api::seed::DEMO_OTHER_KEY;
    loop {
        assert_eq!(
            call(&api, get("/v1/me", Some(other))).await.status,
            StatusCode::OK
        );
        if keys.lookup_now(&KeyDigest::of(other)).is_some() {
            break;
        }
        assert!(
            healed.elapsed() < Duration::from_secs(10),
            "the caches never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_pool_neither_starves_the_listener_nor_serves_a_revoked_key() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy(&url)
        .unwrap();
    let store = PgStore::new(pool.clone());
    let notifications = partner_api::cache::postgres::listen(pool.clone());
    until_answering(&notifications).await;
    let (api, keys) = cached_api(&store, &notifications);
    let other = partner_api::seed::DEMO_OTHER_KEY;
    for key in [DEMO_KEY, other] {
        assert!(matches!(
            remembered(&api, &keys, key).await,
            KeyLookup::Valid(_)
        ));
    }
    // Slow queries hold every connection of the pool for 3 s, twice over.
    let sleepers: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { sqlx::query("SELECT pg_sleep(3)").execute(&pool).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let revoked = revoke(&mut admin, DEMO_KEY).await;
    never_served_past_the_bound(&api, DEMO_KEY, revoked).await;
    // The listener kept hearing its heartbeats on its own connection: a key whose state did
    // not change is still answered from memory while the pool is full. (Waited for: on a
    // loaded machine a heartbeat may come late, but not as late as the pool frees up.)
    while !notifications.is_connected() {
        assert!(
            sleepers.iter().any(|sleeper| !sleeper.is_finished()),
            "the heartbeat waited for the pool"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(keys.lookup_now(&KeyDigest::of(other)).is_some());
    assert_eq!(
        call(&api, get("/v1/me", Some(other))).await.status,
        StatusCode::OK
    );
    for sleeper in sleepers {
        let _ = sleeper.await;
    }
}

/// Notifications on the caches' channels, heard by a plain `LISTEN` of the test's own.
async fn listening(url: &str) -> sqlx::postgres::PgListener {
    let mut listener = sqlx::postgres::PgListener::connect(url).await.unwrap();
    listener
        .listen_all(["partner_api_keys", "partner_api_orders"])
        .await
        .unwrap();
    listener
}

/// The payloads heard within `wait`.
async fn heard(listener: &mut sqlx::postgres::PgListener, wait: Duration) -> Vec<String> {
    let mut payloads = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(Ok(notification)) = tokio::time::timeout_at(deadline, listener.recv()).await {
        payloads.push(format!(
            "{}:{}",
            notification.channel(),
            notification.payload()
        ));
    }
    payloads
}

#[tokio::test]
async fn a_seed_loaded_again_notifies_nothing_and_a_changed_key_notifies_its_old_and_new_id() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    let mut listener = listening(&url).await;
    // Every replica may start with the same --seed: an unchanged seed empties no cache.
    store.load_seed(&Seed::demo()).await.unwrap();
    assert_eq!(
        heard(&mut listener, Duration::from_millis(300)).await,
        Vec::<String>::new()
    );
    // A last use or a label is not worth a message; a new digest, id or expiry is, per
    // statement, with every id it touched.
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::query("UPDATE partner_api_keys SET last_used_at = now(), label = 'x'")
        .execute(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        heard(&mut listener, Duration::from_millis(300)).await,
        Vec::<String>::new()
    );
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM partner_api_keys ORDER BY id")
        .fetch_all(&mut admin)
        .await
        .unwrap();
    let new_id: i64 =
        sqlx::query_scalar("UPDATE partner_api_keys SET id = DEFAULT WHERE id = $1 RETURNING id")
            .bind(ids[0])
            .fetch_one(&mut admin)
            .await
            .unwrap();
    let mut payload = heard(&mut listener, Duration::from_millis(300)).await;
    assert_eq!(payload.len(), 1, "{payload:?}");
    let mut sent: Vec<i64> = payload
        .pop()
        .unwrap()
        .strip_prefix("partner_api_keys:")
        .unwrap()
        .split(',')
        .map(|id| id.parse().unwrap())
        .collect();
    sent.sort();
    assert_eq!(sent, [ids[0], new_id]);
    // One statement over every key: one message whatever their number.
    sqlx::query("UPDATE partner_api_keys SET expires_at = now() + interval '1 day'")
        .execute(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        heard(&mut listener, Duration::from_millis(300)).await.len(),
        1
    );
}

#[tokio::test]
async fn keys_invalidate_empties_every_replicas_caches() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = seeded().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    let notifications = partner_api::cache::postgres::listen(store.pool().clone());
    until_answering(&notifications).await;
    let (api, keys) = cached_api(&store, &notifications);
    assert!(matches!(
        remembered(&api, &keys, DEMO_KEY).await,
        KeyLookup::Valid(_)
    ));
    // A change that bypasses the triggers: the cache cannot know.
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::query("SET session_replication_role = replica")
        .execute(&mut admin)
        .await
        .unwrap();
    revoke(&mut admin, DEMO_KEY).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Held still, once the cache answers (a heartbeat may be late on a loaded machine).
    until_answering(&notifications).await;
    assert!(
        matches!(
            keys.lookup_now(&KeyDigest::of(DEMO_KEY)),
            Some(Ok(KeyLookup::Valid(_)))
        ),
        "still held"
    );
    let output = tokio::process::Command::new(standalone_binary())
        .args(["keys", "invalidate", "--database-url", &url])
        .env_remove("DATABASE_URL")
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        r#"{"invalidated":"all"}"#
    );
    let invalidated = Instant::now();
    while call(&api, get("/v1/me", Some(DEMO_KEY))).await.status != StatusCode::UNAUTHORIZED {
        assert!(invalidated.elapsed() < BOUND, "the caches kept the key");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_orders_log_misses_no_transaction_however_commits_interleave() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    let notifications = partner_api::cache::postgres::listen(store.pool().clone());
    until_answering(&notifications).await;
    let (api, _) = cached_api(&store, &notifications);
    let newest = |response: &Collected| response.json()["data"]["orders"][0]["id"].clone();
    let first = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
    let insert = "INSERT INTO partner_orders VALUES ('org_demo', $1, ARRAY['meta'], 'A', 'C', \
                  1, '2026-03-01', '2026-04-30', 'booked', 'PO', $2)";
    // A transaction that started first and commits last: its row is in the log under the
    // older transaction id, below the ids of what committed meanwhile.
    let mut slow = PgConnection::connect(&url).await.unwrap();
    let mut transaction = slow.begin().await.unwrap();
    sqlx::query(insert)
        .bind("ord_slow")
        .bind(chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z").unwrap())
        .execute(&mut *transaction)
        .await
        .unwrap();
    let mut fast = PgConnection::connect(&url).await.unwrap();
    sqlx::query(insert)
        .bind("ord_fast")
        .bind(chrono::DateTime::parse_from_rfc3339("2029-01-01T00:00:00Z").unwrap())
        .execute(&mut fast)
        .await
        .unwrap();
    let committed = Instant::now();
    loop {
        let page = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
        if newest(&page) == "ord_fast" {
            break;
        }
        assert!(
            committed.elapsed() < BOUND,
            "the fast order never showed: {:?}",
            newest(&first)
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The page is cached again; the slow transaction commits well after the log was read past
    // the fast one.
    tokio::time::sleep(Duration::from_millis(600)).await;
    transaction.commit().await.unwrap();
    let committed = Instant::now();
    loop {
        let page = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
        if newest(&page) == "ord_slow" {
            break;
        }
        assert!(
            committed.elapsed() < BOUND,
            "the slow transaction's order was missed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The ids of the changes that `partner_api_order_changes_after(after)` returns.
async fn changes_after(connection: &mut PgConnection, after: i64) -> Vec<i64> {
    let changes: Vec<String> =
        sqlx::query_scalar("SELECT changes FROM partner_api_order_changes_after($1)")
            .bind(after)
            .fetch_one(connection)
            .await
            .unwrap();
    changes
        .iter()
        .map(|change| change.split_once(' ').unwrap().0.parse().unwrap())
        .collect()
}

/// The checker above fails on a reader that trusts ids alone: one that moves its cursor to the
/// largest id it saw misses the transaction that took a smaller id and committed later. (The
/// listener moves its cursor only once every write under way at the read has ended.)
#[tokio::test]
async fn an_orders_reader_by_id_alone_misses_a_late_commit() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let mut reader = PgConnection::connect(&url).await.unwrap();
    let insert = "INSERT INTO partner_orders VALUES ('org_demo', $1, ARRAY['meta'], 'A', 'C', \
                  1, '2026-03-01', '2026-04-30', 'booked', 'PO', now())";
    let start: Option<i64> =
        sqlx::query_scalar("SELECT newest FROM partner_api_order_changes_after(NULL)")
            .fetch_one(&mut reader)
            .await
            .unwrap();
    let start = start.unwrap_or(0);
    let mut slow = PgConnection::connect(&url).await.unwrap();
    let mut transaction = slow.begin().await.unwrap();
    sqlx::query(insert)
        .bind("ord_slow")
        .execute(&mut *transaction)
        .await
        .unwrap();
    let mut fast = PgConnection::connect(&url).await.unwrap();
    sqlx::query(insert)
        .bind("ord_fast")
        .execute(&mut fast)
        .await
        .unwrap();
    let seen = changes_after(&mut reader, start).await;
    assert_eq!(seen.len(), 1, "only the fast change is visible");
    let by_id_alone = seen[0];
    transaction.commit().await.unwrap();
    assert_eq!(
        changes_after(&mut reader, by_id_alone).await,
        Vec::<i64>::new(),
        "a cursor at the largest id seen skips the slow change"
    );
    let from_the_held_cursor = changes_after(&mut reader, start).await;
    assert_eq!(from_the_held_cursor.len(), 2);
    assert!(
        from_the_held_cursor[0] < by_id_alone,
        "the slow change took the smaller id"
    );
}

/// A listener starts following at once beside transactions that write no order: one held
/// open in another database of the instance, and one in the same database that has a
/// transaction id but never touched the events. (Waiting for the instance's oldest
/// transaction instead, as the first design did, kept a listener off its caches for as long
/// as any such transaction lasted: a CI run found one beside another test's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_that_writes_no_order_does_not_delay_a_listener() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let elsewhere = seeded().await;
    let mut held = Vec::new();
    for database in [&elsewhere, &url] {
        let mut connection = PgConnection::connect(database).await.unwrap();
        connection
            .execute("BEGIN; SELECT pg_current_xact_id(); CREATE TEMP TABLE scratch (n int)")
            .await
            .unwrap();
        held.push(connection);
    }
    let store = PgStore::connect_lazy(&url).unwrap();
    let notifications = partner_api::cache::postgres::listen(store.pool().clone());
    until_answering(&notifications).await;
    // And it follows: an order written now reaches the cached page.
    let (api, _) = cached_api(&store, &notifications);
    call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
    let mut writer = PgConnection::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO partner_orders VALUES ('org_demo', 'ord_beside', ARRAY['meta'], 'A', 'C', \
         1, '2026-03-01', '2026-04-30', 'booked', 'PO', '2030-01-01T00:00:00Z')",
    )
    .execute(&mut writer)
    .await
    .unwrap();
    let written = Instant::now();
    loop {
        let page = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
        if page.json()["data"]["orders"][0]["id"] == "ord_beside" {
            break;
        }
        assert!(written.elapsed() < BOUND, "the new order never showed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for mut connection in held {
        let open: bool = sqlx::query_scalar("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert!(open, "the transaction was held throughout");
        connection.execute("ROLLBACK").await.unwrap();
    }
}

/// A listener that starts while a write is under way answers from memory only once that write
/// has ended, and then knows of it: its first read cannot tell which ids the write took.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_started_during_a_write_follows_once_it_ended_and_sees_it() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    let mut slow = PgConnection::connect(&url).await.unwrap();
    let mut transaction = slow.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO partner_orders VALUES ('org_demo', 'ord_slow', ARRAY['meta'], 'A', 'C', \
         1, '2026-03-01', '2026-04-30', 'booked', 'PO', '2030-01-01T00:00:00Z')",
    )
    .execute(&mut *transaction)
    .await
    .unwrap();
    let notifications = partner_api::cache::postgres::listen(store.pool().clone());
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        !notifications.is_connected(),
        "the caches answered from memory while a write older than the listener was under way"
    );
    let (api, _) = cached_api(&store, &notifications);
    let before = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
    assert_ne!(before.json()["data"]["orders"][0]["id"], "ord_slow");
    transaction.commit().await.unwrap();
    until_answering(&notifications).await;
    let after = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
    assert_eq!(after.json()["data"]["orders"][0]["id"], "ord_slow");
}

/// An event that retention deleted before a listener read it still reaches the caches: its
/// organization is in the read's `pruned`.
#[tokio::test]
async fn an_event_pruned_before_the_listener_read_it_still_names_its_organization() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let mut owner = PgConnection::connect(&url).await.unwrap();
    let start: i64 =
        sqlx::query_scalar("SELECT coalesce(newest, 0) FROM partner_api_order_changes_after(NULL)")
            .fetch_one(&mut owner)
            .await
            .unwrap();
    for id in ["ord_pruned", "ord_kept"] {
        sqlx::query(
            "INSERT INTO partner_orders VALUES ('org_demo', $1, ARRAY['meta'], 'A', 'C', 1, \
             '2026-03-01', '2026-04-30', 'booked', 'PO', now())",
        )
        .bind(id)
        .execute(&mut owner)
        .await
        .unwrap();
    }
    // Everything but the feed's newest event goes (the owner may keep nothing): the first
    // call gives the unread events their positions (an event is kept from when it became
    // readable), the second deletes them.
    for _ in 0..2 {
        sqlx::query("SELECT * FROM partner_api_prune_order_events(0, 1000, 10000)")
            .execute(&mut owner)
            .await
            .unwrap();
    }
    let (changes, pruned): (Vec<String>, Vec<String>) =
        sqlx::query_as("SELECT changes, pruned FROM partner_api_order_changes_after($1)")
            .bind(start)
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(pruned, ["org_demo"]);
}

/// In the capture mode an order change has no event until the capture reads it from the log,
/// so the caches' evidence waits for the capture: with its reader stopped, a change is
/// answered within the bound all the same (the caches go to the database, never serve the
/// page from memory that misses it); with the reader back, they answer from memory again and
/// know of it. A listener that took the events alone as its evidence fails the first part.
#[tokio::test]
async fn in_the_capture_mode_the_caches_wait_for_the_capture_and_never_serve_a_change_late() {
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.start_order_capture().await.unwrap();
    let reader = tokio::spawn(store.order_capture().run());
    let notifications = partner_api::cache::postgres::listen(store.pool().clone());
    until_answering(&notifications).await;
    let (api, _) = cached_api(&store, &notifications);
    let before = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
    assert_ne!(before.json()["data"]["orders"][0]["id"], "ord_captured");
    reader.abort();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    sqlx::query(
        "INSERT INTO partner_orders VALUES ('org_demo', 'ord_captured', ARRAY['meta'], 'A', 'C', \
         1, '2026-03-01', '2026-04-30', 'booked', 'PO', '2030-01-01T00:00:00Z')",
    )
    .execute(&mut owner)
    .await
    .unwrap();
    let committed = Instant::now();
    while committed.elapsed() < BOUND * 2 {
        let asked = Instant::now();
        let page = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
        if asked.saturating_duration_since(committed) > BOUND {
            assert_eq!(
                page.json()["data"]["orders"][0]["id"],
                "ord_captured",
                "a page that misses a change was served {:?} after its commit",
                asked.saturating_duration_since(committed)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let events: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM partner_api_order_events WHERE order_id = 'ord_captured'",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert_eq!(
        events, 0,
        "an event was written with the capture's reader stopped"
    );
    let reader = tokio::spawn(store.order_capture().run());
    until_answering(&notifications).await;
    let after = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
    assert_eq!(after.json()["data"]["orders"][0]["id"], "ord_captured");
    reader.abort();
    store
        .stop_order_capture(Duration::from_secs(10))
        .await
        .unwrap();
}

/// A pin reaches a replica's cached key within the caches' bound, under a burst of the key's
/// own requests: the version a key is answered at is part of what the caches hold of it, so
/// an admin's pin (the store's `pin_api_version`, through the management service or the
/// CLI) is a change the listener hears as a revocation is. Never a request answered at the
/// old version past the bound (asked after it: one asked before may be answered later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_reaches_a_cached_key_within_the_bound_under_a_burst() {
    use partner_api::store::KeyManager;
    crate::common::needs::needs!(Postgres);
    let url = seeded().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    let notifications = partner_api::cache::postgres::listen(store.pool().clone());
    until_answering(&notifications).await;
    let (api, keys) = cached_api(&store, &notifications);
    let KeyLookup::Valid(principal) = remembered(&api, &keys, DEMO_KEY).await else {
        panic!("the demo key is usable");
    };
    assert_eq!(
        principal.api_version, None,
        "a seeded key records no version"
    );
    let version = |answer: &Collected| answer.header("api-version").map(str::to_owned);
    assert_eq!(
        version(&call(&api, get("/v1/me", Some(DEMO_KEY))).await).as_deref(),
        Some("2026-11-27")
    );
    // The burst: the key's requests from four tasks, each noting when it was answered at
    // which version.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (api, stop) = (api.clone(), stop.clone());
        burst.spawn(async move {
            let mut seen = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let asked = Instant::now();
                let answer = call(&api, get("/v1/me", Some(DEMO_KEY))).await;
                // A read past the store's 300 ms time-out (the cache emptied, four tasks at
                // the database on a loaded machine) is a 503, which serves no version.
                if answer.status == StatusCode::OK {
                    seen.push((asked, answer.header("api-version").unwrap().to_owned()));
                } else {
                    assert_eq!(answer.status, StatusCode::SERVICE_UNAVAILABLE);
                }
            }
            seen
        });
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let pinned = store
        .pin_api_version(
            &principal.organization.id,
            &principal.key_id,
            partner_api::versions::UPDATED_AT,
        )
        .await
        .unwrap();
    let committed = Instant::now();
    assert_eq!(pinned.api_version, Some(partner_api::versions::UPDATED_AT));
    tokio::time::sleep(BOUND * 2).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut late = Vec::new();
    let mut newest_seen = false;
    while let Some(seen) = burst.join_next().await {
        for (asked, served) in seen.unwrap() {
            if served == "2026-11-27" && asked > committed + BOUND {
                late.push(asked.duration_since(committed));
            }
            newest_seen |= served == "2026-11-28";
        }
    }
    assert!(
        late.is_empty(),
        "answered at the old version after the pin: {late:?}"
    );
    assert!(newest_seen, "the pin never reached the cache");
}
