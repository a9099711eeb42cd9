//! `PartnerApiLayer`: the API under its prefix, the host's service everywhere else; and the
//! API nested in an axum router.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::*;
use axum::routing::get as axum_get;
use axum::Router;
use http::{Request, Response, StatusCode};
use partner_api::layer::PartnerApiMount;
use partner_api::PartnerApiLayer;
use tower::{Layer, ServiceExt};

/// A host service that answers 299 with a text body and a header of its own, and counts calls.
fn host(
    calls: Arc<AtomicUsize>,
) -> impl tower::Service<
    Request<String>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |request: Request<String>| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            let mut response = Response::new(format!("host saw {}", request.uri()));
            *response.status_mut() = StatusCode::from_u16(299).unwrap();
            response
                .headers_mut()
                .insert("x-host", "yes".parse().unwrap());
            Ok(response)
        }
    })
}

fn request(path: &str, key: Option<&str>) -> Request<String> {
    get(path, key).map(|()| String::new())
}

#[tokio::test]
async fn other_paths_reach_the_inner_service_untouched() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = PartnerApiLayer::new(api()).layer(host(calls.clone()));
    for path in [
        "/",
        "/health",
        "/v10/me",
        "/v1me",
        "/v2/orders",
        "/api/v1/me",
        "/V1/me",
    ] {
        let response = collect(
            service
                .clone()
                .oneshot(request(path, Some(KEY_A)))
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(response.status.as_u16(), 299, "{path}");
        assert_eq!(response.header("x-host"), Some("yes"));
        assert_eq!(response.body, format!("host saw {path}"));
    }
    assert_eq!(calls.load(Ordering::SeqCst), 7);
}

#[tokio::test]
async fn paths_under_the_prefix_are_the_apis_alone() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = PartnerApiLayer::new(api()).layer(host(calls.clone()));
    let response = collect(
        service
            .clone()
            .oneshot(request("/v1/me", Some(KEY_A)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(response.json()["data"]["organization"]["id"], "org_a");
    for path in ["/v1", "/v1/", "/v1/unknown"] {
        let response = collect(service.clone().oneshot(request(path, None)).await.unwrap()).await;
        assert_eq!(response.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(response.error_message(), "not found");
    }
    let response = collect(
        service
            .clone()
            .oneshot(request("/v1/orders", None))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the host never sees API requests"
    );
}

#[tokio::test]
async fn the_layer_follows_a_configured_prefix() {
    let calls = Arc::new(AtomicUsize::new(0));
    let service = PartnerApiMount::new(host(calls.clone()), api().with_prefix("/partner/v1"));
    assert_eq!(
        service
            .get_ref()
            .clone()
            .oneshot(request("/x", None))
            .await
            .unwrap()
            .status(),
        299
    );
    let response = collect(
        service
            .clone()
            .oneshot(request("/partner/v1/orders", Some(KEY_B)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let response = service
        .clone()
        .oneshot(request("/v1/me", Some(KEY_A)))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 299);
    let _inner = service.into_inner();
}

#[tokio::test]
async fn the_inner_services_errors_pass_through() {
    let failing = tower::service_fn(|_: Request<String>| async {
        Err::<Response<String>, _>(std::io::Error::other("inner failed"))
    });
    let service = PartnerApiLayer::new(api()).layer(failing);
    let err = service
        .clone()
        .oneshot(request("/elsewhere", None))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "inner failed");
    let ok = service
        .oneshot(request("/v1/me", Some(KEY_A)))
        .await
        .unwrap();
    assert_eq!(ok.status(), StatusCode::OK);
}

async fn axum_call(router: Router, path: &str, key: Option<&str>) -> Collected {
    let request = get(path, key).map(|()| axum::body::Body::empty());
    collect(router.oneshot(request).await.unwrap()).await
}

#[tokio::test]
async fn axum_nest_service_strips_its_prefix_and_the_api_still_answers() {
    let router = Router::new()
        .route("/health", axum_get(|| async { "ok" }))
        .nest_service("/partner", api());
    let response = axum_call(router.clone(), "/partner/v1/me", Some(KEY_A)).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(
        response.json()["data"]["organization"]["name"],
        "Alpha Media"
    );
    let response = axum_call(router.clone(), "/partner/v1/orders", None).await;
    assert_eq!(response.status, StatusCode::UNAUTHORIZED);
    assert_eq!(axum_call(router.clone(), "/health", None).await.body, "ok");
}

#[tokio::test]
async fn axum_router_layer_keeps_the_hosts_routes() {
    let router = Router::new()
        .route("/health", axum_get(|| async { "ok" }))
        .layer(PartnerApiLayer::new(api()));
    let response = axum_call(router.clone(), "/v1/orders", Some(KEY_B)).await;
    assert_eq!(response.status, StatusCode::OK);
    assert_eq!(
        response.json()["data"]["orders"].as_array().unwrap().len(),
        3
    );
    let health = axum_call(router.clone(), "/health", None).await;
    assert_eq!(
        (health.status, health.body.as_ref()),
        (StatusCode::OK, &b"ok"[..])
    );
    assert_eq!(
        axum_call(router, "/missing", None).await.status,
        StatusCode::NOT_FOUND
    );
}

/// A host service that is never ready, as one behind a spent `ConcurrencyLimit` is.
#[derive(Clone)]
struct NeverReady;

impl tower::Service<Request<String>> for NeverReady {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Pending
    }

    fn call(&mut self, _request: Request<String>) -> Self::Future {
        panic!("called without being ready")
    }
}

#[tokio::test]
async fn api_requests_do_not_wait_for_the_inner_services_readiness() {
    let mut mounted = PartnerApiLayer::new(api()).layer(NeverReady);
    // Ready at once, although the inner service never is.
    let ready = std::future::poll_fn(|cx| tower::Service::poll_ready(&mut mounted, cx));
    tokio::time::timeout(std::time::Duration::from_secs(1), ready)
        .await
        .expect("the mount is ready")
        .unwrap();
    let response = mounted
        .clone()
        .oneshot(request("/v1/me", Some(KEY_A)))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    // The host's own request waits for its service (and never calls it unready).
    let host_request = mounted.oneshot(request("/health", None));
    assert!(
        tokio::time::timeout(std::time::Duration::from_millis(100), host_request)
            .await
            .is_err(),
        "a request for the inner service must wait for it to be ready"
    );
}
