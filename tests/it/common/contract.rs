//! The OpenAPI document as a test oracle: every API response the suite produces is checked
//! against the document's schemas and declared headers, and every response the document
//! declares is produced by some test.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, OnceLock};

use http::{Method, StatusCode};
use serde_json::Value;

use super::Collected;

struct Contract {
    document: Value,
    validators: Mutex<HashMap<String, std::sync::Arc<jsonschema::Validator>>>,
}

/// The contract of the version `version` names (an answer's `api-version`), else the newest
/// (an answer before authentication, the same in every version); none for a version without
/// a document (a test's made-up one).
fn contract(version: Option<&str>) -> Option<&'static Contract> {
    static CONTRACTS: OnceLock<Vec<(String, Contract)>> = OnceLock::new();
    let contracts = CONTRACTS.get_or_init(|| {
        partner_api::openapi::DOCUMENTS
            .iter()
            .map(|(version, text)| {
                let contract = Contract {
                    document: serde_json::from_str(text).unwrap(),
                    validators: Mutex::new(HashMap::new()),
                };
                (version.to_string(), contract)
            })
            .collect()
    });
    let held = match version {
        Some(version) => contracts.iter().find(|(held, _)| held == version),
        None => contracts.last(),
    };
    held.map(|(_, contract)| contract)
}

/// Escapes a JSON pointer token.
fn token(text: &str) -> String {
    text.replace('~', "~0").replace('/', "~1")
}

impl Contract {
    /// Follows a `$ref` to a component, returning the pointer and the value.
    fn resolve(&self, pointer: String) -> (String, &Value) {
        let value = self
            .document
            .pointer(&pointer)
            .unwrap_or_else(|| panic!("no {pointer}"));
        match value.get("$ref").and_then(Value::as_str) {
            Some(reference) => self.resolve(reference.trim_start_matches('#').to_owned()),
            None => (pointer, value),
        }
    }

    fn validator(&self, schema_pointer: &str) -> std::sync::Arc<jsonschema::Validator> {
        let mut validators = self.validators.lock().unwrap();
        validators
            .entry(schema_pointer.to_owned())
            .or_insert_with(|| {
                // The whole document is the root, so `#/components/...` references resolve.
                let mut root = self.document.clone();
                root["$schema"] = "https://json-schema.org/draft/2020-12/schema".into();
                root["$ref"] = format!("#{schema_pointer}").into();
                let validator = jsonschema::options()
                    .should_validate_formats(true)
                    .build(&root)
                    .unwrap_or_else(|err| panic!("schema {schema_pointer}: {err}"));
                std::sync::Arc::new(validator)
            })
            .clone()
    }
}

/// The operation path of the document that `path` (a request path under any prefix) names,
/// if any.
fn operation_path(path: &str) -> Option<&'static str> {
    let path = path.split('?').next().unwrap_or_default();
    [
        "/me",
        "/orders",
        "/events",
        "/deprecations",
        "/versions",
        "/openapi.json",
    ]
    .into_iter()
    .find(|operation| path.ends_with(operation))
}

/// The responses the suite has produced, as `(operation path, status)`.
pub fn produced() -> &'static Mutex<BTreeSet<(String, u16)>> {
    static PRODUCED: OnceLock<Mutex<BTreeSet<(String, u16)>>> = OnceLock::new();
    PRODUCED.get_or_init(Default::default)
}

/// Asserts that `response`, the API's answer to `method path`, is what the document allows.
pub fn assert_conforms(method: &Method, path: &str, response: &Collected) {
    let Some(contract) = contract(response.header("api-version")) else {
        return;
    };
    let status = response.status;
    // An operation that documents a 404 of its own (`/events`, on a host without a feed)
    // answers it there; any other 404 is the shared one.
    let own_not_found = operation_path(path).is_some_and(|operation| {
        contract
            .document
            .pointer(&format!("/paths/{}/get/responses/404", token(operation)))
            .is_some()
    });
    let component = match status {
        StatusCode::NOT_FOUND if own_not_found => None,
        StatusCode::NOT_FOUND => Some("NotFound"),
        StatusCode::METHOD_NOT_ALLOWED => Some("MethodNotAllowed"),
        _ => None,
    };
    let response_pointer = match (component, operation_path(path)) {
        (Some(component), _) => format!("/components/responses/{component}"),
        (None, Some(operation)) => {
            let responses = format!("/paths/{}/get/responses", token(operation));
            let declared = contract
                .document
                .pointer(&format!("{responses}/{}", status.as_u16()));
            assert!(
                declared.is_some(),
                "{method} {path}: status {status} is not in the document"
            );
            produced()
                .lock()
                .unwrap()
                .insert((operation.to_owned(), status.as_u16()));
            format!("{responses}/{}", status.as_u16())
        }
        (None, None) => panic!("{method} {path}: {status} from no documented operation"),
    };
    let (response_pointer, declared) = contract.resolve(response_pointer);
    if let Some(headers) = declared.get("headers").and_then(Value::as_object) {
        for name in headers.keys() {
            let (header_pointer, header) =
                contract.resolve(format!("{response_pointer}/headers/{}", token(name)));
            let value = response.header(name);
            if header["required"] == true {
                assert!(value.is_some(), "{method} {path}: no {name} header");
            }
            if let Some(value) = value {
                let validator = contract.validator(&format!("{header_pointer}/schema"));
                // A header is text; an integer schema describes the number it spells.
                let instance = match header["schema"]["type"].as_str() {
                    Some("integer") => value
                        .parse::<i64>()
                        .map(Value::from)
                        .unwrap_or_else(|_| Value::from(value)),
                    _ => Value::from(value),
                };
                assert!(
                    validator.is_valid(&instance),
                    "{method} {path}: header {name}: {value:?} breaks its schema"
                );
            }
        }
    }
    if method == Method::HEAD || status == StatusCode::NOT_MODIFIED {
        assert!(
            response.body.is_empty(),
            "{method} {path}: {status} with a body"
        );
        return;
    }
    let schema_pointer = format!("{response_pointer}/content/application~1json/schema");
    assert!(
        contract.document.pointer(&schema_pointer).is_some(),
        "{method} {path}: {status} has no JSON schema in the document"
    );
    assert_eq!(response.header("content-type"), Some("application/json"));
    let body = response.json();
    let validator = contract.validator(&schema_pointer);
    let errors: Vec<String> = validator
        .iter_errors(&body)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path}: {status} body breaks the document: {errors:#?}\n{body}"
    );
}
