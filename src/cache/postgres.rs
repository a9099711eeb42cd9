//! The PostgreSQL source of change notifications: `LISTEN` on the channels the crate's
//! triggers `NOTIFY` (feature `postgres`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgNotification, PgPool};

use super::Notifications;
use crate::log::ErrorChain;

/// The channel on which the ids of keys are sent (comma-separated) when they are added,
/// revoked, expired, rolled, moved or deleted (`*`: any key may have changed).
pub const KEYS_CHANNEL: &str = "partner_api_keys";
/// The channel on which an organization's id is sent when its orders change (`*`: any).
pub const ORDERS_CHANNEL: &str = "partner_api_orders";
/// The channel on which a listener sends itself a heartbeat, to know what it has heard.
const HEARTBEAT_CHANNEL: &str = "partner_api_heartbeat";

/// How often the listener sends itself a heartbeat: in a quiet run the caches' evidence is
/// about this old, well within [`DEFAULT_MAX_EVIDENCE_AGE`](super::DEFAULT_MAX_EVIDENCE_AGE).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(200);
/// How long the listener waits to hear a heartbeat before it takes its connection for dead and
/// connects again (the caches stopped answering from memory long before, when their evidence
/// aged out).
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(3);

/// Starts following the change notifications of the database behind `pool`, on the current
/// Tokio runtime, and returns the hub to give the caches. The listener holds one connection
/// of its own, outside the pool's count of request connections, and sends its heartbeats on
/// it, so a pool saturated by requests never starves it. It reconnects by itself (the caches go
/// to the database meanwhile) and ends once no cache follows the hub any more.
///
/// The caches answer from memory only with evidence from a heartbeat younger than the hub's
/// maximum age (see [`Notifications`] for the invariant): if this task stops (a panic, its
/// runtime dropped) or stalls, they stop answering from memory by themselves.
///
/// # Panics
///
/// Outside a Tokio runtime.
pub fn listen(pool: PgPool) -> Notifications {
    let hub = Notifications::new();
    tokio::spawn(run(pool, hub.clone()));
    hub
}

/// Tells every replica's caches that anything may have changed (`NOTIFY` `*` on both
/// channels): for a change that bypassed the triggers (`session_replication_role = replica`,
/// a restore with `--disable-triggers`, `ALTER TABLE ... DISABLE TRIGGER`).
///
/// # Errors
///
/// When the database fails.
pub async fn invalidate_all(pool: &PgPool) -> Result<(), crate::StoreError> {
    sqlx::query("SELECT pg_notify($1, '*'), pg_notify($2, '*')")
        .bind(KEYS_CHANNEL)
        .bind(ORDERS_CHANNEL)
        .execute(pool)
        .await
        .map_err(crate::store::postgres::store_error)?;
    Ok(())
}

/// Connects, listens, and dispatches until the connection is lost; then again, after a pause.
async fn run(pool: PgPool, hub: Notifications) {
    let mut pause = Duration::from_millis(50);
    loop {
        if Arc::strong_count(hub.shared()) <= 1 {
            return;
        }
        match follow(&pool, &hub, &mut pause).await {
            Ok(()) => return,
            Err(err) => {
                hub.disconnected();
                tracing::warn!(
                    error = %err,
                    "partner API cache listener disconnected; caches answer from the database until it reconnects"
                );
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(2));
    }
}

/// Listens on one connection until it fails (an error) or no cache follows the hub (`Ok`).
async fn follow(pool: &PgPool, hub: &Notifications, pause: &mut Duration) -> Result<(), String> {
    let mut listener = PgListener::connect_with(pool)
        .await
        .map_err(|err| ErrorChain(&err).to_string())?;
    // A lost connection is an error here, handled by connecting anew (and emptying the
    // caches), never a silent reconnect that would drop notifications.
    listener.eager_reconnect(false);
    // Named, so an operator (or a test) finds it in pg_stat_activity.
    sqlx::query("SET application_name = 'partner_api_cache_listener'")
        .execute(&mut listener)
        .await
        .map_err(|err| ErrorChain(&err).to_string())?;
    listener
        .listen_all([KEYS_CHANNEL, ORDERS_CHANNEL, HEARTBEAT_CHANNEL])
        .await
        .map_err(|err| ErrorChain(&err).to_string())?;
    // Listening from here on: what changed before is dropped, and the caches answer again.
    hub.connected();
    *pause = Duration::from_millis(50);
    tracing::info!("partner API cache listener connected");
    let token = format!("{}-{}", std::process::id(), next_listener());
    let mut heard = Instant::now();
    let mut ticks = tokio::time::interval(HEARTBEAT_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            received = listener.try_recv() => match received {
                Ok(Some(first)) => {
                    let mut batch = Batch::default();
                    batch.add(first, &token);
                    // What is already buffered is applied together: one pass for a burst.
                    while let Some(next) = listener.next_buffered() {
                        batch.add(next, &token);
                    }
                    if let Some(sent) = batch.apply(hub) {
                        heard = Instant::now();
                        crate::metrics::cache_notification_lag(heard.saturating_duration_since(sent));
                    }
                }
                Ok(None) => return Err("the listening connection was closed".into()),
                Err(err) => return Err(ErrorChain(&err).to_string()),
            },
            _ = ticks.tick() => {
                if Arc::strong_count(hub.shared()) <= 1 {
                    return Ok(());
                }
                if heard.elapsed() > HEARTBEAT_TIMEOUT {
                    return Err("no heartbeat heard on the listening connection".into());
                }
                // On the listening connection itself: heard only if it works, never waiting
                // for the request pool. The instant is taken before sending, so it precedes
                // the heartbeat's commit.
                let sent = Instant::now();
                let payload = format!("{token} {}", super::freshness::millis(sent));
                let send = sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(HEARTBEAT_CHANNEL)
                    .bind(&payload)
                    .execute(&mut listener);
                match tokio::time::timeout(HEARTBEAT_TIMEOUT, send).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(err)) => return Err(ErrorChain(&err).to_string()),
                    Err(_) => return Err("the heartbeat was not sent in time".into()),
                }
            }
        }
    }
}

/// Notifications received together, applied in one pass.
#[derive(Default)]
struct Batch {
    everything: bool,
    keys: Vec<String>,
    organizations: Vec<String>,
    /// The latest send instant among this listener's heartbeats in the batch, as
    /// [`millis`](super::freshness::millis).
    heartbeat: Option<u64>,
}

impl Batch {
    fn add(&mut self, notification: PgNotification, token: &str) {
        let payload = notification.payload();
        match notification.channel() {
            HEARTBEAT_CHANNEL => {
                let sent = payload
                    .strip_prefix(token)
                    .and_then(|rest| rest.strip_prefix(' '))
                    .and_then(|millis| millis.parse::<u64>().ok());
                if let Some(sent) = sent {
                    self.heartbeat = self.heartbeat.max(Some(sent));
                }
            }
            _ if payload == "*" => self.everything = true,
            KEYS_CHANNEL => self.keys.extend(payload.split(',').map(str::to_owned)),
            ORDERS_CHANNEL => self.organizations.push(payload.to_owned()),
            _ => {}
        }
    }

    /// Applies the changes, then the evidence of the batch's heartbeat (every notification
    /// before it in the batch, and so every change committed before it was sent, is applied
    /// by then). Returns the heartbeat's send instant.
    fn apply(self, hub: &Notifications) -> Option<Instant> {
        if self.everything {
            hub.clear();
        } else {
            for key_id in self.keys.iter().filter(|id| !id.is_empty()) {
                hub.key_changed(key_id);
            }
            for organization_id in &self.organizations {
                hub.orders_changed(organization_id);
            }
        }
        let sent = super::freshness::instant(self.heartbeat?)?;
        hub.confirmed(sent);
        Some(sent)
    }
}

/// A number per listener of this process, to tell their heartbeats apart.
fn next_listener() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
