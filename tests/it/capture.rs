//! The capture mode on PostgreSQL (the server `bash .ci/test` starts has `wal_level =
//! logical`): the events it builds from the log are those the triggers write, byte for byte;
//! a server or role that cannot give it a slot refuses to start it, saying which setting; a
//! batch materialized twice writes nothing twice. The history checker runs on it in
//! `feed_history.rs`.
#![cfg(feature = "postgres")]

use std::time::Duration;

use partner_api::PgStore;
use sqlx::{Executor, PgPool, Row};

use crate::common::pg::{as_user, migrated_with};

const ORGANIZATIONS: [&str; 2] = ["org_c1", "org_c2"];

/// Writes that cover every kind of change: an insert, an update, one that changes nothing, a
/// move between organizations, a deletion, an order the contract cannot show (its budget past
/// 2^53 - 1) and its update, and a transaction of several changes.
const WRITES: &[&str] = &[
    "INSERT INTO partner_orders (organization_id, id, providers, advertiser_name, campaign_name, \
     budget_dkk, start_date, end_date, status, external_reference, created_at) VALUES \
     ('org_c1', 'a', '{meta,\"goo gle\"}', 'A''s \"x\"', 'C', 10, '2026-03-01', '2026-04-30', \
      'booked', 'PO', '2026-02-01 10:00:00.123+01')",
    "UPDATE partner_orders SET status = 'live' WHERE id = 'a'",
    "UPDATE partner_orders SET status = 'live' WHERE id = 'a'",
    "UPDATE partner_orders SET providers = '{p1}' WHERE id = 'a'",
    "UPDATE partner_orders SET organization_id = 'org_c2' WHERE id = 'a'",
    "INSERT INTO partner_orders (organization_id, id, providers, advertiser_name, campaign_name, \
     budget_dkk, start_date, end_date, status, external_reference, created_at) VALUES \
     ('org_c1', 'big', '{}', 'A', 'C', 9007199254740993, '2026-03-01', '2026-04-30', 'booked', \
      'PO', '2026-02-01 10:00:00Z')",
    "UPDATE partner_orders SET status = 'live' WHERE id = 'big'",
    "BEGIN; \
     UPDATE partner_orders SET budget_dkk = 11 WHERE id = 'a'; \
     DELETE FROM partner_orders WHERE id = 'big'; \
     UPDATE partner_orders SET organization_id = 'org_c1', budget_dkk = 12 WHERE id = 'a'; \
     COMMIT",
    "DELETE FROM partner_orders WHERE id = 'a'",
];

/// An event as a reader sees it: organization, change, order, snapshot, and the providers
/// before the change (which decide its type in a key's view).
type Event = (
    String,
    String,
    String,
    Option<serde_json::Value>,
    Option<serde_json::Value>,
);

/// The events of a database, in id order, each stamped first as a reader of its feed would
/// (the trigger's events of `partner_orders` get their snapshot there).
async fn events(pool: &PgPool) -> Vec<Event> {
    crate::common::pg::stamp_written(pool).await;
    sqlx::query(
        "SELECT organization_id, change, order_id, order_row, previous_providers \
         FROM partner_api_order_events ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|row| {
        (
            row.get("organization_id"),
            row.get("change"),
            row.get("order_id"),
            row.get("order_row"),
            row.get("previous_providers"),
        )
    })
    .collect()
}

async fn run_writes(pool: &PgPool) {
    for write in WRITES {
        pool.execute(*write).await.unwrap();
    }
}

/// Asserts that an order written now has its event from the trigger (the default mode), in
/// a database with no event yet.
async fn assert_the_trigger_writes_the_events(pool: &PgPool) {
    pool.execute(
        "INSERT INTO partner_orders (organization_id, id, providers, advertiser_name, campaign_name, \
         budget_dkk, start_date, end_date, status, external_reference, created_at) VALUES \
         ('org_c1', 'x', '{meta}', 'A', 'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now())",
    )
    .await
    .unwrap();
    assert_eq!(events(pool).await.len(), 1);
}

#[tokio::test]
async fn the_capture_writes_the_events_the_triggers_would() {
    crate::common::needs::needs!(Postgres);
    let (_triggered, triggered_url) = migrated_with(&ORGANIZATIONS).await;
    let (captured, captured_url) = migrated_with(&ORGANIZATIONS).await;
    let triggered_pool = PgPool::connect(&triggered_url).await.unwrap();
    let captured_pool = PgPool::connect(&captured_url).await.unwrap();
    run_writes(&triggered_pool).await;
    captured.start_order_capture().await.unwrap();
    // Started twice: nothing changes.
    captured.start_order_capture().await.unwrap();
    run_writes(&captured_pool).await;
    assert!(
        events(&captured_pool).await.is_empty(),
        "a trigger wrote an event in the capture mode"
    );
    let reader = captured.order_capture().with_batch(10);
    let mut rounds = 0;
    loop {
        let round = reader.round().await.unwrap();
        assert!(round.held);
        rounds += 1;
        if round.caught_up {
            break;
        }
    }
    assert!(
        rounds > 1,
        "a batch of 10 changes read everything in one round"
    );
    let want = events(&triggered_pool).await;
    assert_eq!(want.len(), 12, "{want:#?}");
    // Each update's and deletion's providers before it, as the feed showed the order (`[]`
    // for the order the contract cannot show); none for a creation.
    let before = serde_json::json!(["meta", "goo gle"]);
    let moved = serde_json::json!(["p1"]);
    let none = serde_json::json!([]);
    let previous: Vec<(&str, Option<&serde_json::Value>)> = want
        .iter()
        .map(|event| (event.1.as_str(), event.4.as_ref()))
        .collect();
    assert_eq!(
        previous,
        [
            ("order.created", None),
            ("order.updated", Some(&before)),
            ("order.updated", Some(&before)),
            ("order.deleted", Some(&moved)),
            ("order.created", None),
            ("order.created", None),
            ("order.updated", Some(&none)),
            ("order.updated", Some(&moved)),
            ("order.deleted", Some(&none)),
            ("order.deleted", Some(&moved)),
            ("order.created", None),
            ("order.deleted", Some(&moved)),
        ]
    );
    assert_eq!(events(&captured_pool).await, want);
    // The event's time is its transaction's commit.
    let times_ordered: bool = sqlx::query_scalar(
        "SELECT bool_and(created_at >= '2026-01-01') FROM partner_api_order_events",
    )
    .fetch_one(&captured_pool)
    .await
    .unwrap();
    assert!(times_ordered);

    // A reader killed after its commit and before the slot moved: a copy of the slot, taken
    // before the round, stands for the slot that did not move; the same batch is decoded
    // again from it, and written once, even when retention deleted the first copy meanwhile
    // (the next reader may take the lease over later than the retention's age).
    let slot: String = sqlx::query_scalar("SELECT slot_name FROM partner_api_order_capture")
        .fetch_one(&captured_pool)
        .await
        .unwrap();
    let unmoved = format!("{slot}_unmoved");
    sqlx::query("SELECT pg_copy_logical_replication_slot($1, $2)")
        .bind(&slot)
        .bind(&unmoved)
        .execute(&captured_pool)
        .await
        .unwrap();
    captured_pool
        .execute(
            "INSERT INTO partner_orders (organization_id, id, providers, advertiser_name, campaign_name, \
             budget_dkk, start_date, end_date, status, external_reference, created_at) VALUES \
             ('org_c2', 'again', '{meta}', 'A', 'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now())",
        )
        .await
        .unwrap();
    assert_eq!(reader.round().await.unwrap().events, 1);
    captured_pool
        .execute("DELETE FROM partner_api_order_events WHERE order_id = 'again'")
        .await
        .unwrap();
    sqlx::query("UPDATE partner_api_order_capture SET slot_name = $1")
        .bind(&unmoved)
        .execute(&captured_pool)
        .await
        .unwrap();
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&slot)
        .execute(&captured_pool)
        .await
        .unwrap();
    let round = reader.round().await.unwrap();
    assert_eq!((round.held, round.events), (true, 0));
    let again: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM partner_api_order_events WHERE order_id = 'again'",
    )
    .fetch_one(&captured_pool)
    .await
    .unwrap();
    assert_eq!(again, 0, "the deleted event was written again");

    // Back to the triggers: the slot is drained and dropped, and the next write has its event
    // from the trigger.
    captured
        .stop_order_capture(Duration::from_secs(10))
        .await
        .unwrap();
    let slots: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1")
            .bind(&unmoved)
            .fetch_one(&captured_pool)
            .await
            .unwrap();
    assert_eq!(slots, 0);
    assert_eq!(reader.mode().await.unwrap(), None);
    captured_pool
        .execute("UPDATE partner_orders SET status = 'done' WHERE id = 'again'")
        .await
        .unwrap();
    let last = events(&captured_pool).await.pop().unwrap();
    assert_eq!(
        (last.1.as_str(), last.2.as_str()),
        ("order.updated", "again")
    );
}

#[tokio::test]
async fn a_role_that_may_not_replicate_is_refused_the_capture_and_the_triggers_stay() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated_with(&ORGANIZATIONS).await;
    let pool = PgPool::connect(&url).await.unwrap();
    let database = url.rsplit_once('/').unwrap().1.to_owned();
    let role = format!("{database}_owner");
    // The schema's owner without REPLICATION (nor superuser).
    pool.execute(
        format!(
            "DROP ROLE IF EXISTS {role}; CREATE ROLE {role} LOGIN PASSWORD 'change me'; \
             GRANT SELECT ON partner_api_order_capture TO {role}"
        )
        .as_str(),
    )
    .await
    .unwrap();
    let owner = PgStore::connect_lazy(&as_user(&url, &role)).unwrap();
    let refused = owner.start_order_capture().await.unwrap_err();
    let message = std::error::Error::source(&refused).unwrap().to_string();
    assert!(message.contains("REPLICATION"), "{message}");
    assert_eq!(refused.kind(), partner_api::StoreErrorKind::Unsupported);
    // Nothing changed: the triggers write the events.
    assert_the_trigger_writes_the_events(&pool).await;
    let mode: Option<String> = owner.order_capture().mode().await.unwrap();
    assert_eq!(mode, None);
    drop(store);
}

/// A switch pauses the order writes for 2 s at most a try, in three tries: a writer that
/// holds its table past all three has the switch refused as unavailable, changing nothing (no
/// slot left behind); one that ends after a try was refused lets the next through.
#[tokio::test]
async fn a_switch_refused_by_a_writer_past_its_three_tries_changes_nothing_and_one_during_them_goes_through(
) {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated_with(&ORGANIZATIONS).await;
    let pool = PgPool::connect(&url).await.unwrap();
    // A writer's lock without a transaction id (the slot's creation waits for those).
    let writing = || async {
        let mut writer = pool.begin().await.unwrap();
        writer
            .execute("LOCK TABLE partner_orders IN ROW EXCLUSIVE MODE")
            .await
            .unwrap();
        writer
    };
    let writer = writing().await;
    let started = std::time::Instant::now();
    let refused = store.start_order_capture().await.unwrap_err();
    let waited = started.elapsed();
    assert_eq!(refused.kind(), partner_api::StoreErrorKind::Unavailable);
    let message = std::error::Error::source(&refused).unwrap().to_string();
    assert!(message.contains("did not pause within 2 s"), "{message}");
    assert!(
        waited >= Duration::from_secs(6),
        "three tries took {waited:?}"
    );
    writer.rollback().await.unwrap();
    // Nothing changed: the default mode, whose trigger writes the events, and no slot kept
    // for it (it would keep the server's log).
    assert_eq!(store.order_capture().mode().await.unwrap(), None);
    let slots: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(slots, 0, "the refused start left its slot");
    assert_the_trigger_writes_the_events(&pool).await;

    // A writer that ends 2.5 s after it saw the switch wait for it, so past the first try's
    // 2 s: the next try has the lock.
    let ending_after_a_refused_try = |writer: sqlx::Transaction<'static, sqlx::Postgres>| {
        let pool = pool.clone();
        tokio::spawn(async move {
            loop {
                let waiting: bool = sqlx::query_scalar(
                    "SELECT EXISTS (SELECT 1 FROM pg_locks l \
                     WHERE l.relation = 'partner_orders'::regclass AND NOT l.granted \
                       AND l.database = (SELECT oid FROM pg_database \
                                         WHERE datname = current_database()))",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                if waiting {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_millis(2_500)).await;
            writer.commit().await.unwrap();
        })
    };
    let ending = ending_after_a_refused_try(writing().await);
    store.start_order_capture().await.unwrap();
    ending.await.unwrap();
    assert!(store.order_capture().mode().await.unwrap().is_some());
    // The same for the way back, and the slot goes with the test (the server is shared).
    let ending = ending_after_a_refused_try(writing().await);
    store
        .stop_order_capture(Duration::from_secs(30))
        .await
        .unwrap();
    ending.await.unwrap();
    assert_eq!(store.order_capture().mode().await.unwrap(), None);
}

/// A stop's slot still read when the next start comes (a reader's round under way on the
/// server; here a `pg_recvlogical` streaming from it) is not taken for the start's own, at the
/// position it was left at: the start is refused, changing nothing, and goes through once
/// the slot is free to drop.
#[tokio::test]
async fn a_start_while_the_last_stops_slot_is_still_read_is_refused_then_goes_through() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated_with(&ORGANIZATIONS).await;
    let pool = PgPool::connect(&url).await.unwrap();
    store.start_order_capture().await.unwrap();
    let slot: String = sqlx::query_scalar("SELECT slot_name FROM partner_api_order_capture")
        .fetch_one(&pool)
        .await
        .unwrap();
    store
        .stop_order_capture(Duration::from_secs(30))
        .await
        .unwrap();
    // The stop's slot as a reader still held it: retired, and read.
    sqlx::query("SELECT pg_create_logical_replication_slot($1, 'test_decoding')")
        .bind(&slot)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("UPDATE partner_api_order_capture SET retired_slot = $1")
        .bind(&slot)
        .execute(&pool)
        .await
        .unwrap();
    let mut reading = std::process::Command::new("pg_recvlogical")
        .args(["-d", &url, "--slot", &slot, "--start", "-f", "/dev/null"])
        .spawn()
        .expect("pg_recvlogical (Debian's postgresql-client) runs");
    let active = || async {
        sqlx::query_scalar::<_, bool>(
            "SELECT coalesce(bool_or(active), false) FROM pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&slot)
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    for _ in 0..500 {
        if active().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        active().await,
        "pg_recvlogical did not start reading the slot"
    );
    let refused = store.start_order_capture().await.unwrap_err();
    assert_eq!(refused.kind(), partner_api::StoreErrorKind::Unavailable);
    let message = std::error::Error::source(&refused).unwrap().to_string();
    assert!(message.contains("still being read"), "{message}");
    assert_eq!(store.order_capture().mode().await.unwrap(), None);
    assert_the_trigger_writes_the_events(&pool).await;

    reading.kill().unwrap();
    reading.wait().unwrap();
    for _ in 0..500 {
        if !active().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    store.start_order_capture().await.unwrap();
    let retired: Option<String> =
        sqlx::query_scalar("SELECT retired_slot FROM partner_api_order_capture")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(retired, None);
    assert!(store.order_capture().mode().await.unwrap().is_some());
    // The slot goes with the test (the server is shared).
    store
        .stop_order_capture(Duration::from_secs(30))
        .await
        .unwrap();
}

/// The standalone host's `order-capture` subcommands: `status` and each switch print the mode
/// they leave, `run --batch` reads the capture in the foreground until stopped.
#[tokio::test]
async fn the_standalone_host_switches_reads_and_says_the_capture() {
    use crate::common::{standalone_binary, standalone_command};
    crate::common::needs::needs!(Postgres, Examples);
    let (_store, url) = migrated_with(&ORGANIZATIONS).await;
    let pool = PgPool::connect(&url).await.unwrap();
    let capture = |args: &[&str]| {
        let mut full = vec!["--no-migrate", "--database-url", &url, "order-capture"];
        full.extend_from_slice(args);
        let full: Vec<String> = full.into_iter().map(str::to_owned).collect();
        async move {
            let full: Vec<&str> = full.iter().map(String::as_str).collect();
            let (ok, stdout, stderr) = standalone_command(&full).await;
            assert!(ok, "{stderr}");
            stdout
        }
    };
    assert_eq!(capture(&["status"]).await, "triggers\n");
    let started = capture(&["start"]).await;
    let slot: String = sqlx::query_scalar("SELECT slot_name FROM partner_api_order_capture")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(slot.starts_with("partner_api_"), "{slot}");
    assert_eq!(started, format!("capture {slot}\n"));
    assert_eq!(capture(&["status"]).await, format!("capture {slot}\n"));
    let mut reading = tokio::process::Command::new(standalone_binary())
        .args([
            "--no-migrate",
            "--database-url",
            &url,
            "order-capture",
            "run",
            "--batch",
            "10",
        ])
        .env_remove("DATABASE_URL")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    run_writes(&pool).await;
    // Every write's event, read by the process in rounds of 10 decoded rows.
    let mut read = Vec::new();
    for _ in 0..500 {
        read = events(&pool).await;
        if read.len() == 12 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(read.len(), 12, "{read:#?}");
    reading.kill().await.unwrap();
    assert_eq!(
        capture(&["stop", "--drain-seconds", "10"]).await,
        "triggers\n"
    );
    let slots: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1")
            .bind(&slot)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(slots, 0);
}

/// A lost slot: the changes after the capture's last position have no events, so stopping
/// fences every feed: a reader resuming from an event of before is answered 410 (never served
/// a feed with a hole), one starting afresh reads what the triggers write from then on.
#[tokio::test]
async fn a_lost_slot_is_said_and_stopping_fences_every_feed_so_no_reader_crosses_the_hole() {
    use partner_api::store::{EventFeed, EventQuery, EventsPage};
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated_with(&ORGANIZATIONS).await;
    let pool = PgPool::connect(&url).await.unwrap();
    store.start_order_capture().await.unwrap();
    let insert = |id: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query(
                "INSERT INTO partner_orders (organization_id, id, providers, advertiser_name, \
                 campaign_name, budget_dkk, start_date, end_date, status, external_reference, \
                 created_at) VALUES ('org_c1', $1, '{meta}', 'A', 'C', 1, '2026-03-01', \
                 '2026-04-30', 'booked', 'PO', now())",
            )
            .bind(id)
            .execute(&pool)
            .await
            .unwrap();
        }
    };
    insert("before").await;
    let reader = store.order_capture();
    while !reader.round().await.unwrap().caught_up {}
    let oldest = || async {
        match store
            .events("org_c1", &EventQuery::oldest(10))
            .await
            .unwrap()
        {
            EventsPage::Events { events, .. } => events,
            other => panic!("{other:?}"),
        }
    };
    let events = oldest().await;
    assert_eq!(events.len(), 1);
    let cursor = events[0].id;
    // The slot goes behind the capture's back; a change is written meanwhile.
    let slot = reader.mode().await.unwrap().unwrap();
    sqlx::query("SELECT pg_drop_replication_slot($1)")
        .bind(&slot)
        .execute(&pool)
        .await
        .unwrap();
    insert("in_the_hole").await;
    let said = reader.round().await.unwrap_err();
    let said = std::error::Error::source(&said).unwrap().to_string();
    assert!(
        said.contains("lost") && said.contains("order-capture stop"),
        "{said}"
    );
    // Stopping fences: the reader that resumes is told, the one that starts afresh reads on
    // from the triggers' events.
    store
        .stop_order_capture(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(reader.mode().await.unwrap(), None);
    insert("after").await;
    let resumed = store
        .events("org_c1", &EventQuery::after(cursor, 10))
        .await
        .unwrap();
    assert!(matches!(resumed, EventsPage::Expired), "{resumed:?}");
    let ids: Vec<String> = oldest()
        .await
        .iter()
        .map(|event| {
            let data: serde_json::Value = serde_json::from_slice(&event.data).unwrap();
            data["id"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(ids, ["after"]);
}

/// A reader whose database has not run the migration that makes the snapshot's type (a
/// replica upgraded before the owner's `migrate`) refuses its round: rendered without the
/// type every snapshot would fail, be taken for an order the contract cannot show, and the
/// slot would move past it for good. Once the type is there, the same changes are read whole.
#[tokio::test]
async fn a_reader_ahead_of_its_databases_migrations_refuses_its_round_and_moves_nothing() {
    crate::common::needs::needs!(Postgres);
    let (store, url) = migrated_with(&ORGANIZATIONS).await;
    let pool = PgPool::connect(&url).await.unwrap();
    store.start_order_capture().await.unwrap();
    pool.execute(WRITES[0]).await.unwrap();
    pool.execute("DROP TYPE partner_api_order_snapshot")
        .await
        .unwrap();
    let reader = store.order_capture();
    let refused = reader.round().await.unwrap_err();
    let message = std::error::Error::source(&refused).unwrap().to_string();
    assert!(
        message.contains("partner_api_order_snapshot") && message.contains("migrate"),
        "{message}"
    );
    assert!(events(&pool).await.is_empty(), "a refused round wrote");
    // The type as its migration makes it.
    let migration =
        include_str!("../../src/store/migrations/20261211000002_order_snapshot_row.sql");
    let create_type = &migration[migration.find("CREATE TYPE").unwrap()..];
    let create_type = &create_type[..=create_type.find(";").unwrap()];
    pool.execute(create_type).await.unwrap();
    while !reader.round().await.unwrap().caught_up {}
    let read = events(&pool).await;
    assert_eq!(read.len(), 1, "{read:#?}");
    let snapshot = read[0].3.as_ref().expect("the order read whole");
    assert_eq!(snapshot["advertiser_name"], "A's \"x\"");
}

/// The snapshot built as a row of `partner_api_order_snapshot` (migration
/// `20261211000002_order_snapshot_row`) is, to the byte, the JSON the trigger built before
/// with `jsonb_build_object`, on text that needs escaping (quotes, backslashes, control
/// characters, other scripts), in the trigger and in the capture reader alike.
#[tokio::test]
async fn the_snapshot_row_is_the_json_jsonb_build_object_made() {
    crate::common::needs::needs!(Postgres);
    const BEFORE: &str = "pg_catalog.jsonb_build_object('id', o.id, \
        'providers', pg_catalog.to_jsonb(o.providers), 'advertiser_name', o.advertiser_name, \
        'campaign_name', o.campaign_name, 'budget_dkk', o.budget_dkk, \
        'start_date', pg_catalog.to_char(o.start_date, 'YYYY-MM-DD'), \
        'end_date', pg_catalog.to_char(o.end_date, 'YYYY-MM-DD'), 'status', o.status, \
        'external_reference', o.external_reference, \
        'created_at', pg_catalog.to_char(o.created_at AT TIME ZONE 'UTC', \
                                         'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'))";
    const ORDERS: &str = "INSERT INTO partner_orders (organization_id, id, providers, \
        advertiser_name, campaign_name, budget_dkk, start_date, end_date, status, \
        external_reference, created_at) \
        SELECT 'org_c1', 'o' || n, ARRAY['meta', 'a\"b', E'c\\\\d', E'e\\tf', 'ø✓'], \
               E'A \"q\" \\\\ \\n \\u0001 ' || n, 'Kampagne Ærø 東京 ' || n, 9007199254740991 - n, \
               '0001-01-01'::date + n, '9999-12-31'::date - n, 'booked', E'PO\\r' || n, \
               '2026-02-01 10:00:00.5+01'::timestamptz + n * interval '1 microsecond' \
        FROM pg_catalog.generate_series(1, 50) n";
    let compare = format!(
        "SELECT pg_catalog.count(*) FILTER (WHERE e.order_row::text = ({BEFORE})::text), \
                pg_catalog.count(*) \
         FROM partner_api_order_events e JOIN partner_orders o ON o.id = e.order_id"
    );
    // The trigger's.
    let (_triggered, url) = migrated_with(&ORGANIZATIONS).await;
    let pool = PgPool::connect(&url).await.unwrap();
    pool.execute(ORDERS).await.unwrap();
    crate::common::pg::stamp_written(&pool).await;
    let (same, all): (i64, i64) = sqlx::query_as(&compare).fetch_one(&pool).await.unwrap();
    assert_eq!((same, all), (50, 50));
    // The capture reader's.
    let (captured, url) = migrated_with(&ORGANIZATIONS).await;
    let pool = PgPool::connect(&url).await.unwrap();
    captured.start_order_capture().await.unwrap();
    pool.execute(ORDERS).await.unwrap();
    let reader = captured.order_capture();
    while !reader.round().await.unwrap().caught_up {}
    crate::common::pg::stamp_written(&pool).await;
    let (same, all): (i64, i64) = sqlx::query_as(&compare).fetch_one(&pool).await.unwrap();
    assert_eq!((same, all), (50, 50));
}
