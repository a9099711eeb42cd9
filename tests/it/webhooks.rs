//! Webhooks end to end: real receivers on loopback, the delivery worker, the memory store and
//! PostgreSQL (the trigger, several workers, a worker killed half-way).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crate::common::receiver::{Receiver, Reply};
use crate::common::*;
use partner_api::store::{AuditContext, AuditLog, AuditQuery, DELIVERY_ACTOR};
use partner_api::webhooks::{
    verify, AttemptOutcome, DeliveryConfig, DestinationPolicy, DisableReason, Dispatcher,
    EventType, NewEndpoint, WebhookManager, WebhookSecret,
};
use partner_api::{EncodedOrder, MemoryStore, PartnerApi};

/// A worker for tests: receivers on loopback over plain http, a fast poll.
fn config() -> DeliveryConfig {
    DeliveryConfig::new()
        .with_destinations(
            DestinationPolicy::new()
                .with_allow_http(true)
                .with_allowed_subnet("127.0.0.0/8".parse().unwrap()),
        )
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_schedule(vec![Duration::from_millis(100); 3])
}

/// Runs a worker until the returned sender is dropped or sent to.
fn start(
    dispatcher: Dispatcher,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(dispatcher.run(async move {
        let _ = stopped.await;
    }));
    (stop, task)
}

fn checked(received: &crate::common::receiver::Received, secrets: &[WebhookSecret]) {
    let id = verify(
        secrets,
        &received.headers,
        &received.body,
        SystemTime::now(),
    )
    .expect("the crate's verifier accepts the delivery");
    assert!(id.starts_with("msg_"));
    assert_eq!(received.header("content-type"), "application/json");
    assert!(
        received.header("user-agent")
            == concat!("partner-api/", env!("CARGO_PKG_VERSION"), " (webhooks)")
    );
}

#[tokio::test]
async fn the_memory_store_conforms() {
    let store = MemoryStore::new();
    let report = partner_api::testing::run_webhooks(&store).await;
    report.assert_passed();
    assert_eq!(report.len(), 11);
    partner_api::testing::run_webhook_audit_log(&store)
        .await
        .assert_passed();
}

#[tokio::test]
async fn each_event_type_arrives_signed_with_the_order_as_the_api_serves_it() {
    let receiver = Receiver::ok().await;
    let store = store();
    let endpoint = store
        .add_endpoint(
            "org_b",
            NewEndpoint::new(receiver.url("/hooks")).with_api_version(partner_api::versions::FIRST),
        )
        .await
        .unwrap();
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config()));

    let mut placed = order("b9", BASE_MILLIS + 60_000);
    store.add_order("org_b", placed.clone()).unwrap();
    placed.status = "running".into();
    store.update_order("org_b", placed.clone()).unwrap();
    let served = call(
        &PartnerApi::from_store(store.clone()),
        get("/v1/orders", Some(KEY_B)),
    )
    .await;
    store.remove_order("org_b", "b9");

    let received = receiver.wait_for(3, Duration::from_secs(10)).await;
    let types: Vec<String> = received
        .iter()
        .map(|r| r.json()["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(types, ["order.created", "order.updated", "order.deleted"]);
    for delivery in &received {
        checked(delivery, std::slice::from_ref(&endpoint.secret));
        let timestamp = delivery.json()["timestamp"].as_str().unwrap().to_owned();
        assert!(
            timestamp.ends_with('Z') && timestamp.len() == 24,
            "{timestamp}"
        );
    }
    // The updated order's bytes are exactly those GET /v1/orders served.
    // Both at the first version: the key's (it records none) and the endpoint's.
    let updated = EncodedOrder::new(placed).unwrap();
    let order_bytes =
        String::from_utf8_lossy(&crate::common::at_first_version(updated.json())).into_owned();
    assert!(String::from_utf8_lossy(&served.body).contains(&order_bytes));
    assert!(
        String::from_utf8_lossy(&received[1].body).ends_with(&format!(",\"data\":{order_bytes}}}"))
    );
    assert_eq!(received[2].json()["data"], serde_json::json!({"id": "b9"}));
    // Every message has its own id.
    let mut ids: Vec<&str> = received.iter().map(|r| r.header("webhook-id")).collect();
    ids.dedup();
    assert_eq!(ids.len(), 3);

    // A receiver hears a delivery before the worker records it.
    let attempts = recorded(&store, "org_b", &endpoint.record.id, 3).await;
    assert_eq!(attempts.len(), 3);
    assert!(attempts
        .iter()
        .all(|a| a.outcome == AttemptOutcome::Succeeded && a.response_status == Some(204)));
    assert_eq!(attempts[0].event_type, EventType::OrderDeleted);
}

async fn failures_are_retried_under_one_id_and_410_disables_at_once(store: impl Outbox) {
    // 500, then a redirect, then 200: three tries, one webhook-id.
    let flaky = Receiver::start(|nth, _| match nth {
        0 => Reply::Status(500),
        1 => Reply::StatusWith(302, "location", "http://127.0.0.1:9/".into()),
        _ => Reply::Status(200),
    })
    .await;
    let gone = Receiver::start(|_, _| Reply::Status(410)).await;
    let retried = store
        .add_endpoint(
            "org_a",
            NewEndpoint::new(flaky.url("/")).with_events([EventType::WebhookTest]),
        )
        .await
        .unwrap();
    let ended = store
        .add_endpoint("org_a", NewEndpoint::new(gone.url("/")))
        .await
        .unwrap();
    let disabled = Arc::new(Mutex::new(Vec::new()));
    let hook = {
        let disabled = Arc::clone(&disabled);
        move |event: &partner_api::webhooks::DisabledEndpoint| {
            disabled
                .lock()
                .unwrap()
                .push((event.endpoint.id.clone(), event.reason));
        }
    };
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config()).with_on_disabled(hook));
    store.send_test("org_a", &retried.record.id).await.unwrap();
    store.send_test("org_a", &ended.record.id).await.unwrap();

    let received = flaky.wait_for(3, Duration::from_secs(10)).await;
    let ids: Vec<&str> = received.iter().map(|r| r.header("webhook-id")).collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    assert_eq!(
        flaky.connections.load(Ordering::SeqCst),
        1,
        "the client reuses its connection"
    );
    gone.wait_for(1, Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gone.received().len(), 1, "a 410 was retried");
    assert_eq!(
        *disabled.lock().unwrap(),
        [(ended.record.id.clone(), DisableReason::Gone)]
    );
    assert!(
        !store
            .endpoint("org_a", &ended.record.id)
            .await
            .unwrap()
            .enabled
    );
    // Its audit entry: disabled by delivery, for the 410, whatever context delivery ran in.
    let delivery = disabled_by_delivery("gone");
    assert_eq!(
        audit_of(&store, "org_a", &ended.record.id).await[0],
        delivery
    );
    // An admin's disabling is the admin's entry alone: none of delivery's beside it.
    let admin = || AuditContext::new("admin@org_a");
    admin()
        .scope(store.set_enabled("org_a", &ended.record.id, true))
        .await
        .unwrap();
    admin()
        .scope(store.set_enabled("org_a", &ended.record.id, false))
        .await
        .unwrap();
    let entry = |action: &str| (action.to_owned(), "admin@org_a".to_owned(), None);
    let audited = audit_of(&store, "org_a", &ended.record.id).await;
    assert_eq!(
        audited[..3],
        [
            entry("webhook.disabled"),
            entry("webhook.enabled"),
            delivery
        ],
        "{audited:?}"
    );
    // And nothing else: its test, its creation.
    let rest: Vec<&str> = audited[3..]
        .iter()
        .map(|(action, ..)| action.as_str())
        .collect();
    assert_eq!(rest, ["webhook.test_sent", "webhook.added"], "{audited:?}");

    let attempts = recorded(&store, "org_a", &retried.record.id, 3).await;
    let summary: Vec<(u32, AttemptOutcome, Option<u16>)> = attempts
        .iter()
        .map(|a| (a.attempt, a.outcome, a.response_status))
        .collect();
    assert_eq!(
        summary,
        [
            (3, AttemptOutcome::Succeeded, Some(200)),
            (2, AttemptOutcome::Failed, Some(302)),
            (1, AttemptOutcome::Failed, Some(500)),
        ]
    );
    assert_eq!(
        attempts[1].error.as_deref(),
        Some("redirects are not followed")
    );
    assert_eq!(attempts[2].response_body.as_deref(), Some("thanks"));
}

async fn a_destination_resolving_to_a_blocked_address_gets_no_connection(store: impl Outbox) {
    let receiver = Receiver::ok().await;
    // `localhost` resolves to loopback, which the default policy blocks; so is the literal.
    let by_name = store
        .add_endpoint(
            "org_a",
            NewEndpoint::new(format!("http://localhost:{}/", receiver.address.port())),
        )
        .await
        .unwrap();
    let by_address = store
        .add_endpoint("org_a", NewEndpoint::new(receiver.url("/")))
        .await
        .unwrap();
    // A name that does not resolve (`.invalid` never does) fails alike: an admin cannot tell
    // an internal name from a missing one by the attempts.
    let unresolvable = store
        .add_endpoint(
            "org_a",
            NewEndpoint::new("http://no-such-host.invalid/".to_owned()),
        )
        .await
        .unwrap();
    let config = config()
        .with_destinations(DestinationPolicy::new().with_allow_http(true))
        .with_retry_schedule(vec![]);
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config));
    for endpoint in [&by_name, &by_address, &unresolvable] {
        store.send_test("org_a", &endpoint.record.id).await.unwrap();
    }
    let same_cause = "the name does not resolve to an address deliveries may reach";
    for (endpoint, why) in [
        (&by_name, same_cause),
        (&unresolvable, same_cause),
        (&by_address, "127.0.0.1 is in the blocked range 127.0.0.0/8"),
    ] {
        let attempts = eventually(|| async {
            let attempts = store
                .attempts("org_a", &endpoint.record.id, 10)
                .await
                .unwrap();
            (!attempts.is_empty()).then_some(attempts)
        })
        .await;
        let error = attempts[0].error.clone().unwrap_or_default();
        if why == same_cause {
            assert_eq!(error, why, "the attempt told more than its cause");
        } else {
            assert!(error.contains(why), "{error}");
        }
        assert_eq!(attempts[0].outcome, AttemptOutcome::Failed);
    }
    assert_eq!(receiver.connections.load(Ordering::SeqCst), 0);
    // And https only, by default.
    let https_only = DestinationPolicy::new();
    assert!(https_only
        .check_url(&"http://example.com/".parse().unwrap())
        .is_err());
}

/// A destination on loopback that answers each connection as `answer` says, on a raw socket.
async fn raw_destination(answer: fn(tokio::net::TcpStream)) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            answer(socket);
        }
    });
    address
}

/// Reads the request's head, then writes `answer` and keeps the connection open a while.
fn answer_with(mut socket: tokio::net::TcpStream, answer: Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    tokio::spawn(async move {
        let mut buffer = [0_u8; 4096];
        let _ = socket.read(&mut buffer).await;
        let _ = socket.write_all(&answer).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
}

/// Every failure without a readable answer is recorded as one of a fixed set of causes, never
/// the transport's text: refused, timed out, TLS, a head over the limit, a connection closed.
#[tokio::test]
async fn each_failure_without_an_answer_is_one_of_a_fixed_set_of_causes() {
    let store = store();
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let hanging = raw_destination(|socket| {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop(socket);
        });
    })
    .await;
    let plain_http = raw_destination(|socket| {
        answer_with(
            socket,
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n".to_vec(),
        )
    })
    .await;
    // Over the client's limits both ways: by size (ten headers of 64 KiB) and by count.
    let huge_head = raw_destination(|socket| {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for n in 0..10 {
            head.extend_from_slice(format!("x-padding-{n}: ").as_bytes());
            head.extend_from_slice(&[b'a'; 64 * 1024]);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"content-length: 0\r\n\r\n");
        answer_with(socket, head)
    })
    .await;
    let many_headers = raw_destination(|socket| {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for n in 0..150 {
            head.extend_from_slice(format!("x-padding-{n}: a\r\n").as_bytes());
        }
        head.extend_from_slice(b"content-length: 0\r\n\r\n");
        answer_with(socket, head)
    })
    .await;
    let closing = raw_destination(drop).await;
    let cases = [
        (format!("http://{closed}/"), "connection refused"),
        (format!("http://{hanging}/"), "timed out after 3000 ms"),
        (format!("https://{plain_http}/"), "TLS handshake failed"),
        (
            format!("http://{huge_head}/"),
            "the answer's head was too large",
        ),
        (
            format!("http://{many_headers}/"),
            "the answer's head was too large",
        ),
        (
            format!("http://{closing}/"),
            "the connection failed before an answer",
        ),
    ];
    let mut endpoints = Vec::new();
    for (url, cause) in &cases {
        let endpoint = store
            .add_endpoint("org_a", NewEndpoint::new(url.clone()))
            .await
            .unwrap();
        endpoints.push((endpoint.record.id, url.clone(), *cause));
    }
    // A time-out no answer on loopback comes near, even on a loaded machine.
    let config = config()
        .with_timeout(Duration::from_secs(3))
        .with_retry_schedule(vec![]);
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config));
    for (id, _, _) in &endpoints {
        store.send_test("org_a", id).await.unwrap();
    }
    for (id, url, cause) in &endpoints {
        let attempts = recorded(&store, "org_a", id, 1).await;
        assert_eq!(attempts[0].outcome, AttemptOutcome::Failed, "{url}");
        assert_eq!(attempts[0].error.as_deref(), Some(*cause), "{url}");
        assert_eq!(attempts[0].response_status, None, "{url}");
    }
}

#[tokio::test]
async fn a_2xx_counts_when_its_status_arrives_and_odd_bodies_are_kept_printable() {
    let slow_body = Receiver::start(|_, _| Reply::StatusThenHang(200)).await;
    let odd_body = Receiver::start(|_, _| Reply::StatusBody(200, b"ok\0\xff")).await;
    let store = store();
    let slow = store
        .add_endpoint("org_a", NewEndpoint::new(slow_body.url("/")))
        .await
        .unwrap();
    let odd = store
        .add_endpoint("org_b", NewEndpoint::new(odd_body.url("/")))
        .await
        .unwrap();
    let config = config().with_timeout(Duration::from_millis(500));
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config));
    store.send_test("org_a", &slow.record.id).await.unwrap();
    store.send_test("org_b", &odd.record.id).await.unwrap();
    for (org, endpoint) in [("org_a", &slow), ("org_b", &odd)] {
        let attempts = eventually(|| async {
            let attempts = store.attempts(org, &endpoint.record.id, 10).await.unwrap();
            (!attempts.is_empty()).then_some(attempts)
        })
        .await;
        assert_eq!(
            attempts[0].outcome,
            AttemptOutcome::Succeeded,
            "{attempts:?}"
        );
    }
    let attempts = store.attempts("org_b", &odd.record.id, 10).await.unwrap();
    assert_eq!(
        attempts[0].response_body.as_deref(),
        Some("ok\u{fffd}\u{fffd}")
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        slow_body.received().len(),
        1,
        "a 2xx with a slow body was sent again"
    );
}

async fn a_hanging_endpoint_does_not_delay_a_healthy_one(store: impl Outbox) {
    let hanging = Receiver::start(|_, _| Reply::Hang).await;
    let healthy = Receiver::ok().await;
    let stuck = store
        .add_endpoint("org_a", NewEndpoint::new(hanging.url("/")))
        .await
        .unwrap();
    let fine = store
        .add_endpoint("org_b", NewEndpoint::new(healthy.url("/")))
        .await
        .unwrap();
    let config = config()
        .with_timeout(Duration::from_secs(60))
        .with_concurrency(4, 2);
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config));
    for _ in 0..10 {
        store.send_test("org_a", &stuck.record.id).await.unwrap();
    }
    hanging.wait_for(2, Duration::from_secs(10)).await;
    for _ in 0..20 {
        store.send_test("org_b", &fine.record.id).await.unwrap();
    }
    // All twenty arrive while the hanging endpoint holds its two slots (its time-out is a
    // minute away).
    healthy.wait_for(20, Duration::from_secs(20)).await;
    assert_eq!(
        hanging.received().len(),
        2,
        "the hanging endpoint got more than its share"
    );
}

/// `org_a`'s endpoints, as many as its policy allows, on a receiver that accepts and never
/// answers, and one of `org_b` on a receiver that answers at once: the receivers and the
/// endpoints.
async fn hanging_beside_healthy(
    store: &impl WebhookManager,
) -> (
    Receiver,
    Vec<partner_api::webhooks::CreatedEndpoint>,
    Receiver,
    partner_api::webhooks::CreatedEndpoint,
) {
    let hanging = Receiver::start(|_, _| Reply::Hang).await;
    let healthy = Receiver::ok().await;
    let mut stuck = Vec::new();
    for n in 0..partner_api::store::DEFAULT_MAX_WEBHOOK_ENDPOINTS {
        let url = hanging.url(&format!("/{n}"));
        stuck.push(
            store
                .add_endpoint("org_a", NewEndpoint::new(url))
                .await
                .unwrap(),
        );
    }
    let fine = store
        .add_endpoint("org_b", NewEndpoint::new(healthy.url("/")))
        .await
        .unwrap();
    (hanging, stuck, healthy, fine)
}

/// Twenty endpoints of one organization (its policy's default cap) that accept and never
/// answer, with five events each, hold at most the organization's share of the slots (half,
/// by default): another organization's event is delivered at once, not after their time-out.
async fn hanging_endpoints_of_one_organization_do_not_delay_another(store: impl Outbox) {
    let (hanging, stuck, healthy, fine) = hanging_beside_healthy(&store).await;
    // The defaults' 32 slots, 16 per organization; the hanging ones time out in a minute.
    let config = config().with_timeout(Duration::from_secs(60));
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config));
    for endpoint in &stuck {
        for _ in 0..5 {
            store.send_test("org_a", &endpoint.record.id).await.unwrap();
        }
    }
    hanging.wait_for(16, Duration::from_secs(20)).await;
    let sent = std::time::Instant::now();
    store.send_test("org_b", &fine.record.id).await.unwrap();
    healthy.wait_for(1, Duration::from_secs(20)).await;
    let delay = sent.elapsed();
    assert!(
        delay < Duration::from_secs(1),
        "another organization's event waited {delay:?}"
    );
    assert_eq!(
        hanging.received().len(),
        16,
        "the hanging organization holds more than its share"
    );
}

/// The maintenance deletes what outlived the retention when it starts: the messages with
/// their attempts; a worker delivers and deletes nothing.
async fn the_maintenance_deletes_what_outlived_the_retention(store: impl Outbox) {
    let receiver = Receiver::ok().await;
    let endpoint = store
        .add_endpoint("org_a", NewEndpoint::new(receiver.url("/")))
        .await
        .unwrap();
    let id = &endpoint.record.id;
    store.send_test("org_a", id).await.unwrap();
    {
        let (_stop, _task) = start(Dispatcher::new(store.clone(), config()));
        recorded(&store, "org_a", id, 1).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(store.attempts("org_a", id, 10).await.unwrap().len(), 1);
    // Retention of 50 ms: the message is older than that when the maintenance starts.
    let maintenance = partner_api::maintenance::Maintenance::new()
        .with_webhook_retention(store.clone(), Duration::from_millis(50))
        .start()
        .unwrap();
    eventually(|| async {
        let attempts = store.attempts("org_a", id, 10).await.unwrap();
        attempts.is_empty().then_some(())
    })
    .await;
    assert!(maintenance.shutdown().await.is_ok());
}

#[tokio::test]
async fn the_maintenance_deletes_what_outlived_the_retention_in_memory() {
    the_maintenance_deletes_what_outlived_the_retention(store()).await;
}

#[tokio::test]
async fn hanging_endpoints_of_one_organization_do_not_delay_another_in_memory() {
    hanging_endpoints_of_one_organization_do_not_delay_another(store()).await;
}

#[tokio::test]
async fn retry_after_is_honoured_and_a_failing_endpoint_is_disabled_after_its_period() {
    // 429 with Retry-After: 1 against a 100 ms schedule: the retry waits the second.
    let throttled = Receiver::start(|nth, _| match nth {
        0 => Reply::StatusWith(429, "retry-after", "1".into()),
        _ => Reply::Status(200),
    })
    .await;
    let failing = Receiver::start(|_, _| Reply::Status(500)).await;
    let store = store();
    let slow = store
        .add_endpoint("org_a", NewEndpoint::new(throttled.url("/")))
        .await
        .unwrap();
    let broken = store
        .add_endpoint("org_b", NewEndpoint::new(failing.url("/")))
        .await
        .unwrap();
    let disabled = Arc::new(Mutex::new(Vec::new()));
    let hook = {
        let disabled = Arc::clone(&disabled);
        move |event: &partner_api::webhooks::DisabledEndpoint| {
            disabled
                .lock()
                .unwrap()
                .push((event.endpoint.id.clone(), event.reason));
        }
    };
    let config = config()
        .with_retry_schedule(vec![Duration::from_millis(100); 50])
        .with_disable_after(Duration::from_millis(600));
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config).with_on_disabled(hook));
    store.send_test("org_a", &slow.record.id).await.unwrap();
    store.send_test("org_b", &broken.record.id).await.unwrap();

    throttled.wait_for(2, Duration::from_secs(10)).await;
    let attempts = recorded(&store, "org_a", &slow.record.id, 2).await;
    let waited = attempts[0]
        .attempted_at
        .duration_since(attempts[1].attempted_at)
        .unwrap();
    assert!(
        waited >= Duration::from_millis(950),
        "the retry came after {waited:?}"
    );

    // Every attempt fails: disabled once its failures span 600 ms, and no attempt after.
    let reason = eventually(|| async { disabled.lock().unwrap().first().cloned() }).await;
    assert_eq!(reason, (broken.record.id.clone(), DisableReason::Failing));
    assert_eq!(
        audit_of(&store, "org_b", &broken.record.id).await[0],
        disabled_by_delivery("failing")
    );
    assert!(
        !store
            .endpoint("org_b", &broken.record.id)
            .await
            .unwrap()
            .enabled
    );
    let count = failing.received().len();
    assert!(
        (5..=12).contains(&count),
        "{count} attempts before the disable"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        failing.received().len(),
        count,
        "a disabled endpoint got more attempts"
    );
}

#[tokio::test]
async fn failures_are_retried_under_one_id_and_410_disables_at_once_in_memory() {
    failures_are_retried_under_one_id_and_410_disables_at_once(store()).await;
}

#[tokio::test]
async fn a_destination_resolving_to_a_blocked_address_gets_no_connection_in_memory() {
    a_destination_resolving_to_a_blocked_address_gets_no_connection(store()).await;
}

#[tokio::test]
async fn a_hanging_endpoint_does_not_delay_a_healthy_one_in_memory() {
    a_hanging_endpoint_does_not_delay_a_healthy_one(store()).await;
}

/// What the store-generic tests need of a store.
trait Outbox:
    WebhookManager + partner_api::webhooks::WebhookOutbox + AuditLog + Clone + 'static
{
}
impl<T: WebhookManager + partner_api::webhooks::WebhookOutbox + AuditLog + Clone + 'static> Outbox
    for T
{
}

/// The entry of an endpoint delivery disabled for `reason`, as [`audit_of`] gives it.
fn disabled_by_delivery(reason: &str) -> (String, String, Option<String>) {
    (
        "webhook.disabled".to_owned(),
        DELIVERY_ACTOR.to_owned(),
        Some(reason.to_owned()),
    )
}

/// The endpoint's audit entries, newest first, as (action, actor, detail).
async fn audit_of(
    store: &impl AuditLog,
    organization: &str,
    endpoint: &str,
) -> Vec<(String, String, Option<String>)> {
    let query = AuditQuery {
        limit: 100,
        target: Some(endpoint.to_owned()),
        ..AuditQuery::default()
    };
    let page = store.audit_entries(organization, &query).await.unwrap();
    page.entries
        .into_iter()
        .map(|entry| (entry.action.to_string(), entry.actor, entry.detail))
        .collect()
}

/// The endpoint's attempts, once at least `count` are recorded.
async fn recorded(
    store: &impl WebhookManager,
    organization: &str,
    endpoint: &str,
    count: usize,
) -> Vec<partner_api::webhooks::Attempt> {
    eventually(|| async {
        let attempts = store.attempts(organization, endpoint, 10).await.unwrap();
        (attempts.len() >= count).then_some(attempts)
    })
    .await
}

/// Polls `check` until it gives a value (panics after 10 s).
async fn eventually<T, F, Fut>(check: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(std::time::Instant::now() < deadline, "not within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use crate::common::pg::fresh_database;
    use partner_api::PgStore;

    async fn database() -> PgStore {
        database_at(&fresh_database().await).await
    }

    async fn database_at(url: &str) -> PgStore {
        let store = PgStore::connect_lazy(url).unwrap();
        store.migrate().await.unwrap();
        store
            .add_organization(&partner_api::Organization {
                id: "org_a".into(),
                name: "A".into(),
            })
            .await
            .unwrap();
        store
            .add_organization(&partner_api::Organization {
                id: "org_b".into(),
                name: "B".into(),
            })
            .await
            .unwrap();
        store
    }

    #[tokio::test]
    async fn the_postgres_store_conforms() {
        crate::common::needs::needs!(Postgres);
        let store = PgStore::connect_lazy(&fresh_database().await).unwrap();
        store.migrate().await.unwrap();
        let report = partner_api::testing::run_webhooks(&store).await;
        report.assert_passed();
        partner_api::testing::run_webhooks(&store)
            .await
            .assert_passed();
        partner_api::testing::run_webhook_audit_log(&store)
            .await
            .assert_passed();
    }

    /// The webhooks are written from the events when a claim stamps them, for the endpoints
    /// enabled before each event was written: an endpoint enabled again hears nothing of what
    /// was written while it was off, though those events were stamped only after.
    #[tokio::test]
    async fn an_endpoint_hears_the_events_written_while_it_was_enabled_once_each() {
        crate::common::needs::needs!(Postgres);
        let store = database().await;
        let endpoint = store
            .add_endpoint("org_a", NewEndpoint::new("https://hooks.example/orders"))
            .await
            .unwrap();
        let id = endpoint.record.id.clone();
        let stamp = || crate::common::pg::stamp_for_webhooks(store.pool());
        let heard = || async {
            sqlx::query_scalar::<_, String>(
                "SELECT m.order_id FROM partner_webhook_deliveries d \
                 JOIN partner_webhook_messages m ON m.id = d.message_id ORDER BY d.id",
            )
            .fetch_all(store.pool())
            .await
            .unwrap()
        };
        sqlx::query(INSERT)
            .bind("before-off")
            .execute(store.pool())
            .await
            .unwrap();
        // Nothing is written on the write's path.
        assert_eq!(heard().await, Vec::<String>::new());
        stamp().await;
        stamp().await;
        assert_eq!(heard().await, ["before-off"]);
        store.set_enabled("org_a", &id, false).await.unwrap();
        sqlx::query(INSERT)
            .bind("while-off")
            .execute(store.pool())
            .await
            .unwrap();
        stamp().await;
        store.set_enabled("org_a", &id, true).await.unwrap();
        sqlx::query(INSERT)
            .bind("after-on")
            .execute(store.pool())
            .await
            .unwrap();
        stamp().await;
        assert_eq!(heard().await, ["before-off", "after-on"]);
    }

    /// A stamping that fails (here its function is missing) stops no claim: what is in the
    /// outbox is delivered, and the new events wait for a stamping that works.
    #[tokio::test]
    async fn a_failed_stamping_does_not_stop_the_claims() {
        crate::common::needs::needs!(Postgres);
        use partner_api::webhooks::{ClaimRequest, WebhookOutbox};
        let store = database().await;
        store
            .add_endpoint("org_a", NewEndpoint::new("https://hooks.example/orders"))
            .await
            .unwrap();
        let request = ClaimRequest::new(10, 10, Duration::from_secs(60));
        let claim = || store.claim(&request);
        let run = |sql: &'static str| {
            let pool = store.pool().clone();
            async move {
                sqlx::query(sql).execute(&pool).await.unwrap();
            }
        };
        sqlx::query(INSERT)
            .bind("o1")
            .execute(store.pool())
            .await
            .unwrap();
        assert_eq!(claim().await.unwrap().len(), 1, "stamped, then claimed");
        sqlx::query(INSERT)
            .bind("o2")
            .execute(store.pool())
            .await
            .unwrap();
        run("ALTER FUNCTION partner_api_stamp_for_webhooks(integer, integer) RENAME TO broken")
            .await;
        // o1 due again (as when its lease runs out): claimed, though o2 cannot be stamped.
        run("UPDATE partner_webhook_deliveries SET due_at = now()").await;
        let claimed = claim().await.expect("the claim failed with its stamping");
        assert_eq!(claimed.len(), 1);
        run("ALTER FUNCTION broken(integer, integer) RENAME TO partner_api_stamp_for_webhooks")
            .await;
        run("UPDATE partner_webhook_deliveries SET due_at = now()").await;
        assert_eq!(
            claim().await.unwrap().len(),
            2,
            "o2 stamped by the next claim, beside o1 again"
        );
    }

    /// Every replica's dispatcher stamps before its claims: a feed another is stamping is
    /// skipped for this round, not waited for (two replicas' rounds neither queue nor
    /// deadlock), and stamped by the next.
    #[tokio::test]
    async fn a_claims_stamping_skips_a_feed_being_stamped_elsewhere() {
        crate::common::needs::needs!(Postgres);
        let store = database().await;
        for organization in ["org_a", "org_b"] {
            store
                .add_endpoint(
                    organization,
                    NewEndpoint::new("https://hooks.example/orders"),
                )
                .await
                .unwrap();
        }
        let write = |organization: &'static str, id: &'static str| {
            let pool = store.pool().clone();
            async move {
                sqlx::query(
                    "INSERT INTO partner_orders VALUES ($1, $2, ARRAY['meta'], 'A', 'C', 1, \
                     '2026-03-01', '2026-04-30', 'booked', 'PO', now())",
                )
                .bind(organization)
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
            }
        };
        let stamp = || async {
            tokio::time::timeout(
                Duration::from_secs(5),
                crate::common::pg::stamp_for_webhooks(store.pool()),
            )
            .await
            .expect("the stamping waited for a feed another was stamping");
        };
        let heard = || async {
            sqlx::query_scalar::<_, String>(
                "SELECT m.order_id FROM partner_webhook_deliveries d \
                 JOIN partner_webhook_messages m ON m.id = d.message_id ORDER BY d.id",
            )
            .fetch_all(store.pool())
            .await
            .unwrap()
        };
        write("org_a", "a1").await;
        write("org_b", "b1").await;
        stamp().await;
        assert_eq!(heard().await, ["a1", "b1"]);
        write("org_a", "a2").await;
        write("org_b", "b2").await;
        let mut elsewhere = store.pool().begin().await.unwrap();
        sqlx::query(
            "SELECT 1 FROM partner_api_event_feeds WHERE organization_id = 'org_a' FOR UPDATE",
        )
        .execute(&mut *elsewhere)
        .await
        .unwrap();
        stamp().await;
        assert_eq!(heard().await, ["a1", "b1", "b2"]);
        elsewhere.rollback().await.unwrap();
        stamp().await;
        assert_eq!(heard().await, ["a1", "b1", "b2", "a2"]);
    }

    #[tokio::test]
    async fn a_rolled_back_change_raises_nothing_and_sql_changes_raise_events() {
        crate::common::needs::needs!(Postgres);
        let receiver = Receiver::ok().await;
        let store = database().await;
        let endpoint = store
            .add_endpoint(
                "org_a",
                NewEndpoint::new(receiver.url("/")).with_api_version(partner_api::versions::FIRST),
            )
            .await
            .unwrap();
        let mut transaction = store.pool().begin().await.unwrap();
        sqlx::query(INSERT)
            .bind("rolled-back")
            .execute(&mut *transaction)
            .await
            .unwrap();
        transaction.rollback().await.unwrap();
        sqlx::query(INSERT)
            .bind("o1")
            .execute(store.pool())
            .await
            .unwrap();
        let served = |store: PgStore| async move {
            use partner_api::OrderStore;
            let query = partner_api::store::OrderQuery::newest(100);
            let page = store.orders("org_a", &query).await.unwrap();
            // As a key at the first version reads it, an endpoint's version.
            let orders: Vec<String> = page
                .orders()
                .iter()
                .map(|order| {
                    String::from_utf8(crate::common::at_first_version(order.json())).unwrap()
                })
                .collect();
            format!("[{}]", orders.join(","))
        };
        let served_created = served(store.clone()).await;
        sqlx::query("UPDATE partner_orders SET status = 'running' WHERE id = 'o1'")
            .execute(store.pool())
            .await
            .unwrap();
        let served_updated = served(store.clone()).await;
        // Nothing changed: no event.
        sqlx::query("UPDATE partner_orders SET status = 'running' WHERE id = 'o1'")
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query("DELETE FROM partner_orders WHERE id = 'o1'")
            .execute(store.pool())
            .await
            .unwrap();
        let (_stop, _task) = start(Dispatcher::new(store.clone(), config()));
        let received = receiver.wait_for(3, Duration::from_secs(10)).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(receiver.received().len(), 3);
        let statuses: Vec<(String, serde_json::Value)> = received
            .iter()
            .map(|r| {
                (
                    r.json()["type"].as_str().unwrap().to_owned(),
                    r.json()["data"]["status"].clone(),
                )
            })
            .collect();
        assert_eq!(
            statuses,
            [
                ("order.created".into(), "booked".into()),
                ("order.updated".into(), "running".into()),
                ("order.deleted".into(), serde_json::Value::Null),
            ]
        );
        for delivery in &received {
            checked(delivery, std::slice::from_ref(&endpoint.secret));
            assert!(delivery.json()["data"]["id"] == "o1");
        }
        // The order's bytes are those the API served at the time (`GET /v1/orders` reads this
        // page through the same store).
        for (delivery, page) in [
            (&received[0], &served_created),
            (&received[1], &served_updated),
        ] {
            let body = String::from_utf8(delivery.body.to_vec()).unwrap();
            let data = body
                .split_once(r#","data":"#)
                .map(|(_, data)| data.strip_suffix('}').unwrap())
                .unwrap();
            assert!(page.contains(data), "{data} is not served as {page}");
        }
    }

    /// A row the contract cannot show (a budget above 2^53 - 1) is delivered all the same, as
    /// its id and the mark `unshowable`, and holds up nothing; an answer with a NUL byte is
    /// recorded (PostgreSQL's text refuses NUL).
    #[tokio::test]
    async fn a_row_that_cannot_be_shown_is_sent_marked_and_odd_answers_are_recorded() {
        crate::common::needs::needs!(Postgres);
        let receiver = Receiver::start(|_, _| Reply::StatusBody(200, b"ok\0")).await;
        let store = database().await;
        let endpoint = store
            .add_endpoint("org_a", NewEndpoint::new(receiver.url("/")))
            .await
            .unwrap();
        sqlx::query(
            "INSERT INTO partner_orders VALUES ('org_a', 'too-big', ARRAY['meta'], 'A', 'C', \
             9007199254740993, '2026-03-01', '2026-04-30', 'booked', 'PO', now())",
        )
        .execute(store.pool())
        .await
        .unwrap();
        sqlx::query(INSERT)
            .bind("fine")
            .execute(store.pool())
            .await
            .unwrap();
        let (_stop, _task) = start(Dispatcher::new(store.clone(), config()));
        let received = receiver.wait_for(2, Duration::from_secs(10)).await;
        let data: Vec<serde_json::Value> = received
            .iter()
            .map(|request| request.json()["data"].clone())
            .collect();
        assert!(
            data.contains(&serde_json::json!({"id": "too-big", "unshowable": true})),
            "{data:?}"
        );
        assert!(data
            .iter()
            .any(|order| order["id"] == "fine" && order["budgetDkk"].is_u64()));
        let attempts = eventually(|| async {
            let attempts = store
                .attempts("org_a", &endpoint.record.id, 10)
                .await
                .unwrap();
            (attempts.len() == 2).then_some(attempts)
        })
        .await;
        assert!(
            attempts
                .iter()
                .all(|attempt| attempt.outcome == AttemptOutcome::Succeeded
                    && attempt.response_body.as_deref() == Some("ok\u{fffd}")),
            "{attempts:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(receiver.received().len(), 2);
    }

    #[tokio::test]
    async fn failures_are_retried_under_one_id_and_410_disables_at_once_on_postgres() {
        crate::common::needs::needs!(Postgres);
        super::failures_are_retried_under_one_id_and_410_disables_at_once(database().await).await;
    }

    /// The endpoint's one due delivery, claimed.
    async fn claimed(store: &PgStore) -> partner_api::webhooks::Delivery {
        use partner_api::webhooks::{ClaimRequest, WebhookOutbox};
        let mut deliveries = store
            .claim(&ClaimRequest::new(10, 10, Duration::from_secs(60)))
            .await
            .unwrap();
        assert_eq!(deliveries.len(), 1);
        deliveries.pop().unwrap()
    }

    /// A failed attempt that disables its endpoint, answered with `status`.
    fn disabling(status: u16) -> partner_api::webhooks::FinishedAttempt {
        let mut attempt = partner_api::webhooks::FinishedAttempt::new(
            AttemptOutcome::Failed,
            partner_api::Timestamp::now(),
            Duration::ZERO,
        );
        attempt.response_status = Some(status);
        attempt.disable_endpoint = true;
        attempt
    }

    /// Delivery's disabling, as the finishing statement writes it: its reason; at most one
    /// entry per enabling on record (the delivering role may enable by SQL, unlogged, and
    /// must not fill the log); and an admin's disabling that committed while the attempt
    /// waited to finish is the admin's, not reported as delivery's.
    #[tokio::test]
    async fn delivery_disabling_is_audited_once_per_enabling_and_never_for_an_admins_on_postgres() {
        use partner_api::webhooks::WebhookOutbox;
        use sqlx::{Connection, Executor};
        crate::common::needs::needs!(Postgres);
        let url = fresh_database().await;
        let store = database_at(&url).await;
        let id = store
            .add_endpoint("org_a", NewEndpoint::new("https://hooks.example/a"))
            .await
            .unwrap()
            .record
            .id;
        let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
        let delivery_entries = || async {
            audit_of(&store, "org_a", &id)
                .await
                .into_iter()
                .filter(|(_, actor, _)| actor == DELIVERY_ACTOR)
                .map(|(action, _, detail)| (action, detail.unwrap_or_default()))
                .collect::<Vec<_>>()
        };
        let disabled = |detail: &str| ("webhook.disabled".to_owned(), detail.to_owned());
        // A test event's delivery, finished by an attempt that disables: whether it did.
        let deliver_and_disable = |status: u16| {
            let store = store.clone();
            let id = id.clone();
            async move {
                store.send_test("org_a", &id).await.unwrap();
                let delivery = claimed(&store).await;
                let finish = store.finish(&delivery, &disabling(status)).await.unwrap();
                finish.disabled.is_some()
            }
        };

        // Failing for the period: disabled, and logged with its reason.
        assert!(deliver_and_disable(500).await);
        assert_eq!(delivery_entries().await, [disabled("failing")]);

        // Enabled again by SQL, off the record, and disabled again: no second entry.
        admin
            .execute("UPDATE partner_webhook_endpoints SET enabled = true")
            .await
            .unwrap();
        assert!(deliver_and_disable(500).await);
        assert_eq!(delivery_entries().await, [disabled("failing")]);

        // Enabled by an admin (on the record); an admin disables it while an attempt waits
        // to finish: the attempt's finish disables nothing and logs nothing.
        store.set_enabled("org_a", &id, true).await.unwrap();
        store.send_test("org_a", &id).await.unwrap();
        let delivery = claimed(&store).await;
        let mut transaction = admin.begin().await.unwrap();
        transaction
            .execute("UPDATE partner_webhook_endpoints SET enabled = false")
            .await
            .unwrap();
        let finishing = tokio::spawn({
            let store = store.clone();
            async move { store.finish(&delivery, &disabling(410)).await }
        });
        // The admin commits once the finish waits for its row lock.
        let observer = PgStore::connect_lazy(&url).unwrap();
        eventually(|| async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(observer.pool())
            .await
            .unwrap();
            (waiting == 1).then_some(())
        })
        .await;
        assert!(!finishing.is_finished());
        transaction.commit().await.unwrap();
        let finish = finishing.await.unwrap().unwrap();
        assert!(finish.current);
        assert_eq!(
            finish.disabled, None,
            "an admin's disabling reported as delivery's"
        );
        assert_eq!(delivery_entries().await, [disabled("failing")]);

        // Enabled by an admin again, and gone: logged.
        store.set_enabled("org_a", &id, true).await.unwrap();
        assert!(deliver_and_disable(410).await);
        assert_eq!(
            delivery_entries().await,
            [disabled("gone"), disabled("failing")]
        );
    }

    #[tokio::test]
    async fn a_destination_resolving_to_a_blocked_address_gets_no_connection_on_postgres() {
        crate::common::needs::needs!(Postgres);
        super::a_destination_resolving_to_a_blocked_address_gets_no_connection(database().await)
            .await;
    }

    #[tokio::test]
    async fn a_hanging_endpoint_does_not_delay_a_healthy_one_on_postgres() {
        crate::common::needs::needs!(Postgres);
        super::a_hanging_endpoint_does_not_delay_a_healthy_one(database().await).await;
    }

    /// The case of the security review, through the standalone host delivering from
    /// PostgreSQL: twenty endpoints of one organization (its cap) that accept and never
    /// answer, 100 order changes for each of them, and another organization's event still
    /// arrives within a second.
    #[tokio::test]
    async fn one_organizations_hanging_endpoints_do_not_delay_another_through_the_standalone_host()
    {
        crate::common::needs::needs!(Postgres, Examples);
        let url = fresh_database().await;
        let store = database_at(&url).await;
        let (hanging, _, healthy, fine) = super::hanging_beside_healthy(&store).await;
        let mut host = delivering_host(&url, &["--webhook-timeout", "60"]);
        host.address().await;
        for n in 0..100 {
            sqlx::query(INSERT)
                .bind(format!("ord_hanging_{n}"))
                .execute(store.pool())
                .await
                .unwrap();
        }
        // The defaults: 32 slots a replica, 16 of them for one organization.
        hanging.wait_for(16, Duration::from_secs(20)).await;
        let sent = std::time::Instant::now();
        store.send_test("org_b", &fine.record.id).await.unwrap();
        healthy.wait_for(1, Duration::from_secs(20)).await;
        let delay = sent.elapsed();
        assert!(
            delay < Duration::from_secs(1),
            "another organization's event waited {delay:?}"
        );
        assert!(host.terminate().await.success());
    }

    /// `--webhook-retention-days`: the standalone host deletes a message older than its
    /// retention (with its deliveries and attempts), and keeps a younger one.
    #[tokio::test]
    async fn the_standalone_host_keeps_messages_for_its_retention() {
        crate::common::needs::needs!(Postgres, Examples);
        let receiver = Receiver::ok().await;
        let url = fresh_database().await;
        let store = database_at(&url).await;
        let endpoint = store
            .add_endpoint("org_a", NewEndpoint::new(receiver.url("/")))
            .await
            .unwrap();
        for _ in 0..2 {
            store.send_test("org_a", &endpoint.record.id).await.unwrap();
        }
        let old: i64 = sqlx::query_scalar(
            "UPDATE partner_webhook_messages SET raised_at = now() - interval '2 days' \
             WHERE id = (SELECT min(id) FROM partner_webhook_messages) RETURNING id",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        let mut host = delivering_host(&url, &["--webhook-retention-days", "1"]);
        host.address().await;
        let left: Vec<i64> = eventually(|| async {
            let left: Vec<i64> =
                sqlx::query_scalar("SELECT id FROM partner_webhook_messages ORDER BY id")
                    .fetch_all(store.pool())
                    .await
                    .unwrap();
            (left.len() == 1).then_some(left)
        })
        .await;
        assert!(!left.contains(&old), "the old message was kept: {left:?}");
        // The young one is delivered; the old one never was (it was deleted first or sent
        // once before: either way it is gone with its attempts).
        receiver.wait_for(1, Duration::from_secs(10)).await;
        let orphans: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM partner_webhook_deliveries WHERE message_id = $1",
        )
        .bind(old)
        .fetch_one(store.pool())
        .await
        .unwrap();
        assert_eq!(orphans, 0);
        assert!(host.terminate().await.success());
    }

    /// The standalone host on the database at `url`, delivering to receivers on loopback,
    /// with `extra` arguments.
    fn delivering_host(url: &str, extra: &[&str]) -> crate::common::Process {
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            url,
            "--webhook-allow-http",
            "--webhook-allow-subnet",
            "127.0.0.0/8",
        ];
        args.extend_from_slice(extra);
        crate::common::Process::spawn(&args)
    }

    #[tokio::test]
    async fn the_maintenance_deletes_what_outlived_the_retention_on_postgres() {
        crate::common::needs::needs!(Postgres);
        super::the_maintenance_deletes_what_outlived_the_retention(database().await).await;
    }

    #[tokio::test]
    async fn hanging_endpoints_of_one_organization_do_not_delay_another_on_postgres() {
        crate::common::needs::needs!(Postgres);
        super::hanging_endpoints_of_one_organization_do_not_delay_another(database().await).await;
    }

    pub(super) const INSERT: &str =
        "INSERT INTO partner_orders VALUES ('org_a', $1, ARRAY['meta'], 'A', 'C', 1, \
                          '2026-03-01', '2026-04-30', 'booked', 'PO', now())";

    /// Two workers, 2,000 changes of 100 orders, one worker killed half-way: every change
    /// arrives, and each order's in the order of its commits.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_workers_and_one_killed_deliver_everything_in_order() {
        crate::common::needs::needs!(Postgres);
        let receiver = Receiver::ok().await;
        let store = database().await;
        store
            .add_endpoint("org_a", NewEndpoint::new(receiver.url("/")))
            .await
            .unwrap();
        let (_stop_a, worker_a) = start(Dispatcher::new(
            store.clone(),
            config()
                .with_concurrency(16, 8)
                .with_timeout(Duration::from_secs(2)),
        ));
        let (_stop_b, _worker_b) = start(Dispatcher::new(
            store.clone(),
            config()
                .with_concurrency(16, 8)
                .with_timeout(Duration::from_secs(2)),
        ));
        let orders = 100;
        let writes = {
            let store = store.clone();
            tokio::spawn(async move {
                for order in 0..orders {
                    sqlx::query(INSERT)
                        .bind(format!("o{order}"))
                        .execute(store.pool())
                        .await
                        .unwrap();
                }
                for round in 1..20 {
                    for order in 0..orders {
                        sqlx::query("UPDATE partner_orders SET status = $2 WHERE id = $1")
                            .bind(format!("o{order}"))
                            .bind(format!("s{round}"))
                            .execute(store.pool())
                            .await
                            .unwrap();
                    }
                }
            })
        };
        receiver.wait_for(1000, Duration::from_secs(60)).await;
        worker_a.abort();
        writes.await.unwrap();
        // Every change, once per webhook-id (a duplicate only for a delivery in flight at the
        // kill), each order's statuses in commit order.
        let received = receiver.wait_for(2000, Duration::from_secs(120)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let received = receiver
            .received()
            .into_iter()
            .chain(received.into_iter().take(0));
        let mut seen = std::collections::HashSet::new();
        let mut per_order: HashMap<String, Vec<String>> = HashMap::new();
        for delivery in received {
            if !seen.insert(delivery.header("webhook-id").to_owned()) {
                continue;
            }
            let json = delivery.json();
            per_order
                .entry(json["data"]["id"].as_str().unwrap().to_owned())
                .or_default()
                .push(json["data"]["status"].as_str().unwrap().to_owned());
        }
        assert_eq!(seen.len(), 2000);
        let expected: Vec<String> = std::iter::once("booked".to_owned())
            .chain((1..20).map(|round| format!("s{round}")))
            .collect();
        for (order, statuses) in &per_order {
            assert_eq!(statuses, &expected, "order {order}");
        }
        assert_eq!(per_order.len(), orders);
    }
}

/// The standalone host: the `webhooks` subcommand and delivery from every replica.
#[cfg(feature = "postgres")]
mod standalone {
    use super::*;
    use crate::common::pg::fresh_database;
    use partner_api::PgStore;

    async fn cli(database: &str, args: &[&str]) -> Vec<serde_json::Value> {
        let output = tokio::process::Command::new(standalone_binary())
            .arg("--database-url")
            .arg(database)
            .arg("webhooks")
            .args(args)
            .env_remove("DATABASE_URL")
            .output()
            .await
            .unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "webhooks {args:?}: {stderr}");
        // A command that succeeds says nothing on stderr (no migration notices, no logs).
        assert_eq!(stderr, "", "webhooks {args:?} wrote to stderr");
        stdout
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_webhooks_command_manages_endpoints_and_every_replica_delivers() {
        crate::common::needs::needs!(Postgres, Examples);
        let database = fresh_database().await;
        let store = PgStore::connect_lazy(&database).unwrap();
        store.migrate().await.unwrap();
        store
            .add_organization(&partner_api::Organization {
                id: "org_a".into(),
                name: "A".into(),
            })
            .await
            .unwrap();
        let receiver = Receiver::ok().await;
        let gone = Receiver::start(|_, _| Reply::Status(410)).await;

        let added = cli(
            &database,
            &[
                "add",
                "--organization",
                "org_a",
                "--url",
                &receiver.url("/hooks"),
                "--event",
                "order.created",
                "--event",
                "order.updated",
                "--description",
                "ERP",
                "--api-version",
                "2026-11-27",
                "--provider",
                "meta",
                "--provider",
                "google",
            ],
        )
        .await;
        let endpoint = &added[0];
        assert_eq!(endpoint["apiVersion"], "2026-11-27");
        let id = endpoint["id"].as_str().unwrap().to_owned();
        let secret: WebhookSecret = endpoint["secret"].as_str().unwrap().parse().unwrap();
        assert_eq!(endpoint["organizationId"], "org_a");
        assert_eq!(
            endpoint["events"],
            serde_json::json!(["order.created", "order.updated"])
        );
        assert_eq!(endpoint["description"], "ERP");
        // It hears of the orders of meta and google (the order below books meta).
        assert_eq!(endpoint["providers"], serde_json::json!(["google", "meta"]));
        assert_eq!(endpoint["enabled"], true);
        assert!(endpoint["createdAt"].as_str().unwrap().ends_with('Z'));
        let listed = cli(&database, &["list", "--organization", "org_a"]).await;
        assert_eq!(listed.len(), 1);
        assert!(listed[0].get("secret").is_none(), "list shows a secret");

        let logs: Vec<std::path::PathBuf> = (0..2)
            .map(|n| crate::common::net::temp_file(&format!("webhooks-replica-{n}.log"), ""))
            .collect();
        let mut replicas = Vec::new();
        for log in &logs {
            let mut replica = Process::spawn_with_stderr(
                &[
                    "--database-url",
                    &database,
                    "--listen",
                    "127.0.0.1:0",
                    "--webhook-allow-http",
                    "--webhook-allow-subnet",
                    "127.0.0.0/8",
                    "--webhook-retry-schedule",
                    "1,1",
                    "--webhook-timeout",
                    "5",
                ],
                &[],
                log,
            );
            replica.address().await;
            replicas.push(replica);
        }

        // An order written by plain SQL: created, then updated; its deletion is not subscribed.
        sqlx::query(postgres::INSERT)
            .bind("o1")
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query("UPDATE partner_orders SET status = 'running' WHERE id = 'o1'")
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query("DELETE FROM partner_orders WHERE id = 'o1'")
            .execute(store.pool())
            .await
            .unwrap();
        let test = cli(&database, &["test", "--organization", "org_a", "--id", &id]).await;
        let test_id = test[0]["messageId"].as_str().unwrap().to_owned();
        let received = receiver.wait_for(3, Duration::from_secs(15)).await;
        for delivery in &received {
            checked(delivery, std::slice::from_ref(&secret));
        }
        let mut types: Vec<String> = received
            .iter()
            .map(|r| r.json()["type"].as_str().unwrap().to_owned())
            .collect();
        types.sort();
        assert_eq!(types, ["order.created", "order.updated", "webhook.test"]);
        assert!(received.iter().any(|r| r.header("webhook-id") == test_id));
        // At the first version, as the endpoint was added: no updatedAt.
        assert!(received
            .iter()
            .filter(|r| r.json()["type"] != "webhook.test")
            .all(|r| r.json()["data"].get("updatedAt").is_none()));
        // Pinned to the second, its next order arrives with it.
        let pinned = cli(
            &database,
            &[
                "pin",
                "--organization",
                "org_a",
                "--id",
                &id,
                "--api-version",
                "2026-11-28",
            ],
        )
        .await;
        assert_eq!(pinned[0]["apiVersion"], "2026-11-28");
        sqlx::query(postgres::INSERT)
            .bind("o2")
            .execute(store.pool())
            .await
            .unwrap();
        let received = receiver.wait_for(4, Duration::from_secs(15)).await;
        let o2 = received
            .iter()
            .find(|r| r.json()["data"]["id"] == "o2")
            .expect("o2 delivered");
        checked(o2, std::slice::from_ref(&secret));
        assert_eq!(o2.json()["data"]["updatedAt"], o2.json()["timestamp"]);

        // A receiver hears a delivery before the worker records it.
        let attempts = eventually(|| async {
            let attempts = cli(
                &database,
                &["attempts", "--organization", "org_a", "--id", &id],
            )
            .await;
            (attempts.len() == 4).then_some(attempts)
        })
        .await;
        for attempt in &attempts {
            assert_eq!(attempt["outcome"], "succeeded");
            assert_eq!(attempt["responseStatus"], 204);
            assert_eq!(attempt["attempt"], 1);
            assert_eq!(attempt["error"], serde_json::Value::Null);
            assert!(attempt["messageId"].as_str().unwrap().starts_with("msg_"));
            assert!(
                attempt["attemptedAt"].as_str().is_some()
                    && attempt["eventType"].as_str().is_some()
            );
        }

        // A rotation: the next delivery carries two signatures, each valid on its own.
        let rotated = cli(
            &database,
            &[
                "rotate",
                "--organization",
                "org_a",
                "--id",
                &id,
                "--overlap",
                "3600",
            ],
        )
        .await;
        let new_secret: WebhookSecret = rotated[0]["secret"].as_str().unwrap().parse().unwrap();
        assert_ne!(new_secret, secret);
        cli(&database, &["test", "--organization", "org_a", "--id", &id]).await;
        let received = receiver.wait_for(5, Duration::from_secs(15)).await;
        let last = &received[4];
        assert_eq!(last.header("webhook-signature").split(' ').count(), 2);
        checked(last, std::slice::from_ref(&secret));
        checked(last, std::slice::from_ref(&new_secret));

        // 410 Gone: disabled at once, logged at WARN by the replica that delivered.
        let ended = cli(
            &database,
            &["add", "--organization", "org_a", "--url", &gone.url("/")],
        )
        .await;
        let ended_id = ended[0]["id"].as_str().unwrap().to_owned();
        let before = partner_api::Timestamp::now().to_string();
        cli(
            &database,
            &["test", "--organization", "org_a", "--id", &ended_id],
        )
        .await;
        gone.wait_for(1, Duration::from_secs(15)).await;
        let disabled = eventually(|| async {
            let listed = cli(&database, &["list", "--organization", "org_a"]).await;
            let record = listed
                .into_iter()
                .find(|e| e["id"] == ended_id.as_str())
                .unwrap();
            (record["enabled"] == false).then_some(record)
        })
        .await;
        assert_eq!(disabled["url"], gone.url("/"));
        let enabled = cli(
            &database,
            &["enable", "--organization", "org_a", "--id", &ended_id],
        )
        .await;
        assert_eq!(enabled[0]["enabled"], true);
        let recovered = cli(
            &database,
            &[
                "recover",
                "--organization",
                "org_a",
                "--id",
                &ended_id,
                "--since",
                &before,
            ],
        )
        .await;
        assert_eq!(recovered[0]["recovered"], 1);
        gone.wait_for(2, Duration::from_secs(15)).await;
        let off = cli(
            &database,
            &["disable", "--organization", "org_a", "--id", &ended_id],
        )
        .await;
        assert_eq!(off[0]["enabled"], false);
        let removed = cli(
            &database,
            &["remove", "--organization", "org_a", "--id", &ended_id],
        )
        .await;
        assert_eq!(removed[0]["removed"], ended_id.as_str());
        assert_eq!(
            cli(&database, &["list", "--organization", "org_a"])
                .await
                .len(),
            1
        );

        for replica in replicas {
            replica.terminate().await;
        }
        let log: String = logs
            .iter()
            .map(|log| std::fs::read_to_string(log).unwrap())
            .collect();
        assert!(log.contains("webhook endpoint disabled"), "{log}");
        for secret in [&secret, &new_secret] {
            let text = secret.expose();
            let encoded = text.trim_start_matches("whsec_");
            assert!(!log.contains(encoded), "a secret is in the log");
        }
    }
}

/// The reference verifier (the PyPI package `standardwebhooks`) accepts every delivery, and
/// refuses one whose body was changed. Run by `.ci/run` with the Python of its environment:
/// `PARTNER_API_STANDARDWEBHOOKS_PYTHON=... cargo test --all-features --test it reference -- --ignored`.
#[tokio::test]
#[ignore = "needs Python with standardwebhooks; .ci/run runs it"]
async fn the_reference_verifier_accepts_every_delivery() {
    let python = std::env::var("PARTNER_API_STANDARDWEBHOOKS_PYTHON")
        .expect("PARTNER_API_STANDARDWEBHOOKS_PYTHON names a Python with standardwebhooks");
    let receiver = Receiver::ok().await;
    let store = store();
    let endpoint = store
        .add_endpoint("org_b", NewEndpoint::new(receiver.url("/")))
        .await
        .unwrap();
    let (_stop, _task) = start(Dispatcher::new(store.clone(), config()));
    let mut placed = order("b-ref", BASE_MILLIS + 1);
    placed.campaign_name = "Ünïcode «campaign» \"quoted\" \\ / \u{1F680}".into();
    store.add_order("org_b", placed.clone()).unwrap();
    placed.status = "running".into();
    store.update_order("org_b", placed).unwrap();
    store.remove_order("org_b", "b-ref");
    store.send_test("org_b", &endpoint.record.id).await.unwrap();
    receiver.wait_for(4, Duration::from_secs(10)).await;
    // After a rotation, two signatures: each secret verifies on its own.
    let rotated = store
        .rotate_secret("org_b", &endpoint.record.id, Duration::from_secs(3600))
        .await
        .unwrap();
    store.send_test("org_b", &endpoint.record.id).await.unwrap();
    let received = receiver.wait_for(5, Duration::from_secs(10)).await;

    let cases: Vec<serde_json::Value> = received
        .iter()
        .enumerate()
        .flat_map(|(n, delivery)| {
            let secrets = if n == 4 {
                vec![endpoint.secret.expose(), rotated.secret.expose()]
            } else {
                vec![endpoint.secret.expose()]
            };
            let headers: serde_json::Map<String, serde_json::Value> = ["webhook-id", "webhook-timestamp", "webhook-signature"]
                .into_iter()
                .map(|name| (name.to_owned(), delivery.header(name).into()))
                .collect();
            let body = String::from_utf8(delivery.body.to_vec()).unwrap();
            secrets
                .into_iter()
                .map(move |secret| serde_json::json!({"secret": secret, "headers": headers, "body": body}))
                .collect::<Vec<_>>()
        })
        .collect();
    let input = crate::common::net::temp_file(
        "standardwebhooks.json",
        &serde_json::Value::from(cases).to_string(),
    );
    let script = r#"
import json, sys
from standardwebhooks.webhooks import Webhook, WebhookVerificationError
cases = json.load(open(sys.argv[1], encoding="utf-8"))
for case in cases:
    Webhook(case["secret"]).verify(case["body"], case["headers"])
    try:
        Webhook(case["secret"]).verify(case["body"] + " ", case["headers"])
        sys.exit("a changed body was accepted")
    except WebhookVerificationError:
        pass
print(f"standardwebhooks verified {len(cases)} deliveries")
"#;
    let output = std::process::Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&input)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(String::from_utf8_lossy(&output.stdout).contains("verified 6 deliveries"));
}
