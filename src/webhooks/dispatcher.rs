//! The delivery worker every replica runs: claims due deliveries from the outbox, posts them
//! signed, and records each attempt with what comes next.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, RETRY_AFTER, USER_AGENT};
use http::{HeaderValue, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::task::JoinSet;

use super::attempts::{
    cause, jitter, parse_retry_after, printable, transport_failure, unix_seconds,
};
use super::destination::CheckedResolver;
use super::in_flight::{InFlight, InFlightCounts};
use super::{
    sign, AttemptOutcome, ClaimRequest, Delivery, DeliveryConfig, DisableReason, Endpoint,
    FinishedAttempt, NextStep, WebhookOutbox,
};
use crate::log::ErrorChain;
use crate::metrics as names;
use crate::model::Timestamp;
use crate::store::StoreError;
use crate::supervise::caught;

/// The dispatcher's name in the log and `partner_api_background_task_panics_total`.
const DISPATCHER: &str = "webhook_dispatcher";

/// The longest a stopping worker waits for its attempts in flight.
const SHUTDOWN_DRAIN: Duration = Duration::from_secs(5);

/// The crate and its version, and what sends.
const USER_AGENT_VALUE: &str = concat!(
    env!("CARGO_PKG_NAME"),
    "/",
    env!("CARGO_PKG_VERSION"),
    " (webhooks)"
);

/// An endpoint that delivery disabled, as the hook of
/// [`Dispatcher::with_on_disabled`] hears of it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DisabledEndpoint {
    /// Its record (now disabled).
    pub endpoint: Endpoint,
    /// Why.
    pub reason: DisableReason,
}

type DisabledHook = Arc<dyn Fn(&DisabledEndpoint) + Send + Sync>;
type HttpsClient = Client<HttpsConnector<HttpConnector<CheckedResolver>>, Full<Bytes>>;

/// The delivery worker: run one per replica with [`run`](Self::run).
///
/// It asks the outbox for due deliveries whenever it has room (at most the configured
/// concurrency in flight, and per endpoint at most its share, so a slow or dead endpoint
/// holds a few slots and never the rest), posts each signed, and records the attempt. Its
/// HTTP client keeps connections per endpoint for reuse, follows no redirect, and connects
/// only to destinations the [`DestinationPolicy`](super::DestinationPolicy) allows.
pub struct Dispatcher {
    /// Shared with the attempts' tasks once it runs.
    inner: Inner,
}

struct Inner {
    outbox: Arc<dyn WebhookOutbox>,
    config: DeliveryConfig,
    client: HttpsClient,
    on_disabled: Option<DisabledHook>,
    /// Each endpoint's attempts in a row on this replica that timed out (no entry: its last
    /// attempt was answered, or it never timed out).
    hanging: Mutex<HashMap<String, u32>>,
}

/// After attempts that timed out, every this-many-th attempt to the endpoint gets the full
/// time-out again (the others the failing one): a receiver that is slow, not dead, can still
/// answer and end its streak.
const PROBE_EVERY: u32 = 4;
/// Endpoints whose streaks a replica keeps at most (a removed endpoint's stays until then).
const MAX_HANGING_ENDPOINTS: usize = 10_000;

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl Dispatcher {
    /// A worker over `outbox` (a store, or one shared as `Arc<S>` or `Arc<dyn WebhookOutbox>`),
    /// delivering as `config` says.
    pub fn new(outbox: impl WebhookOutbox + 'static, config: DeliveryConfig) -> Self {
        let outbox: Arc<dyn WebhookOutbox> = Arc::new(outbox);
        let mut http = HttpConnector::new_with_resolver(CheckedResolver {
            policy: Arc::new(config.destinations.clone()),
        });
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(config.timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            // ring's provider supports the default protocol versions: this cannot fail.
            .expect("ring supports TLS 1.2 and 1.3")
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .pool_max_idle_per_host(config.per_endpoint)
            .build(https);
        Self {
            inner: Inner {
                outbox,
                config,
                client,
                on_disabled: None,
                hanging: Mutex::default(),
            },
        }
    }

    /// Calls `hook` for every endpoint a delivery disables (it answered 410 Gone, or failed
    /// for the disable period), once, from the replica that disabled it: to tell its
    /// organization.
    #[must_use]
    pub fn with_on_disabled(
        mut self,
        hook: impl Fn(&DisabledEndpoint) + Send + Sync + 'static,
    ) -> Self {
        self.inner.on_disabled = Some(Arc::new(hook));
        self
    }

    /// Delivers until `shutdown` completes; then claims nothing more and waits (at most the
    /// attempt time-out, and at most 5 s) for the attempts in flight to be recorded. An
    /// attempt cut short keeps its lease and is taken over when the lease ends.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let inner = Arc::new(self.inner);
        let config = &inner.config;
        tokio::pin!(shutdown);
        let in_flight: Arc<Mutex<InFlightCounts>> = Arc::default();
        let mut tasks = JoinSet::new();
        let mut next_backlog = Instant::now();
        let mut claim_failures = 0_u32;
        loop {
            if Instant::now() >= next_backlog {
                next_backlog = Instant::now() + Duration::from_secs(5);
                caught(DISPATCHER, inner.report_backlog()).await;
            }
            let room = config.concurrency.saturating_sub(tasks.len());
            if room > 0 {
                let (busy, busy_organizations, failing) = {
                    let counts = in_flight.lock().unwrap_or_else(PoisonError::into_inner);
                    let copy = |map: &HashMap<String, usize>| -> Vec<(String, usize)> {
                        map.iter().map(|(id, count)| (id.clone(), *count)).collect()
                    };
                    (
                        copy(&counts.endpoints),
                        copy(&counts.organizations),
                        counts.failing,
                    )
                };
                // Fair shares (the argument is on `ClaimRequest`): each organization's part of
                // the slots shrinks as more are in flight or due, and failing endpoints hold at
                // most their share, so slots stay free for an organization whose endpoint
                // answers.
                let request = ClaimRequest::new(room, config.per_endpoint, config.lease())
                    .with_in_flight(busy)
                    .with_organizations(config.per_organization(), busy_organizations)
                    .with_failing_room(config.failing_share().saturating_sub(failing))
                    .with_slots(config.concurrency);
                // A claim that panicked (in a host's outbox, say) is a failed claim: the
                // loop goes on, and what it leased is taken over when the lease ends.
                let claimed = caught(DISPATCHER, inner.outbox.claim(&request))
                    .await
                    .unwrap_or_else(|| Err(StoreError::other("the claim panicked")));
                match claimed {
                    Ok(deliveries) => {
                        claim_failures = 0;
                        for delivery in deliveries {
                            let guard = InFlight::enter(&in_flight, &delivery);
                            let inner = Arc::clone(&inner);
                            tasks.spawn(async move {
                                let _guard = guard;
                                caught("webhook_delivery", inner.deliver(delivery)).await;
                            });
                        }
                    }
                    Err(error) => {
                        // One line per outage, not one per poll.
                        if claim_failures == 0 {
                            tracing::warn!(error = %ErrorChain(&error), "webhooks: claiming due deliveries failed; retrying");
                        }
                        claim_failures = claim_failures.saturating_add(1);
                    }
                }
            }
            tokio::select! {
                () = &mut shutdown => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {
                    while tasks.try_join_next().is_some() {}
                }
                () = tokio::time::sleep(config.poll_interval) => {}
            }
        }
        // A bounded wait, so a hanging endpoint cannot hold up the host's shutdown: an attempt
        // cut short keeps its lease, and another replica takes the delivery over.
        let drain = async { while tasks.join_next().await.is_some() {} };
        let _ = tokio::time::timeout(config.timeout.min(SHUTDOWN_DRAIN), drain).await;
    }
}

/// What an endpoint answered.
struct Answer {
    status: StatusCode,
    retry_after: Option<Duration>,
    body: String,
}

impl Inner {
    /// The time-out of the next attempt to `endpoint_id`: the failing one after attempts
    /// that timed out, but for every [`PROBE_EVERY`]-th.
    fn attempt_timeout(&self, endpoint_id: &str) -> Duration {
        let streak = self
            .hanging
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(endpoint_id)
            .copied()
            .unwrap_or(0);
        self.config
            .attempt_timeout(streak > 0 && streak % PROBE_EVERY != 0)
    }

    /// Counts an attempt to `endpoint_id` that timed out, or ends its streak.
    fn note_hanging(&self, endpoint_id: &str, timed_out: bool) {
        let mut hanging = self.hanging.lock().unwrap_or_else(PoisonError::into_inner);
        if timed_out {
            if hanging.len() >= MAX_HANGING_ENDPOINTS && !hanging.contains_key(endpoint_id) {
                hanging.clear();
            }
            *hanging.entry(endpoint_id.to_owned()).or_default() += 1;
        } else {
            hanging.remove(endpoint_id);
        }
    }

    async fn report_backlog(&self) {
        if let Ok(backlog) = self.outbox.backlog().await {
            ::metrics::gauge!(names::WEBHOOK_DUE).set(backlog.due as f64);
            ::metrics::gauge!(names::WEBHOOK_OLDEST_DUE)
                .set(backlog.oldest_due.unwrap_or_default().as_secs_f64());
        }
    }

    async fn deliver(&self, delivery: Delivery) {
        let attempted_at = Timestamp::now();
        let started = Instant::now();
        let answer = self.send(&delivery).await;
        let duration = started.elapsed();
        let attempt = self.judge(&delivery, answer, attempted_at, duration);
        ::metrics::counter!(names::WEBHOOK_DELIVERIES, "outcome" => attempt.outcome.as_str())
            .increment(1);
        ::metrics::histogram!(names::WEBHOOK_ATTEMPT_DURATION, "outcome" => attempt.outcome.as_str())
            .record(duration.as_secs_f64());
        let mut finished = None;
        for wait in [0, 200, 1000] {
            tokio::time::sleep(Duration::from_millis(wait)).await;
            match self.outbox.finish(&delivery, &attempt).await {
                Ok(finish) => {
                    finished = Some(finish);
                    break;
                }
                Err(error) => tracing::warn!(
                    error = %ErrorChain(&error),
                    endpoint_id = %delivery.endpoint_id,
                    message_id = %delivery.message_id,
                    "webhooks: recording an attempt failed"
                ),
            }
        }
        let Some(finish) = finished else {
            // Its lease ends and the delivery is due again: at least once, not lost.
            return;
        };
        if let Some(endpoint) = finish.disabled {
            // A host store that disables without being asked to: as failing.
            let reason = attempt.disable_reason().unwrap_or(DisableReason::Failing);
            ::metrics::counter!(names::WEBHOOK_ENDPOINTS_DISABLED, "reason" => reason.as_str())
                .increment(1);
            if let Some(hook) = &self.on_disabled {
                let disabled = DisabledEndpoint { endpoint, reason };
                if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook(&disabled)))
                    .is_err()
                {
                    tracing::error!("webhooks: the disabled-endpoint hook panicked");
                }
            }
        }
    }

    /// Posts the delivery, within the time-out.
    async fn send(&self, delivery: &Delivery) -> Result<Answer, String> {
        let uri: http::Uri = delivery
            .url
            .parse()
            .map_err(|_| cause::BAD_REQUEST.to_owned())?;
        self.config
            .destinations
            .check_url(&uri)
            .map_err(|blocked| blocked.to_string())?;
        let timestamp = unix_seconds(SystemTime::now());
        let signatures = delivery
            .secrets
            .iter()
            .map(|secret| sign(secret, &delivery.message_id, timestamp, &delivery.body))
            .collect::<Vec<_>>()
            .join(" ");
        let request = Request::post(uri)
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header(USER_AGENT, HeaderValue::from_static(USER_AGENT_VALUE))
            .header("webhook-id", &delivery.message_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signatures)
            .body(Full::new(delivery.body.clone()))
            .map_err(|_| cause::BAD_REQUEST.to_owned())?;
        // The status decides the outcome; the body is read only in the time that is left, and
        // a body cut short by the time-out does not turn a 2xx into a failure.
        // An endpoint whose attempts time out gets the shorter time-out (but for a probe now
        // and then): one that hangs holds its slot that long only.
        let timeout = self.attempt_timeout(&delivery.endpoint_id);
        let deadline = tokio::time::Instant::now() + timeout;
        let sent = tokio::time::timeout_at(deadline, self.client.request(request)).await;
        self.note_hanging(&delivery.endpoint_id, sent.is_err());
        let response = match sent {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(transport_failure(&error).to_owned()),
            Err(_) => return Err(format!("timed out after {} ms", timeout.as_millis())),
        };
        let status = response.status();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|value| value.to_str().ok())
            .and_then(parse_retry_after);
        let mut body = response.into_body();
        let mut kept = Vec::new();
        // Read up to the cap, then stop: a huge answer costs no more than that.
        while kept.len() < self.config.response_body_bytes {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        let room = self.config.response_body_bytes - kept.len();
                        kept.extend_from_slice(&data[..data.len().min(room)]);
                    }
                }
                Ok(Some(Err(_)) | None) | Err(_) => break,
            }
        }
        Ok(Answer {
            status,
            retry_after,
            body: printable(&String::from_utf8_lossy(&kept)),
        })
    }

    /// The attempt's record and what comes next.
    fn judge(
        &self,
        delivery: &Delivery,
        answer: Result<Answer, String>,
        attempted_at: Timestamp,
        duration: Duration,
    ) -> FinishedAttempt {
        let (outcome, retry_after) = match &answer {
            Ok(answer) if answer.status.is_success() => (AttemptOutcome::Succeeded, None),
            Ok(answer) => (AttemptOutcome::Failed, answer.retry_after),
            Err(_) => (AttemptOutcome::Failed, None),
        };
        let mut attempt = FinishedAttempt::new(outcome, attempted_at, duration);
        match answer {
            Ok(answer) => {
                attempt.response_status = Some(answer.status.as_u16());
                if answer.status.is_redirection() {
                    attempt.error = Some("redirects are not followed".to_owned());
                }
                attempt.response_body = (!answer.body.is_empty()).then_some(answer.body);
            }
            Err(error) => attempt.error = Some(error),
        }
        if outcome == AttemptOutcome::Succeeded {
            return attempt;
        }
        if attempt.response_status == Some(StatusCode::GONE.as_u16()) {
            attempt.next = NextStep::GiveUp;
            attempt.disable_endpoint = true;
            return attempt;
        }
        let index = usize::try_from(delivery.tries.saturating_sub(1)).unwrap_or(usize::MAX);
        attempt.next = match self.config.retry_schedule.get(index) {
            Some(wait) => {
                let mut wait = jitter(*wait);
                if let Some(asked) = retry_after {
                    wait = wait.max(asked.min(self.config.max_retry_after));
                }
                NextStep::RetryAt(Timestamp::now().saturating_add(wait))
            }
            None => NextStep::GiveUp,
        };
        let failing_since = delivery.failing_since.unwrap_or(attempted_at);
        attempt.disable_endpoint = Timestamp::now()
            .duration_since(failing_since)
            .is_some_and(|failing| failing >= self.config.disable_after);
        attempt
    }
}
