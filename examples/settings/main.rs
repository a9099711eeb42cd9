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
//! [`ActingOrganization`] the key-management service needs, and its CSRF token into the check
//! the service runs on every change. The page (`page.html`, `page.js`, `page.css`) is plain
//! HTML, JavaScript and CSS, served as they are: no build step.
//!
//! What a host copies from here besides the page: cookies that are `HttpOnly`,
//! `SameSite=Strict` and, over HTTPS, `Secure` with the `__Host-` prefix; sessions that expire
//! and a session store that cannot grow without bound; a CSRF token on every form that changes
//! state, sign-in and sign-out included; and a Content-Security-Policy that allows no inline
//! script or style and no framing, on every response.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::rejection::FormRejection;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use clap::Parser;
use partner_api::last_used::LastUsedRecorder;
use partner_api::management::{ActingOrganization, KeyManagementService};
use partner_api::seed::Seed;
use partner_api::{MemoryStore, PartnerApi, PartnerApiLayer};
use subtle::ConstantTimeEq;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The page, served as it is; the server fills in the organization and the CSRF token.
const PAGE: &str = include_str!("page.html");
/// The page's script and style, files of their own so the CSP needs no `'unsafe-inline'`.
const PAGE_JS: &str = include_str!("page.js");
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
/// Every response's policy: scripts, styles and images from this origin only (no inline
/// script, style or event handler), fetches to it only, forms posted to it only, and no
/// framing by any site (clickjacking).
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";
/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

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
}

impl Default for Config {
    fn default() -> Self {
        Self {
            signed_in_as: None,
            secure_cookies: false,
            session_lifetime: Duration::from_secs(8 * 60 * 60),
            max_sessions: 10_000,
        }
    }
}

/// A signed-in user of the demo: the organization they act for, their CSRF token, and when
/// they signed in.
#[derive(Clone, Debug)]
struct Session {
    organization_id: String,
    csrf_token: String,
    created: Instant,
}

/// The demo's sessions by id, bounded in number and in age.
#[derive(Debug)]
struct Sessions {
    by_id: HashMap<String, Session>,
    lifetime: Duration,
    capacity: usize,
}

impl Sessions {
    fn new(lifetime: Duration, capacity: usize) -> Self {
        Self {
            by_id: HashMap::new(),
            lifetime,
            capacity: capacity.max(1),
        }
    }

    fn expired(&self, session: &Session, now: Instant) -> bool {
        now.saturating_duration_since(session.created) >= self.lifetime
    }

    /// The live session `id`; an expired one is removed, and the user is signed out.
    fn get(&mut self, id: &str, now: Instant) -> Option<Session> {
        let session = self.by_id.get(id)?;
        if self.expired(session, now) {
            self.by_id.remove(id);
            return None;
        }
        Some(session.clone())
    }

    /// Adds a session; when full, expired sessions go first, then the oldest. (A scan of
    /// the store, only when it is full: fine for a demo's bound.)
    fn insert(&mut self, id: String, session: Session, now: Instant) {
        if self.by_id.len() >= self.capacity {
            let lifetime = self.lifetime;
            self.by_id
                .retain(|_, kept| now.saturating_duration_since(kept.created) < lifetime);
        }
        while self.by_id.len() >= self.capacity {
            let oldest = self
                .by_id
                .iter()
                .min_by_key(|(_, other)| other.created)
                .map(|(oldest, _)| oldest.clone());
            let Some(oldest) = oldest else { break };
            self.by_id.remove(&oldest);
        }
        self.by_id.insert(id, session);
    }

    fn remove(&mut self, id: &str) {
        self.by_id.remove(id);
    }
}

/// The host's state: the demo's sessions and organizations.
#[derive(Clone)]
struct Host {
    sessions: Arc<Mutex<Sessions>>,
    organizations: Arc<[(String, String)]>,
    /// Every request acts for this organization (a test host).
    signed_in_as: Option<String>,
    secure_cookies: bool,
    session_lifetime: Duration,
}

impl Host {
    /// A cookie's name: with the `__Host-` prefix when cookies are `Secure`, so the browser
    /// takes it only from this host over HTTPS, for `Path=/` and no `Domain`: a sibling
    /// subdomain or a plain-HTTP page cannot plant or overwrite it.
    fn cookie_name(&self, name: &str) -> String {
        if self.secure_cookies {
            format!("__Host-{name}")
        } else {
            name.to_owned()
        }
    }

    /// The `Set-Cookie` value of the cookie `name` (see [`Host::cookie_name`]): script cannot
    /// read it, other sites' requests do not carry it, and it lasts `max_age` (zero deletes it).
    fn set_cookie(&self, name: &str, value: &str, max_age: Duration) -> Option<HeaderValue> {
        let name = self.cookie_name(name);
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        let max_age = max_age.as_secs();
        HeaderValue::from_str(&format!(
            "{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
        ))
        .ok()
    }

    /// The live session of the request's cookie.
    fn session_of(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, &self.cookie_name(SESSION_COOKIE))?;
        self.sessions.lock().ok()?.get(id, Instant::now())
    }
}

/// The host over `store`: the page at `/settings/partner-api` (its script and styles below
/// `/assets`), its API below it at `/settings/partner-api/api`, the demo sign-in at
/// `/sign-in`, and the partner API at `/v1`.
pub fn app(store: MemoryStore, recorder: LastUsedRecorder, config: Config) -> Router {
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
    let management = KeyManagementService::new(store.clone());
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
    let api = PartnerApi::from_store(store).with_last_used(recorder);
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
        .with_state(host)
}

/// The host's session middleware: the cookie's session, and the organization it acts for as
/// the extension the key-management service reads.
async fn session(State(host): State<Host>, mut request: Request, next: Next) -> Response {
    if let Some(organization) = &host.signed_in_as {
        request
            .extensions_mut()
            .insert(ActingOrganization::new(organization.as_str()));
        return next.run(request).await;
    }
    if let Some(session) = host.session_of(request.headers()) {
        request
            .extensions_mut()
            .insert(ActingOrganization::new(session.organization_id.as_str()));
        request.extensions_mut().insert(session);
    }
    next.run(request).await
}

/// The same headers on every response of the host's own routes (the page, the sign-in,
/// redirects, the management API): [`CONTENT_SECURITY_POLICY`], and `X-Frame-Options` for
/// browsers that predate `frame-ancestors`.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
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

/// The demo sign-in page, with a fresh pre-session CSRF token in a hidden field and in a
/// short-lived cookie: the sign-in checks that both came back (a double submit), which another
/// site can do only if it can read this page or set this host's cookies.
async fn sign_in_page(State(host): State<Host>) -> Response {
    let Some(token) = random_token() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "no randomness for a token").into_response();
    };
    let options: String = host
        .organizations
        .iter()
        .map(|(id, name)| format!("<option value=\"{}\">{}</option>", escape(id), escape(name)))
        .collect();
    let html = SIGN_IN
        .replace("{{organizations}}", &options)
        .replace("{{csrf_token}}", &escape(&token));
    let mut response = Html(html).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(cookie) = host.set_cookie(SIGN_IN_CSRF_COOKIE, &token, SIGN_IN_CSRF_LIFETIME) {
        headers.append(header::SET_COOKIE, cookie);
    }
    response
}

/// The sign-in form. A missing member is the empty string, so a bad form is refused by the
/// token check (403) rather than by the form parser.
#[derive(serde::Deserialize, Default)]
struct SignIn {
    #[serde(default)]
    organization: String,
    #[serde(default)]
    csrf_token: String,
}

async fn sign_in(
    State(host): State<Host>,
    headers: HeaderMap,
    form: Result<Form<SignIn>, FormRejection>,
) -> Response {
    let form = form.map(|Form(form)| form).unwrap_or_default();
    // Without this, another site could sign the user in to an organization of its choosing
    // (login CSRF).
    let expected = cookie(&headers, &host.cookie_name(SIGN_IN_CSRF_COOKIE)).unwrap_or_default();
    if cross_origin(&headers) || !same_token(&form.csrf_token, expected) {
        return forbidden("the sign-in form has expired or came from another site: reload it");
    }
    if !host
        .organizations
        .iter()
        .any(|(id, _)| *id == form.organization)
    {
        return (StatusCode::BAD_REQUEST, "unknown organization").into_response();
    }
    let (Some(id), Some(csrf_token)) = (random_token(), random_token()) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "no randomness for a session",
        )
            .into_response();
    };
    let session = Session {
        organization_id: form.organization,
        csrf_token,
        created: Instant::now(),
    };
    let Ok(mut sessions) = host.sessions.lock() else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    // The browser's previous session, if any, ends here: one browser, one session.
    if let Some(previous) = cookie(&headers, &host.cookie_name(SESSION_COOKIE)) {
        sessions.remove(previous);
    }
    sessions.insert(id.clone(), session, Instant::now());
    drop(sessions);
    let mut response = Redirect::to("/settings/partner-api").into_response();
    let headers = response.headers_mut();
    if let Some(cookie) = host.set_cookie(SESSION_COOKIE, &id, host.session_lifetime) {
        headers.append(header::SET_COOKIE, cookie);
    }
    // The pre-session token is spent.
    if let Some(cookie) = host.set_cookie(SIGN_IN_CSRF_COOKIE, "", Duration::ZERO) {
        headers.append(header::SET_COOKIE, cookie);
    }
    response
}

/// The sign-out form: the session's CSRF token, in a hidden field (or the page's header).
#[derive(serde::Deserialize, Default)]
struct SignOut {
    #[serde(default)]
    csrf_token: String,
}

async fn sign_out(
    State(host): State<Host>,
    headers: HeaderMap,
    form: Result<Form<SignOut>, FormRejection>,
) -> Response {
    let given = form
        .map(|Form(form)| form.csrf_token)
        .ok()
        .filter(|token| !token.is_empty())
        .or_else(|| {
            headers
                .get(CSRF_HEADER)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    if let Some(id) = cookie(&headers, &host.cookie_name(SESSION_COOKIE)) {
        let Ok(mut sessions) = host.sessions.lock() else {
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        };
        if let Some(session) = sessions.get(id, Instant::now()) {
            // Another site must not be able to end the session either.
            if cross_origin(&headers) || !same_token(&given, &session.csrf_token) {
                return forbidden("sign out from the page: the form's token is missing");
            }
            sessions.remove(id);
        }
    }
    let mut response = Redirect::to("/sign-in").into_response();
    if let Some(cookie) = host.set_cookie(SESSION_COOKIE, "", Duration::ZERO) {
        response.headers_mut().append(header::SET_COOKIE, cookie);
    }
    response
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

/// A TLS acceptor for the PEM certificate chain and key at `cert` and `key`, offering
/// HTTP/1.1 (what `axum::serve` speaks here).
fn tls_acceptor(cert: &Path, key: &Path) -> Result<TlsAcceptor, String> {
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
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// HTTPS for `axum::serve`: each TLS handshake runs in a task of its own, with a time limit,
/// so a client that stalls its handshake holds up no one else.
struct TlsListener {
    handshaken: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    address: SocketAddr,
}

impl TlsListener {
    fn new(listener: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<Self> {
        let address = listener.local_addr()?;
        let (sender, handshaken) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            while !sender.is_closed() {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::warn!(error = %err, "accepting a connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, sender) = (acceptor.clone(), sender.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = sender.send((tls, peer)).await;
                        }
                        Ok(Err(err)) => tracing::debug!(error = %err, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self {
            handshaken,
            address,
        })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.handshaken.recv().await {
            Some(accepted) => accepted,
            // The accepting task ends only once this listener is gone.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.address)
    }
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
    let store = Seed::demo().to_memory_store()?;
    // A short interval, so the page shows a key's last use within seconds.
    let recorder =
        LastUsedRecorder::spawn(store.clone()).with_flush_interval(Duration::from_secs(2));
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls_acceptor(cert, key)?),
        _ => None,
    };
    let config = Config {
        signed_in_as: args.sign_in_as,
        secure_cookies: args.secure_cookies || tls.is_some(),
        session_lifetime: Duration::from_secs(args.session_lifetime),
        max_sessions: args.max_sessions,
    };
    let router = app(store, recorder.clone(), config);
    let listener = TcpListener::bind(&args.listen).await?;
    let address = listener.local_addr()?;
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match tls {
        Some(acceptor) => {
            println!("listening on https://{address}");
            axum::serve(TlsListener::new(listener, acceptor)?, router)
                .with_graceful_shutdown(shutdown)
                .await?;
        }
        None => {
            println!("listening on http://{address}");
            axum::serve(listener, router)
                .with_graceful_shutdown(shutdown)
                .await?;
        }
    }
    recorder.flush().await?;
    Ok(())
}
