//! The request path of [`PartnerApi`]: from a request's method, path and headers to its
//! answer, ready at once or waiting for a store, and the two service traits that run it.

use super::*;

impl PartnerApi {
    /// Answers a request from its method, path and headers.
    fn dispatch<B>(&self, request: &Request<B>) -> ResponseFuture {
        let (method, uri, headers) = (request.method(), request.uri(), request.headers());
        let request_id = self.config.request_ids.then(|| {
            let id = request_id::request_id(headers);
            // Ids are plain ASCII: recorded bare, as `request_id=...`.
            record_in_request_span("request_id", || {
                tracing::field::display(id.to_str().unwrap_or_default())
            });
            id
        });
        let (route, concerned, answer) = self.answer(method, uri, headers, request.extensions());
        let notices = (!concerned.is_none()).then(|| self.config.deprecations.notices(concerned));
        // Built once, here: the future is as large as a response, and every move copies it.
        let state = match answer {
            ReadyOrWaiting::Ready(response) => {
                self.config
                    .responses
                    .count(method, route, response.status());
                State::Ready(Some(response))
            }
            // Counted when it is done.
            ReadyOrWaiting::Wait(future) => State::Pending {
                future,
                counted_as: Some((self.config.responses.clone(), method.clone(), route)),
            },
        };
        ResponseFuture {
            state,
            head: method == Method::HEAD,
            request_id,
            notices,
        }
    }

    /// The route the request matched, if any, the deprecations that concern it, and its
    /// answer.
    fn answer(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        extensions: &http::Extensions,
    ) -> (Option<Route>, Concerned, ReadyOrWaiting) {
        let config = &self.config;
        let not_found = || {
            let response = ApiError::NotFound.into_response();
            (None, Concerned::default(), ReadyOrWaiting::Ready(response))
        };
        let Some(route) = config.path_below_prefix(uri.path()).and_then(Route::at) else {
            return not_found();
        };
        // A host without a feed has no `/events`: as any unknown path, whatever the method.
        if route == Route::Events && config.events.is_none() {
            return not_found();
        }
        // Matched once: for the notices, an enforced sunset and the count of the call.
        let concerned = if config.deprecations.is_empty() {
            Concerned::default()
        } else {
            config.deprecations.concerning(route, uri.query())
        };
        let ready = |response| (Some(route), concerned, ReadyOrWaiting::Ready(response));
        if !route.allows(method) {
            return ready(ApiError::MethodNotAllowed.into_response());
        }
        let mut gone = None;
        if !concerned.is_none() {
            let today = crate::model::Timestamp::now().as_datetime().date_naive();
            gone = config.deprecations.gone(concerned, today);
            // With a key, its 410 comes once the key is known to be usable, so the call is
            // counted among the key's deprecated calls (after the sunset is when the admin
            // most needs to see who still calls); without one, at once.
            if let (Some(index), Err(_)) = (gone, bearer_token(headers)) {
                if let Some(deprecation) = config.deprecations.get(index) {
                    return ready(response::past_sunset(deprecation));
                }
            }
        }
        let version = config.versions.asked(headers);
        match route {
            Route::OpenApi => return ready(openapi_answer(config, uri, version)),
            Route::Me | Route::Orders | Route::Events | Route::Deprecations | Route::Versions => {}
        }
        // Only the digest goes on: the plaintext never enters a future or a store.
        let digest = match presented_key(headers) {
            Ok(digest) => digest,
            Err(failure) => return ready(unauthenticated(config, failure)),
        };
        let peer = mount_facts::peer(extensions, self.peer, &config.warned_of_no_peer);
        let client = config.trusted_proxies.client_addr(peer, headers);
        let path = || mount_facts::called_path(uri, extensions);
        let keyed_route = match route {
            Route::Orders => KeyedRoute::Orders(PageRequest::parse(uri.query()), path()),
            Route::Events => KeyedRoute::Events(EventsRequest::parse(uri.query()), path()),
            Route::Deprecations => KeyedRoute::Deprecations,
            Route::Versions => KeyedRoute::Versions,
            Route::Me | Route::OpenApi => KeyedRoute::Me,
        };
        let facts = RequestFacts {
            route: keyed_route,
            if_none_match: config
                .conditional_requests
                .then(|| IfNoneMatch::from_headers(headers))
                .flatten(),
            client,
            throttle_failures: client.is_some() && config.auth_failure_limiter.is_some(),
            concerned,
            gone,
            version,
        };
        let first = Ask::first(facts, digest);
        // A store's `_now` answer runs here, inside `call`: a panic in it is caught as one in
        // a future is.
        let answer = std::panic::catch_unwind(AssertUnwindSafe(|| {
            store_drivers::answer_now(config, first)
        }));
        match answer {
            Ok(answer) => (Some(route), concerned, answer),
            Err(_panic) => ready(handler_panicked()),
        }
    }
}

/// The answer of `GET /openapi.json`: the document of the version its `version` parameter
/// names (once), else its header's, else the newest; a 400 for a name the API does not offer,
/// a 404 for a version offered without a document (a host's own older version).
fn openapi_answer(config: &Config, uri: &Uri, header: AskedVersion) -> Response<ApiBody> {
    let mut named = form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .filter(|(name, _)| name == "version")
        .map(|(_, value)| value);
    let (asked, what) = match (named.next(), named.next()) {
        (Some(name), None) => (config.versions.named(&name), "query parameter version"),
        (Some(_), Some(_)) => (AskedVersion::Unknown, "query parameter version"),
        (None, _) => (header, ""),
    };
    let version = match asked {
        AskedVersion::Named(version) => version,
        AskedVersion::Pinned => config.versions.chain().newest(),
        AskedVersion::Unknown if what.is_empty() => {
            return response::unknown_version(config.versions.unknown_header(), &config.versions)
        }
        AskedVersion::Unknown => return response::unknown_version(what, &config.versions),
    };
    match config.openapi.at(version) {
        Some(document) => response::openapi(document),
        None => ApiError::NotFound.into_response(),
    }
}

impl<B> Service<Request<B>> for PartnerApi {
    type Response = Response<ApiBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        self.dispatch(&request)
    }
}

/// hyper's own service trait, so a hyper server can serve the API without an adapter:
/// `builder.serve_connection(io, api.clone())`. It answers exactly as the tower `Service`.
impl<B> hyper::service::Service<Request<B>> for PartnerApi {
    type Response = Response<ApiBody>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: Request<B>) -> Self::Future {
        self.dispatch(&request)
    }
}
