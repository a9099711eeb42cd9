//! The OpenAPI 3.1 descriptions of the API (contract 9 rule 4), version `1.0.0-beta`: one
//! per API version.
//!
//! Each version's document is a checked-in file of `src/api/openapi/`, named by the version;
//! the API serves it, without a key, at `{prefix}/openapi.json` as the bare OpenAPI object (a
//! `meta` member would make it invalid OpenAPI), with its server URL set to the prefix: the
//! newest version's, or the one `?version=` (else the `Api-Version` header) names.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::deprecation::Deprecation;
use crate::versions::{ApiVersion, FIRST, KEY_ACCESS, UPDATED_AT};

/// Each version's document as checked in, with the server URL `/v1`, oldest first.
pub const DOCUMENTS: [(ApiVersion, &str); 3] = [
    (FIRST, include_str!("openapi/2026-11-27.json")),
    (UPDATED_AT, include_str!("openapi/2026-11-28.json")),
    (KEY_ACCESS, include_str!("openapi/2026-12-01.json")),
];

/// The newest version's document as checked in: what `{prefix}/openapi.json` serves without
/// a version.
pub const DOCUMENT: &str = DOCUMENTS[DOCUMENTS.len() - 1].1;

/// The value of `info.version` in every version's document.
pub const VERSION: &str = "1.0.0-beta";

/// Returns the newest version's document with its one server URL set to `prefix` (`"/"`
/// for the root).
///
/// ```
/// let document = partner_api::openapi::document("/partner/v1");
/// assert_eq!(document["servers"][0]["url"], "/partner/v1");
/// assert_eq!(document["info"]["version"], partner_api::openapi::VERSION);
/// ```
pub fn document(prefix: &str) -> Value {
    with_server(DOCUMENT, prefix)
}

/// Returns the document of API version `version` with its server URL set to `prefix`, if the
/// crate has one for it.
///
/// ```
/// use partner_api::versions::FIRST;
///
/// let first = partner_api::openapi::document_at(FIRST, "/v1").unwrap();
/// assert!(first["components"]["schemas"]["Order"]["properties"]["updatedAt"].is_null());
/// ```
pub fn document_at(version: ApiVersion, prefix: &str) -> Option<Value> {
    DOCUMENTS
        .iter()
        .find(|(held, _)| *held == version)
        .map(|(_, text)| with_server(text, prefix))
}

fn with_server(text: &str, prefix: &str) -> Value {
    let mut document: Value =
        serde_json::from_str(text).expect("the documents of src/api/openapi are JSON (tested)");
    let url = if prefix.is_empty() { "/" } else { prefix };
    document["servers"][0]["url"] = Value::from(url);
    document
}

/// The served bytes of every version's document for one configuration, built once.
#[derive(Clone)]
pub(crate) struct Served(Arc<[(ApiVersion, Bytes)]>);

impl Served {
    /// The documents under `prefix`, with `deprecations` marked.
    pub(crate) fn new<'a>(
        prefix: &str,
        deprecations: impl IntoIterator<Item = &'a Deprecation>,
    ) -> Self {
        let deprecations: Vec<&Deprecation> = deprecations.into_iter().collect();
        Self(
            DOCUMENTS
                .iter()
                .map(|(version, _)| {
                    let mut document = document_at(*version, prefix)
                        .expect("each version of DOCUMENTS has its document");
                    for deprecation in &deprecations {
                        mark(&mut document, *version, deprecation);
                    }
                    let bytes = serde_json::to_vec(&document).expect("a JSON value always encodes");
                    (*version, Bytes::from(bytes))
                })
                .collect(),
        )
    }

    /// The served bytes of `version`'s document, if the crate has one.
    pub(crate) fn at(&self, version: ApiVersion) -> Option<Bytes> {
        self.0
            .iter()
            .find(|(held, _)| *held == version)
            .map(|(_, bytes)| bytes.clone())
    }
}

/// Marks `deprecation` in `document`, the document of `version`: a route's operation, or its
/// parameter in that operation (a copy of the shared component, so the other operations that
/// use it stay unmarked), `deprecated: true` with the day (`x-deprecation`), the sunset
/// (`x-sunset`) and the link (`x-deprecation-link`; an operation's also as `externalDocs`);
/// a version's deprecation, every operation of that version's document that takes a key. An
/// enforced one's operations also document its 410.
fn mark(document: &mut Value, version: ApiVersion, deprecation: &Deprecation) {
    let Some(route) = deprecation.route() else {
        if deprecation.version() == Some(version) {
            let keyed: Vec<String> = document["paths"]
                .as_object()
                .map(|paths| {
                    paths
                        .keys()
                        .filter(|path| *path != "/openapi.json")
                        .map(|path| {
                            format!("/paths/{}/get", path.replace('~', "~0").replace('/', "~1"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            for pointer in keyed {
                mark_operation(document, &pointer, deprecation);
            }
        }
        return;
    };
    let pointer = format!("/paths/~1{}/get", &route.as_str()[1..]);
    let Some(name) = deprecation.parameter() else {
        mark_operation(document, &pointer, deprecation);
        return;
    };
    let components = document["components"]["parameters"].clone();
    let Some(parameters) = document
        .pointer_mut(&format!("{pointer}/parameters"))
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for parameter in parameters.iter_mut() {
        let resolved = match parameter["$ref"].as_str() {
            Some(reference) => {
                let key = reference.rsplit('/').next().unwrap_or_default();
                components[key].clone()
            }
            None => parameter.clone(),
        };
        if resolved["name"] == name && resolved["in"] == "query" {
            let mut marked = resolved;
            if let Some(object) = marked.as_object_mut() {
                object.extend(notes(deprecation));
            }
            *parameter = marked;
        }
    }
    if deprecation.is_enforced() {
        document_gone(document, &pointer);
    }
}

/// The notes of `deprecation` on what it marks.
fn notes(deprecation: &Deprecation) -> serde_json::Map<String, Value> {
    let mut notes = serde_json::Map::new();
    notes.insert("deprecated".into(), Value::Bool(true));
    notes.insert(
        "x-deprecation".into(),
        Value::from(deprecation.since().to_string()),
    );
    if let Some(sunset) = deprecation.sunset() {
        notes.insert("x-sunset".into(), Value::from(sunset.to_string()));
    }
    if let Some(link) = deprecation.link() {
        notes.insert("x-deprecation-link".into(), Value::from(link));
    }
    notes
}

/// Marks the operation at `pointer` as a whole, and documents its 410 when enforced.
fn mark_operation(document: &mut Value, pointer: &str, deprecation: &Deprecation) {
    let Some(operation) = document.pointer_mut(pointer) else {
        return;
    };
    if let Some(link) = deprecation.link() {
        operation["externalDocs"] = serde_json::json!({
            "description": "What the deprecation means and what to use instead",
            "url": link,
        });
    }
    if let Some(object) = operation.as_object_mut() {
        object.extend(notes(deprecation));
    }
    if deprecation.is_enforced() {
        document_gone(document, pointer);
    }
}

/// Documents the 410 of an enforced deprecation on the operation at `pointer`.
fn document_gone(document: &mut Value, pointer: &str) {
    if let Some(responses) = document
        .pointer_mut(&format!("{pointer}/responses"))
        .and_then(Value::as_object_mut)
    {
        responses.entry("410").or_insert_with(|| {
            serde_json::json!({
                "description": "Past the sunset of an enforced deprecation: no longer answered. The message names the sunset date and the link. A request with a key gets it once the key is known to be usable (else its 401 or 403).",
                "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } }
            })
        });
    }
}
