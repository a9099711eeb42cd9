//! [`ResponseCounters`]: the responses metric ([`RESPONSES`]) of one API, its label sets made
//! once per route, method and status.

use std::sync::{Arc, OnceLock};

use ::metrics::{Key, Label};
use http::{Method, StatusCode};

use crate::api::routes::Route;
use crate::metrics::{counter, RESPONSES};

/// The `http_request_method` values: the methods of RFC 9110, and `_OTHER`.
const METHODS: [Method; 9] = [
    Method::GET,
    Method::HEAD,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::PATCH,
    Method::OPTIONS,
    Method::TRACE,
    Method::CONNECT,
];
/// The statuses the API answers with; any other is counted with a key built on the spot.
const STATUSES: [StatusCode; 8] = [
    StatusCode::OK,
    StatusCode::NOT_MODIFIED,
    StatusCode::UNAUTHORIZED,
    StatusCode::NOT_FOUND,
    StatusCode::METHOD_NOT_ALLOWED,
    StatusCode::TOO_MANY_REQUESTS,
    StatusCode::INTERNAL_SERVER_ERROR,
    StatusCode::SERVICE_UNAVAILABLE,
];
/// Routes, and no route.
const ROUTES: [Option<Route>; 7] = [
    Some(Route::Me),
    Some(Route::Orders),
    Some(Route::Events),
    Some(Route::Deprecations),
    Some(Route::Versions),
    Some(Route::OpenApi),
    None,
];

/// The keys of [`RESPONSES`] under one prefix, each built on first use.
#[derive(Clone)]
pub(crate) struct ResponseCounters {
    prefix: Arc<str>,
    keys: Arc<[OnceLock<Key>]>,
}

impl ResponseCounters {
    pub(crate) fn new(prefix: &str) -> Self {
        let slots = (METHODS.len() + 1) * ROUTES.len() * STATUSES.len();
        Self {
            prefix: prefix.into(),
            keys: (0..slots).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Counts a response of `status` to `method` on `route`.
    pub(crate) fn count(&self, method: &Method, route: Option<Route>, status: StatusCode) {
        let method_index = METHODS
            .iter()
            .position(|known| known == method)
            .unwrap_or(METHODS.len());
        let route_index = ROUTES.iter().position(|known| *known == route);
        let status_index = STATUSES.iter().position(|known| *known == status);
        let build = || self.key(method_index, route, status);
        match (route_index, status_index) {
            (Some(route_index), Some(status_index)) => {
                let slot =
                    (method_index * ROUTES.len() + route_index) * STATUSES.len() + status_index;
                counter(self.keys[slot].get_or_init(build)).increment(1);
            }
            _ => counter(&build()).increment(1),
        }
    }

    fn key(&self, method_index: usize, route: Option<Route>, status: StatusCode) -> Key {
        let method = METHODS
            .get(method_index)
            .map_or("_OTHER", Method::as_str)
            .to_owned();
        let mut labels = vec![Label::new("http_request_method", method)];
        if let Some(route) = route {
            let path = match route {
                Route::Me => "/me",
                Route::Orders => "/orders",
                Route::Events => "/events",
                Route::Deprecations => "/deprecations",
                Route::Versions => "/versions",
                Route::OpenApi => "/openapi.json",
            };
            labels.push(Label::new("http_route", format!("{}{path}", self.prefix)));
        }
        labels.push(Label::new(
            "http_response_status_code",
            status.as_str().to_owned(),
        ));
        Key::from_parts(RESPONSES, labels)
    }
}
