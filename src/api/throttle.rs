//! The throttle of failed authentication, for a client whose address is known when a failure
//! limiter is set ([`PartnerApi::with_auth_failure_limiter`](crate::PartnerApi::with_auth_failure_limiter)):
//! a flood of made-up keys from one address never reaches the key store beyond its budget.
//!
//! 1. The key store is asked only for the answer it has at hand ([`AtHandAsk`]).
//! 2. A refusal from memory is charged to the client's budget ([`FailuresAsk`]): a 401 while
//!    the budget lasts, a 429 past it.
//! 3. With no answer at hand, a key this replica knows may be usable
//!    ([`KnownKeys`](crate::cache::KnownKeys)) is looked up whatever the budget, and a refusal
//!    charged afterwards ([`Charge::Known`]); any other key first takes one failure from the
//!    budget ([`FailuresAsk`], then [`Charge::Reserved`]), which a valid key gives back.
//!
//! Without the throttle, a key is looked up at once ([`Charge::Unthrottled`]). Each step
//! leaves the flow at a [`ThrottleStep`], which the keyed flow takes on from.

use http::Response;

use crate::api::auth::AuthFailure;
use crate::api::body::ApiBody;
use crate::api::config::Config;
use crate::api::request_facts::RequestFacts;
use crate::api::response::keyed::{throttled, unauthenticated};
use crate::key::KeyDigest;
use crate::metrics::AuthFailureReason;
use crate::rate_limit::{or_unlimited, RateLimitDecision};
use crate::store::{KeyLookup, StoreError};

/// Where the throttle leaves the flow.
pub(crate) enum ThrottleStep {
    /// The key store is to be asked about the key, with this charge.
    LookUp(RequestFacts, KeyDigest, Charge),
    /// The key store's answer at hand, to be taken as an unthrottled lookup's (a valid key,
    /// or the store's failure).
    Found(RequestFacts, KeyDigest, Result<KeyLookup, StoreError>),
    /// The failure limiter is to be asked.
    Failures(FailuresAsk),
    /// Refused: the 401.
    Refused(Response<ApiBody>),
    /// Past the client's budget: the 429, answered after the throttle's delay.
    Throttled(Response<ApiBody>),
}

/// How a key lookup stands with the client's budget of failures.
pub(crate) enum Charge {
    /// No throttle: a refusal is a 401.
    Unthrottled,
    /// One failure was taken from the budget (named here, when the limiter answered) before
    /// the store was asked: a valid key gives it back; a refusal is a 401.
    Reserved(Option<Box<str>>),
    /// A key the replica knows may be usable, looked up whatever the budget: a refusal is
    /// charged to the budget (named here) afterwards.
    Known(Box<str>),
}

impl Charge {
    /// Whether the store itself is asked, past its memory (which had no answer a moment ago).
    pub(crate) fn past_memory(&self) -> bool {
        match self {
            Self::Unthrottled => false,
            Self::Reserved(_) | Self::Known(_) => true,
        }
    }

    /// The key was valid: a failure taken beforehand is given back.
    pub(crate) fn valid(&self, config: &Config) {
        if let (Self::Reserved(Some(budget)), Some(limiter)) = (self, &config.auth_failure_limiter)
        {
            limiter.refund(budget);
        }
    }

    /// The key store refused the key (for `reason`).
    pub(crate) fn refused(
        self,
        config: &Config,
        facts: RequestFacts,
        digest: &KeyDigest,
        reason: AuthFailureReason,
    ) -> ThrottleStep {
        match self {
            Self::Known(budget) => {
                // Final: the next token with this digest is throttled before any lookup.
                if let Some(known) = &config.known_keys {
                    known.forget(digest);
                }
                ThrottleStep::Failures(FailuresAsk {
                    facts,
                    budget,
                    purpose: Purpose::Charge(reason),
                })
            }
            Self::Unthrottled | Self::Reserved(_) => refused(config, reason),
        }
    }
}

/// The key store's answer at hand for the key, never waited for.
pub(crate) struct AtHandAsk {
    facts: RequestFacts,
    digest: KeyDigest,
}

impl AtHandAsk {
    pub(crate) fn new(facts: RequestFacts, digest: KeyDigest) -> Self {
        Self { facts, digest }
    }

    /// The digest of the key asked about.
    pub(crate) fn digest(&self) -> &KeyDigest {
        &self.digest
    }

    /// Takes the key store's answer at hand, `None` when it has none.
    pub(crate) fn answer(
        self,
        config: &Config,
        at_hand: Option<Result<KeyLookup, StoreError>>,
    ) -> ThrottleStep {
        let Self { facts, digest } = self;
        let found = match at_hand {
            Some(found) => found,
            None => {
                let budget = facts.failure_budget();
                let known = config
                    .known_keys
                    .as_ref()
                    .is_some_and(|known| known.may_be_usable(&digest));
                return if known {
                    ThrottleStep::LookUp(facts, digest, Charge::Known(budget))
                } else {
                    ThrottleStep::Failures(FailuresAsk {
                        facts,
                        budget,
                        purpose: Purpose::Reserve(digest),
                    })
                };
            }
        };
        match found {
            Ok(lookup) if !lookup.is_valid() => {
                facts.count_refusal(config, &lookup);
                let budget = facts.failure_budget();
                ThrottleStep::Failures(FailuresAsk {
                    facts,
                    budget,
                    purpose: Purpose::Charge(refusal_reason(&lookup)),
                })
            }
            found => ThrottleStep::Found(facts, digest, found),
        }
    }
}

/// Why the failure limiter is asked.
enum Purpose {
    /// To take one failure before the key store is asked about the key.
    Reserve(KeyDigest),
    /// To charge a refusal already made.
    Charge(AuthFailureReason),
}

/// The failure limiter's decision for the client's budget.
pub(crate) struct FailuresAsk {
    facts: RequestFacts,
    budget: Box<str>,
    purpose: Purpose,
}

impl FailuresAsk {
    /// The name of the client's budget.
    pub(crate) fn budget(&self) -> &str {
        &self.budget
    }

    /// Takes the limiter's decision: past the budget, the throttle's 429; else on to the key
    /// store (a reservation), or the 401 of the refusal charged. A limiter that failed does
    /// not throttle.
    pub(crate) fn answer(
        self,
        config: &Config,
        decided: Result<RateLimitDecision, StoreError>,
    ) -> ThrottleStep {
        if let Ok(decision) = &decided {
            if !decision.is_allowed() {
                return ThrottleStep::Throttled(throttled(*decision));
            }
        }
        let Self {
            facts,
            budget,
            purpose,
        } = self;
        match purpose {
            Purpose::Reserve(digest) => {
                let reserved = or_unlimited(decided).map(|_| budget);
                ThrottleStep::LookUp(facts, digest, Charge::Reserved(reserved))
            }
            Purpose::Charge(reason) => refused(config, reason),
        }
    }
}

/// The 401 of a key the key store refused, for `reason`.
fn refused(config: &Config, reason: AuthFailureReason) -> ThrottleStep {
    ThrottleStep::Refused(unauthenticated(config, AuthFailure::Refused(reason)))
}

/// Why the key store refused a key it did not find valid.
pub(crate) fn refusal_reason(lookup: &KeyLookup) -> AuthFailureReason {
    match lookup {
        KeyLookup::Revoked { .. } => AuthFailureReason::Revoked,
        KeyLookup::Expired { .. } => AuthFailureReason::Expired,
        KeyLookup::Unknown | KeyLookup::Valid(_) => AuthFailureReason::Unknown,
    }
}
