//! The endpoints of spec section 4, in one place: which paths exist, which methods they take,
//! and what each answers once the key is known.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Response, StatusCode};

use crate::auth::AuthFailure;
use crate::body::ApiBody;
use crate::key::KeyDigest;
use crate::model::EncodedOrder;
use crate::response::{self, ApiError, ME_CLOSE, ME_OPEN, ORDERS_CLOSE, ORDERS_OPEN};
use crate::service::Shared;
use crate::store::{ErrorChain, Principal, StoreError, StoreErrorKind};

/// The most orders one response holds (spec 4.2 rule 1, section 8).
pub const MAX_ORDERS: usize = 100;

/// An endpoint under the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Route {
    /// `GET /me` (spec 4.1).
    Me,
    /// `GET /orders` (spec 4.2).
    Orders,
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
            "/openapi.json" => Some(Self::OpenApi),
            _ => None,
        }
    }

    /// Whether the endpoint needs an API key.
    pub(crate) fn needs_key(self) -> bool {
        self != Self::OpenApi
    }

    /// Whether the endpoint answers `method`; all of them are read-only.
    pub(crate) fn allows(self, method: &Method) -> bool {
        method == Method::GET || method == Method::HEAD
    }
}

/// Answers an authenticated request for `route`: resolves the key, then reads what the
/// endpoint serves. Store failures are logged here and answered without their detail.
pub(crate) async fn respond(
    shared: Arc<Shared>,
    route: Route,
    digest: KeyDigest,
) -> Response<ApiBody> {
    let result = match shared.store_timeout {
        Some(timeout) => tokio::time::timeout(timeout, answer(&shared, route, digest))
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::unavailable(format!(
                    "no answer from the store within {timeout:?}"
                )))
            }),
        None => answer(&shared, route, digest).await,
    };
    result.unwrap_or_else(|err| {
        tracing::error!(
            kind = ?err.kind(),
            error = %ErrorChain(&err),
            "partner API store failed"
        );
        match err.kind() {
            StoreErrorKind::Unavailable => ApiError::Unavailable.into_response(),
            _ => ApiError::Internal.into_response(),
        }
    })
}

async fn answer(
    shared: &Shared,
    route: Route,
    digest: KeyDigest,
) -> Result<Response<ApiBody>, StoreError> {
    let Some(principal) = shared.keys.lookup(&digest).await? else {
        let failure = AuthFailure::UnknownKey;
        return Ok(response::unauthorized(
            failure,
            shared.challenges.for_failure(failure),
        ));
    };
    // The host's request span may declare this field (see the crate docs on logging).
    tracing::Span::current().record("organization_id", principal.organization.id.as_str());
    let body = match route {
        Route::Me => me(&principal)?,
        Route::Orders => {
            let orders = shared
                .orders
                .newest_orders(&principal.organization.id, MAX_ORDERS)
                .await?;
            orders_body(orders)
        }
        Route::OpenApi => shared.openapi.clone(),
    };
    Ok(response::json(StatusCode::OK, body))
}

/// The `GET /openapi.json` response: the bare document, which may be cached.
pub(crate) fn openapi(shared: &Shared) -> Response<ApiBody> {
    let mut response = response::json(StatusCode::OK, shared.openapi.clone());
    response.headers_mut().insert(
        http::header::CACHE_CONTROL,
        http::HeaderValue::from_static("public, max-age=300"),
    );
    response
}

fn me(principal: &Principal) -> Result<Bytes, StoreError> {
    let organization = &principal.organization;
    let mut body = Vec::with_capacity(
        ME_OPEN.len() + ME_CLOSE.len() + organization.id.len() + organization.name.len() + 24,
    );
    body.extend_from_slice(ME_OPEN);
    serde_json::to_writer(&mut body, organization).map_err(StoreError::other)?;
    body.extend_from_slice(ME_CLOSE);
    Ok(body.into())
}

/// The `GET /orders` body: the envelope around the orders' ready JSON. The bound and the
/// order are the service's promise, so they are enforced here whatever the store returned.
fn orders_body(mut orders: Vec<EncodedOrder>) -> Bytes {
    if !orders.is_sorted_by(|a, b| a.order().cmp_newest_first(b.order()).is_le()) {
        tracing::warn!("the order store returned orders out of newest-first order");
        orders.sort_by(|a, b| a.order().cmp_newest_first(b.order()));
    }
    orders.truncate(MAX_ORDERS);
    let length = ORDERS_OPEN.len()
        + ORDERS_CLOSE.len()
        + orders
            .iter()
            .map(|order| order.json().len() + 1)
            .sum::<usize>();
    let mut body = Vec::with_capacity(length);
    body.extend_from_slice(ORDERS_OPEN);
    for (index, order) in orders.iter().enumerate() {
        if index > 0 {
            body.push(b',');
        }
        body.extend_from_slice(order.json());
    }
    body.extend_from_slice(ORDERS_CLOSE);
    body.into()
}
