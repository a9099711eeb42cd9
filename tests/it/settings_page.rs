//! The Settings -> Partner API page of `examples/settings/` (its program, built by `cargo
//! build --all-features --examples` as `.ci/test` does), driven in a real headless
//! browser (Debian's chromium and chromedriver, through WebDriver) as a person would use it:
//! sign in, create a key, read it off the page and call the API with it, revoke it after
//! confirming, roll another and watch both work until the overlap ends; and a screenshot.
//!
//! `bash .ci/test` installs chromium and chromium-driver when they are missing; with
//! `PARTNER_API_UPDATE_SCREENSHOT=1` the test also writes `examples/settings/screenshot.png`.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::wd::Capabilities;
use fantoccini::{Client, ClientBuilder, Locator};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;

/// chromedriver on a free loopback port, ended on drop.
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
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver (Debian's chromium-driver) is needed: bash .ci/test installs it");
        Self { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A browser session on `driver`, retried until chromedriver is up.
async fn browser(driver: &Driver) -> Client {
    let mut capabilities = Capabilities::new();
    capabilities.insert("browserName".into(), "chrome".into());
    capabilities.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": "/usr/bin/chromium",
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,1100", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--disable-extensions",
                     "--no-first-run", "--no-default-browser-check"]
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

/// The status of `GET /v1/me` with `key` on the host at `address`.
async fn me_status(address: SocketAddr, key: &str) -> u16 {
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<Empty<bytes::Bytes>>();
    let request = http::Request::get(format!("http://{address}/v1/me"))
        .header("authorization", format!("Bearer {key}"))
        .body(Empty::new())
        .unwrap();
    let response = client.request(request).await.unwrap();
    let status = response.status().as_u16();
    let _ = response.into_body().collect().await;
    status
}

/// The text of the element at `css`, once it is there (looked up again if the page changed
/// under it).
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

/// Creates a key on the page and returns the plaintext the page shows once.
async fn create(browser: &Client, label: &str, environment: &str) -> String {
    let field = browser.find(Locator::Id("label")).await.unwrap();
    field.clear().await.unwrap();
    field.send_keys(label).await.unwrap();
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

#[tokio::test]
async fn a_person_manages_keys_on_the_settings_page() {
    let mut host = crate::common::Process::spawn_example("settings", &["--listen", "127.0.0.1:0"]);
    let address = host.address().await;
    let driver = Driver::start();
    let browser = browser(&driver).await;

    // Signed out, the page sends the user to the (demo) sign-in.
    browser
        .goto(&format!("http://{address}/settings/partner-api"))
        .await
        .unwrap();
    browser
        .find(Locator::Id("organization"))
        .await
        .unwrap()
        .select_by_value("org_demo")
        .await
        .unwrap();
    click(&browser, Locator::Id("sign-in")).await;
    assert!(text(&browser, "h1").await.contains("Partner API"));
    // The seed's keys are listed, the revoked one as such, by hint, never in full.
    wait_for_row_text(&browser, "Demo integration", "pk_test_...klmn").await;
    wait_for_row_text(&browser, "Old integration", "Revoked").await;

    // Create a key, read it off the page, and use it.
    let key = create(&browser, "Reporting", "live").await;
    assert!(key.starts_with("pk_live_") && key.len() == 38, "{key}");
    assert!(text(&browser, "#reveal")
        .await
        .contains("will not be shown again"));
    assert_eq!(me_status(address, &key).await, 200);
    let page = browser.source().await.unwrap();
    assert_eq!(
        page.matches(&key).count(),
        1,
        "the plaintext is on the page once"
    );

    // Revoke it, after confirming.
    row_of(&browser, "Reporting")
        .await
        .find(Locator::Css("button.revoke-key"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    assert!(browser
        .get_alert_text()
        .await
        .unwrap()
        .starts_with("Revoke Reporting"));
    browser.accept_alert().await.unwrap();
    wait_for_row_text(&browser, "Reporting", "Revoked").await;
    assert_eq!(me_status(address, &key).await, 401);

    // Roll another key with an overlap: both work until it ends. (The page offers an hour at
    // the least; the test adds a two-second choice to the select, as a person cannot wait.)
    let old_key = create(&browser, "ETL", "test").await;
    row_of(&browser, "ETL")
        .await
        .find(Locator::Css("button.roll-key"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let overlap = browser.find(Locator::Css("select.overlap")).await.unwrap();
    browser
        .execute(
            "const option = new Option('2 seconds', '2'); arguments[0].add(option); return true;",
            vec![serde_json::to_value(&overlap).unwrap()],
        )
        .await
        .unwrap();
    overlap.select_by_value("2").await.unwrap();
    click(&browser, Locator::Css("button.confirm-roll")).await;
    let new_key = new_key_shown(&browser, &old_key, "the roll showed no key").await;
    assert!(new_key.starts_with("pk_test_"), "{new_key}");
    assert_eq!(
        me_status(address, &old_key).await,
        200,
        "the old key works in the overlap"
    );
    assert_eq!(me_status(address, &new_key).await, 200);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(me_status(address, &old_key).await, 401, "the overlap ended");
    assert_eq!(me_status(address, &new_key).await, 200);

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
    browser.close().await.unwrap();
}
