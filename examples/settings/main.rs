//! A host with a Settings -> Partner API page: axum, a demo sign-in, the key-management service
//! behind it, and the partner API itself.
//!
//! ```text
//! cargo run --example settings                      # http://127.0.0.1:3000/settings/partner-api
//! cargo run --example settings -- --tls-cert cert.pem --tls-key key.pem     # over HTTPS
//! cargo run --example settings -- --listen 127.0.0.1:0 --sign-in-as org_demo   # test host
//! ```
//!
//! The sign-in is a stand-in for the host application's own: pick an organization, get a
//! session cookie. The host's session middleware ([`session`]) turns the cookie into the
//! [`ActingOrganization`](partner_api::management::ActingOrganization) the key-management
//! service needs, and its CSRF token into the check the service runs on every change. The page
//! (`page.html`, `page.js`, `page.css`) is plain HTML, JavaScript and CSS, served as they are:
//! no build step.
//!
//! What a host copies from here besides the page: cookies that are `HttpOnly`,
//! `SameSite=Strict` and, over HTTPS, `Secure` with the `__Host-` prefix; sessions that expire
//! and a session store that cannot grow without bound; a CSRF token on every form that changes
//! state, sign-in and sign-out included; and a Content-Security-Policy that allows no inline
//! script or style and no framing, on every response.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use clap::Parser;
use partner_api::deprecated_calls::DeprecatedCallRecorder;
use partner_api::last_used::LastUsedRecorder;
use partner_api::management::KeyManagementService;
use partner_api::seed::Seed;
use partner_api::usage::UsageRecorder;
use partner_api::{MemoryStore, PartnerApi, PartnerApiLayer};

mod core_store;
mod host;
mod peer;
mod secret_scanning;
mod sessions;
mod sign_in;
mod tls;

use host::{security_headers, session, Host};
use peer::{pass_peer_addr, Peer};
use secret_scanning::secret_scanning_endpoint;
use sessions::{Session, Sessions};
use sign_in::{sign_in, sign_in_page, sign_out};
use subtle::ConstantTimeEq;
use tls::{tls_acceptor, TlsListener};
use tokio::net::TcpListener;

/// The page, served as it is; the server fills in the organization and the CSRF token.
const PAGE: &str = include_str!("page.html");
/// The page's script and style, files of their own so the CSP needs no `'unsafe-inline'`.
const PAGE_JS: &str = include_str!("page.js");
/// The script of the page's Webhooks section (shown when the host serves webhooks).
const WEBHOOKS_JS: &str = include_str!("webhooks.js");
/// The page's usage charts.
const USAGE_JS: &str = include_str!("usage.js");
/// The page's security log.
const SECURITY_JS: &str = include_str!("security.js");
/// The page's Deprecated calls section.
const DEPRECATIONS_JS: &str = include_str!("deprecations.js");
const PAGE_CSS: &str = include_str!("page.css");
/// The demo sign-in page and its style.
const SIGN_IN: &str = include_str!("sign_in.html");
const SIGN_IN_CSS: &str = include_str!("sign_in.css");
/// The session cookie's name (`__Host-session` when cookies are `Secure`).
const SESSION_COOKIE: &str = "session";
/// The cookie of the sign-in form's CSRF token, before there is a session.
const SIGN_IN_CSRF_COOKIE: &str = "sign_in_csrf";
/// How long a sign-in form stays usable.
const SIGN_IN_CSRF_LIFETIME: Duration = Duration::from_secs(15 * 60);
/// The header the page sends its CSRF token in.
const CSRF_HEADER: &str = "x-csrf-token";

/// Serve the Settings -> Partner API demo.
#[derive(Parser, Debug)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: String,
    /// Sign every request in as this organization, without the demo sign-in or a CSRF token:
    /// for a test host only (the OpenAPI checks of the key-management service).
    #[arg(long, value_name = "ORGANIZATION")]
    sign_in_as: Option<String>,
    /// Serve HTTPS with this PEM certificate chain (and --tls-key); cookies are then `Secure`
    /// and named with the `__Host-` prefix.
    #[arg(long, value_name = "PEM", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM private key of --tls-cert.
    #[arg(long, value_name = "PEM", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Make cookies `Secure` (and `__Host-`) while serving plain HTTP: behind a proxy that
    /// terminates HTTPS.
    #[arg(long)]
    secure_cookies: bool,
    /// How long a session lasts from sign-in, in seconds.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = Config::default().session_lifetime.as_secs()
    )]
    session_lifetime: u64,
    /// The most sessions kept at once; when full, expired ones go first, then the oldest.
    #[arg(long, default_value_t = Config::default().max_sessions)]
    max_sessions: usize,
    /// Serve GitHub's secret scanning endpoint at POST /secret-scanning/github, verifying
    /// reports with the public keys of this file: a key reported leaked is revoked, and the
    /// page shows it as such (needs the feature `secret-scanning`).
    #[arg(long, value_name = "FILE")]
    secret_scanning_keys: Option<PathBuf>,
    /// Deliver webhooks to plain http URLs too (by default https only; feature `webhooks`).
    #[cfg(feature = "webhooks")]
    #[arg(long)]
    webhook_allow_http: bool,
    /// Let webhook deliveries reach this blocked range (CIDR, repeatable), such as a
    /// receiver on loopback (feature `webhooks`).
    #[cfg(feature = "webhooks")]
    #[arg(long = "webhook-allow-subnet", value_name = "CIDR")]
    webhook_allow_subnets: Vec<ipnet::IpNet>,
    /// Manage keys through a store of only the six required methods (no key policies, last
    /// use or webhooks), as a host's own key table may be: the page hides what it lacks.
    #[arg(long)]
    core_store: bool,
    /// Declare a route or a query parameter of the partner API deprecated:
    /// ROUTE[?PARAM]=DATE[,sunset=DATE][,link=URL][,enforce], as the standalone host's flag
    /// (repeatable). The page's Deprecated calls section lists the keys that still call it.
    #[arg(long = "deprecate", value_name = "SPEC")]
    deprecations: Vec<partner_api::deprecation::Deprecation>,
}

/// How the host runs.
#[derive(Clone, Debug)]
pub struct Config {
    /// Every request acts for this organization, with no sessions or CSRF tokens (a test host).
    pub signed_in_as: Option<String>,
    /// Cookies are `Secure` and named `__Host-...`: on whenever browsers reach the host over
    /// HTTPS, whether it terminates TLS itself or a proxy in front does. Off only for a
    /// plain-HTTP demo on localhost, where a browser may refuse a `Secure` cookie.
    pub secure_cookies: bool,
    /// How long a session lasts from sign-in (and the cookie's `Max-Age`); after it the user
    /// is signed out.
    pub session_lifetime: Duration,
    /// The most sessions kept; repeated sign-ins evict, they do not grow memory.
    pub max_sessions: usize,
    /// Keys are managed through [`core_store::CoreStore`]: no optional ability, no webhooks.
    pub core_store: bool,
    /// What the partner API declares deprecated.
    pub deprecations: Vec<partner_api::deprecation::Deprecation>,
    /// Counts each key's deprecated calls for the page (none for a core store).
    pub deprecated_calls: Option<DeprecatedCallRecorder>,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            signed_in_as: None,
            secure_cookies: false,
            session_lifetime: Duration::from_secs(8 * 60 * 60),
            max_sessions: 10_000,
            core_store: false,
            deprecations: Vec::new(),
            deprecated_calls: None,
        }
    }
}

/// The host over `store`: the page at `/settings/partner-api` (its script and styles below
/// `/assets`), its API below it at `/settings/partner-api/api`, the demo sign-in at
/// `/sign-in`, and the partner API at `/v1`, recording the last use of keys in `recorder` and
/// counting their requests in `usage` (none for a core store, which keeps no usage).
pub fn app(
    store: MemoryStore,
    recorder: LastUsedRecorder,
    usage: Option<UsageRecorder>,
    config: Config,
) -> Router {
    let organizations = Seed::demo()
        .organizations
        .into_iter()
        .map(|organization| (organization.id, organization.name))
        .collect();
    let host = Host {
        sessions: Arc::new(Mutex::new(Sessions::new(
            config.session_lifetime,
            config.max_sessions,
        ))),
        organizations,
        signed_in_as: config.signed_in_as.clone(),
        secure_cookies: config.secure_cookies,
        session_lifetime: config.session_lifetime,
    };
    let management = if config.core_store {
        KeyManagementService::new(core_store::CoreStore(store.clone()))
    } else {
        let management = KeyManagementService::new(store.clone())
            .with_usage(store.clone())
            .with_deprecated_calls(store.clone())
            .with_audit_log(store.clone())
            .with_preview(store.clone());
        #[cfg(feature = "webhooks")]
        let management = management.with_webhooks(store.clone());
        management
    };
    // The host's own CSRF check: the token of the session, in a header the page sends. A test
    // host that signs everyone in has no sessions, hence no tokens.
    let management = if config.signed_in_as.is_some() {
        management
    } else {
        management.with_csrf_check(|parts| {
            let token = parts
                .headers
                .get(CSRF_HEADER)
                .and_then(|value| value.to_str().ok());
            let session = parts.extensions.get::<Session>();
            token
                .zip(session)
                .is_some_and(|(token, session)| same_token(token, &session.csrf_token))
        })
    };
    let mut api = PartnerApi::from_store(store).with_last_used(recorder);
    let mut management = management;
    for deprecation in &config.deprecations {
        api = api.with_deprecation(deprecation.clone());
    }
    // The management service names what the API declares: one list.
    for deprecation in api.deprecations() {
        management = management.with_deprecation(deprecation.clone());
    }
    if let Some(usage) = usage {
        api = api.with_usage(usage);
    }
    if let Some(calls) = config.deprecated_calls.clone() {
        api = api
            .with_deprecated_calls(calls)
            .with_calls_per_version(true);
    }
    Router::new()
        .route("/", get(|| async { Redirect::to("/settings/partner-api") }))
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/settings/partner-api", get(page))
        .route(
            "/assets/page.js",
            get(|| async { asset("text/javascript; charset=utf-8", PAGE_JS) }),
        )
        .route(
            "/assets/webhooks.js",
            get(|| async { asset("text/javascript; charset=utf-8", WEBHOOKS_JS) }),
        )
        .route(
            "/assets/usage.js",
            get(|| async { asset("text/javascript; charset=utf-8", USAGE_JS) }),
        )
        .route(
            "/assets/security.js",
            get(|| async { asset("text/javascript; charset=utf-8", SECURITY_JS) }),
        )
        .route(
            "/assets/deprecations.js",
            get(|| async { asset("text/javascript; charset=utf-8", DEPRECATIONS_JS) }),
        )
        .route(
            "/assets/page.css",
            get(|| async { asset("text/css; charset=utf-8", PAGE_CSS) }),
        )
        .route(
            "/assets/sign_in.css",
            get(|| async { asset("text/css; charset=utf-8", SIGN_IN_CSS) }),
        )
        .nest_service("/settings/partner-api/api", management)
        .layer(middleware::from_fn_with_state(host.clone(), session))
        .layer(middleware::from_fn(security_headers))
        .layer(PartnerApiLayer::new(api))
        // Outermost: the client's address, for keys pinned to address ranges.
        .layer(middleware::map_request(pass_peer_addr))
        .with_state(host)
}

/// A static file of the page.
fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// The value of the cookie `name` that the request carries.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .filter_map(|cookie| cookie.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Whether `given` is the token `expected`, compared in constant time so the time taken says
/// nothing about how much of a guess was right. (Lengths are public: every token has one.)
fn same_token(given: &str, expected: &str) -> bool {
    !expected.is_empty()
        && given.len() == expected.len()
        && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// Whether the browser says the request comes from another origin: `Sec-Fetch-Site`, or else
/// an `Origin` that is not this host. A client that sends neither is judged by its token alone.
fn cross_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() != b"same-origin";
    }
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let origin = origin.to_str().unwrap_or_default();
    let authority = origin
        .strip_prefix("https://")
        .or_else(|| origin.strip_prefix("http://"));
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok());
    authority.is_none() || authority != host
}

/// The answer to a form without its CSRF token (or from another site).
fn forbidden(message: &'static str) -> Response {
    (StatusCode::FORBIDDEN, message).into_response()
}

/// The Settings -> Partner API page of the signed-in user's organization.
async fn page(State(host): State<Host>, request: Request) -> Response {
    let Some(session) = request.extensions().get::<Session>().cloned().or_else(|| {
        host.signed_in_as.clone().map(|organization_id| Session {
            organization_id,
            csrf_token: String::new(),
            created: Instant::now(),
        })
    }) else {
        return Redirect::to("/sign-in").into_response();
    };
    let name = host
        .organizations
        .iter()
        .find(|(id, _)| *id == session.organization_id)
        .map_or(session.organization_id.as_str(), |(_, name)| name.as_str());
    let html = PAGE
        .replace("{{organization}}", &escape(name))
        .replace("{{csrf_token}}", &escape(&session.csrf_token));
    let mut response = Html(html).into_response();
    // The page shows a key once: no cache may keep it (and no site may frame it: the CSP).
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `text` for HTML text and attribute values.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A random token from the operating system's CSPRNG, as a key is made; none when the
/// operating system gives no randomness (then no session is made).
fn random_token() -> Option<String> {
    partner_api::key::ApiKey::generate(partner_api::key::KeyEnvironment::Test)
        .ok()
        .and_then(|key| key.plaintext().get(8..32).map(str::to_owned))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let targets: std::collections::HashSet<String> =
        args.deprecations.iter().map(|d| d.target()).collect();
    if targets.len() > 64 {
        return Err("--deprecate names at most 64 routes and parameters".into());
    }
    let store = Seed::demo().to_memory_store()?;
    // A short interval, so the page shows a key's last use within seconds. A core store
    // records no last use, and its recorder keeps nothing.
    let recorder = if args.core_store {
        LastUsedRecorder::new(core_store::CoreStore(store.clone()))
    } else {
        LastUsedRecorder::new(store.clone())
    }
    .with_flush_interval(Duration::from_secs(2));
    // Counts per key, also written within seconds, for the page's charts.
    let usage = (!args.core_store)
        .then(|| UsageRecorder::new(store.clone()).with_flush_interval(Duration::from_secs(2)));
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls_acceptor(cert, key)?),
        _ => None,
    };
    let config = Config {
        signed_in_as: args.sign_in_as,
        secure_cookies: args.secure_cookies || tls.is_some(),
        session_lifetime: Duration::from_secs(args.session_lifetime),
        max_sessions: args.max_sessions,
        core_store: args.core_store,
        deprecations: args.deprecations,
        // Within seconds too, for the page's Deprecated calls section.
        deprecated_calls: (!args.core_store).then(|| {
            DeprecatedCallRecorder::new(store.clone()).with_flush_interval(Duration::from_secs(2))
        }),
    };
    // Everything in the background, in one handle: the recorders (flushed at shutdown) and
    // the audit log's retention (and the webhook messages').
    let mut maintenance = partner_api::maintenance::Maintenance::new()
        .with_last_used(recorder.clone())
        .with_audit_retention(store.clone(), partner_api::store::DEFAULT_AUDIT_RETENTION);
    if let Some(usage) = &usage {
        maintenance = maintenance.with_usage(usage.clone());
    }
    if let Some(deprecated_calls) = &config.deprecated_calls {
        maintenance = maintenance.with_deprecated_calls(deprecated_calls.clone());
    }
    #[cfg(feature = "webhooks")]
    {
        maintenance = maintenance
            .with_webhook_retention(store.clone(), partner_api::webhooks::DEFAULT_RETENTION);
    }
    let maintenance = maintenance.start()?;
    // The demo delivers its organizations' webhooks in process, from the memory store.
    #[cfg(feature = "webhooks")]
    let dispatcher = {
        use partner_api::webhooks::{DeliveryConfig, DestinationPolicy, Dispatcher};
        let mut destinations = DestinationPolicy::new().with_allow_http(args.webhook_allow_http);
        for subnet in &args.webhook_allow_subnets {
            destinations = destinations.with_allowed_subnet(*subnet);
        }
        let config = DeliveryConfig::new().with_destinations(destinations);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(Dispatcher::new(store.clone(), config).run(async {
            let _ = stopped.await;
        }));
        (stop, task)
    };
    #[cfg(not(feature = "webhooks"))]
    let dispatcher = ();
    let router = app(store.clone(), recorder.clone(), usage.clone(), config);
    let router = match &args.secret_scanning_keys {
        Some(path) => router.route_service(
            "/secret-scanning/github",
            secret_scanning_endpoint(path, store)?,
        ),
        None => router,
    };
    let listener = TcpListener::bind(&args.listen).await?;
    let address = listener.local_addr()?;
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match tls {
        Some(acceptor) => {
            println!("listening on https://{address}");
            let service = router.into_make_service_with_connect_info::<Peer>();
            axum::serve(TlsListener::new(listener, acceptor)?, service)
                .with_graceful_shutdown(shutdown)
                .await?;
        }
        None => {
            println!("listening on http://{address}");
            let service = router.into_make_service_with_connect_info::<Peer>();
            axum::serve(listener, service)
                .with_graceful_shutdown(shutdown)
                .await?;
        }
    }
    #[cfg(feature = "webhooks")]
    {
        let (stop, task) = dispatcher;
        let _ = stop.send(());
        let _ = task.await;
    }
    #[cfg(not(feature = "webhooks"))]
    let () = dispatcher;
    // Every recorder's counts in hand written, the deprecated calls' too.
    for (recorder, written) in maintenance.shutdown().await.flushed() {
        if let Err(err) = written {
            return Err(format!("{recorder}: {err}").into());
        }
    }
    Ok(())
}
