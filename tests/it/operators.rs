//! What operators do with the standalone host: read its help, mistype a URL, migrate with one
//! role and serve with another that has only the documented grants, manage keys within their
//! policy from the command line, and share one Redis between deployments.
#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use http::StatusCode;
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::store::KeyManager;
use partner_api::PgStore;
use sqlx::{Connection, Executor, PgConnection};

use crate::common::net::*;
use crate::common::pg::{as_user, create_documented_roles, fresh_database};
use crate::common::*;

/// Runs the standalone binary with `args` (no `DATABASE_URL` or `REDIS_URL` from outside):
/// whether it succeeded, its stdout and its stderr.
async fn run(args: &[&str]) -> (bool, String, String) {
    let (ok, stdout, stderr) = standalone_command(args).await;
    // A command that succeeds says nothing on stderr, whichever role runs it.
    assert!(
        !ok || stderr.is_empty(),
        "{args:?} succeeded and wrote to stderr: {stderr}"
    );
    (ok, stdout, stderr)
}

const SECRET: &str = "s3cr3t-Pa55word";

#[tokio::test]
async fn help_shows_no_environment_value_and_errors_no_password() {
    crate::common::needs::needs!(Examples);
    let output = tokio::process::Command::new(standalone_binary())
        .arg("--help")
        .env(
            "DATABASE_URL",
            format!("postgres://app:{SECRET}@db.internal/app"),
        )
        .env("REDIS_URL", format!("redis://:{SECRET}@redis.internal/0"))
        .output()
        .await
        .unwrap();
    let help = String::from_utf8(output.stdout).unwrap();
    assert!(output.status.success());
    assert!(help.contains("DATABASE_URL") && help.contains("--max-connections-per-ip"));
    assert!(!help.contains(SECRET), "{help}");
    // URLs that do not parse or do not connect: the message names the problem, never the
    // password (plain, or percent-encoded).
    let encoded = "p%40ss%3Aword";
    for args in [
        vec![
            "--database-url".to_owned(),
            format!("postgres://app:{SECRET}@127.0.0.1:notaport/app"),
        ],
        vec![
            "migrate".to_owned(),
            "--database-url".to_owned(),
            format!("postgres://app:{SECRET}@127.0.0.1:1/app"),
        ],
        vec![
            "keys".to_owned(),
            "list".to_owned(),
            "--organization".to_owned(),
            "org_demo".to_owned(),
            "--database-url".to_owned(),
            format!("postgres://app:{encoded}@127.0.0.1:notaport/app"),
        ],
        vec![
            "--redis-url".to_owned(),
            format!("redis://:{SECRET}@127.0.0.1:notaport/"),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, stdout, stderr) = run(&args).await;
        assert!(!ok, "{args:?} succeeded: {stdout}");
        assert!(stderr.contains("error:"), "{args:?}: {stderr}");
        for secret in [SECRET, encoded, "p@ss:word"] {
            assert!(
                !stderr.contains(secret),
                "{args:?} printed the password: {stderr}"
            );
        }
    }
}

#[tokio::test]
async fn migrated_by_the_owner_served_and_managed_by_roles_without_ddl_rights() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = fresh_database().await;
    let (ok, stdout, stderr) = run(&["migrate", "--database-url", &url]).await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), r#"{"migrated":true}"#);
    let owner = PgStore::connect_lazy(&url).unwrap();
    owner.load_seed(&Seed::demo()).await.unwrap();
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let [serving, keys, delivering] = create_documented_roles(&url).await;
    let mut admin = PgConnection::connect(&url).await.unwrap();

    // Serving: answers, follows changes, records last uses; with --no-migrate only, and
    // (holding no webhook secret) --no-webhooks.
    let serving_url = as_user(&url, &serving);
    #[allow(unused_mut)]
    let mut serving_args = vec![
        "--listen",
        "127.0.0.1:0",
        "--no-migrate",
        "--database-url",
        &serving_url,
    ];
    #[cfg(feature = "webhooks")]
    serving_args.push("--no-webhooks");
    let mut process = Process::spawn(&serving_args);
    let base = process.base_url().await;
    let client = http1();
    let orders = fetch(
        &client,
        http::Method::GET,
        format!("{base}/v1/orders"),
        Some(DEMO_KEY),
    )
    .await;
    assert_eq!(orders.status, StatusCode::OK);
    // A key the owner revokes is refused within the bound: the change feed works.
    let issued = owner
        .issue(
            "org_demo",
            partner_api::store::NewKey::new(partner_api::key::KeyEnvironment::Test),
        )
        .await
        .unwrap();
    let plaintext = issued.plaintext().to_owned();
    let me = format!("{base}/v1/me");
    assert_eq!(
        fetch(&client, http::Method::GET, me.clone(), Some(&plaintext))
            .await
            .status,
        StatusCode::OK
    );
    owner.revoke("org_demo", &issued.record().id).await.unwrap();
    let revoked = Instant::now();
    loop {
        let status = fetch(&client, http::Method::GET, me.clone(), Some(&plaintext))
            .await
            .status;
        if status == StatusCode::UNAUTHORIZED {
            break;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(1),
            "a revoked key was served past the bound"
        );
    }
    // Webhooks: managed as the key-management role, raised by a role that may only write
    // orders (and cannot read a secret), delivered by a host of the delivering role; the
    // serving role cannot read a secret either.
    #[cfg(feature = "webhooks")]
    {
        let delivering_url = as_user(&url, &delivering);
        let mut delivering_host = Process::spawn(&[
            "--listen",
            "127.0.0.1:0",
            "--no-migrate",
            "--database-url",
            &delivering_url,
            "--webhook-allow-http",
            "--webhook-allow-subnet",
            "127.0.0.0/8",
        ]);
        delivering_host.base_url().await;
        for (role, may_read) in [(&serving, false), (&delivering, true)] {
            let mut connection = PgConnection::connect(&as_user(&url, role)).await.unwrap();
            let read = connection
                .execute("SELECT secret FROM partner_webhook_endpoints")
                .await;
            assert_eq!(
                read.is_ok(),
                may_read,
                "{role} reading the secrets: {read:?}"
            );
        }
        let receiver = crate::common::receiver::Receiver::ok().await;
        let keys_url = as_user(&url, &keys);
        let (ok, stdout, stderr) = run(&[
            "webhooks",
            "add",
            "--organization",
            "org_demo",
            "--url",
            &receiver.url("/"),
            "--no-migrate",
            "--database-url",
            &keys_url,
        ])
        .await;
        assert!(ok, "{stderr}");
        let endpoint: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        let writer = format!("{database}_writer");
        admin
            .execute(
                format!(
                    "DROP ROLE IF EXISTS {writer}; \
                     CREATE ROLE {writer} LOGIN PASSWORD 'change me'; \
                     GRANT USAGE ON SCHEMA public TO {writer}; \
                     GRANT INSERT ON partner_orders TO {writer};"
                )
                .as_str(),
            )
            .await
            .unwrap();
        let mut writing = PgConnection::connect(&as_user(&url, &writer))
            .await
            .unwrap();
        writing
            .execute(
                "INSERT INTO partner_orders VALUES ('org_demo', 'ord_by_writer', ARRAY['meta'], \
                 'A', 'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now())",
            )
            .await
            .unwrap();
        let secret_read = writing
            .execute("SELECT secret FROM partner_webhook_endpoints")
            .await;
        assert!(secret_read.is_err(), "the order writer read a secret");
        let received = receiver.wait_for(1, Duration::from_secs(10)).await;
        assert_eq!(received[0].json()["data"]["id"], "ord_by_writer");
        let id = endpoint["id"].as_str().unwrap();
        // The endpoint's attempts, as the key-management role lists them.
        let listing = [
            "webhooks",
            "attempts",
            "--organization",
            "org_demo",
            "--id",
            id,
            "--no-migrate",
            "--database-url",
            &keys_url,
        ];
        let attempts = || run(&listing);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (ok, stdout, stderr) = attempts().await;
            assert!(ok, "{stderr}");
            if stdout.contains(r#""outcome":"succeeded""#) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no attempt was recorded: {stdout}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // Retention, as the delivering role: the message goes with its delivery and attempt.
        let pruning = PgStore::connect_lazy(&delivering_url).unwrap();
        let deleted = partner_api::webhooks::WebhookOutbox::prune(&pruning, Duration::ZERO, 500)
            .await
            .unwrap();
        assert!(deleted >= 1, "{deleted} messages deleted");
        let (ok, stdout, stderr) = attempts().await;
        assert!(ok && stdout.trim().is_empty(), "{stdout}{stderr}");
        delivering_host.terminate().await;
    }
    assert!(
        process.terminate().await.success(),
        "the last uses were written"
    );
    let used: Option<chrono::DateTime<chrono::Utc>> =
        sqlx::query_scalar("SELECT last_used_at FROM partner_api_keys WHERE key_sha256 = $1")
            .bind(&partner_api::KeyDigest::of(DEMO_KEY).as_bytes()[..])
            .fetch_one(&mut admin)
            .await
            .unwrap();
    assert!(used.is_some(), "the serving role recorded the last use");
    // And the usage, in the same shutdown, as the serving role.
    let counted: i64 =
        sqlx::query_scalar("SELECT coalesce(sum(requests), 0)::bigint FROM partner_api_key_usage")
            .fetch_one(&mut admin)
            .await
            .unwrap();
    assert!(counted >= 1, "the serving role recorded no usage");
    // The key-management role reads usage and cannot write it (the delivering role serves
    // too: it writes usage as the serving role does).
    let mut key_admin = PgConnection::connect(&as_user(&url, &keys)).await.unwrap();
    sqlx::query("SELECT count(*) FROM partner_api_key_usage")
        .fetch_one(&mut key_admin)
        .await
        .unwrap();
    for statement in [
        "UPDATE partner_api_key_usage SET requests = requests + 1000",
        "DELETE FROM partner_api_key_usage",
        "INSERT INTO partner_api_key_usage SELECT key_id, hour, route, outcome, 1 \
         FROM partner_api_key_usage",
    ] {
        let refused = key_admin.execute(statement).await;
        assert!(
            refused.is_err(),
            "the key-management role may run {statement}"
        );
    }

    // Key management as its own role.
    let keys_url = as_user(&url, &keys);
    let (ok, stdout, stderr) = run(&[
        "keys",
        "issue",
        "--organization",
        "org_demo",
        "--expires-in",
        "3600",
        "--no-migrate",
        "--database-url",
        &keys_url,
    ])
    .await;
    assert!(ok, "{stderr}");
    let record: serde_json::Value = serde_json::from_str(stdout.lines().nth(1).unwrap()).unwrap();
    let id = record["id"].as_str().unwrap();
    for args in [
        vec!["roll", "--organization", "org_demo", "--id", id],
        vec![
            "policy",
            "--organization",
            "org_demo",
            "--max-active-keys",
            "50",
        ],
        vec!["list", "--organization", "org_demo"],
    ] {
        let mut full = vec!["keys"];
        full.extend(args.iter().copied());
        full.extend(["--no-migrate", "--database-url", keys_url.as_str()]);
        let (ok, _, stderr) = run(&full).await;
        assert!(ok, "{args:?}: {stderr}");
    }

    // The audit log: the commands' changes, by `cli:<user>`, as the key-management role.
    let (ok, stdout, stderr) = run(&[
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
    let actions: Vec<&str> = entries
        .iter()
        .filter_map(|entry| entry["action"].as_str())
        .collect();
    for action in ["key.issued", "key.rolled", "policy.changed"] {
        assert!(actions.contains(&action), "{action} is not in {actions:?}");
    }
    // The commands' entries are the operator's; the test's own library calls, made without
    // a context, are unattributed.
    let by_commands = entries.iter().filter(|entry| {
        ["key.rolled", "policy.changed", "webhook.added"]
            .contains(&entry["action"].as_str().unwrap())
    });
    assert!(
        by_commands.clone().count() >= 2
            && by_commands
                .into_iter()
                .all(|entry| entry["actor"].as_str().unwrap().starts_with("cli:")),
        "{stdout}"
    );
    // Append-only for every documented role: none may change or delete an entry, the
    // serving role may not even read them; retention is the owner's.
    let mut key_admin = PgConnection::connect(&keys_url).await.unwrap();
    for statement in [
        "UPDATE partner_api_audit_log SET actor = 'someone else'",
        "DELETE FROM partner_api_audit_log",
        "TRUNCATE partner_api_audit_log",
    ] {
        let refused = key_admin.execute(statement).await;
        assert!(
            refused.is_err(),
            "the key-management role may run {statement}"
        );
    }
    let mut serving_connection = PgConnection::connect(&serving_url).await.unwrap();
    for statement in [
        "SELECT * FROM partner_api_audit_log",
        "INSERT INTO partner_api_audit_log (organization_id, action, actor) \
         VALUES ('org_demo', 'key.revoked', 'forged')",
    ] {
        let refused = serving_connection.execute(statement).await;
        assert!(refused.is_err(), "the serving role may run {statement}");
    }
    // Retention by the key-management role keeps 400 days whatever it asks: nothing here.
    let (ok, stdout, stderr) = run(&[
        "audit",
        "--prune",
        "--retention-days",
        "0",
        "--no-migrate",
        "--database-url",
        &keys_url,
    ])
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), r#"{"deleted":0}"#);
    let (ok, stdout, stderr) = run(&["audit", "--prune", "--database-url", &url]).await;
    assert!(ok, "{stderr}");
    assert_eq!(stdout.trim(), r#"{"deleted":0}"#);
    let kept: i64 = sqlx::query_scalar("SELECT count(*) FROM partner_api_audit_log")
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(kept, i64::try_from(entries.len()).unwrap());

    // Neither role can touch the triggers revocation depends on, nor the schema.
    let triggers: Vec<String> = sqlx::query_scalar(
        "SELECT tgname::text FROM pg_trigger WHERE tgrelid = 'partner_api_keys'::regclass \
         AND NOT tgisinternal",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(!triggers.is_empty());
    for role_url in [&serving_url, &keys_url] {
        let mut connection = PgConnection::connect(role_url).await.unwrap();
        for statement in [
            format!("DROP TRIGGER {} ON partner_api_keys", triggers[0]),
            "ALTER TABLE partner_api_keys DISABLE TRIGGER ALL".to_owned(),
            "CREATE TABLE partner_api_intruder (id int)".to_owned(),
        ] {
            let refused = connection.execute(statement.as_str()).await;
            assert!(refused.is_err(), "{role_url} may run {statement}");
        }
    }
    // Serving without --no-migrate needs rights the serving role does not have: it says so.
    let (ok, _, stderr) = run(&[
        "keys",
        "list",
        "--organization",
        "org_demo",
        "--database-url",
        &serving_url,
    ])
    .await;
    assert!(!ok && stderr.contains("migrate"), "{stderr}");
    assert!(
        !stderr.contains("change me") && !stderr.contains("change%20me"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_keys_command_rolls_within_the_policy() {
    crate::common::needs::needs!(Postgres, Examples);
    let url = fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
    let keys = |args: Vec<String>| {
        let url = url.clone();
        async move {
            let mut full: Vec<String> = vec!["keys".into()];
            full.extend(args);
            full.extend(["--database-url".into(), url]);
            let full: Vec<&str> = full.iter().map(String::as_str).collect();
            run(&full).await
        }
    };
    let issue = |expires_in: &str| {
        vec![
            "issue".to_owned(),
            "--organization".into(),
            "org_demo".into(),
            "--expires-in".into(),
            expires_in.to_owned(),
        ]
    };
    let roll = |id: &str, extra: &[&str]| {
        let mut args: Vec<String> = ["roll", "--organization", "org_demo", "--id", id]
            .iter()
            .map(|arg| (*arg).to_owned())
            .collect();
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        args
    };
    let record = |stdout: &str| -> serde_json::Value {
        serde_json::from_str(stdout.lines().nth(1).unwrap()).unwrap()
    };

    // An expired key stays expired: the roll is refused with a clear message.
    let (ok, stdout, stderr) = keys(issue("1")).await;
    assert!(ok, "{stderr}");
    let short = record(&stdout)["id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let (ok, stdout, stderr) = keys(roll(&short, &[])).await;
    assert!(
        !ok && stdout.is_empty(),
        "an expired key was rolled: {stdout}"
    );
    assert!(stderr.contains("expired key cannot be rolled"), "{stderr}");

    // A 30-day key rolls into a 30-day key, unless told otherwise.
    let (ok, stdout, _) = keys(issue("2592000")).await;
    assert!(ok);
    let month = record(&stdout)["id"].as_str().unwrap().to_owned();
    let (ok, stdout, stderr) = keys(roll(&month, &["--overlap", "0"])).await;
    assert!(ok, "{stderr}");
    let rolled = record(&stdout);
    assert_eq!(rolled["lifetimeSeconds"], 2_592_000);
    let expires: chrono::DateTime<chrono::Utc> =
        rolled["expiresAt"].as_str().unwrap().parse().unwrap();
    let expected = chrono::Utc::now() + chrono::TimeDelta::days(30);
    assert!((expires - expected).num_seconds().abs() < 60, "{expires}");
    let successor = rolled["id"].as_str().unwrap().to_owned();
    let (ok, stdout, stderr) = keys(roll(&successor, &["--expires-in", "600"])).await;
    assert!(ok, "{stderr}");
    assert_eq!(record(&stdout)["lifetimeSeconds"], 600);
    let (ok, _, _) = keys(roll(&successor, &["--expires-in", "0"])).await;
    assert!(!ok, "a lifetime of 0 is refused");

    // The organization's policy, shown and set.
    let policy = |extra: &[&str]| {
        let mut args: Vec<String> =
            vec!["policy".into(), "--organization".into(), "org_demo".into()];
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        args
    };
    let (ok, stdout, _) = keys(policy(&[])).await;
    assert!(ok);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap(),
        serde_json::json!({"maxKeyLifetimeSeconds": null, "maxActiveKeys": 100, "maxWebhookEndpoints": 20, "defaultApiVersion": null})
    );
    let (ok, stdout, _) = keys(policy(&[
        "--max-lifetime",
        "3600",
        "--max-active-keys",
        "20",
        "--max-webhook-endpoints",
        "1",
    ]))
    .await;
    assert!(ok);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&stdout).unwrap(),
        serde_json::json!({"maxKeyLifetimeSeconds": 3600, "maxActiveKeys": 20, "maxWebhookEndpoints": 1, "defaultApiVersion": null})
    );
    // The endpoint cap holds at once, through the host's own command: one endpoint, then a
    // refusal in the store's words.
    #[cfg(feature = "webhooks")]
    {
        let add = |n: u32| {
            let url = url.clone();
            async move {
                let endpoint = format!("https://example.com/hooks/{n}");
                run(&[
                    "webhooks",
                    "add",
                    "--organization",
                    "org_demo",
                    "--url",
                    &endpoint,
                    "--database-url",
                    &url,
                ])
                .await
            }
        };
        let (ok, _, stderr) = add(1).await;
        assert!(ok, "{stderr}");
        let (ok, stdout, stderr) = add(2).await;
        assert!(!ok && stdout.is_empty(), "{stdout}");
        assert!(
            stderr.contains("error:") && stderr.contains("1 webhook endpoints, the most"),
            "{stderr}"
        );
    }
    let (ok, _, stderr) = keys(vec![
        "issue".into(),
        "--organization".into(),
        "org_demo".into(),
    ])
    .await;
    assert!(
        !ok && stderr.contains("must expire within 3600 seconds"),
        "{stderr}"
    );
    let (ok, _, stderr) = keys(issue("7200")).await;
    assert!(!ok && stderr.contains("maximum"), "{stderr}");
    assert!(keys(issue("3600")).await.0);
    let (ok, stdout, _) = keys(policy(&["--no-max-lifetime"])).await;
    assert!(
        ok && stdout.contains(r#""maxKeyLifetimeSeconds":null"#),
        "{stdout}"
    );
    // The organization's default version: what a key issued without --api-version gets.
    let (ok, stdout, stderr) = keys(policy(&["--default-api-version", "2026-11-27"])).await;
    assert!(
        ok && stdout.contains(r#""defaultApiVersion":"2026-11-27""#),
        "{stdout}{stderr}"
    );
    let (ok, stdout, stderr) = keys(vec![
        "issue".into(),
        "--organization".into(),
        "org_demo".into(),
    ])
    .await;
    assert!(ok, "{stderr}");
    assert!(stdout.contains(r#""apiVersion":"2026-11-27""#), "{stdout}");
    let (ok, stdout, _) = keys(policy(&["--newest-by-default"])).await;
    assert!(
        ok && stdout.contains(r#""defaultApiVersion":null"#),
        "{stdout}"
    );
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn deployments_sharing_a_redis_keep_their_budgets_apart_by_prefix() {
    crate::common::needs::needs!(Redis, Examples);
    let redis = std::env::var("PARTNER_API_TEST_REDIS_URL")
        .expect("the Redis tests need PARTNER_API_TEST_REDIS_URL (bash .ci/test sets it)");
    let unique = format!("{}_{}", std::process::id(), rand_suffix());
    // Two deployments on the same demo data: the same key id in each.
    let start = |prefix: String| {
        let redis = redis.clone();
        async move {
            let mut process = Process::spawn(&[
                "--listen",
                "127.0.0.1:0",
                "--rate-limit",
                "2",
                "--redis-url",
                &redis,
                "--redis-prefix",
                &prefix,
            ]);
            let base = process.base_url().await;
            (process, base)
        }
    };
    let (first, first_base) = start(format!("{unique}_a:")).await;
    let (second, second_base) = start(format!("{unique}_b:")).await;
    let client = http1();
    let me = |base: &str| format!("{base}/v1/me");
    for _ in 0..2 {
        let status = fetch(&client, http::Method::GET, me(&first_base), Some(DEMO_KEY))
            .await
            .status;
        assert_eq!(status, StatusCode::OK);
    }
    let spent = fetch(&client, http::Method::GET, me(&first_base), Some(DEMO_KEY)).await;
    assert_eq!(spent.status, StatusCode::TOO_MANY_REQUESTS);
    let other = fetch(&client, http::Method::GET, me(&second_base), Some(DEMO_KEY)).await;
    assert_eq!(
        other.status,
        StatusCode::OK,
        "the other deployment's budget was spent"
    );
    for process in [first, second] {
        assert!(process.terminate().await.success());
    }
}

#[cfg(feature = "redis")]
fn rand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
        .into()
}
