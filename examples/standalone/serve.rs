//! The accept loop: at most so many connections at once and per client address, each closed
//! when idle or old, TLS when given, and a graceful stop.

mod connection;

use connection::{Activity, Connection};

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::per_address::PerAddress;
use tower::util::{Oneshot, ServiceExt};
use tower::Service;
use tower_http::BoxError;

/// How long shutdown waits for requests in flight before it gives up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client may take to finish a TLS handshake, and by default to send a request's
/// headers.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How connections are served.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// How long a connection may stay open with no request in flight, from accept and between
    /// requests: it is closed between 1 and 1.5 times this. Only requests count: bytes that
    /// carry none (HTTP/2 pings, window updates, a trickle of header bytes) do not.
    pub(crate) idle_timeout: Duration,
    /// How long a connection may take to send a request's head once it sent a byte, and
    /// between requests: then it is closed, as hyper's header-read timeout would. Not for a
    /// connection known to speak HTTP/2 (by ALPN, or by a request), whose idle streams the
    /// idle timeout bounds. Checked by the connection's watchdog, so it fires up to half of
    /// this late.
    pub(crate) header_read_timeout: Duration,
    /// How many connections are served at once; at the cap the loop stops accepting, and new
    /// connections wait in the listen backlog until one closes.
    pub(crate) max_connections: usize,
    /// How many of them one client address may hold (0: no cap); beyond it, a new connection
    /// from that address is closed at once, so one client never holds every slot.
    pub(crate) max_connections_per_ip: usize,
    /// How long a connection may live: then it is closed gracefully (after its requests in
    /// flight; HTTP/2 with a GOAWAY), so that clients spread over replicas again and no
    /// connection is held forever.
    pub(crate) max_connection_age: Duration,
}

/// The default cap on connections: what one async process holds easily, within the file
/// descriptors `main` raises its limit to.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 10_000;
/// The default cap per client address.
pub(crate) const DEFAULT_MAX_CONNECTIONS_PER_IP: usize = 64;
/// The default maximum connection age.
pub(crate) const DEFAULT_MAX_CONNECTION_AGE: Duration = Duration::from_secs(600);

impl Default for Limits {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(30),
            header_read_timeout: CLIENT_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: DEFAULT_MAX_CONNECTIONS_PER_IP,
            max_connection_age: DEFAULT_MAX_CONNECTION_AGE,
        }
    }
}

/// File descriptors kept for everything but the API's connections: the listeners, the
/// database pool and its listener, Redis, the metrics listener, logs.
const OTHER_FILES: usize = 256;

/// Raises the open-file limit to fit `max_connections` connections (each is a file
/// descriptor) and the host's other files, and returns the cap that fits: `max_connections`,
/// or less with a warning when the hard limit is lower (raise it with `ulimit -Hn`, or
/// systemd's `LimitNOFILE=`).
pub(crate) fn fit_open_files(max_connections: usize) -> usize {
    let wanted = u64::try_from(max_connections.saturating_add(OTHER_FILES)).unwrap_or(u64::MAX);
    let granted = match rlimit::increase_nofile_limit(wanted) {
        Ok(granted) => granted,
        // Not a platform with such a limit, or not allowed to ask: keep the cap.
        Err(_) => return max_connections,
    };
    if granted >= wanted {
        return max_connections;
    }
    let fits = usize::try_from(granted)
        .unwrap_or(usize::MAX)
        .saturating_sub(OTHER_FILES)
        .max(1);
    tracing::warn!(
        max_connections,
        open_file_limit = granted,
        serving = fits,
        "the open-file limit is too low for --max-connections; serving fewer (raise it with \
         `ulimit -n` or systemd's LimitNOFILE=)"
    );
    fits
}

/// What [`serve`] serves: a tower service of hyper requests, as `stack::app` makes (with
/// response body `B`).
pub(crate) trait HostService<B>:
    Service<
        Request<hyper::body::Incoming>,
        Response = Response<B>,
        Error: Into<BoxError> + Send + 'static,
        Future: Send + 'static,
    > + Clone
    + Send
    + 'static
{
}

impl<S, B> HostService<B> for S where
    S: Service<
            Request<hyper::body::Incoming>,
            Response = Response<B>,
            Error: Into<BoxError> + Send + 'static,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// Serves `app(peer)` to each connection from `peer` accepted on `listener` (over TLS when
/// `tls` is given) within `limits` until `shutdown` completes, then waits (up to
/// [`SHUTDOWN_GRACE`]) for the connections' requests in flight. A service made per
/// connection knows its peer without a `PeerAddr` in every request's extensions (a map
/// allocated per request; see `PartnerApi::with_peer_addr`).
pub(crate) async fn serve<M, S, RB>(
    listener: TcpListener,
    app: M,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) where
    M: Fn(SocketAddr) -> S,
    S: HostService<RB>,
    RB: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // The header-read timeout is the connection watchdog's (`Activity::watch`), not hyper's.
    builder.http1().header_read_timeout(None);
    let max_connections = limits.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max_connections));
    let per_ip = Arc::new(PerAddress::new(limits.max_connections_per_ip));
    let (stopping, stop_signal) = watch::channel(false);
    tokio::pin!(shutdown);
    loop {
        // At the cap, wait for a connection to close before accepting the next.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_closed) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Some(held) = per_ip.enter(peer.ip()) else {
            // Closed at once, its slot free again: the client already holds its share.
            tracing::debug!(peer = %peer.ip(), "too many connections from one address");
            continue;
        };
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let app = app(peer);
        let tls = tls.clone();
        let limits = limits.clone();
        let stop_signal = stop_signal.clone();
        tokio::spawn(async move {
            let _held = (slot, held);
            let connection = Connection {
                limits,
                stop_signal,
            };
            match tls {
                None => connection.serve(stream, &builder, app, false).await,
                Some(acceptor) => {
                    match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            let http2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
                            connection.serve(stream, &builder, app, http2).await;
                        }
                        Ok(Err(err)) => tracing::debug!(error = %err, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    let _ = stopping.send(true);
    // Every connection holds a slot until it ends: all of them back means all ended.
    let all_closed = slots.acquire_many(u32::try_from(max_connections).unwrap_or(u32::MAX));
    if tokio::time::timeout(SHUTDOWN_GRACE, all_closed)
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; dropping the remaining connections");
    }
}

/// A connection's service, as hyper calls it: counts the requests in flight in its
/// [`Activity`], and calls the host's service (a clone per request) at once.
#[derive(Clone)]
struct PerConnection<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S, B, RB> hyper::service::Service<Request<B>> for PerConnection<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone,
{
    type Response = Response<Counted<RB>>;
    type Error = S::Error;
    type Future = CountedFuture<Called<S, Request<B>>>;

    fn call(&self, request: Request<B>) -> Self::Future {
        let mut service = self.inner.clone();
        let in_flight = Some(InFlight::enter(&self.activity));
        // Each way builds the whole answer in one expression, so the stack's future (about
        // 560 bytes) is written once, in place, instead of moved into a `Called` and that
        // into the `CountedFuture` (callgrind counted four copies a request; that the
        // compiler writes it in place is measured, not promised by the language).
        if request.version() == Version::HTTP_2 {
            self.activity.http2.store(true, Ordering::Relaxed);
            // hyper calls an HTTP/2 service on the connection's task and spawns only its
            // future: the stack runs there instead, so the streams are served in parallel and
            // a panic in a layer ends one stream, not the connection.
            return CountedFuture {
                in_flight,
                future: Called::Later {
                    oneshot: service.oneshot(request),
                },
            };
        }
        match service.poll_ready(&mut Context::from_waker(&NOOP_WAKER)) {
            Poll::Ready(Ok(())) => CountedFuture {
                in_flight,
                future: Called::Now {
                    future: service.call(request),
                },
            },
            Poll::Ready(Err(error)) => CountedFuture {
                in_flight,
                future: Called::Failed { error: Some(error) },
            },
            Poll::Pending => CountedFuture {
                in_flight,
                future: Called::Later {
                    oneshot: service.oneshot(request),
                },
            },
        }
    }
}

pin_project! {
    /// The host service's answer to an HTTP/1 request: called at once when the service is
    /// ready, which this host's stack always is, else once it is.
    ///
    /// Why at once: right after hyper takes a request it reads the socket to notice a
    /// client that goes away. A request still held then (hyper-util's `TowerToHyperService`
    /// holds it in a `Oneshot` until first polled) shares hyper's read buffer, so that read
    /// moves the buffer: two allocations and a copy per request.
    #[project = CalledProjection]
    enum Called<S, R>
    where
        S: Service<R>,
    {
        Now { #[pin] future: S::Future },
        Later { #[pin] oneshot: Oneshot<S, R> },
        Failed { error: Option<S::Error> },
    }
}

impl<S: Service<R>, R> std::future::Future for Called<S, R> {
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project() {
            CalledProjection::Now { future } => future.poll(cx),
            CalledProjection::Later { oneshot } => oneshot.poll(cx),
            // Taken at the first poll; a future is not polled after it is ready.
            CalledProjection::Failed { error } => error
                .take()
                .map_or(Poll::Pending, |error| Poll::Ready(Err(error))),
        }
    }
}

/// A waker for asking a service whether it is ready now: a service that is not registers it,
/// and is asked again with the task's own by `Oneshot`.
static NOOP_WAKER: std::sync::LazyLock<Waker> = std::sync::LazyLock::new(|| {
    struct Noop;
    impl Wake for Noop {
        fn wake(self: Arc<Self>) {}
    }
    Waker::from(Arc::new(Noop))
});

pin_project! {
    /// A response future that hands its request's [`InFlight`] to the response body.
    struct CountedFuture<F> {
        #[pin]
        future: F,
        in_flight: Option<InFlight>,
    }
}

impl<F, RB, E> std::future::Future for CountedFuture<F>
where
    F: std::future::Future<Output = Result<Response<RB>, E>>,
{
    type Output = Result<Response<Counted<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let output = std::task::ready!(this.future.poll(cx));
        let in_flight = this.in_flight.take();
        Poll::Ready(output.map(|response| {
            response.map(|body| Counted {
                body,
                _in_flight: in_flight,
            })
        }))
    }
}

pin_project! {
    /// A response body that keeps its request in flight until hyper drops it, sent.
    pub(crate) struct Counted<B> {
        #[pin]
        body: B,
        _in_flight: Option<InFlight>,
    }
}

impl<B: Body> Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// One request in flight on a connection, until dropped.
pub(crate) struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: &Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        activity.touch();
        Self(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}
