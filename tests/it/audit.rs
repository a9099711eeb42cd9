//! The audit log through the management service: who changed what comes from the host (the
//! acting organization's actor, the peer, the user agent, the request id), never from the
//! body; `GET /audit` pages newest first, filters, and is scoped to the organization.

use std::net::SocketAddr;

use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use partner_api::management::{ActingOrganization, KeyManagementService};
use partner_api::seed::Seed;
use partner_api::PeerAddr;
use serde_json::{json, Value};
use tower::ServiceExt;

async fn send(
    service: &KeyManagementService,
    method: Method,
    path: &str,
    organization: &str,
    body: Value,
) -> (StatusCode, Value) {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .header("user-agent", "Mozilla/5.0 (test)")
        .header("x-request-id", "req-audit-1")
        .body(body.to_string())
        .unwrap();
    let peer: SocketAddr = "198.51.100.23:40000".parse().unwrap();
    request.extensions_mut().insert(PeerAddr(peer));
    request
        .extensions_mut()
        .insert(ActingOrganization::new(organization).with_actor(format!("admin@{organization}")));
    let response = service.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

#[tokio::test]
async fn changes_are_logged_with_the_hosts_context_and_read_newest_first_in_pages() {
    let store = Seed::demo().to_memory_store().unwrap();
    let service = KeyManagementService::new(store.clone()).with_audit_log(store.clone());
    let (status, created) = send(
        &service,
        Method::POST,
        "/keys",
        "org_demo",
        // An actor in the body is nobody's word: the host's is the one logged.
        json!({"label": "Audited", "environment": "test"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let id = created["data"]["record"]["id"].as_str().unwrap().to_owned();
    let plaintext = created["data"]["key"].as_str().unwrap().to_owned();
    let (status, _) = send(
        &service,
        Method::POST,
        &format!("/keys/{id}/revoke"),
        "org_demo",
        json!({}),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, log) = send(&service, Method::GET, "/audit", "org_demo", Value::Null).await;
    assert_eq!(status, StatusCode::OK, "{log}");
    let entries = log["data"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 2, "{log}");
    assert_eq!(entries[0]["action"], "key.revoked");
    assert_eq!(entries[1]["action"], "key.issued");
    for entry in entries {
        assert_eq!(entry["target"], id.as_str());
        assert_eq!(entry["actor"], "admin@org_demo");
        assert_eq!(entry["sourceAddress"], "198.51.100.23");
        assert_eq!(entry["userAgent"], "Mozilla/5.0 (test)");
        assert_eq!(entry["requestId"], "req-audit-1");
        assert_eq!(entry["organizationId"], "org_demo");
    }
    assert!(!log.to_string().contains(&plaintext), "the log holds a key");
    assert_eq!(log["data"]["nextPageToken"], Value::Null);

    // Pages of one, and filters.
    let (_, first) = send(
        &service,
        Method::GET,
        "/audit?limit=1",
        "org_demo",
        Value::Null,
    )
    .await;
    let token = first["data"]["nextPageToken"].as_str().unwrap().to_owned();
    assert_eq!(first["data"]["entries"][0]["action"], "key.revoked");
    let (_, second) = send(
        &service,
        Method::GET,
        &format!("/audit?limit=1&page_token={token}"),
        "org_demo",
        Value::Null,
    )
    .await;
    assert_eq!(second["data"]["entries"][0]["action"], "key.issued");
    assert_eq!(second["data"]["nextPageToken"], Value::Null);
    let (_, issued) = send(
        &service,
        Method::GET,
        &format!("/audit?action=key.issued&target={id}"),
        "org_demo",
        Value::Null,
    )
    .await;
    assert_eq!(issued["data"]["entries"].as_array().unwrap().len(), 1);

    // Another organization sees none of it.
    let (status, theirs) = send(&service, Method::GET, "/audit", "org_other", Value::Null).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(theirs["data"]["entries"], json!([]));
    for bad in [
        "/audit?limit=0",
        "/audit?page_token=x",
        "/audit?action=Revoke",
        "/audit?x=1",
    ] {
        let (status, body) = send(&service, Method::GET, bad, "org_demo", Value::Null).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    // Without an audit log: 404, and the abilities say so.
    let without = KeyManagementService::new(store.clone());
    let (status, _) = send(&without, Method::GET, "/audit", "org_demo", Value::Null).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, abilities) = send(&without, Method::GET, "/abilities", "org_demo", Value::Null).await;
    assert_eq!(abilities["data"]["abilities"]["auditLog"], false);
}

/// Every change writes an entry, so a tenant's changes are budgeted: 30 at once, then one a
/// second, per organization; past it a 429 with `Retry-After`, and no entry.
#[tokio::test]
async fn changes_past_the_organizations_budget_are_refused_and_log_nothing() {
    let store = Seed::demo().to_memory_store().unwrap();
    let service = KeyManagementService::new(store.clone()).with_audit_log(store.clone());
    let (_, created) = send(
        &service,
        Method::POST,
        "/keys",
        "org_demo",
        json!({"label": "Budgeted", "environment": "test"}),
    )
    .await;
    let id = created["data"]["record"]["id"].as_str().unwrap().to_owned();
    let path = format!("/keys/{id}/restrict");
    let mut refused = None;
    for n in 0..40 {
        // Another range each time: a change that changes nothing would log nothing.
        let ranges = if n % 2 == 0 {
            json!(["192.0.2.0/24"])
        } else {
            json!([])
        };
        let (status, body) = send(
            &service,
            Method::POST,
            &path,
            "org_demo",
            json!({ "allowedIps": ranges }),
        )
        .await;
        if status == StatusCode::TOO_MANY_REQUESTS {
            refused = Some((n, body));
            break;
        }
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (n, body) = refused.expect("40 changes at once were all taken");
    // The issue and 29 restrictions took the burst of 30 (a second more may have refilled one).
    assert!((29..=30).contains(&n), "refused after {n} restrictions");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too many changes"),
        "{body}"
    );
    let (_, log) = send(
        &service,
        Method::GET,
        "/audit?limit=100",
        "org_demo",
        Value::Null,
    )
    .await;
    assert_eq!(
        log["data"]["entries"].as_array().unwrap().len(),
        n + 1,
        "{log}"
    );
    // Another organization has a budget of its own.
    let (status, body) = send(
        &service,
        Method::POST,
        "/keys",
        "org_other",
        json!({"environment": "test"}),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
}

/// The host's maintenance runs the log's retention (no request starts it), and retention
/// leaves a trace: each organization that lost entries gets an `audit.pruned` entry saying
/// how many.
#[tokio::test]
async fn the_maintenance_runs_retention_and_each_pruned_organization_gets_an_entry() {
    use partner_api::store::KeyManager;
    let store = Seed::demo().to_memory_store().unwrap();
    for _ in 0..3 {
        store
            .issue(
                "org_demo",
                partner_api::store::NewKey::new(partner_api::key::KeyEnvironment::Test),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let service = KeyManagementService::new(store.clone()).with_audit_log(store.clone());
    let maintenance = partner_api::maintenance::Maintenance::new()
        .with_audit_retention(store.clone(), std::time::Duration::from_millis(1))
        .start()
        .unwrap();
    let started = std::time::Instant::now();
    let entries = loop {
        let (status, log) = send(&service, Method::GET, "/audit", "org_demo", Value::Null).await;
        assert_eq!(status, StatusCode::OK, "{log}");
        let entries = log["data"]["entries"].as_array().unwrap().clone();
        if entries
            .iter()
            .any(|entry| entry["action"] == "audit.pruned")
        {
            break entries;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "no retention ran: {log}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["detail"], "3");
    // Retention's own entry: no request's user, address or agent (one organization's) in
    // every organization's log.
    assert_eq!(entries[0]["actor"], "audit retention");
    assert_eq!(entries[0]["sourceAddress"], Value::Null);
    assert!(maintenance.shutdown().await.is_ok());
}

/// Behind the proxies the host trusts, an entry's source is the client they forwarded, as
/// the API resolves it; from anyone else, the header is the client's word and the peer counts.
#[tokio::test]
async fn an_entrys_source_is_the_client_behind_trusted_proxies() {
    let store = Seed::demo().to_memory_store().unwrap();
    let service = KeyManagementService::new(store.clone())
        .with_audit_log(store.clone())
        .with_trusted_proxies(["198.51.100.0/24".parse().unwrap()]);
    let change = |peer: &str| {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/keys")
            .header("content-type", "application/json")
            .header("x-forwarded-for", "203.0.113.9")
            .body(json!({"environment": "test"}).to_string())
            .unwrap();
        request
            .extensions_mut()
            .insert(PeerAddr(peer.parse().unwrap()));
        request
            .extensions_mut()
            .insert(ActingOrganization::new("org_demo").with_actor("admin"));
        service.clone().oneshot(request)
    };
    // 198.51.100.23 is a trusted proxy: the client it forwarded is the source.
    assert_eq!(
        change("198.51.100.23:4000").await.unwrap().status(),
        StatusCode::CREATED
    );
    // 192.0.2.1 is not: its header is its own word.
    assert_eq!(
        change("192.0.2.1:4000").await.unwrap().status(),
        StatusCode::CREATED
    );
    let (_, log) = send(&service, Method::GET, "/audit", "org_demo", Value::Null).await;
    let sources: Vec<&str> = log["data"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["sourceAddress"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["192.0.2.1", "203.0.113.9"], "{log}");
}
