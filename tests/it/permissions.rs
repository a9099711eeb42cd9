//! Keys limited to routes (#58): a key holds `orders`, `events`, both (every key issued
//! without restrictions, every key that existed before) or none; a route it lacks is RFC
//! 6750's 403 `insufficient_scope`, which spends none of its rate limit; `/me`, `/deprecations`
//! and `/versions` stay open; both stores keep, change (audited once per change) and roll the
//! permissions.

use std::num::NonZeroU32;
use std::time::Duration;

use crate::common::*;
use http::StatusCode;
use partner_api::key::{KeyEnvironment, Permission, Permissions};
use partner_api::store::{AuditLog, AuditQuery, KeyManager, NewKey, RollKey};
use partner_api::KeyStore;
use partner_api::{LocalRateLimiter, PartnerApi};

/// `request` answered by `api`, raw (the contract oracle's document of the first version
/// predates permissions).
async fn send(api: &PartnerApi, request: http::Request<()>) -> Collected {
    use tower::ServiceExt;
    collect(api.clone().oneshot(request).await.unwrap()).await
}

/// The API over `store` with a rate limit of two requests an hour per key.
fn limited_api<S>(store: S) -> PartnerApi
where
    S: KeyStore + partner_api::OrderStore + partner_api::store::EventFeed + Clone + 'static,
{
    let limiter = LocalRateLimiter::new(Duration::from_secs(3600), NonZeroU32::new(2).unwrap());
    PartnerApi::from_store(store.clone())
        .with_events(store)
        .with_rate_limiter(limiter)
}

/// A key that holds only `events` is refused `/orders` with the challenge of RFC 6750 3.1
/// (any number of times, its rate limit untouched), and served its feed and the open routes.
async fn a_key_without_orders_is_refused_orders_only(api: &PartnerApi, key: &str) {
    for _ in 0..5 {
        let refused = send(api, get("/v1/orders", Some(key))).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN);
        assert_eq!(
            refused.headers["www-authenticate"],
            "Bearer realm=\"partner-api\", error=\"insufficient_scope\", scope=\"orders\""
        );
        assert_eq!(
            refused.error_message(),
            "this API key lacks the permission orders, which GET /orders needs: ask the organization's admin for a key with it"
        );
        // Not a bad query either: the permission is refused before the query is read.
        let bad = send(api, get("/v1/orders?limit=0", Some(key))).await;
        assert_eq!(bad.status, StatusCode::FORBIDDEN);
    }
    // Two requests of the hour's budget are left.
    let feed = send(api, get("/v1/events", Some(key))).await;
    assert_eq!(feed.status, StatusCode::OK, "{:?}", feed.json());
    let me = send(api, get("/v1/me", Some(key))).await;
    assert_eq!(me.status, StatusCode::OK);
    let limited = send(api, get("/v1/versions", Some(key))).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
}

/// Issues, changes (audited once per change) and rolls permissions in `store`, whose
/// organization `org_a` exists, checking what the API answers each key.
async fn permissions_are_kept_changed_and_rolled<S>(store: S)
where
    S: KeyStore
        + KeyManager
        + AuditLog
        + partner_api::OrderStore
        + partner_api::store::EventFeed
        + Clone
        + 'static,
{
    let events_only = Permissions::of([Permission::Events]);
    let issued = store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live).with_permissions(events_only),
        )
        .await
        .unwrap();
    assert_eq!(issued.record().permissions, events_only);
    let listed = serde_json::to_value(issued.record()).unwrap();
    assert_eq!(listed["permissions"], serde_json::json!(["events"]));
    a_key_without_orders_is_refused_orders_only(&limited_api(store.clone()), issued.plaintext())
        .await;

    // A key issued without restrictions holds both, and is served both.
    let full = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    assert_eq!(full.record().permissions, Permissions::ALL);
    let api = PartnerApi::from_store(store.clone()).with_events(store.clone());
    for path in ["/v1/orders", "/v1/events"] {
        let served = send(&api, get(path, Some(full.plaintext()))).await;
        assert_eq!(served.status, StatusCode::OK, "{path}");
    }

    // Changed: none, then none again (no entry), then back to both.
    let id = &full.record().id;
    let none = store
        .set_permissions("org_a", id, Permissions::NONE)
        .await
        .unwrap();
    assert_eq!(none.permissions, Permissions::NONE);
    store
        .set_permissions("org_a", id, Permissions::NONE)
        .await
        .unwrap();
    for (path, scope) in [("/v1/orders", "orders"), ("/v1/events", "events")] {
        let refused = send(&api, get(path, Some(full.plaintext()))).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{path}");
        assert!(
            refused.headers["www-authenticate"]
                .to_str()
                .unwrap()
                .ends_with(&format!("scope=\"{scope}\"")),
            "{:?}",
            refused.headers
        );
    }
    let me = send(&api, get("/v1/me", Some(full.plaintext()))).await;
    assert_eq!(me.status, StatusCode::OK);
    let entries = store
        .audit_entries("org_a", &AuditQuery::default())
        .await
        .unwrap();
    let changes: Vec<_> = entries
        .entries
        .iter()
        .filter(|entry| entry.action.as_str() == "key.permissions_changed")
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].detail.as_deref(), Some("none"));
    assert_eq!(changes[0].target.as_deref(), Some(id.as_str()));

    // An unknown key, or another organization's, is not found.
    let unknown = store
        .set_permissions("org_b", id, Permissions::ALL)
        .await
        .unwrap_err();
    assert_eq!(unknown.kind(), partner_api::StoreErrorKind::NotFound);

    // A roll passes the permissions on.
    let rolled = store
        .roll(
            "org_a",
            &issued.record().id,
            RollKey::new(Duration::from_secs(3600)),
        )
        .await
        .unwrap();
    assert_eq!(rolled.record().permissions, events_only);
    a_key_without_orders_is_refused_orders_only(&limited_api(store.clone()), rolled.plaintext())
        .await;
}

#[tokio::test]
async fn the_memory_store_keeps_changes_and_rolls_a_keys_permissions() {
    permissions_are_kept_changed_and_rolled(store()).await;
}

#[tokio::test]
async fn postgres_keeps_changes_and_rolls_a_keys_permissions() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = pg::migrated_with(&["org_a", "org_b"]).await;
    permissions_are_kept_changed_and_rolled(store).await;
}

/// Through the standalone host's commands on PostgreSQL: `keys issue --permission` limits a
/// key, `keys permissions` changes it and a running host follows within the caches' bound; a
/// name that is no permission is refused before anything is stored.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_keys_command_issues_and_changes_permissions_and_a_running_host_follows() {
    use crate::common::net::{fetch, http1};
    use http::Method;
    crate::common::needs::needs!(Postgres, Examples);
    let url = pg::fresh_database().await;
    let store = partner_api::PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store
        .load_seed(&partner_api::seed::Seed::demo())
        .await
        .unwrap();
    let keys = |args: &[&str]| {
        let mut command = std::process::Command::new(standalone_binary());
        command
            .arg("keys")
            .args(args)
            .args(["--database-url", &url])
            .env_remove("DATABASE_URL");
        command.output().unwrap()
    };
    let issued = keys(&[
        "issue",
        "--organization",
        "org_demo",
        "--permission",
        "events",
    ]);
    assert!(issued.status.success(), "{issued:?}");
    let stdout = String::from_utf8(issued.stdout).unwrap();
    let mut lines = stdout.lines();
    let key = lines.next().unwrap().to_owned();
    let record: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(record["permissions"], serde_json::json!(["events"]));
    let id = record["id"].as_str().unwrap().to_owned();
    let refused = keys(&[
        "issue",
        "--organization",
        "org_demo",
        "--permission",
        "order",
    ]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("orders and events"));
    let unnamed = keys(&["permissions", "--organization", "org_demo", "--id", &id]);
    assert!(
        !unnamed.status.success(),
        "one of --permission, --all, --none"
    );

    let mut host = Process::spawn(&["--listen", "127.0.0.1:0", "--database-url", &url]);
    let base = host.base_url().await;
    let client = http1();
    let orders = || {
        fetch(
            &client,
            Method::GET,
            format!("{base}/v1/orders"),
            Some(&key),
        )
    };
    let refused = orders().await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_eq!(
        refused.headers["www-authenticate"],
        "Bearer realm=\"partner-api\", error=\"insufficient_scope\", scope=\"orders\""
    );

    let lifted = keys(&[
        "permissions",
        "--organization",
        "org_demo",
        "--id",
        &id,
        "--all",
    ]);
    assert!(lifted.status.success(), "{lifted:?}");
    let record: serde_json::Value =
        serde_json::from_str(String::from_utf8(lifted.stdout).unwrap().trim()).unwrap();
    assert_eq!(
        record["permissions"],
        serde_json::json!(["orders", "events"])
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while orders().await.status != StatusCode::OK {
        assert!(
            std::time::Instant::now() < deadline,
            "the host never followed the change"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let none = keys(&[
        "permissions",
        "--organization",
        "org_demo",
        "--id",
        &id,
        "--none",
    ]);
    assert!(none.status.success(), "{none:?}");
    let record: serde_json::Value =
        serde_json::from_str(String::from_utf8(none.stdout).unwrap().trim()).unwrap();
    assert_eq!(record["permissions"], serde_json::json!([]));
    let feed = || {
        fetch(
            &client,
            Method::GET,
            format!("{base}/v1/events"),
            Some(&key),
        )
    };
    while feed().await.status != StatusCode::FORBIDDEN {
        assert!(
            std::time::Instant::now() < deadline + Duration::from_secs(3),
            "the host never followed the second change"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let me = fetch(&client, Method::GET, format!("{base}/v1/me"), Some(&key)).await;
    assert_eq!(me.status, StatusCode::OK);
}
