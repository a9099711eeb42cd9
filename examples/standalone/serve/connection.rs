//! One accepted connection: served until it closes, is idle too long, grows too old or the
//! host stops, watched over by its [`Activity`].

use super::*;

/// One accepted connection and what bounds it.
pub(super) struct Connection {
    pub(super) limits: Limits,
    pub(super) stop_signal: watch::Receiver<bool>,
}

impl Connection {
    /// Serves the connection (HTTP/1.1, or HTTP/2 by ALPN or prior knowledge; `http2` when
    /// ALPN chose it) until the client closes it, it is idle for the idle timeout or late with
    /// a request's headers (closed at once), or it reaches its maximum age or the server stops
    /// (closed gracefully: after the requests in flight).
    pub(super) async fn serve<I, S, RB>(
        self,
        io: I,
        builder: &auto::Builder<TokioExecutor>,
        app: S,
        http2: bool,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
        S: HostService<RB>,
        RB: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
    {
        let activity = Arc::new(Activity {
            http2: AtomicBool::new(http2),
            ..Activity::default()
        });
        let service = PerConnection {
            inner: app,
            activity: activity.clone(),
        };
        let io = Heard {
            io,
            activity: activity.clone(),
        };
        let connection = builder.serve_connection(TokioIo::new(io), service);
        tokio::pin!(connection);
        // The watchdog is a task of its own: the connection's task, woken for every request,
        // then polls one channel besides the connection, not every timer (as a `select!` over
        // them would: about 650 instructions per request, see `docs::performance`).
        let (tell, mut told) = mpsc::channel(2);
        tokio::spawn(watch_over(activity, self.limits, self.stop_signal, tell));
        let mut watched = true;
        loop {
            tokio::select! {
                biased;
                served = connection.as_mut() => {
                    if let Err(err) = served {
                        tracing::debug!(error = %err, "connection ended with an error");
                    }
                    return;
                }
                close = told.recv(), if watched => match close {
                    Some(Close::Gracefully) => connection.as_mut().graceful_shutdown(),
                    Some(Close::Now) => return,
                    // The watchdog is gone (it panicked): no connection is served without its
                    // limits, so this one ends after its requests in flight.
                    None => {
                        watched = false;
                        connection.as_mut().graceful_shutdown();
                    }
                },
            }
        }
    }
}

/// What the watchdog tells its connection.
enum Close {
    /// After the requests in flight (HTTP/2 with a GOAWAY).
    Gracefully,
    /// At once.
    Now,
}

/// A connection's watchdog: tells it to close at once when it is quiet ([`Activity::watch`]),
/// and gracefully at its maximum age or when the server stops. Ends with the connection.
async fn watch_over(
    activity: Arc<Activity>,
    limits: Limits,
    mut stop_signal: watch::Receiver<bool>,
    tell: mpsc::Sender<Close>,
) {
    let quiet = activity.watch(limits.idle_timeout, limits.header_read_timeout);
    tokio::pin!(quiet);
    let old = tokio::time::sleep(limits.max_connection_age);
    tokio::pin!(old);
    let mut closing = *stop_signal.borrow();
    if closing {
        let _ = tell.send(Close::Gracefully).await;
    }
    loop {
        tokio::select! {
            () = tell.closed() => return,
            quiet = &mut quiet => {
                match quiet {
                    Quiet::Idle => tracing::debug!("closing an idle connection"),
                    Quiet::HeadersLate => {
                        tracing::debug!("closing a connection whose request headers are late");
                    }
                }
                let _ = tell.send(Close::Now).await;
                return;
            }
            () = &mut old, if !closing => {
                tracing::debug!("closing a connection at its maximum age");
                closing = true;
                let _ = tell.send(Close::Gracefully).await;
            }
            changed = stop_signal.changed(), if !closing => {
                // A closed channel is a stop too: the server is gone.
                if changed.is_err() || *stop_signal.borrow() {
                    closing = true;
                    let _ = tell.send(Close::Gracefully).await;
                }
            }
        }
    }
}

/// A connection's transport, which tells its [`Activity`] once the client sent a byte: a
/// connection that sent nothing waits under the idle timeout alone, as it did when hyper's
/// header timer started with the first bytes of a head.
struct Heard<I> {
    io: I,
    activity: Arc<Activity>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Heard<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        // A load, and a store once: the flag's cache line is not written per read.
        if buf.filled().len() > before && !self.activity.heard.load(Ordering::Relaxed) {
            self.activity.heard.store(true, Ordering::Relaxed);
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Heard<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// What a connection did lately: its requests, from their start to the end of their
/// response body.
#[derive(Default)]
pub(super) struct Activity {
    /// Whether a request started or ended since the watchdog last looked.
    pub(super) moved: AtomicBool,
    /// The requests in flight.
    pub(super) in_flight: AtomicUsize,
    /// Whether the connection speaks HTTP/2, whose requests have no header-read timeout.
    pub(super) http2: AtomicBool,
    /// Whether the client sent a byte yet ([`Heard`]): until then the connection waits for
    /// its first request under the idle timeout alone.
    pub(super) heard: AtomicBool,
}

/// Why the watchdog ends a connection.
#[derive(Debug, PartialEq, Eq)]
enum Quiet {
    /// No request for the idle timeout.
    Idle,
    /// A connection that is not HTTP/2 and sent a byte sent no whole request head for the
    /// header-read timeout.
    HeadersLate,
}

impl Activity {
    pub(super) fn touch(&self) {
        self.moved.store(true, Ordering::Relaxed);
    }

    /// Completes once the connection had no request in flight, and none started or ended,
    /// for `idle_timeout` ([`Quiet::Idle`]), or, once the client sent a byte and unless it
    /// speaks HTTP/2, for `header_read_timeout` ([`Quiet::HeadersLate`]).
    ///
    /// The second is hyper's header-read timeout, kept here instead of in hyper: an HTTP/1
    /// connection with no request in flight is waiting for the next request's head (hyper
    /// serves one request at a time), and hyper's own timer counts from the same moments: the
    /// client's first bytes, then the end of each response. hyper asks its timer for a new
    /// sleep for every request and drops it once the head is read: a boxed future, a clock
    /// read and a wake-up registration per request (about 1,500 instructions, see
    /// `docs::performance`), where this costs nothing per request.
    ///
    /// Bound: the watchdog looks every `look`, at most a quarter of either timeout (a timer
    /// per connection, none per request). A timeout `T` is reached after `ceil(T / look)`
    /// quiet looks counted from the look that last saw a change, which came at most one look
    /// after it: the connection is closed between `T` and `T + 2 look`, at most 1.5 `T`, after
    /// its last request.
    async fn watch(&self, idle_timeout: Duration, header_read_timeout: Duration) -> Quiet {
        let shorter = idle_timeout.min(header_read_timeout);
        let look = (shorter / 4).max(Duration::from_millis(1));
        let looks_to = |timeout: Duration| timeout.as_nanos().div_ceil(look.as_nanos()).max(1);
        let (idle_looks, header_looks) = (looks_to(idle_timeout), looks_to(header_read_timeout));
        let mut quiet_looks = 0;
        loop {
            tokio::time::sleep(look).await;
            let moved = self.moved.swap(false, Ordering::Relaxed);
            if moved || self.in_flight.load(Ordering::Relaxed) > 0 {
                quiet_looks = 0;
                continue;
            }
            quiet_looks += 1;
            if quiet_looks >= idle_looks {
                return Quiet::Idle;
            }
            if quiet_looks >= header_looks
                && self.heard.load(Ordering::Relaxed)
                && !self.http2.load(Ordering::Relaxed)
            {
                return Quiet::HeadersLate;
            }
        }
    }
}
