#!/usr/bin/env bash
# The events feed's retention at scale, on a throwaway PostgreSQL with durable commits, in
# two parts:
# 1. a backlog of ORGANIZATIONS organizations (default 1,600) x EVENTS events each (default
#    500), written 40 days ago and never read (so none stamped), worked through by retention's
#    own calls (`partner_api_prune_order_events`, 1,000 events and 100 ms of work at most each,
#    as the API's rounds make them) while a reader of another organization stamps and reads
#    its feed in a loop: first the calls that give the backlog its positions (retention keeps
#    an event a period from when it became readable, so none is deleted then), then, the
#    period made past (its entry times moved back 40 days), the calls that delete it: the
#    longest call, the calls and seconds each part took, the reader's slowest read, what is
#    left;
# 2. a steady RATE events a second (default 1,000) written across WRITTEN organizations
#    (default 2,000) for STEADY_SECONDS (default 600), kept for KEEP_SECONDS (default 60) from
#    when each got its position (a reader's, or the first round of retention that saw it), with
#    a round of retention a minute as the API runs it (calls until one has visited the last
#    organization) and a reader of one of the written organizations stamping and reading in a
#    loop: the events kept and the table's size every 30 s (flat once the first rounds ran),
#    the longest call and round, the reader's slowest read.
#
#   bash benches/events_retention.sh
#   STEADY_SECONDS=0 bash benches/events_retention.sh    # the backlog only
set -euo pipefail
cd "$(dirname "$0")/.."
ORGANIZATIONS=${ORGANIZATIONS:-1600}
EVENTS=${EVENTS:-500}
RATE=${RATE:-1000}
WRITTEN=${WRITTEN:-2000}
STEADY_SECONDS=${STEADY_SECONDS:-600}
KEEP_SECONDS=${KEEP_SECONDS:-60}

source .ci/servers.sh
work=$(mktemp -d /tmp/partner-api-retention.XXXXXX)
reader_pid=
writer_pid=
cleanup() {
  [ -z "$reader_pid" ] || kill "$reader_pid" 2>/dev/null || true
  [ -z "$writer_pid" ] || kill "$writer_pid" 2>/dev/null || true
  stop_servers
  rm -rf "$work"
}
trap cleanup EXIT
start_bench_postgres "the retention bench"
database=$bench_database

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

# reader ORGANIZATION LOG: a stamping round and a read of the organization's feed, in a loop,
# each timed (milliseconds, a line each).
reader() {
  while true; do
    psql -qAt "$database" -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" \
      -c "SELECT partner_api_stamp_order_events('$1', 1000)" \
      -c "SELECT count(*) FROM partner_api_read_order_events('$1', NULL, 100, \
            ARRAY['order.created', 'order.updated', 'order.deleted'], false)" \
      -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" |
      awk 'NR == 1 { start = $1 } END { printf "%.1f\n", $1 - start }'
  done >"$2"
}

# call KEEP: one retention call; sets deleted, done and took (milliseconds).
call() {
  local line before after
  line=$(psql -qAt "$database" -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" \
    -c "SELECT deleted || ' ' || done FROM partner_api_prune_order_events($1, 1000, 100)" \
    -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" | paste -sd' ')
  read -r before deleted done after <<<"$line"
  took=$(awk -v a="$after" -v b="$before" 'BEGIN { printf "%.1f", a - b }')
}

# slowest LOG, median LOG: of a reader's timings.
slowest() { sort -n "$1" | tail -n 1; }
median() { sort -n "$1" | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

reader_log="$work/reader"
reader org_reader "$reader_log" &
reader_pid=$!

seconds_since() { awk -v a="$(date +%s.%N)" -v b="$1" 'BEGIN { printf "%.1f", a - b }'; }
started=$(date +%s.%N)
calls=0
longest=0
deleted_total=0
stamping=
while true; do
  call 2592000
  longest=$(awk -v a="$took" -v b="$longest" 'BEGIN { print (a > b) ? a : b }')
  calls=$((calls + 1))
  deleted_total=$((deleted_total + deleted))
  if [ "$done" = true ] && [ "$deleted" = 0 ]; then
    if [ -z "$stamping" ]; then
      unstamped=$(psql -qAt "$database" -c "SELECT count(*) FROM partner_api_order_events WHERE position IS NULL AND organization_id <> 'org_reader'")
      [ "$unstamped" = 0 ] || continue
      [ "$deleted_total" = 0 ] || { echo "retention deleted $deleted_total events no reader could read yet" >&2; exit 1; }
      stamping="$calls calls, $(seconds_since "$started") s; longest call ${longest} ms"
      echo "positions: the backlog stamped in $stamping (none deleted)"
      psql -q "$database" -c "UPDATE partner_api_order_events SET stamped_at = stamped_at - interval '40 days' WHERE organization_id <> 'org_reader'" -c "VACUUM ANALYZE partner_api_order_events"
      started=$(date +%s.%N)
      calls=0
      longest=0
      continue
    fi
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
echo "reader: $(wc -l <"$reader_log") reads, slowest $(slowest "$reader_log") ms, median $(median "$reader_log") ms"

[ "$STEADY_SECONDS" -gt 0 ] || exit 0
echo
echo "steady: $RATE events a second across $WRITTEN organizations for $STEADY_SECONDS s, kept $KEEP_SECONDS s, a round a minute"
psql -q "$database" -c "DELETE FROM partner_api_order_events" -c "VACUUM partner_api_order_events"
# The writer: RATE events each second, on the second.
(
  second=0
  while true; do
    psql -q "$database" -c "INSERT INTO partner_api_order_events (organization_id, change, order_id, order_row)
      SELECT format('org_w%s', lpad(((${second} * $RATE + g) % $WRITTEN)::text, 5, '0')),
             'order.created', format('ord_%s_%s', ${second}, g), '{\"id\": \"x\"}'::jsonb
      FROM generate_series(1, $RATE) g"
    second=$((second + 1))
    sleep "$(awk -v s="$(date +%s.%N)" 'BEGIN { printf "%.3f", 1 - (s - int(s)) }')"
  done
) &
writer_pid=$!
reader_log="$work/steady_reader"
reader org_w00007 "$reader_log" &
reader_pid=$!
steady_started=$SECONDS
next_round=$SECONDS
next_sample=$((SECONDS + 30))
longest=0
longest_round=0
rounds=0
printf '%6s %10s %12s\n' "second" "events" "table bytes"
while [ $((SECONDS - steady_started)) -lt "$STEADY_SECONDS" ]; do
  if [ "$SECONDS" -ge "$next_round" ]; then
    round_started=$(date +%s.%N)
    while true; do
      call "$KEEP_SECONDS"
      longest=$(awk -v a="$took" -v b="$longest" 'BEGIN { print (a > b) ? a : b }')
      [ "$done" = true ] && break
    done
    round_took=$(awk -v a="$(date +%s.%N)" -v b="$round_started" 'BEGIN { printf "%.1f", (a - b) * 1000 }')
    longest_round=$(awk -v a="$round_took" -v b="$longest_round" 'BEGIN { print (a > b) ? a : b }')
    rounds=$((rounds + 1))
    next_round=$((next_round + 60))
  fi
  if [ "$SECONDS" -ge "$next_sample" ]; then
    psql -qAt "$database" -c "SELECT $((SECONDS - steady_started)), count(*), pg_total_relation_size('partner_api_order_events') FROM partner_api_order_events" |
      awk -F'|' '{ printf "%6s %10s %12s\n", $1, $2, $3 }'
    next_sample=$((next_sample + 30))
  fi
  sleep 1
done
kill "$writer_pid" "$reader_pid" 2>/dev/null || true
wait "$writer_pid" "$reader_pid" 2>/dev/null || true
writer_pid=
reader_pid=
echo "rounds: $rounds, the longest ${longest_round} ms; longest call ${longest} ms"
echo "reader of a written organization: $(wc -l <"$reader_log") reads, slowest $(slowest "$reader_log") ms, median $(median "$reader_log") ms"
