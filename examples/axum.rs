//! An axum host: an existing `Router` with routes of its own mounts the partner API both ways
//! a product team would.
//!
//! - `nest_service("/partner", api)`: axum strips `/partner`, the API answers the `/v1/...`
//!   that is left, so partners call `/partner/v1/me`;
//! - `.layer(PartnerApiLayer::new(api))`: the API answers `/v1/...` before the router sees
//!   the request; everything else reaches the host's routes untouched.
//!
//! ```text
//! cargo run --example axum                 # listens on 127.0.0.1:3000 (or the first argument)
//! curl -H 'Authorization: Bearer pk_test_demo_0123456789abcdefghijklmn' http://127.0.0.1:3000/partner/v1/me
//! ```

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request};
use axum::routing::get;
use axum::{Json, Router};
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::{PartnerApi, PartnerApiLayer, PeerAddr};

/// The host's router with the partner API mounted at `/partner/v1` and at `/v1`.
pub(crate) fn app(api: PartnerApi) -> Router {
    Router::new()
        // The host's own routes, with their own responses.
        .route("/", get(|| async { "the host's home page" }))
        .route(
            "/api/status",
            get(|| async { Json(serde_json::json!({ "host": "ok" })) }),
        )
        // axum strips `/partner`; the API (prefix `/v1`) answers `/partner/v1/me`.
        .nest_service("/partner", api.clone())
        // The API answers `/v1/...` itself, in front of every route above.
        .layer(PartnerApiLayer::new(api))
        // Outermost: tells the API the client's address (axum's `ConnectInfo`, from
        // `into_make_service_with_connect_info`), which its throttle of failed
        // authentication counts by.
        .layer(axum::middleware::map_request(pass_peer_addr))
}

/// Copies axum's `ConnectInfo` into the API's `PeerAddr`, when the server provides it.
async fn pass_peer_addr(mut request: Request) -> Request {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer);
    if let Some(peer) = peer {
        request.extensions_mut().insert(PeerAddr(peer));
    }
    request
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
    let app = app(PartnerApi::from_store(store));
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
