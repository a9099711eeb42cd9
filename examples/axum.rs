//! An axum host: an existing `Router` with routes of its own mounts the partner API both ways
//! a product team would (the README's axum snippet, whose `app` is this one).
//!
//! - `nest_service("/partner", api)`: axum strips `/partner`, the API answers the `/v1/...`
//!   that is left, so partners call `/partner/v1/me`; with the crate's `axum` feature its
//!   `Link`s keep `/partner` (it reads axum's `OriginalUri`);
//! - `.layer(PartnerApiLayer::new(api))`: the API answers `/v1/...` before the router sees
//!   the request; everything else reaches the host's routes and fallback untouched.
//!
//! Served with `into_make_service_with_connect_info::<SocketAddr>()`, the API reads the peer
//! from axum's `ConnectInfo` (feature `axum`): failed keys are throttled per client and keys
//! held to address ranges work.
//!
//! ```text
//! cargo run --example axum --features axum   # listens on 127.0.0.1:3000 (or the first argument)
//! curl -H 'Authorization: Bearer pk_test_demo_0123456789abcdefghijklmn' http://127.0.0.1:3000/partner/v1/me
//! ```

use std::net::SocketAddr;

use axum::{http::StatusCode, routing::get, Json, Router};
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::{PartnerApi, PartnerApiLayer};

/// The host's router: its own routes and fallback, the API nested under `/partner` and
/// layered at `/v1`.
pub(crate) fn app(api: PartnerApi) -> Router {
    Router::new()
        .route("/", get(|| async { "the host's home page" }))
        .route(
            "/api/status",
            get(|| async { Json(serde_json::json!({ "host": "ok" })) }),
        )
        .fallback(|| async { (StatusCode::NOT_FOUND, "the host's own 404") })
        // Nested: axum strips "/partner"; the API answers /partner/v1/me, /partner/v1/orders,
        // and its links keep "/partner".
        .nest_service("/partner", api.clone())
        // Layered: the API answers /v1/...; every other path reaches the routes above.
        .layer(PartnerApiLayer::new(api))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let store = Seed::demo().to_memory_store()?;
    let address = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:3000".into());
    let listener = tokio::net::TcpListener::bind(&address).await?;
    let address = listener.local_addr()?;
    println!("listening on http://{address}");
    println!("  curl -H 'Authorization: Bearer {DEMO_KEY}' http://{address}/partner/v1/me");
    let app = app(PartnerApi::from_store(store.clone()).with_events(store));
    // The peer in ConnectInfo: the API throttles failed keys per client and pins keys.
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
