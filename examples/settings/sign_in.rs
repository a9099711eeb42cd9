//! The demo's sign-in and sign-out: a stand-in for the host application's own, with the CSRF
//! checks a real one needs (a token per form, and cross-origin requests refused).

use std::time::{Duration, Instant};

use axum::extract::rejection::FormRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::Form;

use crate::sessions::Session;
use crate::*;

/// The demo sign-in page, with a fresh pre-session CSRF token in a hidden field and in a
/// short-lived cookie: the sign-in checks that both came back (a double submit), which another
/// site can do only if it can read this page or set this host's cookies.
pub(crate) async fn sign_in_page(State(host): State<Host>) -> Response {
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
pub(crate) struct SignIn {
    #[serde(default)]
    organization: String,
    #[serde(default)]
    csrf_token: String,
}

pub(crate) async fn sign_in(
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
pub(crate) struct SignOut {
    #[serde(default)]
    csrf_token: String,
}

pub(crate) async fn sign_out(
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
