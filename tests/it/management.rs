//! The key-management service of a Settings page, through `Service::call`: the organization
//! comes from the host, state changes need JSON and the host's CSRF check, every bad input
//! gets a clear JSON error with the right status and changes nothing, and every response
//! matches the service's OpenAPI description.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use partner_api::management::{ActingOrganization, KeyManagementService, OPENAPI_DOCUMENT};
use partner_api::seed::Seed;
use partner_api::MemoryStore;
use serde_json::{json, Value};
use tower::ServiceExt;

struct Answer {
    status: StatusCode,
    headers: http::HeaderMap,
    body: Value,
    text: String,
}

/// The OpenAPI path template of a concrete path.
fn template(path: &str) -> &'static str {
    match path.split('/').collect::<Vec<_>>().as_slice() {
        ["", "keys"] => "/keys",
        ["", "keys", _] => "/keys/{id}",
        ["", "keys", _, "revoke"] => "/keys/{id}/revoke",
        ["", "keys", _, "roll"] => "/keys/{id}/roll",
        ["", "keys", _, "restrict"] => "/keys/{id}/restrict",
        ["", "keys", _, "permissions"] => "/keys/{id}/permissions",
        ["", "keys", _, "providers"] => "/keys/{id}/providers",
        ["", "keys", _, "api-version"] => "/keys/{id}/api-version",
        ["", "keys", _, "api-version", "rollback"] => "/keys/{id}/api-version/rollback",
        ["", "api-versions"] => "/api-versions",
        ["", "policy"] => "/policy",
        ["", "abilities"] => "/abilities",
        ["", "deprecated-calls"] => "/deprecated-calls",
        ["", "webhooks"] => "/webhooks",
        ["", "webhooks", _] => "/webhooks/{id}",
        ["", "webhooks", _, "attempts"] => "/webhooks/{id}/attempts",
        ["", "webhooks", _, "rotate"] => "/webhooks/{id}/rotate",
        ["", "webhooks", _, "enable"] => "/webhooks/{id}/enable",
        ["", "webhooks", _, "disable"] => "/webhooks/{id}/disable",
        ["", "webhooks", _, "remove"] => "/webhooks/{id}/remove",
        ["", "webhooks", _, "test"] => "/webhooks/{id}/test",
        ["", "webhooks", _, "retry"] => "/webhooks/{id}/retry",
        ["", "webhooks", _, "recover"] => "/webhooks/{id}/recover",
        _ => "",
    }
}

/// Checks `answer` against the response the document declares for it.
fn assert_documented(method: &Method, path: &str, answer: &Answer) {
    let document: Value = serde_json::from_str(OPENAPI_DOCUMENT).unwrap();
    let template = template(path);
    if template.is_empty() || answer.status == StatusCode::METHOD_NOT_ALLOWED {
        return;
    }
    let operation = &document["paths"][template][method.as_str().to_lowercase()];
    let mut response = &operation["responses"][answer.status.as_str()];
    assert!(
        !response.is_null(),
        "{method} {path}: {} is not documented",
        answer.status
    );
    if let Some(reference) = response["$ref"].as_str() {
        response = document.pointer(reference.trim_start_matches('#')).unwrap();
    }
    let schema = &response["content"]["application/json"]["schema"];
    let mut root = document.clone();
    root["$schema"] = "https://json-schema.org/draft/2020-12/schema".into();
    root["$ref"] = schema["$ref"].clone();
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&root)
        .unwrap();
    assert!(
        validator.is_valid(&answer.body),
        "{method} {path}: {} breaks its schema: {}",
        answer.status,
        answer.text
    );
}

fn store() -> MemoryStore {
    Seed::demo().to_memory_store().unwrap()
}

async fn send(
    service: &KeyManagementService,
    method: Method,
    path: &str,
    organization: Option<&str>,
    content_type: Option<&str>,
    body: &str,
) -> Answer {
    let mut request = Request::builder().method(method.clone()).uri(path);
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let mut request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap();
    if let Some(organization) = organization {
        request
            .extensions_mut()
            .insert(ActingOrganization::new(organization));
    }
    let response = service.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let body = if method == Method::HEAD {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
    };
    assert_eq!(headers["cache-control"], "no-store", "{path}");
    assert_eq!(headers["content-type"], "application/json", "{path}");
    let answer = Answer {
        status,
        headers,
        body,
        text,
    };
    if method != Method::HEAD {
        assert_documented(&method, path, &answer);
        if !status.is_success() {
            assert!(
                answer.body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{}",
                answer.text
            );
        }
    }
    answer
}

async fn get(service: &KeyManagementService, path: &str) -> Answer {
    send(service, Method::GET, path, Some("org_demo"), None, "").await
}

async fn post(service: &KeyManagementService, path: &str, body: Value) -> Answer {
    send(
        service,
        Method::POST,
        path,
        Some("org_demo"),
        Some("application/json"),
        &body.to_string(),
    )
    .await
}

async fn key_count(service: &KeyManagementService) -> usize {
    get(service, "/keys").await.body["data"]["keys"]
        .as_array()
        .unwrap()
        .len()
}

/// `GET /deprecated-calls` as its document says: declared deprecations first (with no key
/// when none called them), then a target counted but no longer declared.
#[tokio::test]
async fn deprecated_calls_list_the_declared_deprecations_and_what_else_was_counted() {
    use partner_api::store::{DeprecatedCallCount, DeprecatedCallStore};
    let store = store();
    let key_id = get(&KeyManagementService::new(store.clone()), "/keys")
        .await
        .body["data"]["keys"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let now = partner_api::Timestamp::now();
    store
        .record_deprecated_calls(&[DeprecatedCallCount {
            key_id: key_id.clone(),
            day: now,
            target: "/events?types".to_owned(),
            calls: 4,
            last_call_at: now,
        }])
        .await
        .unwrap();
    let service = KeyManagementService::new(store.clone())
        .with_deprecated_calls(store.clone())
        .with_deprecation("/me=2026-01-01,sunset=2027-01-01".parse().unwrap());
    let answer = get(&service, "/deprecated-calls").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
    let listed = &answer.body["data"]["deprecations"];
    assert_eq!(listed[0]["target"], "/me");
    assert_eq!(listed[0]["sunsetOn"], "2027-01-01");
    assert_eq!(listed[0]["keys"], json!([]));
    assert_eq!(listed[1]["target"], "/events?types");
    assert_eq!(listed[1]["declared"], false);
    assert_eq!(listed[1]["parameter"], "types");
    assert_eq!(listed[1]["deprecatedOn"], Value::Null);
    assert_eq!(
        listed[1]["keys"],
        json!([{"keyId": key_id, "calls": 4, "lastCallAt": now}])
    );
}

#[tokio::test]
async fn the_plaintext_is_in_the_one_response_that_created_it() {
    let service = KeyManagementService::new(store());
    let listed = get(&service, "/keys").await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(
        listed.body["data"]["keys"].as_array().unwrap().len(),
        2,
        "the seed's keys of org_demo"
    );
    let created = post(
        &service,
        "/keys",
        json!({"label": "CI", "environment": "test", "expiresAt": "2099-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED);
    let key = created.body["data"]["key"].as_str().unwrap().to_owned();
    let record = &created.body["data"]["record"];
    assert_eq!(record["label"], "CI");
    assert_eq!(record["environment"], "test");
    assert_eq!(record["expiresAt"], "2099-01-01T00:00:00.000Z");
    let id = record["id"].as_str().unwrap().to_owned();
    let shown = get(&service, &format!("/keys/{id}")).await;
    assert_eq!(shown.body["data"]["record"], *record);
    let rolled = post(
        &service,
        &format!("/keys/{id}/roll"),
        json!({"overlapSeconds": 60}),
    )
    .await;
    assert_eq!(rolled.status, StatusCode::CREATED);
    let new_key = rolled.body["data"]["key"].as_str().unwrap().to_owned();
    assert_ne!(new_key, key);
    let revoked = post(&service, &format!("/keys/{id}/revoke"), json!({})).await;
    assert_eq!(revoked.status, StatusCode::OK);
    assert!(revoked.body["data"]["record"]["revokedAt"].is_string());
    let all = get(&service, "/keys").await;
    assert_eq!(all.body["data"]["keys"].as_array().unwrap().len(), 4);
    for answer in [&listed, &shown, &revoked, &all] {
        assert!(
            !answer.text.contains(&key) && !answer.text.contains(&new_key),
            "{}",
            answer.text
        );
    }
    let head = send(&service, Method::HEAD, "/keys", Some("org_demo"), None, "").await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.text.is_empty());
}

#[tokio::test]
async fn without_an_organization_from_the_host_nothing_is_answered() {
    let service = KeyManagementService::new(store());
    for (method, path, body) in [
        (Method::GET, "/keys", ""),
        (Method::POST, "/keys", r#"{"environment":"live"}"#),
        (Method::GET, "/keys/key_1", ""),
        (Method::POST, "/keys/key_1/revoke", "{}"),
        (Method::POST, "/keys/key_1/roll", r#"{"overlapSeconds":0}"#),
    ] {
        let answer = send(&service, method, path, None, Some("application/json"), body).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "{path}");
    }
    assert_eq!(key_count(&service).await, 2, "nothing changed");
    let document = send(&service, Method::GET, "/openapi.json", None, None, "").await;
    assert_eq!(document.status, StatusCode::OK);
    assert_eq!(document.body["openapi"], "3.1.0");
}

#[tokio::test]
async fn state_changes_need_json_and_pass_the_hosts_csrf_check() {
    let token_checked = KeyManagementService::new(store()).with_csrf_check(|parts| {
        parts
            .headers
            .get("x-csrf-token")
            .is_some_and(|token| token == "t0k3n")
    });
    let body = r#"{"environment":"live"}"#;
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
    ] {
        let answer = send(
            &token_checked,
            Method::POST,
            "/keys",
            Some("org_demo"),
            content_type,
            body,
        )
        .await;
        assert_eq!(
            answer.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{content_type:?}"
        );
    }
    let answer = send(
        &token_checked,
        Method::POST,
        "/keys",
        Some("org_demo"),
        Some("application/json"),
        body,
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(
        key_count(&token_checked).await,
        2,
        "refusals change nothing"
    );
    let mut request = Request::post("/keys")
        .header("content-type", "application/json; charset=utf-8")
        .header("x-csrf-token", "t0k3n")
        .body(Full::new(Bytes::from(body)))
        .unwrap();
    request
        .extensions_mut()
        .insert(ActingOrganization::new("org_demo"));
    let response = token_checked.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::CREATED);
    // The service answers no CORS preflight and sends no CORS header.
    let preflight = send(
        &token_checked,
        Method::OPTIONS,
        "/keys",
        Some("org_demo"),
        None,
        "",
    )
    .await;
    assert_eq!(preflight.status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(!preflight
        .headers
        .contains_key("access-control-allow-origin"));
}

#[tokio::test]
async fn bad_inputs_get_clear_errors_and_change_nothing() {
    let store = store();
    let service = KeyManagementService::new(store.clone());
    let other = {
        let mut request = Request::post("/keys")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(
                r#"{"environment":"live","label":"Other's"}"#,
            )))
            .unwrap();
        request
            .extensions_mut()
            .insert(ActingOrganization::new("org_other"));
        let response = service.clone().oneshot(request).await.unwrap();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice::<Value>(&bytes).unwrap()["data"]["record"]["id"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let own = post(
        &service,
        "/keys",
        json!({"environment": "live", "label": "Own"}),
    )
    .await
    .body["data"]["record"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let revoked = post(&service, "/keys", json!({"environment": "live"}))
        .await
        .body["data"]["record"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    post(&service, &format!("/keys/{revoked}/revoke"), json!({})).await;
    let before = get(&service, "/keys").await.body;

    let long_label = "x".repeat(101);
    let cases: Vec<(Method, String, Option<&str>, String, StatusCode)> = vec![
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            "{\"environment\": ".into(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            "".into(),
            StatusCode::BAD_REQUEST,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!({"environment": "prod"}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        // serde would read a struct from an array of its fields: every body is an object.
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!(["Label", "live", null]).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            format!("/keys/{own}/revoke"),
            Some("application/json"),
            "[]".into(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            format!("/keys/{own}/roll"),
            Some("application/json"),
            "[60]".into(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!({"label": "x"}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!({"environment": "live", "owner": "me"}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!({"environment": "live", "expiresAt": "2001-01-01T00:00:00Z"}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!({"environment": "live", "expiresAt": "tomorrow"}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!({"environment": "live", "label": long_label}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!({"environment": "live", "label": "a\u{7}b"}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            json!(["live"]).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            "/keys".into(),
            Some("application/json"),
            format!(
                "{{\"environment\":\"live\",\"label\":\"{}\"}}",
                "y".repeat(20_000)
            ),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            Method::GET,
            "/keys/424242".into(),
            None,
            "".into(),
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            format!("/keys/{other}"),
            None,
            "".into(),
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            format!("/keys/{other}/revoke"),
            Some("application/json"),
            "{}".into(),
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            format!("/keys/{other}/roll"),
            Some("application/json"),
            json!({"overlapSeconds": 0}).to_string(),
            StatusCode::NOT_FOUND,
        ),
        (
            Method::POST,
            format!("/keys/{own}/revoke"),
            Some("application/json"),
            json!({"now": true}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            format!("/keys/{own}/roll"),
            Some("application/json"),
            json!({"overlapSeconds": -1}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            format!("/keys/{own}/roll"),
            Some("application/json"),
            json!({"overlapSeconds": 40_000_000}).to_string(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            format!("/keys/{own}/roll"),
            Some("application/json"),
            "{}".into(),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            Method::POST,
            format!("/keys/{revoked}/roll"),
            Some("application/json"),
            json!({"overlapSeconds": 60}).to_string(),
            StatusCode::CONFLICT,
        ),
        (
            Method::DELETE,
            format!("/keys/{own}"),
            None,
            "".into(),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::GET,
            format!("/keys/{own}/revoke"),
            None,
            "".into(),
            StatusCode::METHOD_NOT_ALLOWED,
        ),
        (
            Method::GET,
            "/keys/a%20b".into(),
            None,
            "".into(),
            StatusCode::NOT_FOUND,
        ),
        (
            Method::GET,
            "/nothing".into(),
            None,
            "".into(),
            StatusCode::NOT_FOUND,
        ),
    ];
    for (method, path, content_type, body, want) in cases {
        let answer = send(
            &service,
            method.clone(),
            &path,
            Some("org_demo"),
            content_type,
            &body,
        )
        .await;
        assert_eq!(
            answer.status, want,
            "{method} {path} {body:.80}: {}",
            answer.text
        );
        if want == StatusCode::METHOD_NOT_ALLOWED {
            assert!(answer.headers.contains_key("allow"));
        }
        assert!(!answer.text.contains("pk_"), "{}", answer.text);
    }
    assert_eq!(
        get(&service, "/keys").await.body,
        before,
        "no refusal changed anything"
    );
    // The other organization's key is as it was.
    use partner_api::store::KeyManager;
    let theirs = store.get("org_other", &other).await.unwrap();
    assert!(theirs.revoked_at.is_none() && theirs.expires_at.is_none());
}

#[tokio::test]
async fn a_prefix_serves_a_host_that_does_not_strip_its_mount() {
    let service = KeyManagementService::new(store()).with_prefix("/settings/partner-api/api/");
    let mut request = Request::get("/settings/partner-api/api/keys")
        .body(Full::new(Bytes::new()))
        .unwrap();
    request
        .extensions_mut()
        .insert(ActingOrganization::new(Arc::<str>::from("org_demo")));
    let response = service.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut outside = Request::get("/keys").body(Full::new(Bytes::new())).unwrap();
    outside
        .extensions_mut()
        .insert(ActingOrganization::new("org_demo"));
    assert_eq!(
        service.oneshot(outside).await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn rolls_keep_or_choose_a_lifetime_and_never_revive_a_key() {
    use partner_api::store::{KeyManager, KeyPolicy, NewKey};
    let store = store();
    let service = KeyManagementService::new(store.clone());
    let in_a_day =
        partner_api::Timestamp::now().saturating_add(std::time::Duration::from_secs(86_400));
    let issued = store
        .issue(
            "org_demo",
            NewKey::new(partner_api::key::KeyEnvironment::Live).with_expires_at(in_a_day),
        )
        .await
        .unwrap();
    let id = issued.record().id.clone();
    let rolled = post(
        &service,
        &format!("/keys/{id}/roll"),
        json!({"overlapSeconds": 0}),
    )
    .await;
    assert_eq!(rolled.status, StatusCode::CREATED, "{}", rolled.text);
    let record = &rolled.body["data"]["record"];
    // The day from the key's creation, rounded to whole seconds as the store rounds it: the
    // test's clock read before the issue, so the day is not 86,400 s when the issue waited.
    let lifetime = in_a_day
        .duration_since(issued.record().created_at)
        .unwrap()
        .as_millis()
        .saturating_add(500)
        / 1000;
    assert!((86_399..=86_400).contains(&lifetime), "{lifetime}");
    assert_eq!(
        record["lifetimeSeconds"], lifetime as u64,
        "{}",
        rolled.text
    );
    assert!(record["expiresAt"].is_string());
    let successor = record["id"].as_str().unwrap().to_owned();
    let chosen = post(
        &service,
        &format!("/keys/{successor}/roll"),
        json!({"overlapSeconds": 0, "expiresInSeconds": 600}),
    )
    .await;
    assert_eq!(chosen.status, StatusCode::CREATED, "{}", chosen.text);
    assert_eq!(chosen.body["data"]["record"]["lifetimeSeconds"], 600);
    // The first key was revoked by its roll without overlap ("rolled"): rolling it again is
    // refused, in the service's words.
    let first = get(&service, &format!("/keys/{id}")).await;
    assert_eq!(
        first.body["data"]["record"]["revokedReason"], "rolled",
        "{}",
        first.text
    );
    let again = post(
        &service,
        &format!("/keys/{id}/roll"),
        json!({"overlapSeconds": 60}),
    )
    .await;
    assert_eq!(again.status, StatusCode::CONFLICT, "{}", again.text);
    assert_eq!(
        again.body["error"]["message"],
        "a revoked key cannot be rolled"
    );
    for bad in [
        json!({"overlapSeconds": 0, "expiresInSeconds": 0}),
        json!({"overlapSeconds": 0, "expiresInSeconds": -5}),
        json!({"overlapSeconds": 0, "expiresInSeconds": null}),
    ] {
        let refused = post(&service, &format!("/keys/{successor}/roll"), bad).await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            refused.text
        );
    }
    // The policy: read by the page, set by the operator, obeyed with 422 and 409.
    let policy = get(&service, "/policy").await;
    assert_eq!(policy.status, StatusCode::OK);
    assert_eq!(
        policy.body,
        json!({"data": {"policy": {"maxKeyLifetimeSeconds": null, "maxActiveKeys": 100, "maxWebhookEndpoints": 20, "defaultApiVersion": null}}})
    );
    store
        .set_key_policy(
            "org_demo",
            KeyPolicy::new()
                .with_max_lifetime(Some(std::time::Duration::from_secs(3_600)))
                .with_max_active_keys(2),
        )
        .await
        .unwrap();
    let policy = get(&service, "/policy").await;
    assert_eq!(
        policy.body["data"]["policy"]["maxKeyLifetimeSeconds"],
        3_600
    );
    let forever = post(&service, "/keys", json!({"environment": "live"})).await;
    assert_eq!(
        forever.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        forever.text
    );
    assert!(
        forever.text.contains("must expire within 3600 seconds"),
        "{}",
        forever.text
    );
    let active = store
        .list("org_demo")
        .await
        .unwrap()
        .iter()
        .filter(|record| record.is_active_at(partner_api::Timestamp::now()))
        .count();
    assert!(active >= 2, "{active} active keys");
    let in_an_hour =
        partner_api::Timestamp::now().saturating_add(std::time::Duration::from_secs(1_800));
    let capped = post(
        &service,
        "/keys",
        json!({"environment": "live", "expiresAt": in_an_hour.to_string()}),
    )
    .await;
    assert_eq!(capped.status, StatusCode::CONFLICT, "{}", capped.text);
    assert!(capped.text.contains("active keys"), "{}", capped.text);
}

#[tokio::test]
async fn keys_are_pinned_to_address_ranges_on_issue_and_by_restrict() {
    let store = store();
    let service = KeyManagementService::new(store.clone());
    let api = partner_api::PartnerApi::from_store(store);
    let issued = post(
        &service,
        "/keys",
        json!({"environment": "live", "allowedIps": ["192.0.2.0/24", "2001:db8::1"]}),
    )
    .await;
    assert_eq!(issued.status, StatusCode::CREATED, "{}", issued.text);
    let record = &issued.body["data"]["record"];
    assert_eq!(
        record["allowedIps"],
        json!(["192.0.2.0/24", "2001:db8::1/128"])
    );
    assert!(record["revokedReason"].is_null() && record["leak"].is_null());
    let key = issued.body["data"]["key"].as_str().unwrap().to_owned();
    let id = record["id"].as_str().unwrap().to_owned();
    let me_from = |address: &str| {
        let mut request = http::Request::get("/v1/me")
            .header("authorization", format!("Bearer {key}"))
            .body(())
            .unwrap();
        request
            .extensions_mut()
            .insert(partner_api::PeerAddr(std::net::SocketAddr::new(
                address.parse().unwrap(),
                1234,
            )));
        let api = api.clone();
        async move { api.oneshot(request).await.unwrap().status() }
    };
    assert_eq!(me_from("192.0.2.9").await, StatusCode::OK);
    assert_eq!(me_from("198.51.100.1").await, StatusCode::FORBIDDEN);

    let path = format!("/keys/{id}/restrict");
    let lifted = post(&service, &path, json!({"allowedIps": []})).await;
    assert_eq!(lifted.status, StatusCode::OK, "{}", lifted.text);
    assert_eq!(lifted.body["data"]["record"]["allowedIps"], json!([]));
    assert_eq!(me_from("198.51.100.1").await, StatusCode::OK);

    // Bad ranges are a 422 that names them, and change nothing.
    let before = get(&service, &format!("/keys/{id}")).await.body;
    let too_many: Vec<String> = (0..101).map(|n| format!("10.0.0.{n}")).collect();
    for (body, fragment) in [
        (json!({"allowedIps": ["10.1.2.3/8"]}), "10.0.0.0/8"),
        (json!({"allowedIps": ["localhost"]}), "localhost"),
        (json!({"allowedIps": ["10.0.0.0/33"]}), "10.0.0.0/33"),
        (json!({"allowedIps": too_many}), "at most 100"),
        (json!({"allowedIps": "10.0.0.0/8"}), "sequence"),
        (json!({"allowedIps": [7]}), "string"),
        (json!({}), "allowedIps"),
        (json!({"allowedIps": [], "other": 1}), "other"),
    ] {
        let refused = post(&service, &path, body.clone()).await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            refused.text
        );
        assert!(refused.text.contains(fragment), "{body}: {}", refused.text);
    }
    let keys_before = key_count(&service).await;
    let issue_refused = post(
        &service,
        "/keys",
        json!({"environment": "live", "allowedIps": ["10.1.2.3/8"]}),
    )
    .await;
    assert_eq!(issue_refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        key_count(&service).await,
        keys_before,
        "a refused issue makes no key"
    );
    assert_eq!(get(&service, &format!("/keys/{id}")).await.body, before);
    let unknown = post(
        &service,
        "/keys/key_999999/restrict",
        json!({"allowedIps": []}),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    let wrong_method = get(&service, &path).await;
    assert_eq!(wrong_method.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(wrong_method.headers["allow"], "POST");
}

#[cfg(feature = "webhooks")]
#[tokio::test]
async fn webhook_endpoints_are_managed_through_the_documented_routes() {
    use partner_api::webhooks::{ClaimRequest, WebhookOutbox};
    let memory = store();
    let without = KeyManagementService::new(memory.clone());
    assert_eq!(
        get(&without, "/webhooks").await.status,
        StatusCode::NOT_FOUND
    );
    let document = send(&without, Method::GET, "/openapi.json", None, None, "").await;
    assert!(
        document.body["paths"]["/webhooks"].is_null(),
        "a host without webhooks documents them"
    );

    let service = KeyManagementService::new(memory.clone()).with_webhooks(memory.clone());
    let document = send(&service, Method::GET, "/openapi.json", None, None, "").await;
    assert!(!document.body["paths"]["/webhooks"].is_null());
    assert_eq!(
        get(&service, "/webhooks").await.body,
        json!({"data": {"endpoints": []}})
    );

    let added = post(&service, "/webhooks", json!({"url": "https://partner.example/hooks", "events": ["order.created"], "description": "ERP"})).await;
    assert_eq!(added.status, StatusCode::CREATED, "{}", added.text);
    let endpoint = &added.body["data"]["endpoint"];
    let id = endpoint["id"].as_str().unwrap().to_owned();
    let secret = endpoint["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"));
    let listed = get(&service, "/webhooks").await;
    assert!(!listed.text.contains(&secret), "the list shows the secret");
    assert_eq!(listed.body["data"]["endpoints"][0]["id"], id.as_str());
    assert_eq!(
        get(&service, &format!("/webhooks/{id}")).await.body["data"]["endpoint"]["url"],
        "https://partner.example/hooks"
    );
    // The newest API version by default; another on request, or by a pin (audited); a
    // version not offered is a 422 that lists those offered.
    assert_eq!(endpoint["apiVersion"], "2026-12-01");
    let older = post(
        &service,
        "/webhooks",
        json!({"url": "https://partner.example/older", "apiVersion": "2026-11-27"}),
    )
    .await;
    assert_eq!(older.status, StatusCode::CREATED, "{}", older.text);
    let older_id = older.body["data"]["endpoint"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(older.body["data"]["endpoint"]["apiVersion"], "2026-11-27");
    assert!(endpoint["providers"].is_null(), "{endpoint}");
    // Limited to providers: kept sorted, each once.
    let limited = post(
        &service,
        "/webhooks",
        json!({"url": "https://partner.example/meta", "providers": ["meta", "google", "meta"]}),
    )
    .await;
    assert_eq!(limited.status, StatusCode::CREATED, "{}", limited.text);
    assert_eq!(
        limited.body["data"]["endpoint"]["providers"],
        json!(["google", "meta"])
    );
    let limited_id = limited.body["data"]["endpoint"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        post(
            &service,
            &format!("/webhooks/{limited_id}/remove"),
            json!({})
        )
        .await
        .status,
        StatusCode::OK
    );
    let pinned = post(
        &service,
        &format!("/webhooks/{older_id}/api-version"),
        json!({"apiVersion": "2026-11-28"}),
    )
    .await;
    assert_eq!(pinned.status, StatusCode::OK, "{}", pinned.text);
    assert_eq!(pinned.body["data"]["endpoint"]["apiVersion"], "2026-11-28");
    let query = partner_api::store::AuditQuery {
        limit: 10,
        action: Some("webhook.api_version_pinned".parse().unwrap()),
        ..Default::default()
    };
    let entries = partner_api::store::AuditLog::audit_entries(&memory, "org_demo", &query)
        .await
        .unwrap()
        .entries;
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(
        entries[0].detail.as_deref(),
        Some("2026-11-27 to 2026-11-28")
    );
    for (path, body) in [
        (
            "/webhooks".to_owned(),
            json!({"url": "https://partner.example/x", "apiVersion": "2020-01-01"}),
        ),
        (
            format!("/webhooks/{older_id}/api-version"),
            json!({"apiVersion": "v2"}),
        ),
        (format!("/webhooks/{older_id}/api-version"), json!({})),
    ] {
        let refused = post(&service, &path, body.clone()).await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{body}: {}",
            refused.text
        );
        assert!(
            refused.text.contains("2026-11-27") || body == json!({}),
            "{}",
            refused.text
        );
    }
    assert_eq!(
        post(
            &service,
            "/webhooks/99999/api-version",
            json!({"apiVersion": "2026-11-28"})
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        post(&service, &format!("/webhooks/{older_id}/remove"), json!({}))
            .await
            .status,
        StatusCode::OK
    );

    // Every bad input: a clear error, the right status, nothing changed.
    for (body, status) in [
        (
            json!({"url": "ftp://partner.example/"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"url": "https://u:p@partner.example/"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"url": "https://partner.example/", "events": ["order.exploded"]}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"url": "https://partner.example/", "extra": 1}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (json!({}), StatusCode::UNPROCESSABLE_ENTITY),
        (
            json!({"url": "https://partner.example/", "providers": []}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"url": "https://partner.example/", "providers": ["a\u{1}b"]}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            json!({"url": "https://partner.example/", "providers": "meta"}),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let refused = post(&service, "/webhooks", body.clone()).await;
        assert_eq!(refused.status, status, "{body}: {}", refused.text);
    }
    let not_json = send(
        &service,
        Method::POST,
        "/webhooks",
        Some("org_demo"),
        Some("application/json"),
        "{",
    )
    .await;
    assert_eq!(not_json.status, StatusCode::BAD_REQUEST);
    let form = send(
        &service,
        Method::POST,
        "/webhooks",
        Some("org_demo"),
        Some("text/plain"),
        "{}",
    )
    .await;
    assert_eq!(form.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    let unsigned = send(&service, Method::GET, "/webhooks", None, None, "").await;
    assert_eq!(unsigned.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        send(
            &service,
            Method::DELETE,
            &format!("/webhooks/{id}"),
            Some("org_demo"),
            None,
            ""
        )
        .await
        .status,
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        get(&service, "/webhooks").await.body["data"]["endpoints"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Another organization's endpoint is not found.
    let other = send(
        &service,
        Method::GET,
        &format!("/webhooks/{id}"),
        Some("org_other"),
        None,
        "",
    )
    .await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);

    let test = post(&service, &format!("/webhooks/{id}/test"), json!({})).await;
    assert_eq!(test.status, StatusCode::ACCEPTED);
    let message_id = test.body["data"]["messageId"].as_str().unwrap().to_owned();
    // A worker's attempt, so that attempts has something to list.
    let claimed = memory
        .claim(&ClaimRequest::new(
            10,
            10,
            std::time::Duration::from_secs(60),
        ))
        .await
        .unwrap();
    let mut attempt = partner_api::webhooks::FinishedAttempt::new(
        partner_api::webhooks::AttemptOutcome::Failed,
        partner_api::Timestamp::now(),
        std::time::Duration::from_millis(12),
    );
    attempt.response_status = Some(503);
    memory.finish(&claimed[0], &attempt).await.unwrap();
    let attempts = get(&service, &format!("/webhooks/{id}/attempts")).await;
    assert_eq!(
        attempts.body["data"]["attempts"][0]["messageId"],
        message_id.as_str()
    );
    assert_eq!(attempts.body["data"]["attempts"][0]["responseStatus"], 503);
    let retried = post(
        &service,
        &format!("/webhooks/{id}/retry"),
        json!({"messageId": message_id}),
    )
    .await;
    assert_eq!(retried.status, StatusCode::ACCEPTED);
    assert_eq!(
        post(
            &service,
            &format!("/webhooks/{id}/retry"),
            json!({"messageId": "msg_nope"})
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
    let recovered = post(
        &service,
        &format!("/webhooks/{id}/recover"),
        json!({"since": "2020-01-01T00:00:00Z"}),
    )
    .await;
    assert_eq!(recovered.body["data"]["recovered"], 0);
    assert_eq!(
        post(
            &service,
            &format!("/webhooks/{id}/recover"),
            json!({"since": "yesterday"})
        )
        .await
        .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    let rotated = post(
        &service,
        &format!("/webhooks/{id}/rotate"),
        json!({"overlapSeconds": 3600}),
    )
    .await;
    let new_secret = rotated.body["data"]["endpoint"]["secret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    assert_eq!(
        post(
            &service,
            &format!("/webhooks/{id}/rotate"),
            json!({"overlapSeconds": 40_000_000})
        )
        .await
        .status,
        StatusCode::UNPROCESSABLE_ENTITY
    );

    let disabled = post(&service, &format!("/webhooks/{id}/disable"), json!({})).await;
    assert_eq!(disabled.body["data"]["endpoint"]["enabled"], false);
    assert_eq!(
        post(&service, &format!("/webhooks/{id}/test"), json!({}))
            .await
            .status,
        StatusCode::CONFLICT
    );
    let enabled = post(&service, &format!("/webhooks/{id}/enable"), json!({})).await;
    assert_eq!(enabled.body["data"]["endpoint"]["enabled"], true);
    let removed = post(&service, &format!("/webhooks/{id}/remove"), json!({})).await;
    assert_eq!(removed.body, json!({"data": {"removed": id}}));
    assert_eq!(
        get(&service, &format!("/webhooks/{id}")).await.status,
        StatusCode::NOT_FOUND
    );
}

/// Test events, retries and recoveries queue deliveries every organization shares: past its
/// budget an organization gets 429 with `Retry-After`, and another organization does not.
#[cfg(feature = "webhooks")]
#[tokio::test]
async fn webhook_actions_that_queue_messages_are_limited_per_organization() {
    let memory = store();
    let service = KeyManagementService::new(memory.clone())
        .with_webhooks(memory.clone())
        .with_webhook_action_limit(
            std::time::Duration::from_secs(60),
            std::num::NonZeroU32::new(3).unwrap(),
        );
    webhook_actions_are_limited(&service, 3).await;
}

/// The same on PostgreSQL, with the default burst of 10.
#[cfg(all(feature = "webhooks", feature = "postgres"))]
#[tokio::test]
async fn webhook_actions_that_queue_messages_are_limited_per_organization_on_postgres() {
    crate::common::needs::needs!(Postgres);
    let store =
        partner_api::PgStore::connect_lazy(&crate::common::pg::fresh_database().await).unwrap();
    store.migrate().await.unwrap();
    store.load_seed(&Seed::demo()).await.unwrap();
    // A period no run comes near, so no action is refilled half-way on a loaded machine.
    let service = KeyManagementService::new(store.clone())
        .with_webhooks(store)
        .with_webhook_action_limit(
            std::time::Duration::from_secs(60),
            std::num::NonZeroU32::new(10).unwrap(),
        );
    webhook_actions_are_limited(&service, 10).await;
}

/// The same over sockets, through a host process that mounts the management API (the
/// Settings example, signed in as `org_demo`): bursts of 10, then 429 with `Retry-After`.
#[cfg(feature = "webhooks")]
#[tokio::test]
async fn webhook_actions_are_limited_through_a_host_over_sockets() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    crate::common::needs::needs!(Examples);
    let mut host = crate::common::Process::spawn_example(
        "settings",
        &["--listen", "127.0.0.1:0", "--sign-in-as", "org_demo"],
    );
    let address = host.address().await;
    // One request on a connection of its own: the status, the headers' text and the body.
    let post = |path: String, body: Value| async move {
        let body = body.to_string();
        let request = format!(
            "POST /settings/partner-api/api{path} HTTP/1.1\r\nhost: x\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        let status: u16 = head[9..12].parse().unwrap();
        (status, head.to_lowercase(), body.to_owned())
    };
    let (status, _, body) = post(
        "/webhooks".to_owned(),
        json!({"url": "https://partner.example/hooks"}),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    // The body may be chunked: the id is the first "id" member's value.
    let id = body
        .split("\"id\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_owned();
    for _ in 0..10 {
        let (status, _, body) = post(format!("/webhooks/{id}/test"), json!({})).await;
        assert_eq!(status, 202, "{body}");
    }
    let (status, head, body) = post(format!("/webhooks/{id}/test"), json!({})).await;
    assert_eq!(status, 429, "{body}");
    let wait: u64 = head
        .lines()
        .find_map(|line| line.strip_prefix("retry-after:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((1..=6).contains(&wait), "Retry-After: {wait}");
}

/// `burst` test events of `org_demo` are queued; then a test, a retry and a recovery are
/// refused with 429 and `Retry-After`; reads and another organization are not.
#[cfg(feature = "webhooks")]
async fn webhook_actions_are_limited(service: &KeyManagementService, burst: usize) {
    let add = |organization: &'static str| {
        let service = service.clone();
        async move {
            let added = send(
                &service,
                Method::POST,
                "/webhooks",
                Some(organization),
                Some("application/json"),
                &json!({"url": "https://partner.example/hooks"}).to_string(),
            )
            .await;
            assert_eq!(added.status, StatusCode::CREATED, "{}", added.text);
            added.body["data"]["endpoint"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let (demo, other) = (add("org_demo").await, add("org_other").await);
    let action = |organization: &'static str, path: String, body: Value| {
        let service = service.clone();
        async move {
            send(
                &service,
                Method::POST,
                &path,
                Some(organization),
                Some("application/json"),
                &body.to_string(),
            )
            .await
        }
    };
    for _ in 0..burst {
        let queued = action("org_demo", format!("/webhooks/{demo}/test"), json!({})).await;
        assert_eq!(queued.status, StatusCode::ACCEPTED, "{}", queued.text);
    }
    for (path, body) in [
        (format!("/webhooks/{demo}/test"), json!({})),
        (
            format!("/webhooks/{demo}/retry"),
            json!({"messageId": "msg_0123456789abcdef"}),
        ),
        (
            format!("/webhooks/{demo}/recover"),
            json!({"since": "2026-01-01T00:00:00Z"}),
        ),
    ] {
        let refused = action("org_demo", path.clone(), body).await;
        assert_eq!(
            refused.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{path}: {}",
            refused.text
        );
        let wait: u64 = refused.headers["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&wait), "Retry-After: {wait}");
        assert!(refused.body["error"]["message"].is_string());
    }
    // Reading and other changes are not counted; another organization has its own budget.
    assert_eq!(
        get(service, &format!("/webhooks/{demo}")).await.status,
        StatusCode::OK
    );
    let disabled = action("org_demo", format!("/webhooks/{demo}/disable"), json!({})).await;
    assert_eq!(disabled.status, StatusCode::OK, "{}", disabled.text);
    let theirs = action("org_other", format!("/webhooks/{other}/test"), json!({})).await;
    assert_eq!(theirs.status, StatusCode::ACCEPTED, "{}", theirs.text);
}

/// A host's own key table that implements only [`KeyManager`]'s six required methods: the
/// suite of the required methods passes, the service serves its keys and answers what it
/// lacks with a documented 404, and `/abilities` says so (the Settings page hides it).
mod core_only {
    use super::*;
    use async_trait::async_trait;
    use partner_api::key::AllowedIps;
    use partner_api::store::{IssuedKey, KeyManager, KeyRecord, NewKey, RollKey};
    #[cfg(feature = "testing")]
    use partner_api::{store::KeyAbility, testing::StoreFixtures, Order, Organization, Timestamp};
    use partner_api::{KeyDigest, KeyLookup, KeyStore, OrderPage, OrderStore, StoreError};

    /// The six required methods, over a memory store standing in for the host's table.
    #[derive(Clone)]
    struct HostKeys(MemoryStore);

    #[async_trait]
    impl KeyManager for HostKeys {
        async fn issue(&self, org: &str, new: NewKey) -> Result<IssuedKey, StoreError> {
            self.0.issue(org, new).await
        }
        async fn list(&self, org: &str) -> Result<Vec<KeyRecord>, StoreError> {
            self.0.list(org).await
        }
        async fn get(&self, org: &str, id: &str) -> Result<KeyRecord, StoreError> {
            self.0.get(org, id).await
        }
        async fn revoke(&self, org: &str, id: &str) -> Result<KeyRecord, StoreError> {
            self.0.revoke(org, id).await
        }
        async fn restrict(
            &self,
            org: &str,
            id: &str,
            allowed_ips: AllowedIps,
        ) -> Result<KeyRecord, StoreError> {
            self.0.restrict(org, id, allowed_ips).await
        }
        async fn roll(&self, org: &str, id: &str, roll: RollKey) -> Result<IssuedKey, StoreError> {
            self.0.roll(org, id, roll).await
        }
    }

    #[async_trait]
    impl KeyStore for HostKeys {
        async fn lookup(&self, digest: &KeyDigest) -> Result<KeyLookup, StoreError> {
            self.0.lookup(digest).await
        }
    }

    #[async_trait]
    impl OrderStore for HostKeys {
        async fn orders(
            &self,
            org: &str,
            query: &partner_api::store::OrderQuery,
        ) -> Result<OrderPage, StoreError> {
            self.0.orders(org, query).await
        }
    }

    #[cfg(feature = "testing")]
    #[async_trait]
    impl StoreFixtures for HostKeys {
        type Store = Self;
        type Orders = Self;
        fn store(&self) -> &Self {
            self
        }
        fn order_store(&self) -> &Self {
            self
        }
        async fn add_organization(&self, organization: &Organization) -> Result<(), StoreError> {
            StoreFixtures::add_organization(&self.0, organization).await
        }
        async fn add_key(
            &self,
            key: &str,
            organization_id: &str,
            expires_at: Option<Timestamp>,
        ) -> Result<(), StoreError> {
            StoreFixtures::add_key(&self.0, key, organization_id, expires_at).await
        }
        async fn revoke_key(&self, key: &str) -> Result<(), StoreError> {
            StoreFixtures::revoke_key(&self.0, key).await
        }
        async fn add_orders(&self, org: &str, orders: &[Order]) -> Result<(), StoreError> {
            StoreFixtures::add_orders(&self.0, org, orders).await
        }
        async fn remove_order(&self, org: &str, id: &str) -> Result<(), StoreError> {
            StoreFixtures::remove_order(&self.0, org, id).await
        }
        async fn update_order(&self, org: &str, order: &Order) -> Result<(), StoreError> {
            StoreFixtures::update_order(&self.0, org, order).await
        }
    }

    #[cfg(feature = "testing")]
    #[tokio::test]
    async fn a_store_of_the_six_required_methods_passes_their_suite() {
        let store = HostKeys(MemoryStore::new());
        let report = partner_api::testing::run_key_manager(&store).await;
        report.assert_passed();
        assert!(KeyAbility::ALL
            .iter()
            .all(|ability| !store.supports(*ability)));
        // The ability suites say what is missing.
        let report = partner_api::testing::run_key_policy(&store).await;
        assert_eq!(report.failures().count(), 2, "{report}");
    }

    #[tokio::test]
    async fn the_service_serves_its_keys_and_answers_what_it_lacks_with_404() {
        let service = KeyManagementService::new(HostKeys(store()));
        let abilities = get(&service, "/abilities").await;
        assert_eq!(abilities.status, StatusCode::OK);
        assert_eq!(
            abilities.body,
            json!({"data": {"abilities": {
                "keyPolicy": false, "leakReports": false, "lastUse": false, "apiVersions": false, "apiVersionPreview": false,
                "restrictions": false, "webhooks": false,
                "webhookTestEvents": false, "webhookDeliveryHistory": false, "webhookApiVersions": false,
                "usage": false, "deprecatedCalls": false, "auditLog": false
            }}})
        );
        // Every ability not offered answers alike, and the served document leaves it out.
        for (path, what) in [
            ("/policy", "key policies"),
            ("/usage", "usage"),
            ("/keys/key_1/usage", "usage"),
            ("/deprecated-calls", "deprecated-call counts"),
            ("/audit", "an audit log"),
        ] {
            let answer = get(&service, path).await;
            assert_eq!(
                answer.status,
                StatusCode::NOT_FOUND,
                "{path}: {}",
                answer.text
            );
            assert_eq!(
                answer.body["error"]["message"],
                format!("this host does not offer {what}"),
                "{path}"
            );
        }
        // A key limited to some routes is refused rather than issued with every one, and the
        // route that changes permissions is not offered.
        let limited = post(
            &service,
            "/keys",
            json!({"environment": "live", "permissions": ["events"]}),
        )
        .await;
        assert_eq!(
            limited.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            limited.text
        );
        assert!(limited.body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("keeps no restrictions"));
        let every = post(
            &service,
            "/keys",
            json!({"environment": "live", "permissions": ["orders", "events"]}),
        )
        .await;
        assert_eq!(every.status, StatusCode::CREATED, "{}", every.text);
        let id = every.body["data"]["record"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let change = post(
            &service,
            &format!("/keys/{id}/permissions"),
            json!({"permissions": []}),
        )
        .await;
        assert_eq!(change.status, StatusCode::NOT_FOUND, "{}", change.text);
        assert_eq!(
            change.body["error"]["message"],
            "this host does not offer keys' restrictions"
        );
        let document = get(&service, "/openapi.json").await;
        let paths = document.body["paths"].as_object().unwrap();
        assert!(paths.contains_key("/keys"));
        for path in [
            "/policy",
            "/usage",
            "/keys/{id}/usage",
            "/audit",
            "/keys/{id}/permissions",
        ] {
            assert!(!paths.contains_key(path), "{path}");
        }
        let issued = post(&service, "/keys", json!({"environment": "test"})).await;
        assert_eq!(issued.status, StatusCode::CREATED, "{}", issued.text);
        let id = issued.body["data"]["record"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let listed = get(&service, "/keys").await;
        assert_eq!(listed.status, StatusCode::OK);
        let revoked = post(&service, &format!("/keys/{id}/revoke"), json!({})).await;
        assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.text);
        // The shipped stores offer everything.
        let full = get(&KeyManagementService::new(store()), "/abilities").await;
        assert_eq!(
            full.body["data"]["abilities"],
            json!({
                "keyPolicy": true, "leakReports": true, "lastUse": true, "apiVersions": true, "apiVersionPreview": false,
                "restrictions": true, "webhooks": false,
                "webhookTestEvents": false, "webhookDeliveryHistory": false, "webhookApiVersions": false,
                "usage": false, "deprecatedCalls": false, "auditLog": false
            })
        );
    }
}

/// The organization's cap of webhook endpoints: past it, a documented 409 in the store's
/// words (not the disabled endpoint's).
#[cfg(feature = "webhooks")]
#[tokio::test]
async fn adding_an_endpoint_past_the_cap_is_a_409_that_says_so() {
    let memory = store();
    let service = KeyManagementService::new(memory.clone()).with_webhooks(memory);
    for n in 0..partner_api::store::DEFAULT_MAX_WEBHOOK_ENDPOINTS {
        let url = format!("https://partner.example/hooks/{n}");
        let added = post(&service, "/webhooks", json!({ "url": url })).await;
        assert_eq!(added.status, StatusCode::CREATED, "{}", added.text);
    }
    let refused = post(
        &service,
        "/webhooks",
        json!({"url": "https://partner.example/one-more"}),
    )
    .await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{}", refused.text);
    let message = refused.body["error"]["message"].as_str().unwrap();
    assert!(message.contains("20 webhook endpoints"), "{message}");
}

/// A host's own endpoint table that implements only [`WebhookManager`]'s six required
/// methods: the Webhooks section works, and its optional abilities (test events, the delivery
/// history) answer the documented 404, are left out of the served document, and
/// `/abilities` says so.
#[cfg(feature = "webhooks")]
mod core_webhooks_only {
    use super::*;
    use async_trait::async_trait;
    use partner_api::webhooks::{
        CreatedEndpoint, Endpoint, NewEndpoint, WebhookAbility, WebhookManager,
    };
    use partner_api::StoreError;
    use std::time::Duration;

    /// The six required methods, over a memory store standing in for the host's table.
    struct HostEndpoints(MemoryStore);

    #[async_trait]
    impl WebhookManager for HostEndpoints {
        async fn add_endpoint(
            &self,
            org: &str,
            new: NewEndpoint,
        ) -> Result<CreatedEndpoint, StoreError> {
            self.0.add_endpoint(org, new).await
        }

        async fn endpoints(&self, org: &str) -> Result<Vec<Endpoint>, StoreError> {
            self.0.endpoints(org).await
        }

        async fn endpoint(&self, org: &str, id: &str) -> Result<Endpoint, StoreError> {
            self.0.endpoint(org, id).await
        }

        async fn rotate_secret(
            &self,
            org: &str,
            id: &str,
            overlap: Duration,
        ) -> Result<CreatedEndpoint, StoreError> {
            self.0.rotate_secret(org, id, overlap).await
        }

        async fn set_enabled(
            &self,
            org: &str,
            id: &str,
            enabled: bool,
        ) -> Result<Endpoint, StoreError> {
            self.0.set_enabled(org, id, enabled).await
        }

        async fn remove_endpoint(&self, org: &str, id: &str) -> Result<(), StoreError> {
            self.0.remove_endpoint(org, id).await
        }
    }

    #[tokio::test]
    async fn the_section_works_and_what_it_lacks_answers_404() {
        let memory = store();
        let host = HostEndpoints(memory.clone());
        assert!(WebhookAbility::ALL
            .iter()
            .all(|ability| !host.supports(*ability)));
        let service = KeyManagementService::new(memory).with_webhooks(host);
        let abilities = get(&service, "/abilities").await;
        let abilities = &abilities.body["data"]["abilities"];
        assert_eq!(abilities["webhooks"], true);
        assert_eq!(abilities["webhookTestEvents"], false);
        assert_eq!(abilities["webhookDeliveryHistory"], false);

        let added = post(
            &service,
            "/webhooks",
            json!({"url": "https://hooks.example.com/in"}),
        )
        .await;
        assert_eq!(added.status, StatusCode::CREATED, "{}", added.text);
        let id = added.body["data"]["endpoint"]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let listed = get(&service, "/webhooks").await;
        assert_eq!(listed.status, StatusCode::OK, "{}", listed.text);
        let disabled = post(&service, &format!("/webhooks/{id}/disable"), json!({})).await;
        assert_eq!(disabled.status, StatusCode::OK, "{}", disabled.text);

        let history = "this host does not offer the webhook delivery history";
        for (answer, message) in [
            (
                post(&service, &format!("/webhooks/{id}/test"), json!({})).await,
                "this host does not offer webhook test events",
            ),
            (
                get(&service, &format!("/webhooks/{id}/attempts")).await,
                history,
            ),
            (
                post(
                    &service,
                    &format!("/webhooks/{id}/retry"),
                    json!({"messageId": "msg_1"}),
                )
                .await,
                history,
            ),
            (
                post(
                    &service,
                    &format!("/webhooks/{id}/recover"),
                    json!({"since": "2026-01-01T00:00:00Z"}),
                )
                .await,
                history,
            ),
        ] {
            assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
            assert_eq!(answer.body["error"]["message"], message);
        }
        let document = get(&service, "/openapi.json").await;
        let paths = document.body["paths"].as_object().unwrap();
        assert!(paths.contains_key("/webhooks/{id}/rotate"));
        for path in [
            "/webhooks/{id}/test",
            "/webhooks/{id}/attempts",
            "/webhooks/{id}/retry",
            "/webhooks/{id}/recover",
        ] {
            assert!(!paths.contains_key(path), "{path}");
        }
    }
}

/// A key's API version over HTTP: chosen at issue (a name not offered is a 422 listing the
/// versions), listed, pinned, and an upgrade undone once; the versions listed for the page.
#[tokio::test]
async fn keys_are_issued_at_a_version_pinned_and_rolled_back() {
    let service = KeyManagementService::new(store());
    let versions = get(&service, "/api-versions").await;
    assert_eq!(versions.status, StatusCode::OK, "{}", versions.text);
    assert_eq!(versions.body["data"]["newKeys"], "2026-12-01");
    assert_eq!(
        versions.body["data"]["versions"][2]["version"],
        "2026-11-27"
    );
    let newest = post(&service, "/keys", json!({"environment": "test"})).await;
    assert_eq!(newest.body["data"]["record"]["apiVersion"], "2026-12-01");
    let refused = post(
        &service,
        "/keys",
        json!({"environment": "test", "apiVersion": "2026-11-29"}),
    )
    .await;
    assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        refused.body["error"]["message"],
        "apiVersion must be a version of the API, one of 2026-12-01, 2026-11-28, 2026-11-27"
    );
    let first = post(
        &service,
        "/keys",
        json!({"environment": "test", "apiVersion": "2026-11-27"}),
    )
    .await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    let id = first.body["data"]["record"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(first.body["data"]["record"]["apiVersion"], "2026-11-27");
    let nothing_to_undo = post(
        &service,
        &format!("/keys/{id}/api-version/rollback"),
        json!({}),
    )
    .await;
    assert_eq!(
        nothing_to_undo.status,
        StatusCode::CONFLICT,
        "{}",
        nothing_to_undo.text
    );
    let upgraded = post(
        &service,
        &format!("/keys/{id}/api-version"),
        json!({"apiVersion": "2026-11-28"}),
    )
    .await;
    assert_eq!(upgraded.status, StatusCode::OK, "{}", upgraded.text);
    let record = &upgraded.body["data"]["record"];
    assert_eq!(record["apiVersion"], "2026-11-28");
    assert_eq!(record["apiVersionRollback"]["to"], "2026-11-27");
    let listed = get(&service, "/keys").await;
    assert!(listed.body["data"]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .any(|key| key["id"] == id.as_str() && key["apiVersion"] == "2026-11-28"));
    let bad = post(
        &service,
        &format!("/keys/{id}/api-version"),
        json!({"apiVersion": "latest"}),
    )
    .await;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY);
    let back = post(
        &service,
        &format!("/keys/{id}/api-version/rollback"),
        json!({}),
    )
    .await;
    assert_eq!(back.status, StatusCode::OK, "{}", back.text);
    assert_eq!(back.body["data"]["record"]["apiVersion"], "2026-11-27");
    assert!(back.body["data"]["record"]["apiVersionRollback"].is_null());
    let again = post(
        &service,
        &format!("/keys/{id}/api-version/rollback"),
        json!({}),
    )
    .await;
    assert_eq!(again.status, StatusCode::CONFLICT);
    // Read-only methods are refused on the changes.
    let read = get(&service, &format!("/keys/{id}/api-version")).await;
    assert_eq!(read.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// An upgrade previewed from the organization's own orders and events: each at the key's
/// version and the asked one, with what differs field by field.
#[tokio::test]
async fn an_upgrade_is_previewed_from_the_organizations_own_orders_and_events() {
    let memory = store();
    let page = partner_api::OrderStore::orders(
        &memory,
        "org_demo",
        &partner_api::store::OrderQuery::newest(10),
    )
    .await
    .unwrap();
    let served: Vec<partner_api::Order> = page.orders().iter().map(|o| o.order().clone()).collect();
    let mut order = served[0].clone();
    order.status = "running".into();
    memory.update_order("org_demo", order).unwrap();
    let service = KeyManagementService::new(memory.clone()).with_preview(memory.clone());
    assert_eq!(
        get(&service, "/abilities").await.body["data"]["abilities"]["apiVersionPreview"],
        true
    );
    let first = post(
        &service,
        "/keys",
        json!({"environment": "test", "apiVersion": "2026-11-27"}),
    )
    .await;
    let id = first.body["data"]["record"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let preview = get(
        &service,
        &format!("/keys/{id}/api-version/preview?version=2026-11-28"),
    )
    .await;
    assert_eq!(preview.status, StatusCode::OK, "{}", preview.text);
    let data = &preview.body["data"];
    assert_eq!(data["keyId"], id.as_str());
    assert_eq!(
        (&data["from"], &data["to"]),
        (&json!("2026-11-27"), &json!("2026-11-28"))
    );
    assert_eq!(data["changes"].as_array().unwrap().len(), 1, "{data}");
    let orders = data["orders"].as_array().unwrap();
    assert_eq!(orders.len(), 10, "the first page, at most ten");
    let events = data["events"].as_array().unwrap();
    assert!(!events.is_empty(), "{data}");
    assert!(events
        .iter()
        .all(|event| event["id"].as_str().unwrap().starts_with("evt_")
            && event["type"].as_str().unwrap().starts_with("order.")));
    for item in orders.iter().chain(events) {
        let updated_at = &item["to"]["updatedAt"];
        assert!(updated_at.is_string(), "{item}");
        assert!(item["from"].get("updatedAt").is_none(), "{item}");
        assert_eq!(
            item["differences"],
            json!([{"field": "updatedAt", "change": "added", "to": updated_at}]),
            "{item}"
        );
        let mut without = item["to"].clone();
        without.as_object_mut().unwrap().remove("updatedAt");
        assert_eq!(without, item["from"]);
    }
    // The orders are the organization's first page, newest first.
    assert_eq!(orders[0]["id"], served[0].id.as_str());
    // Down, the same fields removed; the key's own version, nothing.
    let newest = post(&service, "/keys", json!({"environment": "test"})).await;
    let newest_id = newest.body["data"]["record"]["id"].as_str().unwrap();
    let down = get(
        &service,
        &format!("/keys/{newest_id}/api-version/preview?version=2026-11-27"),
    )
    .await;
    assert_eq!(
        down.body["data"]["orders"][0]["differences"][0]["change"],
        "removed"
    );
    let same = get(
        &service,
        &format!("/keys/{newest_id}/api-version/preview?version=2026-12-01"),
    )
    .await;
    assert_eq!(same.body["data"]["changes"], json!([]));
    assert!(same.body["data"]["orders"]
        .as_array()
        .unwrap()
        .iter()
        .all(|order| order["differences"] == json!([])));
    // Bad inputs: the version missing or not offered is a 422 naming the versions; another
    // organization's key, or none, a 404.
    for path in [
        format!("/keys/{id}/api-version/preview"),
        format!("/keys/{id}/api-version/preview?version=2026-12-02"),
        format!("/keys/{id}/api-version/preview?version=latest"),
    ] {
        let refused = get(&service, &path).await;
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        assert!(refused.text.contains("version"), "{}", refused.text);
    }
    let unknown = get(
        &service,
        "/keys/999999/api-version/preview?version=2026-11-28",
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    // Without a preview source, the path is not served.
    let without = KeyManagementService::new(memory.clone());
    assert_eq!(
        get(
            &without,
            &format!("/keys/{id}/api-version/preview?version=2026-11-28")
        )
        .await
        .status,
        StatusCode::NOT_FOUND
    );
}

/// The organization's default version (its key policy's) is what new keys and webhook
/// endpoints get when their admin names none, and what `GET /api-versions` says new keys get.
#[tokio::test]
async fn new_keys_and_endpoints_get_the_organizations_default_version() {
    use partner_api::store::{KeyManager, KeyPolicy};
    let memory = store();
    let service = KeyManagementService::new(memory.clone()).with_webhooks(memory.clone());
    let newest = post(&service, "/keys", json!({"environment": "test"})).await;
    assert_eq!(newest.body["data"]["record"]["apiVersion"], "2026-12-01");
    memory
        .set_key_policy(
            "org_demo",
            KeyPolicy::new().with_default_api_version(Some(partner_api::versions::FIRST)),
        )
        .await
        .unwrap();
    let policy = get(&service, "/policy").await;
    assert_eq!(
        policy.body["data"]["policy"]["defaultApiVersion"],
        "2026-11-27"
    );
    assert_eq!(
        get(&service, "/api-versions").await.body["data"]["newKeys"],
        "2026-11-27"
    );
    let key = post(&service, "/keys", json!({"environment": "test"})).await;
    assert_eq!(key.body["data"]["record"]["apiVersion"], "2026-11-27");
    let named = post(
        &service,
        "/keys",
        json!({"environment": "test", "apiVersion": "2026-11-28"}),
    )
    .await;
    assert_eq!(named.body["data"]["record"]["apiVersion"], "2026-11-28");
    let endpoint = post(
        &service,
        "/webhooks",
        json!({"url": "https://partner.example/default"}),
    )
    .await;
    assert_eq!(endpoint.status, StatusCode::CREATED, "{}", endpoint.text);
    assert_eq!(
        endpoint.body["data"]["endpoint"]["apiVersion"],
        "2026-11-27"
    );
}

#[tokio::test]
async fn keys_are_limited_to_routes_on_issue_and_changed_later() {
    let store = store();
    let service = KeyManagementService::new(store.clone());
    let api = partner_api::PartnerApi::from_store(store.clone()).with_events(store);
    let abilities = get(&service, "/abilities").await;
    assert_eq!(
        abilities.body["data"]["abilities"]["restrictions"],
        json!(true)
    );
    let keys_before = key_count(&service).await;
    let issued = post(
        &service,
        "/keys",
        json!({"environment": "live", "permissions": ["events"]}),
    )
    .await;
    assert_eq!(issued.status, StatusCode::CREATED, "{}", issued.text);
    let record = &issued.body["data"]["record"];
    assert_eq!(record["permissions"], json!(["events"]));
    let key = issued.body["data"]["key"].as_str().unwrap().to_owned();
    let id = record["id"].as_str().unwrap().to_owned();
    let status = |path: &'static str| {
        let request = http::Request::get(path)
            .header("authorization", format!("Bearer {key}"))
            .body(())
            .unwrap();
        let api = api.clone();
        async move { api.oneshot(request).await.unwrap().status() }
    };
    assert_eq!(status("/v1/orders").await, StatusCode::FORBIDDEN);
    assert_eq!(status("/v1/events").await, StatusCode::OK);

    // A name that is no permission is a 422 naming it, and changes nothing.
    for (path, body) in [
        (
            "/keys".to_owned(),
            json!({"environment": "live", "permissions": ["order"]}),
        ),
        (
            format!("/keys/{id}/permissions"),
            json!({"permissions": ["order"]}),
        ),
    ] {
        let refused = post(&service, &path, body).await;
        assert_eq!(refused.status, StatusCode::UNPROCESSABLE_ENTITY, "{path}");
        assert_eq!(
            refused.body["error"]["message"],
            "permissions: \"order\" is not a permission; the permissions are orders and events"
        );
    }
    assert_eq!(key_count(&service).await, keys_before + 1);

    // Changed: every one, then the same again (one audit entry), then none.
    let lifted = post(
        &service,
        &format!("/keys/{id}/permissions"),
        json!({"permissions": ["orders", "events"]}),
    )
    .await;
    assert_eq!(lifted.status, StatusCode::OK, "{}", lifted.text);
    assert_eq!(
        lifted.body["data"]["record"]["permissions"],
        json!(["orders", "events"])
    );
    assert_eq!(status("/v1/orders").await, StatusCode::OK);
    let again = post(
        &service,
        &format!("/keys/{id}/permissions"),
        json!({"permissions": ["events", "orders"]}),
    )
    .await;
    assert_eq!(again.status, StatusCode::OK);
    let none = post(
        &service,
        &format!("/keys/{id}/permissions"),
        json!({"permissions": []}),
    )
    .await;
    assert_eq!(none.body["data"]["record"]["permissions"], json!([]));
    assert_eq!(status("/v1/events").await, StatusCode::FORBIDDEN);
    assert_eq!(status("/v1/me").await, StatusCode::OK);
    let listed = get(&service, "/keys").await;
    assert_eq!(listed.body["data"]["keys"][0]["permissions"], json!([]));
    // Another organization's key, or none, is not found.
    let unknown = post(
        &service,
        "/keys/key_999/permissions",
        json!({"permissions": []}),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);

    // Providers: with every permission (the feed in the key's view) or orders alone, kept
    // sorted once each; bad lists refused naming the rule, lifted with null.
    let with_feed = post(
        &service,
        "/keys",
        json!({"environment": "live", "providers": ["meta"]}),
    )
    .await;
    assert_eq!(with_feed.status, StatusCode::CREATED, "{}", with_feed.text);
    assert_eq!(
        with_feed.body["data"]["record"]["providers"],
        json!(["meta"])
    );
    let limited = post(
        &service,
        "/keys",
        json!({"environment": "live", "permissions": ["orders"], "providers": ["meta", "google"]}),
    )
    .await;
    assert_eq!(limited.status, StatusCode::CREATED, "{}", limited.text);
    assert_eq!(
        limited.body["data"]["record"]["providers"],
        json!(["google", "meta"])
    );
    let limited_id = limited.body["data"]["record"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for providers in [json!([]), json!([""]), json!(["a\u{1}b"])] {
        let refused = post(
            &service,
            &format!("/keys/{limited_id}/providers"),
            json!({ "providers": providers }),
        )
        .await;
        assert_eq!(
            refused.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{}",
            refused.text
        );
        assert!(refused.text.contains("providers: "), "{}", refused.text);
    }
    // The member is required: `null` lifts the limit, a body without it changes nothing.
    let missing = post(
        &service,
        &format!("/keys/{limited_id}/providers"),
        json!({}),
    )
    .await;
    assert!(
        missing.status == StatusCode::BAD_REQUEST
            || missing.status == StatusCode::UNPROCESSABLE_ENTITY,
        "{} {}",
        missing.status,
        missing.text
    );
    assert!(missing.text.contains("providers"), "{}", missing.text);
    let widened = post(
        &service,
        &format!("/keys/{limited_id}/permissions"),
        json!({"permissions": ["orders", "events"]}),
    )
    .await;
    // The feed too, still limited (its view of the feed).
    assert_eq!(widened.status, StatusCode::OK, "{}", widened.text);
    assert_eq!(
        widened.body["data"]["record"]["providers"],
        json!(["google", "meta"])
    );
    let lifted = post(
        &service,
        &format!("/keys/{limited_id}/providers"),
        json!({ "providers": null }),
    )
    .await;
    assert_eq!(lifted.status, StatusCode::OK, "{}", lifted.text);
    assert!(lifted.body["data"]["record"]["providers"].is_null());
}

/// Which permissions a key needs: from its own calls of the last 30 days per route (a call
/// refused for the missing permission counts: the key wanted it), the narrowest set that
/// would have allowed them all, and the permissions it holds and never used; one key or
/// every key not revoked; narrowing to the suggestion leaves nothing unused.
#[tokio::test]
async fn the_permissions_a_key_needs_are_suggested_from_its_calls_of_30_days() {
    use partner_api::store::{UsageCount, UsageOutcome, UsageRoute, UsageStore};
    let memory = store();
    let service = KeyManagementService::new(memory.clone()).with_usage(memory.clone());
    let issue = |body: Value| {
        let service = service.clone();
        async move {
            let issued = post(&service, "/keys", body).await;
            assert_eq!(issued.status, StatusCode::CREATED, "{}", issued.text);
            issued.body["data"]["record"]["id"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let reader = issue(json!({"environment": "live"})).await;
    let refused = issue(json!({"environment": "live", "permissions": ["orders"]})).await;
    let idle = issue(json!({"environment": "live"})).await;
    let revoked = issue(json!({"environment": "live"})).await;
    assert_eq!(
        post(&service, &format!("/keys/{revoked}/revoke"), json!({}))
            .await
            .status,
        StatusCode::OK
    );
    let hour = |hours_ago: i64| {
        let now = partner_api::Timestamp::now()
            .as_datetime()
            .timestamp_millis();
        partner_api::Timestamp::from_unix_millis((now / 3_600_000 - hours_ago) * 3_600_000).unwrap()
    };
    let count = |key: &str, hours_ago, route, outcome, count| UsageCount {
        key_id: key.to_owned(),
        hour: hour(hours_ago),
        route,
        outcome,
        count,
    };
    memory
        .record_usage(&[
            count(&reader, 0, UsageRoute::Orders, UsageOutcome::Ok, 5),
            count(&reader, 0, UsageRoute::Orders, UsageOutcome::NotModified, 2),
            count(&reader, 0, UsageRoute::Me, UsageOutcome::Ok, 1),
            // Hours before the key existed: outside its period (a store keeps what it is
            // given; the suggestion reads from the key's creation).
            count(&reader, 48, UsageRoute::Events, UsageOutcome::Ok, 9),
            count(
                &refused,
                0,
                UsageRoute::Events,
                UsageOutcome::PermissionMissing,
                3,
            ),
            count(&revoked, 0, UsageRoute::Orders, UsageOutcome::Ok, 1),
        ])
        .await
        .unwrap();
    let suggestion = |id: &str| {
        let service = service.clone();
        let path = format!("/keys/{id}/permissions/suggestion");
        async move {
            let answer = get(&service, &path).await;
            assert_eq!(answer.status, StatusCode::OK, "{}", answer.text);
            let mut suggestion = answer.body["data"]["suggestion"].clone();
            assert!(suggestion["from"].as_str().unwrap() < suggestion["to"].as_str().unwrap());
            let object = suggestion.as_object_mut().unwrap();
            object.remove("from");
            object.remove("to");
            suggestion
        }
    };
    assert_eq!(
        suggestion(&reader).await,
        json!({"keyId": reader, "held": ["orders", "events"], "used": {"orders": 7, "events": 0},
               "suggested": ["orders"], "unused": ["events"]})
    );
    assert_eq!(
        suggestion(&refused).await,
        json!({"keyId": refused, "held": ["orders"], "used": {"orders": 0, "events": 3},
               "suggested": ["events"], "unused": ["orders"]})
    );
    assert_eq!(
        suggestion(&idle).await,
        json!({"keyId": idle, "held": ["orders", "events"], "used": {"orders": 0, "events": 0},
               "suggested": [], "unused": ["orders", "events"]})
    );
    // Every key not revoked, in one read.
    let every = get(&service, "/permissions/suggestions").await;
    assert_eq!(every.status, StatusCode::OK, "{}", every.text);
    let listed: Vec<&str> = every.body["data"]["suggestions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|suggestion| suggestion["keyId"].as_str().unwrap())
        .collect();
    assert!(
        [&reader, &refused, &idle]
            .iter()
            .all(|id| listed.contains(&id.as_str())),
        "{listed:?}"
    );
    assert!(!listed.contains(&revoked.as_str()), "{listed:?}");
    // Narrowed to the suggestion: nothing unused.
    let narrowed = post(
        &service,
        &format!("/keys/{reader}/permissions"),
        json!({"permissions": ["orders"]}),
    )
    .await;
    assert_eq!(narrowed.status, StatusCode::OK, "{}", narrowed.text);
    assert_eq!(suggestion(&reader).await["unused"], json!([]));
    // Bad inputs: a query parameter is a 400, another organization's key or none a 404,
    // and a host without usage does not offer suggestions.
    let bad = get(
        &service,
        &format!("/keys/{reader}/permissions/suggestion?from=2026-01-01T00:00:00Z"),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert_eq!(
        get(&service, "/keys/999999/permissions/suggestion")
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    let without_usage = KeyManagementService::new(memory.clone());
    let refused_route = get(&without_usage, "/permissions/suggestions").await;
    assert_eq!(refused_route.status, StatusCode::NOT_FOUND);
}
