#!/usr/bin/env bash
# The events feed's retention at scale: a backlog of ORGANIZATIONS organizations (default
# 1,600) x EVENTS expired events each (default 500), none ever read (so none stamped), drained
# by retention's own calls (`partner_api_prune_order_events`, 1,000 events and 100 ms of work
# at most each, as the API's rounds make them) while a reader of another organization stamps
# and reads its feed in a loop. Prints each call's longest duration, the calls and seconds the
# backlog took, the reader's slowest read, and what is left, on a throwaway PostgreSQL with
# durable commits.
#
#   bash benches/events_retention.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ORGANIZATIONS=${ORGANIZATIONS:-1600}
EVENTS=${EVENTS:-500}

source .ci/servers.sh
[ -n "$(postgres_bin)" ] || install_packages "the retention bench" postgresql
bin=$(postgres_bin)
work=$(mktemp -d /tmp/partner-api-retention.XXXXXX)
run=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --no-create-home postgres
  chown postgres "$work"
  run=(runuser -u postgres --)
fi
port=$(free_port)
"${run[@]}" "$bin/initdb" -D "$work/db" -U postgres -A trust >/dev/null
"${run[@]}" "$bin/pg_ctl" -D "$work/db" -l "$work/log" -w \
  -o "-c listen_addresses=127.0.0.1 -p $port -k $work -c max_connections=50" start >/dev/null
reader_pid=
cleanup() {
  [ -z "$reader_pid" ] || kill "$reader_pid" 2>/dev/null || true
  "${run[@]}" "$bin/pg_ctl" -D "$work/db" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
database="postgres://postgres@127.0.0.1:$port/postgres"
for migration in src/store/migrations/*.sql; do psql -q "$database" -f "$migration" >/dev/null; done

echo "backlog: $ORGANIZATIONS organizations x $EVENTS events, written 40 days ago, never read"
psql -q "$database" <<SQL
INSERT INTO partner_api_order_events (organization_id, change, order_id, order_row, created_at)
SELECT format('org_%s', lpad(o::text, 5, '0')), 'order.created', format('ord_%s_%s', o, e),
       '{"id": "x"}'::jsonb, now() - interval '40 days'
FROM generate_series(1, $ORGANIZATIONS) o, generate_series(1, $EVENTS) e;
-- The reader's organization: young events, stamped by its reads.
INSERT INTO partner_api_order_events (organization_id, change, order_id, order_row)
SELECT 'org_reader', 'order.created', format('ord_r_%s', e), '{"id": "x"}'::jsonb
FROM generate_series(1, 200) e;
ANALYZE partner_api_order_events;
SQL

# The reader: a stamping round and a read of its organization, in a loop, each timed.
reader_log="$work/reader"
(
  while true; do
    psql -qAt "$database" -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" \
      -c "SELECT partner_api_stamp_order_events('org_reader', 1000)" \
      -c "SELECT count(*) FROM partner_api_read_order_events('org_reader', NULL, 100, \
            ARRAY['order.created', 'order.updated', 'order.deleted'], false)" \
      -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" |
      awk 'NR == 1 { start = $1 } END { printf "%.1f\n", $1 - start }'
  done >"$reader_log"
) &
reader_pid=$!

started=$(date +%s.%N)
calls=0
longest=0
deleted_total=0
while true; do
  line=$(psql -qAt "$database" -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" \
    -c "SELECT deleted || ' ' || done FROM partner_api_prune_order_events(2592000, 1000, 100)" \
    -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" | paste -sd' ')
  read -r before deleted done after <<<"$line"
  took=$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.1f", a - b }')
  longest=$(awk -v a="$took" -v b="$longest" 'BEGIN { print (a > b) ? a : b }')
  calls=$((calls + 1))
  deleted_total=$((deleted_total + deleted))
  if [ "$done" = true ] && [ "$deleted" = 0 ]; then
    left=$(psql -qAt "$database" -c "SELECT count(*) FROM partner_api_order_events WHERE organization_id <> 'org_reader'")
    [ "$left" -le "$ORGANIZATIONS" ] && break
  fi
done
ended=$(date +%s.%N)
kill "$reader_pid" 2>/dev/null || true
wait "$reader_pid" 2>/dev/null || true
reader_pid=
left=$(psql -qAt "$database" -c "SELECT count(*) FROM partner_api_order_events WHERE organization_id <> 'org_reader'")
echo "retention: $deleted_total events deleted in $calls calls, $(awk -v a="$ended" -v b="$started" 'BEGIN { printf "%.1f", a - b }') s; longest call ${longest} ms"
echo "left: $left events (each organization's newest, kept)"
echo "reader: $(wc -l <"$reader_log") reads, slowest $(sort -n "$reader_log" | tail -n 1) ms, median $(sort -n "$reader_log" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }') ms"
