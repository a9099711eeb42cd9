//! The OpenAPI 3.1 description of the API (contract 9 rule 4), version `1.0.0-beta`.
//!
//! The document is the checked-in file `src/api/openapi.json`; the API serves it, without a key,
//! at `{prefix}/openapi.json` as the bare OpenAPI object (a `meta` member would make it
//! invalid OpenAPI), with its server URL set to the prefix.

use bytes::Bytes;
use serde_json::Value;

/// The OpenAPI document as checked in, with the server URL `/v1`.
pub const DOCUMENT: &str = include_str!("openapi.json");

/// The value of `info.version`.
pub const VERSION: &str = "1.0.0-beta";

/// Returns the document with its one server URL set to `prefix` (`"/"` for the root).
///
/// ```
/// let document = partner_api::openapi::document("/partner/v1");
/// assert_eq!(document["servers"][0]["url"], "/partner/v1");
/// assert_eq!(document["info"]["version"], partner_api::openapi::VERSION);
/// ```
pub fn document(prefix: &str) -> Value {
    let mut document: Value =
        serde_json::from_str(DOCUMENT).expect("src/api/openapi.json is valid JSON (tested)");
    let url = if prefix.is_empty() { "/" } else { prefix };
    document["servers"][0]["url"] = Value::from(url);
    document
}

/// The served bytes for `prefix`, built once per configuration.
pub(crate) fn encoded(prefix: &str) -> Bytes {
    serde_json::to_vec(&document(prefix))
        .expect("a JSON value always encodes")
        .into()
}
