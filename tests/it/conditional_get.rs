//! Conditional GET (issue 8): a strong `ETag` over each keyed body, `304 Not Modified` for a
//! matching `If-None-Match`, `Vary: Authorization, Accept-Encoding`, and the switch that turns it off.

use crate::common::*;
use http::{Method, Request, StatusCode};
use partner_api::{Order, PartnerApi};

fn conditional(path: &str, key: &str, if_none_match: &str) -> Request<()> {
    let mut request = get(path, Some(key));
    request
        .headers_mut()
        .insert("if-none-match", if_none_match.parse().unwrap());
    request
}

#[tokio::test]
async fn a_poller_gets_304s_while_nothing_changes_and_a_200_when_it_does() {
    let store = store();
    let api = PartnerApi::from_store(store.clone());
    for path in ["/v1/me", "/v1/orders"] {
        let first = call(&api, get(path, Some(KEY_A))).await;
        assert_eq!(first.status, StatusCode::OK);
        let etag = first.header("etag").expect("an ETag").to_owned();
        assert_eq!(first.header("vary"), Some("Authorization, Accept-Encoding"));
        assert_eq!(first.header("cache-control"), Some("private, no-cache"));
        // The same body, the same tag.
        assert_eq!(
            call(&api, get(path, Some(KEY_A))).await.header("etag"),
            Some(&*etag)
        );

        for _ in 0..3 {
            let again = call(&api, conditional(path, KEY_A, &etag)).await;
            assert_eq!(again.status, StatusCode::NOT_MODIFIED, "{path}");
            assert!(again.body.is_empty());
            assert_eq!(again.header("etag"), Some(&*etag));
            assert_eq!(again.header("vary"), Some("Authorization, Accept-Encoding"));
            assert_eq!(again.header("content-length"), None);
            assert_eq!(again.header("content-type"), None);
        }
    }

    // A new order changes the body of /orders, so the old tag no longer matches.
    let etag = call(&api, get("/v1/orders", Some(KEY_A)))
        .await
        .header("etag")
        .unwrap()
        .to_owned();
    let mut newest = Order::clone(&order("a_new", BASE_MILLIS + 10_000_000));
    newest.campaign_name = "Fresh".into();
    store.add_order("org_a", newest).unwrap();
    let changed = call(&api, conditional("/v1/orders", KEY_A, &etag)).await;
    assert_eq!(changed.status, StatusCode::OK);
    assert_eq!(changed.json()["data"]["orders"][0]["id"], "a_new");
    assert_ne!(changed.header("etag"), Some(&*etag));
}

#[tokio::test]
async fn if_none_match_uses_weak_comparison_lists_and_star() {
    let api = api();
    let etag = call(&api, get("/v1/me", Some(KEY_A)))
        .await
        .header("etag")
        .unwrap()
        .to_owned();
    for value in [
        etag.clone(),
        format!("W/{etag}"),
        format!("\"stale\", {etag}"),
        "*".to_owned(),
    ] {
        let response = call(&api, conditional("/v1/me", KEY_A, &value)).await;
        assert_eq!(response.status, StatusCode::NOT_MODIFIED, "{value}");
    }
    for value in ["\"stale\"", etag.trim_matches('"'), "", "W/"] {
        let response = call(&api, conditional("/v1/me", KEY_A, value)).await;
        assert_eq!(response.status, StatusCode::OK, "{value:?}");
    }
    // HEAD revalidates like GET.
    let mut head = conditional("/v1/orders", KEY_A, "*");
    *head.method_mut() = Method::HEAD;
    assert_eq!(call(&api, head).await.status, StatusCode::NOT_MODIFIED);
}

#[tokio::test]
async fn a_tag_never_lets_another_key_or_no_key_through() {
    let api = api();
    let etag = call(&api, get("/v1/orders", Some(KEY_A)))
        .await
        .header("etag")
        .unwrap()
        .to_owned();
    // Another organization's body is another body: a 200 with its own tag.
    let other = call(&api, conditional("/v1/orders", KEY_B, &etag)).await;
    assert_eq!(other.status, StatusCode::OK);
    assert_ne!(other.header("etag"), Some(&*etag));
    // Authentication comes first.
    for key in [REVOKED_KEY, "pk_test_unknown"] {
        let response = call(&api, conditional("/v1/orders", key, &etag)).await;
        assert_eq!(response.status, StatusCode::UNAUTHORIZED);
        assert_eq!(response.header("etag"), None);
    }
    let mut anonymous = get("/v1/orders", None);
    anonymous
        .headers_mut()
        .insert("if-none-match", "*".parse().unwrap());
    assert_eq!(call(&api, anonymous).await.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_tag_is_the_bodys_and_survives_a_new_service_over_the_same_data() {
    // Two services (two replicas, or a restart) over equal data tag equal bodies alike.
    let one = call(&api(), get("/v1/orders", Some(KEY_A))).await;
    let two = call(&api(), get("/v1/orders", Some(KEY_A))).await;
    assert_eq!(one.body, two.body);
    assert_eq!(one.header("etag"), two.header("etag"));
    let me = call(&api(), get("/v1/me", Some(KEY_A))).await;
    assert_ne!(me.header("etag"), one.header("etag"));
    let tag = me.header("etag").unwrap();
    assert!(
        tag.len() == 34 && tag.starts_with('"') && tag.ends_with('"'),
        "{tag}"
    );
}

#[tokio::test]
async fn conditional_requests_can_be_turned_off() {
    let api = api().with_conditional_requests(false);
    let response = call(&api, conditional("/v1/orders", KEY_A, "*")).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.header("etag"), None);
    assert_eq!(response.header("cache-control"), Some("no-store"));
}

#[tokio::test]
async fn a_host_that_compresses_keeps_caches_apart_by_encoding() {
    use http_body_util::BodyExt;
    use tower::{ServiceBuilder, ServiceExt};
    use tower_http::compression::CompressionLayer;

    // A host that compresses in front of the API: tower-http keeps the API's tag, so the
    // API's `Vary` must already name the encoding, on the 200 and on the 304 alike (the
    // layer adds nothing to a bodiless 304).
    let compressed = ServiceBuilder::new()
        .layer(CompressionLayer::new())
        .service(api());
    let mut request = get("/v1/orders", Some(KEY_A));
    request
        .headers_mut()
        .insert("accept-encoding", "gzip".parse().unwrap());
    let response = compressed.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-encoding"], "gzip");
    let vary: Vec<_> = response.headers().get_all("vary").iter().collect();
    assert_eq!(vary, ["Authorization, Accept-Encoding"], "named once");
    let etag = response.headers()["etag"].to_str().unwrap().to_owned();
    let gzipped = response.into_body().collect().await.unwrap().to_bytes();
    let identity = call(&api(), get("/v1/orders", Some(KEY_A))).await;
    assert_ne!(gzipped, identity.body, "the body was compressed");
    assert_eq!(identity.header("etag"), Some(&*etag));
    assert_eq!(
        identity.header("vary"),
        Some("Authorization, Accept-Encoding")
    );

    let mut revalidation = conditional("/v1/orders", KEY_A, &etag);
    revalidation
        .headers_mut()
        .insert("accept-encoding", "gzip".parse().unwrap());
    let response = compressed.oneshot(revalidation).await.unwrap();
    assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(response.headers()["vary"], "Authorization, Accept-Encoding");
}
