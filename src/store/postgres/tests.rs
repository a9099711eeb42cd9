//! `PgStore`'s own tests: its page queries' plans.

use super::orders::{
    AFTER, BEFORE, FILTERED_PAGES, FIRST_PAGE, PAGE_AFTER, PROVIDERS, SINCE, STATUSES,
};
use super::*;
use crate::store::{OrderPosition, OrderQuery};
use sqlx::Connection;

/// Both page queries are one range scan of the index, with no sort, whatever the page:
/// against the database that `PARTNER_API_TEST_DATABASE_URL` names (`.ci/test` starts one).
#[tokio::test]
async fn every_page_is_one_index_range_scan() {
    let Ok(url) = std::env::var("PARTNER_API_TEST_DATABASE_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs this test against PostgreSQL: set PARTNER_API_TEST_DATABASE_URL"
        );
        eprintln!("skipped: PARTNER_API_TEST_DATABASE_URL is not set");
        return;
    };
    // A database of its own: the server's default one may hold another version's schema.
    let name = format!(
        "partner_api_plans_{}_{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    );
    let server: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let mut admin = sqlx::PgConnection::connect_with(&server).await.unwrap();
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    let store = PgStore::new(
        sqlx::postgres::PgPoolOptions::new().connect_lazy_with(server.database(&name)),
    );
    store.migrate().await.unwrap();
    // Plans as for a large table, whatever this database holds.
    let mut connection = store.pool().acquire().await.unwrap();
    sqlx::query("SET enable_seqscan = off")
        .execute(&mut *connection)
        .await
        .unwrap();
    let after = OrderPosition {
        created_at: Timestamp::now(),
        id: "o_50".into(),
    };
    for query in [OrderQuery::newest(100), OrderQuery::after(after, 20)] {
        let (sql, arguments) = match query.position() {
            None => (FIRST_PAGE, 2),
            Some(_) => (PAGE_AFTER, 4),
        };
        let types = ["text", "bigint", "timestamptz", "text"][..arguments].join(", ");
        let parameters = ["'org_1'", "101", "now()", "'o_50'"][..arguments].join(", ");
        let plan = plan_of(&mut connection, sql, &types, &parameters).await;
        assert!(
            plan.contains("Index Scan using partner_orders_newest on partner_orders"),
            "{plan}"
        );
        assert!(!plan.contains("Sort"), "{plan}");
        if query.position().is_some() {
            assert!(
                plan.contains("Index Cond") && plan.contains("ROW("),
                "{plan}"
            );
        }
    }
    // Filtered pages: statuses on their own index, one range scan a status (a bounded sort
    // merges at most `limit + 1` rows of each); the rest on the newest-first index.
    for (holds, index) in [
        (STATUSES, "partner_orders_status"),
        (
            STATUSES | AFTER | SINCE | BEFORE | PROVIDERS,
            "partner_orders_status",
        ),
        (AFTER | SINCE | BEFORE | PROVIDERS, "partner_orders_newest"),
    ] {
        let mut types = vec!["text", "bigint"];
        let mut parameters = vec!["'org_1'", "101"];
        for (bit, kind, value) in [
            (AFTER, "timestamptz, text", "now(), 'o_50'"),
            (SINCE, "timestamptz", "now() - interval '1 day'"),
            (BEFORE, "timestamptz", "now()"),
            (PROVIDERS, "text[]", "ARRAY['p1']"),
            (STATUSES, "text[]", "ARRAY['running', 'paused']"),
        ] {
            if holds & bit != 0 {
                types.push(kind);
                parameters.push(value);
            }
        }
        let (types, parameters) = (types.join(", "), parameters.join(", "));
        let plan = plan_of(&mut connection, &FILTERED_PAGES[holds], &types, &parameters).await;
        assert!(
            plan.contains(&format!("Index Scan using {index} on partner_orders")),
            "{holds:b}: {plan}"
        );
        assert!(!plan.contains("Seq Scan"), "{holds:b}: {plan}");
    }
    drop(connection);
    store.pool().close().await;
    sqlx::query(&format!("DROP DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
}

/// The plan of `sql` prepared with the parameter `types` and executed with `parameters`
/// (SQL literals, comma-separated).
async fn plan_of(
    connection: &mut sqlx::pool::PoolConnection<Postgres>,
    sql: &str,
    types: &str,
    parameters: &str,
) -> String {
    sqlx::query(&format!("PREPARE page_plan ({types}) AS {sql}"))
        .execute(&mut **connection)
        .await
        .unwrap();
    let plan: Vec<String> =
        sqlx::query_scalar(&format!("EXPLAIN EXECUTE page_plan ({parameters})"))
            .fetch_all(&mut **connection)
            .await
            .unwrap();
    sqlx::query("DEALLOCATE page_plan")
        .execute(&mut **connection)
        .await
        .unwrap();
    plan.join("\n")
}
