//! A read-only, versioned partner API over an organization's media-buy orders, to mount in a
//! hyper, axum or tonic application.
//!
//! Partners call `GET /v1/me` and `GET /v1/orders` with `Authorization: Bearer <API_KEY>`;
//! each key reaches only its own organization's data. The crate gives:
//!
//! - [`PartnerApi`], the API as a tower [`Service`](tower::Service) (`Error = Infallible`, so
//!   `axum::Router::nest_service` takes it);
//! - [`PartnerApiLayer`], which mounts it under its prefix (default `/v1`) in front of a host's
//!   own service and passes every other request through;
//! - the store traits [`KeyStore`] and [`OrderStore`] it reads through, and [`MemoryStore`],
//!   an in-memory implementation of both for tests and demos;
//! - what partners expect of a serious API: a strong `ETag` with `304 Not Modified` for
//!   `If-None-Match`, and an `X-Request-Id` on every response (both on by default), and per-key
//!   rate limits ([`RateLimiter`], [`LocalRateLimiter`]; opt-in through
//!   [`PartnerApi::with_rate_limiter`]);
//! - [`request_id::RequestIdLayer`] and [`error_response`], so a host's own layers and
//!   responses share the API's request ids and JSON errors;
//! - [`metrics`]: what only the API knows (why requests were refused, usage per organization,
//!   store latency, cache hits) through the `metrics` facade, for whichever exporter the host
//!   installs.
//!
//! ```
//! use partner_api::{MemoryStore, Organization, PartnerApi};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = MemoryStore::new();
//! store.add_organization(Organization { id: "org_1".into(), name: "Acme".into() })?;
//! store.add_key("pk_test_acme", "org_1")?;
//!
//! let api = PartnerApi::from_store(store);
//! let request = http::Request::get("/v1/me")
//!     .header("authorization", "Bearer pk_test_acme")
//!     .body(())?;
//! let response = api.oneshot(request).await?;
//! assert_eq!(response.status(), 200);
//! # Ok(())
//! # }
//! ```
//!
//! The contract the API keeps is [`docs::contract`]; the other pages of [`docs`] say how it
//! behaves where the contract is silent ([`docs::behaviour`]), how to host it
//! ([`docs::hosting`]), write or run a store ([`docs::stores`]), manage keys
//! ([`docs::keys`], [`docs::settings`]), run many replicas ([`docs::replicas`]), watch it
//! ([`docs::metrics`]), what it costs ([`docs::performance`]), how it keeps secrets
//! ([`docs::security`]) and how partners hear of order changes ([`docs::webhooks`]).
//!
//! # Modules
//!
//! Every public item has one path. The crate root is the front door: what every host names
//! to serve the API ([`PartnerApi`], [`PartnerApiLayer`], [`ApiBody`], [`error_response`]),
//! the read traits and the shipped stores with their error ([`KeyStore`], [`OrderStore`],
//! [`MemoryStore`], `PgStore`, [`StoreError`]), the data model ([`Order`], [`Organization`],
//! [`Timestamp`], ...) and the rate limiter a host hands the service ([`LocalRateLimiter`]).
//! Each module holds the rest of its subject: [`store`] (what a store is asked besides the
//! two reads: which page of orders, key management, usage, the audit log), [`management`] (the key-management HTTP service and its OpenAPI
//! document), [`cache`] (caches in front of any store, following change notifications),
//! [`rate_limit`], [`last_used`], [`usage`], [`deprecated_calls`], [`deprecation`], [`metrics`], [`key`], [`seed`] (demo data),
//! [`service`] and [`layer`] (the futures and defaults of the two above), `webhooks`,
//! `secret_scanning` and `testing` (the conformance suites). Who uses whom (the source's
//! modules; `tests/it/layering.rs` checks it):
//!
//! ```text
//! api (layer ─> service) ─> store (KeyStore, OrderStore), rate_limit, last_used, usage,
//!                            deprecated_calls, deprecation, metrics
//! cache ─> store, metrics          last_used, usage, deprecated_calls ─> store
//! store's MemoryStore and PgStore implement every store trait
//! webhooks ─> store (StoreError), model (EncodedOrder), metrics; management ─> webhooks
//! model, key: used by every module above, use none of them
//! ```
//!
//! # Feature flags
//!
//! | feature   | default | what it adds                                                       |
//! |-----------|---------|---------------------------------------------------------------------|
//! | `testing` | no      | `partner_api::testing`: the conformance suite every store must pass |
//! | `postgres`| no      | `PgStore`: both store traits over PostgreSQL (sqlx), with migrations; `cache::postgres::listen` |
//! | `redis`   | no      | `rate_limit::redis::RedisRateLimiter`: one budget per key shared by every replica |
//! | `secret-scanning` | no | `secret_scanning::SecretScanningService`: GitHub's secret scanning reports revoke leaked keys (ECDSA P-256, RustCrypto's `p256`) |
//! | `axum` | no | reads axum's `OriginalUri` (links under `nest_service` keep the mount's path) and `ConnectInfo<SocketAddr>` (the peer) from each request; only the extractors' types, never axum's router |
//! | `webhooks` | no | `webhooks`: signed order events (Standard Webhooks) from a transactional outbox, delivered by every replica (`hmac`, hyper-util's client over rustls) |
//!
//! # Logging
//!
//! The crate logs through [`tracing`]: store failures at error level with their source chain,
//! never a key or its digest. When the host's request span declares the fields `request_id`
//! and `organization_id` (as `tracing::field::Empty`), the API records the request's id and
//! the authenticated organization's id in them.

#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod api;
pub mod cache;
pub mod deprecated_calls;
pub mod deprecation;
pub mod docs;
mod hashing;
pub mod key;
pub mod last_used;
mod log;
pub mod maintenance;
pub mod management;
pub mod metrics;
mod model;
pub mod rate_limit;
mod recording;
#[cfg(feature = "secret-scanning")]
#[cfg_attr(docsrs, doc(cfg(feature = "secret-scanning")))]
pub mod secret_scanning;
pub mod seed;
pub mod store;
mod supervise;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod usage;
pub mod versions;
#[cfg(feature = "webhooks")]
#[cfg_attr(docsrs, doc(cfg(feature = "webhooks")))]
pub mod webhooks;

pub use api::{openapi, request_id};

// The front door: what every host names to serve the API. Each item has this one path; the
// modules hold the rest of their subject.
pub use api::body::ApiBody;
pub use api::client_address::{ClientAddressHeader, PeerAddr};
pub use api::layer::PartnerApiLayer;
pub use api::response::error_response;
pub use api::service::PartnerApi;
pub use key::digest::KeyDigest;
pub use model::{
    EncodedOrder, InvalidOrder, Order, OrderPage, Organization, Timestamp, TimestampParseError,
    MAX_BUDGET_DKK, MAX_ORDERS,
};
pub use rate_limit::limiter::{RateLimitDecision, RateLimiter};
pub use rate_limit::local::LocalRateLimiter;
pub use store::error::{StoreError, StoreErrorKind};
pub use store::memory::MemoryStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::postgres::PgStore;
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::postgres::{CaptureRound, OrderCapture};
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use store::postgres::{OrderField, OrdersMap, OrganizationsMap, SchemaIndex, SchemaMap};
pub use store::read::{KeyDigests, KeyLookup, KeyStore, OrderStore, Principal};

pub mod service {
    //! What [`PartnerApi`](crate::PartnerApi) is configured with and returns: its defaults
    //! and its response future.
    pub use crate::api::service::{
        ResponseFuture, DEFAULT_AUTH_FAILURE_DELAY, DEFAULT_AUTH_FAILURE_LIMIT, DEFAULT_PREFIX,
        DEFAULT_REALM, DEFAULT_RETRY_AFTER, DEFAULT_STORE_TIMEOUT,
    };
}

pub mod layer {
    //! What [`PartnerApiLayer`](crate::PartnerApiLayer) makes: the mounted service, its
    //! response future and body.
    pub use crate::api::layer::{PartnerApiMount, ResponseBody, ResponseFuture};
}

// Runs the README's Rust snippets as doctests, so they keep compiling.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
