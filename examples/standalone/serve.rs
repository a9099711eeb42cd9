//! The accept loop: at most so many connections at once, each closed when idle, TLS when
//! given, and a graceful stop.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;
use tower::Service;
use tower_http::BoxError;

/// How long shutdown waits for requests in flight before it gives up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers, or to finish a TLS handshake.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// How connections are served.
#[derive(Clone, Debug)]
pub(crate) struct Limits {
    /// How long a connection may stay open with no request in flight and no byte moved,
    /// from accept and between keep-alive requests: it is closed between 1 and 1.5 times this.
    pub(crate) idle_timeout: Duration,
    /// How many connections are served at once; at the cap the loop stops accepting, and new
    /// connections wait in the listen backlog until one closes.
    pub(crate) max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(30),
            max_connections: 1024,
        }
    }
}

/// What [`serve`] serves: a tower service of hyper requests, as `stack::app` makes (with
/// response body `B`).
pub(crate) trait HostService<B>:
    Service<
        Request<hyper::body::Incoming>,
        Response = Response<B>,
        Error = BoxError,
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
            Error = BoxError,
            Future: Send + 'static,
        > + Clone
        + Send
        + 'static
{
}

/// Serves `app` on `listener` (over TLS when `tls` is given) within `limits` until `shutdown`
/// completes, then waits (up to [`SHUTDOWN_GRACE`]) for the connections' requests in flight.
pub(crate) async fn serve<S, RB>(
    listener: TcpListener,
    app: S,
    tls: Option<TlsAcceptor>,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()>,
) where
    S: HostService<RB>,
    RB: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(CLIENT_TIMEOUT);
    let graceful = GracefulShutdown::new();
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
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
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => stream,
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let watcher = graceful.watcher();
        let app = app.clone();
        let tls = tls.clone();
        let idle_timeout = limits.idle_timeout;
        tokio::spawn(async move {
            let _slot = slot;
            match tls {
                None => serve_connection(stream, &builder, app, watcher, idle_timeout).await,
                Some(acceptor) => {
                    match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            serve_connection(stream, &builder, app, watcher, idle_timeout).await
                        }
                        Ok(Err(err)) => tracing::debug!(error = %err, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("shutdown grace period over; dropping the remaining connections");
    }
}

/// Serves one connection (HTTP/1.1, or HTTP/2 by ALPN or prior knowledge) under `watcher`,
/// and closes it once it has been idle for `idle_timeout`.
async fn serve_connection<I, S, RB>(
    io: I,
    builder: &auto::Builder<TokioExecutor>,
    app: S,
    watcher: Watcher,
    idle_timeout: Duration,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HostService<RB>,
    RB: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
{
    let activity = Arc::new(Activity::default());
    // Counts the requests in flight: a connection waiting for its answer is not idle.
    let service = CountRequests {
        inner: app,
        activity: activity.clone(),
    };
    let io = Tracked {
        io,
        activity: activity.clone(),
    };
    let connection = builder.serve_connection(TokioIo::new(io), TowerToHyperService::new(service));
    tokio::select! {
        served = watcher.watch(connection.into_owned()) => {
            if let Err(err) = served {
                tracing::debug!(error = %err, "connection ended with an error");
            }
        }
        () = activity.idle_for(idle_timeout) => {
            tracing::debug!("closing an idle connection");
        }
    }
}

/// What a connection did lately, as its IO and its requests report it.
#[derive(Default)]
struct Activity {
    /// Whether a byte moved (or a request ended) since the watchdog last looked.
    moved: AtomicBool,
    /// The requests in flight.
    in_flight: AtomicUsize,
}

impl Activity {
    fn touch(&self) {
        self.moved.store(true, Ordering::Relaxed);
    }

    /// Completes once nothing moved and no request was in flight for `timeout`: it looks
    /// every half `timeout` (so a busy connection costs no timer per byte or request) and
    /// completes at the second look in a row that finds the connection quiet.
    async fn idle_for(&self, timeout: Duration) {
        let half = timeout / 2;
        let mut quiet_looks = 0;
        loop {
            tokio::time::sleep(half).await;
            let moved = self.moved.swap(false, Ordering::Relaxed);
            if moved || self.in_flight.load(Ordering::Relaxed) > 0 {
                quiet_looks = 0;
            } else {
                quiet_looks += 1;
                if quiet_looks >= 2 {
                    return;
                }
            }
        }
    }
}

/// A connection's service that counts its requests in flight in its [`Activity`].
#[derive(Clone)]
struct CountRequests<S> {
    inner: S,
    activity: Arc<Activity>,
}

impl<S: Service<R>, R> Service<R> for CountRequests<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = Counted<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        Counted {
            in_flight: Some(InFlight::enter(&self.activity)),
            future: self.inner.call(request),
        }
    }
}

pin_project! {
    /// A response future that holds its request's [`InFlight`] until it completes.
    struct Counted<F> {
        #[pin]
        future: F,
        in_flight: Option<InFlight>,
    }
}

impl<F: std::future::Future> std::future::Future for Counted<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let output = std::task::ready!(this.future.poll(cx));
        this.in_flight.take();
        Poll::Ready(output)
    }
}

/// One request in flight on a connection, until dropped.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn enter(activity: &Arc<Activity>) -> Self {
        activity.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(activity.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

pin_project! {
    /// A connection's IO that reports every byte it moves to its [`Activity`].
    struct Tracked<I> {
        #[pin]
        io: I,
        activity: Arc<Activity>,
    }
}

impl<I: AsyncRead> AsyncRead for Tracked<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let polled = this.io.poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.touch();
        }
        polled
    }
}

impl<I: AsyncWrite> AsyncWrite for Tracked<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.io.poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            this.activity.touch();
        }
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        let polled = this.io.poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(written)) if written > 0) {
            this.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}
