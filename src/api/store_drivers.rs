//! The two drivers of a [`KeyedAnswer`]: [`answer_now`] asks the stores for their immediate answers
//! (`lookup_now`, `check_now`, `orders_now`), inside `call`, with no future, box or timer;
//! from the first question a store must wait for, [`answer_awaited`] asks with awaited answers
//! under the store timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use http::Response;

use crate::api::body::ApiBody;
use crate::api::config::Config;
use crate::api::deadline::Deadline;
use crate::api::keyed_answer::{store_failed, AfterReply, KeyedAnswer, StoreQuestion, StoreReply};
use crate::store::StoreError;
use crate::store::UsageOutcome;

/// The answer to a request with a well-formed key: ready, or still waiting for a store.
pub(crate) enum ReadyOrWaiting {
    /// Every store involved answered at once.
    Ready(Response<ApiBody>),
    /// A store must be waited for.
    Wait(Pin<Box<dyn Future<Output = Response<ApiBody>> + Send>>),
}

/// Drives `flow` with the stores' immediate answers, and hands it to [`answer_awaited`] at the
/// first question one of them must wait for.
pub(crate) fn answer_now(config: &Arc<Config>, mut flow: KeyedAnswer) -> ReadyOrWaiting {
    loop {
        let Some(reply) = reply_now(config, &flow.question()) else {
            return ReadyOrWaiting::Wait(Box::pin(answer_awaited(config.clone(), flow)));
        };
        match flow.advance(config, reply) {
            AfterReply::Done(response) => return ReadyOrWaiting::Ready(response),
            AfterReply::Throttled(response) => return slowed(config, response),
            AfterReply::Next(next) => flow = next,
        }
    }
}

/// The 429 of the failure throttle, answered after [`Config::auth_failure_delay`]: a client
/// past its budget waits before it can send the next made-up key on the connection, so a
/// flood spends little of the host's CPU on its refusals.
fn slowed(config: &Config, response: Response<ApiBody>) -> ReadyOrWaiting {
    if config.auth_failure_delay.is_zero() {
        return ReadyOrWaiting::Ready(response);
    }
    let delay = config.auth_failure_delay;
    ReadyOrWaiting::Wait(Box::pin(async move {
        tokio::time::sleep(delay).await;
        response
    }))
}

/// The store's immediate answer to `question`, if it has one; a failed one is counted (it
/// took no time to wait for).
fn reply_now(config: &Config, question: &StoreQuestion<'_>) -> Option<StoreReply> {
    let reply = match *question {
        StoreQuestion::Key(digest) => config.keys.lookup_now(digest).map(StoreReply::Key),
        StoreQuestion::KeyAtHand(digest) => Some(
            config
                .keys
                .lookup_now(digest)
                .map_or(StoreReply::NotAtHand, StoreReply::Key),
        ),
        // Asked right after memory had no answer: straight to the store.
        StoreQuestion::StoredKey(_) => None,
        StoreQuestion::Failures(budget) => config
            .auth_failure_limiter
            .as_ref()
            .and_then(|limiter| limiter.check_now(budget))
            .map(StoreReply::Limit),
        StoreQuestion::Limit(principal) => config
            .rate_limiter
            .as_ref()
            .and_then(|limiter| limiter.check_now(&principal.key_id))
            .map(StoreReply::Limit),
        StoreQuestion::Orders(organization_id, query) => config
            .orders
            .orders_now(organization_id, query)
            .map(StoreReply::Orders),
    }?;
    if let Some(err) = reply.error() {
        question.call().failed_at_once(err);
    }
    Some(reply)
}

/// Drives `flow` within the store timeout, from a question [`answer_now`] found no immediate
/// answer to: with the stores' immediate answers where they have them for the questions after
/// it, else awaited ones; each awaited call is timed, and counted when it fails or times out.
async fn answer_awaited(config: Arc<Config>, flow: KeyedAnswer) -> Response<ApiBody> {
    // The call under way, for the metrics when the deadline passes during it.
    let mut in_flight = None;
    // The usable key and route the request counts against, once known: a timeout from
    // there is that key's error.
    let mut usable_key = None;
    let answered = async {
        let mut flow = flow;
        // The first question was asked for an immediate answer already.
        let mut asked_now = true;
        loop {
            let question = flow.question();
            let now = if asked_now {
                None
            } else {
                reply_now(&config, &question)
            };
            asked_now = false;
            let reply = match now {
                Some(reply) => reply,
                None => {
                    let call = question.call();
                    if config.key_usage.is_some() {
                        usable_key = flow.usage_key();
                    }
                    let started = Instant::now();
                    in_flight = Some((call, started));
                    let reply = awaited_reply(&config, question).await;
                    in_flight = None;
                    call.finished(started.elapsed(), reply.error());
                    reply
                }
            };
            match flow.advance(&config, reply) {
                AfterReply::Done(response) => return response,
                AfterReply::Throttled(response) => {
                    tokio::time::sleep(config.auth_failure_delay).await;
                    return response;
                }
                AfterReply::Next(next) => flow = next,
            }
        }
    };
    match config.store_timeout {
        None => answered.await,
        Some(timeout) => Deadline::new(answered, timeout).await.unwrap_or_else(|()| {
            if let Some((call, started)) = in_flight {
                call.timed_out(started.elapsed());
            }
            if let (Some(recorder), Some((key_id, route))) = (&config.key_usage, &usable_key) {
                recorder.record(key_id, *route, UsageOutcome::Error);
            }
            let err =
                StoreError::unavailable(format!("no answer from the store within {timeout:?}"));
            store_failed(&config, err)
        }),
    }
}

/// The store's awaited answer to `question`.
async fn awaited_reply(config: &Config, question: StoreQuestion<'_>) -> StoreReply {
    match question {
        StoreQuestion::Key(digest) | StoreQuestion::StoredKey(digest) => {
            StoreReply::Key(config.keys.lookup(digest).await)
        }
        StoreQuestion::KeyAtHand(digest) => config
            .keys
            .lookup_now(digest)
            .map_or(StoreReply::NotAtHand, StoreReply::Key),
        StoreQuestion::Failures(budget) => match &config.auth_failure_limiter {
            Some(limiter) => StoreReply::Limit(limiter.check(budget).await),
            None => StoreReply::Limit(Err(StoreError::other("no failure limiter"))),
        },
        StoreQuestion::Limit(principal) => match &config.rate_limiter {
            Some(limiter) => StoreReply::Limit(limiter.check(&principal.key_id).await),
            None => StoreReply::Limit(Err(StoreError::other("no rate limiter"))),
        },
        StoreQuestion::Orders(organization_id, query) => {
            StoreReply::Orders(config.orders.orders(organization_id, query).await)
        }
    }
}
