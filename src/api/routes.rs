//! The route table of contract section 4: which paths exist below the prefix and which methods
//! they take.

use http::Method;

/// An endpoint under the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /me` (contract 4.1).
    Me,
    /// `GET /orders` (contract 4.2).
    Orders,
    /// `GET /events`: the events feed (contract 4.3), on a host that has one.
    Events,
    /// `GET /deprecations`: the deprecations in force, and the key's last call of each.
    Deprecations,
    /// `GET /versions`: the API's versions, and the key's pinned one.
    Versions,
    /// `GET /openapi.json`: the OpenAPI description, served without a key.
    OpenApi,
}

impl Route {
    /// The endpoint at `path`, the part of the request path after the prefix. Matching is
    /// exact: no decoding, no dot segments, no trailing slash, so one resource has one URL.
    pub(crate) fn at(path: &str) -> Option<Self> {
        match path {
            "/me" => Some(Self::Me),
            "/orders" => Some(Self::Orders),
            "/events" => Some(Self::Events),
            "/deprecations" => Some(Self::Deprecations),
            "/versions" => Some(Self::Versions),
            "/openapi.json" => Some(Self::OpenApi),
            _ => None,
        }
    }

    /// Whether the endpoint answers `method`; all of them are read-only.
    pub(crate) fn allows(self, method: &Method) -> bool {
        method == Method::GET || method == Method::HEAD
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matching_is_exact() {
        assert_eq!(Route::at("/me"), Some(Route::Me));
        assert_eq!(Route::at("/orders"), Some(Route::Orders));
        assert_eq!(Route::at("/events"), Some(Route::Events));
        assert_eq!(Route::at("/deprecations"), Some(Route::Deprecations));
        assert_eq!(Route::at("/versions"), Some(Route::Versions));
        assert_eq!(Route::at("/openapi.json"), Some(Route::OpenApi));
        for path in ["", "/", "/me/", "/ME", "/./me", "/%6de", "/orders/1"] {
            assert_eq!(Route::at(path), None, "{path}");
        }
        assert!(Route::Me.allows(&Method::HEAD) && !Route::Me.allows(&Method::POST));
    }
}
