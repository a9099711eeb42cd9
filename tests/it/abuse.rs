//! Sustained abuse of webhook delivery (#43's reproduction 5): two organizations whose every
//! endpoint accepts TCP and never answers, kept busy at the rates the management API allows
//! (test events and recoveries) and by a stream of order changes, on two replicas of the
//! standalone host delivering from PostgreSQL. A third organization's test event must arrive
//! within 5 s, every time, for as long as the abuse goes on (two minutes; set
//! `PARTNER_API_ABUSE_SECONDS` for a longer run).
#![cfg(all(feature = "postgres", feature = "webhooks"))]

use std::time::{Duration, Instant};

use http::{Method, Request, StatusCode};
use partner_api::management::{ActingOrganization, KeyManagementService};
use partner_api::webhooks::{NewEndpoint, WebhookManager};
use partner_api::{Organization, PgStore};
use tower::ServiceExt;

use crate::common::pg::fresh_database;
use crate::common::receiver::{Receiver, Reply};
use crate::common::Process;

/// The bound the issue sets on a healthy organization's event.
const BOUND: Duration = Duration::from_secs(5);
const ABUSERS: [&str; 2] = ["org_abuse_1", "org_abuse_2"];
/// Endpoints per abusing organization: short of the policy's cap of 20, as reproduced.
const HANGING_ENDPOINTS: usize = 16;

/// `POST path` as a signed-in admin of `organization`: its status.
async fn post(
    service: &KeyManagementService,
    organization: &str,
    path: &str,
    body: &str,
) -> StatusCode {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(path)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .unwrap();
    request
        .extensions_mut()
        .insert(ActingOrganization::new(organization).with_actor("abuser"));
    service.clone().oneshot(request).await.unwrap().status()
}

fn replica(url: &str) -> Process {
    Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        url,
        "--no-migrate",
        "--webhook-allow-http",
        "--webhook-allow-subnet",
        "127.0.0.0/8",
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_organizations_event_arrives_within_5_s_through_two_organizations_abuse() {
    crate::common::needs::needs!(Postgres, Examples);
    let seconds: u64 = std::env::var("PARTNER_API_ABUSE_SECONDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(120);
    let url = fresh_database().await;
    let store = PgStore::connect_lazy(&url).unwrap();
    store.migrate().await.unwrap();
    for id in ABUSERS.iter().chain(&["org_healthy"]) {
        store
            .add_organization(&Organization {
                id: (*id).into(),
                name: (*id).into(),
            })
            .await
            .unwrap();
    }
    let hanging = Receiver::start(|_, _| Reply::Hang).await;
    let healthy = Receiver::ok().await;
    let mut abused = Vec::new();
    for abuser in ABUSERS {
        for n in 0..HANGING_ENDPOINTS {
            let endpoint = store
                .add_endpoint(
                    abuser,
                    NewEndpoint::new(hanging.url(&format!("/{abuser}/{n}"))),
                )
                .await
                .unwrap();
            abused.push((abuser, endpoint.record.id));
        }
    }
    let fine = store
        .add_endpoint("org_healthy", NewEndpoint::new(healthy.url("/")))
        .await
        .unwrap()
        .record
        .id;
    let mut replicas = [replica(&url), replica(&url)];
    for host in &mut replicas {
        host.address().await;
    }

    let until = Instant::now() + Duration::from_secs(seconds);
    // The abusers, as fast as the management API lets them: a test event or a recovery of
    // every failed message whenever their budget allows (a burst of 10, then one every 6 s).
    let service = KeyManagementService::new(store.clone()).with_webhooks(store.clone());
    let actions = tokio::spawn({
        let (service, abused) = (service.clone(), abused.clone());
        async move {
            let (mut sent, mut n) = (0_u64, 0_usize);
            while Instant::now() < until {
                let (abuser, id) = &abused[n % abused.len()];
                let (path, body) = if n % 2 == 0 {
                    (format!("/webhooks/{id}/test"), "{}")
                } else {
                    (
                        format!("/webhooks/{id}/recover"),
                        r#"{"since":"2020-01-01T00:00:00Z"}"#,
                    )
                };
                match post(&service, abuser, &path, body).await {
                    StatusCode::ACCEPTED => sent += 1,
                    StatusCode::TOO_MANY_REQUESTS => {}
                    status => panic!("{path}: {status}"),
                }
                n += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            sent
        }
    });
    // Twenty order changes per abusing organization every 3 s, each an event to all of its
    // hanging endpoints.
    let orders = tokio::spawn({
        let pool = store.pool().clone();
        async move {
            let mut round = 0;
            while Instant::now() < until {
                for abuser in ABUSERS {
                    for n in 0..20 {
                        sqlx::query(
                            "INSERT INTO partner_orders VALUES ($1, $2, ARRAY['meta'], 'A', 'C', 1, \
                             '2026-03-01', '2026-04-30', 'booked', 'PO', now())",
                        )
                        .bind(abuser)
                        .bind(format!("ord_{abuser}_{round}_{n}"))
                        .execute(&pool)
                        .await
                        .unwrap();
                    }
                }
                round += 1;
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
        }
    });

    // The healthy organization's test event every 6 s (its own allowed rate): each must
    // arrive within the bound.
    let mut delays = Vec::new();
    while Instant::now() < until {
        let sent = Instant::now();
        store.send_test("org_healthy", &fine).await.unwrap();
        healthy
            .wait_for(delays.len() + 1, BOUND + Duration::from_secs(20))
            .await;
        let delay = sent.elapsed();
        delays.push(delay);
        tokio::time::sleep(Duration::from_secs(6).saturating_sub(delay)).await;
    }
    let sent = actions.await.unwrap();
    orders.await.unwrap();
    let slowest = delays.iter().max().copied().unwrap_or_default();
    println!(
        "abuse for {seconds} s: {sent} test events and recoveries taken from the abusers, \
         {} healthy events, the slowest in {slowest:?}",
        delays.len()
    );
    assert!(sent >= 20, "the abusers took only {sent} actions: no abuse");
    assert!(
        hanging.received().len() >= 32,
        "the hanging endpoints were not kept busy: {} requests",
        hanging.received().len()
    );
    assert!(
        slowest < BOUND,
        "a healthy organization's event waited {slowest:?} (all: {delays:?})"
    );
    for host in replicas {
        assert!(host.terminate().await.success());
    }
}
