//! The reference pages say what the code does, where a check can be written: the metrics page
//! names every metric the crate describes (and no other), the metrics module's table names
//! every metric constant, the stores page names every method of `StoreFixtures`, and every
//! rule a store trait states is checked by a conformance check that names it.

use std::collections::BTreeSet;
use std::sync::Mutex;

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// A recorder that keeps the names of the metrics described to it.
#[derive(Default)]
struct Described(Mutex<BTreeSet<String>>);

impl Described {
    fn note(&self, key: KeyName) {
        self.0.lock().unwrap().insert(key.as_str().to_owned());
    }
}

impl Recorder for Described {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.note(key);
    }

    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.note(key);
    }

    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.note(key);
    }

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// The backticked `partner_api_...` names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|name| {
            name.starts_with("partner_api_")
                && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_metrics_page_names_every_described_metric_and_no_other() {
    let described = Described::default();
    metrics::with_local_recorder(&described, partner_api::metrics::describe);
    let described = described.0.into_inner().unwrap();
    let page = include_str!("../../src/docs/metrics.md");
    // The first cell of each row of the table of metrics.
    let rows: String = page
        .lines()
        .filter(|line| line.starts_with("| `partner_api_"))
        .map(|line| line.split(" | ").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let listed = metric_names(&rows);
    let missing: Vec<_> = described.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&described).collect();
    assert!(
        missing.is_empty() && stale.is_empty(),
        "the metrics page lacks {missing:?} and names {stale:?}, which describe() does not"
    );
    assert!(described.len() >= 25, "{described:?}");
}

#[test]
fn the_metrics_module_table_names_every_metric_constant() {
    let source = include_str!("../../src/metrics/mod.rs");
    let table: String = source
        .lines()
        .filter(|line| line.starts_with("//! |"))
        .collect::<Vec<_>>()
        .join("\n");
    let constants: Vec<&str> = source
        .lines()
        .filter_map(|line| line.strip_prefix("pub const "))
        .filter_map(|rest| rest.split_once(": &str = "))
        .map(|(name, _)| name)
        // The label value of the bound, not a metric.
        .filter(|name| *name != "OTHER")
        .collect();
    assert!(constants.len() >= 25, "{constants:?}");
    let missing: Vec<_> = constants
        .iter()
        .filter(|name| !table.contains(&format!("[`{name}`]")))
        .collect();
    assert!(missing.is_empty(), "the module's table lacks {missing:?}");
}

#[test]
fn the_stores_page_names_every_fixture_method() {
    let source = include_str!("../../src/testing/fixtures.rs");
    let start = source
        .find("pub trait StoreFixtures")
        .expect("the StoreFixtures trait");
    let body = &source[start..];
    let body = &body[..body.find("\n}\n").expect("the trait's end")];
    let methods: Vec<&str> = body
        .split("fn ")
        .skip(1)
        .filter_map(|rest| rest.split(['(', '<']).next())
        .collect();
    assert!(methods.len() >= 7, "{methods:?}");
    let page = include_str!("../../src/docs/stores.md");
    let missing: Vec<_> = methods
        .iter()
        .filter(|method| !page.contains(&format!("`{method}`")))
        .collect();
    assert!(missing.is_empty(), "the stores page lacks {missing:?}");
}

/// The names after `rule ` in `text`: `` rule `name` `` where a trait states a rule,
/// `"rule name:` where a check of the conformance suite names the rule it checks.
fn rule_names(text: &str, opening: &str, closing: char) -> BTreeSet<String> {
    text.split(opening)
        .skip(1)
        .filter_map(|rest| rest.split(closing).next())
        .filter(|name| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
        })
        .map(str::to_owned)
        .collect()
}

/// Every rule a store trait states is checked by a conformance check that names it, and every
/// rule a check names is stated on a trait: a store author who fails a check finds the rule
/// on the trait method it binds.
#[test]
fn every_rule_stated_on_a_store_trait_is_checked_by_name() {
    let traits = [
        include_str!("../../src/store/key_manager/mod.rs"),
        include_str!("../../src/store/webhooks/endpoint.rs"),
        include_str!("../../src/store/webhooks/outbox.rs"),
        include_str!("../../src/store/read.rs"),
        include_str!("../../src/store/events.rs"),
    ];
    let stated: BTreeSet<String> = traits
        .iter()
        .flat_map(|text| rule_names(text, "rule `", '`'))
        .collect();
    let suites = [
        include_str!("../../src/testing/audit.rs"),
        include_str!("../../src/testing/webhooks.rs"),
        include_str!("../../src/testing/webhooks/audit_log.rs"),
        include_str!("../../src/testing/store.rs"),
        include_str!("../../src/testing/events.rs"),
    ];
    let checked: BTreeSet<String> = suites
        .iter()
        .flat_map(|text| rule_names(text, "\"rule ", ':'))
        .collect();
    let expected: BTreeSet<String> = [
        "audit-in-the-change",
        "audit-only-changes",
        "feed-exactly-once",
        "feed-in-view",
        "feed-revision",
        "filters-hold",
        "last-change",
        "outbox-with-the-order",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(stated, expected, "the rules stated on the traits");
    assert_eq!(checked, expected, "the rules the conformance checks name");
}

/// The `fn app` of `text`: from its line to the first line that closes it.
fn app_function(text: &str) -> String {
    let start = text.find("pub(crate) fn app(").expect("an app function");
    let rest = &text[start..];
    let end = rest.find("\n}\n").expect("its end");
    rest[..end + 2].to_owned()
}

/// The README's axum snippet is the example the host tests run: its `app`, word for word.
#[test]
fn the_readmes_axum_snippet_is_the_tested_example() {
    let readme = include_str!("../../README.md");
    let snippet = readme
        .split("### axum")
        .nth(1)
        .and_then(|section| section.split("```rust,no_run").nth(1))
        .and_then(|block| block.split("```").next())
        .expect("the README's axum snippet");
    let example = include_str!("../../examples/axum.rs");
    assert_eq!(app_function(snippet), app_function(example));
    assert!(
        snippet.contains("into_make_service_with_connect_info::<SocketAddr>()"),
        "the snippet hands the API its peer"
    );
}
