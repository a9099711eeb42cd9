//! Deprecations a host declares: the RFC 9745 / 8594 fields and links on every answer a
//! deprecation concerns (2xx, 304 and 4xx, a 401 too), none on the others, the served OpenAPI
//! document marking them, and 410 Gone past an enforced sunset.

use http::{Request, StatusCode};
use partner_api::deprecation::Deprecation;
use partner_api::PartnerApi;
use tower::ServiceExt;

use crate::common::*;

/// The answer to `request`, collected without the document check (a 410 past a sunset is
/// in the served document only).
async fn raw(api: &PartnerApi, request: Request<()>) -> Collected {
    collect(api.clone().oneshot(request).await.unwrap()).await
}

fn values(response: &Collected, name: &str) -> Vec<String> {
    response
        .headers
        .get_all(name)
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .collect()
}

fn deprecated(spec: &str) -> PartnerApi {
    api().with_deprecation(spec.parse::<Deprecation>().unwrap())
}

#[tokio::test]
async fn a_deprecated_route_says_so_on_every_answer_and_the_others_do_not() {
    let api = deprecated("/orders=2026-12-01,sunset=2099-06-01,link=https://example.com/orders-v2");
    let ok = call(&api, get("/v1/orders?limit=1", Some(KEY_A))).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(values(&ok, "deprecation"), ["@1796083200"]);
    assert_eq!(values(&ok, "sunset"), ["Mon, 01 Jun 2099 00:00:00 GMT"]);
    let links = values(&ok, "link");
    assert!(
        links.iter().any(|link| link.ends_with("rel=\"next\"")),
        "{links:?}"
    );
    assert!(links.contains(&"<https://example.com/orders-v2>; rel=\"deprecation\"".to_owned()));
    assert!(links.contains(&"<https://example.com/orders-v2>; rel=\"sunset\"".to_owned()));

    // A 304, a 400 and a 401 carry them too: a broken client still learns it.
    let mut conditional = get("/v1/orders?limit=1", Some(KEY_A));
    conditional
        .headers_mut()
        .insert("if-none-match", ok.headers["etag"].clone());
    for response in [
        call(&api, conditional).await,
        call(&api, get("/v1/orders?limit=0", Some(KEY_A))).await,
        call(&api, get("/v1/orders", None)).await,
    ] {
        assert!(
            matches!(response.status.as_u16(), 304 | 400 | 401),
            "{}",
            response.status
        );
        assert_eq!(values(&response, "deprecation"), ["@1796083200"]);
        assert_eq!(values(&response, "sunset").len(), 1);
    }
    // Another route: as it always was.
    let me = call(&api, get("/v1/me", Some(KEY_A))).await;
    let plain = call(&crate::common::api(), get("/v1/me", Some(KEY_A))).await;
    assert_eq!(
        without_request_id(me.headers.clone()),
        without_request_id(plain.headers.clone())
    );
    assert_eq!(me.body, plain.body);
}

#[tokio::test]
async fn a_deprecated_parameter_is_signalled_only_when_given() {
    let api = deprecated("/orders?provider=2026-12-01");
    let with = call(&api, get("/v1/orders?provider=meta", Some(KEY_A))).await;
    assert_eq!(with.status, StatusCode::OK);
    assert_eq!(values(&with, "deprecation"), ["@1796083200"]);
    assert!(values(&with, "sunset").is_empty());
    let without = call(&api, get("/v1/orders?status=booked", Some(KEY_A))).await;
    assert!(values(&without, "deprecation").is_empty());
    // Without a declaration, the bytes and headers are those of before.
    let plain = call(
        &crate::common::api(),
        get("/v1/orders?status=booked", Some(KEY_A)),
    )
    .await;
    assert_eq!(without.body, plain.body);
    assert_eq!(
        without_request_id(without.headers.clone()),
        without_request_id(plain.headers.clone())
    );
}

#[tokio::test]
async fn the_served_document_marks_what_is_deprecated() {
    let api =
        deprecated("/orders?provider=2026-12-01,sunset=2027-06-01,link=https://example.com/p")
            .with_deprecation(
                "/me=2026-12-01,link=https://example.com/me"
                    .parse()
                    .unwrap(),
            );
    let served = call(&api, get("/v1/openapi.json", None)).await.json();
    let me = &served["paths"]["/me"]["get"];
    assert_eq!(me["deprecated"], true);
    assert_eq!(me["x-deprecation"], "2026-12-01");
    assert_eq!(me["externalDocs"]["url"], "https://example.com/me");
    let orders = &served["paths"]["/orders"]["get"];
    assert!(orders.get("deprecated").is_none());
    let provider = orders["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|parameter| parameter["name"] == "provider")
        .unwrap();
    assert_eq!(provider["deprecated"], true);
    assert_eq!(provider["x-sunset"], "2027-06-01");
    assert_eq!(provider["x-deprecation-link"], "https://example.com/p");
    // The shared component itself stays unmarked, and so does every other operation.
    assert!(served["components"]["parameters"]["provider"]
        .get("deprecated")
        .is_none());
    assert!(served["paths"]["/events"]["get"]
        .get("deprecated")
        .is_none());
    let plain = call(&crate::common::api(), get("/v1/openapi.json", None))
        .await
        .json();
    assert!(plain["paths"]["/me"]["get"].get("deprecated").is_none());
}

#[tokio::test]
async fn an_enforced_sunset_answers_410_with_the_date_and_link_and_an_unenforced_one_does_not() {
    let gone =
        deprecated("/orders=2020-01-01,sunset=2021-01-01,link=https://example.com/v2,enforce");
    for key in [Some(KEY_A), None] {
        let response = raw(&gone, get("/v1/orders", key)).await;
        assert_eq!(response.status, StatusCode::GONE);
        assert_eq!(response.header("content-type"), Some("application/json"));
        let message = response.error_message();
        assert!(
            message.contains("/orders")
                && message.contains("2021-01-01")
                && message.contains("https://example.com/v2"),
            "{message}"
        );
        assert_eq!(values(&response, "deprecation").len(), 1);
    }
    // The other routes answer.
    assert_eq!(
        raw(&gone, get("/v1/me", Some(KEY_A))).await.status,
        StatusCode::OK
    );
    let served = raw(&gone, get("/v1/openapi.json", None)).await.json();
    assert!(served["paths"]["/orders"]["get"]["responses"]["410"].is_object());
    // Past its sunset but not enforced: still served, with the fields.
    let lenient = deprecated("/orders=2020-01-01,sunset=2021-01-01");
    let served = raw(&lenient, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(served.status, StatusCode::OK);
    assert_eq!(values(&served, "sunset"), ["Fri, 01 Jan 2021 00:00:00 GMT"]);
    // A parameter's enforcement: only requests that give it.
    let parameter = deprecated("/orders?provider=2020-01-01,sunset=2021-01-01,enforce");
    assert_eq!(
        raw(&parameter, get("/v1/orders?provider=meta", Some(KEY_A)))
            .await
            .status,
        StatusCode::GONE
    );
    assert_eq!(
        raw(&parameter, get("/v1/orders", Some(KEY_A))).await.status,
        StatusCode::OK
    );
}

#[tokio::test]
async fn the_standalone_host_declares_deprecations_from_its_flags() {
    crate::common::needs::needs!(Examples);
    use crate::common::net::{fetch, http1};
    use http::Method;
    let mut host = Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--deprecate",
        "/orders?provider=2026-12-01,sunset=2099-06-01,link=https://example.com/providers",
        "--deprecate",
        "/events=2026-01-01,sunset=2026-02-01,enforce",
        "--rate-limit",
        "50",
        "--usage-flush-interval",
        "1",
    ]);
    let base = host.base_url().await;
    let client = http1();
    let key = partner_api::seed::DEMO_KEY;
    let filtered = fetch(
        &client,
        Method::GET,
        format!("{base}/v1/orders?provider=meta"),
        Some(key),
    )
    .await;
    assert_eq!(filtered.status, StatusCode::OK);
    assert_eq!(values(&filtered, "deprecation"), ["@1796083200"]);
    assert_eq!(
        values(&filtered, "sunset"),
        ["Mon, 01 Jun 2099 00:00:00 GMT"]
    );
    // The standard rate-limit fields beside the X- ones, with the same figures.
    let policy = values(&filtered, "ratelimit-policy");
    assert_eq!(policy, ["\"key\";q=50;w=1"]);
    let limit = values(&filtered, "ratelimit");
    let remaining = values(&filtered, "x-ratelimit-remaining");
    assert_eq!(limit, [format!("\"key\";r={};t=1", remaining[0])]);
    let plain = fetch(&client, Method::GET, format!("{base}/v1/orders"), Some(key)).await;
    assert!(values(&plain, "deprecation").is_empty());
    // The call was counted in memory and is the key's to read, once written (every second).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let listed = fetch(
            &client,
            Method::GET,
            format!("{base}/v1/deprecations"),
            Some(key),
        )
        .await;
        assert_eq!(listed.status, StatusCode::OK);
        let provider = listed.json()["data"][0].clone();
        assert_eq!(provider["target"], "/orders?provider");
        if provider["calls"] == 1 {
            assert!(provider["lastCallAt"].is_string(), "{provider}");
            break;
        }
        assert_eq!(provider["calls"], 0, "{provider}");
        assert!(
            std::time::Instant::now() < deadline,
            "the call was never written"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let gone = fetch(&client, Method::GET, format!("{base}/v1/events"), Some(key)).await;
    assert_eq!(gone.status, StatusCode::GONE);
    assert!(host.terminate().await.success());

    let (ok, _, stderr) =
        standalone_command(&["--deprecate", "/orders=2026-12-01,sunset=2026-11-01"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("--deprecate") && stderr.contains("before the deprecation"),
        "{stderr}"
    );
    // A version's form: the demo key reads the first version, deprecated; a version the API
    // does not offer is refused, naming those it does.
    let mut host = Process::spawn(&[
        "--listen",
        "127.0.0.1:0",
        "--deprecate",
        "2026-11-27=2026-11-28,sunset=2099-06-01",
    ]);
    let base = host.base_url().await;
    let me = fetch(&client, Method::GET, format!("{base}/v1/me"), Some(key)).await;
    assert_eq!(me.status, StatusCode::OK);
    assert_eq!(values(&me, "deprecation"), ["@1795824000"]);
    assert_eq!(values(&me, "sunset"), ["Mon, 01 Jun 2099 00:00:00 GMT"]);
    let versions = fetch(
        &client,
        Method::GET,
        format!("{base}/v1/versions"),
        Some(key),
    )
    .await;
    assert_eq!(
        versions.json()["data"]["versions"][2]["deprecated"],
        "2026-11-28"
    );
    assert!(host.terminate().await.success());
    let (ok, _, stderr) = standalone_command(&["--deprecate", "2020-01-01=2026-12-01"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("not a version of the API") && stderr.contains("2026-11-27"),
        "{stderr}"
    );
}

/// A memory store with a second key in `org_a`, and the ids of `KEY_A`, that key and `KEY_B`.
async fn store_with_second_key() -> (partner_api::MemoryStore, [String; 3]) {
    use partner_api::{KeyDigest, KeyLookup, KeyStore};
    let store = crate::common::store();
    store.add_key(SECOND_KEY, "org_a").unwrap();
    let mut ids = Vec::new();
    for key in [KEY_A, SECOND_KEY, KEY_B] {
        match store.lookup(&KeyDigest::of(key)).await.unwrap() {
            KeyLookup::Valid(principal) => ids.push(principal.key_id.to_string()),
            other => panic!("{other:?}"),
        }
    }
    (store, ids.try_into().unwrap())
}

const SECOND_KEY: &str = "pk_test_second_Qw12Er34Ty56Ui78Op90";

async fn manage(
    service: &partner_api::management::KeyManagementService,
    organization: &str,
    path: &str,
) -> (StatusCode, serde_json::Value) {
    use http_body_util::BodyExt;
    let mut request = Request::get(path).body(String::new()).unwrap();
    request
        .extensions_mut()
        .insert(partner_api::management::ActingOrganization::new(
            organization,
        ));
    let response = service.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap())
}

#[tokio::test]
async fn deprecated_calls_are_counted_per_key_and_read_by_the_admin_and_the_partner() {
    use partner_api::deprecated_calls::DeprecatedCallRecorder;
    use partner_api::management::KeyManagementService;
    let (store, [a, second, b]) = store_with_second_key().await;
    let provider: Deprecation =
        "/orders?provider=2026-01-01,sunset=2099-01-01,link=https://example.com/providers"
            .parse()
            .unwrap();
    let me: Deprecation = "/me=2026-02-01".parse().unwrap();
    let recorder = DeprecatedCallRecorder::spawn(store.clone());
    let api = PartnerApi::from_store(store.clone())
        .with_deprecation(provider.clone())
        .with_deprecation(me.clone())
        .with_deprecated_calls(recorder.clone());
    // Counted: the deprecated parameter given (twice, one a 400), /me by two keys. Not
    // counted: /orders without the parameter, an unknown key, a revoked one.
    let started = partner_api::Timestamp::now();
    for (path, key, status) in [
        ("/v1/orders?provider=meta", KEY_A, 200),
        ("/v1/orders?provider=meta&limit=0", KEY_A, 400),
        ("/v1/orders", KEY_A, 200),
        ("/v1/me", KEY_A, 200),
        ("/v1/me", SECOND_KEY, 200),
        ("/v1/me", KEY_B, 200),
        ("/v1/me", "pk_test_unknown", 401),
        ("/v1/me", REVOKED_KEY, 401),
    ] {
        let answer = call(&api, get(path, Some(key))).await;
        assert_eq!(answer.status.as_u16(), status, "{path} {key}");
    }
    recorder.flush().await.unwrap();

    // The admin of org_a sees each deprecation with the keys that called it.
    let service = KeyManagementService::new(store.clone())
        .with_deprecated_calls(store.clone())
        .with_deprecation(provider.clone())
        .with_deprecation(me.clone());
    let (status, body) = manage(&service, "org_a", "/deprecated-calls").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let listed = body["data"]["deprecations"].as_array().unwrap();
    let targets: Vec<&str> = listed
        .iter()
        .map(|d| d["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["/orders?provider", "/me"]);
    assert_eq!(listed[0]["sunsetOn"], "2099-01-01");
    assert_eq!(listed[0]["link"], "https://example.com/providers");
    assert_eq!(listed[0]["declared"], true);
    let callers = |index: usize| -> Vec<(String, u64)> {
        listed[index]["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                (
                    k["keyId"].as_str().unwrap().to_owned(),
                    k["calls"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(callers(0), [(a.clone(), 2)]);
    let mut me_callers = callers(1);
    me_callers.sort();
    let mut expected = vec![(a.clone(), 1), (second.clone(), 1)];
    expected.sort();
    assert_eq!(me_callers, expected, "org_b's key is not org_a's to see");
    let last: partner_api::Timestamp = listed[0]["keys"][0]["lastCallAt"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    // To the second the recorder's clock was ticked.
    assert!(
        last.as_datetime().timestamp() + 2 >= started.as_datetime().timestamp(),
        "{last:?} vs {started:?}"
    );
    let (_, theirs) = manage(&service, "org_b", "/deprecated-calls").await;
    assert_eq!(
        theirs["data"]["deprecations"][0]["keys"],
        serde_json::json!([])
    );
    assert_eq!(
        theirs["data"]["deprecations"][1]["keys"][0]["keyId"].as_str(),
        Some(b.as_str())
    );
    let (status, abilities) = manage(&service, "org_a", "/abilities").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(abilities["data"]["abilities"]["deprecatedCalls"], true);
    let plain = KeyManagementService::new(store.clone());
    let (status, _) = manage(&plain, "org_a", "/deprecated-calls").await;
    assert_eq!(status, StatusCode::NOT_FOUND, "not offered without a store");

    // The partner sees its own key's calls only.
    let mine = call(&api, get("/v1/deprecations", Some(KEY_A))).await;
    assert_eq!(mine.status, StatusCode::OK);
    let data = &mine.json()["data"];
    assert_eq!(data[0]["target"], "/orders?provider");
    assert_eq!(data[0]["parameter"], "provider");
    assert_eq!(data[0]["deprecatedOn"], "2026-01-01");
    assert_eq!(data[0]["enforced"], false);
    assert_eq!(data[0]["calls"], 2);
    assert!(data[0]["lastCallAt"].is_string());
    assert_eq!(data[1]["route"], "/me");
    assert_eq!(data[1]["parameter"], serde_json::Value::Null);
    assert_eq!(data[1]["sunsetOn"], serde_json::Value::Null);
    assert_eq!(data[1]["calls"], 1);
    let second_view = call(&api, get("/v1/deprecations", Some(SECOND_KEY))).await;
    let data = &second_view.json()["data"];
    assert_eq!(data[0]["calls"], 0);
    assert_eq!(data[0]["lastCallAt"], serde_json::Value::Null);
    assert_eq!(data[1]["calls"], 1);
}

/// Past an enforced sunset, a key's call is answered 410 once the key is known to be usable,
/// and counted, so the admin sees who still calls what is gone; an unusable key gets its 401,
/// no key the 410 at once.
#[tokio::test]
async fn calls_past_an_enforced_sunset_are_410_and_still_counted() {
    use partner_api::deprecated_calls::DeprecatedCallRecorder;
    use partner_api::store::DeprecatedCallStore;
    let (store, [a, ..]) = store_with_second_key().await;
    let recorder = DeprecatedCallRecorder::spawn(store.clone());
    let api = PartnerApi::from_store(store.clone())
        .with_deprecation("/me=2020-01-01,sunset=2021-01-01,enforce".parse().unwrap())
        .with_deprecated_calls(recorder.clone())
        .with_rate_limiter(partner_api::LocalRateLimiter::new(
            std::time::Duration::from_secs(3600),
            std::num::NonZeroU32::new(1).unwrap(),
        ));
    for _ in 0..3 {
        let gone = raw(&api, get("/v1/me", Some(KEY_A))).await;
        assert_eq!(gone.status, StatusCode::GONE, "the rate limit is not spent");
        assert_eq!(values(&gone, "deprecation").len(), 1);
    }
    assert_eq!(
        raw(&api, get("/v1/me", None)).await.status,
        StatusCode::GONE
    );
    let unknown = raw(&api, get("/v1/me", Some("pk_test_unknown"))).await;
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        values(&unknown, "deprecation").len(),
        1,
        "a broken client learns it too"
    );
    recorder.flush().await.unwrap();
    let since = partner_api::Timestamp::from_unix_millis(0).unwrap();
    let calls = store.deprecated_calls("org_a", None, since).await.unwrap();
    let seen: Vec<(&str, &str, u64)> = calls
        .iter()
        .map(|t| (t.key_id.as_str(), t.target.as_str(), t.calls))
        .collect();
    assert_eq!(seen, [(a.as_str(), "/me", 3)]);
}

#[tokio::test]
async fn the_list_of_deprecations_says_when_calls_are_not_recorded_and_is_empty_without_any() {
    let api = deprecated("/events=2026-01-01,sunset=2026-06-01,enforce");
    let listed = call(&api, get("/v1/deprecations", Some(KEY_A))).await;
    assert_eq!(listed.status, StatusCode::OK);
    let data = &listed.json()["data"];
    assert_eq!(data[0]["enforced"], true);
    assert_eq!(data[0]["sunsetOn"], "2026-06-01");
    assert_eq!(data[0]["calls"], serde_json::Value::Null);
    assert_eq!(data[0]["lastCallAt"], serde_json::Value::Null);
    // The route answers even though the route it lists is gone; nothing concerns itself.
    assert!(values(&listed, "deprecation").is_empty());
    let none = call(&crate::common::api(), get("/v1/deprecations", Some(KEY_A))).await;
    assert_eq!(none.json()["data"], serde_json::json!([]));
    assert_eq!(none.json()["meta"]["version"], "v1");
    let posted = call(
        &api,
        Request::post("/v1/deprecations")
            .header("authorization", format!("Bearer {KEY_A}"))
            .body(())
            .unwrap(),
    )
    .await;
    assert_eq!(posted.status, StatusCode::METHOD_NOT_ALLOWED);
}

/// The whole path on PostgreSQL with the documented roles: the standalone host, serving as
/// `partner_api_serving`, counts a key's calls of what `--deprecate` declared and writes them
/// at shutdown; `keys deprecated-calls` as `partner_api_key_admin` prints them, a JSON record
/// a line; the key then reads its own last call from `GET /v1/deprecations` on a host started
/// again.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn the_standalone_host_counts_deprecated_calls_in_postgres_and_the_cli_reads_them() {
    crate::common::needs::needs!(Postgres, Examples);
    crate::common::needs::needs!(Examples);
    use crate::common::net::{fetch, http1};
    use crate::common::pg::{as_user, create_documented_roles, fresh_database};
    use http::Method;
    use partner_api::seed::{Seed, DEMO_KEY};
    let url = fresh_database().await;
    let (ok, _, stderr) = standalone_command(&["migrate", "--database-url", &url]).await;
    assert!(ok, "{stderr}");
    partner_api::PgStore::connect_lazy(&url)
        .unwrap()
        .load_seed(&Seed::demo())
        .await
        .unwrap();
    let [serving, keys, _] = create_documented_roles(&url).await;
    let serving_url = as_user(&url, &serving);
    let host_args = [
        "--listen",
        "127.0.0.1:0",
        "--no-migrate",
        "--no-webhooks",
        "--database-url",
        &serving_url,
        "--deprecate",
        "/orders?provider=2026-01-01,sunset=2099-01-01",
        "--deprecate",
        "/me=2026-02-01",
    ];
    let mut host = Process::spawn(&host_args);
    let base = host.base_url().await;
    let client = http1();
    for path in [
        "/v1/orders?provider=meta",
        "/v1/orders?provider=google",
        "/v1/me",
    ] {
        let answer = fetch(
            &client,
            Method::GET,
            format!("{base}{path}"),
            Some(DEMO_KEY),
        )
        .await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
    }
    // Written at shutdown, as usage is.
    assert!(host.terminate().await.success());

    let (ok, stdout, stderr) = keys_command(
        Some(&as_user(&url, &keys)),
        &[
            "deprecated-calls",
            "--organization",
            "org_demo",
            "--no-migrate",
        ],
    )
    .await;
    assert!(ok, "{stderr}");
    let records: Vec<serde_json::Value> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let seen: Vec<(&str, u64)> = records
        .iter()
        .map(|r| (r["target"].as_str().unwrap(), r["calls"].as_u64().unwrap()))
        .collect();
    // The three calls at the demo key's version too (the host counts calls per version).
    assert_eq!(
        seen,
        [("/me", 1), ("/orders?provider", 2), ("2026-11-27", 3)],
        "{stdout}"
    );
    assert!(records
        .iter()
        .all(|r| r["keyId"].is_string() && r["lastCallAt"].is_string()));

    let mut again = Process::spawn(&host_args);
    let base = again.base_url().await;
    let listed = fetch(
        &client,
        Method::GET,
        format!("{base}/v1/deprecations"),
        Some(DEMO_KEY),
    )
    .await;
    assert_eq!(listed.status, StatusCode::OK);
    let data = &listed.json()["data"];
    assert_eq!(data[0]["target"], "/orders?provider");
    assert_eq!(data[0]["calls"], 2);
    assert_eq!(data[1]["calls"], 1);
    assert!(data[1]["lastCallAt"].is_string());
    assert!(again.terminate().await.success());
}
