//! A host with a Settings -> Partner API page: axum, a demo sign-in, the key-management service
//! behind it, and the partner API itself.
//!
//! ```text
//! cargo run --example settings                      # http://127.0.0.1:3000/settings/partner-api
//! cargo run --example settings -- --listen 127.0.0.1:0 --sign-in-as org_demo   # test host
//! ```
//!
//! The sign-in is a stand-in for the host application's own: pick an organization, get a
//! session cookie. The host's session middleware ([`session`]) turns the cookie into the
//! [`ActingOrganization`] the key-management service needs, and its CSRF token into the check
//! the service runs on every change. The page (`page.html`) is plain HTML and a little
//! JavaScript, served as it is: no build step.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// The page, served as it is; the server fills in the organization and the CSRF token.
const PAGE: &str = include_str!("page.html");
/// The demo sign-in page.
const SIGN_IN: &str = include_str!("sign_in.html");
/// The cookie of the demo session.
const SESSION_COOKIE: &str = "demo_session";
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
}

/// A signed-in user of the demo: the organization they act for and their CSRF token.
#[derive(Clone, Debug)]
struct Session {
    organization_id: String,
    csrf_token: String,
}

/// The host's state: the demo's sessions and organizations.
#[derive(Clone)]
struct Host {
    sessions: Arc<Mutex<HashMap<String, Session>>>,
    organizations: Vec<(String, String)>,
    /// Every request acts for this organization (a test host).
    signed_in_as: Option<String>,
}

/// The host over `store`: the page at `/settings/partner-api`, its API below it at
/// `/settings/partner-api/api`, the demo sign-in at `/sign-in`, and the partner API at `/v1`.
pub fn app(store: MemoryStore, recorder: LastUsedRecorder, signed_in_as: Option<String>) -> Router {
    let organizations = Seed::demo()
        .organizations
        .into_iter()
        .map(|organization| (organization.id, organization.name))
        .collect();
    let host = Host {
        sessions: Arc::default(),
        organizations,
        signed_in_as: signed_in_as.clone(),
    };
    let management = KeyManagementService::new(store.clone());
    // The host's own CSRF check: the token of the session, in a header the page sends. A test
    // host that signs everyone in has no sessions, hence no tokens.
    let management =
        if signed_in_as.is_some() {
            management
        } else {
            management.with_csrf_check(|parts| {
            let token = parts.headers.get(CSRF_HEADER).and_then(|value| value.to_str().ok());
            let session = parts.extensions.get::<Session>();
            matches!((token, session), (Some(token), Some(session)) if token == session.csrf_token)
        })
        };
    let api = PartnerApi::from_store(store).with_last_used(recorder);
    Router::new()
        .route("/", get(|| async { Redirect::to("/settings/partner-api") }))
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/settings/partner-api", get(page))
        .nest_service("/settings/partner-api/api", management)
        .layer(middleware::from_fn_with_state(host.clone(), session))
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
    let session = session_of(&host, request.headers());
    if let Some(session) = session {
        request
            .extensions_mut()
            .insert(ActingOrganization::new(session.organization_id.as_str()));
        request.extensions_mut().insert(session);
    }
    next.run(request).await
}

fn session_of(host: &Host, headers: &HeaderMap) -> Option<Session> {
    let cookies = headers.get(header::COOKIE)?.to_str().ok()?;
    let id = cookies
        .split(';')
        .filter_map(|cookie| cookie.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)?
        .1;
    host.sessions.lock().ok()?.get(id).cloned()
}

async fn sign_in_page(State(host): State<Host>) -> Html<String> {
    let options: String = host
        .organizations
        .iter()
        .map(|(id, name)| format!("<option value=\"{}\">{}</option>", escape(id), escape(name)))
        .collect();
    Html(SIGN_IN.replace("{{organizations}}", &options))
}

#[derive(serde::Deserialize)]
struct SignIn {
    organization: String,
}

async fn sign_in(State(host): State<Host>, Form(form): Form<SignIn>) -> Response {
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
    };
    if let Ok(mut sessions) = host.sessions.lock() {
        sessions.insert(id.clone(), session);
    }
    let cookie = format!("{SESSION_COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict");
    let mut response = Redirect::to("/settings/partner-api").into_response();
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn sign_out(State(host): State<Host>, headers: HeaderMap) -> Response {
    if let Some(cookies) = headers
        .get(header::COOKIE)
        .and_then(|value| value.to_str().ok())
    {
        for (name, id) in cookies.split(';').filter_map(|c| c.trim().split_once('=')) {
            if name == SESSION_COOKIE {
                if let Ok(mut sessions) = host.sessions.lock() {
                    sessions.remove(id);
                }
            }
        }
    }
    let mut response = Redirect::to("/sign-in").into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("demo_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict"),
    );
    response
}

/// The Settings -> Partner API page of the signed-in user's organization.
async fn page(State(host): State<Host>, request: Request) -> Response {
    let Some(session) = request.extensions().get::<Session>().cloned().or_else(|| {
        host.signed_in_as.clone().map(|organization_id| Session {
            organization_id,
            csrf_token: String::new(),
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
    // The page shows a key once: no cache may keep it, and no other site may frame it.
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'unsafe-inline'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
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
    let store = Seed::demo().to_memory_store()?;
    // A short interval, so the page shows a key's last use within seconds.
    let recorder =
        LastUsedRecorder::spawn(store.clone()).with_flush_interval(Duration::from_secs(2));
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    axum::serve(listener, app(store, recorder.clone(), args.sign_in_as))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    recorder.flush().await?;
    Ok(())
}
