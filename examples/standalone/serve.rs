//! The accept loop: at most so many connections at once and per client address, each closed
//! when idle or old, TLS when given, and a graceful stop.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use partner_api::PeerAddr;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;
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
    /// How long an HTTP/1 client may take to send a request's headers, from the moment the
    /// connection waits for them: then it is closed. Checked by the connection's watchdog, so
    /// it fires up to half of this (or of the idle timeout, if shorter) late.
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
    let builder = auto::Builder::new(TokioExecutor::new());
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
        let app = app.clone();
        let tls = tls.clone();
        let limits = limits.clone();
        let stop_signal = stop_signal.clone();
        tokio::spawn(async move {
            let _held = (slot, held);
            let connection = Connection {
                peer,
                limits: &limits,
                stop_signal,
            };
            match tls {
                None => connection.serve(stream, &builder, app).await,
                Some(acceptor) => {
                    match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => connection.serve(stream, &builder, app).await,
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

/// The connections each client address holds, for the cap per address.
struct PerAddress {
    max: usize,
    held: Mutex<HashMap<IpAddr, usize>>,
}

impl PerAddress {
    fn new(max: usize) -> Self {
        Self {
            max,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// One more connection of `address`, held until the guard drops; `None` at the cap.
    fn enter(self: &Arc<Self>, address: IpAddr) -> Option<AddressGuard> {
        if self.max == 0 {
            return Some(AddressGuard(None));
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let count = held.entry(address).or_insert(0);
        if *count >= self.max {
            return None;
        }
        *count += 1;
        Some(AddressGuard(Some((self.clone(), address))))
    }
}

/// One connection of an address, counted in [`PerAddress`] until dropped.
struct AddressGuard(Option<(Arc<PerAddress>, IpAddr)>);

impl Drop for AddressGuard {
    fn drop(&mut self) {
        let Some((per_ip, address)) = self.0.take() else {
            return;
        };
        let mut held = per_ip.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = held.get_mut(&address) {
            *count -= 1;
            if *count == 0 {
                held.remove(&address);
            }
        }
    }
}

/// One accepted connection and what bounds it.
struct Connection<'a> {
    peer: SocketAddr,
    limits: &'a Limits,
    stop_signal: watch::Receiver<bool>,
}

impl Connection<'_> {
    /// Serves the connection (HTTP/1.1, or HTTP/2 by ALPN or prior knowledge) until the client
    /// closes it, it is idle for the idle timeout (closed at once), or it reaches its maximum
    /// age or the server stops (closed gracefully: after the requests in flight).
    async fn serve<I, S, RB>(mut self, io: I, builder: &auto::Builder<TokioExecutor>, app: S)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: HostService<RB>,
        RB: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        let activity = Arc::new(Activity::default());
        // hyper's header-read timeout, on this connection's watchdog (see `HeaderTimer`).
        let mut builder = builder.clone();
        builder
            .http1()
            .timer(HeaderTimer(activity.clone()))
            .header_read_timeout(self.limits.header_read_timeout);
        let service = PerConnection {
            inner: app,
            activity: activity.clone(),
            peer: PeerAddr(self.peer),
        };
        let connection = builder
            .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
            .into_owned();
        tokio::pin!(connection);
        let idle = activity.watch(self.limits.idle_timeout, self.limits.header_read_timeout);
        tokio::pin!(idle);
        let old = tokio::time::sleep(self.limits.max_connection_age);
        tokio::pin!(old);
        let mut closing = *self.stop_signal.borrow();
        if closing {
            connection.as_mut().graceful_shutdown();
        }
        loop {
            tokio::select! {
                served = connection.as_mut() => {
                    if let Err(err) = served {
                        tracing::debug!(error = %err, "connection ended with an error");
                    }
                    return;
                }
                () = &mut idle => {
                    tracing::debug!("closing an idle connection");
                    return;
                }
                () = &mut old, if !closing => {
                    tracing::debug!("closing a connection at its maximum age");
                    closing = true;
                    connection.as_mut().graceful_shutdown();
                }
                changed = self.stop_signal.changed(), if !closing => {
                    // A closed channel is a stop too: the server is gone.
                    if changed.is_err() || *self.stop_signal.borrow() {
                        closing = true;
                        connection.as_mut().graceful_shutdown();
                    }
                }
            }
        }
    }
}

/// What a connection did lately: its requests, from their start to the end of their
/// response body; and the deadline of the request headers it waits for.
struct Activity {
    /// Whether a request started or ended since the watchdog last looked.
    moved: AtomicBool,
    /// The requests in flight.
    in_flight: AtomicUsize,
    /// The instant the deadlines below count from.
    epoch: Instant,
    /// When the headers hyper waits for are due, in milliseconds after `epoch`; `u64::MAX`
    /// when it waits for none.
    headers_due: AtomicU64,
    /// Set by the watchdog once `headers_due` passed; hyper then ends the connection.
    headers_late: AtomicBool,
    /// The task to wake when the headers are late.
    headers_waker: Mutex<Option<Waker>>,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            moved: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            epoch: Instant::now(),
            headers_due: AtomicU64::new(u64::MAX),
            headers_late: AtomicBool::new(false),
            headers_waker: Mutex::new(None),
        }
    }
}

impl Activity {
    fn touch(&self) {
        self.moved.store(true, Ordering::Relaxed);
    }

    /// Completes once no request started, ended or was in flight for `idle_timeout`, and
    /// wakes hyper when the request headers it waits for are late. It looks at least twice per
    /// idle timeout and per header timeout (a timer per connection, none per request) and
    /// completes at the look that finds the connection quiet for the whole idle timeout:
    /// between 1 and 1.5 times it after the last request.
    async fn watch(&self, idle_timeout: Duration, header_read_timeout: Duration) {
        // At least two looks per idle timeout and per header timeout: a quiet connection is
        // closed between its idle timeout and that plus one look (at most 1.5 times it), and
        // late headers are found within half their timeout.
        let looks = idle_timeout
            .as_nanos()
            .div_ceil((header_read_timeout.as_nanos() / 2).max(1))
            .max(2);
        let look = Duration::from_nanos(
            u64::try_from(idle_timeout.as_nanos().div_ceil(looks)).unwrap_or(u64::MAX),
        )
        .max(Duration::from_millis(1));
        let quiet_looks_needed = looks;
        let mut quiet_looks = 0;
        loop {
            tokio::time::sleep(look).await;
            self.wake_if_headers_late();
            let moved = self.moved.swap(false, Ordering::Relaxed);
            if moved || self.in_flight.load(Ordering::Relaxed) > 0 {
                quiet_looks = 0;
            } else {
                quiet_looks += 1;
                if quiet_looks >= quiet_looks_needed {
                    return;
                }
            }
        }
    }

    /// `at` in milliseconds after `epoch` (0 before it).
    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(u64::MAX)
    }

    fn wake_if_headers_late(&self) {
        let due = self.headers_due.load(Ordering::Acquire);
        if due != u64::MAX && self.millis(Instant::now()) >= due {
            self.headers_late.store(true, Ordering::Release);
            let waker = self
                .headers_waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(waker) = waker {
                waker.wake();
            }
        }
    }
}

/// hyper's header-read timer, on the connection's watchdog instead of the runtime's timer
/// wheel. hyper asks for a new timer for every request's headers and drops it once they are
/// read: with hyper-util's `TokioTimer`, a timer registered and cancelled again per request,
/// about 1,500 instructions (see `docs::performance`). Here a request's timer is a deadline
/// in the connection's [`Activity`], and the watchdog, which looks at the connection anyway,
/// wakes hyper once it passed; hyper then ends the connection as before.
#[derive(Clone)]
struct HeaderTimer(Arc<Activity>);

impl hyper::rt::Timer for HeaderTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(Instant::now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HeadersDue {
            due: self.0.millis(deadline),
            activity: self.0.clone(),
        })
    }
}

/// The headers of one request, due at `due` (see [`HeaderTimer`]).
struct HeadersDue {
    activity: Arc<Activity>,
    due: u64,
}

impl std::future::Future for HeadersDue {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let activity = &self.activity;
        {
            let mut waker = activity
                .headers_waker
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *waker = Some(cx.waker().clone());
            }
        }
        activity.headers_due.store(self.due, Ordering::Release);
        if activity.headers_late.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl hyper::rt::Sleep for HeadersDue {}

impl Drop for HeadersDue {
    /// The headers came (or the connection ended): nothing is due any more.
    fn drop(&mut self) {
        self.activity.headers_due.store(u64::MAX, Ordering::Release);
        self.activity.headers_late.store(false, Ordering::Release);
    }
}

/// A connection's service: tells the API the peer's address, and counts the requests in
/// flight in its [`Activity`].
#[derive(Clone)]
struct PerConnection<S> {
    inner: S,
    activity: Arc<Activity>,
    peer: PeerAddr,
}

impl<S, B, RB> Service<Request<B>> for PerConnection<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
{
    type Response = Response<Counted<RB>>;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        request.extensions_mut().insert(self.peer);
        CountedFuture {
            in_flight: Some(InFlight::enter(&self.activity)),
            future: self.inner.call(request),
        }
    }
}

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
