//! The PostgreSQL source of change notifications: `LISTEN` on the channels the crate's
//! triggers `NOTIFY` (feature `postgres`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgNotification, PgPool};

use super::Notifications;
use crate::log::ErrorChain;

/// The channel on which a key's id is sent when the key is added, revoked, expired, rolled,
/// moved or deleted (`*`: any key may have changed).
pub const KEYS_CHANNEL: &str = "partner_api_keys";
/// The channel on which an organization's id is sent when its orders change (`*`: any).
pub const ORDERS_CHANNEL: &str = "partner_api_orders";
/// The channel on which a listener sends itself a heartbeat, to know it still hears.
const HEARTBEAT_CHANNEL: &str = "partner_api_heartbeat";

/// How often the listener checks it still hears the database.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(250);
/// How long the listener may go without hearing its own heartbeat before it counts itself
/// disconnected: the longest a change can go unnoticed when the listening connection dies
/// without a word.
pub const HEARTBEAT_TIMEOUT: Duration = Duration::from_millis(750);

/// Starts following the change notifications of the database behind `pool`, on the current
/// Tokio runtime, and returns the hub to give the caches. The listener holds one connection
/// of its own; it reconnects by itself (the caches go to the database meanwhile) and ends
/// once no cache follows the hub any more.
///
/// # Panics
///
/// Outside a Tokio runtime.
pub fn listen(pool: PgPool) -> Notifications {
    let hub = Notifications::new();
    tokio::spawn(run(pool, hub.clone()));
    hub
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
    listener
        .listen_all([KEYS_CHANNEL, ORDERS_CHANNEL, HEARTBEAT_CHANNEL])
        .await
        .map_err(|err| ErrorChain(&err).to_string())?;
    // Listening from here on: what changed before is dropped, and the caches answer again.
    hub.connected();
    *pause = Duration::from_millis(50);
    tracing::info!("partner API cache listener connected");
    let token = format!("{}-{}", std::process::id(), next_listener());
    let started = Instant::now();
    let mut heard = started;
    let mut ticks = tokio::time::interval(HEARTBEAT_INTERVAL);
    loop {
        tokio::select! {
            // Notifications first: an own heartbeat already queued is heard before the check.
            biased;
            received = listener.try_recv() => match received {
                Ok(Some(notification)) => {
                    if notification.channel() == HEARTBEAT_CHANNEL {
                        if notification.payload() == token {
                            heard = Instant::now();
                        }
                    } else {
                        dispatch(hub, &notification);
                    }
                }
                Ok(None) => return Err("the listening connection was closed".into()),
                Err(err) => return Err(ErrorChain(&err).to_string()),
            },
            _ = ticks.tick() => {
                if Arc::strong_count(hub.shared()) <= 1 {
                    return Ok(());
                }
                if heard.elapsed() > HEARTBEAT_TIMEOUT && started.elapsed() > HEARTBEAT_TIMEOUT {
                    return Err("no heartbeat heard on the listening connection".into());
                }
                // Through the pool, not the listening connection: heard only if that one works.
                // Sent on a task of its own, so a slow pool never holds up the listening; a
                // heartbeat that is not heard in time counts as a lost connection all the same.
                let pool = pool.clone();
                let token = token.clone();
                tokio::spawn(async move {
                    let send = sqlx::query("SELECT pg_notify($1, $2)")
                        .bind(HEARTBEAT_CHANNEL)
                        .bind(&token)
                        .execute(&pool);
                    match tokio::time::timeout(HEARTBEAT_TIMEOUT, send).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(err)) => tracing::debug!(error = %ErrorChain(&err), "cache listener heartbeat not sent"),
                        Err(_) => tracing::debug!("cache listener heartbeat not sent in time"),
                    }
                });
            }
        }
    }
}

fn dispatch(hub: &Notifications, notification: &PgNotification) {
    let payload = notification.payload();
    match (notification.channel(), payload) {
        (_, "*") => hub.clear(),
        (KEYS_CHANNEL, key_id) => hub.key_changed(key_id),
        (ORDERS_CHANNEL, organization_id) => hub.orders_changed(organization_id),
        _ => {}
    }
}

/// A number per listener of this process, to tell their heartbeats apart.
fn next_listener() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
