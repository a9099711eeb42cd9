//! The events feed never stalls (#54), each reproduction of the review a test: a bad order
//! write (a budget above 2^53 - 1, a NULL provider, a writer in another time zone, a host
//! table's odd row, a snapshot written before the checks) never makes the feed answer 500;
//! retention's calls are bounded and resume where the last stopped; a caught-up reader of a
//! quiet feed resumes; no lock of ours can be held by a login outside the documented roles;
//! TRUNCATE is refused; an `after` that never was is a 400 on both stores; a read of a rare
//! type costs what a page of every type does.
#![cfg(feature = "postgres")]

use std::time::Duration;

use partner_api::key::KeyEnvironment;
use partner_api::store::{EventFeed, EventId, EventQuery, EventsPage, FeedEvent, OrderChanges};
use partner_api::store::{KeyManager, NewKey};
use partner_api::{MemoryStore, Organization, PgStore};
use sqlx::{Connection, Executor, PgConnection};

use crate::common::{order, BASE_MILLIS};

const RETENTION: Duration = partner_api::store::DEFAULT_EVENTS_RETENTION;

async fn migrated(organizations: &[&str]) -> (PgStore, String) {
    crate::common::pg::migrated_with(organizations).await
}

fn ids(page: &EventsPage) -> Result<Vec<u64>, EventsPage> {
    match page {
        EventsPage::Events { events, .. } => Ok(events.iter().map(|event| event.id).collect()),
        other => Err(other.clone()),
    }
}

async fn all_events(feed: &(impl EventFeed + ?Sized), organization: &str) -> Vec<FeedEvent> {
    match feed
        .events(organization, &EventQuery::oldest(100))
        .await
        .unwrap()
    {
        EventsPage::Events { events, .. } => events,
        other => panic!("{other:?}"),
    }
}

/// Every event of `organization` (of every organization: `None`) was written and became part
/// of its feed `days` days ago: those without a position get theirs (as a reader or a round of
/// retention would have given them when they came), then both times move back.
async fn age(connection: &mut PgConnection, organization: Option<&str>, days: i32) {
    sqlx::query(
        "SELECT partner_api_stamp_order_events(u.organization_id, 1000000) FROM \
         (SELECT DISTINCT organization_id FROM partner_api_order_events \
          WHERE position IS NULL AND ($1::text IS NULL OR organization_id = $1)) u",
    )
    .bind(organization)
    .execute(&mut *connection)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE partner_api_order_events \
         SET created_at = created_at - make_interval(days => $2), \
             stamped_at = stamped_at - make_interval(days => $2) \
         WHERE $1::text IS NULL OR organization_id = $1",
    )
    .bind(organization)
    .bind(days)
    .execute(connection)
    .await
    .unwrap();
}

/// Every event that no reader has seen yet was written `days` days ago: a backlog that came
/// late (a writer's long transaction, a lagging capture) or that nobody read.
async fn age_unread(connection: &mut PgConnection, days: i32) {
    sqlx::query(
        "UPDATE partner_api_order_events SET created_at = created_at - make_interval(days => $1) \
         WHERE position IS NULL",
    )
    .bind(days)
    .execute(connection)
    .await
    .unwrap();
}

/// [`written_feeds`], every event written and part of its feed 40 days ago.
async fn aged_feeds(prefix: &str, organizations: usize, orders: i64) -> (PgStore, String) {
    let (store, url) = written_feeds(prefix, organizations, orders).await;
    let mut owner = PgConnection::connect(&url).await.unwrap();
    age(&mut owner, None, 40).await;
    (store, url)
}

/// A migrated database whose `organizations` organizations (`{prefix}00`, `{prefix}01`, ...)
/// have `orders` orders each, no event read yet: its store and URL.
async fn written_feeds(prefix: &str, organizations: usize, orders: i64) -> (PgStore, String) {
    let organizations: Vec<String> = (0..organizations)
        .map(|n| format!("{prefix}{n:02}"))
        .collect();
    let names: Vec<&str> = organizations.iter().map(String::as_str).collect();
    let (store, url) = migrated(&names).await;
    for organization in &organizations {
        let orders: Vec<_> = (0..orders)
            .map(|n| order(&format!("{organization}_{n}"), BASE_MILLIS + n))
            .collect();
        store.add_orders(organization, &orders).await.unwrap();
    }
    (store, url)
}

fn data(event: &FeedEvent) -> serde_json::Value {
    serde_json::from_slice(&event.data).unwrap()
}

/// Defect 1, through the standalone host: as the order writer, a budget above 2^53 - 1 and
/// back, a NULL provider, an order written from a session in Copenhagen with an instant of
/// 1890 (whose offset there was +00:50:20), and a snapshot as the feed stored them before
/// the trigger checked them. `/v1/orders` and `/v1/events` answer 200 throughout; the
/// unshowable changes are their order's id and the mark; the 1890 order is served in UTC,
/// exactly as `/v1/orders` serves it.
#[tokio::test]
async fn no_bad_order_write_makes_the_feed_answer_500_through_the_standalone_host() {
    crate::common::needs::needs!(Postgres, Examples);
    use crate::common::net::{fetch, http1, read_feed};
    use crate::common::Process;
    use http::{Method, StatusCode};
    let (store, url) = migrated(&[]).await;
    store
        .load_seed(&partner_api::seed::Seed::demo())
        .await
        .unwrap();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let writer = format!("{database}_writer");
    owner
        .execute(
            format!(
                "DROP ROLE IF EXISTS {writer}; \
                 CREATE ROLE {writer} LOGIN PASSWORD 'change me'; \
                 GRANT USAGE ON SCHEMA public TO {writer}; \
                 GRANT SELECT, INSERT, UPDATE ON partner_orders TO {writer};"
            )
            .as_str(),
        )
        .await
        .unwrap();
    let mut as_writer = PgConnection::connect(&crate::common::pg::as_user(&url, &writer))
        .await
        .unwrap();
    let first: String = sqlx::query_scalar(
        "SELECT id FROM partner_orders WHERE organization_id = 'org_demo' ORDER BY id LIMIT 1",
    )
    .fetch_one(&mut as_writer)
    .await
    .unwrap();
    let second: String = sqlx::query_scalar(
        "SELECT id FROM partner_orders WHERE organization_id = 'org_demo' ORDER BY id OFFSET 1 LIMIT 1",
    )
    .fetch_one(&mut as_writer)
    .await
    .unwrap();
    as_writer
        .execute(
            format!(
                "UPDATE partner_orders SET budget_dkk = 9007199254740993 WHERE id = '{first}'; \
                 UPDATE partner_orders SET budget_dkk = 1000 WHERE id = '{first}'; \
                 UPDATE partner_orders SET providers = ARRAY['meta', NULL] WHERE id = '{second}'; \
                 UPDATE partner_orders SET providers = ARRAY['meta'] WHERE id = '{second}'; \
                 SET TimeZone = 'Europe/Copenhagen'; \
                 INSERT INTO partner_orders VALUES ('org_demo', 'ord_1890', ARRAY['meta'], 'A', \
                     'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', '1890-06-01T00:00:00Z');"
            )
            .as_str(),
        )
        .await
        .unwrap();
    // A snapshot as the trigger wrote them before it checked: the order's row as it was.
    let legacy: i64 = sqlx::query_scalar(
        "WITH legacy AS (INSERT INTO partner_api_order_events \
             (organization_id, change, order_id, order_row) \
         SELECT organization_id, 'order.updated', id, \
                jsonb_set(to_jsonb(o), '{budget_dkk}', '9007199254740993') \
         FROM partner_orders o WHERE id = 'ord_1890' RETURNING id) SELECT id FROM legacy",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();

    let mut host = Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        &url,
        "--events-retention-days",
        "0",
    ]);
    let base = host.base_url().await;
    let client = http1();
    let key = partner_api::seed::DEMO_KEY;
    // The oldest order: on the last page of /v1/orders, which answers 200 on every page.
    let mut served_1890 = None;
    let mut path = "/v1/orders".to_owned();
    while served_1890.is_none() {
        let page = fetch(&client, Method::GET, format!("{base}{path}"), Some(key)).await;
        assert_eq!(page.status, StatusCode::OK, "{path}");
        served_1890 = page.json()["data"]["orders"]
            .as_array()
            .unwrap()
            .iter()
            .find(|order| order["id"] == "ord_1890")
            .cloned();
        let Some(link) = page.header("link") else {
            break;
        };
        path = link[1..link.find('>').unwrap()].to_owned();
    }
    let served_1890 = served_1890.expect("the 1890 order is served");
    assert_eq!(served_1890["createdAt"], "1890-06-01T00:00:00.000Z");

    let (events, _) = read_feed(&client, &base, key, "/v1/events").await;
    let of = |id: &str| -> Vec<serde_json::Value> {
        events
            .iter()
            .filter(|event| event["data"]["id"] == id)
            .cloned()
            .collect()
    };
    let unshowable = |id: &str| serde_json::json!({"id": id, "unshowable": true});
    let first_events = of(&first);
    assert_eq!(first_events.len(), 3, "{first_events:?}");
    assert_eq!(first_events[1]["type"], "order.updated");
    assert_eq!(first_events[1]["data"], unshowable(&first));
    assert_eq!(first_events[2]["data"]["budgetDkk"], 1000);
    let second_events = of(&second);
    assert_eq!(second_events.len(), 3, "{second_events:?}");
    assert_eq!(second_events[1]["data"], unshowable(&second));
    assert_eq!(
        second_events[2]["data"]["providers"],
        serde_json::json!(["meta"])
    );
    let events_1890 = of("ord_1890");
    assert_eq!(events_1890.len(), 2, "{events_1890:?}");
    assert_eq!(
        events_1890[0]["data"], served_1890,
        "in UTC, as /orders shows it"
    );
    assert_eq!(events_1890[1]["data"], unshowable("ord_1890"));
    assert_eq!(
        events_1890[1]["id"],
        EventId::new("org_demo", u64::try_from(legacy).unwrap()).to_string()
    );
    assert!(host.terminate().await.success());
}

/// Defect 1 for a host's registered table: a row the contract cannot show (a budget with
/// øre, a `created_at` that is text and no instant) is written, with its event, marked.
#[tokio::test]
async fn a_host_tables_unshowable_row_is_written_with_a_marked_event() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated(&["org_host"]).await;
    let mut owner = PgConnection::connect(&url).await.unwrap();
    owner
        .execute(
            "CREATE TABLE host_orders (organization_id text, id text, providers varchar[], \
                 advertiser_name text, campaign_name text, budget_dkk numeric(12,2), \
                 start_date date, end_date date, status text, external_reference text, \
                 created_at text); \
             SELECT partner_api_serve_orders_table('host_orders'); \
             INSERT INTO host_orders VALUES ('org_host', 'h1', ARRAY['meta'], 'A', 'C', 12.00, \
                 '2026-03-01', '2026-04-30', 'booked', 'PO', '2026-01-02T03:04:05.678+01:00'); \
             INSERT INTO host_orders VALUES ('org_host', 'h2', ARRAY['meta'], 'A', 'C', 12.50, \
                 '2026-03-01', '2026-04-30', 'booked', 'PO', '2026-01-02T03:04:05Z'); \
             INSERT INTO host_orders VALUES ('org_host', 'h3', ARRAY['meta'], 'A', 'C', 12, \
                 '2026-03-01', '2026-04-30', 'booked', 'PO', 'yesterday-ish');",
        )
        .await
        .unwrap();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let events = {
        let _recording = metrics::set_default_local_recorder(&recorder);
        all_events(&store, "org_host").await
    };
    assert_eq!(events.len(), 3);
    // Each unshowable order served is counted as a store error of showing an order.
    let counted: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| {
            let key = key.key();
            key.name() == partner_api::metrics::STORE_ERRORS
                && key
                    .labels()
                    .any(|label| label.key() == "operation" && label.value() == "show_order")
        })
        .map(|(_, _, _, value)| match value {
            metrics_util::debugging::DebugValue::Counter(count) => count,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(counted, 2);
    let shown = data(&events[0]);
    assert_eq!(shown["budgetDkk"], 12);
    assert_eq!(shown["createdAt"], "2026-01-02T02:04:05.678Z");
    assert_eq!(
        data(&events[1]),
        serde_json::json!({"id": "h2", "unshowable": true})
    );
    assert_eq!(
        data(&events[2]),
        serde_json::json!({"id": "h3", "unshowable": true})
    );
}

/// Defect 2: a call of retention does a bounded amount of work (stamping and deleting) and
/// the next one resumes where it stopped, so organizations late in the order are pruned too
/// and a backlog drains call by call. A backlog no reader saw is given its positions, however
/// old its writes, and kept a retention period from then (it may have come late: a capture
/// that lagged, a long transaction); once that period has passed, it is deleted, call by
/// call again.
#[tokio::test]
async fn retention_calls_are_bounded_and_resume_where_the_last_stopped() {
    crate::common::needs::needs!(Postgres);
    let (_, url) = written_feeds("org_r", 30, 20).await;
    let mut owner = PgConnection::connect(&url).await.unwrap();
    age_unread(&mut owner, 40).await;
    // Written 40 days ago, seen now: stamped, none deleted.
    let (calls, deleted) = retention_until_done(&mut owner).await;
    assert_eq!(deleted, 0, "an event no reader could read yet was deleted");
    assert!(calls > 10, "the stamping took {calls} bounded calls");
    let unstamped: i64 =
        sqlx::query_scalar("SELECT count(*) FROM partner_api_order_events WHERE position IS NULL")
            .fetch_one(&mut owner)
            .await
            .unwrap();
    assert_eq!(unstamped, 0);
    // A period later: all but each feed's newest go.
    age(&mut owner, None, 40).await;
    let (calls, deleted) = retention_until_done(&mut owner).await;
    assert_eq!(deleted, 30 * 19);
    assert!(calls > 10, "the deletion took {calls} bounded calls");
    // Every organization, the last as the first, keeps its newest event only.
    let kept: Vec<(String, i64)> = sqlx::query_as(
        "SELECT organization_id, count(*) FROM partner_api_order_events \
         GROUP BY organization_id ORDER BY organization_id",
    )
    .fetch_all(&mut owner)
    .await
    .unwrap();
    assert_eq!(kept.len(), 30);
    assert!(kept.iter().all(|(_, count)| *count == 1), "{kept:?}");
}

/// Calls of retention (at most 50 events stamped or deleted each, which every call is checked
/// against) until a round is done with nothing left to stamp or delete: how many calls, and
/// how many events they deleted.
async fn retention_until_done(owner: &mut PgConnection) -> (usize, i64) {
    let keep = i64::try_from(RETENTION.as_secs()).unwrap();
    let count = async |owner: &mut PgConnection, which: &str| -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT count(*) FROM partner_api_order_events {which}"
        ))
        .fetch_one(owner)
        .await
        .unwrap()
    };
    let (mut calls, mut deleted_in_all) = (0, 0);
    loop {
        let unstamped_before = count(owner, "WHERE position IS NULL").await;
        let total_before = count(owner, "").await;
        let (deleted, done): (i64, bool) = sqlx::query_as(
            "SELECT deleted, done FROM partner_api_prune_order_events($1, 50, 10000)",
        )
        .bind(keep)
        .fetch_one(&mut *owner)
        .await
        .unwrap();
        let unstamped_after = count(owner, "WHERE position IS NULL").await;
        let total_after = count(owner, "").await;
        assert_eq!(total_before - total_after, deleted);
        let stamped = unstamped_before - unstamped_after;
        assert!(
            stamped + deleted <= 50,
            "call {calls}: {stamped} stamped, {deleted} deleted"
        );
        calls += 1;
        deleted_in_all += deleted;
        if done && deleted == 0 && unstamped_after == 0 {
            return (calls, deleted_in_all);
        }
        assert!(calls < 100, "retention never finished");
    }
}

/// Defect 3 on PostgreSQL: a reader at the newest event of a quiet feed keeps it; once a newer
/// event is stamped and retention deletes the reader's, the reader still resumes (it missed
/// nothing) and is served the new event; a reader further back is told it missed events.
#[tokio::test]
async fn a_caught_up_reader_of_a_quiet_feed_resumes_after_retention_on_postgresql() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated(&["org_q"]).await;
    store
        .add_orders(
            "org_q",
            &[order("q0", BASE_MILLIS), order("q1", BASE_MILLIS + 1)],
        )
        .await
        .unwrap();
    let read = all_events(&store, "org_q").await;
    let (e0, e1) = (read[0].id, read[1].id);
    let mut owner = PgConnection::connect(&url).await.unwrap();
    age(&mut owner, Some("org_q"), 40).await;
    store
        .add_orders("org_q", &[order("q2", BASE_MILLIS + 2)])
        .await
        .unwrap();
    // Another key reads: the new event is stamped.
    let e2 = all_events(&store, "org_q").await.last().unwrap().id;
    let deleted = partner_api::store::prune_event_batches(&store, RETENTION, 100, 10)
        .await
        .unwrap();
    assert_eq!(deleted, 2);
    let resumed = store
        .events("org_q", &EventQuery::after(e1, 100))
        .await
        .unwrap();
    assert_eq!(ids(&resumed), Ok(vec![e2]));
    let behind = store
        .events("org_q", &EventQuery::after(e0, 100))
        .await
        .unwrap();
    assert_eq!(behind, EventsPage::Expired);
}

/// Defect 3 on the memory store: one reader suffices.
#[tokio::test]
async fn a_caught_up_reader_of_a_quiet_feed_resumes_after_retention_in_memory() {
    let store = MemoryStore::new();
    store
        .add_organization(Organization {
            id: "org_q".into(),
            name: "Q".into(),
        })
        .unwrap();
    store
        .add_orders(
            "org_q",
            [order("q0", BASE_MILLIS), order("q1", BASE_MILLIS + 1)],
        )
        .unwrap();
    let read = all_events(&store, "org_q").await;
    let (e0, e1) = (read[0].id, read[1].id);
    store
        .add_orders("org_q", [order("q2", BASE_MILLIS + 2)])
        .unwrap();
    let e2 = all_events(&store, "org_q").await.last().unwrap().id;
    // Every event is older than no time at all once the clock moved on.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(store.prune_events(Duration::ZERO, 100).await.unwrap(), 2);
    let resumed = store
        .events("org_q", &EventQuery::after(e1, 100))
        .await
        .unwrap();
    assert_eq!(ids(&resumed), Ok(vec![e2]));
    assert_eq!(
        store
            .events("org_q", &EventQuery::after(e0, 100))
            .await
            .unwrap(),
        EventsPage::Expired
    );
}

/// Defect 6: both stores answer alike: 410 (`Expired`) only for an id of this feed that
/// retention deleted with events after it, 400 (`Unknown`) for every other: 0, an id past
/// every event, another organization's event, any id of an organization with no feed.
async fn an_after_that_never_was_is_unknown(
    feed: &(impl EventFeed + ?Sized),
    mut add: impl AsyncFnMut(&str, &str),
    mut prune: impl AsyncFnMut(),
) {
    for n in 0..3 {
        add("org_x", &format!("x{n}")).await;
        add("org_y", &format!("y{n}")).await;
    }
    let x = all_events(feed, "org_x").await;
    let y = all_events(feed, "org_y").await;
    prune().await;
    let answer = |organization: &'static str, after: u64| async move {
        feed.events(organization, &EventQuery::after(after, 100))
            .await
            .unwrap()
    };
    assert_eq!(answer("org_x", x[0].id).await, EventsPage::Expired);
    assert_eq!(ids(&answer("org_x", x[1].id).await), Ok(vec![x[2].id]));
    for never in [0, y[0].id, y[2].id, x[2].id + 1_000_000, u64::MAX] {
        assert_eq!(
            answer("org_x", never).await,
            EventsPage::Unknown,
            "after {never}"
        );
    }
    assert_eq!(answer("org_none", 0).await, EventsPage::Unknown);
    assert_eq!(answer("org_none", x[0].id).await, EventsPage::Unknown);
}

#[tokio::test]
async fn an_after_that_never_was_is_a_400_on_both_stores() {
    let memory = MemoryStore::new();
    for id in ["org_x", "org_y"] {
        memory
            .add_organization(Organization {
                id: id.into(),
                name: id.into(),
            })
            .unwrap();
    }
    an_after_that_never_was_is_unknown(
        &memory,
        async |organization: &str, id: &str| {
            memory
                .add_orders(organization, [order(id, BASE_MILLIS)])
                .unwrap();
        },
        async || {
            tokio::time::sleep(Duration::from_millis(5)).await;
            memory.prune_events(Duration::ZERO, 100).await.unwrap();
        },
    )
    .await;

    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated(&["org_x", "org_y"]).await;
    let mut owner = PgConnection::connect(&url).await.unwrap();
    an_after_that_never_was_is_unknown(
        &store,
        async |organization: &str, id: &str| {
            store
                .add_orders(organization, &[order(id, BASE_MILLIS)])
                .await
                .unwrap();
        },
        async || {
            age(&mut owner, None, 40).await;
            partner_api::store::prune_event_batches(&store, RETENTION, 100, 10)
                .await
                .unwrap();
        },
    )
    .await;
}

/// Defect 4: a login outside the documented roles that takes the advisory locks the crate
/// used (and holds them in an open transaction) stalls neither retention, nor key issuance,
/// nor endpoint creation; and cannot take the locks the crate uses now.
#[tokio::test]
async fn a_login_outside_the_documented_roles_holds_no_lock_of_ours() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated(&["org_l"]).await;
    store
        .add_orders(
            "org_l",
            &[order("l0", BASE_MILLIS), order("l1", BASE_MILLIS + 1)],
        )
        .await
        .unwrap();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let outsider = format!("{database}_outsider");
    owner
        .execute(
            format!(
                "DROP ROLE IF EXISTS {outsider}; \
                 CREATE ROLE {outsider} LOGIN PASSWORD 'change me'; \
                 GRANT USAGE ON SCHEMA public TO {outsider}; \
                 GRANT SELECT ON ALL TABLES IN SCHEMA public TO {outsider};"
            )
            .as_str(),
        )
        .await
        .unwrap();
    age(&mut owner, Some("org_l"), 40).await;
    let mut intruder = PgConnection::connect(&crate::common::pg::as_user(&url, &outsider))
        .await
        .unwrap();
    intruder.execute("BEGIN").await.unwrap();
    intruder
        .execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('partner_api_prune_order_events', 0)), \
                    pg_advisory_xact_lock(hashtextextended('partner_api_keys:org_l', 0)), \
                    pg_advisory_xact_lock(hashtextextended('partner_api_webhooks:org_l', 0))",
        )
        .await
        .unwrap();
    for lock in [
        "SELECT * FROM partner_api_event_retention FOR UPDATE NOWAIT",
        "SELECT * FROM partner_api_event_retention FOR KEY SHARE NOWAIT",
        "SELECT * FROM partner_api_event_feeds FOR UPDATE NOWAIT",
        "SELECT * FROM partner_api_organization_locks FOR UPDATE NOWAIT",
        "INSERT INTO partner_api_organization_locks VALUES ('org_l', 'keys') \
         ON CONFLICT (organization_id, purpose) DO UPDATE SET purpose = 'keys'",
        "LOCK TABLE partner_api_event_retention IN EXCLUSIVE MODE NOWAIT",
    ] {
        let err = intruder
            .execute(format!("SAVEPOINT attempt; {lock}").as_str())
            .await
            .expect_err(lock);
        assert!(
            err.to_string().contains("permission denied"),
            "{lock}: {err}"
        );
        intruder
            .execute("ROLLBACK TO SAVEPOINT attempt")
            .await
            .unwrap();
    }
    let bound = Duration::from_secs(5);
    let pruned = tokio::time::timeout(
        bound,
        partner_api::store::prune_event_batches(&store, RETENTION, 100, 10),
    )
    .await
    .expect("retention ran beside the intruder")
    .unwrap();
    assert_eq!(pruned, 1);
    tokio::time::timeout(
        bound,
        store.issue("org_l", NewKey::new(KeyEnvironment::Live)),
    )
    .await
    .expect("a key was issued beside the intruder")
    .unwrap();
    #[cfg(feature = "webhooks")]
    {
        use partner_api::webhooks::{NewEndpoint, WebhookManager};
        tokio::time::timeout(
            bound,
            store.add_endpoint("org_l", NewEndpoint::new("https://hooks.example/l")),
        )
        .await
        .expect("an endpoint was added beside the intruder")
        .unwrap();
    }
    intruder.execute("ROLLBACK").await.unwrap();
}

/// Defect 5: TRUNCATE of `partner_orders`, or of a registered host table, is refused (it
/// would remove orders without their events), even for the owner; DELETE writes them.
#[tokio::test]
async fn truncate_of_a_served_orders_table_is_refused() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated(&["org_t"]).await;
    store
        .add_orders("org_t", &[order("t0", BASE_MILLIS)])
        .await
        .unwrap();
    let mut owner = PgConnection::connect(&url).await.unwrap();
    owner
        .execute(
            "CREATE TABLE host_orders (LIKE partner_orders); \
             SELECT partner_api_serve_orders_table('host_orders'); \
             INSERT INTO host_orders SELECT * FROM partner_orders; \
             UPDATE host_orders SET id = 'h0';",
        )
        .await
        .unwrap();
    for table in ["partner_orders", "host_orders"] {
        let err = owner
            .execute(format!("TRUNCATE {table}").as_str())
            .await
            .expect_err(table);
        assert!(
            err.to_string().contains("DELETE FROM it instead"),
            "{table}: {err}"
        );
    }
    owner.execute("DELETE FROM partner_orders").await.unwrap();
    let events = all_events(&store, "org_t").await;
    assert_eq!(
        events.last().unwrap().change,
        partner_api::store::OrderChange::Deleted
    );
}

/// Defect 7: a read of a type the feed holds none of reads what a page of every type does,
/// not the whole feed (the heap tuples the read fetched, counted by PostgreSQL in the
/// transaction).
#[tokio::test]
async fn a_read_of_a_rare_type_costs_what_a_page_of_every_type_does() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated(&["org_big"]).await;
    let orders: Vec<_> = (0..3_000)
        .map(|n| order(&format!("b{n}"), BASE_MILLIS + n))
        .collect();
    store.add_orders("org_big", &orders).await.unwrap();
    store
        .add_orders("org_big", &[order("last", BASE_MILLIS)])
        .await
        .unwrap();
    // Stamped by a read of every type.
    all_events(&store, "org_big").await;
    let mut connection = PgConnection::connect(&url).await.unwrap();
    let (every_rows, every) = fetched(
        &mut connection,
        "'order.created', 'order.updated', 'order.deleted'",
    )
    .await;
    assert_eq!(every_rows, 101, "a full page and where it goes through");
    let (rare_rows, rare) = fetched(&mut connection, "'order.deleted'").await;
    assert_eq!(rare_rows, 1, "no event, and where it goes through");
    assert!(
        rare <= every,
        "a read of a rare type fetched {rare} tuples, a page of every type {every}"
    );
    let (some_rows, some) = fetched(&mut connection, "'order.updated', 'order.deleted'").await;
    assert_eq!(some_rows, 1);
    assert!(some <= every, "{some} against {every}");
    // The types as the API asks for them.
    let rare_page = store
        .events(
            "org_big",
            &EventQuery::oldest(100)
                .with_types(OrderChanges::NONE.with(partner_api::store::OrderChange::Deleted)),
        )
        .await
        .unwrap();
    assert!(
        matches!(rare_page, EventsPage::Events { ref events, through: Some(_) } if events.is_empty())
    );
}

/// The rows a read of `types` (SQL literals) of `org_big`'s feed returns, and the heap tuples
/// it read, in a transaction of its own on `connection`.
async fn fetched(connection: &mut PgConnection, types: &str) -> (i64, i64) {
    const READ_SO_FAR: &str =
        "SELECT pg_stat_get_xact_tuples_fetched('partner_api_order_events'::regclass) \
              + pg_stat_get_xact_tuples_returned('partner_api_order_events'::regclass)";
    let mut transaction = connection.begin().await.unwrap();
    let before: i64 = sqlx::query_scalar(READ_SO_FAR)
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    let rows: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM partner_api_read_order_events('org_big', NULL, 100, \
         ARRAY[{types}], false)"
    ))
    .fetch_one(&mut *transaction)
    .await
    .unwrap();
    let after: i64 = sqlx::query_scalar(READ_SO_FAR)
        .fetch_one(&mut *transaction)
        .await
        .unwrap();
    transaction.rollback().await.unwrap();
    (rows, after - before)
}

/// The retention lock under a fault and a burst: a call that cannot have it within two
/// seconds fails and says why (never a silent skip); the rounds of eight replicas at once
/// serialize, delete every due event once, and leave each feed's newest.
#[tokio::test]
async fn retention_says_when_it_cannot_run_and_replicas_rounds_at_once_delete_each_event_once() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = aged_feeds("org_b", 10, 30).await;
    let mut owner = PgConnection::connect(&url).await.unwrap();

    // The fault: the retention row held (as only the owner or a round can).
    let mut holder = PgConnection::connect(&url).await.unwrap();
    holder
        .execute("BEGIN; SELECT * FROM partner_api_event_retention FOR UPDATE")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let refused = store.prune_events(RETENTION, 1000).await.unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(1900),
        "it waited for the lock"
    );
    assert_eq!(refused.kind(), partner_api::StoreErrorKind::Unavailable);
    let why = std::error::Error::source(&refused)
        .map(ToString::to_string)
        .unwrap_or_default();
    assert!(why.contains("retention lock"), "{why}");
    holder.execute("ROLLBACK").await.unwrap();

    // The burst: eight replicas' rounds at once, in batches of 50.
    let mut rounds = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let replica = PgStore::connect_lazy(&url).unwrap();
        rounds.spawn(async move {
            partner_api::store::prune_event_batches(&replica, RETENTION, 50, 100)
                .await
                .unwrap()
        });
    }
    let deleted: u64 = rounds.join_all().await.into_iter().sum();
    assert_eq!(deleted, 10 * 29, "each due event deleted once");
    let (kept, remembered, distinct): (i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM partner_api_order_events), \
                (SELECT count(*) FROM partner_api_pruned_events p, unnest(p.ids)), \
                (SELECT count(DISTINCT i) FROM partner_api_pruned_events p, unnest(p.ids) i)",
    )
    .fetch_one(&mut owner)
    .await
    .unwrap();
    assert_eq!((kept, remembered, distinct), (10, 290, 290));
}

/// An order no snapshot can be made of (providers of two dimensions, which `array_position`
/// refuses), as any writer of `partner_orders` may write one: its trigger writes it, the
/// stamping renders it unshowable and stamps on (one statement renders a round, so one such
/// row would otherwise stop its organization's feed, retention and the webhooks' stamping),
/// its updates are written, and the order is shown again once it can be.
#[tokio::test]
async fn an_order_no_snapshot_can_be_made_of_stops_no_stamping() {
    crate::common::needs::needs!(Postgres);
    let (store, _) = migrated(&["org_deep"]).await;
    store
        .pool()
        .execute(
            "INSERT INTO partner_orders VALUES ('org_deep', 'deep', '{{meta}}', 'A', 'C', 1, \
                 '2026-03-01', '2026-04-30', 'booked', 'PO', '2026-02-01T00:00:00Z'); \
             UPDATE partner_orders SET status = 'live' WHERE id = 'deep'; \
             UPDATE partner_orders SET providers = ARRAY['meta'] WHERE id = 'deep'; \
             UPDATE partner_orders SET status = 'done' WHERE id = 'deep';",
        )
        .await
        .unwrap();
    let events = all_events(&store, "org_deep").await;
    let seen: Vec<(String, serde_json::Value)> = events
        .iter()
        .map(|event| {
            let data = data(event);
            (
                format!("{:?}", event.change),
                data.get("unshowable")
                    .cloned()
                    .unwrap_or_else(|| data["status"].clone()),
            )
        })
        .collect();
    let unshowable = serde_json::json!(true);
    assert_eq!(
        seen,
        [
            ("Created".to_owned(), unshowable.clone()),
            ("Updated".to_owned(), unshowable),
            ("Updated".to_owned(), serde_json::json!("live")),
            ("Updated".to_owned(), serde_json::json!("done")),
        ]
    );
    // The providers each update's order had as the feed showed it: none while it could not
    // be shown.
    let before: Vec<Option<serde_json::Value>> =
        sqlx::query_scalar("SELECT previous_providers FROM partner_api_order_events ORDER BY id")
            .fetch_all(store.pool())
            .await
            .unwrap();
    assert_eq!(
        before,
        [
            None,
            Some(serde_json::json!([])),
            Some(serde_json::json!([])),
            Some(serde_json::json!(["meta"])),
        ]
    );
}
