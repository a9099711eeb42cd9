//! The orders' caches under concurrent writers, in both modes of the order writes: writers
//! bump the budgets of a few orders on the first page (each commit a new version, its
//! instant recorded once it returned) while askers on two replicas, each with caches that
//! follow the database, read the first page; the checker then proves that no answer asked
//! for more than the bound after a commit showed an order older than that commit. In the
//! capture mode the events come from the log, read by one replica's reader, which is killed
//! a third into the run and started again on the other replica (the lease taken over), so the
//! caches wait for it (`docs::replicas`).
#![cfg(feature = "postgres")]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use partner_api::cache::{CachingKeyStore, CachingOrderStore};
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::{PartnerApi, PgStore};
use sqlx::postgres::PgPoolOptions;

use crate::common::pg::{fresh_database, until_answering};
use crate::common::{call, get};

/// The caches' promise: a committed change is answered within this.
const BOUND: Duration = Duration::from_secs(1);
/// The orders the writers change: the newest of the demo organization, so on the first page.
const HOT: [&str; 4] = ["hot_0", "hot_1", "hot_2", "hot_3"];

/// Each hot order's committed versions: (the instant its commit returned, the version).
type Commits = HashMap<&'static str, Vec<(Instant, i64)>>;

/// One answer: when it was asked for, and each hot order's version in it.
struct Answer {
    asked: Instant,
    versions: HashMap<String, i64>,
}

/// Every answer asked for more than [`BOUND`] after a commit shows that commit's version of
/// the order, or a later one.
fn check(commits: &Commits, answers: &[Answer]) -> Result<(), String> {
    for answer in answers {
        for (order, versions) in commits {
            let due = versions
                .iter()
                .filter(|(committed, _)| answer.asked.saturating_duration_since(*committed) > BOUND)
                .map(|(_, version)| *version)
                .max();
            let Some(due) = due else { continue };
            let seen = answer.versions.get(*order).copied().unwrap_or(-1);
            if seen < due {
                return Err(format!(
                    "{order}: version {seen} answered, though version {due} committed more than {BOUND:?} before"
                ));
            }
        }
    }
    Ok(())
}

async fn history(capture: bool) {
    let url = fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
    let pool = PgPoolOptions::new()
        .max_connections(6)
        .connect(&url)
        .await
        .unwrap();
    for order in HOT {
        sqlx::query(
            "INSERT INTO partner_orders VALUES ('org_demo', $1, ARRAY['meta'], 'A', 'C', 0, \
             '2026-03-01', '2026-04-30', 'booked', 'PO', '2031-01-01T00:00:00Z')",
        )
        .bind(order)
        .execute(&pool)
        .await
        .unwrap();
    }
    let replicas: Vec<(PgStore, PartnerApi)> = {
        let mut replicas = Vec::new();
        for _ in 0..2 {
            let replica = PgStore::connect_lazy(&url).unwrap();
            let notifications = partner_api::cache::postgres::listen(replica.pool().clone());
            let keys = CachingKeyStore::new(replica.clone()).with_notifications(&notifications);
            let orders = CachingOrderStore::new(replica.clone()).with_notifications(&notifications);
            until_answering(&notifications).await;
            replicas.push((replica, PartnerApi::new(keys, orders)));
        }
        replicas
    };
    let reader = |replica: &PgStore, name: &str| {
        tokio::spawn(
            replica
                .order_capture()
                .with_holder(name)
                .with_lease(Duration::from_secs(1))
                .run(),
        )
    };
    let mut capture_reader = None;
    if capture {
        store.start_order_capture().await.unwrap();
        capture_reader = Some(reader(&replicas[0].0, "replica-0"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let commits: Arc<Mutex<Commits>> = Arc::default();
    let writers: Vec<_> = HOT
        .iter()
        .map(|&order| {
            let (pool, stop, commits) = (pool.clone(), stop.clone(), commits.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let version: i64 = sqlx::query_scalar(
                        "UPDATE partner_orders SET budget_dkk = budget_dkk + 1 WHERE id = $1 \
                         RETURNING budget_dkk",
                    )
                    .bind(order)
                    .fetch_one(&pool)
                    .await
                    .unwrap();
                    let committed = Instant::now();
                    commits
                        .lock()
                        .unwrap()
                        .entry(order)
                        .or_default()
                        .push((committed, version));
                    tokio::time::sleep(Duration::from_millis(40)).await;
                }
            })
        })
        .collect();
    let askers: Vec<_> = replicas
        .iter()
        .map(|(_, api)| {
            let (api, stop) = (api.clone(), stop.clone());
            tokio::spawn(async move {
                let mut answers = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    let page = call(&api, get("/v1/orders?limit=10", Some(DEMO_KEY))).await;
                    let versions = page.json()["data"]["orders"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|order| {
                            (
                                order["id"].as_str().unwrap().to_owned(),
                                order["budgetDkk"].as_i64().unwrap(),
                            )
                        })
                        .collect();
                    answers.push(Answer { asked, versions });
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                answers
            })
        })
        .collect();
    let run = Duration::from_secs(4);
    if let Some(first) = capture_reader.take() {
        tokio::time::sleep(run / 3).await;
        first.abort();
        capture_reader = Some(reader(&replicas[1].0, "replica-1"));
        tokio::time::sleep(run * 2 / 3).await;
    } else {
        tokio::time::sleep(run).await;
    }
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    let mut answers = Vec::new();
    for asker in askers {
        answers.extend(asker.await.unwrap());
    }
    let commits = commits.lock().unwrap().clone();
    let versions: usize = commits.values().map(Vec::len).sum();
    assert!(
        versions > 40,
        "the writers committed only {versions} versions"
    );
    assert!(answers.len() > 100, "only {} answers", answers.len());
    check(&commits, &answers).unwrap();
    if let Some(reader) = capture_reader {
        reader.abort();
        store
            .stop_order_capture(Duration::from_secs(30))
            .await
            .unwrap();
    }
    eprintln!(
        "orders history (capture: {capture}): {versions} versions committed, {} answers checked",
        answers.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_answer_shows_an_order_older_than_a_change_committed_a_bound_before() {
    crate::common::needs::needs!(Postgres);
    history(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_the_capture_mode_with_its_reader_killed_no_answer_is_older_than_the_bound() {
    crate::common::needs::needs!(Postgres);
    history(true).await;
}

/// The checker finds a late answer: one that shows a version committed before an earlier
/// version's bound had passed.
#[test]
fn the_checker_finds_an_answer_older_than_the_bound() {
    let start = Instant::now();
    let commits: Commits = HashMap::from([("hot_0", vec![(start, 1), (start + BOUND, 2)])]);
    let late = Answer {
        asked: start + BOUND * 2 + Duration::from_millis(1),
        versions: HashMap::from([("hot_0".to_owned(), 1)]),
    };
    let in_time = Answer {
        asked: start + BOUND + Duration::from_millis(500),
        versions: HashMap::from([("hot_0".to_owned(), 1)]),
    };
    assert!(check(&commits, &[in_time]).is_ok());
    let verdict = check(&commits, &[late]);
    assert!(verdict.is_err_and(|why| why.contains("version 1 answered")));
}
