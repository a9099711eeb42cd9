//! The request path: from a request to its response.
//!
//! [`layer`] mounts [`service`] under its prefix; `service` routes (`routes`), authenticates
//! (`auth`), and hands a request with a well-formed key (what it needs of the request:
//! `request_facts`) to `keyed_answer`, the flow read top to bottom: the key looked up
//! (through `throttle`, the failed-authentication throttle, when it is on), the client's
//! address checked, the rate limiter asked, the orders (or the events feed: `events_request`)
//! read, at the version that answers it (`versioning`). `store_drivers` asks the stores
//! each step's question, within the store timeout (`deadline`); `response` writes the
//! documents and, in `response::keyed`, the answers (`conditional`, `body`), all as `config`
//! says. The client's address, for the throttle and a key's allowed addresses, is read by
//! `client_address`.

pub(crate) mod auth;
pub(crate) mod body;
pub(crate) mod client_address;
pub(crate) mod conditional;
pub(crate) mod config;

pub(crate) mod deadline;
pub(crate) mod deprecations;
pub(crate) mod events_cache;
pub(crate) mod events_request;
pub(crate) mod keyed_answer;
pub(crate) mod layer;
pub(crate) mod me_cache;
pub(crate) mod mount_facts;
pub mod openapi;
pub(crate) mod order_filters;
pub(crate) mod pagination;
pub(crate) mod request_facts;
pub mod request_id;
pub(crate) mod response;
pub(crate) mod responses_metric;
pub(crate) mod routes;
pub(crate) mod service;
pub(crate) mod store_drivers;
pub(crate) mod throttle;
pub(crate) mod versioning;
