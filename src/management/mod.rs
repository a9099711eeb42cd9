//! Key management: the keys of an organization as a Settings page manages them (issue, list,
//! get, revoke and roll by id, and the last use of each), within the organization's
//! [`KeyPolicy`](crate::store::KeyPolicy) (a maximum key lifetime, a cap on active keys).
//!
//! - [`KeyManagementService`], the JSON API of a host's Settings page as a tower service,
//!   and [`OPENAPI_DOCUMENT`], that API's OpenAPI description;
//! - the trait a store implements, [`KeyManager`](crate::store::KeyManager)
//!   ([`MemoryStore`](crate::MemoryStore) and `PgStore` do), lives with its records in
//!   [`store`](crate::store), below the services that call it.

mod abilities;
mod audit;
pub(crate) mod bodies;
mod budget;
mod deprecated_calls;
mod limits;
mod preview;
mod service;
mod suggestions;
mod usage;
#[cfg(feature = "webhooks")]
mod webhooks;

pub use audit::DEFAULT_AUDIT_PAGE;
#[cfg(feature = "webhooks")]
pub use limits::DEFAULT_WEBHOOK_ACTIONS;
pub use limits::{DEFAULT_MANAGEMENT_WRITES, MAX_BODY_BYTES, MAX_LIFETIME, MAX_OVERLAP};
pub use service::{ActingOrganization, KeyManagementService, ResponseFuture, OPENAPI_DOCUMENT};
pub use usage::{DEFAULT_USAGE_PERIOD, MAX_USAGE_PERIOD};
