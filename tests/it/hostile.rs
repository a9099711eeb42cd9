//! Hostile input: arbitrary bytes in the `Authorization` header and the path never panic,
//! never answer 2xx without a valid key, and always answer with the JSON error document; a
//! random world of organizations, keys and orders never lets a key see another
//! organization's data.

use std::collections::BTreeSet;

use crate::common::*;
use http::{HeaderValue, Request, StatusCode};
use partner_api::{MemoryStore, Organization, PartnerApi};
use proptest::prelude::*;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Bytes that `http` accepts in a header value (visible ASCII, space, tab, obs-text).
fn header_bytes() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        8 => 0x20u8..0x7f,
        1 => Just(b'\t'),
        1 => 0x80u8..=0xff,
    ];
    prop_oneof![
        proptest::collection::vec(byte.clone(), 0..80),
        // Near misses of a valid credential.
        (proptest::collection::vec(byte, 0..20), 0usize..4).prop_map(|(tail, variant)| {
            let head: &[u8] = [&b"Bearer "[..], b"bearer  ", b"Bearer\t", b"BEARER "][variant];
            [head, KEY_A.as_bytes(), &tail].concat()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_authorization_headers_never_pass_or_panic(values in proptest::collection::vec(header_bytes(), 0..3)) {
        let api = api();
        let response = runtime().block_on(async {
            let mut request = Request::get("/v1/orders").body(()).unwrap();
            for value in &values {
                request.headers_mut().append("authorization", HeaderValue::from_bytes(value).unwrap());
            }
            call(&api, request).await
        });
        let valid = values.len() == 1 && {
            let text = String::from_utf8_lossy(&values[0]).into_owned();
            let mut words = text.trim_matches([' ', '\t']).splitn(2, ' ');
            let scheme = words.next().unwrap_or_default();
            let token = words.next().unwrap_or_default().trim_start_matches(' ');
            scheme.eq_ignore_ascii_case("bearer") && token == KEY_A
        };
        if valid {
            prop_assert_eq!(response.status, StatusCode::OK);
        } else {
            prop_assert_eq!(response.status, StatusCode::UNAUTHORIZED);
            prop_assert!(response.header("www-authenticate").is_some());
            prop_assert!(!response.error_message().is_empty());
        }
    }

    #[test]
    fn arbitrary_paths_are_answered_without_panics(
        segments in proptest::collection::vec("[a-zA-Z0-9%._~!$&'()*+,;=:@-]{0,12}", 0..6),
        query in proptest::option::of("[a-zA-Z0-9%&=._-]{0,40}"),
        with_key in any::<bool>(),
    ) {
        let mut path = format!("/{}", segments.join("/"));
        if let Some(query) = &query {
            path.push('?');
            path.push_str(query);
        }
        let Ok(uri) = path.parse::<http::Uri>() else { return Ok(()) };
        let api = api();
        let response = runtime().block_on(async {
            let request = Request::get(uri).body(()).unwrap();
            let request = if with_key {
                let (mut parts, body) = request.into_parts();
                parts.headers.insert("authorization", format!("Bearer {KEY_A}").parse().unwrap());
                Request::from_parts(parts, body)
            } else {
                request
            };
            call(&api, request).await
        });
        let route = path.split('?').next().unwrap_or_default();
        let endpoint = matches!(route, "/v1/me" | "/v1/orders" | "/v1/openapi.json");
        match (endpoint, route == "/v1/openapi.json", with_key) {
            (false, _, _) => prop_assert_eq!(response.status, StatusCode::NOT_FOUND),
            (true, true, _) | (true, false, true) => prop_assert_eq!(response.status, StatusCode::OK),
            (true, false, false) => prop_assert_eq!(response.status, StatusCode::UNAUTHORIZED),
        }
    }

}

proptest! {
    // Each case builds a world and calls every key twice; fewer cases, more work each.
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_key_ever_sees_another_organizations_data(
        world in proptest::collection::vec((1usize..4, 0usize..40), 1..6),
    ) {
        // `world[i]` is organization i: how many keys it has and how many orders.
        let store = MemoryStore::new();
        for (org, (keys, orders)) in world.iter().enumerate() {
            store.add_organization(Organization { id: format!("org{org}"), name: format!("Org {org}") }).unwrap();
            for key in 0..*keys {
                store.add_key(&format!("k{org}x{key}"), &format!("org{org}")).unwrap();
            }
            let own = (0..*orders as i64).map(|n| {
                // Timestamps interleave across organizations.
                order(&format!("o{org}x{n}"), BASE_MILLIS + n * 10 + org as i64)
            });
            store.add_orders(&format!("org{org}"), own).unwrap();
        }
        let api = PartnerApi::from_store(store);
        runtime().block_on(async {
            for (org, (keys, orders)) in world.iter().enumerate() {
                for key in 0..*keys {
                    let key = format!("k{org}x{key}");
                    let me = call(&api, get("/v1/me", Some(&key))).await.json();
                    assert_eq!(me["data"]["organization"]["id"], format!("org{org}"));
                    let listed = call(&api, get("/v1/orders", Some(&key))).await.json();
                    let ids: BTreeSet<String> = listed["data"]["orders"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|o| o["id"].as_str().unwrap().to_owned())
                        .collect();
                    assert_eq!(ids.len(), (*orders).min(100));
                    assert!(ids.iter().all(|id| id.starts_with(&format!("o{org}x"))), "{key}: {ids:?}");
                }
            }
        });
    }
}

#[tokio::test]
async fn huge_tokens_paths_and_queries_get_deliberate_answers() {
    let huge_token = format!("Bearer {}", "k".repeat(64 * 1024));
    let request = Request::get("/v1/orders")
        .header("authorization", huge_token)
        .body(())
        .unwrap();
    assert_eq!(call(&api(), request).await.status, StatusCode::UNAUTHORIZED);

    let long_path = format!("/v1/{}", "a".repeat(32 * 1024));
    assert_eq!(
        call(&api(), get(&long_path, Some(KEY_A))).await.status,
        StatusCode::NOT_FOUND
    );

    let long_query = format!("/v1/orders?{}", "q=1&".repeat(8 * 1024));
    let response = call(&api(), get(&long_query, Some(KEY_A))).await;
    assert_eq!(
        response.status,
        StatusCode::OK,
        "the query string is ignored"
    );
}

/// Text biased towards what JSON must escape: control characters, quotes, backslashes,
/// alone or mixed with plain and non-ASCII text.
fn json_hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::string::string_regex("[\\x00-\\x1f]{0,12}").unwrap(),
        proptest::string::string_regex("[\"\\\\]{0,12}").unwrap(),
        proptest::string::string_regex("[\\x00-\\x20\"\\\\a-z\\x7f é😀]{0,24}").unwrap(),
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Whatever an organization's id and name hold, `/v1/me` writes them as serde_json does:
    /// the fast path that copies plain strings never lets a character through unescaped.
    #[test]
    fn any_organization_round_trips_through_me_as_serde_json_writes_it(
        id in json_hostile_text(),
        name in json_hostile_text(),
    ) {
        let store = MemoryStore::new();
        store.add_organization(Organization { id: id.clone(), name: name.clone() }).unwrap();
        store.add_key(KEY_A, &id).unwrap();
        let api = PartnerApi::from_store(store);
        let response = runtime().block_on(call(&api, get("/v1/me", Some(KEY_A))));
        prop_assert_eq!(response.status, StatusCode::OK);
        let expected = format!(
            r#"{{"meta":{{"version":"v1","status":"beta"}},"data":{{"organization":{{"id":{},"name":{}}}}}}}"#,
            serde_json::to_string(&id).unwrap(),
            serde_json::to_string(&name).unwrap(),
        );
        prop_assert_eq!(std::str::from_utf8(&response.body).unwrap(), expected);
    }
}
