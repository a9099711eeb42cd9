//! The Settings -> Partner API page of `examples/settings/` (its program, built by `cargo
//! build --all-features --examples` as `.ci/test` does), driven in a real headless
//! browser (Debian's chromium and chromedriver, through WebDriver) over HTTPS as a person
//! would use it: sign in, create a key, read it off the page and call the API with it, revoke
//! it after confirming, roll another and watch both work until the overlap ends; and a
//! screenshot. Beside it, the host's hardening over plain requests: the cookies' flags, the
//! CSRF checks of sign-in and sign-out, the Content-Security-Policy of every page, sessions
//! that expire and a session store that stays bounded.
//!
//! `bash .ci/test` installs chromium and chromium-driver when they are missing; with
//! `PARTNER_API_UPDATE_SCREENSHOT=1` the test also writes `examples/settings/screenshot.png`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpStream;

use crate::common::net::Certificate;
use crate::common::{collect, Collected, Process};

/// The page's path.
const PAGE: &str = "/settings/partner-api";
/// The key-management API's list of keys.
const KEYS: &str = "/settings/partner-api/api/keys";
/// A form's content type.
const FORM: &str = "application/x-www-form-urlencoded";
/// Where the sign-in form's CSRF token is, and the page's.
const FORM_TOKEN: &str = r#"name="csrf_token" value=""#;
const PAGE_TOKEN: &str = r#"<meta name="csrf-token" content=""#;
/// The example's default session lifetime, in seconds (the session cookie's `Max-Age`).
const SESSION_SECONDS: u64 = 8 * 60 * 60;
/// How long a sign-in form's token lasts, in seconds.
const SIGN_IN_FORM_SECONDS: u64 = 15 * 60;

/// chromedriver on a free loopback port, in a process group of its own, which is ended
/// whole on drop: the browsers it starts are in that group too (killing chromedriver alone
/// left each test's Chromium running for the rest of the suite, a passing test's as well as
/// a failing one's).
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|address| address.port())
            .unwrap();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver) is needed: bash .ci/test installs it");
        Self { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The group's id is chromedriver's pid (`process_group(0)`); sh's kill reaches a group.
        let group = format!("kill -s KILL -- -{}", self.child.id());
        if !Command::new("sh")
            .args(["-c", &group])
            .status()
            .is_ok_and(|status| status.success())
        {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A browser session on `driver`, retried until chromedriver is up. It accepts the test's
/// self-signed certificate.
async fn browser(driver: &Driver) -> Client {
    let mut capabilities = Capabilities::new();
    capabilities.insert("browserName".into(), "chrome".into());
    capabilities.insert("acceptInsecureCerts".into(), true.into());
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1100", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--disable-extensions",
                     "--no-first-run", "--no-default-browser-check",
                     "--disable-crash-reporter", "--disable-breakpad",
                     "--ignore-certificate-errors"]
        }),
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let connected = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities.clone())
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await;
        match connected {
            Ok(client) => return client,
            Err(err) if tokio::time::Instant::now() < deadline => {
                let _ = err;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => panic!("no browser session: {err}"),
        }
    }
}

/// The example running as a program, and how to reach it: plain HTTP, or HTTPS trusting only
/// the test's certificate. The program ends when this is dropped.
struct Example {
    _process: Process,
    address: SocketAddr,
    tls: Option<Arc<rustls::ClientConfig>>,
    /// `__Host-` when its cookies are `Secure`.
    cookie_prefix: &'static str,
}

impl Example {
    /// The example over plain HTTP, with `args` besides its address.
    async fn start(args: &[&str]) -> Self {
        let mut all = vec!["--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let mut process = Process::spawn_example("settings", &all);
        let address = process.address().await;
        Self {
            _process: process,
            address,
            tls: None,
            cookie_prefix: if args.contains(&"--secure-cookies") {
                "__Host-"
            } else {
                ""
            },
        }
    }

    /// The example over HTTPS with `certificate`.
    async fn start_tls(certificate: &Certificate, extra: &[&str]) -> Self {
        let cert = certificate.cert_path.to_str().unwrap();
        let key = certificate.key_path.to_str().unwrap();
        let mut args = vec![
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ];
        args.extend_from_slice(extra);
        let mut process = Process::spawn_example("settings", &args);
        let line = process.line().await;
        let address = line
            .strip_prefix("listening on https://")
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{line}"))
            .parse()
            .unwrap_or_else(|_| panic!("{line}"));
        let mut roots = rustls::RootCertStore::empty();
        roots.add(certificate.der.clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        Self {
            _process: process,
            address,
            tls: Some(Arc::new(config)),
            cookie_prefix: "__Host-",
        }
    }

    /// The base URL a browser opens.
    fn base(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.address)
    }

    /// The name of the example's cookie `name`.
    fn cookie(&self, name: &str) -> String {
        format!("{}{name}", self.cookie_prefix)
    }

    /// `method path` with `headers` and `body`, on a connection of its own.
    async fn send(
        &self,
        method: Method,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Collected {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.address.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_owned())))
            .unwrap();
        let tcp = TcpStream::connect(self.address).await.unwrap();
        let response = match &self.tls {
            Some(config) => {
                let name = rustls_pki_types::ServerName::try_from("localhost").unwrap();
                let tls = tokio_rustls::TlsConnector::from(config.clone())
                    .connect(name, tcp)
                    .await
                    .unwrap();
                exchange(TokioIo::new(tls), request).await
            }
            None => exchange(TokioIo::new(tcp), request).await,
        };
        collect(response).await
    }

    /// `GET path`, with `cookie` (`name=value`) unless it is empty.
    async fn get(&self, path: &str, cookie: &str) -> Collected {
        let mut headers = Vec::new();
        if !cookie.is_empty() {
            headers.push(("cookie", cookie));
        }
        self.send(Method::GET, path, &headers, "").await
    }

    /// `POST path` of the form `body`, with `cookie` unless it is empty, and `extra` headers.
    async fn post_form(
        &self,
        path: &str,
        cookie: &str,
        extra: &[(&str, &str)],
        body: &str,
    ) -> Collected {
        let mut headers = vec![("content-type", FORM)];
        if !cookie.is_empty() {
            headers.push(("cookie", cookie));
        }
        headers.extend_from_slice(extra);
        self.send(Method::POST, path, &headers, body).await
    }
}

/// `request` over `io`, HTTP/1.1.
async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> http::Response<hyper::body::Incoming>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
    tokio::spawn(connection);
    sender.send_request(request).await.unwrap()
}

/// The status of `GET /v1/me` with `key` on `example`.
async fn me_status(example: &Example, key: &str) -> u16 {
    api_status(example, key, "/v1/me").await
}

/// The status the example's API answers `key` on `path`.
async fn api_status(example: &Example, key: &str, path: &str) -> u16 {
    let bearer = format!("Bearer {key}");
    example
        .send(Method::GET, path, &[("authorization", bearer.as_str())], "")
        .await
        .status
        .as_u16()
}

/// The API version the example's API answers `key` at (`GET /v1/me`'s `api-version`).
async fn me_version(example: &Example, key: &str) -> String {
    let bearer = format!("Bearer {key}");
    let answer = example
        .send(
            Method::GET,
            "/v1/me",
            &[("authorization", bearer.as_str())],
            "",
        )
        .await;
    answer
        .headers
        .get("api-version")
        .map(|value| value.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// The body of `response`, as text.
fn body(response: &Collected) -> &str {
    std::str::from_utf8(&response.body).unwrap()
}

/// The text after `prefix` in `html`, up to the next `"`: an attribute's value.
fn attribute_after(html: &str, prefix: &str) -> String {
    let start = html
        .find(prefix)
        .unwrap_or_else(|| panic!("no {prefix} in {html}"))
        + prefix.len();
    html[start..].split('"').next().unwrap().to_owned()
}

/// The `Set-Cookie` header of the cookie `name` in `response`.
fn set_cookie(response: &Collected, name: &str) -> String {
    let start = format!("{name}=");
    response
        .headers
        .get_all(http::header::SET_COOKIE)
        .iter()
        .map(|value| value.to_str().unwrap())
        .find(|value| value.starts_with(&start))
        .unwrap_or_else(|| panic!("no Set-Cookie of {name}: {:?}", response.headers))
        .to_owned()
}

/// The cookie's `name=value`, as a `Cookie` header sends it back.
fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().trim().to_owned()
}

/// The cookie's attributes, lowercased: `httponly`, `path=/`, ...
fn cookie_attributes(set_cookie: &str) -> Vec<String> {
    set_cookie
        .split(';')
        .skip(1)
        .map(|attribute| attribute.trim().to_ascii_lowercase())
        .collect()
}

/// Asserts the flags every cookie of the host has, `Secure` when `secure`, and its `Max-Age`.
fn assert_cookie_flags(set_cookie: &str, secure: bool, max_age: u64) {
    let attributes = cookie_attributes(set_cookie);
    let has = |wanted: &str| attributes.iter().any(|attribute| attribute == wanted);
    assert!(has("httponly"), "{set_cookie}");
    assert!(has("samesite=strict"), "{set_cookie}");
    assert!(has("path=/"), "{set_cookie}");
    assert!(has(&format!("max-age={max_age}")), "{set_cookie}");
    assert_eq!(has("secure"), secure, "{set_cookie}");
    assert!(
        !attributes
            .iter()
            .any(|attribute| attribute.starts_with("domain")),
        "host-only: {set_cookie}"
    );
}

/// A signed-in session: its `Set-Cookie`, the `Cookie` to send, and its CSRF token (off the
/// page).
struct SignedIn {
    set_cookie: String,
    cookie: String,
    csrf: String,
}

/// The sign-in form's pre-session cookie (`name=value`) and the token of its hidden field.
async fn sign_in_form(example: &Example) -> (String, String) {
    let form = example.get("/sign-in", "").await;
    assert_eq!(form.status, StatusCode::OK);
    let cookie = cookie_pair(&set_cookie(&form, &example.cookie("sign_in_csrf")));
    (cookie, attribute_after(body(&form), FORM_TOKEN))
}

/// Signs in to `organization` by the form, as a browser does.
async fn sign_in(example: &Example, organization: &str) -> SignedIn {
    let (form_cookie, token) = sign_in_form(example).await;
    let form = format!("organization={organization}&csrf_token={token}");
    let signed_in = example
        .post_form("/sign-in", &form_cookie, &[], &form)
        .await;
    assert_eq!(
        signed_in.status,
        StatusCode::SEE_OTHER,
        "{}",
        body(&signed_in)
    );
    assert_eq!(signed_in.header("location"), Some(PAGE));
    let session = set_cookie(&signed_in, &example.cookie("session"));
    let cookie = cookie_pair(&session);
    let page = example.get(PAGE, &cookie).await;
    assert_eq!(page.status, StatusCode::OK);
    let csrf = attribute_after(body(&page), PAGE_TOKEN);
    SignedIn {
        set_cookie: session,
        cookie,
        csrf,
    }
}

/// Asserts that `response` would send the browser to the sign-in.
fn assert_signed_out(response: &Collected, what: &str) {
    assert_eq!(response.status, StatusCode::SEE_OTHER, "{what}");
    assert_eq!(response.header("location"), Some("/sign-in"), "{what}");
}

/// Asserts the host's Content-Security-Policy on `response`: nothing by default, scripts and
/// styles from the host only (no inline code), no framing.
fn assert_strict_policy(response: &Collected, what: &str) {
    let policy = response
        .header("content-security-policy")
        .unwrap_or_else(|| panic!("{what}: no Content-Security-Policy"));
    let directives: HashMap<&str, Vec<&str>> = policy
        .split(';')
        .filter_map(|directive| {
            let mut words = directive.split_whitespace();
            Some((words.next()?, words.collect()))
        })
        .collect();
    assert_eq!(directives["default-src"], ["'none'"], "{what}: {policy}");
    assert_eq!(
        directives["frame-ancestors"],
        ["'none'"],
        "{what}: {policy}"
    );
    for kind in ["script-src", "style-src"] {
        let sources = directives.get(kind).unwrap_or(&directives["default-src"]);
        for loose in [
            "'unsafe-inline'",
            "'unsafe-eval'",
            "*",
            "data:",
            "https:",
            "http:",
        ] {
            assert!(
                !sources.contains(&loose),
                "{what}: {kind} {loose}: {policy}"
            );
        }
    }
    assert_eq!(response.header("x-frame-options"), Some("DENY"), "{what}");
}

/// Whether `html` has an inline event handler attribute (` onclick=`, ...).
fn has_inline_handler(html: &str) -> bool {
    html.match_indices(" on").any(|(at, _)| {
        let rest = &html[at + 3..];
        let name = rest.bytes().take_while(|b| b.is_ascii_lowercase()).count();
        name > 0 && rest[name..].starts_with('=')
    })
}

/// Asserts that `html` has nothing a strict CSP would refuse: no inline script, style or
/// event handler.
fn assert_no_inline_code(html: &str, what: &str) {
    for (at, _) in html.match_indices("<script") {
        assert!(
            html[at..].starts_with("<script src="),
            "{what}: an inline script"
        );
    }
    assert!(!html.contains("<style"), "{what}: an inline style sheet");
    assert!(!html.contains(" style="), "{what}: an inline style");
    assert!(!has_inline_handler(html), "{what}: an inline event handler");
}

#[tokio::test]
async fn sign_in_and_sign_out_refuse_requests_without_their_csrf_token() {
    crate::common::needs::needs!(Examples);
    let example = Example::start(&[]).await;

    // The sign-in form: a fresh token, in its hidden field and in a short-lived cookie.
    let form_page = example.get("/sign-in", "").await;
    let form_cookie = set_cookie(&form_page, "sign_in_csrf");
    assert_cookie_flags(&form_cookie, false, SIGN_IN_FORM_SECONDS);
    assert_eq!(form_page.header("cache-control"), Some("no-store"));
    let token = attribute_after(body(&form_page), FORM_TOKEN);
    let form_cookie = cookie_pair(&form_cookie);
    assert_eq!(form_cookie, format!("sign_in_csrf={token}"));

    // Refused: without the cookie or the field, with a wrong token, or from another site.
    let form = format!("organization=org_demo&csrf_token={token}");
    let wrong = format!(
        "organization=org_demo&csrf_token={}",
        "x".repeat(token.len())
    );
    let cases = [
        (
            "no token at all",
            "",
            vec![],
            "organization=org_demo".to_owned(),
        ),
        (
            "no token in the form",
            form_cookie.as_str(),
            vec![],
            "organization=org_demo".to_owned(),
        ),
        ("no cookie", "", vec![], form.clone()),
        ("a wrong token", form_cookie.as_str(), vec![], wrong),
        (
            "another site, by Sec-Fetch-Site",
            form_cookie.as_str(),
            vec![("sec-fetch-site", "cross-site")],
            form.clone(),
        ),
        (
            "another site, by Origin",
            form_cookie.as_str(),
            vec![("origin", "http://attacker.example")],
            form.clone(),
        ),
    ];
    for (case, cookie, headers, form) in cases {
        let refused = example.post_form("/sign-in", cookie, &headers, &form).await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{case}");
        assert!(refused.headers.get("set-cookie").is_none(), "{case}");
    }
    let not_a_form = example
        .send(
            Method::POST,
            "/sign-in",
            &[("cookie", form_cookie.as_str())],
            "",
        )
        .await;
    assert_eq!(not_a_form.status, StatusCode::FORBIDDEN);

    // Accepted: both tokens, from the page itself.
    let origin = format!("http://{}", example.address);
    let signed_in = example
        .post_form(
            "/sign-in",
            &form_cookie,
            &[
                ("sec-fetch-site", "same-origin"),
                ("origin", origin.as_str()),
            ],
            &form,
        )
        .await;
    assert_eq!(signed_in.status, StatusCode::SEE_OTHER);
    assert_eq!(signed_in.header("location"), Some(PAGE));
    let session_cookie = set_cookie(&signed_in, "session");
    assert_cookie_flags(&session_cookie, false, SESSION_SECONDS);
    // The form's token is spent.
    assert_cookie_flags(&set_cookie(&signed_in, "sign_in_csrf"), false, 0);
    let session = cookie_pair(&session_cookie);
    let page = example.get(PAGE, &session).await;
    assert_eq!(page.status, StatusCode::OK);
    let csrf = attribute_after(body(&page), PAGE_TOKEN);
    assert_eq!(
        attribute_after(body(&page), FORM_TOKEN),
        csrf,
        "the sign-out form carries the session's token"
    );

    // Sign-out without the session's token, with a wrong one, or from another site: refused,
    // and the session is kept.
    for (case, extra, form) in [
        ("no token", vec![], String::new()),
        (
            "a wrong token",
            vec![],
            format!("csrf_token={}", "x".repeat(csrf.len())),
        ),
        (
            "another site",
            vec![("sec-fetch-site", "cross-site")],
            format!("csrf_token={csrf}"),
        ),
    ] {
        let refused = example
            .post_form("/sign-out", &session, &extra, &form)
            .await;
        assert_eq!(refused.status, StatusCode::FORBIDDEN, "{case}");
        assert!(refused.headers.get("set-cookie").is_none(), "{case}");
        let page = example.get(PAGE, &session).await;
        assert_eq!(page.status, StatusCode::OK, "{case}: the session is kept");
    }

    // With it, the session ends and its cookie is deleted.
    let signed_out = example
        .post_form("/sign-out", &session, &[], &format!("csrf_token={csrf}"))
        .await;
    assert_signed_out(&signed_out, "sign-out");
    assert_cookie_flags(&set_cookie(&signed_out, "session"), false, 0);
    assert_signed_out(
        &example.get(PAGE, &session).await,
        "the page after sign-out",
    );
    assert_eq!(
        example.get(KEYS, &session).await.status,
        StatusCode::UNAUTHORIZED
    );

    // The page's header works as well as the form's field.
    let again = sign_in(&example, "org_demo").await;
    let signed_out = example
        .send(
            Method::POST,
            "/sign-out",
            &[
                ("cookie", again.cookie.as_str()),
                ("x-csrf-token", again.csrf.as_str()),
            ],
            "",
        )
        .await;
    assert_signed_out(&signed_out, "sign-out by header");
    assert_signed_out(&example.get(PAGE, &again.cookie).await, "after it");
}

#[tokio::test]
async fn secure_cookies_are_secure_and_host_only() {
    crate::common::needs::needs!(Examples);
    // As behind a proxy that terminates HTTPS (the browser test serves HTTPS itself).
    let example = Example::start(&["--secure-cookies"]).await;
    let form_page = example.get("/sign-in", "").await;
    assert_cookie_flags(
        &set_cookie(&form_page, "__Host-sign_in_csrf"),
        true,
        SIGN_IN_FORM_SECONDS,
    );
    let signed_in = sign_in(&example, "org_demo").await;
    assert!(signed_in.set_cookie.starts_with("__Host-session="));
    assert_cookie_flags(&signed_in.set_cookie, true, SESSION_SECONDS);

    // Only the `__Host-` cookie signs in: one without the prefix may have been planted.
    let id = signed_in.cookie.split_once('=').unwrap().1;
    assert_signed_out(
        &example.get(PAGE, &format!("session={id}")).await,
        "an unprefixed cookie",
    );

    // Deleting a `__Host-` cookie needs `Secure` too.
    let signed_out = example
        .post_form(
            "/sign-out",
            &signed_in.cookie,
            &[],
            &format!("csrf_token={}", signed_in.csrf),
        )
        .await;
    assert_signed_out(&signed_out, "sign-out");
    assert_cookie_flags(&set_cookie(&signed_out, "__Host-session"), true, 0);
}

#[tokio::test]
async fn every_page_has_a_strict_content_security_policy() {
    crate::common::needs::needs!(Examples);
    let example = Example::start(&[]).await;
    let signed_in = sign_in(&example, "org_demo").await;
    let session = signed_in.cookie.as_str();
    for (path, cookie, status) in [
        ("/", "", StatusCode::SEE_OTHER),
        ("/sign-in", "", StatusCode::OK),
        (PAGE, "", StatusCode::SEE_OTHER),
        (PAGE, session, StatusCode::OK),
        (KEYS, session, StatusCode::OK),
        (KEYS, "", StatusCode::UNAUTHORIZED),
        ("/assets/page.js", "", StatusCode::OK),
        ("/assets/page.css", "", StatusCode::OK),
        ("/assets/sign_in.css", "", StatusCode::OK),
    ] {
        let what = format!("GET {path} (signed in: {})", !cookie.is_empty());
        let response = example.get(path, cookie).await;
        assert_eq!(response.status, status, "{what}");
        assert_strict_policy(&response, &what);
    }
    let refused = example
        .post_form("/sign-in", "", &[], "organization=org_demo")
        .await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN);
    assert_strict_policy(&refused, "a refused sign-in");

    // Nothing on the pages for the policy to refuse, and a script that builds no HTML from
    // strings.
    for (path, cookie) in [("/sign-in", ""), (PAGE, session)] {
        let page = example.get(path, cookie).await;
        assert_no_inline_code(body(&page), path);
    }
    let script = example.get("/assets/page.js", "").await;
    assert_eq!(
        script.header("content-type"),
        Some("text/javascript; charset=utf-8")
    );
    assert_eq!(script.header("x-content-type-options"), Some("nosniff"));
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
    ] {
        assert!(!body(&script).contains(sink), "page.js uses {sink}");
    }
    assert!(!has_inline_handler(body(&script)));
}

#[tokio::test]
async fn an_expired_session_is_signed_out() {
    crate::common::needs::needs!(Examples);
    let example = Example::start(&["--session-lifetime", "2"]).await;
    let signed_in = sign_in(&example, "org_demo").await;
    assert_cookie_flags(&signed_in.set_cookie, false, 2);
    assert_eq!(
        example.get(KEYS, &signed_in.cookie).await.status,
        StatusCode::OK
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // The browser would have dropped the cookie; one sent anyway is refused.
    assert_signed_out(
        &example.get(PAGE, &signed_in.cookie).await,
        "an expired session",
    );
    assert_eq!(
        example.get(KEYS, &signed_in.cookie).await.status,
        StatusCode::UNAUTHORIZED
    );
    let signed_out = example
        .post_form(
            "/sign-out",
            &signed_in.cookie,
            &[],
            &format!("csrf_token={}", signed_in.csrf),
        )
        .await;
    assert_signed_out(&signed_out, "signing out of an expired session");
}

#[tokio::test]
async fn the_session_store_is_bounded() {
    crate::common::needs::needs!(Examples);
    let example = Example::start(&["--max-sessions", "2"]).await;
    let mut sessions = Vec::new();
    for _ in 0..6 {
        sessions.push(sign_in(&example, "org_demo").await);
    }
    // The two newest are kept; every sign-in past the bound evicted the oldest.
    let (evicted, kept) = sessions.split_at(4);
    for (n, session) in evicted.iter().enumerate() {
        assert_signed_out(
            &example.get(PAGE, &session.cookie).await,
            &format!("session {n}"),
        );
    }
    for session in kept {
        assert_eq!(
            example.get(PAGE, &session.cookie).await.status,
            StatusCode::OK
        );
    }
}

/// The text of the element at `css`, once it is there (looked up again if the page changed
/// under it).
/// A browser on `driver` with the example's Settings page open.
async fn open_page(driver: &Driver, example: &Example) -> Client {
    let browser = browser(driver).await;
    browser
        .goto(&format!("{}{PAGE}", example.base()))
        .await
        .unwrap();
    browser
}

async fn text(browser: &Client, css: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(element) = browser.find(Locator::Css(css)).await {
            if let Ok(text) = element.text().await {
                return text;
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no {css}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the page's `h1` reads `wanted` (after a navigation).
async fn wait_for_heading(browser: &Client, wanted: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if text(browser, "h1").await.contains(wanted) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the page never showed {wanted}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The row of the key labelled `label`.
async fn row_of(browser: &Client, label: &str) -> fantoccini::elements::Element {
    let xpath = format!("//tbody[@id='keys']/tr[td[1][normalize-space()='{label}']]");
    browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&xpath))
        .await
        .unwrap_or_else(|err| panic!("no row for {label}: {err}"))
}

/// Waits until the row of `label` shows `wanted` (the table is redrawn after every change,
/// so a row found a moment ago may be gone: it is looked up again each time).
async fn wait_for_row_text(browser: &Client, label: &str, wanted: &str) {
    let xpath = format!(
        "//tbody[@id='keys']/tr[td[1][normalize-space()='{label}'] and contains(., '{wanted}')]"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if browser.find(Locator::XPath(&xpath)).await.is_ok() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{label} never showed {wanted}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Clicks the element at `locator`.
async fn click(browser: &Client, locator: Locator<'_>) {
    browser.find(locator).await.unwrap().click().await.unwrap();
}

/// Clicks the button `css` in the row of the key `label`.
async fn click_in_row(browser: &Client, label: &str, css: &str) {
    let row = format!("//tbody[@id='keys']/tr[td[1][normalize-space()='{label}']]");
    click_in(browser, &row, css).await;
}

/// Clicks the element `css` in the table row the XPath `row` finds, waiting (up to 10 s) for
/// both: the page draws its tables again after every change, so a row found a moment ago may
/// be gone (a stale element); the row is looked up again until the click lands.
async fn click_in(browser: &Client, row: &str, css: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let clicked = async {
            let button = browser
                .find(Locator::XPath(row))
                .await?
                .find(Locator::Css(css))
                .await?;
            button.click().await
        }
        .await;
        match clicked {
            Ok(()) => return,
            Err(err) => assert!(
                tokio::time::Instant::now() < deadline,
                "could not click {css} in {row}: {err}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The text of the element with id `id`, as it is now.
async fn text_of_id(browser: &Client, id: &str) -> String {
    browser
        .find(Locator::Id(id))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Waits until the page shows a new key (one other than `before`) and returns it.
async fn new_key_shown(browser: &Client, before: &str, what: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shown = text_of_id(browser, "new-key").await;
        if !shown.is_empty() && shown != before {
            return shown;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The page's status line, once it says something.
async fn status_line(browser: &Client) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shown = text_of_id(browser, "status").await;
        if !shown.is_empty() {
            return shown;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the status line stayed empty"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Replaces the text of the input `locator` by `text`.
async fn fill(browser: &Client, locator: Locator<'_>, text: &str) {
    let field = browser.find(locator).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(text).await.unwrap();
}

async fn set_label(browser: &Client, label: &str) {
    fill(browser, Locator::Id("label"), label).await;
}

/// Creates a key on the page and returns the plaintext the page shows once.
async fn create(browser: &Client, label: &str, environment: &str) -> String {
    set_label(browser, label).await;
    browser
        .find(Locator::Id("environment"))
        .await
        .unwrap()
        .select_by_value(environment)
        .await
        .unwrap();
    let before = text_of_id(browser, "new-key").await;
    click(browser, Locator::Id("create-key")).await;
    let shown = new_key_shown(browser, &before, "no key was shown").await;
    row_of(browser, label).await;
    shown
}

/// The Webhooks section: add an endpoint, see its secret once, send a test event that a
/// receiver gets signed with that secret, see it in the attempts, rotate the secret.
#[cfg(feature = "webhooks")]
async fn webhooks_on_the_page(browser: &Client) {
    use crate::common::receiver::Receiver;
    use partner_api::webhooks::{verify, WebhookSecret};

    let receiver = Receiver::ok().await;
    let url = receiver.url("/partner-hooks");
    browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::Css("#webhooks-section:not([hidden])"))
        .await
        .expect("the Webhooks section is shown");
    fill(browser, Locator::Id("endpoint-url"), &url).await;
    click(browser, Locator::Css("input[value='order.created']")).await;
    fill(browser, Locator::Id("endpoint-description"), "Partner ERP").await;
    // Limited to two providers' orders, kept sorted.
    fill(browser, Locator::Id("endpoint-providers"), "meta, google").await;
    click(browser, Locator::Id("add-endpoint-button")).await;
    let secret_text = wait_for_text(browser, "new-secret", "", "no secret was shown").await;
    let secret: WebhookSecret = secret_text.parse().expect("a whsec_ secret");
    let row_xpath =
        format!("//tbody[@id='endpoints']/tr[td[1][starts-with(normalize-space(), '{url}')]]");
    let row = browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&row_xpath))
        .await
        .unwrap();
    let row_text = row.text().await.unwrap();
    assert!(
        row_text.contains("order.created")
            && row_text.contains("Providers google, meta")
            && row_text.contains("Partner ERP")
            && row_text.contains("Enabled"),
        "{row_text}"
    );
    assert!(
        !row_text.contains(&secret_text),
        "the list shows the secret"
    );
    // The organization's room under its policy's cap of endpoints.
    assert_eq!(
        wait_for_text(browser, "endpoint-room", "", "no room shown").await,
        "1 of 20 endpoints."
    );

    click_in(browser, &row_xpath, ".test-endpoint").await;
    let received = receiver.wait_for(1, Duration::from_secs(15)).await;
    assert_eq!(received[0].json()["type"], "webhook.test");
    verify(
        std::slice::from_ref(&secret),
        &received[0].headers,
        &received[0].body,
        std::time::SystemTime::now(),
    )
    .expect("the test event is signed with the secret the page showed");

    click_in(browser, &row_xpath, ".show-attempts").await;
    let message_id = received[0].header("webhook-id").to_owned();
    let attempt_row = format!("//tbody[@id='attempts']/tr[@data-message-id='{message_id}']");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let attempt_text = loop {
        if let Ok(found) = browser.find(Locator::XPath(&attempt_row)).await {
            if let Ok(text) = found.text().await {
                break text;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the attempt is not listed"
        );
        click(browser, Locator::Id("attempts-refresh")).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        attempt_text.contains("webhook.test")
            && attempt_text.contains("succeeded")
            && attempt_text.contains("204"),
        "{attempt_text}"
    );

    // The endpoint's API version: added at the newest, pinned to the first on the page.
    let listed = browser
        .find(Locator::XPath(&row_xpath))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(listed.contains("API 2026-12-01"), "{listed}");
    click_in(browser, &row_xpath, ".pin-endpoint-version").await;
    browser
        .find(Locator::Css("select.endpoint-versions"))
        .await
        .unwrap()
        .select_by_value("2026-11-27")
        .await
        .unwrap();
    click(browser, Locator::Css("button.confirm-endpoint-pin")).await;
    let pinned_xpath = format!("{row_xpath}[contains(., 'API 2026-11-27')]");
    browser
        .wait()
        .at_most(Duration::from_secs(10))
        .for_element(Locator::XPath(&pinned_xpath))
        .await
        .expect("the endpoint shows its new version");

    // Rotate: a new secret is shown, and the next delivery is signed with both.
    click_in(browser, &row_xpath, ".rotate-endpoint").await;
    browser.accept_alert().await.unwrap();
    let rotated = wait_for_text(
        browser,
        "new-secret",
        &secret_text,
        "no new secret was shown",
    )
    .await;
    let rotated: WebhookSecret = rotated.parse().unwrap();
    assert_ne!(rotated, secret);
    click_in(browser, &row_xpath, ".test-endpoint").await;
    let received = receiver.wait_for(2, Duration::from_secs(15)).await;
    for key in [&secret, &rotated] {
        verify(
            std::slice::from_ref(key),
            &received[1].headers,
            &received[1].body,
            std::time::SystemTime::now(),
        )
        .expect("during the overlap both secrets sign");
    }
}

/// Waits until the element `id` shows text other than `before`, and returns it.
#[cfg(feature = "webhooks")]
async fn wait_for_text(browser: &Client, id: &str, before: &str, what: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let shown = text_of_id(browser, id).await;
        if !shown.is_empty() && shown != before {
            return shown;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `method path` of the key-management API sent from the page as its own script sends it
/// (same origin, the session's cookie and CSRF token): the status and the JSON answer.
async fn page_call(browser: &Client, method: &str, path: &str, body: Value) -> (u16, Value) {
    let answer = browser
        .execute_async(
            r#"const [method, path, body, done] = arguments;
            const options = { method, headers: { "Accept": "application/json" } };
            if (method !== "GET") {
              options.headers["Content-Type"] = "application/json";
              options.headers["X-CSRF-Token"] =
                document.querySelector('meta[name="csrf-token"]').content;
              options.body = JSON.stringify(body);
            }
            fetch("/settings/partner-api/api" + path, options)
              .then((response) => response.json().then((json) => done([response.status, json])))
              .catch((error) => done([0, String(error)]));"#,
            vec![json!(method), json!(path), body],
        )
        .await
        .unwrap();
    let status = answer[0]
        .as_u64()
        .and_then(|status| u16::try_from(status).ok());
    (
        status.unwrap_or_else(|| panic!("{answer}")),
        answer[1].clone(),
    )
}

/// The CSP violations the page's script recorded since it loaded.
async fn csp_violations(browser: &Client) -> Vec<Value> {
    let recorded = browser
        .execute("return window.cspViolations;", vec![])
        .await
        .unwrap();
    recorded
        .as_array()
        .unwrap_or_else(|| panic!("the page's script records no violations: {recorded}"))
        .clone()
}

/// The page's own markup as it is now (scripts may have added to it): nothing a strict CSP
/// would refuse.
async fn assert_no_inline_code_in_browser(browser: &Client, what: &str) {
    let found = browser
        .execute(
            r#"const inline = document.querySelectorAll("script:not([src]), style, [style]").length;
            const handlers = [...document.querySelectorAll("*")]
              .filter((element) => [...element.attributes].some((a) => a.name.startsWith("on")))
              .length;
            return inline + handlers;"#,
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(found, json!(0), "{what}: inline script, style or handler");
}

/// Asserts that the browser keeps the cookie `name` `HttpOnly`, `SameSite=Strict`, `Secure`
/// and for the whole host.
async fn assert_browser_cookie(browser: &Client, name: &str) {
    let cookie = browser
        .get_named_cookie(name)
        .await
        .unwrap_or_else(|err| panic!("no cookie {name}: {err}"));
    assert_eq!(cookie.http_only(), Some(true), "{name}");
    assert_eq!(cookie.secure(), Some(true), "{name}");
    assert_eq!(
        cookie.same_site().map(|same_site| same_site.to_string()),
        Some("Strict".to_owned()),
        "{name}"
    );
    assert_eq!(cookie.path(), Some("/"), "{name}");
}

/// Seconds from now until the RFC 3339 time `at`.
fn seconds_until(at: &str) -> i64 {
    let at = chrono::DateTime::parse_from_rfc3339(at)
        .unwrap_or_else(|err| panic!("{at}: {err}"))
        .timestamp();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    at - i64::try_from(now).unwrap()
}

#[tokio::test]
async fn a_person_manages_keys_on_the_settings_page() {
    crate::common::needs::needs!(Examples, Chromium);
    // Over HTTPS, as a host serves it: the cookies are `Secure` and `__Host-` named.
    let certificate = Certificate::generate("settings-page");
    // GitHub's secret scanning reports, signed by a key made here.
    #[cfg(feature = "secret-scanning")]
    let scanner = crate::secret_scanning::Signer::generate("github-key-1");
    #[cfg(feature = "secret-scanning")]
    let scanning_keys = crate::common::net::temp_file(
        "settings-scanning-keys.json",
        &crate::secret_scanning::document(&[&scanner]),
    );
    #[allow(unused_mut)]
    let mut extra: Vec<&str> = Vec::new();
    #[cfg(feature = "secret-scanning")]
    extra.extend(["--secret-scanning-keys", scanning_keys.to_str().unwrap()]);
    // Webhooks to a receiver on loopback, over plain http.
    #[cfg(feature = "webhooks")]
    extra.extend([
        "--webhook-allow-http",
        "--webhook-allow-subnet",
        "127.0.0.0/8",
    ]);
    let example = Example::start_tls(&certificate, &extra).await;
    let base = example.base();
    let driver = Driver::start();
    let browser = browser(&driver).await;

    // Signed out, the page sends the user to the (demo) sign-in, whose form carries a token
    // that its cookie must match.
    browser.goto(&format!("{base}{PAGE}")).await.unwrap();
    browser
        .find(Locator::Id("organization"))
        .await
        .unwrap()
        .select_by_value("org_demo")
        .await
        .unwrap();
    assert_browser_cookie(&browser, "__Host-sign_in_csrf").await;
    assert_no_inline_code_in_browser(&browser, "the sign-in page").await;
    click(&browser, Locator::Id("sign-in")).await;
    wait_for_heading(&browser, "Partner API").await;
    assert_browser_cookie(&browser, "__Host-session").await;
    assert!(
        browser
            .get_named_cookie("__Host-sign_in_csrf")
            .await
            .is_err(),
        "the sign-in token is spent"
    );
    // The seed's keys are listed, the revoked one as such, by hint, never in full.
    wait_for_row_text(&browser, "Demo integration", "pk_test_...klmn").await;
    wait_for_row_text(&browser, "Old integration", "Revoked").await;
    assert_no_inline_code_in_browser(&browser, "the page").await;

    // Create a key, read it off the page, and use it.
    let key = create(&browser, "Reporting", "live").await;
    assert!(key.starts_with("pk_live_") && key.len() == 38, "{key}");
    assert!(text(&browser, "#reveal")
        .await
        .contains("will not be shown again"));
    assert_eq!(me_status(&example, &key).await, 200);
    let page = browser.source().await.unwrap();
    assert_eq!(
        page.matches(&key).count(),
        1,
        "the plaintext is on the page once"
    );

    // Revoke it, after confirming: it stops working, and its plaintext leaves the page.
    click_in_row(&browser, "Reporting", "button.revoke-key").await;
    assert!(browser
        .get_alert_text()
        .await
        .unwrap()
        .starts_with("Revoke Reporting"));
    browser.accept_alert().await.unwrap();
    wait_for_row_text(&browser, "Reporting", "Revoked").await;
    assert_eq!(me_status(&example, &key).await, 401);
    assert!(
        !browser.source().await.unwrap().contains(&key),
        "a revoked key's plaintext is taken off the page"
    );
    assert!(!browser
        .find(Locator::Id("reveal-key"))
        .await
        .unwrap()
        .is_displayed()
        .await
        .unwrap());

    // A key pinned to addresses: the page checks what is typed, shows the ranges, and
    // changes them; the API follows at once.
    fill(&browser, Locator::Id("allowed-ips"), "127.0.0.1, not-an-ip").await;
    set_label(&browser, "Pinned").await;
    click(&browser, Locator::Id("create-key")).await;
    assert!(
        status_line(&browser)
            .await
            .contains("\"not-an-ip\" is not an IP address"),
        "a bad range is refused before anything is sent"
    );
    fill(
        &browser,
        Locator::Id("allowed-ips"),
        "127.0.0.1, 2001:db8::/48",
    )
    .await;
    let pinned = create(&browser, "Pinned", "live").await;
    wait_for_row_text(&browser, "Pinned", "127.0.0.1/32, 2001:db8::/48").await;
    assert_eq!(
        me_status(&example, &pinned).await,
        200,
        "served from 127.0.0.1"
    );
    click_in_row(&browser, "Pinned", "button.restrict-key").await;
    fill(&browser, Locator::Css("input.restrict-ips"), "10.1.2.3/8").await;
    click(&browser, Locator::Css("button.confirm-restrict")).await;
    let refused = status_line(&browser).await;
    assert!(
        refused.starts_with("Could not change the allowed IPs:") && refused.contains("10.0.0.0/8"),
        "the service's own words: {refused}"
    );
    fill(&browser, Locator::Css("input.restrict-ips"), "192.0.2.1").await;
    click(&browser, Locator::Css("button.confirm-restrict")).await;
    wait_for_row_text(&browser, "Pinned", "192.0.2.1/32").await;
    assert_eq!(
        me_status(&example, &pinned).await,
        403,
        "no longer from 127.0.0.1"
    );

    // What a key may read: created for the orders of one provider (the page's words under
    // its addresses; the API refuses another provider's), then given everything again from
    // its Access form, at a phone's width and a desktop's (the page never scrolls sideways).
    click(&browser, Locator::Id("read-events")).await;
    fill(&browser, Locator::Id("providers"), "meta").await;
    let limited = create(&browser, "Limited", "live").await;
    wait_for_row_text(&browser, "Limited", "Reads orders · Providers meta").await;
    assert_eq!(api_status(&example, &limited, "/v1/orders").await, 200);
    let other = "/v1/orders?provider=google";
    assert_eq!(api_status(&example, &limited, other).await, 403);
    assert!(
        browser
            .find(Locator::Id("read-events"))
            .await
            .unwrap()
            .is_selected()
            .await
            .unwrap(),
        "the form is reset for the next key"
    );
    for (width, height) in [(390, 844), (1280, 1100)] {
        browser.set_window_size(width, height).await.unwrap();
        click_in_row(&browser, "Limited", "button.limit-key").await;
        browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("form.access-form"))
            .await
            .unwrap();
        let fits = overflow(&browser).await;
        assert!(fits["page"].as_i64().unwrap() <= 0, "at {width} px: {fits}");
        click(&browser, Locator::Css("form.access-form button.cancel")).await;
    }
    click_in_row(&browser, "Limited", "button.limit-key").await;
    // Its feed too, still limited to the provider (its view of the feed; this host serves
    // no feed, so the row says it).
    click(&browser, Locator::Css("input.limit-events")).await;
    click(&browser, Locator::Css("button.confirm-limit")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while row_of(&browser, "Limited")
        .await
        .text()
        .await
        .unwrap_or_default()
        .contains("Reads orders")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the feed was never given"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(api_status(&example, &limited, other).await, 403);
    // Then every provider.
    click_in_row(&browser, "Limited", "button.limit-key").await;
    fill(&browser, Locator::Css("input.limit-providers"), "").await;
    click(&browser, Locator::Css("button.confirm-limit")).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while row_of(&browser, "Limited")
        .await
        .text()
        .await
        .unwrap_or_default()
        .contains("Providers")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the limit was never lifted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(api_status(&example, &limited, other).await, 200);

    // A key that reads orders and never its feed: flagged once its calls are counted (the
    // example writes usage every 2 s), and narrowed from its row to what it used.
    let reader = create(&browser, "Reader", "live").await;
    assert_eq!(api_status(&example, &reader, "/v1/orders").await, 200);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let flagged = "//tbody[@id='keys']/tr[td[1][normalize-space()='Reader']] \
                       //div[@class='unused' and contains(., 'Unused in 30 days: events')]";
        let settled = tokio::time::Instant::now() + Duration::from_secs(2);
        let found = loop {
            if browser.find(Locator::XPath(flagged)).await.is_ok() {
                break true;
            }
            if tokio::time::Instant::now() > settled {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if found {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the unused permission was never flagged"
        );
        browser.refresh().await.unwrap();
    }
    click_in_row(&browser, "Reader", "button.narrow-key").await;
    browser.accept_alert().await.unwrap();
    wait_for_row_text(&browser, "Reader", "Reads orders").await;
    assert!(
        row_of(&browser, "Reader")
            .await
            .find(Locator::Css("div.unused"))
            .await
            .is_err(),
        "a key that uses all it holds is not flagged"
    );
    assert_eq!(api_status(&example, &reader, "/v1/orders").await, 200);

    // A key's API version: issued at the newest, pinned to the first on the page (the API
    // answers at it at once), upgraded again and the upgrade undone.
    let versioned = create(&browser, "Versioned", "live").await;
    wait_for_row_text(&browser, "Versioned", "API 2026-12-01").await;
    assert_eq!(me_version(&example, &versioned).await, "2026-12-01");
    let pin = |version: &'static str| {
        let browser = browser.clone();
        async move {
            click_in_row(&browser, "Versioned", "button.pin-version").await;
            browser
                .find(Locator::Css("select.pin-versions"))
                .await
                .unwrap()
                .select_by_value(version)
                .await
                .unwrap();
            click(&browser, Locator::Css("button.confirm-pin")).await;
            wait_for_row_text(&browser, "Versioned", &format!("API {version}")).await;
        }
    };
    pin("2026-11-27").await;
    assert_eq!(me_version(&example, &versioned).await, "2026-11-27");
    // Down is no upgrade: the form offers no way back.
    click_in_row(&browser, "Versioned", "button.pin-version").await;
    assert!(browser
        .find(Locator::Css("button.undo-version"))
        .await
        .is_err());
    click(&browser, Locator::Css("form.roll button.cancel")).await;
    pin("2026-11-28").await;
    assert_eq!(me_version(&example, &versioned).await, "2026-11-28");
    click_in_row(&browser, "Versioned", "button.pin-version").await;
    click(&browser, Locator::Css("button.undo-version")).await;
    wait_for_row_text(&browser, "Versioned", "API 2026-11-27").await;
    assert_eq!(me_version(&example, &versioned).await, "2026-11-27");
    // Before upgrading again, a preview from the organization's own orders, field by field,
    // at a desktop's width and a phone's (the page never scrolls sideways).
    for (width, height) in [(390, 844), (1280, 1100)] {
        browser.set_window_size(width, height).await.unwrap();
        click_in_row(&browser, "Versioned", "button.pin-version").await;
        browser
            .find(Locator::Css("select.pin-versions"))
            .await
            .unwrap()
            .select_by_value("2026-11-28")
            .await
            .unwrap();
        click(&browser, Locator::Css("button.preview-version")).await;
        let preview = browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("section.version-preview"))
            .await
            .unwrap();
        let text = preview.text().await.unwrap();
        assert!(
            text.contains("From 2026-11-27 to 2026-11-28")
                && text.contains("updatedAt")
                && text.contains("added"),
            "{text}"
        );
        let fits = overflow(&browser).await;
        assert!(fits["page"].as_i64().unwrap() <= 0, "at {width} px: {fits}");
        click(&browser, Locator::Css("form.roll button.cancel")).await;
    }
    // The key's calls per version (counted by the API, written every 2 s): the page shows
    // them once it loads them again.
    let xpath = "//tbody[@id='keys']/tr[td[1][normalize-space()='Versioned'] \
                 and contains(., 'Calls (30 days) 2026-12-01: ') and contains(., '2026-11-28: ') \
                 and contains(., '2026-11-27: ')]";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    'loaded: loop {
        // Each load is given two seconds to read the calls before the next.
        let settled = tokio::time::Instant::now() + Duration::from_secs(2);
        while tokio::time::Instant::now() < settled {
            if browser.find(Locator::XPath(xpath)).await.is_ok() {
                break 'loaded;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the calls per version never showed"
        );
        browser.refresh().await.unwrap();
    }

    // A key GitHub found in public: revoked by the report, and shown as leaked with a link
    // to where it was found.
    #[cfg(feature = "secret-scanning")]
    {
        let leaky = create(&browser, "Leaky", "live").await;
        let found_at = "https://github.com/acme/app/blob/main/.env";
        let report = crate::secret_scanning::matches(&[(leaky.as_str(), found_at)]);
        let signature = scanner.sign(&report);
        let answer = example
            .send(
                Method::POST,
                "/secret-scanning/github",
                &[
                    ("content-type", "application/json"),
                    ("github-public-key-identifier", "github-key-1"),
                    ("github-public-key-signature", signature.as_str()),
                ],
                std::str::from_utf8(&report).unwrap(),
            )
            .await;
        assert_eq!(answer.status, 200, "{}", body(&answer));
        assert_eq!(me_status(&example, &leaky).await, 401);
        browser.refresh().await.unwrap();
        wait_for_row_text(&browser, "Leaky", "Leaked").await;
        let link = row_of(&browser, "Leaky")
            .await
            .find(Locator::Css("a.leak-link"))
            .await
            .unwrap();
        assert_eq!(link.attr("href").await.unwrap().as_deref(), Some(found_at));
    }

    // A key revoked elsewhere (another tab, a colleague) while its roll form is open: the
    // roll is refused with a 409, and the page says why, in the service's words.
    let legacy = create(&browser, "Legacy", "test").await;
    let legacy_id = row_of(&browser, "Legacy")
        .await
        .attr("data-id")
        .await
        .unwrap()
        .expect("a row carries its key's id");
    click_in_row(&browser, "Legacy", "button.roll-key").await;
    let (status, revoked) = page_call(
        &browser,
        "POST",
        &format!("/keys/{legacy_id}/revoke"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{revoked}");
    click(&browser, Locator::Css("button.confirm-roll")).await;
    let shown = status_line(&browser).await;
    let (status, refusal) = page_call(
        &browser,
        "POST",
        &format!("/keys/{legacy_id}/roll"),
        json!({"overlapSeconds": 0}),
    )
    .await;
    assert_eq!(status, 409, "{refusal}");
    let message = refusal["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{refusal}"));
    assert_eq!(shown, format!("Could not roll the key: {message}"));
    // The table shows the key as it is now, and its plaintext is gone with it.
    wait_for_row_text(&browser, "Legacy", "Revoked").await;
    assert!(!browser.source().await.unwrap().contains(&legacy));

    // Roll another key with an overlap and a lifetime for the new key: both work until the
    // overlap ends. (The page offers an hour at the least; the test adds a two-second choice
    // to the select, as a person cannot wait.)
    let old_key = create(&browser, "ETL", "test").await;
    click_in_row(&browser, "ETL", "button.roll-key").await;
    let overlap = browser.find(Locator::Css("select.overlap")).await.unwrap();
    browser
        .execute(
            "const option = new Option('2 seconds', '2'); arguments[0].add(option); return true;",
            vec![serde_json::to_value(&overlap).unwrap()],
        )
        .await
        .unwrap();
    overlap.select_by_value("2").await.unwrap();
    browser
        .find(Locator::Css("input.roll-expiry"))
        .await
        .unwrap()
        .send_keys("30")
        .await
        .unwrap();
    click(&browser, Locator::Css("button.confirm-roll")).await;
    let new_key = new_key_shown(&browser, &old_key, "the roll showed no key").await;
    assert!(new_key.starts_with("pk_test_"), "{new_key}");
    assert_eq!(
        text_of_id(&browser, "status").await,
        "",
        "the 409 is cleared"
    );
    assert_eq!(
        me_status(&example, &old_key).await,
        200,
        "the old key works in the overlap"
    );
    assert_eq!(me_status(&example, &new_key).await, 200);
    // The new key (the newest labelled ETL) lives 30 days from the roll.
    let (status, listed) = page_call(&browser, "GET", "/keys", Value::Null).await;
    assert_eq!(status, 200, "{listed}");
    let rolled = listed["data"]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|record| record["label"] == "ETL")
        .unwrap();
    let expires_at = rolled["expiresAt"]
        .as_str()
        .unwrap_or_else(|| panic!("the rolled key has no expiry: {rolled}"));
    let lifetime = seconds_until(expires_at);
    assert!(
        (30 * 86_400 - 300..=30 * 86_400).contains(&lifetime),
        "{expires_at}: {lifetime} s"
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        me_status(&example, &old_key).await,
        401,
        "the overlap ended"
    );
    assert_eq!(me_status(&example, &new_key).await, 200);

    #[cfg(feature = "webhooks")]
    webhooks_on_the_page(&browser).await;

    // All of that under the page's CSP without a single violation.
    assert_eq!(csp_violations(&browser).await, Vec::<Value>::new());

    // The page with a few keys, their last use recorded: a screenshot that is not blank.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    browser.refresh().await.unwrap();
    wait_for_row_text(&browser, "ETL", "Expired").await;
    let screenshot = browser.screenshot().await.unwrap();
    let mut decoder = png::Decoder::new(std::io::Cursor::new(&screenshot[..]));
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    let samples = frame.color_type.samples();
    let colours: std::collections::HashSet<&[u8]> = pixels[..frame.buffer_size()]
        .chunks_exact(samples)
        .collect();
    assert!(
        frame.width >= 1000 && frame.height >= 600,
        "{}x{}",
        frame.width,
        frame.height
    );
    assert!(
        colours.len() > 50,
        "a blank page: {} colours",
        colours.len()
    );
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("settings-page.png");
    std::fs::write(&target, &screenshot).unwrap();
    if std::env::var_os("PARTNER_API_UPDATE_SCREENSHOT").is_some() {
        let committed = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/examples/settings/screenshot.png"
        );
        std::fs::write(committed, &screenshot).unwrap();
    }
    assert_eq!(csp_violations(&browser).await, Vec::<Value>::new());

    // The policy holds: an inline script put on the page does not run, and the page's
    // listener records the violation (so an empty record above means none happened).
    browser
        .execute(
            "const script = document.createElement('script'); \
             script.textContent = 'window.inlineRan = true;'; \
             document.head.append(script); return true;",
            vec![],
        )
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let violations = loop {
        let violations = csp_violations(&browser).await;
        if !violations.is_empty() {
            break violations;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no violation was recorded for an inline script"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        violations[0].to_string().contains("script-src"),
        "{violations:?}"
    );
    let ran = browser
        .execute("return window.inlineRan === true;", vec![])
        .await
        .unwrap();
    assert_eq!(ran, json!(false), "an inline script ran");

    // Sign out from the page: back to the sign-in, the session cookie gone.
    click(&browser, Locator::Id("sign-out")).await;
    wait_for_heading(&browser, "Sign in").await;
    assert!(browser.get_named_cookie("__Host-session").await.is_err());
    browser.goto(&format!("{base}{PAGE}")).await.unwrap();
    wait_for_heading(&browser, "Sign in").await;
    browser.close().await.unwrap();
}

/// A host whose store implements only the six required methods of `KeyManager`
/// (`--core-store`): the page manages its keys, and hides what the store lacks (the keys'
/// last use, webhooks) instead of showing it broken.
#[tokio::test]
async fn a_store_of_the_required_methods_drives_the_page_which_hides_the_rest() {
    crate::common::needs::needs!(Examples, Chromium);
    let example = Example::start(&["--core-store", "--sign-in-as", "org_demo"]).await;
    let driver = Driver::start();
    let browser = open_page(&driver, &example).await;
    let plaintext = create(&browser, "Core", "test").await;
    assert_eq!(me_status(&example, &plaintext).await, 200);
    let hidden = browser
        .find(Locator::Id("last-used-column"))
        .await
        .unwrap()
        .attr("hidden")
        .await
        .unwrap();
    assert!(hidden.is_some(), "the Last used column is shown");
    let cells = browser
        .find(Locator::XPath("//tbody[@id='keys']/tr[1]"))
        .await
        .unwrap()
        .find_all(Locator::Css("td"))
        .await
        .unwrap();
    let heads = browser
        .find_all(Locator::XPath(
            "//tbody[@id='keys']/../thead//th[not(@hidden)]",
        ))
        .await
        .unwrap();
    assert_eq!(cells.len(), heads.len(), "the row and the header disagree");
    let webhooks = browser
        .find(Locator::Id("webhooks-section"))
        .await
        .unwrap()
        .attr("hidden")
        .await
        .unwrap();
    assert!(webhooks.is_some(), "the Webhooks section is shown");
    click_in_row(&browser, "Core", "button.revoke-key").await;
    browser.accept_alert().await.unwrap();
    wait_for_row_text(&browser, "Core", "Revoked").await;
    assert_eq!(me_status(&example, &plaintext).await, 401);
    assert_eq!(csp_violations(&browser).await, Vec::<Value>::new());
}

/// The text of `css` once it reads `wanted`, reloading the page until it does: counts reach
/// the page after the recorder's next flush.
async fn reload_until_text(browser: &Client, css: &str, wanted: &str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        // A load's reads take their time (longer on a loaded machine, and the page reads
        // several things): the element is looked at for two seconds before loading again,
        // so a slow load is never cut short by the next.
        let settled = tokio::time::Instant::now() + Duration::from_secs(2);
        loop {
            if let Ok(element) = browser.find(Locator::Css(css)).await {
                if element.text().await.is_ok_and(|text| text == wanted) {
                    return;
                }
            }
            if tokio::time::Instant::now() >= settled {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{css} never read {wanted:?}: {:?}",
            text(browser, css).await
        );
        browser.refresh().await.unwrap();
    }
}

/// How far the page, and each table on it, is wider than its box (0: it fits), and how far
/// the last button of the first webhook endpoint's row reaches past its table's box.
async fn overflow(browser: &Client) -> Value {
    browser
        .execute(
            "const wraps = [...document.querySelectorAll('.table-wrap')]
               .filter((wrap) => !wrap.closest('[hidden]'));
             const remove = document.querySelector('#endpoints button.remove-endpoint');
             const wrap = remove && remove.closest('.table-wrap');
             return {
               page: document.documentElement.scrollWidth - window.innerWidth,
               tables: wraps.map((wrap) => wrap.scrollWidth - wrap.clientWidth),
               remove: remove ? Math.ceil(remove.getBoundingClientRect().right
                 - wrap.getBoundingClientRect().right) : null,
               createKey: Math.ceil(document.getElementById('create-key')
                 .getBoundingClientRect().right - window.innerWidth),
               width: window.innerWidth,
               // What reaches furthest right, outside a scrolling table: what to fix.
               widest: [...document.querySelectorAll('body *')]
                 .filter((node) => !node.closest('.table-wrap'))
                 .map((node) => [Math.ceil(node.getBoundingClientRect().right),
                   node.tagName + (node.id ? '#' + node.id : '') + '.' + node.className])
                 .sort((a, b) => b[0] - a[0])[0],
             };",
            vec![],
        )
        .await
        .unwrap()
}

/// Seconds since the Unix epoch, now.
fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The number of the UTC day it is now (days since 1970-01-01).
fn utc_day() -> u64 {
    unix_seconds() / 86_400
}

/// Returns at once when the next UTC midnight is more than `margin` away, and just after it
/// otherwise: a test that reads "today's" bar of the usage chart makes its requests and reads
/// the bar within one UTC day (CI once ran it across midnight: the requests were on the 24th,
/// the bar it read was the 25th's).
async fn clear_of_utc_midnight(margin: Duration) {
    // Whole seconds: from within the current second, this sleep ends just after midnight.
    let left = Duration::from_secs(86_400 - unix_seconds() % 86_400);
    if left < margin {
        tokio::time::sleep(left + Duration::from_millis(100)).await;
    }
}

/// The title of the usage chart's last bar (today's): its day, its total and outcomes.
async fn last_bar_title(browser: &Client) -> String {
    browser
        .find(Locator::Css("#usage-chart g.day:last-of-type title"))
        .await
        .unwrap()
        .html(true)
        .await
        .unwrap()
}

/// After requests with a key and the recorder's flush, its row's sparkline and the usage
/// section's totals show them, refusals among them, for all keys and for the key chosen;
/// the sections fit a 1280 px window and stay usable at 390 px (a phone).
#[tokio::test]
async fn the_page_shows_each_keys_usage_and_fits_a_desktop_and_a_phone() {
    crate::common::needs::needs!(Examples, Chromium);
    use partner_api::seed::{DEMO_KEY, DEMO_REVOKED_KEY};
    // The requests and the reading of today's bar, below, take well under two minutes.
    clear_of_utc_midnight(Duration::from_secs(120)).await;
    let requested_on = utc_day();
    let example = Example::start(&["--sign-in-as", "org_demo"]).await;
    for _ in 0..7 {
        assert_eq!(me_status(&example, DEMO_KEY).await, 200);
    }
    for _ in 0..2 {
        assert_eq!(me_status(&example, DEMO_REVOKED_KEY).await, 401);
    }
    let driver = Driver::start();
    let browser = open_page(&driver, &example).await;
    wait_for_row_text(&browser, "Demo integration", "pk_test_...klmn").await;
    reload_until_text(&browser, "#usage-total", "9").await;
    let spark = "//tbody[@id='keys']/tr[td[1][normalize-space()='Demo integration']]\
                 /td[contains(@class, 'spark')]/span";
    let demo_total = browser.find(Locator::XPath(spark)).await.unwrap();
    assert_eq!(demo_total.text().await.unwrap(), "7");
    assert_eq!(text(&browser, "#usage-refused").await, "2 (22.2%)");
    assert_eq!(text(&browser, "#usage-revoked").await, "2");
    assert_eq!(text(&browser, "#usage-ok").await, "7");
    // Today's bar, stacked: what was served and what was refused.
    let segments = browser
        .find_all(Locator::Css("#usage-chart rect.seg"))
        .await
        .unwrap();
    assert_eq!(segments.len(), 2);
    let day = last_bar_title(&browser).await;
    assert_eq!(
        utc_day(),
        requested_on,
        "the test ran into the next UTC day: its margin before midnight is too short"
    );
    assert!(day.contains("9 requests (OK 7, Revoked 2)"), "{day}");
    let today_name = day.split(':').next().unwrap().to_owned();
    // The page's clock a day ahead (as if UTC midnight passed since it read the counts): the
    // chart drawn again at the change below keeps the days its counts were read for.
    browser
        .execute(
            "const Real = Date;
             window.Date = class extends Real {
               constructor(...args) { if (args.length) super(...args); else super(Real.now() + 86400000); }
               static now() { return Real.now() + 86400000; }
             };
             window.RealDate = Real;",
            vec![],
        )
        .await
        .unwrap();
    // One key: its own totals.
    browser
        .find(Locator::Id("usage-key"))
        .await
        .unwrap()
        .select_by(Locator::XPath(
            "//option[starts-with(., 'Demo integration')]",
        ))
        .await
        .unwrap();
    // Drawn again at the change, without a reload (which would choose all keys again).
    assert_eq!(text(&browser, "#usage-total").await, "7");
    assert_eq!(text(&browser, "#usage-refused").await, "0 (0%)");
    let key_day = last_bar_title(&browser).await;
    assert_eq!(
        key_day,
        format!("{today_name}: 7 requests (OK 7)"),
        "the bars are labelled with days their counts were not read for"
    );
    // Every label of the chart lies inside it: the last day's was cut at the right edge.
    let cut = browser
        .execute(
            "const svg = document.querySelector('#usage-chart svg'); \
             const box = svg.viewBox.baseVal; \
             return [...svg.querySelectorAll('text.axis-label')].map(text => { \
               const b = text.getBBox(); \
               return Math.max(box.x - b.x, b.x + b.width - (box.x + box.width)); });",
            vec![],
        )
        .await
        .unwrap();
    let cut: Vec<f64> = serde_json::from_value(cut).unwrap();
    assert_eq!(cut.len(), 5, "the chart's labels: {cut:?}");
    assert!(
        cut.iter().all(|overflow| *overflow <= 0.0),
        "a label of the usage chart runs past its edge: {cut:?}"
    );
    browser
        .execute("window.Date = window.RealDate;", vec![])
        .await
        .unwrap();

    // A webhook endpoint with a long URL: its row, five actions included, fits at 1280 px.
    #[cfg(feature = "webhooks")]
    {
        fill(
            &browser,
            Locator::Id("endpoint-url"),
            "https://partner.example/integrations/acme-media-cloud/webhooks/orders",
        )
        .await;
        click(&browser, Locator::Id("add-endpoint-button")).await;
        browser
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css("#endpoints button.remove-endpoint"))
            .await
            .unwrap();
    }
    let wide = overflow(&browser).await;
    // At most 0: a vertical scrollbar takes its width from the page's.
    assert!(wide["page"].as_i64().unwrap() <= 0, "{wide}");
    assert!(
        wide["tables"]
            .as_array()
            .unwrap()
            .iter()
            .all(|table| table.as_i64().unwrap() <= 0),
        "a table is wider than its card at 1280 px: {wide}"
    );
    #[cfg(feature = "webhooks")]
    assert!(wide["remove"].as_i64().unwrap() <= 0, "{wide}");
    // A phone: the page itself never scrolls sideways, and its forms fit.
    browser.set_window_size(390, 844).await.unwrap();
    let narrow = overflow(&browser).await;
    assert!(narrow["page"].as_i64().unwrap() <= 0, "{narrow}");
    assert!(narrow["createKey"].as_i64().unwrap() <= 0, "{narrow}");
    assert_eq!(csp_violations(&browser).await, Vec::<Value>::new());
    browser.close().await.unwrap();
}

/// The security log: revoke a key on the page and see who did it, to which key, and when,
/// above the key's creation.
#[tokio::test]
async fn the_security_log_shows_who_revoked_a_key_and_when() {
    crate::common::needs::needs!(Examples, Chromium);
    let example = Example::start(&["--sign-in-as", "org_demo"]).await;
    let driver = Driver::start();
    let browser = open_page(&driver, &example).await;
    // The page writes dates in the browser's time zone: the revocation's date is the day it
    // was before the revocation or the day it is after reading the row (a run across midnight).
    let browser_today = || async {
        browser
            .execute(
                "return new Date().toLocaleDateString('en-GB', \
                 { day: 'numeric', month: 'short', year: 'numeric' });",
                vec![],
            )
            .await
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned()
    };
    let day_before = browser_today().await;
    let plaintext = create(&browser, "Audited", "test").await;
    click_in_row(&browser, "Audited", "button.revoke-key").await;
    browser.accept_alert().await.unwrap();
    wait_for_row_text(&browser, "Audited", "Revoked").await;
    let newest = "//tbody[@id='security-log']/tr[1]";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let row = loop {
        if let Ok(row) = browser.find(Locator::XPath(newest)).await {
            if row
                .text()
                .await
                .is_ok_and(|text| text.contains("Revoked key"))
            {
                break row.text().await.unwrap();
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no revocation in the log"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(row.contains("admin@org_demo"), "{row}");
    assert!(row.contains("Audited"), "{row}");
    // When: today's date, as the keys table writes dates.
    let day_after = browser_today().await;
    assert!(
        row.contains(&day_before) || row.contains(&day_after),
        "{row} {day_before} {day_after}"
    );
    let created = browser
        .find(Locator::XPath("//tbody[@id='security-log']/tr[2]"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        created.contains("Created key") && created.contains("Audited"),
        "{created}"
    );
    // The log holds ids, never a key.
    let log = browser
        .find(Locator::Id("security-section"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!log.contains(&plaintext));
    // A row of an endpoint delivery disabled says why in words; any other detail as it is.
    let row_text = |detail: &str| {
        let entry = json!({
            "id": "1", "at": "2026-11-25T10:00:00.000Z", "organizationId": "org_demo",
            "action": "webhook.disabled", "target": "7", "detail": detail,
            "actor": "webhook delivery",
        });
        let browser = browser.clone();
        async move {
            browser
                .execute("return securityRow(arguments[0]).textContent;", vec![entry])
                .await
                .unwrap()
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    let gone = row_text("gone").await;
    assert!(gone.contains("webhook delivery"), "{gone}");
    assert!(gone.contains("Disabled endpoint"), "{gone}");
    assert!(gone.contains("it answered 410 Gone"), "{gone}");
    let failing = row_text("failing").await;
    assert!(
        failing.contains("its deliveries failed for the disable period"),
        "{failing}"
    );
    let other = row_text("constructor").await;
    assert!(other.contains("7constructor"), "{other}");
    assert_eq!(csp_violations(&browser).await, Vec::<Value>::new());
}

/// The Deprecated calls section: a key that calls a deprecated route is listed under it, with
/// its calls, last call and the sunset date; a deprecation no key called says so; the section
/// fits a 1280 px window and a 390 px phone.
#[tokio::test]
async fn the_page_lists_the_keys_that_still_call_what_is_deprecated() {
    crate::common::needs::needs!(Examples, Chromium);
    use partner_api::seed::DEMO_KEY;
    let example = Example::start(&[
        "--sign-in-as",
        "org_demo",
        "--deprecate",
        "/me=2026-01-01,sunset=2099-06-01,link=https://example.com/me-v2,enforce",
        "--deprecate",
        "/orders?provider=2026-02-01",
    ])
    .await;
    for _ in 0..3 {
        assert_eq!(me_status(&example, DEMO_KEY).await, 200);
    }
    let driver = Driver::start();
    let browser = open_page(&driver, &example).await;
    wait_for_row_text(&browser, "Demo integration", "pk_test_...klmn").await;
    let me_row = "#deprecated-calls tr[data-target='/me'][data-key-id]";
    reload_until_text(&browser, &format!("{me_row} td.calls"), "3").await;
    let row = text(&browser, me_row).await;
    assert!(row.contains("GET /v1/me"), "{row}");
    assert!(row.contains("Demo integration"), "the key is named: {row}");
    assert!(row.contains("1 Jun 2099"), "the sunset date: {row}");
    assert!(row.contains("then 410 Gone"), "{row}");
    let link = browser
        .find(Locator::Css(&format!("{me_row} td.target a")))
        .await
        .unwrap()
        .attr("href")
        .await
        .unwrap();
    assert_eq!(link.as_deref(), Some("https://example.com/me-v2"));
    let last_call = text(&browser, &format!("{me_row} td.date")).await;
    assert_ne!(last_call, "—");
    let uncalled = text(
        &browser,
        "#deprecated-calls tr[data-target='/orders?provider']",
    )
    .await;
    assert!(
        uncalled.contains("the provider parameter")
            && uncalled.contains("No key called it in the last 30 days."),
        "{uncalled}"
    );
    let lead = text(&browser, "p.lead").await;
    assert!(
        ["GET /v1/me", "GET /v1/orders", "GET /v1/events"]
            .iter()
            .all(|route| lead.contains(route)),
        "the intro names every route: {lead}"
    );
    // As text (what a screen reader or a copy reads), a cell and its note are two phrases.
    let as_text = browser
        .execute(
            "return [...document.querySelectorAll('#deprecated-calls td')]\
                 .map((cell) => cell.textContent).join('|')",
            vec![],
        )
        .await
        .unwrap();
    let as_text = as_text.as_str().unwrap();
    assert!(
        as_text.contains("GET /v1/orders?provider the provider parameter")
            && as_text.contains("1 Jun 2099 then 410 Gone"),
        "{as_text}"
    );
    for (width, height) in [(1280, 1100), (390, 844)] {
        browser.set_window_size(width, height).await.unwrap();
        let wide = overflow(&browser).await;
        assert!(wide["page"].as_i64().unwrap() <= 0, "{width} px: {wide}");
        if width == 1280 {
            assert!(
                wide["tables"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|table| table.as_i64().unwrap() <= 0),
                "a table is wider than its card at 1280 px: {wide}"
            );
        }
    }
    assert_eq!(csp_violations(&browser).await, Vec::<Value>::new());
    browser.close().await.unwrap();
}
