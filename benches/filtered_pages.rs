//! What a filtered page of `GET /orders` costs on PostgreSQL against an unfiltered one, deep
//! in an organization of ORDERS orders (default 100,000): `PgStore::orders` timed as the API
//! calls it, for a page of 100 after the middle of the organization's orders, unfiltered and
//! with each filter (a status of a quarter of the orders, a rare status, two statuses, a
//! creation range, a common and a rare provider (as a key's own list and as a request's
//! filter, which the store reads differently), the last change since a time (one order in
//! ten) and in a narrow range (one in a thousand), all four of the first at once), and then the
//! unfiltered page and the common provider's again once its list has an index of its own
//! (`PgStore::provider_index`). Prints the median and p90 of ROUNDS calls each (default 200,
//! the cases taken in turn in each round) and each one's ratio to the unfiltered page.
//!
//! `PARTNER_API_TEST_DATABASE_URL=postgres://... cargo bench --features postgres --bench
//! filtered_pages`

mod common;

use std::time::{Duration, Instant};

use chrono::NaiveDate;
use partner_api::store::{OrderFilter, OrderPosition, OrderQuery};
use partner_api::{Order, OrderStore, Organization, PgStore, Timestamp};
use sqlx::Executor;

const BASE_MILLIS: i64 = 1_767_225_600_000;

fn order(n: usize) -> Order {
    let start = NaiveDate::from_ymd_opt(2026, 3, 1).expect("a date");
    // Statuses: a quarter each of four, and `cancelled` for one order in a hundred instead.
    let status = if n % 100 == 7 {
        "cancelled"
    } else {
        ["booked", "running", "paused", "done"][n % 4]
    };
    // Providers: `p0`..`p19` two each; `rare` on one order in a thousand.
    let mut providers = vec![format!("p{}", n % 20), format!("p{}", (n / 20) % 20)];
    if n % 1000 == 3 {
        providers.push("rare".into());
    }
    Order {
        id: format!("o{n:06}"),
        providers,
        advertiser_name: "Advertiser".into(),
        campaign_name: format!("Campaign {n}"),
        budget_dkk: 1_000,
        start_date: start,
        end_date: start,
        status: status.into(),
        external_reference: format!("PO-{n}"),
        created_at: Timestamp::from_unix_millis(
            BASE_MILLIS + i64::try_from(n).expect("few orders") * 1_000,
        )
        .expect("a time"),
        // One order in ten changed after every order was created, in creation order.
        updated_at: (n % 10 == 0).then(|| changed_at(n)),
    }
}

/// When the order `n` (one in ten) last changed: after all ORDERS were created, 10 ms
/// apart.
fn changed_at(n: usize) -> Timestamp {
    let millis = i64::try_from(orders_count() * 1_000 + n * 10).expect("few orders");
    Timestamp::from_unix_millis(BASE_MILLIS + millis).expect("a time")
}

fn orders_count() -> usize {
    std::env::var("ORDERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100_000)
}

fn at(n: usize) -> Timestamp {
    order(n).created_at
}

#[tokio::main]
async fn main() {
    let Ok(admin) = std::env::var("PARTNER_API_TEST_DATABASE_URL") else {
        eprintln!("filtered_pages: set PARTNER_API_TEST_DATABASE_URL");
        return;
    };
    let count = orders_count();
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let name = format!("partner_api_filters_{}", std::process::id());
    let (mut connection, url) = common::scratch_database(&admin, &name).await;
    let store = PgStore::connect_lazy(&url).expect("url");
    store.migrate().await.expect("migrate");
    store
        .add_organization(&Organization {
            id: "org_big".into(),
            name: "Big".into(),
        })
        .await
        .expect("organization");
    let orders: Vec<Order> = (0..count).map(order).collect();
    for chunk in orders.chunks(5_000) {
        store.add_orders("org_big", chunk).await.expect("orders");
    }
    // As autovacuum leaves a table: statistics, and the providers' index with no pending list.
    sqlx::query("VACUUM ANALYZE partner_orders")
        .execute(store.pool())
        .await
        .expect("analyze");

    // Deep: the page after the middle order.
    let middle = OrderPosition::of(&orders[count / 2]);
    let deep = |filter: OrderFilter| OrderQuery::after(middle.clone(), 100).with_filter(filter);
    let cases = [
        ("unfiltered", deep(OrderFilter::default())),
        (
            "status (a quarter)",
            deep(OrderFilter::default().with_statuses(["running"])),
        ),
        (
            "status (1 in 100)",
            deep(OrderFilter::default().with_statuses(["cancelled"])),
        ),
        (
            "two statuses",
            deep(OrderFilter::default().with_statuses(["running", "paused"])),
        ),
        (
            "created range",
            deep(
                OrderFilter::default()
                    .with_created_since(at(count / 10))
                    .with_created_before(at(count * 9 / 10)),
            ),
        ),
        (
            "provider (1 in 10), a key's",
            deep(OrderFilter::default().with_key_providers(&["p3".into()])),
        ),
        (
            "provider (1 in 10), a filter's",
            deep(OrderFilter::default().with_providers(["p3"])),
        ),
        (
            "provider (1 in 1,000), a key's",
            deep(OrderFilter::default().with_key_providers(&["rare".into()])),
        ),
        (
            "provider (1 in 1,000), a filter's",
            deep(OrderFilter::default().with_providers(["rare"])),
        ),
        (
            "updated since (1 in 10)",
            deep(OrderFilter::default().with_updated_since(changed_at(0))),
        ),
        (
            "updated range (1 in 1,000)",
            deep(
                OrderFilter::default()
                    .with_updated_since(changed_at(0))
                    .with_updated_before(changed_at(count / 100)),
            ),
        ),
        (
            "all four",
            deep(
                OrderFilter::default()
                    .with_statuses(["running", "paused"])
                    .with_providers(["p3", "p5"])
                    .with_created_since(at(count / 10))
                    .with_created_before(at(count * 9 / 10)),
            ),
        ),
    ];
    println!("{count} orders in one organization, a page of 100 after the middle one, {rounds} calls each");
    println!("| page | orders | median | p90 | of unfiltered (median) |");
    println!("|---|---|---|---|---|");
    print_rounds(&store, &cases, rounds).await;
    // The common provider's page again, with an index of its own, beside the unfiltered page.
    let index = store.provider_index(&["p3"]).expect("an index");
    sqlx::query(index.statement().trim_end_matches(';'))
        .execute(store.pool())
        .await
        .expect("the provider's index");
    sqlx::query("VACUUM ANALYZE partner_orders")
        .execute(store.pool())
        .await
        .expect("analyze");
    let with_own_index = [
        ("unfiltered (again)", deep(OrderFilter::default())),
        (
            "provider (1 in 10), a key's, its own index",
            deep(OrderFilter::default().with_key_providers(&["p3".into()])),
        ),
        (
            "provider (1 in 10), a filter's, its own index",
            deep(OrderFilter::default().with_providers(["p3"])),
        ),
    ];
    print_rounds(&store, &with_own_index, rounds).await;
    store.pool().close().await;
    connection
        .execute(format!("DROP DATABASE {name}").as_str())
        .await
        .expect("drop database");
}

/// Times `rounds` calls of each case, the cases in turn within each round (so a change of the
/// machine's speed during the run weighs on every case alike), and prints a row each: the
/// median and p90, and the median's ratio to the first case's.
async fn print_rounds(store: &PgStore, cases: &[(&str, OrderQuery)], rounds: usize) {
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); cases.len()];
    let mut sizes = Vec::with_capacity(cases.len());
    // Warm: the statements prepared, the pages in the buffer cache.
    for (_, query) in cases {
        sizes.push(store.orders("org_big", query).await.expect("page").len());
    }
    for _ in 0..rounds {
        for ((_, query), times) in cases.iter().zip(&mut times) {
            let started = Instant::now();
            store.orders("org_big", query).await.expect("page");
            times.push(started.elapsed());
        }
    }
    let mut base = None;
    for (((what, _), times), size) in cases.iter().zip(&mut times).zip(sizes) {
        times.sort();
        let median = times[rounds / 2];
        let p90 = times[rounds * 9 / 10];
        let base = *base.get_or_insert(median);
        println!(
            "| {what} | {size} | {:.2} ms | {:.2} ms | {:.2} |",
            median.as_secs_f64() * 1e3,
            p90.as_secs_f64() * 1e3,
            median.as_secs_f64() / base.as_secs_f64()
        );
    }
}
