//! `PgStore` against a real PostgreSQL server: the conformance suite, the query plan, the API
//! served from it, revocation by plain SQL across replicas, and faults that must be errors.
//!
//! The server comes from `PARTNER_API_TEST_DATABASE_URL` (`bash .ci/test` starts one); each
//! test works in a database of its own.
#![cfg(feature = "postgres")]

use std::time::Duration;

use crate::common::pg::{demo_key_record, fresh_database};
use crate::common::*;
use http::StatusCode;
use partner_api::cache::CachingKeyStore;
use partner_api::seed::{Seed, DEMO_KEY, DEMO_OTHER_KEY, DEMO_REVOKED_KEY};
use partner_api::PgStore;
use partner_api::{KeyDigest, KeyLookup, KeyStore, PartnerApi};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection};

async fn migrated_store() -> (PgStore, String) {
    let url = fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    (store, url)
}

#[tokio::test]
async fn the_pg_store_passes_the_conformance_suite() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    let report = partner_api::testing::run(&store).await;
    report.assert_passed();
    assert_eq!(report.len(), 15);
    // Twice on the same database: the suite needs no empty store.
    partner_api::testing::run(&store).await.assert_passed();
    store.migrate().await.expect("migrations are idempotent");
}

#[tokio::test]
async fn the_pg_store_manages_keys_as_the_suite_requires() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    let report = partner_api::testing::run_key_manager(&store).await;
    report.assert_passed();
    assert_eq!(report.len(), 11);
    crate::common::key_abilities_pass(&store).await;
}

#[tokio::test]
async fn the_pg_store_keeps_its_audit_log_as_the_suite_requires() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    for _ in 0..2 {
        let report = partner_api::testing::run_audit_log(&store).await;
        report.assert_passed();
        assert_eq!(report.len(), 5);
    }
}

/// Entries written within one millisecond are paged without a gap: the position a page ends
/// on carries milliseconds (what an entry is read with), so the log must keep no more, or the
/// next page starts before an older entry of the same millisecond and skips it.
#[tokio::test]
async fn audit_entries_within_one_millisecond_are_paged_without_a_gap() {
    use partner_api::store::{AuditLog, AuditPosition, AuditQuery};
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let mut written = Vec::new();
    // All within .123 once rounded to milliseconds (TIMESTAMPTZ(3) rounds): ties on `at`,
    // ordered by id.
    for micros in [100, 150, 200, 250, 300] {
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO partner_api_audit_log (at, organization_id, action, actor) \
             VALUES ('2026-11-24 12:00:00.123'::timestamptz + $1 * interval '1 microsecond', \
                     'org_demo', 'key.issued', 'test') RETURNING id",
        )
        .bind(f64::from(micros))
        .fetch_one(store.pool())
        .await
        .unwrap();
        written.push(id.to_string());
    }
    written.reverse();
    let mut read = Vec::new();
    let mut after: Option<AuditPosition> = None;
    loop {
        let query = AuditQuery {
            limit: 2,
            after: after.take(),
            ..AuditQuery::default()
        };
        let page = store.audit_entries("org_demo", &query).await.unwrap();
        read.extend(page.entries.iter().map(|entry| entry.id.clone()));
        after = page.next_position();
        if after.is_none() {
            break;
        }
        assert!(read.len() <= 5, "the pages never end: {read:?}");
    }
    assert_eq!(read, written, "newest first, every entry once");
}

#[tokio::test]
async fn the_pg_store_keeps_usage_as_the_suite_requires() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    for _ in 0..2 {
        let report = partner_api::testing::run_usage(&store).await;
        report.assert_passed();
        assert_eq!(report.len(), 4);
    }
}

#[tokio::test]
async fn the_pg_store_counts_deprecated_calls_as_the_suite_requires() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    for _ in 0..2 {
        let report = partner_api::testing::run_deprecated_calls(&store).await;
        report.assert_passed();
        assert_eq!(report.len(), 3);
    }
}

/// The reasons every key of `keys` is refused (or not), by `store`, in order.
async fn outcomes(store: &impl KeyStore, keys: &[&str]) -> Vec<KeyLookup> {
    let mut outcomes = Vec::new();
    for key in keys {
        outcomes.push(store.lookup(&KeyDigest::of(key)).await.unwrap());
    }
    outcomes
}

#[tokio::test]
async fn the_pg_store_says_why_it_refuses_a_key_and_so_do_its_caches() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let expired = expired_key(&store, "org_demo").await;
    let keys = [
        DEMO_KEY,
        DEMO_REVOKED_KEY,
        &expired,
        "pk_test_never_issued_to_anyone",
    ];
    let direct = outcomes(&store, &keys).await;
    assert!(
        matches!(&direct[0], KeyLookup::Valid(principal) if principal.organization().id == "org_demo")
    );
    assert!(
        matches!(
            &direct[1..],
            [
                KeyLookup::Revoked { key_id: Some(_) },
                KeyLookup::Expired { key_id: Some(_) },
                KeyLookup::Unknown
            ]
        ),
        "{direct:?}"
    );
    // Through a cache: the same answers when it asks the store, and when it remembers.
    let cached = CachingKeyStore::new(store.clone());
    assert_eq!(outcomes(&cached, &keys).await, direct);
    assert_eq!(outcomes(&cached, &keys).await, direct);
    for (key, outcome) in keys.iter().zip(&direct) {
        let now = cached.lookup_now(&KeyDigest::of(key)).unwrap().unwrap();
        assert_eq!(&now, outcome, "remembered");
    }
}

#[tokio::test]
async fn the_api_serves_the_same_bytes_from_postgres_as_from_memory() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    let seed = Seed::demo();
    store.load_seed(&seed).await.unwrap();
    store
        .load_seed(&seed)
        .await
        .expect("loading a seed again changes nothing");
    let from_pg = PartnerApi::from_store(store);
    let from_memory = PartnerApi::from_store(seed.to_memory_store().unwrap());
    for path in ["/v1/me", "/v1/orders"] {
        for key in [
            DEMO_KEY,
            DEMO_OTHER_KEY,
            DEMO_REVOKED_KEY,
            "pk_test_unknown",
        ] {
            let pg = call(&from_pg, get(path, Some(key))).await;
            let memory = call(&from_memory, get(path, Some(key))).await;
            assert_eq!(pg.status, memory.status, "{path}");
            assert_eq!(pg.body, memory.body, "{path}");
        }
    }
    let orders = call(&from_pg, get("/v1/orders", Some(DEMO_KEY)))
        .await
        .json();
    assert_eq!(orders["data"]["orders"].as_array().unwrap().len(), 100);
}

#[tokio::test]
async fn revoking_with_plain_sql_is_a_401_on_every_replica_at_once() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    // Two replicas: two services, each with a pool of its own.
    let replicas = [
        PartnerApi::from_store(PgStore::connect_lazy(&url).unwrap()),
        PartnerApi::from_store(PgStore::connect_lazy(&url).unwrap()),
    ];
    for replica in &replicas {
        assert_eq!(
            call(replica, get("/v1/me", Some(DEMO_KEY))).await.status,
            StatusCode::OK
        );
    }
    let digest = partner_api::KeyDigest::of(DEMO_KEY);
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let updated =
        sqlx::query("UPDATE partner_api_keys SET revoked_at = now() WHERE key_sha256 = $1")
            .bind(&digest.as_bytes()[..])
            .execute(&mut admin)
            .await
            .unwrap();
    assert_eq!(updated.rows_affected(), 1);
    for replica in &replicas {
        let response = call(replica, get("/v1/orders", Some(DEMO_KEY))).await;
        assert_eq!(response.status, StatusCode::UNAUTHORIZED);
        assert_eq!(response.error_message(), "missing or invalid API key: send the header Authorization: Bearer <API_KEY> with a valid key");
    }
    assert_eq!(
        call(&replicas[0], get("/v1/me", Some(DEMO_OTHER_KEY)))
            .await
            .status,
        200
    );
}

/// The demo data in a fresh database, and a connection that may break the schema's rules.
async fn store_with_admin() -> (PartnerApi, PgConnection) {
    let (store, url) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let admin = PgConnection::connect(&url).await.unwrap();
    (PartnerApi::from_store(store), admin)
}

async fn insert_raw(admin: &mut PgConnection, values: &str) {
    admin
        .execute(
            format!(
                "INSERT INTO partner_orders (organization_id, id, providers, advertiser_name, \
                 campaign_name, budget_dkk, start_date, end_date, status, external_reference, \
                 created_at) VALUES ({values})"
            )
            .as_str(),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn rows_that_break_the_order_contract_are_500s_not_partial_orders() {
    crate::common::needs::needs!(Postgres);
    let cases = [
        (
            "ALTER TABLE partner_orders ALTER COLUMN status DROP NOT NULL",
            "'org_demo', 'zz_null', '{}', 'A', 'C', 1, '2026-01-01', '2026-01-02', NULL, 'X', '2030-01-01T00:00:00Z'",
            "column status is null",
        ),
        (
            "ALTER TABLE partner_orders DROP CONSTRAINT partner_orders_budget_dkk_check",
            "'org_demo', 'zz_negative', '{}', 'A', 'C', -5, '2026-01-01', '2026-01-02', 's', 'X', '2030-01-01T00:00:00Z'",
            "negative budget_dkk",
        ),
        (
            // A row from before the check (or a host's own table) may hold it all the same.
            "ALTER TABLE partner_orders DROP CONSTRAINT partner_orders_dates_in_range",
            "'org_demo', 'zz_far', '{}', 'A', 'C', 1, '10000-01-01', '10000-01-02', 's', 'X', '2030-01-01T00:00:00Z'",
            "a date outside the years 1 to 9999",
        ),
        (
            "SELECT 1",
            "'org_demo', 'zz_null_provider', ARRAY['meta', NULL], 'A', 'C', 1, '2026-01-01', '2026-01-02', 's', 'X', '2030-01-01T00:00:00Z'",
            "providers",
        ),
    ];
    for (alter, values, logged) in cases {
        let (api, mut admin) = store_with_admin().await;
        admin.execute(alter).await.unwrap();
        insert_raw(&mut admin, values).await;
        let logs = CapturedLogs::default();
        let guard = logs.install();
        let response = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
        drop(guard);
        assert_eq!(
            response.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{values}"
        );
        assert_eq!(response.error_message(), "internal server error");
        let text = logs.text();
        assert!(text.contains(logged), "{logged}: {text}");
        // The key still works where no bad row is read.
        assert_eq!(
            call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
            StatusCode::OK
        );
    }
}

#[tokio::test]
async fn a_database_that_is_down_is_a_503_not_a_401() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener); // nothing listens there now
    let options: PgConnectOptions = format!("postgres://postgres@127.0.0.1:{port}/postgres")
        .parse()
        .unwrap();
    let pool = PgPoolOptions::new()
        .acquire_timeout(Duration::from_millis(500))
        .connect_lazy_with(options);
    let api = PartnerApi::from_store(PgStore::new(pool));
    for path in ["/v1/me", "/v1/orders"] {
        let response = call(&api, get(path, Some(DEMO_KEY))).await;
        assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE, "{path}");
    }
}

#[tokio::test]
async fn a_statement_timeout_is_a_503() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let options: PgConnectOptions = url.parse().unwrap();
    let pool =
        PgPoolOptions::new().connect_lazy_with(options.options([("statement_timeout", "200")]));
    let api = PartnerApi::from_store(PgStore::new(pool));
    // Another transaction holds the table, so the read waits until the statement timeout.
    let mut locker = PgConnection::connect(&url).await.unwrap();
    locker
        .execute("BEGIN; LOCK TABLE partner_orders IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let response = call(&api, get("/v1/orders", Some(DEMO_KEY))).await;
    assert_eq!(response.status, StatusCode::SERVICE_UNAVAILABLE);
    locker.execute("ROLLBACK").await.unwrap();
    assert_eq!(
        call(&api, get("/v1/orders", Some(DEMO_KEY))).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_binary_serves_a_seed_from_postgres() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = fresh_database().await;
    let seed = crate::common::scratch::scratch_path("pg-seed.json");
    std::fs::write(&seed, serde_json::to_string(&Seed::demo()).unwrap()).unwrap();
    for _ in 0..2 {
        // Twice: the second start runs the migrations and loads the seed again over the data.
        let mut process = Process::spawn_with_env(
            &["--listen", "127.0.0.1:0", "--seed", seed.to_str().unwrap()],
            &[("DATABASE_URL", &url)],
        );
        let base = process.base_url().await;
        let (status, body) = http_get(&format!("{base}/v1/orders"), DEMO_KEY).await;
        assert_eq!(status, 200);
        assert_eq!(body["data"]["orders"].as_array().unwrap().len(), 100);
        assert!(process.terminate().await.success());
    }
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let keys: i64 = sqlx::query_scalar("SELECT count(*) FROM partner_api_keys")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(keys, 3, "the seed was loaded idempotently");
    let _ = std::fs::remove_file(seed);
}

async fn http_get(url: &str, key: &str) -> (u16, serde_json::Value) {
    use http_body_util::BodyExt;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let request = http::Request::get(url)
        .header("authorization", format!("Bearer {key}"))
        .body(http_body_util::Empty::new())
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn reloading_a_seed_never_revives_moves_or_loosens_a_key() {
    crate::common::needs::needs!(Postgres);
    use partner_api::store::KeyManager;
    let (store, url) = migrated_store().await;
    let seed = Seed::demo();
    store.load_seed(&seed).await.unwrap();
    let api = PartnerApi::from_store(store.clone());
    assert_eq!(
        call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
        StatusCode::OK
    );
    // Revoked from the Settings page, and an expiry set by SQL on the other demo key.
    let demo_id = demo_key_record(&store).await.id;
    store.revoke("org_demo", &demo_id).await.unwrap();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::query(
        "UPDATE partner_api_keys SET expires_at = now() + interval '1 day' WHERE key_sha256 = $1",
    )
    .bind(&partner_api::KeyDigest::of(DEMO_OTHER_KEY).as_bytes()[..])
    .execute(&mut admin)
    .await
    .unwrap();
    let other_before = store.list("org_other").await.unwrap();
    // Every replica starts with the same --seed: the revocation and the expiry hold.
    store.load_seed(&seed).await.unwrap();
    assert_eq!(
        call(&api, get("/v1/me", Some(DEMO_KEY))).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert!(store
        .get("org_demo", &demo_id)
        .await
        .unwrap()
        .revoked_at
        .is_some());
    assert_eq!(
        store.list("org_other").await.unwrap(),
        other_before,
        "the expiry was dropped"
    );
    // A seed that moves a key to another organization is refused, naming the entry.
    let mut moved = Seed::demo();
    moved.api_keys[1].organization_id = "org_demo".into();
    let message = store.load_seed(&moved).await.unwrap_err().to_string();
    assert!(message.contains("apiKeys[1]"), "{message}");
    assert!(!message.contains(DEMO_OTHER_KEY), "{message}");
    let other = call(&api, get("/v1/me", Some(DEMO_OTHER_KEY))).await.json();
    assert_eq!(
        other["data"]["organization"]["id"], "org_other",
        "the key stayed where it was"
    );
}

#[tokio::test]
async fn a_duplicate_key_error_carries_no_digest_to_debug_or_logs() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let logs = CapturedLogs::default();
    let _guard = logs.install();
    let err = store.add_key(DEMO_KEY, "org_demo").await.unwrap_err();
    assert_eq!(err.kind(), partner_api::StoreErrorKind::Conflict);
    tracing::error!(error = ?err, display = %err, "logged as a host would");
    let digest = partner_api::KeyDigest::of(DEMO_KEY);
    let hex: String = digest
        .as_bytes()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let debug = format!("{err:?}");
    let debug = format!("{debug} {:?}", err.into_source());
    for text in [debug.as_str(), logs.text().as_str()] {
        assert!(!text.contains(&hex), "a digest in {text}");
        assert!(!text.contains("\\x"), "a byte string in {text}");
        assert!(!text.contains(DEMO_KEY), "a key in {text}");
    }
    assert!(
        debug.contains("23505"),
        "the error still says what happened: {debug}"
    );
}

#[tokio::test]
async fn the_crates_migrations_share_a_database_with_the_hosts_own() {
    crate::common::needs::needs!(Postgres);
    use sqlx::migrate::Migrator;
    let url = fresh_database().await;
    let pool = PgPoolOptions::new().connect(&url).await.unwrap();
    let host: Migrator = sqlx::migrate!("tests/host_migrations");
    // The host first, then the crate, then each again, in one database.
    host.run(&pool).await.unwrap();
    let store = PgStore::new(pool.clone());
    store.migrate().await.unwrap();
    host.run(&pool)
        .await
        .expect("the host's migrator meets no version of ours");
    store.migrate().await.unwrap();
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(versions, [20250101000000]);
    let ours: i64 = sqlx::query_scalar("SELECT count(*) FROM partner_api_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(ours, partner_api::PgStore::migrator().iter().count() as i64);
    // Both schemas work.
    sqlx::query("INSERT INTO host_users VALUES (1, 'a@example.com')")
        .execute(&pool)
        .await
        .unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
}

#[tokio::test]
async fn a_database_migrated_by_an_earlier_version_is_taken_over() {
    crate::common::needs::needs!(Postgres);
    use sqlx::migrate::Migrator;
    let url = fresh_database().await;
    let pool = PgPoolOptions::new().connect(&url).await.unwrap();
    // An earlier version of the crate ran its migrations with sqlx's own runner.
    partner_api::PgStore::migrator().run(&pool).await.unwrap();
    let store = PgStore::new(pool.clone());
    store.migrate().await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "the crate's versions moved to its own table");
    let host: Migrator = sqlx::migrate!("tests/host_migrations");
    host.run(&pool)
        .await
        .expect("the host's migrator now runs beside ours");
    store.migrate().await.unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
}

fn record_members(line: &str) -> serde_json::Value {
    let record: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|_| panic!("{line}"));
    let mut members: Vec<&String> = record.as_object().unwrap().keys().collect();
    members.sort();
    assert_eq!(
        members,
        [
            "allowedIps",
            "apiVersion",
            "apiVersionRollback",
            "createdAt",
            "environment",
            "expiresAt",
            "hint",
            "id",
            "label",
            "lastUsedAt",
            "leak",
            "lifetimeSeconds",
            "permissions",
            "providers",
            "revokedAt",
            "revokedReason"
        ]
    );
    record
}

#[tokio::test]
async fn the_keys_command_issues_lists_rolls_and_revokes() {
    crate::common::needs::needs!(Postgres, Examples);
    let (store, url) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let api = PartnerApi::from_store(store.clone());

    let (ok, stdout, stderr) = keys_command(
        Some(&url),
        &[
            "issue",
            "--organization",
            "org_demo",
            "--label",
            "CI",
            "--environment",
            "test",
            "--expires-in",
            "3600",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    // The database is migrated already: a command that succeeds says nothing on stderr.
    assert_eq!(stderr, "", "a successful command wrote to stderr");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    let plaintext = lines[0];
    assert!(
        plaintext.starts_with("pk_test_") && plaintext.len() == 38,
        "{plaintext}"
    );
    let issued = record_members(lines[1]);
    assert_eq!(issued["label"], "CI");
    assert_eq!(issued["environment"], "test");
    assert_eq!(issued["hint"], format!("pk_test_...{}", &plaintext[34..]));
    assert!(issued["expiresAt"].as_str().unwrap().ends_with('Z'));
    assert!(issued["revokedAt"].is_null() && issued["lastUsedAt"].is_null());
    let id = issued["id"].as_str().unwrap().to_owned();
    assert_eq!(
        call(&api, get("/v1/me", Some(plaintext))).await.status,
        StatusCode::OK
    );

    // DATABASE_URL works as well as the flag; the newest key comes first.
    let output = tokio::process::Command::new(standalone_binary())
        .args(["keys", "list", "--organization", "org_demo"])
        .env("DATABASE_URL", &url)
        .output()
        .await
        .unwrap();
    assert!(output.status.success());
    let listed = String::from_utf8(output.stdout).unwrap();
    let records: Vec<serde_json::Value> = listed.lines().map(record_members).collect();
    assert_eq!(records.len(), 3, "two seed keys and the new one: {listed}");
    assert_eq!(records[0]["id"], id.as_str());
    assert!(!listed.contains(plaintext), "a list shows no plaintext");
    assert!(records
        .iter()
        .any(|record| record["label"] == "Demo integration"));

    let (ok, stdout, stderr) = keys_command(
        Some(&url),
        &[
            "roll",
            "--organization",
            "org_demo",
            "--id",
            &id,
            "--overlap",
            "60",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    let rolled = lines[0];
    let successor = record_members(lines[1]);
    assert_eq!(successor["label"], "CI");
    assert_eq!(successor["environment"], "test");
    for key in [plaintext, rolled] {
        assert_eq!(
            call(&api, get("/v1/me", Some(key))).await.status,
            StatusCode::OK,
            "both work in the overlap"
        );
    }
    let successor_id = successor["id"].as_str().unwrap().to_owned();
    let (ok, stdout, _) = keys_command(
        Some(&url),
        &[
            "revoke",
            "--organization",
            "org_demo",
            "--id",
            &successor_id,
        ],
    )
    .await;
    assert!(ok);
    assert!(record_members(stdout.trim())["revokedAt"].is_string());
    assert_eq!(
        call(&api, get("/v1/me", Some(rolled))).await.status,
        StatusCode::UNAUTHORIZED
    );

    // Unknown organization or id, another organization's id, no database: a message, exit 1.
    for (args, expected) in [
        (vec!["list", "--organization", "org_missing"], "org_missing"),
        (
            vec!["revoke", "--organization", "org_demo", "--id", "424242"],
            "424242",
        ),
        (
            vec!["revoke", "--organization", "org_other", "--id", id.as_str()],
            id.as_str(),
        ),
        (
            vec!["roll", "--organization", "org_other", "--id", id.as_str()],
            id.as_str(),
        ),
        (
            vec!["issue", "--organization", "org_missing"],
            "org_missing",
        ),
    ] {
        let (ok, stdout, stderr) = keys_command(Some(&url), &args).await;
        assert!(!ok, "{args:?} succeeded");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(
            stderr.contains("error:") && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    }
    let (ok, _, stderr) = keys_command(None, &["list", "--organization", "org_demo"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("--database-url") && stderr.contains("DATABASE_URL"),
        "{stderr}"
    );
    let (ok, _, _) = keys_command(
        Some(&url),
        &[
            "issue",
            "--organization",
            "org_demo",
            "--environment",
            "prod",
        ],
    )
    .await;
    assert!(!ok, "an unknown environment is refused");
    // Another organization's key was never touched.
    assert_eq!(
        call(&api, get("/v1/me", Some(plaintext))).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_binary_writes_the_last_uses_in_hand_when_it_stops() {
    crate::common::needs::needs!(Postgres, Examples);
    let (store, url) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let mut process =
        Process::spawn_with_env(&["--listen", "127.0.0.1:0"], &[("DATABASE_URL", &url)]);
    let base = process.base_url().await;
    let (status, _) = http_get(&format!("{base}/v1/me"), DEMO_KEY).await;
    assert_eq!(status, 200);
    // Well within the recorder's interval: only the flush at shutdown can have written it.
    assert!(process.terminate().await.success());
    let used = demo_key_record(&store).await;
    assert!(used.last_used_at.is_some(), "{used:?}");
}

#[tokio::test]
async fn usage_counted_by_two_replicas_sums_exactly_after_both_stop() {
    crate::common::needs::needs!(Postgres, Examples);
    let (store, url) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let spawn = || {
        Process::spawn_with_env(
            // A long interval: only the flushes at shutdown can write what is in hand. No
            // failure throttle: every revoked request reaches its lookup.
            &[
                "--listen",
                "127.0.0.1:0",
                "--usage-flush-interval",
                "1800",
                "--auth-failure-limit",
                "0",
            ],
            &[("DATABASE_URL", &url)],
        )
    };
    let (mut first, mut second) = (spawn(), spawn());
    let bases = [first.base_url().await, second.base_url().await];
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let (mut ok, mut revoked) = (0_u64, 0_u64);
    let mut random = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    for n in 0..3_000_u64 {
        // Split between the replicas at random (xorshift), the revoked key one request in five.
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        let base = &bases[usize::try_from(random % 2).unwrap()];
        let (key, path) = if n % 5 == 0 {
            (DEMO_REVOKED_KEY, "/v1/me")
        } else {
            (DEMO_KEY, "/v1/orders")
        };
        let request = http::Request::get(format!("{base}{path}"))
            .header("authorization", format!("Bearer {key}"))
            .body(http_body_util::Empty::new())
            .unwrap();
        let status = client.request(request).await.unwrap().status().as_u16();
        match status {
            200 => ok += 1,
            401 => revoked += 1,
            other => panic!("{other}"),
        }
    }
    assert!(first.terminate().await.success());
    assert!(second.terminate().await.success());
    let id_of = |key: &str| {
        let store = store.clone();
        let key = key.to_owned();
        async move {
            match store.lookup(&KeyDigest::of(&key)).await.unwrap() {
                KeyLookup::Valid(principal) => principal.key_id.to_string(),
                KeyLookup::Revoked { key_id: Some(id) } => id.to_string(),
                other => panic!("{other:?}"),
            }
        }
    };
    for (key, route, outcome, sent) in [
        (DEMO_KEY, "/orders", "ok", ok),
        (DEMO_REVOKED_KEY, "/me", "revoked", revoked),
    ] {
        let id = id_of(key).await;
        let (success, stdout, stderr) = keys_command(
            Some(&url),
            &[
                "usage",
                "--organization",
                "org_demo",
                "--id",
                &id,
                "--granularity",
                "hour",
            ],
        )
        .await;
        assert!(success, "{stderr}");
        let lines: Vec<serde_json::Value> = stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        assert!(
            lines
                .iter()
                .all(|line| line["route"] == route && line["outcome"] == outcome),
            "{stdout}"
        );
        let counted: u64 = lines
            .iter()
            .map(|line| line["count"].as_u64().unwrap())
            .sum();
        assert_eq!(counted, sent, "{stdout}");
    }
}

#[tokio::test]
async fn the_binary_on_postgres_serves_from_its_caches_follows_a_revocation_and_says_so_in_its_metrics(
) {
    crate::common::needs::needs!(Postgres, Examples);
    let (store, url) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let mut process = Process::spawn_with_env(
        &["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
        &[("DATABASE_URL", &url)],
    );
    let base = process.base_url().await;
    let metrics_line = process.line().await;
    let metrics_url = metrics_line.strip_prefix("metrics on ").unwrap().to_owned();
    // The host serves before its cache listener has connected (the caches then send every
    // lookup to the database): wait until they answer from memory, as the metrics say.
    let started = std::time::Instant::now();
    loop {
        let scraped =
            crate::common::net::get_unchecked(&crate::common::net::http1(), &metrics_url).await;
        let samples = crate::common::net::samples(&String::from_utf8_lossy(&scraped.body));
        let connected =
            crate::common::net::sum_of(&samples, "partner_api_cache_notifications_connected", &[]);
        if connected == 1.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the listener never connected"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..3 {
        assert_eq!(
            http_get(&format!("{base}/v1/me"), DEMO_OTHER_KEY).await.0,
            200
        );
    }
    // Revoked with the keys command, as an operator would: the running host refuses the key
    // within a second.
    let id = {
        use partner_api::store::KeyManager;
        store.list("org_other").await.unwrap()[0].id.clone()
    };
    let (ok, _, stderr) = keys_command(
        Some(&url),
        &["revoke", "--organization", "org_other", "--id", &id],
    )
    .await;
    assert!(ok, "{stderr}");
    let revoked = std::time::Instant::now();
    loop {
        let (status, _) = http_get(&format!("{base}/v1/me"), DEMO_OTHER_KEY).await;
        if status == 401 {
            break;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(1),
            "still served after a second"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // What the operator saw meanwhile, in Prometheus's format.
    let scraped =
        crate::common::net::get_unchecked(&crate::common::net::http1(), &metrics_url).await;
    let text = String::from_utf8(scraped.body.to_vec()).unwrap();
    let samples = crate::common::net::samples(&text);
    let value =
        |name: &str, labels: &[(&str, &str)]| crate::common::net::sum_of(&samples, name, labels);
    assert_eq!(
        value("partner_api_cache_notifications_connected", &[]),
        1.0,
        "{text}"
    );
    assert!(
        value("partner_api_cache_hits_total", &[("cache", "keys")]) >= 1.0,
        "{text}"
    );
    assert!(
        value(
            "partner_api_cache_invalidations_total",
            &[("cache", "keys"), ("scope", "key")]
        ) >= 1.0,
        "{text}"
    );
    assert!(
        value("partner_api_auth_failures_total", &[("reason", "revoked")]) >= 1.0,
        "{text}"
    );
    // Store latency is a histogram with the host's buckets, not a summary.
    let lookup = [("store", "keys"), ("operation", "lookup")];
    assert!(
        value("partner_api_store_call_duration_seconds_count", &lookup) >= 1.0,
        "{text}"
    );
    assert!(
        samples.iter().any(|(name, labels, _)| {
            name == "partner_api_store_call_duration_seconds_bucket"
                && labels.get("le").map(String::as_str) == Some("0.001")
        }),
        "{text}"
    );
    assert!(process.terminate().await.success());
}

/// Follows the `Link` headers of `GET /v1/orders` with `key` from the first page to the last,
/// calling `between` after each page; returns the ids read.
async fn walk_pages(
    api: &PartnerApi,
    key: &str,
    mut between: impl AsyncFnMut(usize),
) -> Vec<String> {
    let mut read = Vec::new();
    let mut next = Some("/v1/orders".to_owned());
    let mut pages = 0;
    while let Some(path) = next {
        let response = call(api, get(&path, Some(key))).await;
        assert_eq!(response.status, StatusCode::OK, "{path}");
        let orders = response.json()["data"]["orders"]
            .as_array()
            .unwrap()
            .clone();
        read.extend(orders.iter().map(|o| o["id"].as_str().unwrap().to_owned()));
        next = response
            .header("link")
            .map(|link| link[1..link.find('>').unwrap()].to_owned());
        between(pages).await;
        pages += 1;
        assert!(pages <= 100, "the walk does not end");
    }
    read
}

#[tokio::test]
async fn walking_5000_orders_with_ties_reads_each_once_newest_first_while_orders_arrive() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated_store().await;
    let organization = partner_api::Organization {
        id: "org_walk".into(),
        name: "Walk".into(),
    };
    store.add_organization(&organization).await.unwrap();
    let key = "pk_test_walk_0123456789abcdefghij";
    store.add_key(key, "org_walk").await.unwrap();
    // Three orders a second: every page edge of 100 cuts through a tie.
    let written: Vec<partner_api::Order> = (0..5_000)
        .map(|n| order(&format!("w{n:05}"), BASE_MILLIS + (n / 3) * 1_000))
        .collect();
    store.add_orders("org_walk", &written).await.unwrap();
    let mut want = written.clone();
    want.sort_by(partner_api::Order::cmp_newest_first);
    let want: Vec<String> = want.into_iter().map(|order| order.id).collect();

    let notifications = partner_api::cache::postgres::listen(store.pool().clone());
    let cached = PartnerApi::new(
        store.clone(),
        partner_api::cache::CachingOrderStore::new(store.clone())
            .with_notifications(&notifications),
    );
    for (name, api) in [
        ("uncached", PartnerApi::from_store(store.clone())),
        ("cached", cached),
    ] {
        let writer = PgStore::connect_lazy(&url).unwrap();
        sqlx::query("DELETE FROM partner_orders WHERE id LIKE 'new-%'")
            .execute(writer.pool())
            .await
            .unwrap();
        let read = walk_pages(&api, key, async |page| {
            // A newer order after every page: it must never show on a later page.
            writer
                .add_orders(
                    "org_walk",
                    &[order(
                        &format!("new-{name}-{page}"),
                        BASE_MILLIS + 10_000_000,
                    )],
                )
                .await
                .unwrap();
        })
        .await;
        assert_eq!(read.len(), want.len(), "{name}");
        assert!(read == want, "{name}: the walk read another order or order");
    }
}

#[tokio::test]
async fn management_error_bodies_never_carry_the_databases_text() {
    crate::common::needs::needs!(Postgres);
    use http_body_util::BodyExt;
    use partner_api::management::{ActingOrganization, KeyManagementService};
    use tower::ServiceExt;
    let (store, _) = migrated_store().await;
    store.load_seed(&Seed::demo()).await.unwrap();
    let service = KeyManagementService::new(store.clone());
    // PostgreSQL raises each kind of constraint violation on the insert of a key, naming a
    // constraint and a detail that must stay in the database's log.
    for (code, status) in [
        ("23503", StatusCode::NOT_FOUND),
        ("23505", StatusCode::CONFLICT),
        ("23514", StatusCode::INTERNAL_SERVER_ERROR),
        ("23502", StatusCode::INTERNAL_SERVER_ERROR),
    ] {
        sqlx::query(&format!(
            "CREATE OR REPLACE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN RAISE EXCEPTION 'violates secret_constraint_xyz on partner_api_keys' \
             USING ERRCODE = '{code}', CONSTRAINT = 'secret_constraint_xyz', \
             DETAIL = 'Key (key_sha256)=(\\xdeadbeef) secret detail'; END $$"
        ))
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query(
            "CREATE OR REPLACE TRIGGER test_refuse BEFORE INSERT ON partner_api_keys \
             FOR EACH ROW EXECUTE FUNCTION test_refuse()",
        )
        .execute(store.pool())
        .await
        .unwrap();
        let mut request = http::Request::post("/keys")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from_static(
                br#"{"label": "x", "environment": "test"}"#,
            )))
            .unwrap();
        request
            .extensions_mut()
            .insert(ActingOrganization::new("org_demo"));
        let response = service.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), status, "{code}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&body);
        for leaked in ["secret", "constraint", "partner_api_keys", "deadbeef", code] {
            assert!(!text.contains(leaked), "{code}: {text}");
        }
    }
}
