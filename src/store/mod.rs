//! The storage traits behind the API, their error, and the shipped stores.
//!
//! A host implements [`KeyStore`] and [`OrderStore`] over its own storage (or uses
//! [`MemoryStore`]) and checks its implementation with the conformance suite in
//! `partner_api::testing` (feature `testing`).

pub(crate) mod audit;
pub(crate) mod deprecated_calls;
pub(crate) mod error;
pub(crate) mod events;
mod forward;
pub(crate) mod key_manager;
pub(crate) mod memory;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub(crate) mod postgres;
mod query;
pub(crate) mod read;
pub(crate) mod usage;
#[cfg(feature = "webhooks")]
pub(crate) mod webhooks;

pub use audit::{
    prune_audit_batches, AuditAction, AuditContext, AuditEntry, AuditLog, AuditPage, AuditPosition,
    AuditQuery, AuditRecord, AUDIT_RETENTION_ACTOR, DEFAULT_AUDIT_RETENTION, DELIVERY_ACTOR,
    MAX_AUDIT_PAGE, SECRET_SCANNING_ACTOR, UNATTRIBUTED,
};
pub use deprecated_calls::{
    DeprecatedCallCount, DeprecatedCallStore, DeprecatedCallTotal,
    DEFAULT_DEPRECATED_CALLS_RETENTION, DEPRECATED_CALLS_PERIOD,
};
pub(crate) use error::{StoreError, StoreErrorKind};
pub use events::{
    prune_event_batches, BadEventId, EventFeed, EventId, EventQuery, EventsPage, FeedEvent,
    OrderChange, OrderChanges, DEFAULT_EVENTS_RETENTION, MAX_EVENTS_LOOKED_AT_IN_VIEW,
};
pub(crate) use key_manager::{check_label, describe_plaintext, lifetime_until, KeyRefusal};
pub use key_manager::{
    permissions_detail, providers_detail, IssuedKey, KeyAbility, KeyManager, KeyPolicy, KeyRecord,
    KeyUse, Leak, LeakReport, LeakedKey, NewKey, RevocationReason, RollKey, VersionRollback,
    DEFAULT_MAX_ACTIVE_KEYS, DEFAULT_MAX_WEBHOOK_ENDPOINTS, MAX_LABEL_CHARS,
    VERSION_ROLLBACK_WINDOW,
};
#[cfg(any(test, feature = "testing"))]
pub(crate) use memory::MemoryStore;
pub use query::{OrderFilter, OrderPosition, OrderQuery};
pub(crate) use read::{KeyDigests, KeyLookup, KeyStore, OrderStore, Principal};
pub use usage::{
    KeyUsageTotal, UsageBucket, UsageCount, UsageGranularity, UsageOutcome, UsagePeriod,
    UsageRoute, UsageStore, DEFAULT_USAGE_RETENTION,
};
