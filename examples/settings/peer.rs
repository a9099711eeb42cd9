//! The client's address: the connection's peer, passed to the partner API as `PeerAddr`.

use axum::extract::{ConnectInfo, Request};
use partner_api::PeerAddr;
use tokio::net::TcpListener;

use crate::tls::TlsListener;

/// The peer of a connection, over TLS or not, as `axum::serve` hands it to `ConnectInfo`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer(std::net::SocketAddr);

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TcpListener>) -> Self {
        Self(*stream.remote_addr())
    }
}

impl axum::extract::connect_info::Connected<axum::serve::IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: axum::serve::IncomingStream<'_, TlsListener>) -> Self {
        Self(*stream.remote_addr())
    }
}

/// Copies axum's `ConnectInfo` into the API's `PeerAddr`, when the server provides it.
pub(crate) async fn pass_peer_addr(mut request: Request) -> Request {
    let peer = request
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|ConnectInfo(Peer(peer))| *peer);
    if let Some(peer) = peer {
        request.extensions_mut().insert(PeerAddr(peer));
    }
    request
}
