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
use serde_json::json;

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
    // Providers: with every permission (the feed in the key's view) or orders alone, kept
    // sorted once each; lifted with --any.
    let with_feed = keys(&["issue", "--organization", "org_demo", "--provider", "meta"]);
    assert!(with_feed.status.success(), "{with_feed:?}");
    let limited = keys(&[
        "issue",
        "--organization",
        "org_demo",
        "--permission",
        "orders",
        "--provider",
        "meta",
        "--provider",
        "google",
        "--provider",
        "meta",
    ]);
    assert!(limited.status.success(), "{limited:?}");
    let stdout = String::from_utf8(limited.stdout).unwrap();
    let record: serde_json::Value = serde_json::from_str(stdout.lines().nth(1).unwrap()).unwrap();
    assert_eq!(record["providers"], serde_json::json!(["google", "meta"]));
    let limited_id = record["id"].as_str().unwrap().to_owned();
    let lifted = keys(&[
        "providers",
        "--organization",
        "org_demo",
        "--id",
        &limited_id,
        "--any",
    ]);
    assert!(lifted.status.success(), "{lifted:?}");
    let record: serde_json::Value =
        serde_json::from_str(String::from_utf8(lifted.stdout).unwrap().trim()).unwrap();
    assert!(record["providers"].is_null());

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

/// The ids of every order `key` reads through `api`, following each page's `Link` (with
/// `query` on the first), and the first page's answer.
async fn walk(api: &PartnerApi, key: &str, query: &str) -> (Vec<String>, Collected) {
    let first = send(api, get(&format!("/v1/orders?{query}"), Some(key))).await;
    assert_eq!(first.status, StatusCode::OK, "{:?}", first.json());
    let mut ids = Vec::new();
    let mut page = first.clone();
    loop {
        for order in page.json()["data"]["orders"].as_array().unwrap() {
            ids.push(order["id"].as_str().unwrap().to_owned());
        }
        let Some(link) = page.header("link").map(str::to_owned) else {
            break;
        };
        let next = link
            .strip_prefix('<')
            .and_then(|rest| rest.split_once('>'))
            .map(|(target, _)| target.to_owned())
            .unwrap();
        page = send(api, get(&next, Some(key))).await;
        assert_eq!(page.status, StatusCode::OK, "{next}: {:?}", page.json());
    }
    (ids, first)
}

/// A key limited to providers reads exactly their orders, through pages and filters; a
/// filter past them is a 403 naming the provider; its tokens and tags are its own; it
/// cannot hold the feed's permission yet; the providers are changed (audited once per
/// change) and rolled.
async fn providers_limit_what_a_key_reads<S>(store: S)
where
    S: KeyStore
        + KeyManager
        + AuditLog
        + partner_api::testing::StoreFixtures
        + partner_api::OrderStore
        + partner_api::store::EventFeed
        + Clone
        + 'static,
{
    // 30 orders: providers by n % 3 (`p0`, `p1`, `p2`), `p0` and `p1` both on every fifth.
    let orders: Vec<partner_api::Order> = (0..30_i64)
        .map(|n| {
            let mut order = order(&format!("o{n:02}"), 1_700_000_000_000 + n * 1_000);
            order.providers = vec![format!("p{}", n % 3)];
            if n % 5 == 0 {
                order.providers = vec!["p0".into(), "p1".into()];
            }
            order
        })
        .collect();
    partner_api::testing::StoreFixtures::add_orders(&store, "org_a", &orders)
        .await
        .unwrap();
    let newest_first = |keep: &dyn Fn(&partner_api::Order) -> bool| -> Vec<String> {
        orders
            .iter()
            .rev()
            .filter(|order| keep(order))
            .map(|order| order.id.clone())
            .collect()
    };
    let has = |provider: &'static str| {
        move |order: &partner_api::Order| order.providers.iter().any(|p| p == provider)
    };

    // With every permission (its feed is the view of p1: tests/it/event_views.rs).
    store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live).with_providers(&["p1"]),
        )
        .await
        .unwrap();

    let orders_only = Permissions::of([Permission::Orders]);
    let issued = store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live)
                .with_permissions(orders_only)
                .with_providers(&["p1", "p1"]),
        )
        .await
        .unwrap();
    let listed = serde_json::to_value(issued.record()).unwrap();
    assert_eq!(listed["providers"], serde_json::json!(["p1"]));
    let key = issued.plaintext();
    let api = PartnerApi::from_store(store.clone()).with_events(store.clone());

    // Pages of 4: exactly p1's orders, newest first, once each.
    let (ids, first) = walk(&api, key, "limit=4").await;
    assert_eq!(ids, newest_first(&has("p1")));
    // The restriction is not a parameter the client gave: its links do not name it.
    assert!(!first.header("link").unwrap().contains("provider="));
    // A filter inside it narrows; combined with others, it holds.
    let (ids, _) = walk(&api, key, "limit=3&provider=p1&status=booked").await;
    assert_eq!(ids, newest_first(&has("p1")));
    // One past it is a 403 naming the provider, not an empty page.
    for query in ["provider=p2", "provider=p1,p0"] {
        let outside = send(&api, get(&format!("/v1/orders?{query}"), Some(key))).await;
        assert_eq!(outside.status, StatusCode::FORBIDDEN, "{query}");
        let message = outside.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            message.contains("p2") || message.contains("p0"),
            "{message}"
        );
        assert!(message.contains("limited"), "{message}");
    }
    // It holds orders alone: the feed is refused to it.
    let feed = send(&api, get("/v1/events", Some(key))).await;
    assert_eq!(feed.status, StatusCode::FORBIDDEN);

    // An unrestricted key asking the same page by filter: same orders, another tag, and
    // tokens that do not cross between the two views.
    let full = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    let restricted_page = send(&api, get("/v1/orders?limit=4", Some(key))).await;
    let filtered_page = send(
        &api,
        get("/v1/orders?limit=4&provider=p1", Some(full.plaintext())),
    )
    .await;
    assert_eq!(restricted_page.json()["data"], filtered_page.json()["data"]);
    assert_ne!(
        restricted_page.header("etag"),
        filtered_page.header("etag"),
        "keys of different views share no tag"
    );
    let link_target = |page: &Collected| {
        let link = page.header("link").unwrap();
        link[1..link.find('>').unwrap()].to_owned()
    };
    let crossed = send(&api, get(&link_target(&filtered_page), Some(key))).await;
    assert_eq!(
        crossed.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        crossed.json()
    );
    let crossed = send(
        &api,
        get(&link_target(&restricted_page), Some(full.plaintext())),
    )
    .await;
    assert_eq!(
        crossed.status,
        StatusCode::BAD_REQUEST,
        "{:?}",
        crossed.json()
    );
    // Its own tag answers its conditional GET.
    let mut conditional = get("/v1/orders?limit=4", Some(key));
    conditional
        .headers_mut()
        .insert("if-none-match", restricted_page.headers["etag"].clone());
    assert_eq!(
        send(&api, conditional).await.status,
        StatusCode::NOT_MODIFIED
    );

    // Changed (one entry per change), then lifted.
    let id = &issued.record().id;
    let moved = store
        .set_providers("org_a", id, Some(vec!["p2".into(), "p0".into()]))
        .await
        .unwrap();
    assert_eq!(moved.providers, Some(vec!["p0".into(), "p2".into()]));
    store
        .set_providers("org_a", id, Some(vec!["p0".into(), "p2".into()]))
        .await
        .unwrap();
    let (ids, _) = walk(&api, key, "limit=7").await;
    assert_eq!(
        ids,
        newest_first(&|order: &partner_api::Order| has("p0")(order) || has("p2")(order))
    );
    let entries = store
        .audit_entries("org_a", &AuditQuery::default())
        .await
        .unwrap();
    let changes: Vec<_> = entries
        .entries
        .iter()
        .filter(|entry| entry.action.as_str() == "key.providers_changed")
        .collect();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].detail.as_deref(), Some("p0, p2"));

    // A roll passes them on.
    let rolled = store
        .roll("org_a", id, RollKey::new(Duration::from_secs(3600)))
        .await
        .unwrap();
    assert_eq!(
        rolled.record().providers,
        Some(vec!["p0".into(), "p2".into()])
    );
    let (ids, _) = walk(&api, rolled.plaintext(), "limit=50").await;
    assert_eq!(
        ids,
        newest_first(&|order: &partner_api::Order| has("p0")(order) || has("p2")(order))
    );
    let lifted = store.set_providers("org_a", id, None).await.unwrap();
    assert_eq!(lifted.providers, None);
    let (ids, _) = walk(&api, key, "limit=50").await;
    let (every, _) = walk(&api, full.plaintext(), "limit=50").await;
    assert_eq!(ids, every);
    assert!(ids.len() >= 30);
}

#[tokio::test]
async fn the_memory_store_limits_a_key_to_its_providers_orders() {
    providers_limit_what_a_key_reads(store()).await;
}

#[tokio::test]
async fn postgres_limits_a_key_to_its_providers_orders() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = pg::migrated_with(&["org_a", "org_b"]).await;
    providers_limit_what_a_key_reads(store).await;
}

/// Reads every page of `key` (pages of 5) through `api`: the ids, and the first page's tag.
async fn read_view(api: &PartnerApi, key: &str) -> Result<(Vec<String>, String), String> {
    let (ids, first) = walk(api, key, "limit=5").await;
    let tag = first.header("etag").ok_or("no entity tag")?.to_owned();
    Ok((ids, tag))
}

/// Two keys of one organization with different views (`limited` to `p1`, `full`),
/// interleaved on `replicas`, rounds apart by an order change: each reads exactly its own
/// view, their tags never meet, and one's tag never answers the other's conditional GET.
async fn views_stay_apart(
    replicas: &[PartnerApi; 2],
    store: &partner_api::PgStore,
    limited: &str,
    full: &str,
) -> Result<(), String> {
    let mut tags = [Vec::new(), Vec::new()];
    for round in 0..3_i64 {
        let p1: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM partner_orders WHERE organization_id = 'org_a' \
             AND 'p1' = ANY (providers) ORDER BY created_at DESC, id DESC",
        )
        .fetch_all(store.pool())
        .await
        .map_err(|err| err.to_string())?;
        let all: Vec<String> = sqlx::query_scalar(
            "SELECT id FROM partner_orders WHERE organization_id = 'org_a' \
             ORDER BY created_at DESC, id DESC",
        )
        .fetch_all(store.pool())
        .await
        .map_err(|err| err.to_string())?;
        for (at, api) in replicas.iter().enumerate() {
            // Alternate which key reads first, so each finds the other's pages cached.
            let order = if (round + at as i64) % 2 == 0 {
                [0, 1]
            } else {
                [1, 0]
            };
            for which in order {
                let (key, expected) = if which == 0 {
                    (limited, &p1)
                } else {
                    (full, &all)
                };
                let (ids, tag) = read_view(api, key).await?;
                if &ids != expected {
                    return Err(format!(
                        "round {round}, replica {at}: key {which} read {ids:?}, not {expected:?}"
                    ));
                }
                tags[which].push(tag);
            }
            // The other view's tag is no tag of this one.
            let mut conditional = get("/v1/orders?limit=5", Some(limited));
            let other = tags[1].last().unwrap().parse().unwrap();
            conditional.headers_mut().insert("if-none-match", other);
            if send(api, conditional).await.status == StatusCode::NOT_MODIFIED {
                return Err(format!(
                    "round {round}: the full view's tag answered the limited key"
                ));
            }
        }
        if let Some(shared) = tags[0].iter().find(|tag| tags[1].contains(tag)) {
            return Err(format!("round {round}: both views were tagged {shared}"));
        }
        // A change of an order of p1 (a new status), seen by both views in the next round.
        sqlx::query(
            "UPDATE partner_orders SET status = $1 WHERE organization_id = 'org_a' \
             AND id = (SELECT id FROM partner_orders WHERE organization_id = 'org_a' \
                       AND 'p1' = ANY (providers) ORDER BY created_at DESC LIMIT 1)",
        )
        .bind(format!("round-{round}"))
        .execute(store.pool())
        .await
        .map_err(|err| err.to_string())?;
        tokio::time::sleep(Duration::from_millis(1_500)).await;
    }
    Ok(())
}

/// Pages kept by organization and position (the id of the order they start after).
#[cfg(feature = "postgres")]
type KeptPages = std::sync::Arc<
    std::sync::Mutex<std::collections::HashMap<(String, Option<String>), partner_api::OrderPage>>,
>;

/// An order store that keeps each organization's pages by position alone, as a cache keyed
/// by organization would: the broken store the views' checker must fail.
#[cfg(feature = "postgres")]
#[derive(Clone)]
struct PagesByOrganization {
    inner: partner_api::PgStore,
    pages: KeptPages,
}

#[cfg(feature = "postgres")]
#[async_trait::async_trait]
impl partner_api::OrderStore for PagesByOrganization {
    async fn orders(
        &self,
        organization_id: &str,
        query: &partner_api::store::OrderQuery,
    ) -> Result<partner_api::OrderPage, partner_api::StoreError> {
        let at = (
            organization_id.to_owned(),
            query.position().map(|position| position.id.clone()),
        );
        if let Some(page) = self.pages.lock().unwrap().get(&at) {
            return Ok(page.clone());
        }
        let page = self.inner.orders(organization_id, query).await?;
        self.pages.lock().unwrap().insert(at, page.clone());
        Ok(page)
    }
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn two_keys_views_never_mix_in_two_replicas_caches_and_a_cache_by_organization_fails() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = pg::migrated_with(&["org_a"]).await;
    let orders: Vec<partner_api::Order> = (0..23_i64)
        .map(|n| {
            let mut order = order(&format!("o{n:02}"), 1_700_000_000_000 + n * 1_000);
            order.providers = vec![format!("p{}", n % 3)];
            order
        })
        .collect();
    store.add_orders("org_a", &orders).await.unwrap();
    let limited = store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live)
                .with_permissions(Permissions::of([Permission::Orders]))
                .with_providers(&["p1"]),
        )
        .await
        .unwrap();
    let full = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    let replica = |url: String| async move {
        let store = partner_api::PgStore::connect_lazy(&url).unwrap();
        let notifications = partner_api::cache::postgres::listen(store.pool().clone());
        let keys = partner_api::cache::CachingKeyStore::new(store.clone())
            .with_notifications(&notifications);
        let orders =
            partner_api::cache::CachingOrderStore::new(store).with_notifications(&notifications);
        pg::until_answering(&notifications).await;
        (PartnerApi::new(keys, orders), notifications)
    };
    let (first, _first_listener) = replica(url.clone()).await;
    let (second, _second_listener) = replica(url.clone()).await;
    views_stay_apart(
        &[first, second],
        &store,
        limited.plaintext(),
        full.plaintext(),
    )
    .await
    .unwrap();

    // The checker fails a cache that keeps pages by organization.
    let broken = |store: partner_api::PgStore| {
        PartnerApi::new(
            store.clone(),
            PagesByOrganization {
                inner: store,
                pages: Default::default(),
            },
        )
    };
    let replicas = [broken(store.clone()), broken(store.clone())];
    let failed = views_stay_apart(&replicas, &store, limited.plaintext(), full.plaintext()).await;
    assert!(failed.is_err(), "a cache by organization mixes the views");
}

/// `GET /me` at `2026-12-01` says what each key may read (`data.key`), its own for a
/// restricted key and never another's, even interleaved; at the versions before, `data`
/// holds the organization alone, the same bytes for every key.
async fn me_says_what_the_key_may_read<S>(store: S)
where
    S: KeyStore + KeyManager + partner_api::OrderStore + Clone + 'static,
{
    let api = PartnerApi::from_store(store.clone());
    let full = store
        .issue("org_a", NewKey::new(KeyEnvironment::Live))
        .await
        .unwrap();
    let limited = store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live)
                .with_permissions(Permissions::of([Permission::Orders]))
                .with_providers(&["p2", "p1"]),
        )
        .await
        .unwrap();
    let none = store
        .issue(
            "org_a",
            NewKey::new(KeyEnvironment::Live).with_permissions(Permissions::NONE),
        )
        .await
        .unwrap();
    let mut tags = Vec::new();
    for _ in 0..2 {
        for (key, access) in [
            (
                &full,
                json!({"permissions": ["orders", "events"], "providers": null}),
            ),
            (
                &limited,
                json!({"permissions": ["orders"], "providers": ["p1", "p2"]}),
            ),
            (&none, json!({"permissions": [], "providers": null})),
        ] {
            let me = send(&api, get("/v1/me", Some(key.plaintext()))).await;
            assert_eq!(me.status, StatusCode::OK);
            assert_eq!(me.headers["api-version"], "2026-12-01");
            assert_eq!(me.json()["data"]["key"], access);
            assert_eq!(me.json()["data"]["organization"]["id"], "org_a");
            tags.push(me.headers["etag"].clone());
            // Its own tag answers 304.
            let mut again = get("/v1/me", Some(key.plaintext()));
            again
                .headers_mut()
                .insert("if-none-match", me.headers["etag"].clone());
            assert_eq!(send(&api, again).await.status, StatusCode::NOT_MODIFIED);
        }
    }
    assert_eq!(tags[..3], tags[3..], "each key's tag is stable");
    assert!(
        tags[0] != tags[1] && tags[1] != tags[2] && tags[0] != tags[2],
        "{tags:?}"
    );
    // At the version before: the organization alone, byte for byte the same for every key.
    let mut bodies = Vec::new();
    for key in [&full, &limited, &none] {
        let mut older = get("/v1/me", Some(key.plaintext()));
        older
            .headers_mut()
            .insert("api-version", http::HeaderValue::from_static("2026-11-28"));
        let me = send(&api, older).await;
        assert_eq!(me.status, StatusCode::OK);
        assert!(me.json()["data"].get("key").is_none(), "{:?}", me.json());
        bodies.push(me.body.clone());
    }
    assert!(bodies.iter().all(|body| *body == bodies[0]));
    // A change shows with the next request.
    store
        .set_providers("org_a", &limited.record().id, None)
        .await
        .unwrap();
    let me = send(&api, get("/v1/me", Some(limited.plaintext()))).await;
    assert_eq!(
        me.json()["data"]["key"],
        json!({"permissions": ["orders"], "providers": null})
    );
}

#[tokio::test]
async fn the_memory_store_answers_me_with_what_each_key_may_read() {
    me_says_what_the_key_may_read(store()).await;
}

#[tokio::test]
async fn postgres_answers_me_with_what_each_key_may_read() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = pg::migrated_with(&["org_a"]).await;
    me_says_what_the_key_may_read(store).await;
}
