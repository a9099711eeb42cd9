//! What answering a request with a key needs from the request, owned so a store future can
//! keep it, and the counting of its answer in the key's usage.

use std::sync::Arc;

use http::uri::PathAndQuery;

use crate::api::client_address::ClientAddr;
use crate::api::conditional::IfNoneMatch;
use crate::api::config::Config;
use crate::api::deprecations::Concerned;
use crate::api::events_request::{BadEventsRequest, EventsRequest};
use crate::api::pagination::{BadPageRequest, PageRequest};
use crate::api::versioning::AskedVersion;
use crate::store::{KeyLookup, Principal, UsageOutcome, UsageRoute};

/// The route of a request with a key, with what it asks of its route.
pub(crate) enum KeyedRoute {
    /// `GET /me`.
    Me,
    /// `GET /orders`: the page its query string asks for (or why it is refused), and the
    /// path it came in on, which the next page's link names.
    Orders(Result<PageRequest, BadPageRequest>, PathAndQuery),
    /// `GET /events`: the part of the feed its query string asks for (or why it is
    /// refused), and the path it came in on, which the resuming link names.
    Events(Result<EventsRequest, BadEventsRequest>, PathAndQuery),
    /// `GET /deprecations`.
    Deprecations,
    /// `GET /versions`.
    Versions,
}

impl KeyedRoute {
    /// The route's path below the prefix.
    pub(crate) fn path(&self) -> &'static str {
        match self {
            Self::Me => "/me",
            Self::Orders(..) => "/orders",
            Self::Events(..) => "/events",
            Self::Deprecations => "/deprecations",
            Self::Versions => "/versions",
        }
    }

    /// The permission a key needs to call the route; `None` for those open to every usable
    /// key (`/me`, `/deprecations`, `/versions`; the OpenAPI document needs no key), so a
    /// restricted key can always confirm its setup and learn what it may do.
    pub(crate) fn permission(&self) -> Option<crate::key::Permission> {
        match self {
            Self::Orders(..) => Some(crate::key::Permission::Orders),
            Self::Events(..) => Some(crate::key::Permission::Events),
            Self::Me | Self::Deprecations | Self::Versions => None,
        }
    }

    /// The route its requests are counted under in a key's usage.
    pub(crate) fn usage_route(&self) -> UsageRoute {
        match self {
            Self::Me => UsageRoute::Me,
            Self::Orders(..) => UsageRoute::Orders,
            Self::Events(..) => UsageRoute::Events,
            // Counted as the other route that reads no data, until usage has a route of
            // its own for it.
            Self::Deprecations | Self::Versions => UsageRoute::Deprecations,
        }
    }
}

/// What answering needs from the request, owned so a store future can keep it.
pub(crate) struct RequestFacts {
    pub(crate) route: KeyedRoute,
    /// The request's `If-None-Match`, when it has one and conditional requests are on.
    pub(crate) if_none_match: Option<IfNoneMatch>,
    /// The client's address; `None` when the host passed no peer (no
    /// [`PeerAddr`](super::client_address::PeerAddr), no `PartnerApi::with_peer_addr`).
    pub(crate) client: Option<ClientAddr>,
    /// Whether the client's failed authentications are throttled (a failure limiter, and a
    /// client address).
    pub(crate) throttle_failures: bool,
    /// The deprecations that concern the request: counted once its key is usable.
    pub(crate) concerned: Concerned,
    /// The enforced deprecation past its sunset that the request is answered 410 for, once
    /// its key is known to be usable (by its place among the declared).
    pub(crate) gone: Option<usize>,
    /// The version the request's header asked for.
    pub(crate) version: AskedVersion,
}

impl RequestFacts {
    /// The name of the throttled client's budget, made only when the throttle is asked (a
    /// valid key answered from memory never needs it).
    pub(crate) fn failure_budget(&self) -> Box<str> {
        self.client
            .map_or_else(|| "".into(), ClientAddr::budget_name)
    }

    /// Whether `principal`'s key may be used from the client's address: any key without
    /// ranges; a restricted one only from a known address inside them (an unknown client,
    /// or a forwarding header that does not parse, is outside every range).
    pub(crate) fn allows(&self, principal: &Principal) -> bool {
        let allowed_ips = principal.allowed_ips();
        allowed_ips.is_any()
            || matches!(self.client, Some(ClientAddr::Known(address)) if allowed_ips.allows(address))
    }

    /// Counts a refused key's request in its usage, when the store said which key it was.
    pub(crate) fn count_refusal(&self, config: &Config, lookup: &KeyLookup) {
        let (key_id, outcome) = match lookup {
            KeyLookup::Revoked { key_id } => (key_id, UsageOutcome::Revoked),
            KeyLookup::Expired { key_id } => (key_id, UsageOutcome::Expired),
            KeyLookup::Unknown | KeyLookup::Valid(_) => return,
        };
        if let Some(key_id) = key_id {
            count_usage(config, self.route.usage_route(), key_id, outcome);
        }
    }
}

/// Counts one answered request of the key `key_id` on `route` in the key's usage, if it is
/// recorded.
pub(crate) fn count_usage(
    config: &Config,
    route: UsageRoute,
    key_id: &Arc<str>,
    outcome: UsageOutcome,
) {
    if let Some(recorder) = &config.key_usage {
        recorder.record(key_id, route, outcome);
    }
}
