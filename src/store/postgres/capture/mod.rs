//! The capture mode (opt-in): the order writes run no trigger of the crate's; their events
//! are built from the write-ahead log by logical decoding, which hands transactions over in
//! commit order.
//!
//! [`PgStore::start_order_capture`] creates the slot (plugin `test_decoding`, read through the
//! SQL slot functions: no extension and no publication to install) and then disables the
//! events' triggers; [`PgStore::stop_order_capture`] enables them again, holding the order
//! writes until the slot is drained, and drops it. One replica at a time reads the slot:
//! whichever holds the lease (a row of `partner_api_order_capture`) runs
//! [`OrderCapture::round`]. What each mode needs and costs: `docs::hosting`.
//!
//! **Invariant**: every order change committed at or before the recorded `materialized_lsn`
//! has its events, each once, whatever the mode it was written in. **Argument**:
//! - A round peeks at the slot (which does not move it), renders the events of each decoded
//!   transaction that ends above the recorded `materialized_lsn`, writes them, and records
//!   how far it got, in one transaction that first locks the lease's row (renewing the lease
//!   if this reader still holds it, writing nothing if another took it); only after that
//!   commit does it advance the slot. The row lock orders every reader's rounds, so each
//!   reads the position the last one recorded. A reader killed anywhere leaves the slot where
//!   the last commit was or before: the next reader decodes the same transactions again
//!   (decoding is deterministic) and skips those at or below the recorded position, whose
//!   events exist or were deleted since by retention. (The events are also keyed by (the
//!   transaction's commit position, the event's index in it) with `ON CONFLICT DO NOTHING`:
//!   a second guard, which alone would not do, as retention may have deleted the first copy.)
//! - A decoded transaction that also inserted into `partner_api_order_events` wrote its
//!   events through the trigger (the default mode, before the switch or after it): it is
//!   skipped. So switching either way loses and duplicates nothing: from the slot's creation
//!   on every transaction is decoded, and each one either ran the trigger or did not. The
//!   feed's order holds across a switch too: the switch on holds the writes while the
//!   triggers go, so every trigger's event precedes the capture's first; the switch back
//!   holds them until the capture has materialized everything before it, so every capture's
//!   event precedes the triggers' first.
//! - `materialized_lsn` is the last decoded commit's end, or, when a round decoded everything
//!   there was, the flush position taken before it (the decoding reads up to the flushed
//!   log): no committed change ends at or below it undecoded, and every transaction a round
//!   materialized ends at or below what it recorded (a commit's end is one of the decoded
//!   rows' positions), so "above the recorded position" is exactly "not materialized yet".
//!
//! The caches' listeners, in this mode, date their evidence by it (`src/cache/postgres.rs`).

mod decode;

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};
use sqlx::{PgPool, Postgres, Row, Transaction};

use self::decode::{Operation, RowChange};
use super::error::{is_lock_timeout, is_object_in_use, is_undefined_object};
use super::schema_map::{migrated_schema, shown_order, OrderField, OrdersMap};
use super::{store_error, PgStore};
use crate::log::ErrorChain;
use crate::store::{StoreError, StoreErrorKind};

/// The gauge of the log the slot holds unconfirmed: re-exported as
/// [`metrics::ORDER_CAPTURE_LAG_BYTES`](crate::metrics::ORDER_CAPTURE_LAG_BYTES).
pub(crate) const LAG_BYTES: &str = "partner_api_order_capture_lag_bytes";
/// The gauge of the time since the reader last caught up: re-exported as
/// [`metrics::ORDER_CAPTURE_LAG_SECONDS`](crate::metrics::ORDER_CAPTURE_LAG_SECONDS).
pub(crate) const LAG_SECONDS: &str = "partner_api_order_capture_lag_seconds";

/// The logical decoding plugin: shipped with PostgreSQL and offered by the managed services
/// that offer logical decoding at all.
const PLUGIN: &str = "test_decoding";

/// What a round of [`OrderCapture`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CaptureRound {
    /// Whether this reader held the lease and read the slot (nothing is done without the
    /// lease, nor in the default mode, nor while another session reads the slot that moment).
    pub held: bool,
    /// Transactions of order changes materialized (those whose trigger had written their
    /// events are not counted).
    pub transactions: u64,
    /// Events written.
    pub events: u64,
    /// Whether the round decoded everything there was.
    pub caught_up: bool,
}

/// The reader of the capture's slot. It guarantees that every order change committed at or
/// before the materialized position it records has its events, each once, whatever the mode it
/// was written in (the argument is in `src/store/postgres/capture/mod.rs`). Run
/// [`run`](Self::run) on every replica (one at a time reads; another takes over within the
/// lease when it dies), on a pool of a role that owns the crate's schema and has
/// `REPLICATION` (on RDS, `rds_replication`).
#[derive(Clone)]
pub struct OrderCapture {
    pool: PgPool,
    orders: Option<(u32, OrdersMap)>,
    holder: String,
    lease: Duration,
    batch: u32,
    lag_warning: Duration,
}

impl std::fmt::Debug for OrderCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderCapture")
            .field("holder", &self.holder)
            .field("lease", &self.lease)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Switches the order writes to the capture mode: checks the server (`wal_level =
    /// logical`, a role that may create replication slots), creates the slot, then, holding
    /// the order writes for a moment, disables the events' triggers of the crate's table and
    /// of every served table and logs their old rows whole (`REPLICA IDENTITY FULL`). Safe to
    /// run again. Run it as the schema's owner; run [`order_capture`](Self::order_capture)'s
    /// reader on a replica, or the feed stops growing.
    ///
    /// # Errors
    ///
    /// When the server is not set up for it, with a message naming the setting (the mode
    /// never falls back silently), or the database fails, or the order writes did not pause
    /// for 2 s in three tries ([`StoreErrorKind::Unavailable`]: run it again); the triggers
    /// stay as they were then.
    pub async fn start_order_capture(&self) -> Result<(), StoreError> {
        let pool = self.pool();
        self.order_capture().drop_retired_slot().await?;
        // A stop's slot still read after the drop's wait would be taken for this start's,
        // at the position it was left at, and dropped later as the retired one.
        let retired: Option<String> =
            sqlx::query_scalar("SELECT retired_slot FROM partner_api_order_capture")
                .fetch_one(pool)
                .await
                .map_err(store_error)?;
        if let Some(retired) = retired {
            return Err(StoreError::unavailable(format!(
                "the slot {retired:?} of the last stop is still being read; nothing changed: \
                 run the start again in a moment"
            )));
        }
        let (wal_level, database): (String, String) =
            sqlx::query_as("SELECT pg_catalog.current_setting('wal_level'), current_database()")
                .fetch_one(pool)
                .await
                .map_err(store_error)?;
        if wal_level != "logical" {
            return Err(StoreError::refusal(
                crate::store::StoreErrorKind::Unsupported,
                format!(
                    "the order capture needs the server setting wal_level = logical (it is {wal_level:?}): \
                     set it (on RDS and Aurora, the parameter rds.logical_replication = 1; on Cloud SQL, \
                     the flag cloudsql.logical_decoding = on) and restart the server"
                ),
            ));
        }
        let slot: Option<String> =
            sqlx::query_scalar("SELECT slot_name FROM partner_api_order_capture")
                .fetch_one(pool)
                .await
                .map_err(store_error)?;
        let slot = slot.unwrap_or_else(|| slot_name_for(&database));
        // Slot names are the server's: one of that name in another database is not ours.
        let owner: Option<Option<String>> = sqlx::query_scalar(
            "SELECT database::text FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
        )
        .bind(&slot)
        .fetch_optional(pool)
        .await
        .map_err(store_error)?;
        if let Some(owner) = &owner {
            if owner.as_deref() != Some(database.as_str()) {
                return Err(StoreError::refusal(
                    crate::store::StoreErrorKind::Conflict,
                    format!(
                        "the order capture's slot name {slot:?} is taken by another database's \
                         slot ({}): drop it, or rename this database",
                        owner.as_deref().unwrap_or("a physical slot")
                    ),
                ));
            }
        }
        if owner.is_none() {
            // In a transaction that wrote nothing (PostgreSQL refuses it elsewhere); the slot
            // waits for every transaction under way to end, up to the decoding's bound.
            let capture = self.order_capture();
            let mut creating = capture.decoding().await?;
            sqlx::query("SELECT pg_catalog.pg_create_logical_replication_slot($1, $2)")
                .bind(&slot)
                .bind(PLUGIN)
                .execute(&mut *creating)
                .await
                .map_err(|err| slot_refused(&err).unwrap_or_else(|| store_error(err)))?;
            creating.commit().await.map_err(store_error)?;
        }
        let switched = async {
            let (mut transaction, tables) = switch_transaction(pool, "DISABLE").await?;
            for table in &tables.full_identity_missing {
                // Locks out reads too, for a moment: only where it is not so already.
                sqlx::query(&format!("ALTER TABLE {table} REPLICA IDENTITY FULL"))
                    .execute(&mut *transaction)
                    .await
                    .map_err(|err| switch_lock_refused(err, table))?;
            }
            // Under the row's lock, which a failed start's drop of its slot takes too: the
            // slot is still there, and stays until this commits.
            let slot_kept: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots s \
                                WHERE s.slot_name = $1) \
                 FROM partner_api_order_capture FOR UPDATE",
            )
            .bind(&slot)
            .fetch_one(&mut *transaction)
            .await
            .map_err(store_error)?;
            if !slot_kept {
                return Err(StoreError::unavailable(format!(
                    "the slot {slot:?} was dropped meanwhile (by a start that failed at the same \
                     time); nothing changed: run the start again"
                )));
            }
            sqlx::query(
                "UPDATE partner_api_order_capture SET slot_name = $1, \
                     materialized_lsn = COALESCE(materialized_lsn, (SELECT s.confirmed_flush_lsn \
                         FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1)) \
                 WHERE slot_name IS NULL",
            )
            .bind(&slot)
            .execute(&mut *transaction)
            .await
            .map_err(store_error)?;
            transaction.commit().await.map_err(store_error)
        }
        .await;
        if switched.is_err() && owner.is_none() {
            // The slot this call made goes with its refusal.
            drop_unstarted_slot(pool, &slot).await;
        }
        switched
    }

    /// Switches the order writes back to the default mode: waits until the capture has
    /// caught up; then, holding the order writes, enables the events' triggers, waits until
    /// the capture has materialized every change written without them (reading the slot
    /// itself when no other replica does; both waits within `drain`), and commits; then drops
    /// the slot. The writes wait for the last drain (what they wrote during the first), so
    /// every event the triggers write afterwards follows the capture's last in the feed. Safe to run
    /// again, and in the default mode.
    ///
    /// # Errors
    ///
    /// When the database fails, or the capture did not catch up within `drain`, or the order
    /// writes did not pause for 2 s in three tries: nothing is changed then (the capture goes
    /// on).
    ///
    /// A lost slot (the server removed log it had not read, or it was dropped) is not
    /// drained: the changes after the capture's last position have no events, so every feed
    /// is fenced instead, in the same transaction (a reader resuming from any earlier event
    /// is answered 410 and starts again; nothing of the hole is served as if the feed were
    /// whole).
    pub async fn stop_order_capture(&self, drain: Duration) -> Result<(), StoreError> {
        let pool = self.pool();
        let capture = self.order_capture().with_holder("stop_order_capture");
        capture.drop_retired_slot().await?;
        if capture.mode().await?.is_none() {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + drain;
        // Caught up first, without holding anything: the writes then wait only for what they
        // wrote meanwhile (an open transaction that wrote also holds back every listener's
        // evidence, `docs::replicas`).
        if !capture.slot_lost().await? {
            let now: String =
                sqlx::query_scalar("SELECT pg_catalog.pg_current_wal_insert_lsn()::text")
                    .fetch_one(pool)
                    .await
                    .map_err(store_error)?;
            capture.drain_through(lsn(&now)?, deadline).await?;
        }
        let (mut transaction, _) = switch_transaction(pool, "ENABLE").await?;
        // The order writes are held: every one committed without the triggers ends below the
        // log's insert position now. The capture materializes through it (this transaction
        // holds no lock that its rounds take); or, its slot lost, the feeds are fenced.
        let through: String =
            sqlx::query_scalar("SELECT pg_catalog.pg_current_wal_insert_lsn()::text")
                .fetch_one(&mut *transaction)
                .await
                .map_err(store_error)?;
        let through = lsn(&through)?;
        let lost = capture.slot_lost().await?;
        if lost {
            fence_feeds(&mut transaction).await?;
            tracing::warn!(
                "partner API order capture: its slot was lost; every feed is fenced (a reader \
                 resuming from before now is answered 410 and starts again)"
            );
        }
        if !lost {
            capture.drain_through(through, deadline).await?;
        }
        execute(
            &mut transaction,
            "UPDATE partner_api_order_capture SET retired_slot = slot_name, slot_name = NULL, \
                 materialized_lsn = NULL, caught_up_at = NULL, lease_holder = NULL, lease_until = NULL",
        )
        .await?;
        transaction.commit().await.map_err(store_error)?;
        capture.drop_retired_slot().await?;
        tracing::info!("partner API order capture stopped: the triggers write the events");
        Ok(())
    }

    /// The reader of the capture's slot, over this store's pool and schema map.
    pub fn order_capture(&self) -> OrderCapture {
        let orders = self.statements.mapped.as_ref().and_then(|(map, resolved)| {
            Some((resolved.orders.as_ref()?.oid, map.orders()?.clone()))
        });
        OrderCapture {
            pool: self.pool().clone(),
            orders,
            holder: format!("{}-{}", hostname(), std::process::id()),
            lease: OrderCapture::DEFAULT_LEASE,
            batch: OrderCapture::DEFAULT_BATCH,
            lag_warning: OrderCapture::DEFAULT_LAG_WARNING,
        }
    }
}

impl OrderCapture {
    /// How long a reader's lease lasts unless renewed, by default.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(10);
    /// How many decoded changes a round reads at most (it ends on a transaction's end), by
    /// default.
    pub const DEFAULT_BATCH: u32 = 5_000;
    /// The lag past which the reader warns (at most once a minute), by default.
    pub const DEFAULT_LAG_WARNING: Duration = Duration::from_secs(60);

    /// Names this reader in the lease (default: the host's name and process id).
    #[must_use]
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// How long the lease lasts unless renewed: how soon another replica takes over when
    /// this one dies ([`DEFAULT_LEASE`](Self::DEFAULT_LEASE)).
    #[must_use]
    pub fn with_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(100));
        self
    }

    /// How many decoded changes a round reads at most ([`DEFAULT_BATCH`](Self::DEFAULT_BATCH)),
    /// 10 at least: each round's own two transactions (the lease, the position) are six rows
    /// that the next round decodes, which a smaller batch would never get past.
    #[must_use]
    pub fn with_batch(mut self, changes: u32) -> Self {
        self.batch = changes.max(10);
        self
    }

    /// The lag past which [`run`](Self::run) warns ([`DEFAULT_LAG_WARNING`](Self::DEFAULT_LAG_WARNING)).
    #[must_use]
    pub fn with_lag_warning(mut self, lag: Duration) -> Self {
        self.lag_warning = lag;
        self
    }

    /// The capture's slot, or `None` in the default mode.
    ///
    /// # Errors
    ///
    /// When the database fails.
    pub async fn mode(&self) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT slot_name FROM partner_api_order_capture")
            .fetch_one(&self.pool)
            .await
            .map_err(store_error)
    }

    /// Reads the slot round after round for as long as the future runs: a round as soon as
    /// the last one was full, else every 100 ms while this reader holds the lease, else a
    /// look a second (the default mode costs that); after an error, a pause of a second (an
    /// error logged at most once a minute). Publishes the lag as metrics
    /// ([`ORDER_CAPTURE_LAG_BYTES`](crate::metrics::ORDER_CAPTURE_LAG_BYTES),
    /// [`ORDER_CAPTURE_LAG_SECONDS`](crate::metrics::ORDER_CAPTURE_LAG_SECONDS)) and warns
    /// past [`with_lag_warning`](Self::with_lag_warning).
    pub async fn run(self) {
        let mut warned: Option<tokio::time::Instant> = None;
        loop {
            let round = crate::supervise::caught("order_capture", self.round()).await;
            let pause = match round {
                Some(Ok(round)) => {
                    if round.held {
                        self.report_lag(&mut warned).await;
                    }
                    if !round.held {
                        // The default mode, or another replica's lease: a look a second.
                        Duration::from_secs(1)
                    } else if round.caught_up {
                        Duration::from_millis(100)
                    } else {
                        Duration::ZERO
                    }
                }
                Some(Err(err)) => {
                    if warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                        tracing::error!(error = %ErrorChain(&err), "partner API order capture round failed");
                        warned = Some(tokio::time::Instant::now());
                    }
                    Duration::from_secs(1)
                }
                None => Duration::from_secs(1),
            };
            tokio::time::sleep(pause).await;
        }
    }

    async fn report_lag(&self, warned: &mut Option<tokio::time::Instant>) {
        let lag: Result<Option<(Option<i64>, Option<f64>)>, _> = sqlx::query_as(
            "SELECT (pg_catalog.pg_current_wal_insert_lsn() - s.confirmed_flush_lsn)::bigint, \
                    EXTRACT(EPOCH FROM pg_catalog.clock_timestamp() - c.caught_up_at)::float8 \
             FROM partner_api_order_capture c \
             JOIN pg_catalog.pg_replication_slots s ON s.slot_name = c.slot_name",
        )
        .fetch_optional(&self.pool)
        .await;
        let Ok(Some((bytes, seconds))) = lag else {
            return;
        };
        let (bytes, seconds) = (bytes.unwrap_or(0).max(0), seconds.unwrap_or(0.0).max(0.0));
        ::metrics::gauge!(LAG_BYTES).set(bytes as f64);
        ::metrics::gauge!(LAG_SECONDS).set(seconds);
        if seconds > self.lag_warning.as_secs_f64()
            && warned.is_none_or(|at| at.elapsed() >= Duration::from_secs(60))
        {
            tracing::warn!(
                lag_bytes = bytes,
                lag_seconds = seconds,
                "partner API order capture is behind: the feed, the webhooks and the caches wait for it, \
                 and the server keeps the log it has not read (bound it with max_slot_wal_keep_size)"
            );
            *warned = Some(tokio::time::Instant::now());
        }
    }

    /// One round: takes or renews the lease; decodes up to the batch's size; writes the
    /// events of the order changes whose trigger did not; records how far it got; advances
    /// the slot. In the default mode, drops a slot a stop left.
    ///
    /// # Errors
    ///
    /// When the database fails, or the slot is lost (the log it needed was removed: the
    /// error says how to start again).
    pub async fn round(&self) -> Result<CaptureRound, StoreError> {
        let mut done = CaptureRound::default();
        // The lease's commit waits for the log's flush whatever the session's setting: the
        // decoding reads the flushed log only, and every change committed before the round
        // is flushed with it.
        let mut leasing = self.pool.begin().await.map_err(store_error)?;
        execute(&mut leasing, "SET LOCAL synchronous_commit = on").await?;
        let lease: Option<String> = sqlx::query_scalar(
            "UPDATE partner_api_order_capture \
             SET lease_holder = $1, \
                 lease_until = pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => $2) \
             WHERE slot_name IS NOT NULL \
               AND (lease_holder IS NULL OR lease_holder = $1 \
                    OR lease_until < pg_catalog.clock_timestamp()) \
             RETURNING slot_name",
        )
        .bind(&self.holder)
        .bind(self.lease.as_secs_f64())
        .fetch_optional(&mut *leasing)
        .await
        .map_err(store_error)?;
        leasing.commit().await.map_err(store_error)?;
        let Some(slot) = lease else {
            self.drop_retired_slot().await?;
            return Ok(done);
        };
        done.held = true;
        if let Some(why) = self.lost_reason(&slot).await? {
            return Err(lost(&slot, why));
        }
        let tables = self.tables().await?;
        let flushed: String =
            sqlx::query_scalar("SELECT pg_catalog.pg_current_wal_flush_lsn()::text")
                .fetch_one(&self.pool)
                .await
                .map_err(store_error)?;
        let Some(decoded) = self.peek(&slot, &tables).await? else {
            return Ok(CaptureRound::default());
        };
        done.caught_up = decoded.changes < u64::from(self.batch);
        let through = match (&decoded.end, done.caught_up) {
            (Some(end), false) => end.clone(),
            (Some(end), true) if lsn(end)? > lsn(&flushed)? => end.clone(),
            _ if done.caught_up => flushed,
            _ => return Ok(done),
        };
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        // The row lock gives the transaction its id before it takes any event id, as the
        // caches' reader of the events requires (see `OrderLog` in src/cache/postgres.rs),
        // and orders the rounds of every reader: each sees the position the last one
        // recorded. The holder is checked here, not the lease's end, and the lease renewed
        // with the position: a round slower than the lease (a long decoding on loaded cores)
        // still writes what it decoded, unless another reader took the lease meanwhile.
        let held: Option<(Option<bool>, Option<String>)> = sqlx::query_as(
            "SELECT lease_holder = $1, materialized_lsn::text FROM partner_api_order_capture \
             WHERE slot_name IS NOT NULL FOR UPDATE",
        )
        .bind(&self.holder)
        .fetch_optional(&mut *transaction)
        .await
        .map_err(store_error)?;
        let Some((Some(true), recorded)) = held else {
            // Another reader took over: it writes what this one would have.
            return Ok(CaptureRound::default());
        };
        let recorded = recorded.as_deref().map(lsn).transpose()?.unwrap_or(0);
        // Before anything is rendered: a reader ahead of its database's migrations would take
        // every snapshot for an unshowable order, and the slot would move past them for good.
        let schema = migrated_schema(&mut transaction).await?;
        // The map's expressions are evaluated as the triggers evaluate them.
        execute(
            &mut transaction,
            &format!(
                "SET LOCAL search_path TO {}",
                super::schema_map::EXPRESSION_SEARCH_PATH
            ),
        )
        .await?;
        // A transaction that ends at or below the recorded position has its events already
        // (a reader killed between its commit and the slot's advance left the slot behind
        // them); retention may have deleted them since, so the events' own key cannot be
        // what tells.
        let mut pending = Vec::with_capacity(decoded.transactions.len());
        for committed in &decoded.transactions {
            if !committed.wrote_events && lsn(&committed.commit_lsn)? > recorded {
                pending.push(committed);
            }
        }
        let materialized = pending;
        let changes: Vec<&RowChange> = materialized
            .iter()
            .flat_map(|committed| &committed.changes)
            .filter(|change| tables.orders.contains_key(&change.table))
            .collect();
        let mut rendered = render_all(&mut transaction, &tables, &shown_order(&schema), &changes)
            .await?
            .into_iter();
        let mut events = Vec::new();
        for committed in materialized {
            let before = events.len();
            let mut index = 0;
            for change in committed
                .changes
                .iter()
                .filter(|change| tables.orders.contains_key(&change.table))
            {
                let rendered = rendered
                    .next()
                    .ok_or_else(|| StoreError::other("a change was not rendered"))?;
                events_of(committed, change, &rendered, &mut index, &mut events);
            }
            if events.len() > before {
                done.transactions += 1;
            }
        }
        if !events.is_empty() {
            let written = sqlx::query(&format!(
                "INSERT INTO {schema}.partner_api_order_events \
                     (organization_id, change, order_id, order_row, previous_providers, created_at, \
                      captured_lsn, captured_index) \
                 SELECT x.organization_id, x.change, x.order_id, x.order_row, x.previous_providers, \
                        x.created_at::timestamptz, x.lsn::pg_lsn, x.index \
                 FROM pg_catalog.jsonb_to_recordset($1) AS x(ordinal integer, organization_id text, \
                     change text, order_id text, order_row jsonb, previous_providers jsonb, \
                     created_at text, lsn text, index integer) \
                 ORDER BY x.ordinal \
                 ON CONFLICT (captured_lsn, captured_index) WHERE captured_lsn IS NOT NULL DO NOTHING"
            ))
            .bind(Value::Array(events))
            .execute(&mut *transaction)
            .await
            .map_err(store_error)?;
            done.events = written.rows_affected();
        }
        sqlx::query(&format!(
            "UPDATE {schema}.partner_api_order_capture \
             SET materialized_lsn = GREATEST(materialized_lsn, $1::pg_lsn), \
                 caught_up_at = CASE WHEN $2 THEN pg_catalog.clock_timestamp() ELSE caught_up_at END, \
                 lease_until = pg_catalog.clock_timestamp() + pg_catalog.make_interval(secs => $3)"
        ))
        .bind(&through)
        .bind(done.caught_up)
        .bind(self.lease.as_secs_f64())
        .execute(&mut *transaction)
        .await
        .map_err(store_error)?;
        transaction.commit().await.map_err(store_error)?;
        if let Some(end) = &decoded.end {
            // Only after the commit: a reader killed before it decodes these again. (Moving
            // a logical slot decodes too.)
            let mut advancing = self.decoding().await?;
            let advanced = sqlx::query(
                "SELECT pg_catalog.pg_replication_slot_advance(s.slot_name, $2::pg_lsn) \
                 FROM pg_catalog.pg_replication_slots s \
                 WHERE s.slot_name = $1 AND s.confirmed_flush_lsn < $2::pg_lsn",
            )
            .bind(&slot)
            .bind(end)
            .execute(&mut *advancing)
            .await;
            match advanced {
                Ok(_) => advancing.commit().await.map_err(store_error)?,
                // Read elsewhere this moment: the next round decodes these again, and writes
                // nothing twice.
                Err(err) if is_object_in_use(&err) => {}
                Err(err) => return Err(store_error(err)),
            }
        }
        Ok(done)
    }

    /// A transaction for the slot functions: decoding reads the whole server's log from the
    /// slot's restart position, which may take longer than a request's statement; bounded
    /// all the same.
    async fn decoding(&self) -> Result<Transaction<'static, Postgres>, StoreError> {
        let mut transaction = self.pool.begin().await.map_err(store_error)?;
        execute(&mut transaction, "SET LOCAL statement_timeout = '60s'").await?;
        Ok(transaction)
    }

    /// Reads the slot (when this reader holds the lease; another's reads meanwhile) until
    /// the capture has materialized every change below `through`, or fails at `deadline`.
    async fn drain_through(
        &self,
        through: u64,
        deadline: tokio::time::Instant,
    ) -> Result<(), StoreError> {
        loop {
            let round = self.round().await?;
            let materialized: Option<String> =
                sqlx::query_scalar("SELECT materialized_lsn::text FROM partner_api_order_capture")
                    .fetch_one(&self.pool)
                    .await
                    .map_err(store_error)?;
            if materialized.as_deref().map(lsn).transpose()? >= Some(through) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::unavailable(
                    "the order capture did not catch up in time to stop; it goes on",
                ));
            }
            if round.caught_up || !round.held {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    /// Whether the capture's slot is lost: gone, or its log removed by the server.
    async fn slot_lost(&self) -> Result<bool, StoreError> {
        match self.mode().await? {
            Some(slot) => Ok(self.lost_reason(&slot).await?.is_some()),
            None => Ok(false),
        }
    }

    /// Why `slot` is lost, or `None` while the capture can read it.
    async fn lost_reason(&self, slot: &str) -> Result<Option<&'static str>, StoreError> {
        let status: Option<Option<String>> = sqlx::query_scalar(
            "SELECT wal_status FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
        )
        .bind(slot)
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(match status {
            None => Some("it does not exist"),
            Some(Some(status)) if status == "lost" => Some("the server removed the log it needed"),
            Some(_) => None,
        })
    }

    /// Drops the slot a stop left (its commit came first, so the slot is no longer read).
    async fn drop_retired_slot(&self) -> Result<(), StoreError> {
        let retired: Option<String> =
            sqlx::query_scalar("SELECT retired_slot FROM partner_api_order_capture")
                .fetch_one(&self.pool)
                .await
                .map_err(store_error)?;
        let Some(slot) = retired else { return Ok(()) };
        // A reader's round that began before the stop's commit may still be reading it (for
        // a moment: its next round sees the default mode); another caller may drop it first.
        let mut tries = 0;
        loop {
            let dropped = sqlx::query(
                "SELECT pg_catalog.pg_drop_replication_slot(slot_name) \
                 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
            )
            .bind(&slot)
            .execute(&self.pool)
            .await;
            match dropped {
                Ok(_) => break,
                Err(err) if is_undefined_object(&err) => break,
                Err(err) if is_object_in_use(&err) && tries < 50 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // Still read after 5 s: the next round (any replica's) drops it.
                Err(err) if is_object_in_use(&err) => return Ok(()),
                Err(err) => return Err(store_error(err)),
            }
        }
        sqlx::query(
            "UPDATE partner_api_order_capture SET retired_slot = NULL WHERE retired_slot = $1",
        )
        .bind(&slot)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    /// The served tables (the crate's and those registered), as `test_decoding` names them,
    /// each with the map to read its rows through; and the events table's name.
    async fn tables(&self) -> Result<Tables, StoreError> {
        let (names, oids, events): (Vec<String>, Vec<i64>, String) = sqlx::query_as(
            "SELECT ARRAY(SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) \
                          FROM pg_catalog.pg_class c \
                          JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                          WHERE c.oid = 'partner_orders'::regclass \
                             OR c.oid IN (SELECT t.relid FROM partner_api_order_tables t) \
                          ORDER BY c.oid), \
                    ARRAY(SELECT c.oid::bigint FROM pg_catalog.pg_class c \
                          WHERE c.oid = 'partner_orders'::regclass \
                             OR c.oid IN (SELECT t.relid FROM partner_api_order_tables t) \
                          ORDER BY c.oid), \
                    pg_catalog.format('%I.%I', current_schema(), 'partner_api_order_events')",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(store_error)?;
        let orders = names
            .into_iter()
            .zip(oids)
            .map(|(name, oid)| {
                let map = match &self.orders {
                    Some((mapped, map)) if i64::from(*mapped) == oid => map.clone(),
                    _ => OrdersMap::new(name.clone()),
                };
                (name, map)
            })
            .collect();
        Ok(Tables { orders, events })
    }

    /// The decoded transactions that touched a served table or the events table, from the
    /// slot's position, up to the batch's size (whole transactions).
    async fn peek(&self, slot: &str, tables: &Tables) -> Result<Option<Decoded>, StoreError> {
        let prefixes: Vec<String> = tables
            .orders
            .keys()
            .chain(std::iter::once(&tables.events))
            .map(|name| format!("table {name}: "))
            .collect();
        let mut reading = self.decoding().await?;
        let rows = sqlx::query(
            "WITH decoded AS MATERIALIZED ( \
                 SELECT d.lsn, d.xid::text AS xid, d.data, d.n \
                 FROM pg_catalog.pg_logical_slot_peek_changes($1, NULL, $2, \
                     'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1') \
                     WITH ORDINALITY AS d(lsn, xid, data, n)), \
             ours AS ( \
                 SELECT d.* FROM decoded d \
                 WHERE EXISTS (SELECT 1 FROM pg_catalog.unnest($3::text[]) AS p(prefix) \
                               WHERE pg_catalog.starts_with(d.data, p.prefix))) \
             SELECT o.n, o.lsn::text AS lsn, o.xid, o.data FROM ours o \
             UNION ALL \
             SELECT d.n, d.lsn::text, d.xid, d.data FROM decoded d \
             WHERE pg_catalog.starts_with(d.data, 'COMMIT ') AND d.xid IN (SELECT o.xid FROM ours o) \
             UNION ALL \
             SELECT NULL, pg_catalog.max(d.lsn)::text, NULL, pg_catalog.count(*)::text FROM decoded d \
             ORDER BY 1 NULLS LAST",
        )
        .bind(slot)
        .bind(i32::try_from(self.batch).unwrap_or(i32::MAX))
        .bind(&prefixes)
        .fetch_all(&mut *reading)
        .await;
        let rows = match rows {
            Ok(rows) => rows,
            // Another session reads the slot this moment (a killed reader's query running to
            // its end on the server, a stop's drain): this round reads nothing.
            Err(err) if is_object_in_use(&err) => return Ok(None),
            Err(err) => return Err(slot_refused(&err).unwrap_or_else(|| store_error(err))),
        };
        reading.commit().await.map_err(store_error)?;
        let mut decoded = Decoded::default();
        let mut open: HashMap<String, Committed> = HashMap::new();
        let events_prefix = format!("table {}: ", tables.events);
        for row in rows {
            let ordinal: Option<i64> = row.try_get("n").map_err(store_error)?;
            let position: Option<String> = row.try_get("lsn").map_err(store_error)?;
            let data: Option<String> = row.try_get("data").map_err(store_error)?;
            let Some(_) = ordinal else {
                decoded.end = position;
                decoded.changes = data.and_then(|count| count.parse().ok()).unwrap_or(0);
                continue;
            };
            let xid: String = row
                .try_get::<Option<String>, _>("xid")
                .map_err(store_error)?
                .unwrap_or_default();
            let data = data.unwrap_or_default();
            let position = position.unwrap_or_default();
            if let Some(commit) = data.strip_prefix("COMMIT ") {
                let mut committed = open.remove(&xid).unwrap_or_default();
                committed.commit_lsn = position;
                committed.committed_at = commit
                    .split_once("(at ")
                    .and_then(|(_, at)| at.strip_suffix(')'))
                    .unwrap_or_default()
                    .to_owned();
                decoded.transactions.push(committed);
                continue;
            }
            let pending = open.entry(xid).or_default();
            if data.starts_with(&events_prefix) {
                pending.wrote_events = true;
            } else if let Some(change) =
                decode::row_change(&data).map_err(StoreError::invalid_data)?
            {
                pending.changes.push(change);
            }
        }
        Ok(Some(decoded))
    }
}

/// The decoded changes of a round.
#[derive(Default)]
struct Decoded {
    /// The transactions, in commit order.
    transactions: Vec<Committed>,
    /// The position of the last decoded row (any table's), where the slot moves to.
    end: Option<String>,
    /// How many rows were decoded (any table's).
    changes: u64,
}

/// One decoded transaction.
#[derive(Default)]
struct Committed {
    commit_lsn: String,
    committed_at: String,
    /// Whether it inserted into the events table: the trigger wrote its events.
    wrote_events: bool,
    changes: Vec<RowChange>,
}

/// The served tables by decoded name, and the events table's.
struct Tables {
    orders: HashMap<String, OrdersMap>,
    events: String,
}

/// An order's organization and id through the map, and its checked snapshot (`None` when the
/// contract cannot show it).
struct Keys {
    organization_id: Option<String>,
    id: Option<String>,
    shown: Option<Value>,
}

/// A change's rows through the map; `same`: both whole and equal as the contract shows them.
struct Rendered {
    old: Option<Keys>,
    new: Option<Keys>,
    same: bool,
}

/// The events of one order change, as the triggers would have written them, appended to
/// `events` (keyed by its transaction's commit and their index in it, which `index` counts).
fn events_of(
    committed: &Committed,
    change: &RowChange,
    rendered: &Rendered,
    index: &mut u32,
    events: &mut Vec<Value>,
) {
    let old = rendered.old.as_ref();
    let new = rendered.new.as_ref();
    // The providers the feed showed before the change, as the triggers record them: the old
    // order's when it was shown, `[]` when it was not; NULL when the old row is not known.
    let before = |old: Option<&Keys>| {
        old.map(|old| {
            old.shown
                .as_ref()
                .and_then(|shown| shown.get("providers").cloned())
                .unwrap_or_else(|| json!([]))
        })
    };
    type Event<'a> = (&'a Keys, &'static str, Option<&'a Value>, Option<Value>);
    let kinds: Vec<Event<'_>> = match (change.operation, old, new) {
        (Operation::Insert, _, Some(new)) => {
            vec![(new, "order.created", new.shown.as_ref(), None)]
        }
        (Operation::Delete, Some(old), _) => {
            vec![(old, "order.deleted", None, before(Some(old)))]
        }
        (Operation::Update, Some(old), Some(new))
            if old.organization_id != new.organization_id || old.id != new.id =>
        {
            // Moved: gone from where it was, new where it is.
            vec![
                (old, "order.deleted", None, before(Some(old))),
                (new, "order.created", new.shown.as_ref(), None),
            ]
        }
        (Operation::Update, Some(_), Some(_)) if rendered.same => vec![],
        (Operation::Update, old, Some(new)) => {
            vec![(new, "order.updated", new.shown.as_ref(), before(old))]
        }
        _ => vec![],
    };
    for (keys, kind, row, previous_providers) in kinds {
        let (Some(organization_id), Some(order_id)) = (&keys.organization_id, &keys.id) else {
            tracing::warn!(
                table = %change.table,
                "partner API order capture: a row has no organization or id through the schema map; its change is in no feed"
            );
            continue;
        };
        events.push(json!({
            "ordinal": events.len(),
            "organization_id": organization_id,
            "change": kind,
            "order_id": order_id,
            "order_row": row,
            "previous_providers": previous_providers,
            "created_at": committed.committed_at,
            "lsn": committed.commit_lsn,
            "index": *index,
        }));
        *index += 1;
    }
}

/// The rows of `changes` through their tables' maps, in their order: in one statement per
/// table, or, when one row of it fails to convert, row by row ([`render_one`]).
async fn render_all(
    transaction: &mut Transaction<'_, Postgres>,
    tables: &Tables,
    shown: &str,
    changes: &[&RowChange],
) -> Result<Vec<Rendered>, StoreError> {
    let mut rendered: Vec<Option<Rendered>> = changes.iter().map(|_| None).collect();
    let mut by_table: HashMap<&str, Vec<usize>> = HashMap::new();
    for (at, change) in changes.iter().enumerate() {
        by_table.entry(change.table.as_str()).or_default().push(at);
    }
    for (table, indexes) in by_table {
        let map = &tables.orders[table];
        let list = map.select_list();
        let input: Vec<Value> = indexes
            .iter()
            .map(|&at| json!({"i": at, "old": changes[at].old, "new": changes[at].new}))
            .collect();
        let statement = format!(
            "SELECT x.i, o.organization_id AS old_organization, o.id AS old_id, o.shown AS old_shown, \
                    n.organization_id AS new_organization, n.id AS new_id, n.shown, \
                    COALESCE(o.row OPERATOR(pg_catalog.=) n.row, false) AS same \
             FROM pg_catalog.jsonb_to_recordset($1) AS x(i integer, old jsonb, new jsonb) \
             LEFT JOIN LATERAL (SELECT t.organization_id, t.id, pg_catalog.to_jsonb(t) AS row, \
                     {shown} AS shown \
                 FROM (SELECT {list} FROM pg_catalog.jsonb_populate_record(NULL::{table}, x.old) AS r) AS t) o \
               ON x.old IS NOT NULL \
             LEFT JOIN LATERAL (SELECT t.organization_id, t.id, pg_catalog.to_jsonb(t) AS row, \
                     {shown} AS shown \
                 FROM (SELECT {list} FROM pg_catalog.jsonb_populate_record(NULL::{table}, x.new) AS r) AS t) n \
               ON x.new IS NOT NULL"
        );
        let mut attempt = sqlx::Connection::begin(&mut **transaction)
            .await
            .map_err(store_error)?;
        match sqlx::query(&statement)
            .bind(Value::Array(input))
            .fetch_all(&mut *attempt)
            .await
        {
            Ok(rows) => {
                attempt.commit().await.map_err(store_error)?;
                for row in rows {
                    let at: i32 = row.try_get("i").map_err(store_error)?;
                    let keys =
                        |organization: &str, id: &str, shown: &str| -> Result<Keys, StoreError> {
                            Ok(Keys {
                                organization_id: row.try_get(organization).map_err(store_error)?,
                                id: row.try_get(id).map_err(store_error)?,
                                shown: row.try_get(shown).map_err(store_error)?,
                            })
                        };
                    let change = changes[at as usize];
                    rendered[at as usize] = Some(Rendered {
                        old: change
                            .old
                            .as_ref()
                            .map(|_| keys("old_organization", "old_id", "old_shown"))
                            .transpose()?,
                        new: change
                            .new
                            .as_ref()
                            .map(|_| keys("new_organization", "new_id", "shown"))
                            .transpose()?,
                        same: row.try_get("same").map_err(store_error)?,
                    });
                }
            }
            Err(sqlx::Error::Database(_)) => {
                attempt.rollback().await.map_err(store_error)?;
                for &at in &indexes {
                    rendered[at] =
                        Some(render_one(transaction, table, map, shown, changes[at]).await?);
                }
            }
            Err(other) => return Err(store_error(other)),
        }
    }
    rendered
        .into_iter()
        .map(|one| one.ok_or_else(|| StoreError::other("a change was not rendered")))
        .collect()
}

/// Reads a change's rows through `map` as the trigger does: whole, or, when that fails (an
/// expression that does not convert), the organization and id alone, or nothing.
async fn render_one(
    transaction: &mut Transaction<'_, Postgres>,
    table: &str,
    map: &OrdersMap,
    shown: &str,
    change: &RowChange,
) -> Result<Rendered, StoreError> {
    let list = map.select_list();
    let whole = format!(
        "SELECT t.organization_id, t.id, pg_catalog.to_jsonb(t) AS row, {shown} AS shown \
         FROM (SELECT {list} FROM pg_catalog.jsonb_populate_record(NULL::{table}, $1) AS r) AS t"
    );
    let keys = format!(
        "SELECT {}, {} FROM pg_catalog.jsonb_populate_record(NULL::{table}, $1) AS r",
        map.item(OrderField::Organization),
        map.item(OrderField::Id)
    );
    let mut rows = [None, None];
    for (slot, values) in rows.iter_mut().zip([&change.old, &change.new]) {
        let Some(values) = values else { continue };
        let values = Value::Object(values.clone());
        *slot = Some(read_row(transaction, &whole, &keys, &values).await?);
    }
    let [old, new] = rows;
    let same = match (&old, &new) {
        (Some((_, Some(old))), Some((_, Some(new)))) => old == new,
        _ => false,
    };
    Ok(Rendered {
        old: old.map(|(keys, _)| keys),
        new: new.map(|(keys, _)| keys),
        same,
    })
}

/// One row through the map (its keys and, when whole, the row as the contract shows it), in
/// a savepoint each try, so a conversion that fails costs the round nothing.
async fn read_row(
    transaction: &mut Transaction<'_, Postgres>,
    whole: &str,
    keys: &str,
    values: &Value,
) -> Result<(Keys, Option<Value>), StoreError> {
    let mut attempt = sqlx::Connection::begin(&mut **transaction)
        .await
        .map_err(store_error)?;
    match sqlx::query(whole)
        .bind(values)
        .fetch_one(&mut *attempt)
        .await
    {
        Ok(row) => {
            attempt.commit().await.map_err(store_error)?;
            return Ok((
                Keys {
                    organization_id: row.try_get("organization_id").map_err(store_error)?,
                    id: row.try_get("id").map_err(store_error)?,
                    shown: row.try_get("shown").map_err(store_error)?,
                },
                row.try_get("row").map_err(store_error)?,
            ));
        }
        Err(sqlx::Error::Database(_)) => attempt.rollback().await.map_err(store_error)?,
        Err(other) => return Err(store_error(other)),
    }
    let mut attempt = sqlx::Connection::begin(&mut **transaction)
        .await
        .map_err(store_error)?;
    let keys = match sqlx::query(keys)
        .bind(values)
        .fetch_one(&mut *attempt)
        .await
    {
        Ok(row) => {
            attempt.commit().await.map_err(store_error)?;
            Keys {
                organization_id: row.try_get("organization_id").map_err(store_error)?,
                id: row.try_get("id").map_err(store_error)?,
                shown: None,
            }
        }
        Err(sqlx::Error::Database(_)) => {
            attempt.rollback().await.map_err(store_error)?;
            Keys {
                organization_id: None,
                id: None,
                shown: None,
            }
        }
        Err(other) => return Err(store_error(other)),
    };
    Ok((keys, None))
}

/// Fences every feed after a lost slot (the order writes held): each feed's events are
/// stamped (their webhooks written) and deleted as retention deletes them, with their
/// tombstones, and each feed's retention mark is set past its last position, so a reader
/// resuming from any event of before is answered 410 (it may have missed the changes whose
/// log was lost), and one starting afresh reads only what follows. Nothing of the hole is
/// ever served as if the feed were whole.
async fn fence_feeds(transaction: &mut Transaction<'_, Postgres>) -> Result<(), StoreError> {
    let organizations: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT organization_id FROM partner_api_order_events")
            .fetch_all(&mut **transaction)
            .await
            .map_err(store_error)?;
    for organization in &organizations {
        sqlx::query("SELECT partner_api_stamp_order_events($1, 2147483647)")
            .bind(organization)
            .execute(&mut **transaction)
            .await
            .map_err(store_error)?;
        sqlx::query(
            "WITH gone AS ( \
                 DELETE FROM partner_api_order_events WHERE organization_id = $1 \
                 RETURNING id, position) \
             INSERT INTO partner_api_pruned_events \
                 (organization_id, first_position, ids, min_id, max_id) \
             SELECT $1, min(g.position), array_agg(g.id ORDER BY g.position), min(g.id), max(g.id) \
             FROM gone g HAVING count(*) > 0",
        )
        .bind(organization)
        .execute(&mut **transaction)
        .await
        .map_err(store_error)?;
    }
    execute(
        transaction,
        "UPDATE partner_api_event_feeds SET pruned_through_position = last_position + 1",
    )
    .await
}

/// The crate's orders table and the served ones, locked against writes.
struct LockedTables {
    /// The tables whose updates and deletions do not log the old row whole.
    full_identity_missing: Vec<String>,
}

/// Drops `slot`, made by a start that then failed, unless a start took it meanwhile (one that
/// found it made, at the same time): under the capture row's lock, which a start's switch
/// takes too. Left behind, it would keep the server's log for a mode that never started.
async fn drop_unstarted_slot(pool: &PgPool, slot: &str) {
    let dropped = async {
        let mut dropping = pool.begin().await?;
        let untaken: bool = sqlx::query_scalar(
            "SELECT slot_name IS NULL FROM partner_api_order_capture FOR UPDATE",
        )
        .fetch_one(&mut *dropping)
        .await?;
        if untaken {
            sqlx::query(
                "SELECT pg_catalog.pg_drop_replication_slot(slot_name) \
                 FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
            )
            .bind(slot)
            .execute(&mut *dropping)
            .await?;
        }
        dropping.commit().await
    }
    .await;
    if let Err(err) = dropped {
        tracing::warn!(
            slot = %slot,
            error = %ErrorChain(&store_error(err)),
            "partner API order capture: the slot of a start that failed was not dropped; \
             drop it (pg_drop_replication_slot), or run the start again"
        );
    }
}

/// How many times a switch tries to pause the order writes (each try holds them queued 2 s
/// at most, and between tries they go on): a writer can hold a row for a second and more on
/// its own, `deadlock_timeout`'s second when two writers deadlock, so one try of 2 s is
/// refused now and then under a busy write load, and the operator would only run it again.
const SWITCH_LOCK_TRIES: u32 = 3;

/// A switch's statement that waited for its lock past `lock_timeout`, as the refusal the
/// operator runs again; any other error as it is.
fn switch_lock_refused(err: sqlx::Error, table: &str) -> StoreError {
    if is_lock_timeout(&err) {
        StoreError::unavailable(format!(
            "the order writes did not pause within 2 s for the switch ({table} stayed locked by \
             a transaction under way); nothing changed"
        ))
    } else {
        store_error(err)
    }
}

/// Begins a switch's transaction with the order tables locked and their triggers switched
/// (`lock_order_tables`), in up to [`SWITCH_LOCK_TRIES`] tries.
async fn switch_transaction(
    pool: &PgPool,
    switch: &str,
) -> Result<(Transaction<'static, Postgres>, LockedTables), StoreError> {
    let mut tries = 1;
    loop {
        let mut transaction = pool.begin().await.map_err(store_error)?;
        match lock_order_tables(&mut transaction, switch).await {
            Ok(tables) => return Ok((transaction, tables)),
            Err(err) if err.kind() == StoreErrorKind::Unavailable && tries < SWITCH_LOCK_TRIES => {
                // Rolled back, so the queued writes go on before the next try.
                transaction.rollback().await.map_err(store_error)?;
                tries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(err) => return Err(err),
        }
    }
}

/// Locks the crate's orders table and the served ones against writes (until the transaction
/// ends), and `ENABLE`s or `DISABLE`s (`switch`) their events' triggers: what the switches
/// change.
async fn lock_order_tables(
    transaction: &mut Transaction<'_, Postgres>,
    switch: &str,
) -> Result<LockedTables, StoreError> {
    execute(transaction, "SET LOCAL lock_timeout = '2s'").await?;
    let tables: Vec<(String, Vec<String>, bool)> = sqlx::query_as(
        "SELECT c.oid::regclass::text, \
                ARRAY(SELECT pg_catalog.quote_ident(g.tgname) FROM pg_catalog.pg_trigger g \
                      JOIN pg_catalog.pg_proc p ON p.oid = g.tgfoid \
                      WHERE g.tgrelid = c.oid AND NOT g.tgisinternal \
                        AND (p.oid = 'partner_api_raise_order_events()'::regprocedure \
                             OR g.tgname = 'partner_api_orders') \
                      ORDER BY g.tgname), \
                c.relreplident = 'f' \
         FROM pg_catalog.pg_class c \
         WHERE c.oid = 'partner_orders'::regclass \
            OR c.oid IN (SELECT t.relid FROM partner_api_order_tables t) \
         ORDER BY c.oid",
    )
    .fetch_all(&mut **transaction)
    .await
    .map_err(store_error)?;
    for (table, _, _) in &tables {
        sqlx::query(&format!("LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"))
            .execute(&mut **transaction)
            .await
            .map_err(|err| switch_lock_refused(err, table))?;
    }
    for (table, triggers, _) in &tables {
        for trigger in triggers {
            execute(
                transaction,
                &format!("ALTER TABLE {table} {switch} TRIGGER {trigger}"),
            )
            .await?;
        }
    }
    Ok(LockedTables {
        full_identity_missing: tables
            .into_iter()
            .filter(|(_, _, full)| !full)
            .map(|(table, _, _)| table)
            .collect(),
    })
}

async fn execute(
    transaction: &mut Transaction<'_, Postgres>,
    statement: &str,
) -> Result<(), StoreError> {
    sqlx::query(statement)
        .execute(&mut **transaction)
        .await
        .map(drop)
        .map_err(store_error)
}

/// The error of a slot the server refused (no privilege, no slots configured), naming the
/// setting; `None` for any other error.
fn slot_refused(err: &sqlx::Error) -> Option<StoreError> {
    let db = err.as_database_error()?;
    let message = db.message();
    let remedy = if db.code().as_deref() == Some("42501") {
        "the role needs the REPLICATION attribute (ALTER ROLE ... REPLICATION; on RDS, GRANT rds_replication)"
    } else if message.contains("max_replication_slots") {
        "the server setting max_replication_slots must leave a slot free"
    } else if message.contains("wal_level") {
        "the server setting wal_level must be logical"
    } else {
        return None;
    };
    Some(StoreError::refusal(
        crate::store::StoreErrorKind::Unsupported,
        format!("the order capture cannot use a replication slot: {remedy} (the server said: {message})"),
    ))
}

/// The error of a slot that is gone, with what to do.
fn lost(slot: &str, why: &str) -> StoreError {
    StoreError::unavailable(format!(
        "the order capture's slot {slot:?} is lost ({why}): the order changes after the last \
         materialized position have no events, and the feeds wait. Run `order-capture stop` \
         (PgStore::stop_order_capture): it puts the triggers back and fences every feed (a \
         reader resuming from before is answered 410 and starts again); then `order-capture \
         start` for a new slot, with max_slot_wal_keep_size large enough"
    ))
}

/// A slot name for the database `database`: `partner_api_` and its name in lower-case letters,
/// digits and underscores (slot names are the server's, not one database's).
fn slot_name_for(database: &str) -> String {
    format!(
        "partner_api_{}",
        super::schema_map::bare_identifier(database, 50)
    )
}

/// A log position (`X/Y`, hexadecimal) as a number.
fn lsn(text: &str) -> Result<u64, StoreError> {
    parse_lsn(text).ok_or_else(|| StoreError::invalid_data(format!("not a log position: {text:?}")))
}

/// A log position (`X/Y`, hexadecimal) as a number, if it is one.
pub(crate) fn parse_lsn(text: &str) -> Option<u64> {
    let (high, low) = text.split_once('/')?;
    let parse = |part: &str| u64::from_str_radix(part, 16).ok();
    Some((parse(high)? << 32) | parse(low)?)
}

fn hostname() -> String {
    std::env::var("HOSTNAME").unwrap_or_else(|_| "replica".to_owned())
}
