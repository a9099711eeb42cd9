//! The load harness's baseline: bare hyper writing precomputed bytes, on the same server loop
//! and runtime as the standalone host, with no partner-api code on the request path.
//!
//! ```text
//! cargo run --release --example baseline -- --listen 127.0.0.1:0 \
//!     --route /v1/me=me.http --route /v1/orders=orders.http
//! ```
//!
//! Each `--route PATH=FILE` answers `PATH` with the response in FILE: an HTTP/1.1 response as
//! `curl --include` saves it (status line, headers, blank line, body). Every other path is a
//! bodiless 404. `benches/load.sh` captures the files from the standalone host, so both
//! servers put the identical bytes on the wire.
//!
//! With `--partner-api` it serves the partner API itself (`PartnerApi` over the demo data or
//! `--seed FILE`, counting each key's usage, as a hyper service) on this same loop instead:
//! the library's request path with no host layers around it, so the harness can tell the
//! library's cost from the host's.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use clap::Parser;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use partner_api::key::{KeyEnvironment, Permissions};
use partner_api::seed::Seed;
use partner_api::store::{KeyManager, NewKey};
use partner_api::versions::ApiVersion;
use partner_api::PartnerApi;
use tokio::net::TcpListener;

/// Serve captured responses with bare hyper.
#[derive(Parser, Debug)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: String,
    /// `PATH=FILE`: answer PATH with the response captured in FILE.
    #[arg(long = "route", value_parser = parse_route)]
    routes: Vec<(String, String)>,
    /// Serve the partner API over the demo data instead of captured responses.
    #[arg(long, conflicts_with = "routes")]
    partner_api: bool,
    /// With `--partner-api`: serve this seed file's data instead of the demo data.
    #[arg(long, requires = "partner_api")]
    seed: Option<std::path::PathBuf>,
    /// With `--partner-api`: also issue a key of the data's first organization, pinned to this
    /// API version (`YYYY-MM-DD`, default the newest), and print it on a line `key: ...` (what a
    /// request of a key pinned or restricted so costs; the demo keys are unrestricted and
    /// pinned to the first version).
    #[arg(long, requires = "partner_api")]
    key_version: Option<ApiVersion>,
    /// With `--partner-api`: the printed key may call only these routes (repeated; `orders`,
    /// `events`); by default every one.
    #[arg(long = "key-permission", requires = "partner_api")]
    key_permissions: Vec<String>,
    /// With `--partner-api`: the printed key reads only the orders of these providers (repeated).
    #[arg(long = "key-provider", requires = "partner_api")]
    key_providers: Vec<String>,
}

impl Args {
    /// The key to issue besides the data's, when any `--key-*` flag asks for one.
    fn new_key(&self) -> Result<Option<NewKey>, String> {
        if self.key_version.is_none()
            && self.key_permissions.is_empty()
            && self.key_providers.is_empty()
        {
            return Ok(None);
        }
        let mut new = NewKey::new(KeyEnvironment::Test)
            .with_api_version(self.key_version.unwrap_or(partner_api::versions::NEWEST));
        if !self.key_permissions.is_empty() {
            new = new.with_permissions(Permissions::parse(
                self.key_permissions.iter().map(String::as_str),
            )?);
        }
        if !self.key_providers.is_empty() {
            new = new.with_providers(&self.key_providers);
        }
        Ok(Some(new))
    }
}

fn parse_route(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(path, file)| (path.to_owned(), file.to_owned()))
        .ok_or_else(|| "expected PATH=FILE".to_owned())
}

/// A captured response: status, headers and body.
#[derive(Clone)]
pub(crate) struct Captured {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
}

/// Parses a response as `curl --include` writes it.
pub(crate) fn parse_capture(raw: &[u8]) -> Result<Captured, String> {
    let split = raw
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .ok_or("no blank line after the headers")?;
    let head = std::str::from_utf8(&raw[..split]).map_err(|err| err.to_string())?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("no status line")?;
    let code = status_line.split(' ').nth(1).ok_or("no status code")?;
    let status = code.parse::<StatusCode>().map_err(|err| err.to_string())?;
    let mut headers = Vec::new();
    for line in lines {
        let (name, value) = line.split_once(':').ok_or("a header without ':'")?;
        let name: HeaderName = name.trim().parse().map_err(|_| "a bad header name")?;
        // hyper writes these itself, as it does for the host.
        if name == http::header::DATE || name == http::header::CONTENT_LENGTH {
            continue;
        }
        let value = HeaderValue::from_str(value.trim()).map_err(|err| err.to_string())?;
        headers.push((name, value));
    }
    Ok(Captured {
        status,
        headers,
        body: Bytes::copy_from_slice(&raw[split + 4..]),
    })
}

/// The baseline's request handler: a map lookup and a copy of precomputed parts.
pub(crate) fn app(
    routes: Arc<HashMap<String, Captured>>,
) -> impl Fn(Request<Incoming>) -> std::future::Ready<Result<Response<Full<Bytes>>, Infallible>> + Clone
{
    move |request: Request<Incoming>| {
        let response = match routes.get(request.uri().path()) {
            Some(captured) => {
                let mut response = Response::new(Full::new(captured.body.clone()));
                *response.status_mut() = captured.status;
                let headers = response.headers_mut();
                for (name, value) in &captured.headers {
                    headers.insert(name.clone(), value.clone());
                }
                response
            }
            None => {
                let mut response = Response::new(Full::new(Bytes::new()));
                *response.status_mut() = StatusCode::NOT_FOUND;
                response
            }
        };
        std::future::ready(Ok(response))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let mut routes = HashMap::new();
    for (path, file) in &args.routes {
        let raw = std::fs::read(file).map_err(|err| format!("{file}: {err}"))?;
        routes.insert(
            path.clone(),
            parse_capture(&raw).map_err(|err| format!("{file}: {err}"))?,
        );
    }
    let routes = Arc::new(routes);
    let builder = auto::Builder::new(TokioExecutor::new());
    // The library as a host mounts it: counting each key's usage (written every 10 s), with
    // the events feed and its retention, in the host's maintenance (running while it serves).
    let (api, _maintenance) = match args.partner_api {
        true => {
            let seed = match &args.seed {
                Some(path) => Seed::from_path(path)?,
                None => Seed::demo(),
            };
            let store = seed.to_memory_store()?;
            if let Some(new) = args.new_key()? {
                let organization = seed
                    .organizations
                    .first()
                    .ok_or("the data has no organization")?;
                let issued = store.issue(&organization.id, new).await?;
                println!("key: {}", issued.plaintext());
            }
            let usage = partner_api::usage::UsageRecorder::new(store.clone());
            let maintenance = partner_api::maintenance::Maintenance::new()
                .with_usage(usage.clone())
                .with_events_retention(store.clone(), partner_api::store::DEFAULT_EVENTS_RETENTION)
                .start()?;
            let api = PartnerApi::from_store(store.clone())
                .with_usage(usage)
                .with_events(store);
            (Some(api), Some(maintenance))
        }
        false => (None, None),
    };
    // Listening is announced last, so a key printed above is there once a harness sees it.
    let listener = TcpListener::bind(&args.listen).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{}", listener.local_addr()?)?;
    stdout.flush()?;
    drop(stdout);
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let builder = builder.clone();
        let io = TokioIo::new(stream);
        if let Some(api) = &api {
            let api = api.clone();
            tokio::spawn(async move { builder.serve_connection(io, api).await });
            continue;
        }
        let service = hyper::service::service_fn(app(routes.clone()));
        tokio::spawn(async move { builder.serve_connection(io, service).await });
    }
}
