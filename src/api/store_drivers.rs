//! The two drivers of the keyed flow's [`Ask`]s: [`answer_now`] asks the stores for their
//! immediate answers (`lookup_now`, `check_now`, `orders_now`, an events read kept at the
//! feed's `revision_now`), inside `call`, with no future,
//! box or timer; from the first question a store must wait for, [`answer_awaited`] asks with
//! awaited answers under the store timeout.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use http::Response;

use crate::api::body::ApiBody;
use crate::api::config::Config;
use crate::api::deadline::Deadline;
use crate::api::keyed_answer::{after_throttle, AfterReply, Ask};
use crate::api::response::keyed::store_failed;
use crate::store::deprecated_calls::period_start;
use crate::store::StoreError;
use crate::store::UsageOutcome;

/// The answer to a request with a well-formed key: ready, or still waiting for a store.
pub(crate) enum ReadyOrWaiting {
    /// Every store involved answered at once.
    Ready(Response<ApiBody>),
    /// A store must be waited for.
    Wait(Pin<Box<dyn Future<Output = Response<ApiBody>> + Send>>),
}

/// Drives the flow from `ask` with the stores' immediate answers, and hands it to
/// [`answer_awaited`] at the first question one of them must wait for.
pub(crate) fn answer_now(config: &Arc<Config>, mut ask: Ask) -> ReadyOrWaiting {
    loop {
        let after = match reply_now(config, ask) {
            Replied::Now(after) => after,
            Replied::Wait(waiting) => {
                return ReadyOrWaiting::Wait(Box::pin(answer_awaited(config.clone(), waiting)))
            }
        };
        match after {
            AfterReply::Done(response) => return ReadyOrWaiting::Ready(response),
            AfterReply::Throttled(response) => return slowed(config, response),
            AfterReply::Next(next) => ask = next,
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

/// What [`reply_now`] made of a question.
enum Replied {
    /// The store answered at once: the flow after its answer.
    Now(AfterReply),
    /// The store has no answer at hand: the question, to be asked with an awaited answer.
    Wait(Ask),
}

/// `ask` answered with its store's immediate answer, or `ask` back when the store has none
/// at hand; a failed immediate answer is counted (it took no time to wait for).
fn reply_now(config: &Config, ask: Ask) -> Replied {
    let call = ask.call();
    let counted = |failed: Option<&StoreError>| {
        if let Some(err) = failed {
            call.failed_at_once(err);
        }
    };
    match ask {
        // Asked right after memory had no answer: straight to the store.
        Ask::Key(key) if key.past_memory() => Replied::Wait(Ask::Key(key)),
        Ask::Key(key) => match config.keys.lookup_now(key.digest()) {
            Some(found) => {
                counted(found.as_ref().err());
                Replied::Now(key.answer(config, found))
            }
            None => Replied::Wait(Ask::Key(key)),
        },
        Ask::KeyAtHand(key) => {
            let at_hand = config.keys.lookup_now(key.digest());
            if let Some(found) = &at_hand {
                counted(found.as_ref().err());
            }
            Replied::Now(after_throttle(config, key.answer(config, at_hand)))
        }
        Ask::Failures(failures) => {
            let decided = config
                .auth_failure_limiter
                .as_ref()
                .and_then(|limiter| limiter.check_now(failures.budget()));
            match decided {
                Some(decided) => {
                    counted(decided.as_ref().err());
                    Replied::Now(after_throttle(config, failures.answer(config, decided)))
                }
                None => Replied::Wait(Ask::Failures(failures)),
            }
        }
        Ask::Limit(limit) => {
            let decided = config
                .rate_limiter
                .as_ref()
                .and_then(|limiter| limiter.check_now(limit.budget()));
            match decided {
                Some(decided) => {
                    counted(decided.as_ref().err());
                    Replied::Now(limit.answer(config, decided))
                }
                None => Replied::Wait(Ask::Limit(limit)),
            }
        }
        Ask::Orders(orders) => {
            match config
                .orders
                .orders_now(orders.organization_id(), orders.query())
            {
                Some(page) => {
                    counted(page.as_ref().err());
                    Replied::Now(orders.answer(config, page))
                }
                None => Replied::Wait(Ask::Orders(orders)),
            }
        }
        // A read answered before at the feed's revision now is answered again; any other
        // reads the feed.
        Ask::Events(mut events) => match events.answer_at_hand(config) {
            Some(after) => Replied::Now(after),
            None => Replied::Wait(Ask::Events(events)),
        },
        // Nor does a read of deprecated calls.
        Ask::Deprecations(asked) => Replied::Wait(Ask::Deprecations(asked)),
    }
}

/// Drives the flow within the store timeout, from an `ask` [`answer_now`] found no immediate
/// answer to: with the stores' immediate answers where they have them for the questions after
/// it, else awaited ones; each awaited call is timed, and counted when it fails or times out.
async fn answer_awaited(config: Arc<Config>, ask: Ask) -> Response<ApiBody> {
    // The call under way, for the metrics when the deadline passes during it.
    let mut in_flight = None;
    // The usable key and route the request counts against, once known: a timeout from
    // there is that key's error.
    let mut usable_key = None;
    let answered = async {
        let mut ask = ask;
        // The first question was asked for an immediate answer already; every later one is
        // asked for one first.
        let mut asked_now = true;
        loop {
            if !asked_now {
                match reply_now(&config, ask) {
                    Replied::Now(after) => {
                        ask = match next_or_done(&config, after).await {
                            Ok(next) => next,
                            Err(response) => return response,
                        };
                        continue;
                    }
                    Replied::Wait(waiting) => ask = waiting,
                }
            }
            asked_now = false;
            let call = ask.call();
            if config.key_usage.is_some() {
                usable_key = ask.usage_key();
            }
            let started = Instant::now();
            in_flight = Some((call, started));
            let after = awaited_reply(&config, ask, started).await;
            in_flight = None;
            ask = match next_or_done(&config, after).await {
                Ok(next) => next,
                Err(response) => return response,
            };
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

/// The flow's next question, or its response: the throttle's 429 after its delay.
async fn next_or_done(config: &Config, after: AfterReply) -> Result<Ask, Response<ApiBody>> {
    match after {
        AfterReply::Next(ask) => Ok(ask),
        AfterReply::Done(response) => Err(response),
        AfterReply::Throttled(response) => {
            tokio::time::sleep(config.auth_failure_delay).await;
            Err(response)
        }
    }
}

/// `ask` answered with its store's awaited answer; the call, asked at `started`, is timed
/// (and counted when it failed) before the answer is taken.
async fn awaited_reply(config: &Config, ask: Ask, started: Instant) -> AfterReply {
    let call = ask.call();
    let timed = |failed: Option<&StoreError>| call.finished(started.elapsed(), failed);
    match ask {
        Ask::Key(key) => {
            let found = config.keys.lookup(key.digest()).await;
            timed(found.as_ref().err());
            key.answer(config, found)
        }
        // Never waited for: the throttle's first question has an answer or none at once.
        Ask::KeyAtHand(key) => {
            let at_hand = config.keys.lookup_now(key.digest());
            timed(at_hand.as_ref().and_then(|found| found.as_ref().err()));
            after_throttle(config, key.answer(config, at_hand))
        }
        Ask::Failures(failures) => {
            let decided = match &config.auth_failure_limiter {
                Some(limiter) => limiter.check(failures.budget()).await,
                None => Err(StoreError::other("no failure limiter")),
            };
            timed(decided.as_ref().err());
            after_throttle(config, failures.answer(config, decided))
        }
        Ask::Limit(limit) => {
            let decided = match &config.rate_limiter {
                Some(limiter) => limiter.check(limit.budget()).await,
                None => Err(StoreError::other("no rate limiter")),
            };
            timed(decided.as_ref().err());
            limit.answer(config, decided)
        }
        Ask::Orders(orders) => {
            let page = config
                .orders
                .orders(orders.organization_id(), orders.query())
                .await;
            timed(page.as_ref().err());
            orders.answer(config, page)
        }
        Ask::Events(events) => {
            let page = match &config.events {
                Some(feed) => feed.events(events.organization_id(), events.query()).await,
                None => Err(StoreError::other("no events feed")),
            };
            timed(page.as_ref().err());
            events.answer(config, page)
        }
        Ask::Deprecations(asked) => {
            let calls = match &config.deprecated_calls {
                Some(recorder) => {
                    recorder
                        .store()
                        .deprecated_calls(
                            asked.organization_id(),
                            Some(asked.key_id()),
                            period_start(),
                        )
                        .await
                }
                None => Err(StoreError::other("no deprecated calls recorded")),
            };
            timed(calls.as_ref().err());
            asked.answer(config, calls)
        }
    }
}
