//! The integration tests, in one binary: each module tests one part of the crate from
//! outside, through its public API, real sockets, PostgreSQL and Redis (`.ci/test` starts
//! them) and the example hosts.

mod common;

mod abuse;
mod allowed_ips;
mod api;
mod audit;
mod bad_rows;
mod capture;
mod conditional_get;
mod conformance;
mod deprecations;
mod docs_truth;
mod event_views;
mod events;
mod fairness;
mod feed_history;
mod feed_never_stalls;
mod golden;
mod history;
mod host_data;
mod hostile;
mod hosts;
mod keys;
mod layer;
mod layering;
mod management;
mod metrics;
mod openapi;
mod operators;
mod order_filters;
mod orders_history;
mod pages;
mod postgres;
mod rate_limit;
mod redis;
mod replicas;
mod request_id;
mod restrictions;
mod revocation;
#[cfg(feature = "secret-scanning")]
mod secret_scanning;
mod server;
mod settings_page;
mod soak;
mod supervised;
mod trust;
mod usage;
mod versions;
#[cfg(feature = "webhooks")]
mod webhooks;
