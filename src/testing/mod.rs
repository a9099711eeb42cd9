//! The conformance suites (feature `testing`): the behaviour every [`KeyStore`] +
//! [`OrderStore`] pair, and every [`RateLimiter`], must have for the API to keep its contract.
//!
//! A host implements [`StoreFixtures`] (how to insert test data into its store) and runs
//! [`run`] in one test:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! let store = partner_api::MemoryStore::new();
//! partner_api::testing::run(&store).await.assert_passed();
//! # }
//! ```
//!
//! Every check works in its own namespace of fresh ids, so the suite runs against a store
//! that already holds data (a shared test database) and can run again on the same store.
//!
//! A store with per-key usage ([`UsageStore`](crate::store::UsageStore)) is checked by
//! [`run_usage`]; one that counts deprecated calls
//! ([`DeprecatedCallStore`](crate::store::DeprecatedCallStore)) by [`run_deprecated_calls`]; one
//! with an audit log ([`AuditLog`](crate::store::AuditLog)) by
//! [`run_audit_log`]; one with an events feed ([`EventFeed`](crate::store::EventFeed)) by
//! [`run_event_feed`]. With the `webhooks` feature, a store's webhooks are checked by
//! `run_webhooks`, and its webhooks beside its audit log by `run_webhook_audit_log`.
//!
//! A host's own [`RateLimiter`] (one over Redis, say) has a suite too,
//! [`run_rate_limiter`]:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::num::NonZeroU32;
//! use std::time::Duration;
//! // One request back a minute: none comes back while the suite runs.
//! let limiter =
//!     partner_api::LocalRateLimiter::new(Duration::from_secs(60), NonZeroU32::new(5).unwrap());
//! partner_api::testing::run_rate_limiter(&limiter, 5).await.assert_passed();
//! # }
//! ```

use std::sync::atomic::{AtomicU64, Ordering};

#[cfg(doc)]
use crate::rate_limit::RateLimiter;
#[cfg(doc)]
use crate::store::{KeyStore, OrderStore};

mod audit;
mod calls;
mod deprecated_calls;
mod events;
mod filters;
mod fixtures;
mod key_abilities;
mod key_access;
mod key_lifecycle;
mod key_policy;
mod key_restrictions;
mod key_versions;
mod keys;
mod pages;
mod rate_limit;
mod report;
mod store;
mod usage;
#[cfg(feature = "webhooks")]
mod webhooks;

pub use audit::run_audit_log;
pub use deprecated_calls::run_deprecated_calls;
pub use events::run_event_feed;
pub use fixtures::StoreFixtures;
pub use key_abilities::{
    run_api_versions, run_key_policy, run_last_use, run_leak_reports, run_restrictions,
};
pub use keys::run_key_manager;
pub use rate_limit::run_rate_limiter;
pub use report::Report;
pub use store::run;
pub use usage::run_usage;
#[cfg(feature = "webhooks")]
pub use webhooks::{run_webhook_audit_log, run_webhooks};

/// A fresh prefix of ids: unique within this process and, by the clock, across runs.
fn namespace() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!(
        "ct{}x{}x{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}
