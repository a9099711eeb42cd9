//! When to stop: Ctrl-C, or SIGTERM on Unix.

use std::future::Future;

/// Listens for Ctrl-C and, on Unix, SIGTERM, and returns a future that completes on the first
/// of them. On Unix the handlers are installed here, not when the future is first polled: a
/// signal that comes before the accept loop first looks at the future (a loaded machine can
/// take that long after `listening on` is printed) still stops the host gracefully instead
/// of killing it.
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let interrupt = signal(SignalKind::interrupt()).ok();
        let terminate = signal(SignalKind::terminate()).ok();
        async move {
            tokio::select! {
                () = received(interrupt) => {},
                () = received(terminate) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Completes when `signal` is received; never when it could not be listened for.
#[cfg(unix)]
async fn received(signal: Option<tokio::signal::unix::Signal>) {
    match signal {
        Some(mut signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}
