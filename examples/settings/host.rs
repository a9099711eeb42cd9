//! The host's state and middleware: its sessions and cookies, the session middleware that turns
//! a cookie into the acting organization, and the security headers on every response.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use partner_api::management::ActingOrganization;

use crate::sessions::{Session, Sessions};
use crate::{cookie, SESSION_COOKIE};

/// Every response's policy: scripts, styles and images from this origin only (no inline
/// script, style or event handler), fetches to it only, forms posted to it only, and no
/// framing by any site (clickjacking).
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

/// The host's state: the demo's sessions and organizations.
#[derive(Clone)]
pub(crate) struct Host {
    pub(crate) sessions: Arc<Mutex<Sessions>>,
    pub(crate) organizations: Arc<[(String, String)]>,
    /// Every request acts for this organization (a test host).
    pub(crate) signed_in_as: Option<String>,
    pub(crate) secure_cookies: bool,
    pub(crate) session_lifetime: Duration,
}

impl Host {
    /// A cookie's name: with the `__Host-` prefix when cookies are `Secure`, so the browser
    /// takes it only from this host over HTTPS, for `Path=/` and no `Domain`: a sibling
    /// subdomain or a plain-HTTP page cannot plant or overwrite it.
    pub(crate) fn cookie_name(&self, name: &str) -> String {
        if self.secure_cookies {
            format!("__Host-{name}")
        } else {
            name.to_owned()
        }
    }

    /// The `Set-Cookie` value of the cookie `name` (see [`Host::cookie_name`]): script cannot
    /// read it, other sites' requests do not carry it, and it lasts `max_age` (zero deletes it).
    pub(crate) fn set_cookie(
        &self,
        name: &str,
        value: &str,
        max_age: Duration,
    ) -> Option<HeaderValue> {
        let name = self.cookie_name(name);
        let secure = if self.secure_cookies { "; Secure" } else { "" };
        let max_age = max_age.as_secs();
        HeaderValue::from_str(&format!(
            "{name}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
        ))
        .ok()
    }

    /// The live session of the request's cookie.
    pub(crate) fn session_of(&self, headers: &HeaderMap) -> Option<Session> {
        let id = cookie(headers, &self.cookie_name(SESSION_COOKIE))?;
        self.sessions.lock().ok()?.get(id, Instant::now())
    }
}

/// The host's session middleware: the cookie's session, and the organization it acts for as
/// the extension the key-management service reads, with the signed-in user (the demo's one
/// user of each organization, `admin@<organization>`) as the actor of the security log.
pub(crate) async fn session(
    State(host): State<Host>,
    mut request: Request,
    next: Next,
) -> Response {
    let acting = |organization: &str| {
        ActingOrganization::new(organization).with_actor(format!("admin@{organization}"))
    };
    if let Some(organization) = &host.signed_in_as {
        request.extensions_mut().insert(acting(organization));
        return next.run(request).await;
    }
    if let Some(session) = host.session_of(request.headers()) {
        request
            .extensions_mut()
            .insert(acting(&session.organization_id));
        request.extensions_mut().insert(session);
    }
    next.run(request).await
}

/// The same headers on every response of the host's own routes (the page, the sign-in,
/// redirects, the management API): [`CONTENT_SECURITY_POLICY`], and `X-Frame-Options` for
/// browsers that predate `frame-ancestors`.
pub(crate) async fn security_headers(request: Request, next: Next) -> Response {
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
