//! The standalone host: the partner API on hyper 1.x, production-shaped.
//!
//! ```text
//! cargo run --example standalone                          # built-in demo data
//! cargo run --example standalone -- --seed seed.json --listen 127.0.0.1:0
//! cargo run --example standalone -- --tls-cert cert.pem --tls-key key.pem --rate-limit 10
//! cargo run --example standalone --features postgres -- --database-url postgres://... --seed seed.json
//! ```
//!
//! It prints `listening on http://HOST:PORT` (or `https://` with TLS) once bound and serves
//! HTTP/1.1 and HTTP/2 (ALPN over TLS, prior knowledge without). Around the API it stacks
//! request ids, a request log line per response (tower-http's `TraceLayer`: method, path,
//! status, latency, request and organization id; never the key), a caught panic as a JSON 500
//! (tower-http's `CatchPanicLayer`) and a request timeout as a JSON 503 (tower's `Timeout`). On Ctrl-C or SIGTERM it stops accepting and lets requests
//! in flight finish.

use std::convert::Infallible;
use std::future::Future;
use std::io::Write;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::Parser;
use http::{Request, Response, StatusCode};
use http_body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use partner_api::request_id::RequestIdLayer;
use partner_api::seed::{Seed, DEMO_KEY};
use partner_api::{
    error_response, ApiBody, KeyStore, LocalRateLimiter, MemoryStore, OrderStore, PartnerApi,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tower::timeout::TimeoutLayer;
use tower::{Service, ServiceBuilder};
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use tower_http::{BoxError, LatencyUnit};
use tracing::Level;

/// How long shutdown waits for requests in flight before it gives up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How long a client may take to send a request's headers, or to finish a TLS handshake.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// PEM certificate chain: serve HTTPS (HTTP/1.1 and HTTP/2 by ALPN). Needs --tls-key.
    #[arg(long, requires = "tls_key")]
    pub(crate) tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub(crate) tls_key: Option<PathBuf>,
    /// Limit each API key to N requests per second (burst N); off by default.
    #[arg(long, value_name = "N")]
    pub(crate) rate_limit: Option<NonZeroU32>,
    /// Seconds one request may take before it is answered with a JSON 503.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    pub(crate) request_timeout: u64,
}

/// How the host wraps the API.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    pub(crate) rate_limit: Option<NonZeroU32>,
    pub(crate) request_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            rate_limit: None,
            request_timeout: Duration::from_secs(30),
        }
    }
}

impl Options {
    fn from_args(args: &Args) -> Self {
        Self {
            rate_limit: args.rate_limit,
            request_timeout: Duration::from_secs(args.request_timeout),
        }
    }
}

/// The partner API over `store`, configured by `options`.
pub(crate) fn api<S: KeyStore + OrderStore + 'static>(store: S, options: &Options) -> PartnerApi {
    let api = PartnerApi::from_store(store);
    match options.rate_limit {
        Some(limit) => api.with_rate_limiter(LocalRateLimiter::per_second(limit)),
        None => api,
    }
}

/// The service this host serves: `service` (the partner API, or anything that answers like
/// it) inside the host's layers, outermost first:
///
/// 1. request ids ([`RequestIdLayer`]): the request's well-formed `x-request-id` or a new
///    UUID, handed to the API (which echoes it and records it in the span) and put on the
///    responses the layers below make themselves;
/// 2. a tracing span per request (method, path, and the request and organization ids that
///    the API records) and one INFO line per response with its status and latency;
/// 3. a panic anywhere below becomes the API's JSON 500 (tower-http's `CatchPanic`);
/// 4. a request over `options.request_timeout` becomes the API's JSON 503 (tower's
///    `Timeout`).
pub(crate) fn app<S, B>(
    service: S,
    options: &Options,
) -> impl Service<
    Request<B>,
    Response = Response<impl Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static>,
    // Never an error in fact: every failure is a JSON response by then.
    Error = BoxError,
    Future: Send + 'static,
> + Clone
       + Send
       + 'static
where
    S: Service<Request<B>, Response = Response<ApiBody>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
{
    ServiceBuilder::new()
        .layer(RequestIdLayer::new())
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request<B>| {
                    // The API records both ids: the request id it answers with (the one set
                    // above) and the organization of the key, once it is known.
                    tracing::info_span!(
                        "request",
                        method = %request.method(),
                        path = %request.uri().path(),
                        request_id = tracing::field::Empty,
                        organization_id = tracing::field::Empty,
                    )
                })
                .on_request(())
                .on_response(
                    DefaultOnResponse::new()
                        .level(Level::INFO)
                        .latency_unit(LatencyUnit::Micros),
                )
                .on_failure(()),
        )
        .layer(CatchPanicLayer::custom(|_panic| {
            // The payload could hold anything: it is not logged.
            tracing::error!("request handler panicked");
            error_response(StatusCode::INTERNAL_SERVER_ERROR)
        }))
        .map_result(json_timeout)
        .layer(TimeoutLayer::new(options.request_timeout))
        .service(service)
}

/// The answer when the request timeout passed: the API's JSON 503. (tower's timeout polls
/// the request first and arms its timer only when the request must wait, so an answer that is
/// ready at once never touches the runtime's timer wheel; tower-http's `TimeoutLayer` arms it
/// for every request, which cost this host about a fifth of its throughput on `/v1/me`.)
fn json_timeout(
    result: Result<Response<ApiBody>, BoxError>,
) -> Result<Response<ApiBody>, BoxError> {
    Ok(result.unwrap_or_else(|err| {
        // `PartnerApi` never fails: the only error is the timeout's.
        tracing::warn!(error = %err, "request timed out");
        error_response(StatusCode::SERVICE_UNAVAILABLE)
    }))
}

/// A TLS acceptor for the PEM certificate chain and key at `cert` and `key`, offering
/// HTTP/2 and HTTP/1.1 by ALPN.
pub(crate) fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|err| format!("cannot read the certificate {}: {err}", cert.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate in {}", cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|err| format!("cannot read the private key {}: {err}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(certs, key))
        .map_err(|err| format!("bad TLS certificate or key: {err}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The API over what `args` name: PostgreSQL (migrated, and seeded if a seed file is given),
/// a seed file in memory, or the demo data in memory.
async fn api_for(args: &Args, options: &Options) -> Result<PartnerApi, String> {
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
        return Ok(api(store, options));
    }
    let seed = match &args.seed {
        Some(path) => Seed::from_path(path),
        None => Ok(Seed::demo()),
    };
    let store: MemoryStore = seed
        .and_then(|seed| seed.to_memory_store())
        .map_err(|err| err.to_string())?;
    Ok(api(store, options))
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

/// What [`serve`] serves: a tower service of hyper requests, as [`app`] makes (with response
/// body `B`).
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

/// Serves `app` on `listener` (over TLS when `tls` is given) until `shutdown` completes,
/// then waits (up to [`SHUTDOWN_GRACE`]) for the connections' requests in flight.
pub(crate) async fn serve<S, RB>(
    listener: TcpListener,
    app: S,
    tls: Option<TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
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
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => serve_connection(stream, &builder, service, watcher).await,
                Some(acceptor) => {
                    match tokio::time::timeout(CLIENT_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(stream)) => {
                            serve_connection(stream, &builder, service, watcher).await
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

/// Serves one connection (HTTP/1.1, or HTTP/2 by ALPN or prior knowledge) under `watcher`.
async fn serve_connection<I, S, RB>(
    io: I,
    builder: &auto::Builder<TokioExecutor>,
    service: TowerToHyperService<S>,
    watcher: Watcher,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: HostService<RB>,
    RB: Body<Data = Bytes, Error: Into<BoxError>> + Send + 'static,
{
    let connection = builder.serve_connection(TokioIo::new(io), service);
    if let Err(err) = watcher.watch(connection.into_owned()).await {
        tracing::debug!(error = %err, "connection ended with an error");
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
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    warn_of_unused_database_url();

    let options = Options::from_args(&args);
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match tls_acceptor(cert, key) {
            Ok(acceptor) => Some(acceptor),
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    let api = match api_for(&args, &options).await {
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
    let scheme = if tls.is_some() { "https" } else { "http" };
    let _ = writeln!(stdout, "listening on {scheme}://{address}");
    if serves_demo_data(&args) {
        let insecure = if tls.is_some() { " --insecure" } else { "" };
        let _ = writeln!(
            stdout,
            "demo data loaded; try:\n  curl{insecure} -H 'Authorization: Bearer {DEMO_KEY}' {scheme}://{address}/v1/orders"
        );
    }
    let _ = stdout.flush();
    drop(stdout);

    serve(listener, app(api, &options), tls, shutdown_signal()).await;
    ExitCode::SUCCESS
}
