//! The request path: from a request to its response.
//!
//! [`layer`] mounts [`service`] under its prefix; `service` routes (`routes`), authenticates
//! (`auth`), and hands a request with a well-formed key to `keyed_answer`, whose questions
//! (key, rate limit, orders) `store_drivers` asks the stores, and which writes the answer
//! (`response`, `conditional`, `body`) within the store timeout (`deadline`), all as
//! `config` says. The client's address, for the throttle and a key's allowed addresses, is
//! read by `client_address`.

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod client_address;
pub(crate) mod conditional;
pub(crate) mod config;
pub(crate) mod deadline;
pub(crate) mod keyed_answer;
pub(crate) mod layer;
pub(crate) mod me_cache;
pub mod openapi;
pub(crate) mod pagination;
pub mod request_id;
pub(crate) mod response;
pub(crate) mod responses_metric;
pub(crate) mod routes;
pub(crate) mod service;
pub(crate) mod store_drivers;
