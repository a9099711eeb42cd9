//! A tonic host: a gRPC server (the standard gRPC health service, from `tonic-health`) that
//! serves the partner API on the same port through `Server::builder().layer(...)`.
//!
//! tonic speaks HTTP/2 only unless told otherwise; `accept_http1(true)` lets partners' plain
//! HTTP/1.1 clients in. The API answers `/v1/...`; every other request (the gRPC calls, at
//! `/grpc.health.v1.Health/...`) reaches tonic's router.
//!
//! ```text
//! cargo run --example tonic                # listens on 127.0.0.1:50051 (or the first argument)
//! curl -H 'Authorization: Bearer pk_test_demo_0123456789abcdefghijklmn' http://127.0.0.1:50051/v1/me
//! ```

use std::future::Future;

use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::{PartnerApi, PartnerApiLayer, PeerAddr};
use tokio::net::TcpListener;
use tonic::transport::server::{TcpConnectInfo, TcpIncoming};
use tonic::transport::Server;

/// Serves gRPC health checks and the partner API on `listener` until `shutdown` completes.
pub(crate) async fn app(
    api: PartnerApi,
    listener: TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    // The client's address first (tonic's `TcpConnectInfo`), which the API's throttle of
    // failed authentication counts by; then the API.
    let layers = tower::ServiceBuilder::new()
        .map_request(pass_peer_addr)
        .layer(PartnerApiLayer::new(api))
        .into_inner();
    Server::builder()
        .accept_http1(true)
        .layer(layers)
        .add_service(health_service)
        .serve_with_incoming_shutdown(TcpIncoming::from(listener), shutdown)
        .await
}

/// Copies tonic's `TcpConnectInfo` into the API's `PeerAddr`.
fn pass_peer_addr<B>(mut request: http::Request<B>) -> http::Request<B> {
    let peer = request
        .extensions()
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr);
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
        .unwrap_or_else(|| "127.0.0.1:50051".into());
    let listener = TcpListener::bind(&address).await?;
    let address = listener.local_addr()?;
    println!("listening on http://{address} (gRPC and HTTP)");
    println!("  curl -H 'Authorization: Bearer {DEMO_KEY}' http://{address}/v1/me");
    app(PartnerApi::from_store(store), listener, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await?;
    Ok(())
}
