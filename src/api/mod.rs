//! The request path: from a request to its response.
//!
//! [`layer`] mounts [`service`] under its prefix; `service` routes (`routes`), authenticates
//! (`auth`), and hands a request with a well-formed key to `flow`, which asks the stores its
//! questions (key, rate limit, orders) and writes the answer (`response`, `conditional`,
//! `body`) within the store timeout (`deadline`), all as `config` says.

pub(crate) mod auth;
pub mod body;
pub(crate) mod client;
pub(crate) mod conditional;
pub(crate) mod config;
pub(crate) mod deadline;
pub(crate) mod drive;
pub(crate) mod flow;
pub mod layer;
pub(crate) mod me_cache;
pub mod openapi;
pub(crate) mod pagination;
pub mod request_id;
pub(crate) mod response;
pub(crate) mod responses_metric;
pub(crate) mod routes;
pub mod service;
