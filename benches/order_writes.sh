#!/usr/bin/env bash
# What the crate's orders trigger costs the host's order writes: pgbench, CLIENTS clients
# (default 8), one order per transaction into one of 50 organizations, DURATION seconds
# (default 10) per run, alternated ROUNDS times (default 2) between the trigger with no
# webhook endpoint (`outbox`: the change's one record, its event in the feed, which the
# caches read too, and one indexed look-up of endpoints), the same with one enabled endpoint on
# every organization (`outbox+endpoints`, with a dispatcher's stamping every 200 ms meanwhile,
# which writes a message and a delivery per order), the row-level
# NOTIFY trigger of earlier versions, and no trigger, on a throwaway PostgreSQL with durable commits (fsync and synchronous_commit
# on, as in production: the cost of NOTIFY is its lock held across the commit's flush). The
# same on a host's own table mapped with --schema-map (the hosting page's media_buys and
# accounts, its trigger registered by the standalone host's `migrate`): `mapped` with the
# trigger, `mapped-none` without. `capture` and `mapped-capture`: the capture mode (no
# trigger; the events built from the write-ahead log by `standalone order-capture run` (built for release),
# running beside the writes, after it caught up with the log the other modes wrote), on
# databases of their own (the server has wal_level = logical for every mode);
# `capture-deferred`: the same with the reader started after the writes (what the writes
# themselves pay). Each capture line also says how long after the writes the capture had
# read them all.
#
# BASELINE=<commit> adds the same crate-table modes on a second database migrated with that
# commit's migrations (`baseline-outbox`: the triggers of that commit with no endpoint,
# `baseline-outbox+endpoints`, `baseline-none`), alternated in the same rounds: a before and
# after of one run, on a machine whose speed drifts between runs.
#
#   bash benches/order_writes.sh
#   BASELINE=318bde6 bash benches/order_writes.sh
#   MODES="none capture-deferred" CAPTURE_BATCH=50000 bash benches/order_writes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${CLIENTS:-8}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-2}

source .ci/servers.sh
source benches/mapped_tables.sh
work=$(mktemp -d /tmp/partner-api-writes.XXXXXX)
cleanup() { stop_servers; rm -rf "$work"; }
trap cleanup EXIT
start_bench_postgres "the order-writes bench"
database=$bench_database
bin=$(postgres_bin)
psql -q "$database" <<'SQL'
INSERT INTO partner_organizations SELECT format('org_%s', o), 'x' FROM generate_series(0, 49) o;
-- The row-level NOTIFY trigger of the earlier migrations, for comparison.
CREATE TRIGGER partner_orders_notify_before AFTER INSERT OR UPDATE OR DELETE ON partner_orders
    FOR EACH ROW EXECUTE FUNCTION partner_api_notify_orders();
-- One endpoint per organization, enabled only for the `outbox+endpoints` runs.
INSERT INTO partner_webhook_endpoints (organization_id, url, secret, enabled)
    SELECT id, 'https://partner.example/hooks', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', false
    FROM partner_organizations;
SQL
# MODES="none capture" runs those alone; CAPTURE_BATCH sets the capture reader's round size.
read -r -a modes <<<"${MODES:-outbox outbox+endpoints notify none capture capture-deferred mapped mapped-none mapped-capture}"
capture_batch=(${CAPTURE_BATCH:+--batch "$CAPTURE_BATCH"})
if [ -n "${BASELINE:-}" ]; then
  baseline_database=${database%/*}/baseline
  psql -q "$database" -c "CREATE DATABASE baseline"
  for migration in $(git ls-tree --name-only "$BASELINE" src/store/migrations/ | sort); do
    git show "$BASELINE:$migration" | psql -q "$baseline_database" >/dev/null
  done
  psql -q "$baseline_database" <<'SQL'
INSERT INTO partner_organizations SELECT format('org_%s', o), 'x' FROM generate_series(0, 49) o;
INSERT INTO partner_webhook_endpoints (organization_id, url, secret, enabled)
    SELECT id, 'https://partner.example/hooks', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', false
    FROM partner_organizations;
SQL
  modes+=(baseline-outbox baseline-outbox+endpoints baseline-none)
fi
# The host's own tables, in a database of their own, migrated and registered as the hosting
# page says.
mapped_database=${database%/*}/mapped
make_mapped_database "$mapped_database" "$work"
# The capture's databases: copies, switched to the capture mode.
psql -q "${database%/*}/template1" -c "CREATE DATABASE capture TEMPLATE ${database##*/}" \
  -c "CREATE DATABASE mapped_capture TEMPLATE mapped"
capture_database=${database%/*}/capture
mapped_capture_database=${database%/*}/mapped_capture
psql -q "$capture_database" -c "DROP TRIGGER partner_orders_notify_before ON partner_orders"
cargo build -q --release --example standalone --features postgres
standalone=target/release/examples/standalone
"$standalone" --no-migrate --database-url "$capture_database" order-capture start >/dev/null
"$standalone" --no-migrate --database-url "$mapped_capture_database" --schema-map "$work/schema-map.toml" \
  order-capture start >/dev/null
cat >"$work/insert-mapped.sql" <<'SQL'
\set account random(1, 50)
INSERT INTO media_buys (account_id, channels, advertiser, campaign, budget_ore, starts_on, ends_on, state, po_number) VALUES (:account, ARRAY['meta'], 'A', 'C', 100, '2026-03-01', '2026-04-30', 'BOOKED', 'PO');
SQL
cat >"$work/insert.sql" <<'SQL'
\set org random(0, 49)
INSERT INTO partner_orders VALUES ('org_' || :org, md5(random()::text || clock_timestamp()::text), ARRAY['meta'], 'A', 'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now());
SQL
echo "pgbench -c $CLIENTS -T $DURATION, one order per transaction, fsync $(psql -Atc 'SHOW fsync' "$database"), synchronous_commit $(psql -Atc 'SHOW synchronous_commit' "$database")"
for _ in $(seq 1 "$ROUNDS"); do
  for mode in "${modes[@]}"; do
    case $mode in
      baseline-*)
        # The baseline's triggers, whatever their names: all of them, or none.
        state=ENABLE
        [ "$mode" = baseline-none ] && state=DISABLE
        endpoints=false
        [ "$mode" = baseline-outbox+endpoints ] && endpoints=true
        psql -q "$baseline_database" -c "ALTER TABLE partner_orders $state TRIGGER USER" \
          -c "UPDATE partner_webhook_endpoints SET enabled = $endpoints"
        tps=$("$bin/pgbench" -n -f "$work/insert.sql" -c "$CLIENTS" -j 2 -T "$DURATION" \
          "$baseline_database" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        printf 'orders trigger %-16s %8.0f tps\n' "$mode" "$tps"
        continue
        ;;
      capture|capture-deferred|mapped-capture)
        script=$work/insert.sql
        target=$capture_database
        map=()
        if [ "$mode" = mapped-capture ]; then
          script=$work/insert-mapped.sql
          target=$mapped_capture_database
          map=(--schema-map "$work/schema-map.toml")
        fi
        read_capture() {
          "$standalone" --no-migrate --database-url "$target" "${map[@]}" order-capture run \
            "${capture_batch[@]}" 2>/dev/null &
          reader=$!
        }
        # The reader beside the writes, after it caught up with the log the other modes
        # wrote; or (`capture-deferred`: the writes' own cost) only after them.
        reader=
        if [ "$mode" != capture-deferred ]; then read_capture; sleep 3; fi
        tps=$("$bin/pgbench" -n -f "$script" -c "$CLIENTS" -j 2 -T "$DURATION" "$target" 2>/dev/null |
          sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        written=$(psql -Atc "SELECT pg_current_wal_insert_lsn()" "$target")
        [ -n "$reader" ] || read_capture
        started=$(date +%s.%N)
        for _ in $(seq 1 3000); do
          caught=$(psql -Atc "SELECT s.confirmed_flush_lsn >= '$written' FROM pg_replication_slots s
                              JOIN partner_api_order_capture c USING (slot_name)" "$target")
          [ "$caught" = t ] && break
          sleep 0.1
        done
        kill "$reader"
        wait "$reader" 2>/dev/null || true
        printf 'orders trigger %-16s %8.0f tps  (the capture read it all %.1f s after the writes)\n' \
          "$mode" "$tps" "$(awk "BEGIN { print $(date +%s.%N) - $started }")"
        continue
        ;;
      mapped|mapped-none)
        state=ENABLE
        [ "$mode" = mapped-none ] && state=DISABLE
        psql -q "$mapped_database" -c "ALTER TABLE media_buys $state TRIGGER partner_api_orders"
        tps=$("$bin/pgbench" -n -f "$work/insert-mapped.sql" -c "$CLIENTS" -j 2 -T "$DURATION" \
          "$mapped_database" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
        printf 'orders trigger %-16s %8.0f tps\n' "$mode" "$tps"
        continue
        ;;
      outbox|outbox+endpoints) enable=partner_orders_webhooks ;;
      notify) enable=partner_orders_notify_before ;;
      none) enable= ;;
    esac
    endpoints=false
    [ "$mode" = outbox+endpoints ] && endpoints=true
    psql -q "$database" -c "ALTER TABLE partner_orders DISABLE TRIGGER partner_orders_notify_before" \
      -c "ALTER TABLE partner_orders DISABLE TRIGGER partner_orders_webhooks" \
      -c "UPDATE partner_webhook_endpoints SET enabled = $endpoints"
    for trigger in $enable; do
      psql -q "$database" -c "ALTER TABLE partner_orders ENABLE TRIGGER $trigger"
    done
    # With endpoints, what a dispatcher does meanwhile: a claim's stamping every 200 ms, which
    # writes the webhooks of the new events (the write itself writes the event only).
    stamper=
    if [ "$endpoints" = true ]; then
      (while :; do
        psql -qAt "$database" -c "SELECT partner_api_open_feeds_for_webhooks(20)" \
          -c "SELECT partner_api_stamp_for_webhooks(20, 500)" >/dev/null
        sleep 0.2
      done) &
      stamper=$!
    fi
    tps=$("$bin/pgbench" -n -f "$work/insert.sql" -c "$CLIENTS" -j 2 -T "$DURATION" "$database" 2>/dev/null |
      sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    if [ -n "$stamper" ]; then kill "$stamper"; wait "$stamper" 2>/dev/null || true; fi
    printf 'orders trigger %-16s %8.0f tps\n' "$mode" "$tps"
  done
done
