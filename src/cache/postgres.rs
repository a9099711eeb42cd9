//! The PostgreSQL source of change notifications (feature `postgres`): `LISTEN` on the
//! channels the crate's key triggers `NOTIFY`, and the orders' changes (the events feed's rows) read by
//! id, with a heartbeat that gives the caches their evidence.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgListener, PgNotification, PgPool};

use super::Notifications;
use crate::log::ErrorChain;

/// The channel on which the ids of keys are sent (comma-separated) when they are added,
/// revoked, expired, rolled, moved or deleted (`*`: any key may have changed).
pub const KEYS_CHANNEL: &str = "partner_api_keys";
/// The channel on which an organization's id may be sent when its orders change (`*`: any):
/// for a host's table with the `NOTIFY` trigger of earlier versions. The crate's orders
/// trigger writes each change's event instead, which the listener reads on every heartbeat.
pub const ORDERS_CHANNEL: &str = "partner_api_orders";
/// The channel on which a listener sends itself a heartbeat, to know what it has heard.
const HEARTBEAT_CHANNEL: &str = "partner_api_heartbeat";

/// How often the listener sends itself a heartbeat: in a quiet run the caches' evidence is
/// about this old, well within [`DEFAULT_MAX_EVIDENCE_AGE`](super::DEFAULT_MAX_EVIDENCE_AGE).
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);
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
/// runtime dropped) or stalls, they stop answering from memory by themselves. Outside a
/// Tokio runtime no task starts (the log says so), never a panic: the caches then never
/// answer from memory.
pub fn listen(pool: PgPool) -> Notifications {
    let hub = Notifications::new();
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(run(pool, hub.clone()))),
        Err(_) => tracing::warn!(
            "cache::postgres::listen outside a tokio runtime: no listener runs, and the caches \
             never answer from memory"
        ),
    }
    hub
}

/// Tells every replica's caches that anything may have changed (`NOTIFY` `*` on both
/// channels): for a change that bypassed the triggers (`session_replication_role = replica`,
/// a restore with `--disable-triggers`, `ALTER TABLE ... DISABLE TRIGGER`).
///
/// # Errors
///
/// When the database fails.
pub async fn invalidate_all(pool: &PgPool) -> Result<(), crate::store::StoreError> {
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
        // A panic while following is a lost connection like any other (the caches answer from
        // the database until the next one is followed).
        let followed = crate::supervise::caught("cache_listener", follow(&pool, &hub, &mut pause))
            .await
            .unwrap_or_else(|| Err("the listener panicked".to_owned()));
        match followed {
            Ok(()) => return,
            Err(err) => {
                tracing::trace!(target: super::JOURNAL, hub = hub.id(), error = %err, "listener lost");
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
    // The orders' changes are read from this snapshot on; once every write that was under way
    // at it has ended, what changed before is dropped and the caches answer again (`connected`,
    // on the heartbeat that finds it so).
    let mut orders = OrderLog::start(&mut listener).await?;
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
                    if let Some(sent) = batch.apply(hub, orders.applied_before) {
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
                let payload = format!("{token} {}", super::notifications::millis(sent));
                let send = sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(HEARTBEAT_CHANNEL)
                    .bind(&payload)
                    .execute(&mut listener);
                match tokio::time::timeout(HEARTBEAT_TIMEOUT, send).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(err)) => return Err(ErrorChain(&err).to_string()),
                    Err(_) => return Err("the heartbeat was not sent in time".into()),
                }
                // The orders' changes committed before `sent` are visible to the read now.
                match tokio::time::timeout(HEARTBEAT_TIMEOUT, orders.read(&mut listener, hub, sent)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(err)) => return Err(err),
                    Err(_) => return Err("the orders' changes were not read in time".into()),
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
    /// [`millis`](super::notifications::millis).
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
    /// before it in the batch, and so every key change committed before it was sent, is
    /// applied by then), no later than `orders_before`, the instant before which the orders'
    /// changes have been applied (none while it is 0). Returns the heartbeat's send instant.
    fn apply(self, hub: &Notifications, orders_before: u64) -> Option<Instant> {
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
        tracing::trace!(
            target: super::JOURNAL,
            hub = hub.id(),
            keys = self.keys.len(),
            organizations = self.organizations.len(),
            everything = self.everything,
            heartbeat = self.heartbeat,
            orders_before,
            "notifications applied"
        );
        let heartbeat = super::notifications::instant(self.heartbeat?)?;
        if let Some(evidence) = super::notifications::instant(self.heartbeat?.min(orders_before)) {
            hub.confirmed(evidence);
        }
        Some(heartbeat)
    }
}

/// The reader of the orders' changes: the rows of the events feed
/// (`partner_api_order_events`, one per change, written by the orders' trigger in the writer's
/// transaction), by id, through `partner_api_order_changes_after`.
///
/// **Invariant**: while `following`, every event with an id at or below `cursor` was
/// applied, or committed before the caches were last emptied. **Argument**: an event's id is
/// taken from the table's identity by an insert into the events table, which holds
/// `RowExclusiveLock` on it from before the id is taken until its transaction ends (a
/// subtransaction's lock passes to its parent when released, and goes with its events when
/// rolled back), and that already has its transaction id when it takes one (the triggers run
/// after the order's row was written; the capture locks its state row `FOR UPDATE` first), so
/// it is listed with its id. A read whose snapshot S sees the largest id M: an id taken after S was taken
/// is larger than every id taken before it, M's included; so an id at or below M that S does
/// not see was taken before S, by a transaction that held the lock from before S. After S, the
/// same read lists the transactions holding the lock (W): such a transaction is in W, or had
/// ended before the listing, and so before the next read's snapshot. Once a later read's
/// snapshot shows every transaction of W ended, that read (which asks from the cursor still
/// below them) saw what they all committed; only then does the cursor move to M. At the start,
/// the first read's M is the cursor at once, and the caches are emptied (`connected`) when
/// that read's W has ended: what committed at or below M in between is older than the
/// emptying. An event that retention deleted before a read saw it is in retention's
/// tombstones, which each read asks for too. Only the writers of this database's events table
/// are waited for: a transaction held open elsewhere (another database of the instance, a
/// host's job that writes no order) delays nothing. (A write of orders held open delays the
/// cursor, as it delays the start: the caches answer from the database meanwhile.)
///
/// **In the capture mode** (see `src/store/postgres/capture`) an order change has its event
/// only once the capture has materialized it, so the evidence of a heartbeat sent at T waits
/// until a read sees the materialized position at or past the log's insert position that a
/// read after T took (every change committed before T ends below it). The position is
/// recorded in the transaction that writes the events, so the read that sees it sees them.
struct OrderLog {
    /// Every event at or below it is applied (see the invariant).
    cursor: i64,
    /// The reads whose ids are not final yet, oldest first: the writers under way at them, and
    /// the largest event id they saw.
    waiting: VecDeque<(Vec<u64>, i64)>,
    /// Ids above `cursor` applied already (read again until the cursor passes them).
    applied: HashSet<i64>,
    /// Whether the first read's writes have all ended, and the caches were emptied since.
    following: bool,
    /// [`millis`](super::notifications::millis) of the instant before which every order change
    /// was applied: evidence for the orders as heartbeats are for the keys (0: none yet).
    applied_before: u64,
    /// In the capture mode, the heartbeats waiting for it, oldest first: when each was sent
    /// (as `millis`) and the log's insert position a read after it took.
    uncaptured: VecDeque<(u64, u64)>,
}

/// One read of `partner_api_order_changes_after`: its snapshot (`xmin:xmax:xip,...`), the
/// transaction ids of the writers of the events table after it, the largest event id it sees,
/// the changes after the cursor (`"id organization"`), the organizations of the events
/// retention deleted after it, the log's insert position, and the capture's materialized
/// position (`None`: the default mode).
type ChangesRead = (
    String,
    Vec<String>,
    Option<i64>,
    Vec<String>,
    Vec<String>,
    String,
    Option<String>,
);

const READ_CHANGES: &str =
    "SELECT snapshot, writers, newest, changes, pruned, wal_lsn, materialized_lsn \
     FROM partner_api_order_changes_after($1)";

impl OrderLog {
    async fn start(connection: &mut PgListener) -> Result<Self, String> {
        let (_, writers, newest, _, _, _, _): ChangesRead = sqlx::query_as(READ_CHANGES)
            .bind(None::<i64>)
            .fetch_one(&mut *connection)
            .await
            .map_err(|err| ErrorChain(&err).to_string())?;
        let cursor = newest.unwrap_or(0);
        Ok(Self {
            cursor,
            waiting: VecDeque::from([(parse_xids(&writers)?, cursor)]),
            applied: HashSet::new(),
            following: false,
            applied_before: 0,
            uncaptured: VecDeque::new(),
        })
    }

    /// Reads the changes after the cursor in one snapshot, tells the caches of the
    /// organizations of those not applied before (and of those retention deleted), and moves
    /// the cursor as far as the invariant allows; empties the caches when it first may follow.
    async fn read(
        &mut self,
        connection: &mut PgListener,
        hub: &Notifications,
        sent: Instant,
    ) -> Result<(), String> {
        let (snapshot, writers, _, changes, pruned, wal_lsn, materialized): ChangesRead =
            sqlx::query_as(READ_CHANGES)
                .bind(Some(self.cursor))
                .fetch_one(&mut *connection)
                .await
                .map_err(|err| ErrorChain(&err).to_string())?;
        let snapshot = Snapshot::parse(&snapshot)?;
        let mut organizations: HashSet<&str> = pruned.iter().map(String::as_str).collect();
        let mut newest = self.cursor;
        for change in &changes {
            let (id, organization_id) = change.split_once(' ').ok_or("a malformed change")?;
            let id: i64 = id.parse().map_err(|_| format!("not an event id: {id:?}"))?;
            newest = newest.max(id);
            if self.applied.insert(id) {
                organizations.insert(organization_id);
            }
        }
        for organization_id in organizations {
            hub.orders_changed(organization_id);
        }
        self.waiting.push_back((parse_xids(&writers)?, newest));
        while let Some((earlier_writers, earlier_newest)) = self.waiting.front() {
            if !earlier_writers
                .iter()
                .all(|&writer| snapshot.has_ended(writer))
            {
                break;
            }
            let earlier_newest = *earlier_newest;
            self.waiting.pop_front();
            self.cursor = self.cursor.max(earlier_newest);
            if !self.following {
                self.following = true;
                hub.connected();
            }
        }
        let cursor = self.cursor;
        self.applied.retain(|&id| id > cursor);
        if self.following {
            let sent = super::notifications::millis(sent);
            match materialized {
                None => {
                    self.uncaptured.clear();
                    self.applied_before = sent;
                }
                Some(materialized) => {
                    let materialized = parse_lsn(&materialized)?;
                    self.uncaptured.push_back((sent, parse_lsn(&wal_lsn)?));
                    while let Some(&(earlier_sent, position)) = self.uncaptured.front() {
                        if position > materialized {
                            break;
                        }
                        self.uncaptured.pop_front();
                        self.applied_before = self.applied_before.max(earlier_sent);
                    }
                }
            }
        }
        Ok(())
    }
}

/// A log position (`X/Y`, hexadecimal) as a number.
fn parse_lsn(text: &str) -> Result<u64, String> {
    crate::store::postgres::parse_lsn(text).ok_or_else(|| format!("not a log position: {text:?}"))
}

fn parse_xid(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("not a transaction id: {text:?}"))
}

fn parse_xids(texts: &[String]) -> Result<Vec<u64>, String> {
    texts.iter().map(|text| parse_xid(text)).collect()
}

/// What a read's snapshot says of the transactions: those below `xmin` had ended, those at or
/// past `xmax` had not begun, and of those between, the ones listed were under way.
struct Snapshot {
    xmin: u64,
    xmax: u64,
    running: Vec<u64>,
}

impl Snapshot {
    /// PostgreSQL's text form, `xmin:xmax:xip,xip,...`.
    fn parse(text: &str) -> Result<Self, String> {
        let malformed = || format!("not a snapshot: {text:?}");
        let mut parts = text.splitn(3, ':');
        let (Some(xmin), Some(xmax), Some(running)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(malformed());
        };
        Ok(Self {
            xmin: parse_xid(xmin)?,
            xmax: parse_xid(xmax)?,
            running: running
                .split(',')
                .filter(|xid| !xid.is_empty())
                .map(parse_xid)
                .collect::<Result<_, _>>()?,
        })
    }

    /// Whether the transaction `xid` had ended when the snapshot was taken.
    fn has_ended(&self, xid: u64) -> bool {
        xid < self.xmin || (xid < self.xmax && !self.running.contains(&xid))
    }
}

/// A number per listener of this process, to tell their heartbeats apart.
fn next_listener() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
