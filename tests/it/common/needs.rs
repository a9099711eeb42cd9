//! What a test needs beyond the Rust toolchain, and skipping it on a machine without: a
//! contributor's first `cargo test` passes, each skipped test saying in one line what it
//! needs; `bash .ci/test` provides everything and sets `PARTNER_API_TEST_REQUIRE_ALL`, under
//! which a missing need fails the test instead, so CI never skips.

use std::io::Write;

/// One thing a test needs.
#[derive(Clone, Copy, Debug)]
pub enum Need {
    /// A PostgreSQL server (`PARTNER_API_TEST_DATABASE_URL`).
    Postgres,
    /// A Redis server (`PARTNER_API_TEST_REDIS_URL`).
    Redis,
    /// Chromium and chromedriver (Debian's `chromium`, `chromium-driver`).
    Chromium,
    /// The example programs built as binaries (`cargo build --all-features --examples`).
    Examples,
}

impl Need {
    /// What is missing, if anything.
    fn missing(self) -> Option<String> {
        match self {
            Self::Postgres => std::env::var_os("PARTNER_API_TEST_DATABASE_URL")
                .is_none()
                .then(|| "a PostgreSQL server (PARTNER_API_TEST_DATABASE_URL)".to_owned()),
            Self::Redis => std::env::var_os("PARTNER_API_TEST_REDIS_URL")
                .is_none()
                .then(|| "a Redis server (PARTNER_API_TEST_REDIS_URL)".to_owned()),
            Self::Chromium => {
                let runs = std::process::Command::new("chromedriver")
                    .arg("--version")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status()
                    .is_ok_and(|status| status.success());
                (!runs).then(|| "chromedriver and Chromium (chromium-driver)".to_owned())
            }
            Self::Examples => ["standalone", "settings"]
                .into_iter()
                .find_map(|name| super::fresh_example(name).err())
                .map(|_| "the example binaries (cargo build --all-features --examples)".to_owned()),
        }
    }
}

/// Whether the machine has everything in `needs`. If not, writes one line naming the test,
/// what is missing and how to run it, and returns `false` (the test returns: skipped);
/// under `PARTNER_API_TEST_REQUIRE_ALL` it panics instead.
pub fn has(needs: &[Need]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(|need| need.missing()).collect();
    if missing.is_empty() {
        return true;
    }
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    let line = format!(
        "skipped {test}: needs {}; bash .ci/test runs it with everything",
        missing.join(", ")
    );
    assert!(
        std::env::var_os("PARTNER_API_TEST_REQUIRE_ALL").is_none(),
        "{line} (PARTNER_API_TEST_REQUIRE_ALL is set: no test may skip)"
    );
    // Past the harness's capture of `println!`: the line shows in `cargo test`'s output.
    let _ = writeln!(std::io::stderr(), "{line}");
    false
}

/// Returns from the test unless the machine has every need named: `needs!(Examples,
/// Chromium)`.
#[allow(unused_macros)] // not in every crate that includes this module
macro_rules! needs {
    ($($need:ident),+) => {
        if !$crate::common::needs::has(&[$($crate::common::needs::Need::$need),+]) {
            return;
        }
    };
}
#[allow(unused_imports)]
pub(crate) use needs;

/// A plain `cargo test` on a machine without the example binaries skips, never panics: each
/// test that starts an example program itself names `Examples` among its needs. (One that
/// starts it through a helper of its module is not seen here; a plain `cargo test` on a
/// machine with PostgreSQL and without the binaries finds it.)
#[test]
fn every_test_that_starts_an_example_needs_the_examples() {
    let mut files = Vec::new();
    let mut folders = vec![std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it")];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let path = entry.unwrap().path();
            // The common folder holds helpers, and this test's own words.
            if path.is_dir() && !path.ends_with("common") {
                folders.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                files.push(path);
            }
        }
    }
    let mut forgetful = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        // Each test's text: from its attribute to the next test's.
        for test in text.split("#[tokio::test").skip(1) {
            let test = test.split("\n#[").next().unwrap_or(test);
            let starts = [
                "Process::spawn",
                "spawn_example(",
                "example_binary(",
                "standalone_binary(",
            ]
            .iter()
            .any(|start| test.contains(start));
            let needs = test
                .split("needs!(")
                .nth(1)
                .and_then(|rest| rest.split(')').next())
                .unwrap_or("");
            if starts && !needs.contains("Examples") {
                let name = test
                    .split("fn ")
                    .nth(1)
                    .and_then(|rest| rest.split('(').next());
                forgetful.push(format!("{}: {}", path.display(), name.unwrap_or("?")));
            }
        }
    }
    assert!(
        forgetful.is_empty(),
        "tests without needs!(Examples): {forgetful:#?}"
    );
}
