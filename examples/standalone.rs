//! The standalone host: the partner API on hyper 1.x, over the in-memory store.
//!
//! ```text
//! cargo run --example standalone                          # built-in demo data
//! cargo run --example standalone -- --seed seed.json --listen 127.0.0.1:0
//! ```
//!
//! It prints `listening on http://HOST:PORT` once bound, serves HTTP/1.1 and HTTP/2 (prior
//! knowledge), and on Ctrl-C or SIGTERM stops accepting and lets requests in flight finish.

use std::future::Future;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::{MemoryStore, PartnerApi};
use tokio::net::TcpListener;

/// How long shutdown waits for requests in flight before it gives up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serve the partner API.
#[derive(Parser, Debug)]
#[command(version, about)]
pub(crate) struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: String,
    /// JSON seed file of organizations, API keys and orders (default: built-in demo data).
    #[arg(long)]
    pub(crate) seed: Option<PathBuf>,
}

/// The service this host serves: the partner API over `store`.
pub(crate) fn app(store: MemoryStore) -> PartnerApi {
    PartnerApi::from_store(store)
}

/// Serves `app` on `listener` until `shutdown` completes, then waits (up to
/// [`SHUTDOWN_GRACE`]) for the connections' requests in flight.
pub(crate) async fn serve(
    listener: TcpListener,
    app: PartnerApi,
    shutdown: impl Future<Output = ()>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
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
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let connection = builder.serve_connection(TokioIo::new(stream), service);
            if let Err(err) = watcher.watch(connection.into_owned()).await {
                tracing::debug!(error = %err, "connection ended with an error");
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

/// Completes on Ctrl-C or, on Unix, SIGTERM.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();

    let seed = match &args.seed {
        Some(path) => Seed::from_path(path),
        None => Ok(Seed::demo()),
    };
    let store = match seed.and_then(|seed| seed.to_memory_store()) {
        Ok(store) => store,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match TcpListener::bind(&args.listen).await {
        Ok(listener) => listener,
        Err(err) => {
            eprintln!("error: cannot listen on {}: {err}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let address = match listener.local_addr() {
        Ok(address) => address,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "listening on http://{address}");
    if args.seed.is_none() {
        let _ = writeln!(
            stdout,
            "demo data loaded; try:\n  curl -H 'Authorization: Bearer {DEMO_KEY}' http://{address}/v1/orders"
        );
    }
    let _ = stdout.flush();
    drop(stdout);

    serve(listener, app(store), shutdown_signal()).await;
    ExitCode::SUCCESS
}
