//! Webhook delivery on a real PostgreSQL, two delivery workers (as two replicas, each with its
//! own pool) and a receiver on loopback:
//!
//! - the time from an order's commit to its delivery, over TRIALS (default 200) single orders
//!   written by plain SQL at scattered moments of the workers' poll: median and p99 (goal: median under 0.5 s);
//! - EVENTS (default 10,000) orders written in one statement, delivered to one endpoint:
//!   how long until all arrived (goal: within 60 s), none lost, none twice.
//!
//! `PARTNER_API_TEST_DATABASE_URL=postgres://... cargo bench --features postgres,webhooks
//! --bench webhook_delivery`. It exits non-zero when a goal is missed.

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use partner_api::webhooks::{
    DeliveryConfig, DestinationPolicy, Dispatcher, NewEndpoint, WebhookManager,
};
use partner_api::Organization;
use partner_api::PgStore;
use sqlx::Executor;

/// Every delivery: its webhook-id, the order's id, and when it arrived.
type Arrivals = Arc<Mutex<Vec<(String, String, Instant)>>>;

async fn receiver() -> (String, Arrivals) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hooks", listener.local_addr().expect("address"));
    let arrivals: Arrivals = Arc::default();
    let recorded = Arc::clone(&arrivals);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let recorded = Arc::clone(&recorded);
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
                        let recorded = Arc::clone(&recorded);
                        async move {
                            let id = request
                                .headers()
                                .get("webhook-id")
                                .and_then(|value| value.to_str().ok())
                                .unwrap_or_default()
                                .to_owned();
                            let body = request
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let json: serde_json::Value =
                                serde_json::from_slice(&body).unwrap_or_default();
                            let order = json["data"]["id"].as_str().unwrap_or_default().to_owned();
                            recorded
                                .lock()
                                .expect("lock")
                                .push((id, order, Instant::now()));
                            Ok::<_, Infallible>(hyper::Response::new(Full::new(Bytes::new())))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, arrivals)
}

fn arrival_of(arrivals: &Arrivals, order: &str) -> Option<Instant> {
    arrivals
        .lock()
        .expect("lock")
        .iter()
        .find(|(_, id, _)| id == order)
        .map(|(_, _, at)| *at)
}

#[tokio::main]
async fn main() {
    let Ok(admin) = std::env::var("PARTNER_API_TEST_DATABASE_URL") else {
        eprintln!("webhook_delivery: set PARTNER_API_TEST_DATABASE_URL");
        return;
    };
    let number = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(default)
    };
    let trials = number("TRIALS", 200);
    let events = number("EVENTS", 10_000);
    let name = format!("partner_api_webhooks_{}", std::process::id());
    let (mut connection, url) = common::scratch_database(&admin, &name).await;
    let writer = PgStore::connect_lazy(&url).expect("url");
    writer.migrate().await.expect("migrate");
    writer
        .add_organization(&Organization {
            id: "org".into(),
            name: "Org".into(),
        })
        .await
        .expect("organization");
    let (endpoint_url, arrivals) = receiver().await;
    writer
        .add_endpoint("org", NewEndpoint::new(endpoint_url))
        .await
        .expect("endpoint");
    let config = DeliveryConfig::new().with_destinations(
        DestinationPolicy::new()
            .with_allow_http(true)
            .with_allowed_subnet("127.0.0.0/8".parse().expect("cidr")),
    );
    for _ in 0..2 {
        let replica = PgStore::connect_lazy(&url).expect("url");
        tokio::spawn(Dispatcher::new(replica, config.clone()).run(std::future::pending()));
    }
    const INSERT: &str =
        "INSERT INTO partner_orders VALUES ('org', $1, ARRAY['meta'], 'A', 'C', 1, \
                          '2026-03-01', '2026-04-30', 'booked', 'PO', now())";

    // Commit to delivery, one order at a time.
    let mut latencies = Vec::with_capacity(trials);
    for trial in 0..trials {
        let order = format!("latency-{trial}");
        sqlx::query(INSERT)
            .bind(&order)
            .execute(writer.pool())
            .await
            .expect("insert");
        let committed = Instant::now();
        let deadline = committed + Duration::from_secs(30);
        let arrived = loop {
            if let Some(at) = arrival_of(&arrivals, &order) {
                break at;
            }
            assert!(
                Instant::now() < deadline,
                "order {order} was not delivered within 30 s"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        latencies.push(arrived.saturating_duration_since(committed));
        // A pause that is no multiple of the poll interval, so commits fall anywhere in it.
        tokio::time::sleep(Duration::from_millis(
            u64::try_from(trial * 37 % 200).unwrap_or(0),
        ))
        .await;
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let p99 = latencies[(latencies.len() * 99 / 100).min(latencies.len() - 1)];
    println!(
        "commit to delivery, {trials} orders, two workers polling every 200 ms: median {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        median.as_secs_f64() * 1000.0,
        p99.as_secs_f64() * 1000.0,
        latencies[latencies.len() - 1].as_secs_f64() * 1000.0
    );

    // Many events at once to one endpoint.
    let before = arrivals.lock().expect("lock").len();
    let started = Instant::now();
    sqlx::query(
        "INSERT INTO partner_orders SELECT 'org', 'bulk-' || n, ARRAY['meta'], 'A', 'C', 1, \
         '2026-03-01', '2026-04-30', 'booked', 'PO', now() FROM generate_series(1, $1) n",
    )
    .bind(i64::try_from(events).expect("events"))
    .execute(writer.pool())
    .await
    .expect("bulk insert");
    let written = started.elapsed();
    let deadline = Instant::now() + Duration::from_secs(120);
    while arrivals.lock().expect("lock").len() < before + events && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let received = arrivals.lock().expect("lock")[before..].to_vec();
    let mut per_id: HashMap<&str, usize> = HashMap::new();
    for (id, _, _) in &received {
        *per_id.entry(id.as_str()).or_default() += 1;
    }
    let duplicates = received.len() - per_id.len();
    println!(
        "{events} events to one endpoint: written in {:.1} s, all delivered {:.1} s after the write began \
         ({:.0} per second); {} received, {} distinct, {duplicates} duplicates",
        written.as_secs_f64(),
        took.as_secs_f64(),
        events as f64 / took.as_secs_f64(),
        received.len(),
        per_id.len()
    );
    let mut failed = false;
    if median > Duration::from_millis(500) {
        eprintln!("FAILED: the median commit-to-delivery time is over 0.5 s");
        failed = true;
    }
    if per_id.len() != events || duplicates != 0 || took > Duration::from_secs(60) {
        eprintln!("FAILED: {events} events were not all delivered once within 60 s");
        failed = true;
    }
    drop(writer);
    let _ = connection
        .execute(format!("DROP DATABASE {name} WITH (FORCE)").as_str())
        .await;
    if failed {
        std::process::exit(1);
    }
}
