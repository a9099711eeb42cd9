//! What each replica's caches did, recorded from the library's `partner_api::cache::journal`
//! trace events: changes applied, evidence confirmed, connections, and every read a cache
//! kept or discarded with its mark. A violation is explained from it.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// The tracing target of the caches' journal (`docs::replicas` names it).
const JOURNAL: &str = "partner_api::cache::journal";

/// One journal event: when it was recorded, its hub, its message and its other fields.
#[derive(Clone, Debug)]
pub(super) struct Entry {
    pub(super) at: Instant,
    pub(super) hub: u64,
    pub(super) message: String,
    pub(super) fields: Vec<(&'static str, String)>,
}

impl Entry {
    pub(super) fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(field, _)| *field == name)
            .map(|(_, value)| value.as_str())
    }
}

/// The events recorded so far, shared with the subscriber.
#[derive(Clone, Default)]
pub(super) struct Journal(Arc<Mutex<Vec<Entry>>>);

impl Journal {
    /// A subscriber that records the journal's events (and nothing else) into `self`.
    pub(super) fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        tracing_subscriber::registry().with(Recorder(self.clone()))
    }

    pub(super) fn entries(&self) -> Vec<Entry> {
        self.0.lock().unwrap().clone()
    }
}

struct Recorder(Journal);

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn enabled(&self, metadata: &tracing::Metadata<'_>, _: Context<'_, S>) -> bool {
        metadata.target() == JOURNAL
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if event.metadata().target() != JOURNAL {
            return;
        }
        let at = Instant::now();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let hub = fields
            .values
            .iter()
            .find(|(name, _)| *name == "hub")
            .and_then(|(_, value)| value.parse().ok())
            .unwrap_or(0);
        (self.0).0.lock().unwrap().push(Entry {
            at,
            hub,
            message: fields.message,
            fields: fields.values,
        });
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    values: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let mut text = String::new();
        let _ = write!(text, "{value:?}");
        self.store(field, text);
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.store(field, value.to_owned());
    }
}

impl Fields {
    fn store(&mut self, field: &Field, text: String) {
        if field.name() == "message" {
            self.message = text;
        } else {
            self.values.push((field.name(), text));
        }
    }
}
