//! The standalone host: the partner API on hyper 1.x, over the in-memory store.
//!
//! ```text
//! cargo run --example standalone                          # built-in demo data
//! cargo run --example standalone -- --seed seed.json --listen 127.0.0.1:0
//! cargo run --example standalone --features postgres -- --database-url postgres://... --seed seed.json
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
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::{KeyStore, MemoryStore, OrderStore, PartnerApi};
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
    /// JSON seed file of organizations, API keys and orders (default: built-in demo data;
    /// with a database: none).
    #[arg(long)]
    pub(crate) seed: Option<PathBuf>,
    /// Serve from PostgreSQL at this URL (migrations run at start) instead of from memory.
    #[cfg(feature = "postgres")]
    #[arg(long, env = "DATABASE_URL")]
    pub(crate) database_url: Option<String>,
}

/// The service this host serves: the partner API over `store`.
pub(crate) fn app<S: KeyStore + OrderStore + 'static>(store: S) -> PartnerApi {
    PartnerApi::from_store(store)
}

/// The API over what `args` name: PostgreSQL (migrated, and seeded if a seed file is given),
/// a seed file in memory, or the demo data in memory.
async fn api_for(args: &Args) -> Result<PartnerApi, String> {
    #[cfg(feature = "postgres")]
    if let Some(url) = &args.database_url {
        let store = partner_api::PgStore::connect_lazy(url).map_err(|err| error_chain(&err))?;
        store
            .migrate()
            .await
            .map_err(|err| format!("cannot migrate the database: {}", error_chain(&err)))?;
        if let Some(path) = &args.seed {
            let seed = Seed::from_path(path).map_err(|err| err.to_string())?;
            store
                .load_seed(&seed)
                .await
                .map_err(|err| err.to_string())?;
        }
        return Ok(app(store));
    }
    let seed = match &args.seed {
        Some(path) => Seed::from_path(path),
        None => Ok(Seed::demo()),
    };
    let store: MemoryStore = seed
        .and_then(|seed| seed.to_memory_store())
        .map_err(|err| err.to_string())?;
    Ok(app(store))
}

/// An error and its sources, on one line.
#[cfg(feature = "postgres")]
fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(err) = source {
        text.push_str(&format!(": {err}"));
        source = err.source();
    }
    text
}

/// Says so when `DATABASE_URL` is set in a build that cannot use it.
fn warn_of_unused_database_url() {
    if !cfg!(feature = "postgres") && std::env::var_os("DATABASE_URL").is_some() {
        eprintln!(
            "warning: DATABASE_URL is set, but this build has no PostgreSQL support \
             (--features postgres); serving from memory"
        );
    }
}

/// Whether the host serves the built-in demo data.
fn serves_demo_data(args: &Args) -> bool {
    #[cfg(feature = "postgres")]
    if args.database_url.is_some() {
        return false;
    }
    args.seed.is_none()
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
        // `PartnerApi` is a hyper service too: no adapter, no per-request clone.
        let service = app.clone();
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
    warn_of_unused_database_url();

    let api = match api_for(&args).await {
        Ok(api) => api,
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
    if serves_demo_data(&args) {
        let _ = writeln!(
            stdout,
            "demo data loaded; try:\n  curl -H 'Authorization: Bearer {DEMO_KEY}' http://{address}/v1/orders"
        );
    }
    let _ = stdout.flush();
    drop(stdout);

    serve(listener, api, shutdown_signal()).await;
    ExitCode::SUCCESS
}
