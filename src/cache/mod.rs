//! Caches in front of any store, for several replicas on one database: keys verified and
//! pages of orders served at memory speed, with every change reaching every replica's caches
//! through [`Notifications`] within a bounded delay.
//!
//! [`CachingKeyStore`] answers `lookup_now` from memory (hits at once, expiry checked on
//! every hit) and remembers unknown and revoked keys too, so a client retrying a bad key costs
//! its store one query; [`CachingOrderStore`] keeps each organization's newest
//! [`OrderPage`](crate::OrderPage), encoded once. Both are bounded in entries whatever the
//! number of keys and organizations.
//!
//! A cache is told of changes in one of two ways:
//!
//! - by the host, through its `invalidate_*` methods, when the host changes what the store
//!   holds (a cache made with `new` always answers from memory);
//! - by a [`Notifications`] hub that a listener drives: with `PgStore`,
//!   [`postgres::listen`] follows the changes that triggers on the crate's tables report,
//!   however they were made (through the crate, the `keys` command or plain SQL): keys by
//!   `NOTIFY`, orders by the events their changes write, which it reads by id. Caches that follow a hub answer from memory only with recent evidence that
//!   they applied every change committed before it (the invariant and its argument are on
//!   [`Notifications`]): a slow, stalled or dead listener turns them off by itself (every
//!   request goes to the store), and they drop everything when it connects again:
//!   correctness first, speed second.

mod keys;
mod known_keys;
mod notifications;
mod orders;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub mod postgres;

pub use keys::CachingKeyStore;
pub use known_keys::KnownKeys;
pub(crate) use notifications::JOURNAL;
pub use notifications::{Notifications, DEFAULT_MAX_EVIDENCE_AGE};
pub use orders::{CachingOrderStore, MAX_LATER_PAGES_PER_ORGANIZATION};

/// The longest a cache answers from one read of its store, by default: the bound on how
/// long a change that no notification reported (a write that bypassed the triggers) is
/// missed. Changes that are reported reach the caches within [`DEFAULT_MAX_EVIDENCE_AGE`].
pub const DEFAULT_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// The most entries a cache keeps, by default.
pub const DEFAULT_CAPACITY: usize = 100_000;

/// A `MemoryStore` with one organization, `org`, for the caches' unit tests.
#[cfg(test)]
fn store_of_one_organization() -> crate::store::MemoryStore {
    let store = crate::store::MemoryStore::new();
    store
        .add_organization(crate::model::Organization {
            id: "org".into(),
            name: "Org".into(),
        })
        .unwrap();
    store
}
