#!/usr/bin/env bash
# What a read of the events feed costs by the types it asks for, on a feed of EVENTS events
# (default 300,000: created and updated, no deletion) of one organization, all stamped: the
# median and slowest of READS reads (default 50) of `partner_api_read_order_events` for a first
# page of every type, of `order.deleted` alone (none in the feed: the read finds nothing), of
# `order.updated,order.deleted`, and of every type from the middle of the feed; and in the
# view of a key limited to providers (#58): a provider of every order (`meta`), one of one
# order in a hundred (`rare`), and one of none (`nobody`: the read looks at its 1,000 events
# and finds nothing), on a throwaway PostgreSQL.
#
#   bash benches/feed_types.sh
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS=${EVENTS:-300000}
READS=${READS:-50}

source .ci/servers.sh
trap stop_servers EXIT
start_bench_postgres "the feed types bench"
database=$bench_database

psql -q "$database" <<SQL
INSERT INTO partner_api_order_events (organization_id, change, order_id, order_row)
SELECT 'org_big', CASE WHEN e % 3 = 0 THEN 'order.updated' ELSE 'order.created' END,
       format('ord_%s', e),
       jsonb_build_object('id', 'x', 'providers',
                          CASE WHEN e % 100 = 0 THEN '["meta", "rare"]'::jsonb ELSE '["meta"]'::jsonb END)
FROM generate_series(1, $EVENTS) e;
ANALYZE partner_api_order_events;
SQL
# Stamped as readers stamp: rounds of the stamper.
while [ "$(psql -qAt "$database" -c "SELECT partner_api_stamp_order_events('org_big', 10000)")" != 0 ]; do :; done
psql -q "$database" -c "VACUUM ANALYZE partner_api_order_events"
middle=$(psql -qAt "$database" -c "SELECT id FROM partner_api_order_events WHERE position = $EVENTS / 2")

# timed KINDS AFTER [VIEW]: READS reads, each's milliseconds by the server's clock; prints the
# median and the slowest.
timed() {
  local kinds=$1 after=$2 view=${3:-NULL}
  for _ in $(seq 1 "$READS"); do
    psql -qAt "$database" -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" \
      -c "SELECT count(*) FROM partner_api_read_order_events('org_big', $after, 100, ARRAY[$kinds], false, $view, 1000)" \
      -c "SELECT extract(epoch FROM clock_timestamp()) * 1000" |
      awk 'NR == 1 { start = $1 } END { printf "%.2f\n", $1 - start }'
  done | sort -n | awk '{ v[NR] = $1 } END { printf "median %s ms, slowest %s ms", v[int((NR + 1) / 2)], v[NR] }'
}

echo "a feed of $EVENTS events (a third order.updated, the rest order.created), $READS reads each:"
echo "  every type, first page:              $(timed "'order.created','order.updated','order.deleted'" NULL)"
echo "  order.deleted (none in the feed):    $(timed "'order.deleted'" NULL)"
echo "  order.updated,order.deleted:         $(timed "'order.updated','order.deleted'" NULL)"
echo "  every type, from the feed's middle:  $(timed "'order.created','order.updated','order.deleted'" "$middle")"
echo "  order.deleted, from the feed's middle: $(timed "'order.deleted'" "$middle")"
every="'order.created','order.updated','order.deleted'"
echo "in a key's view, every type, from the feed's middle:"
echo "  meta (every order):                  $(timed "$every" "$middle" "ARRAY['meta']")"
echo "  rare (one order in a hundred):       $(timed "$every" "$middle" "ARRAY['rare']")"
echo "  nobody (no order):                   $(timed "$every" "$middle" "ARRAY['nobody']")"
