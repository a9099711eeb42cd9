//! A bad row or a made-up value on PostgreSQL: a timestamp chrono cannot hold fails the one
//! request that reads it (a JSON 500, logged with the row), never the reader; a page token a
//! client made is a 400 when no store could read its position, never a 500; and random
//! tokens and query strings see only 200 and 400.
#![cfg(feature = "postgres")]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::StatusCode;
use partner_api::seed::{Seed, DEMO_KEY, DEMO_OTHER_KEY};
use partner_api::{PartnerApi, PgStore};
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use sqlx::{Connection, Executor, PgConnection};

use crate::common::net::*;
use crate::common::pg::fresh_database;
use crate::common::*;

/// A page token made by hand, as anyone can: the format `api::pagination` documents, with
/// its checksum (a SHA-256 prefix, no secret).
fn made_up_token(organization_id: &str, millis: i64, id: &[u8]) -> String {
    let mut tag = Sha256::new();
    tag.update(b"partner-api page token\0");
    tag.update(organization_id.as_bytes());
    let mut bytes = vec![1u8];
    bytes.extend_from_slice(&tag.finalize()[..8]);
    bytes.extend_from_slice(&millis.to_be_bytes());
    bytes.extend_from_slice(id);
    let sum = Sha256::digest(&bytes);
    bytes.extend_from_slice(&sum[..8]);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A migrated database with the demo seed; its URL (the owner's).
async fn seeded_database() -> String {
    let url = fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
    url
}

/// The standalone host's arguments to serve the database at `url` on a free port, delivering
/// no webhooks.
fn serving(url: &str) -> Vec<&str> {
    #[allow(unused_mut)]
    let mut args = vec![
        "--listen",
        "127.0.0.1:0",
        "--no-migrate",
        "--database-url",
        url,
    ];
    #[cfg(feature = "webhooks")]
    args.push("--no-webhooks");
    args
}

fn sqlstate(err: &sqlx::Error) -> Option<String> {
    err.as_database_error()
        .and_then(|err| err.code())
        .map(|code| code.into_owned())
}

#[tokio::test]
async fn an_order_out_of_range_fails_its_page_alone_through_the_standalone_host() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = seeded_database().await;
    let mut owner = PgConnection::connect(&url).await.unwrap();
    let insert = "INSERT INTO partner_orders (id, organization_id, providers, advertiser_name, \
                  campaign_name, budget_dkk, start_date, end_date, status, external_reference, \
                  created_at) \
                  VALUES ('ord_forever', 'org_demo', '{meta}', 'A', 'C', 1, '2026-01-01', \
                          '2026-01-31', 'booked', 'PO-1', 'infinity')";
    // The crate's table refuses it.
    let refused = owner.execute(insert).await.unwrap_err();
    assert_eq!(sqlstate(&refused).as_deref(), Some("23514"), "{refused}");
    // A row from before the check (or a host's own table) holds it all the same.
    owner
        .execute("ALTER TABLE partner_orders DROP CONSTRAINT partner_orders_created_at_in_range")
        .await
        .unwrap();
    owner.execute(insert).await.unwrap();

    let log = crate::common::scratch::scratch_path("bad-row.log");
    let args = serving(&url);
    let mut process = Process::spawn_with_stderr(&args, &[("RUST_LOG", "error")], &log);
    let base = process.base_url().await;
    let client = http1();
    let get = |path: &str, key: &'static str| {
        fetch(
            &client,
            http::Method::GET,
            format!("{base}{path}"),
            Some(key),
        )
    };
    for _ in 0..3 {
        // The organization's listing fails with the JSON error (fetch checks it against the
        // contract), and nothing else does: the reader lives on.
        let orders = get("/v1/orders", DEMO_KEY).await;
        assert_eq!(orders.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(get("/v1/me", DEMO_KEY).await.status, StatusCode::OK);
        assert_eq!(
            get("/v1/orders", DEMO_OTHER_KEY).await.status,
            StatusCode::OK
        );
    }
    assert!(process.child.try_wait().unwrap().is_none(), "the host died");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("ord_forever") && logged.contains("infinite"),
        "the log names the row and what is wrong with it: {logged}"
    );
    assert!(!logged.contains("panicked"), "{logged}");
    // Repaired, the page is served again.
    owner
        // The newest order still, so the first page holds it.
        .execute("UPDATE partner_orders SET created_at = '2099-01-01' WHERE id = 'ord_forever'")
        .await
        .unwrap();
    let mut served = get("/v1/orders", DEMO_KEY).await;
    // The orders cache forgets on the change feed: within its bound.
    let repaired = std::time::Instant::now();
    while served.status != StatusCode::OK && repaired.elapsed() < std::time::Duration::from_secs(5)
    {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        served = get("/v1/orders", DEMO_KEY).await;
    }
    assert_eq!(served.status, StatusCode::OK);
    // An open-ended campaign's end date, 'infinity': refused by the table, and a row that
    // holds it fails its page alone too.
    let infinite_end = "UPDATE partner_orders SET end_date = 'infinity' WHERE id = 'ord_forever'";
    let refused = owner.execute(infinite_end).await.unwrap_err();
    assert_eq!(sqlstate(&refused).as_deref(), Some("23514"), "{refused}");
    owner
        .execute("ALTER TABLE partner_orders DROP CONSTRAINT partner_orders_dates_in_range")
        .await
        .unwrap();
    owner.execute(infinite_end).await.unwrap();
    let changed = std::time::Instant::now();
    let mut served = get("/v1/orders", DEMO_KEY).await;
    while served.status == StatusCode::OK && changed.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        served = get("/v1/orders", DEMO_KEY).await;
    }
    assert_eq!(served.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        get("/v1/orders", DEMO_OTHER_KEY).await.status,
        StatusCode::OK
    );
    assert!(process.child.try_wait().unwrap().is_none(), "the host died");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("an infinite date"), "{logged}");
    assert!(!logged.contains("panicked"), "{logged}");
    let _ = std::fs::remove_file(&log);
}

#[tokio::test]
async fn a_made_up_page_token_is_a_400_never_a_500_through_the_standalone_host() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = seeded_database().await;
    let args = serving(&url);
    let mut process = Process::spawn(&args);
    let base = process.base_url().await;
    let client = http1();
    let status = |token: String| {
        let url = format!("{base}/v1/orders?page_token={token}");
        let client = client.clone();
        async move {
            fetch(&client, http::Method::GET, url, Some(DEMO_KEY))
                .await
                .status
        }
    };
    // The reproduction: a position PostgreSQL cannot hold.
    assert_eq!(
        status(made_up_token("org_demo", -300_000_000_000_000, b"o")).await,
        StatusCode::BAD_REQUEST
    );
    for millis in [i64::MIN, i64::MAX, 253_402_300_800_000] {
        assert_eq!(
            status(made_up_token("org_demo", millis, b"o")).await,
            StatusCode::BAD_REQUEST
        );
    }
    assert_eq!(
        status(made_up_token("org_demo", 0, b"o\0")).await,
        StatusCode::BAD_REQUEST
    );
    // A made-up position the store can read is the organization's own to ask for.
    assert_eq!(
        status(made_up_token("org_demo", 253_402_300_799_999, b"o")).await,
        StatusCode::OK
    );
    assert_eq!(
        status(made_up_token("org_demo", -62_167_219_200_000, b"o")).await,
        StatusCode::OK
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A query string of `/v1/orders`: made-up tokens (any position, any id bytes, any
/// organization), bytes that are no token, and limits, in any order and number.
fn query_string() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        (
            prop_oneof![Just("org_demo"), Just("org_other"), Just("")],
            any::<i64>(),
            proptest::collection::vec(any::<u8>(), 0..12)
        )
            .prop_map(|(organization, millis, id)| made_up_token(
                organization,
                millis,
                &id
            )),
        (
            prop_oneof![Just("org_demo")],
            -62_167_219_200_000i64..=253_402_300_799_999,
            "[ -~]{0,10}"
        )
            .prop_map(|(organization, millis, id)| made_up_token(
                organization,
                millis,
                id.as_bytes()
            )),
        "[A-Za-z0-9_-]{0,60}",
    ];
    let pair = prop_oneof![
        token.prop_map(|token| format!("page_token={token}")),
        "[0-9]{0,4}".prop_map(|limit| format!("limit={limit}")),
        "[a-z%0-9=+]{0,12}",
    ];
    proptest::collection::vec(pair, 0..4).prop_map(|pairs| pairs.join("&"))
}

#[test]
fn random_tokens_and_query_strings_see_only_200_and_400_on_postgresql() {
    crate::common::needs::needs!(Postgres);
    let runtime = runtime();
    let url = runtime.block_on(seeded_database());
    let api =
        runtime.block_on(async { PartnerApi::from_store(PgStore::connect_lazy(&url).unwrap()) });
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 400,
        ..ProptestConfig::default()
    });
    runner
        .run(&query_string(), |query| {
            let response = runtime.block_on(call(
                &api,
                get(&format!("/v1/orders?{query}"), Some(DEMO_KEY)),
            ));
            prop_assert!(
                [StatusCode::OK, StatusCode::BAD_REQUEST].contains(&response.status),
                "{query}: {} {:?}",
                response.status,
                response.body
            );
            if response.status == StatusCode::BAD_REQUEST {
                prop_assert!(!response.error_message().is_empty());
            }
            Ok(())
        })
        .unwrap();
}

/// The documented roles in the database of `url`: its URLs as serving, key admin, delivering.
async fn with_documented_roles(url: &str) -> [String; 3] {
    crate::common::pg::create_documented_roles(url)
        .await
        .map(|role| crate::common::pg::as_user(url, &role))
}

/// #43's attacks on the audit log, as the key-management role (the one that may write
/// entries), then the log read and the changes made through the standalone host's commands.
#[tokio::test]
async fn the_key_management_role_cannot_forge_backdate_or_poison_the_audit_log() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = seeded_database().await;
    let [_, keys_url, delivering_url] = with_documented_roles(&url).await;
    let mut key_admin = PgConnection::connect(&keys_url).await.unwrap();
    let insert = |columns: &str, values: &str| {
        format!("INSERT INTO partner_api_audit_log ({columns}) {values}")
    };
    let refused = [
        // Any time: backdated, or one no reader can hold.
        insert(
            "organization_id, action, actor, at",
            "VALUES ('org_demo', 'key.revoked', 'alice', '2020-01-01')",
        ),
        insert(
            "organization_id, action, actor, at",
            "VALUES ('org_demo', 'key.revoked', 'alice', 'infinity')",
        ),
        // Ids ahead of the sequence, which failed every later audited change.
        insert(
            "id, organization_id, action, actor",
            "OVERRIDING SYSTEM VALUE SELECT n, 'org_demo', 'user.poked', 'x' \
             FROM generate_series((SELECT coalesce(max(id), 0) + 1 FROM partner_api_audit_log), \
                                  (SELECT coalesce(max(id), 0) + 50 FROM partner_api_audit_log)) n",
        ),
        // The crate's automatic actors.
        insert(
            "organization_id, action, target, detail, actor",
            "VALUES ('org_demo', 'webhook.disabled', '1', 'gone', 'webhook delivery')",
        ),
        insert(
            "organization_id, action, target, actor",
            "VALUES ('org_other', 'key.leaked', '1', 'github secret scanning')",
        ),
        // Alike to a reader's eye.
        insert(
            "organization_id, action, target, actor",
            "VALUES ('org_other', 'key.leaked', '1', ' GitHub  Secret Scanning')",
        ),
    ];
    for statement in &refused {
        let err = key_admin.execute(statement.as_str()).await.unwrap_err();
        assert_eq!(
            sqlstate(&err).as_deref(),
            Some("42501"),
            "{statement}: {err}"
        );
    }
    // A time out of range anywhere the role may write one.
    let err = key_admin
        .execute("UPDATE partner_api_keys SET expires_at = 'infinity'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("23514"), "{err}");
    // A host's own entry, as the docs show it, is the role's to write.
    key_admin
        .execute(
            insert(
                "organization_id, action, target, actor",
                "VALUES ('org_demo', 'user.invited', 'u1', 'bob@example.com')",
            )
            .as_str(),
        )
        .await
        .unwrap();

    // Every audited change of every organization still commits, and the log reads.
    for organization in ["org_demo", "org_other"] {
        let (ok, _, stderr) = standalone_command(&[
            "keys",
            "issue",
            "--organization",
            organization,
            "--no-migrate",
            "--database-url",
            &keys_url,
        ])
        .await;
        assert!(ok, "{stderr}");
    }
    let (ok, stdout, stderr) = standalone_command(&[
        "audit",
        "--organization",
        "org_demo",
        "--no-migrate",
        "--database-url",
        &keys_url,
    ])
    .await;
    assert!(ok, "{stderr}");
    let entries: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(entries[0]["action"], "key.issued", "{stdout}");
    assert_eq!(entries[1]["action"], "user.invited", "{stdout}");
    assert!(
        entries
            .iter()
            .all(|entry| !["webhook delivery", "github secret scanning"]
                .contains(&entry["actor"].as_str().unwrap())),
        "{stdout}"
    );

    // The delivering role may disable an endpoint, never enable one again.
    let mut owner = PgConnection::connect(&url).await.unwrap();
    owner
        .execute(
            "INSERT INTO partner_webhook_endpoints (organization_id, url, secret) \
             VALUES ('org_demo', 'https://hooks.example/orders', 'whsec_dGVzdA==')",
        )
        .await
        .unwrap();
    let mut delivering = PgConnection::connect(&delivering_url).await.unwrap();
    delivering
        .execute("UPDATE partner_webhook_endpoints SET enabled = false")
        .await
        .unwrap();
    let err = delivering
        .execute("UPDATE partner_webhook_endpoints SET enabled = true")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("42501"), "{err}");
    let err = delivering
        .execute("UPDATE partner_webhook_endpoints SET failing_since = 'infinity'")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("23514"), "{err}");
    key_admin
        .execute("UPDATE partner_webhook_endpoints SET enabled = true")
        .await
        .unwrap();
}

/// Retention leaves a trace, and a role other than the owner's cannot make the log forget a
/// recent change: it keeps at least 400 days whatever it asks (#43's `--retention-days 0`).
#[tokio::test]
async fn pruning_the_audit_log_leaves_a_trace_and_keeps_400_days_for_other_roles() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = seeded_database().await;
    let [serving_url, keys_url, _] = with_documented_roles(&url).await;
    let mut owner = PgConnection::connect(&url).await.unwrap();
    owner
        .execute(
            "INSERT INTO partner_api_audit_log (organization_id, action, actor, at) \
             SELECT organization, 'user.poked', 'old', now() - days * interval '1 day' \
             FROM (VALUES ('org_demo', 500), ('org_demo', 450), ('org_other', 401), \
                          ('org_demo', 10), ('org_other', 1)) AS old(organization, days)",
        )
        .await
        .unwrap();
    let actions = |organization: &'static str| {
        let url = url.clone();
        async move {
            let mut connection = PgConnection::connect(&url).await.unwrap();
            sqlx::query_as::<_, (String, Option<String>, String)>(
                "SELECT action, detail, actor FROM partner_api_audit_log \
                 WHERE organization_id = $1 ORDER BY at, id",
            )
            .bind(organization)
            .fetch_all(&mut connection)
            .await
            .unwrap()
        }
    };
    for role_url in [&keys_url, &serving_url] {
        let (ok, stdout, stderr) = standalone_command(&[
            "audit",
            "--prune",
            "--retention-days",
            "0",
            "--no-migrate",
            "--database-url",
            role_url,
        ])
        .await;
        assert!(ok, "{stderr}");
        let deleted = if role_url == &keys_url { 3 } else { 0 };
        assert_eq!(stdout.trim(), format!(r#"{{"deleted":{deleted}}}"#));
    }
    let demo = actions("org_demo").await;
    assert_eq!(demo.len(), 2, "{demo:?}");
    assert_eq!(demo[0].0, "user.poked", "the 10-day-old entry is kept");
    assert_eq!(demo[1].0, "audit.pruned");
    assert_eq!(demo[1].1.as_deref(), Some("2"));
    assert!(demo[1].2.starts_with("cli:"), "{demo:?}");
    let other = actions("org_other").await;
    assert_eq!(
        other
            .iter()
            .map(|entry| entry.0.as_str())
            .collect::<Vec<_>>(),
        ["user.poked", "audit.pruned"]
    );
    // The owner may ask for any retention: everything goes, and the trace stays.
    let (ok, stdout, stderr) = standalone_command(&[
        "audit",
        "--prune",
        "--retention-days",
        "0",
        "--database-url",
        &url,
    ])
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), r#"{"deleted":4}"#);
    let demo = actions("org_demo").await;
    assert_eq!(
        demo.iter()
            .map(|entry| (entry.0.as_str(), entry.1.as_deref()))
            .collect::<Vec<_>>(),
        [("audit.pruned", Some("2"))]
    );
    // The function names no reserved actor for anyone.
    let mut key_admin = PgConnection::connect(&keys_url).await.unwrap();
    let err = key_admin
        .execute("SELECT partner_api_prune_audit(0, 10, 'webhook delivery', NULL, NULL, NULL)")
        .await
        .unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("42501"), "{err}");
}

/// #43's reproduction 4: an endpoint row with `failing_since = 'infinity'` and a due delivery
/// panicked the standalone host's dispatcher for good. Now the table refuses the value, and a
/// row that holds it all the same (written before the check) is skipped by the claim: every
/// other endpoint's deliveries go on, and the endpoint's own once the row is repaired.
#[cfg(feature = "webhooks")]
#[tokio::test]
async fn an_endpoint_row_out_of_range_stops_no_delivery_through_the_standalone_host() {
    crate::common::needs::needs!(Examples);
    use crate::common::receiver::Receiver;
    use partner_api::webhooks::{NewEndpoint, WebhookManager};

    crate::common::needs::needs!(Postgres);
    let url = seeded_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    let (broken_receiver, healthy_receiver) = (Receiver::ok().await, Receiver::ok().await);
    let broken = store
        .add_endpoint("org_demo", NewEndpoint::new(broken_receiver.url("/")))
        .await
        .unwrap()
        .record
        .id;
    let healthy = store
        .add_endpoint("org_other", NewEndpoint::new(healthy_receiver.url("/")))
        .await
        .unwrap()
        .record
        .id;
    let mut owner = PgConnection::connect(&url).await.unwrap();
    let poison = format!(
        "UPDATE partner_webhook_endpoints SET failing_since = 'infinity' WHERE id = {broken}"
    );
    let err = owner.execute(poison.as_str()).await.unwrap_err();
    assert_eq!(sqlstate(&err).as_deref(), Some("23514"), "{err}");
    owner
        .execute(
            "ALTER TABLE partner_webhook_endpoints \
             DROP CONSTRAINT partner_webhook_endpoints_timestamps_in_range",
        )
        .await
        .unwrap();
    owner.execute(poison.as_str()).await.unwrap();
    store.send_test("org_demo", &broken).await.unwrap();

    let mut host = Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--no-migrate",
        "--database-url",
        &url,
        "--webhook-allow-http",
        "--webhook-allow-subnet",
        "127.0.0.0/8",
    ]);
    host.address().await;
    // The dispatcher lives: test events of another organization keep arriving.
    for n in 1..=3 {
        store.send_test("org_other", &healthy).await.unwrap();
        healthy_receiver
            .wait_for(n, std::time::Duration::from_secs(10))
            .await;
    }
    assert!(broken_receiver.received().is_empty());
    assert!(host.child.try_wait().unwrap().is_none(), "the host died");
    // Repaired, the endpoint's delivery goes (once its lease from the skipped claim ends).
    owner
        .execute(
            format!(
                "UPDATE partner_webhook_endpoints SET failing_since = NULL WHERE id = {broken}"
            )
            .as_str(),
        )
        .await
        .unwrap();
    broken_receiver
        .wait_for(1, std::time::Duration::from_secs(60))
        .await;
    assert!(host.terminate().await.success());
}
