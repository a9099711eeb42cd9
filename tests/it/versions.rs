//! Date versions (#57): which version answers, its echo, the first version's bytes, the
//! second's `updatedAt` and filters, `/versions`, events at the reader's version, a made-up
//! chain of changes through the whole mechanism, and the admin's pin and way back.

use std::sync::Arc;

use http::{HeaderValue, StatusCode};
use partner_api::key::KeyEnvironment;
use partner_api::store::{KeyManager, NewKey};
use partner_api::versions::{
    ApiVersion, Fields, OrderUpdatedAt, Resource, VersionChange, Versions, FIRST, UPDATED_AT,
};
use partner_api::{MemoryStore, PartnerApi, Timestamp};
use serde_json::{json, Value};

use crate::common::*;

/// `text` without any `,"updatedAt":"..."` member.
fn without_updated_at(text: &str) -> String {
    let mut kept = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(r#","updatedAt":""#) {
        kept.push_str(&rest[..start]);
        let value = &rest[start + r#","updatedAt":""#.len()..];
        rest = &value[value.find('"').map_or(value.len(), |end| end + 1)..];
    }
    kept.push_str(rest);
    kept
}

fn at(path: &str, key: &str, version: &str) -> http::Request<()> {
    let mut request = get(path, Some(key));
    request
        .headers_mut()
        .insert("api-version", HeaderValue::from_str(version).unwrap());
    request
}

/// A key its store records no version of reads the first version: the orders as they were
/// before versions, with the version echoed; the header names another for one request.
#[tokio::test]
async fn a_key_without_a_version_reads_the_first_and_a_header_names_another() {
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    let first = call(&api, get("/v1/orders?limit=3", Some(KEY_A))).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.header("api-version"), Some("2026-11-27"));
    for order in first.json()["data"]["orders"].as_array().unwrap() {
        assert_eq!(order.as_object().unwrap().len(), 10, "{order}");
        assert!(order.get("updatedAt").is_none());
    }
    let second = call(&api, at("/v1/orders?limit=3", KEY_A, "2026-11-28")).await;
    assert_eq!(second.header("api-version"), Some("2026-11-28"));
    for order in second.json()["data"]["orders"].as_array().unwrap() {
        assert_eq!(
            order["updatedAt"], order["createdAt"],
            "never changed: {order}"
        );
    }
    // The first version's bytes are the newest's without the member, in place.
    assert_eq!(
        String::from_utf8_lossy(&first.body),
        without_updated_at(&String::from_utf8_lossy(&second.body))
    );
    assert_ne!(first.header("etag"), second.header("etag"));
    // The header's version is the key's for /me too, where nothing differs.
    let me = call(&api, at("/v1/me", KEY_A, "2026-11-28")).await;
    assert_eq!(me.header("api-version"), Some("2026-11-28"));
    assert_eq!(me.body, call(&api, get("/v1/me", Some(KEY_A))).await.body);
}

/// A key issued now is pinned to the newest version; the admin moves it and back.
#[tokio::test]
async fn an_issued_key_reads_its_pinned_version_and_an_upgrade_rolls_back() {
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    let issued = store
        .issue("org_a", NewKey::new(KeyEnvironment::Test))
        .await
        .unwrap();
    let key = issued.plaintext().to_owned();
    let id = issued.record().id.clone();
    let served = call(&api, get("/v1/orders?limit=1", Some(&key))).await;
    assert_eq!(served.header("api-version"), Some("2026-12-01"));
    assert!(served.json()["data"]["orders"][0]["updatedAt"].is_string());
    let versions = call(&api, get("/v1/versions", Some(&key))).await;
    assert_eq!(versions.json()["data"]["pinned"], "2026-12-01");

    store.pin_api_version("org_a", &id, FIRST).await.unwrap();
    let served = call(&api, get("/v1/orders?limit=1", Some(&key))).await;
    assert_eq!(served.header("api-version"), Some("2026-11-27"));
    assert!(served.json()["data"]["orders"][0]
        .get("updatedAt")
        .is_none());
    let record = store
        .pin_api_version("org_a", &id, UPDATED_AT)
        .await
        .unwrap();
    assert_eq!(record.api_version_rollback.unwrap().to, FIRST);
    assert_eq!(
        call(&api, get("/v1/me", Some(&key)))
            .await
            .header("api-version"),
        Some("2026-11-28")
    );
    store.roll_back_api_version("org_a", &id).await.unwrap();
    assert_eq!(
        call(&api, get("/v1/me", Some(&key)))
            .await
            .header("api-version"),
        Some("2026-11-27")
    );
}

/// A name that is not a version offered is a 400 listing them, with no version echoed and
/// after the key is known (without one, the 401).
#[tokio::test]
async fn a_version_not_offered_is_a_400_that_lists_the_versions() {
    let api = api();
    for bad in [
        "2026-11-26",
        "2026-11-29",
        "v1",
        "2026-11-28 ",
        "2026-11-28,2026-11-27",
    ] {
        let refused = call(&api, at("/v1/orders", KEY_A, bad)).await;
        assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{bad:?}");
        assert_eq!(
            refused.error_message(),
            "invalid header Api-Version: it must name a version of this API, one of 2026-12-01, \
             2026-11-28, 2026-11-27 (newest first)"
        );
        assert_eq!(refused.header("api-version"), None);
    }
    let mut no_key = get("/v1/orders", None);
    no_key
        .headers_mut()
        .insert("api-version", HeaderValue::from_static("nope"));
    assert_eq!(call(&api, no_key).await.status, StatusCode::UNAUTHORIZED);
    // A host's own header name.
    let named = api.with_version_header(http::HeaderName::from_static("acme-version"));
    let mut request = get("/v1/me", Some(KEY_A));
    request
        .headers_mut()
        .insert("acme-version", HeaderValue::from_static("2026-11-28"));
    let answered = call(&named, request).await;
    assert_eq!(answered.header("acme-version"), Some("2026-11-28"));
    assert_eq!(answered.header("api-version"), None);
    let refused = call(&named, {
        let mut request = get("/v1/me", Some(KEY_A));
        request
            .headers_mut()
            .insert("acme-version", HeaderValue::from_static("x"));
        request
    })
    .await;
    assert!(refused
        .error_message()
        .starts_with("invalid header Acme-Version:"));
}

/// `updated_since` (inclusive) and `updated_before` (exclusive) at the second version,
/// combined with the other filters and paged; at the first, unknown parameters, ignored.
#[tokio::test]
async fn the_last_change_filters_at_the_second_version_and_is_ignored_at_the_first() {
    let store = MemoryStore::new();
    store
        .add_organization(partner_api::Organization {
            id: "org".into(),
            name: "Org".into(),
        })
        .unwrap();
    store.add_key(KEY_A, "org").unwrap();
    store
        .add_orders(
            "org",
            (0..6).map(|n| order(&format!("o{n}"), BASE_MILLIS + n * 1000)),
        )
        .unwrap();
    let api = PartnerApi::from_store(store.clone());
    let mark = Timestamp::now();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    for id in ["o1", "o4"] {
        let mut changed = order(id, BASE_MILLIS + id[1..].parse::<i64>().unwrap() * 1000);
        changed.status = "paused".into();
        store.update_order("org", changed).unwrap();
    }
    let ids = |answer: &Collected| -> Vec<String> {
        answer.json()["data"]["orders"]
            .as_array()
            .unwrap()
            .iter()
            .map(|order| order["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let since = format!("/v1/orders?updated_since={mark}");
    let second = call(&api, at(&since, KEY_A, "2026-11-28")).await;
    assert_eq!(ids(&second), ["o4", "o1"]);
    for order in second.json()["data"]["orders"].as_array().unwrap() {
        let updated: Timestamp = order["updatedAt"].as_str().unwrap().parse().unwrap();
        assert!(updated >= mark && order["updatedAt"] != order["createdAt"]);
    }
    let before = format!("/v1/orders?updated_before={mark}");
    assert_eq!(
        ids(&call(&api, at(&before, KEY_A, "2026-11-28")).await),
        ["o5", "o3", "o2", "o0"]
    );
    // Paged, the link keeps the filter.
    let page = call(&api, at(&format!("{since}&limit=1"), KEY_A, "2026-11-28")).await;
    assert_eq!(ids(&page), ["o4"]);
    let link = page.header("link").unwrap().to_owned();
    assert!(link.contains("updated_since="), "{link}");
    let next = link.trim_start_matches('<').split('>').next().unwrap();
    assert_eq!(
        ids(&call(&api, at(next, KEY_A, "2026-11-28")).await),
        ["o1"]
    );
    // With another filter.
    let both = format!("{since}&status=booked");
    assert!(ids(&call(&api, at(&both, KEY_A, "2026-11-28")).await).is_empty());
    // An empty range, and a bad value, are 400s naming the parameter.
    let empty = format!("/v1/orders?updated_since={mark}&updated_before={mark}");
    let refused = call(&api, at(&empty, KEY_A, "2026-11-28")).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert!(refused
        .error_message()
        .contains("updated_since must be before updated_before"));
    let bad = call(
        &api,
        at("/v1/orders?updated_before=yesterday", KEY_A, "2026-11-28"),
    )
    .await;
    assert!(bad
        .error_message()
        .starts_with("invalid query parameter updated_before"));
    // The first version never had them: the answer is the unfiltered page's, byte for byte,
    // even for a value the second refuses.
    let unfiltered = call(&api, get("/v1/orders", Some(KEY_A))).await;
    for path in [
        since.as_str(),
        "/v1/orders?updated_before=yesterday",
        &empty,
    ] {
        let first = call(&api, get(path, Some(KEY_A))).await;
        assert_eq!(first.status, StatusCode::OK, "{path}");
        assert_eq!(first.body, unfiltered.body, "{path}");
    }
}

/// `GET /versions`: each version newest first with its changes, and the key's pin.
#[tokio::test]
async fn versions_lists_the_chain_and_the_keys_pin() {
    let answer = call(&api(), get("/v1/versions", Some(KEY_A))).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.header("api-version"), Some("2026-11-27"));
    let data = &answer.json()["data"];
    assert_eq!(data["pinned"], "2026-11-27");
    let versions = data["versions"].as_array().unwrap();
    assert_eq!(versions[0]["version"], "2026-12-01");
    assert_eq!(
        versions[0]["changes"],
        json!([partner_api::versions::MeKeyAccess.description()])
    );
    assert_eq!(versions[1]["version"], "2026-11-28");
    assert_eq!(
        versions[1]["changes"],
        json!([OrderUpdatedAt.description()])
    );
    assert_eq!(
        versions[2],
        json!({"version": "2026-11-27", "changes": [], "deprecated": null, "sunset": null})
    );
    // Answered at the header's version, the pin is still the key's.
    let named = call(&api(), at("/v1/versions", KEY_A, "2026-11-28")).await;
    assert_eq!(named.json()["data"]["pinned"], "2026-11-27");
}

/// `/events` renders each stored event at the reader's version: the newest with the
/// order's `updatedAt` at the event's own time, the first without it.
#[tokio::test]
async fn events_render_at_the_readers_version() {
    let store = MemoryStore::new();
    store
        .add_organization(partner_api::Organization {
            id: "org_a".into(),
            name: "A".into(),
        })
        .unwrap();
    store.add_key(KEY_A, "org_a").unwrap();
    let api = PartnerApi::from_store(store.clone()).with_events(store.clone());
    let mut changed = order("fresh", BASE_MILLIS);
    store.add_order("org_a", changed.clone()).unwrap();
    changed.status = "running".into();
    store.update_order("org_a", changed).unwrap();
    let second = call(&api, at("/v1/events", KEY_A, "2026-11-28")).await;
    let first = call(&api, get("/v1/events", Some(KEY_A))).await;
    let events = second.json()["data"]["events"].as_array().unwrap().clone();
    assert_eq!(events.len(), 2);
    for event in &events {
        assert_eq!(event["data"]["updatedAt"], event["createdAt"], "{event}");
    }
    for event in first.json()["data"]["events"].as_array().unwrap() {
        assert!(event["data"].get("updatedAt").is_none(), "{event}");
        assert_eq!(event["data"].as_object().unwrap().len(), 10);
    }
    // Each version's page is its own (the per-thread page cache keys on the version).
    let again = call(&api, get("/v1/events", Some(KEY_A))).await;
    assert_eq!(again.body, first.body);
}

// A made-up chain of changes before the first version, through the whole mechanism: a field
// renamed, a number made an object, a field removed, an endpoint added.

const Y2020: ApiVersion = ApiVersion::from_ymd(2020, 1, 1);
const Y2021: ApiVersion = ApiVersion::from_ymd(2021, 1, 1);
const Y2022: ApiVersion = ApiVersion::from_ymd(2022, 1, 1);
const Y2023: ApiVersion = ApiVersion::from_ymd(2023, 1, 1);

/// 2021-01-01: `advertiser` was renamed `advertiserName`.
struct AdvertiserRenamed;
impl VersionChange for AdvertiserRenamed {
    fn description(&self) -> &'static str {
        "`advertiser` is now `advertiserName`."
    }
    fn routes(&self) -> &'static [&'static str] {
        &["/orders", "/events"]
    }
    fn resources(&self) -> &'static [Resource] {
        &[Resource::Order]
    }
    fn order(&self, order: &mut Fields) {
        order.rename("advertiserName", "advertiser");
    }
}

/// 2022-01-01: the budget, an object `{amount, currency}` before, is a number of kroner.
struct BudgetMadeANumber;
impl VersionChange for BudgetMadeANumber {
    fn description(&self) -> &'static str {
        "`budgetDkk` is a number of kroner, no longer `budget: {amount, currency}`."
    }
    fn routes(&self) -> &'static [&'static str] {
        &["/orders", "/events"]
    }
    fn resources(&self) -> &'static [Resource] {
        &[Resource::Order]
    }
    fn order(&self, order: &mut Fields) {
        if let Some(amount) = order.remove("budgetDkk") {
            order.insert_after(
                "campaignName",
                "budget",
                json!({"amount": amount, "currency": "DKK"}),
            );
        }
    }
}

/// 2023-01-01: the organization lost its `plan`; `/deprecations` was added.
struct PlanRemovedAndDeprecationsAdded;
impl VersionChange for PlanRemovedAndDeprecationsAdded {
    fn description(&self) -> &'static str {
        "The organization has no `plan` any more; `GET /deprecations` is new."
    }
    fn routes(&self) -> &'static [&'static str] {
        &["/me", "/deprecations"]
    }
    fn resources(&self) -> &'static [Resource] {
        &[Resource::Organization]
    }
    fn organization(&self, organization: &mut Fields) {
        organization.insert("plan", json!("standard"));
    }
    fn added_routes(&self) -> &'static [&'static str] {
        &["/deprecations"]
    }
}

fn made_up_chain() -> Versions {
    Versions::new(Y2020)
        .with_version(
            Y2021,
            [Arc::new(AdvertiserRenamed) as Arc<dyn VersionChange>],
        )
        .unwrap()
        .with_version(
            Y2022,
            [Arc::new(BudgetMadeANumber) as Arc<dyn VersionChange>],
        )
        .unwrap()
        .with_version(
            Y2023,
            [Arc::new(PlanRemovedAndDeprecationsAdded) as Arc<dyn VersionChange>],
        )
        .unwrap()
        .with_version(FIRST, [])
        .unwrap()
        .with_version(
            UPDATED_AT,
            [Arc::new(OrderUpdatedAt) as Arc<dyn VersionChange>],
        )
        .unwrap()
}

#[tokio::test]
async fn a_made_up_chain_walks_every_answer_back_change_by_change() {
    let store = store();
    let api = PartnerApi::from_store(store.clone())
        .with_events(store.clone())
        .with_versions(made_up_chain());
    let order_at = |version: &'static str| {
        let api = api.clone();
        async move {
            let answer = call(&api, at("/v1/orders?limit=1", KEY_A, version)).await;
            assert_eq!(answer.header("api-version"), Some(version));
            answer.json()["data"]["orders"][0].clone()
        }
    };
    let newest = order_at("2026-11-28").await;
    let names = |order: &Value| {
        order
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect::<Vec<_>>()
    };
    let oldest = order_at("2020-01-01").await;
    assert_eq!(
        names(&oldest),
        names(&newest)
            .into_iter()
            .filter(|name| name != "updatedAt")
            .map(|name| match name.as_str() {
                "advertiserName" => "advertiser".to_owned(),
                "budgetDkk" => "budget".to_owned(),
                _ => name,
            })
            .collect::<Vec<_>>(),
        "renamed in place, the budget where it was"
    );
    assert_eq!(oldest["advertiser"], newest["advertiserName"]);
    assert_eq!(
        oldest["budget"],
        json!({"amount": newest["budgetDkk"], "currency": "DKK"})
    );
    let y2021 = order_at("2021-01-01").await;
    assert!(y2021.get("advertiserName").is_some() && y2021["budget"].is_object());
    let y2022 = order_at("2022-01-01").await;
    assert!(y2022["budgetDkk"].is_number() && y2022.get("updatedAt").is_none());
    // Events carry the same orders, walked back the same way.
    store
        .add_order("org_a", order("made-up", BASE_MILLIS))
        .unwrap();
    let events = call(&api, at("/v1/events", KEY_A, "2020-01-01")).await;
    let data = &events.json()["data"]["events"][0]["data"];
    assert!(data["advertiser"].is_string() && data["budget"]["currency"] == "DKK");
    // The organization lost a member; the endpoint added is not found before it.
    let me = call(&api, at("/v1/me", KEY_A, "2022-01-01")).await;
    assert_eq!(me.json()["data"]["organization"]["plan"], "standard");
    assert!(me.header("etag").is_some());
    let me = call(&api, at("/v1/me", KEY_A, "2023-01-01")).await;
    assert!(me.json()["data"]["organization"].get("plan").is_none());
    assert_eq!(
        call(&api, at("/v1/deprecations", KEY_A, "2022-01-01"))
            .await
            .status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        call(&api, at("/v1/deprecations", KEY_A, "2023-01-01"))
            .await
            .status,
        StatusCode::OK
    );
    // `/versions` lists the chain, its changelog from the units.
    let listed = call(&api, get("/v1/versions", Some(KEY_A))).await.json();
    let names: Vec<&str> = listed["data"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "2026-11-28",
            "2026-11-27",
            "2023-01-01",
            "2022-01-01",
            "2021-01-01",
            "2020-01-01"
        ]
    );
    assert!(made_up_chain()
        .changelog()
        .contains("## 2022-01-01\n\n- `budgetDkk` is a number"));
}

/// Every route a change names, shipped or made up, is a route of the API; and every change
/// changes something: its transforms turn the newest answers of the demo data (an order, the
/// organization, a request's parameters) into other ones. A dead transform fails here.
#[tokio::test]
async fn every_change_names_real_routes_and_changes_an_answer() {
    let known = ["/me", "/orders", "/events", "/deprecations", "/versions"];
    let store = partner_api::seed::Seed::demo().to_memory_store().unwrap();
    let page = partner_api::OrderStore::orders(
        &store,
        "org_demo",
        &partner_api::store::OrderQuery::newest(100),
    )
    .await
    .unwrap();
    let organization = serde_json::to_vec(&partner_api::Organization {
        id: "org_demo".into(),
        name: "Demo".into(),
    })
    .unwrap();
    let queries = ["updated_since=2026-01-01T00:00:00Z&updated_before=2027-01-01T00:00:00Z"];
    let changes: Vec<Arc<dyn VersionChange>> = vec![
        Arc::new(OrderUpdatedAt),
        Arc::new(AdvertiserRenamed),
        Arc::new(BudgetMadeANumber),
        Arc::new(PlanRemovedAndDeprecationsAdded),
    ];
    for change in &changes {
        for route in change.routes().iter().chain(change.added_routes()) {
            assert!(
                known.contains(route),
                "{}: no route {route}",
                change.description()
            );
        }
        let mut changed = change.added_routes().len();
        for order in page.orders() {
            let mut fields = Fields::from_json(order.json()).unwrap();
            let before = fields.clone();
            if change.resources().contains(&Resource::Order) {
                change.order(&mut fields);
            }
            changed += usize::from(fields != before);
        }
        let mut fields = Fields::from_json(&organization).unwrap();
        if change.resources().contains(&Resource::Organization) {
            change.organization(&mut fields);
        }
        changed += usize::from(fields != Fields::from_json(&organization).unwrap());
        for route in change.routes() {
            for query in queries {
                let mut parameters: Vec<String> = query.split('&').map(str::to_owned).collect();
                change.query(route, &mut parameters);
                changed += usize::from(parameters.join("&") != query);
            }
        }
        assert!(changed > 0, "a dead change: {}", change.description());
    }
    let demo_has_orders = !page.is_empty();
    assert!(demo_has_orders);
}

/// A version deprecated with `--deprecate`'s form for a version: every answer served at it
/// carries the notices (merged with a route's, one field each), its calls are counted per key
/// under its name, `GET /versions` shows it, `GET /deprecations` keeps its shape; past an
/// enforced sunset it is the 410, after the key is known, while the header names another.
#[tokio::test]
async fn a_deprecated_version_is_announced_counted_and_gone_past_its_enforced_sunset() {
    use partner_api::deprecated_calls::DeprecatedCallRecorder;
    use partner_api::deprecation::Deprecation;
    use partner_api::store::DeprecatedCallStore;
    let store = store();
    let first: Deprecation = "2026-11-27=2026-11-28,sunset=2099-01-01,link=https://example.com/v2"
        .parse()
        .unwrap();
    assert_eq!(first.target(), "2026-11-27");
    assert_eq!(first.route(), None);
    let me: Deprecation = "/me=2026-11-01".parse().unwrap();
    let recorder = DeprecatedCallRecorder::spawn(store.clone());
    let api = PartnerApi::from_store(store.clone())
        .with_deprecation(first.clone())
        .with_deprecation(me)
        .with_deprecated_calls(recorder.clone());
    // KEY_A records no version: it reads the first, deprecated.
    let orders = call(&api, get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(orders.status, StatusCode::OK);
    assert_eq!(orders.header("deprecation"), Some("@1795824000"));
    assert_eq!(
        orders.header("sunset"),
        Some("Thu, 01 Jan 2099 00:00:00 GMT")
    );
    let links: Vec<&str> = orders
        .headers
        .get_all("link")
        .iter()
        .map(|v| v.to_str().unwrap())
        .filter(|v| v.contains("example.com/v2"))
        .collect();
    assert_eq!(
        links,
        [
            "<https://example.com/v2>; rel=\"deprecation\"",
            "<https://example.com/v2>; rel=\"sunset\""
        ]
    );
    // /me is deprecated too, from earlier: one Deprecation field, the earliest day.
    let me_answer = call(&api, get("/v1/me", Some(KEY_A))).await;
    let fields: Vec<&str> = me_answer
        .headers
        .get_all("deprecation")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(fields, ["@1793491200"]);
    assert_eq!(me_answer.headers.get_all("sunset").iter().count(), 1);
    // At the newest version, the orders carry nothing.
    let newest = call(&api, at("/v1/orders", KEY_A, "2026-11-28")).await;
    assert_eq!(newest.status, StatusCode::OK);
    assert_eq!(newest.header("deprecation"), None);
    // An error answered at the version carries them too; an anonymous one cannot know it.
    let refused = call(&api, get("/v1/orders?limit=0", Some(KEY_A))).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
    assert_eq!(refused.header("deprecation"), Some("@1795824000"));
    let anonymous = call(&api, get("/v1/orders", None)).await;
    assert_eq!(anonymous.header("deprecation"), None);
    // GET /versions shows it; GET /deprecations lists the routes' only.
    let versions = call(&api, get("/v1/versions", Some(KEY_A))).await.json();
    let listed = &versions["data"]["versions"][2];
    assert_eq!(listed["version"], "2026-11-27");
    assert_eq!(
        (&listed["deprecated"], &listed["sunset"]),
        (&json!("2026-11-28"), &json!("2099-01-01"))
    );
    assert_eq!(versions["data"]["versions"][0]["deprecated"], Value::Null);
    let deprecations = call(&api, get("/v1/deprecations", Some(KEY_A)))
        .await
        .json();
    let targets: Vec<&str> = deprecations["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["target"].as_str().unwrap())
        .collect();
    assert_eq!(targets, ["/me"]);
    // Counted per key under the version's name: the calls served at it (the first orders,
    // the 400, /me twice, /versions, /deprecations), not the one at the newest.
    recorder.flush().await.unwrap();
    let since = Timestamp::now().saturating_sub(std::time::Duration::from_secs(60));
    let calls = store.deprecated_calls("org_a", None, since).await.unwrap();
    let version_calls: u64 = calls
        .iter()
        .filter(|total| &*total.target == "2026-11-27")
        .map(|total| total.calls)
        .sum();
    assert_eq!(version_calls, 5, "{calls:?}");

    // Enforced, past its sunset: the first version's key gets the 410 naming the sunset and
    // the link; the header names the newest and is served; a bad key is still a 401.
    let gone: Deprecation =
        "2026-11-27=2026-01-01,sunset=2026-02-01,link=https://example.com/v2,enforce"
            .parse()
            .unwrap();
    let api = PartnerApi::from_store(store.clone()).with_deprecation(gone);
    // The 410 is in the served document of that version only (as a route's is).
    use tower::ServiceExt;
    let refused = collect(
        api.clone()
            .oneshot(get("/v1/me", Some(KEY_A)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(refused.status, StatusCode::GONE);
    let message = refused.error_message();
    assert!(
        message.contains("2026-02-01") && message.contains("https://example.com/v2"),
        "{message}"
    );
    assert_eq!(refused.header("api-version"), Some("2026-11-27"));
    let served = call(&api, get("/v1/openapi.json?version=2026-11-27", None))
        .await
        .json();
    for path in ["/me", "/orders", "/versions"] {
        let operation = &served["paths"][path]["get"];
        assert_eq!(operation["deprecated"], true, "{path}");
        assert_eq!(operation["x-sunset"], "2026-02-01", "{path}");
        assert!(operation["responses"]["410"].is_object(), "{path}");
    }
    let newest = call(&api, get("/v1/openapi.json", None)).await.json();
    assert!(newest["paths"]["/me"]["get"]["deprecated"].is_null());
    assert_eq!(
        call(&api, at("/v1/me", KEY_A, "2026-11-28")).await.status,
        StatusCode::OK
    );
    assert_eq!(
        call(&api, get("/v1/me", Some("pk_test_unknown")))
            .await
            .status,
        StatusCode::UNAUTHORIZED
    );
    // The flag's form refuses what is neither a route nor a version.
    assert!("orders=2026-01-01".parse::<Deprecation>().is_err());
    assert!("2026-13-01=2026-01-01".parse::<Deprecation>().is_err());
}

/// Each key's calls per version, counted in the deprecated calls' store (one path) when the
/// API counts calls per version, and read by the admin; the deprecated calls list keeps to
/// deprecations.
#[tokio::test]
async fn the_admin_sees_each_keys_calls_per_version() {
    use partner_api::deprecated_calls::DeprecatedCallRecorder;
    use partner_api::management::{ActingOrganization, KeyManagementService};
    use tower::ServiceExt;
    let store = store();
    let recorder = DeprecatedCallRecorder::spawn(store.clone());
    let api = PartnerApi::from_store(store.clone())
        .with_deprecated_calls(recorder.clone())
        .with_calls_per_version(true);
    for request in [
        get("/v1/me", Some(KEY_A)),
        get("/v1/orders", Some(KEY_A)),
        at("/v1/orders", KEY_A, "2026-11-28"),
        get("/v1/me", Some(KEY_B)),
        get("/v1/me", Some("pk_test_unknown")),
    ] {
        call(&api, request).await;
    }
    recorder.flush().await.unwrap();
    let service = KeyManagementService::new(store.clone()).with_deprecated_calls(store.clone());
    let read = |path: &'static str| {
        let service = service.clone();
        async move {
            let mut request = http::Request::get(path)
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            request
                .extensions_mut()
                .insert(ActingOrganization::new("org_a"));
            let response = service.oneshot(request).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            collect(response).await.json()
        }
    };
    let calls = read("/api-versions/calls").await;
    let keys = calls["data"]["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "org_a's key only: {calls}");
    let versions: Vec<(String, u64)> = keys[0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_str().unwrap().to_owned(),
                v["calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        versions,
        [("2026-11-28".to_owned(), 1), ("2026-11-27".to_owned(), 2)]
    );
    let deprecated = read("/deprecated-calls").await;
    assert_eq!(
        deprecated["data"]["deprecations"],
        json!([]),
        "{deprecated}"
    );
    // Off by default: nothing is counted without a deprecation.
    let quiet = PartnerApi::from_store(store.clone()).with_deprecated_calls(recorder.clone());
    call(&quiet, get("/v1/me", Some(KEY_A))).await;
    recorder.flush().await.unwrap();
    let again = read("/api-versions/calls").await;
    assert_eq!(again["data"]["keys"][0]["versions"][1]["calls"], 2);
}
