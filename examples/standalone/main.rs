//! The standalone host: the partner API on hyper 1.x, production-shaped.
//!
//! ```text
//! cargo run --example standalone                          # built-in demo data
//! cargo run --example standalone -- --seed seed.json --listen 127.0.0.1:0
//! cargo run --example standalone -- --tls-cert cert.pem --tls-key key.pem --rate-limit 10
//! cargo run --example standalone --features postgres -- --database-url postgres://... --seed seed.json
//! cargo run --example standalone --features postgres -- keys issue --organization org_1 --label CI
//! cargo run --example standalone -- --metrics-listen 127.0.0.1:9090   # Prometheus at /metrics
//! ```
//!
//! It prints `listening on http://HOST:PORT` (or `https://` with TLS) once bound (and, with
//! `--metrics-listen`, `metrics on http://HOST:PORT/metrics` next) and serves
//! HTTP/1.1 and HTTP/2 (ALPN over TLS, prior knowledge without). One file per job:
//!
//! - `cli.rs`: the command line;
//! - `commands.rs`: the subcommands (`migrate`, `keys`, `audit`, `webhooks`) and their flags;
//! - `keys.rs`: the `keys` subcommand (issue, list, revoke, roll keys in the database);
//! - `metrics.rs`: the Prometheus exporter on its own listener;
//! - `secret_scanning.rs`: GitHub's secret scanning endpoint (`--secret-scanning-keys`);
//! - `stores.rs`: which stores the API reads (PostgreSQL, a seed file, the demo data);
//! - `stack.rs`: the layers around the API (request ids, a log line per response, a caught
//!   panic as a JSON 500, a request timeout as a JSON 503);
//! - `tls.rs`: HTTPS;
//! - `serve.rs`: the accept loop (a connection cap, idle connections closed, a graceful stop);
//! - `signals.rs`: Ctrl-C and SIGTERM.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use partner_api::seed::DEMO_KEY;
use tokio::net::TcpListener;

mod audit;
mod cli;
mod commands;
mod keys;
mod metrics;
mod per_address;
mod secret_scanning;
mod serve;
mod signals;
mod stack;
mod stores;
#[cfg(test)]
mod tests;
mod tls;
#[cfg(all(feature = "postgres", feature = "webhooks"))]
mod webhooks;

#[tokio::main]
async fn main() -> ExitCode {
    let args = cli::Args::parse();
    // A command that succeeds says nothing on stderr: sqlx's own warnings of a slow statement
    // or a slow connection (a busy database, a loaded machine) are the server's to log, not a
    // one-shot command's. `RUST_LOG` overrides both.
    let default_filter = if args.command.is_some() {
        "info,sqlx=error"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    stores::warn_of_unused_database_url();
    // The commands' changes are the operator's: `cli:<user>` in the audit log.
    let operator = partner_api::store::AuditContext::new(&format!(
        "cli:{}",
        std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .unwrap_or_else(|_| "unknown".to_owned())
    ));
    match &args.command {
        Some(cli::Command::Keys { action }) => {
            return operator.scope(keys::run(&args, action)).await
        }
        Some(cli::Command::Audit(audit)) => return operator.scope(audit::run(&args, audit)).await,
        Some(cli::Command::Migrate) => return keys::migrate_only(&args).await,
        #[cfg(feature = "postgres")]
        Some(cli::Command::Indexes { missing, provider }) => {
            return keys::print(stores::indexes(&args, *missing, provider).await)
        }
        #[cfg(not(feature = "postgres"))]
        Some(cli::Command::Indexes { .. }) => {
            return keys::print(Err(stores::no_database_support("indexes")))
        }
        #[cfg(feature = "postgres")]
        Some(cli::Command::OrderCapture { action }) => {
            return keys::print(stores::order_capture(&args, action).await)
        }
        #[cfg(all(feature = "postgres", feature = "webhooks"))]
        Some(cli::Command::Webhooks { action }) => {
            return operator.scope(webhooks::run(&args, action)).await
        }
        #[cfg(all(not(feature = "postgres"), feature = "webhooks"))]
        Some(cli::Command::Webhooks { .. }) => {
            eprintln!(
                "error: the webhooks command works on a database: build with --features postgres"
            );
            return ExitCode::FAILURE;
        }
        None => {}
    }

    let options = cli::Options::from_args(&args);
    let targets: std::collections::HashSet<String> =
        args.deprecations.iter().map(|d| d.target()).collect();
    if targets.len() > 64 {
        eprintln!("error: --deprecate names at most 64 routes and parameters");
        return ExitCode::FAILURE;
    }
    if let Err(err) = stores::check_redis_url(&options) {
        eprintln!("error: {err}");
        return ExitCode::FAILURE;
    }
    let limits = serve::Limits {
        idle_timeout: Duration::from_secs(args.idle_timeout.max(1)),
        max_connections: serve::fit_open_files(args.max_connections),
        max_connections_per_ip: args.max_connections_per_ip,
        max_connection_age: Duration::from_secs(args.max_connection_age.max(1)),
        ..serve::Limits::default()
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => match tls::tls_acceptor(cert, key) {
            Ok(acceptor) => Some(acceptor),
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    // Before the stores are built, so that what they do at start is counted too.
    let metrics_handle = match &args.metrics_listen {
        Some(_) => match metrics::install() {
            Ok(handle) => Some(handle),
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let stores::Served {
        api,
        maintenance,
        keys,
        #[cfg(feature = "postgres")]
        database,
    } = match stores::api_for(&args, &options).await {
        Ok(served) => served,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let endpoint = match &args.secret_scanning_keys {
        Some(source) => match secret_scanning::endpoint(source, keys) {
            Ok(endpoint) => Some(endpoint),
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let (listener, address) = match bind(&args.listen).await {
        Ok(bound) => bound,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let metrics_listener = match (&args.metrics_listen, metrics_handle) {
        (Some(metrics_address), Some(handle)) => match bind(metrics_address).await {
            Ok(bound) => Some((bound, handle)),
            Err(err) => {
                eprintln!("error: {err}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    // Listening for signals before anyone is told where to connect.
    let shutdown = signals::shutdown_signal();
    let mut stdout = std::io::stdout().lock();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let _ = writeln!(stdout, "listening on {scheme}://{address}");
    if let Some(((_, metrics_address), _)) = &metrics_listener {
        let _ = writeln!(stdout, "metrics on http://{metrics_address}/metrics");
    }
    if stores::serves_demo_data(&args) {
        let insecure = if tls.is_some() { " --insecure" } else { "" };
        let _ = writeln!(
            stdout,
            "demo data loaded; try:\n  curl{insecure} -H 'Authorization: Bearer {DEMO_KEY}' {scheme}://{address}/v1/orders"
        );
    }
    let _ = stdout.flush();
    drop(stdout);

    if let Some(((listener, _), handle)) = metrics_listener {
        tokio::spawn(metrics::serve(listener, handle));
    }
    // Every replica on a database delivers webhooks, unless told not to.
    #[cfg(all(feature = "postgres", feature = "webhooks"))]
    let worker = database
        .filter(|_| !args.no_webhooks)
        .map(|store| webhooks::Worker::start(store, &args));
    #[cfg(all(feature = "postgres", not(feature = "webhooks")))]
    drop(database);
    let maintenance = match maintenance.start() {
        Ok(running) => running,
        Err(err) => {
            eprintln!("error: {err}");
            return ExitCode::FAILURE;
        }
    };
    let routes = secret_scanning::Routes { api, endpoint };
    let app = move |peer| stack::app(routes.with_peer_addr(peer), options.request_timeout);
    serve::serve(listener, app, tls, limits, shutdown).await;
    #[cfg(all(feature = "postgres", feature = "webhooks"))]
    if let Some(worker) = worker {
        worker.stop().await;
    }
    // The background work stopped, then the usage and deprecated calls counted and the last
    // uses gathered since the last batches written. Failing to write them is the host's last
    // word: logged (never with a key) and the exit code says so.
    let report = maintenance.shutdown().await;
    for (recorder, written) in report.flushed() {
        match written {
            Ok(count) => tracing::info!(count, "{} written at shutdown", shutdown_noun(recorder)),
            Err(err) => tracing::error!(
                error = %stores::error_chain(err),
                "the {} in hand could not be written at shutdown",
                shutdown_noun(recorder)
            ),
        }
    }
    if report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What a recorder of the shutdown report holds, in words.
fn shutdown_noun(recorder: &str) -> &'static str {
    match recorder {
        "usage_recorder" => "key usage",
        "last_used_recorder" => "last uses",
        "deprecated_call_recorder" => "deprecated calls",
        _ => "counts",
    }
}

/// A listener on `address`, and the address it is bound to.
async fn bind(address: &str) -> Result<(TcpListener, std::net::SocketAddr), String> {
    let listener = TcpListener::bind(address)
        .await
        .map_err(|err| format!("cannot listen on {address}: {err}"))?;
    let bound = listener.local_addr().map_err(|err| err.to_string())?;
    Ok((listener, bound))
}
