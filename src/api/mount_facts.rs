//! What the host's mount tells the API of a request besides the request itself: the peer
//! address (a [`PeerAddr`], axum's `ConnectInfo<SocketAddr>` with the `axum` feature, or the
//! one [`PartnerApi::with_peer_addr`](crate::PartnerApi::with_peer_addr) gave) and the path
//! the partner called (axum's `OriginalUri` under `nest_service`, which strips the mount's
//! path from the request's own URI).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use http::uri::PathAndQuery;
use http::{Extensions, Uri};

use super::client_address::PeerAddr;

/// The peer of the request: its own `PeerAddr` first, then axum's `ConnectInfo`, then the
/// API's. Without any, says so once in the log: the failed-authentication throttle is off
/// and a key held to address ranges is refused, which a host must not find out by surprise.
pub(crate) fn peer(
    extensions: &Extensions,
    api_peer: Option<SocketAddr>,
    warned: &AtomicBool,
) -> Option<SocketAddr> {
    let peer = extensions
        .get::<PeerAddr>()
        .map(|PeerAddr(peer)| *peer)
        .or_else(|| connect_info(extensions))
        .or(api_peer);
    if peer.is_none() {
        warn_once_of_no_peer(warned);
    }
    peer
}

#[cfg(feature = "axum")]
fn connect_info(extensions: &Extensions) -> Option<SocketAddr> {
    extensions
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|axum::extract::ConnectInfo(peer)| *peer)
}

#[cfg(not(feature = "axum"))]
fn connect_info(_: &Extensions) -> Option<SocketAddr> {
    None
}

/// Once per API (its clones share `warned`).
fn warn_once_of_no_peer(warned: &AtomicBool) {
    // One relaxed load per request without a peer once warned: the common case is a peer.
    if !warned.load(Ordering::Relaxed) && !warned.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "partner API: a request came with no peer address (no PeerAddr extension, no \
             axum ConnectInfo, no with_peer_addr): failed authentications are not throttled \
             and keys held to address ranges are refused; see PeerAddr"
        );
    }
}

/// The path and query the partner called, for the `Link`s that lead on: the original URI
/// when the host's router nested the API under a path of its own, else the request's.
pub(crate) fn called_path(uri: &Uri, extensions: &Extensions) -> PathAndQuery {
    original_uri(extensions)
        .and_then(Uri::path_and_query)
        .or_else(|| uri.path_and_query())
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"))
}

#[cfg(feature = "axum")]
fn original_uri(extensions: &Extensions) -> Option<&Uri> {
    extensions
        .get::<axum::extract::OriginalUri>()
        .map(|axum::extract::OriginalUri(uri)| uri)
}

#[cfg(not(feature = "axum"))]
fn original_uri(_: &Extensions) -> Option<&Uri> {
    None
}
