#!/usr/bin/env bash
# What the change feed costs the host's order writes: pgbench, CLIENTS clients (default 8),
# one order per transaction into one of 50 organizations, DURATION seconds (default 10) per
# run, with the crate's orders trigger on and off, alternated ROUNDS times (default 2), on a
# throwaway PostgreSQL (.ci/servers.sh) or the one PARTNER_API_TEST_DATABASE_URL names.
#
#   bash benches/order_writes.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CLIENTS=${CLIENTS:-8}
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-2}

source .ci/servers.sh
work=$(mktemp -d)
cleanup() { rm -rf "$work"; stop_servers; }
trap cleanup EXIT
start_postgres
pgbench="$(postgres_bin)/pgbench"
name="partner_api_order_writes_$$"
psql -q "$PARTNER_API_TEST_DATABASE_URL" -c "CREATE DATABASE $name"
database="${PARTNER_API_TEST_DATABASE_URL%/*}/$name"
for migration in src/store/migrations/*.sql; do psql -q "$database" -f "$migration"; done
psql -q "$database" -c "INSERT INTO partner_organizations SELECT format('org_%s', o), 'x' FROM generate_series(0, 49) o"
cat >"$work/insert.sql" <<'SQL'
\set org random(0, 49)
INSERT INTO partner_orders VALUES ('org_' || :org, md5(random()::text || clock_timestamp()::text), ARRAY['meta'], 'A', 'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now());
SQL
echo "pgbench -c $CLIENTS -T $DURATION, one order per transaction ($(psql -Atc 'SHOW synchronous_commit' "$database") synchronous_commit)"
for _ in $(seq 1 "$ROUNDS"); do
  for mode in ENABLE DISABLE; do
    psql -q "$database" -c "ALTER TABLE partner_orders $mode TRIGGER partner_orders_notify"
    tps=$("$pgbench" -n -f "$work/insert.sql" -c "$CLIENTS" -j 2 -T "$DURATION" "$database" 2>/dev/null |
      sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    printf 'orders trigger %-8s %10.0f tps\n' "${mode,,}d" "$tps"
  done
done
psql -q "$PARTNER_API_TEST_DATABASE_URL" -c "DROP DATABASE $name WITH (FORCE)"
