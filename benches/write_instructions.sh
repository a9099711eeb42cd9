#!/usr/bin/env bash
# What the crate's orders trigger costs an order write, in instructions (#56): the figure that
# compares across machines and runs, where `benches/order_writes.sh`'s throughput on a shared
# 2-core machine spreads by a fifth between runs. PostgreSQL's own backend runs in single-user
# mode (`postgres --single`, no client, no network) under callgrind, executing N_FEW and then
# N_MANY single-row order inserts, each its own transaction as a host's writes are (parsed,
# planned, executed, committed); the difference of the two totals divided by their difference
# in inserts is the backend's user-space instructions per insert, start-up and catalog
# loading cancelled out. Modes, each on a database of its own on one throwaway server:
#   none, triggers               the crate's `partner_orders`, its triggers off, on
#   stamped                      triggers on, and every organization's new events stamped
#                                after the inserts, as a reader of the feed or retention does
#                                (the snapshots are rendered there): the write's whole work
#   endpoints                    triggers on, an enabled webhook endpoint on every
#                                organization, and the dispatcher's stamping after the inserts
#                                (which writes each event's message and delivery)
#   provider-index               triggers off, with a provider's own index (what
#                                `standalone indexes --provider meta` prints), which every
#                                insert enters (each books meta): its check and its entry
#   other-provider-index         the same with another provider's index: its check alone
#   updates-none, updates        single-row updates of `partner_orders` (a budget raised, on
#                                100 orders in turn), its triggers off, on
#   mapped-none, mapped          a host's own table mapped with --schema-map (the hosting
#                                page's media_buys and accounts, registered by `migrate`)
#   mapped-updates-none,         single-row updates of that table (a budget raised, on 100
#   mapped-updates               buys in turn), its trigger off, on
#   capture, updates-capture,    the capture mode (#56): copies of the two databases switched
#   mapped-capture,              by `standalone order-capture start` (the events' triggers
#   mapped-updates-capture       disabled, the tables' old rows logged whole), their slots
#                                dropped before the count, counted with `wal_level = logical`
#                                (the other modes run with the server's default, `replica`):
#                                what the writes themselves pay in that mode, of the same
#                                writes with no trigger in the default deployment. The
#                                capture's reader decodes and materializes later, on a
#                                replica's connection; it is not in this count
#                                (`benches/order_writes.sh` times it)
#   baseline-none, baseline,     with BASELINE=<commit>: `partner_orders` migrated with that
#   baseline-stamped,            commit's migrations, as none, triggers, stamped and endpoints
#   baseline-endpoints           (a before and after in one run; BASELINE_MODES picks
#                                among them, by default baseline-none and baseline)
# "of none" is the insert without triggers over the insert with them: what the write
# throughput would be where the server's CPU is the limit and the kernel's share (the commit's
# flush, the client's socket) is left out.
#
#   bash benches/write_instructions.sh
#   BASELINE=4e8dde5 MODES="none triggers" bash benches/write_instructions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N_FEW=${N_FEW:-200}
N_MANY=${N_MANY:-1200}
if [ "$N_MANY" -le "$N_FEW" ]; then
  echo "error: N_MANY ($N_MANY) must be more than N_FEW ($N_FEW)" >&2
  exit 2
fi
read -r -a modes <<<"${MODES:-none triggers stamped endpoints capture mapped-none mapped mapped-capture}"

if ! command -v valgrind >/dev/null; then
  echo "installing valgrind (Debian package)" >&2
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi
source .ci/servers.sh
source benches/mapped_tables.sh
work=$(mktemp -d /tmp/partner-api-write-instructions.XXXXXX)
cleanup() { stop_servers; rm -rf "$work"; }
trap cleanup EXIT
start_bench_postgres "the write-instructions bench"
database=$bench_database
bin=$(postgres_bin)
psql -q "$database" -c \
  "INSERT INTO partner_organizations SELECT format('org_%s', o), 'x' FROM generate_series(0, 49) o" \
  -c "INSERT INTO partner_webhook_endpoints (organization_id, url, secret, enabled)
      SELECT id, 'https://partner.example/hooks', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', false
      FROM partner_organizations" \
  -c "INSERT INTO partner_orders SELECT 'org_0', 'u' || n, ARRAY['meta'], 'A', 'C', 1,
      '2026-03-01', '2026-04-30', 'booked', 'PO', now() FROM generate_series(0, 99) n"
if [ -n "${BASELINE:-}" ]; then
  psql -q "$database" -c "CREATE DATABASE baseline"
  for migration in $(git ls-tree --name-only "$BASELINE" src/store/migrations/ | sort); do
    git show "$BASELINE:$migration" | psql -q -v ON_ERROR_STOP=1 "${database%/*}/baseline" >/dev/null
  done
  psql -q "${database%/*}/baseline" -c \
    "INSERT INTO partner_organizations SELECT format('org_%s', o), 'x' FROM generate_series(0, 49) o" \
    -c "INSERT INTO partner_webhook_endpoints (organization_id, url, secret, enabled)
        SELECT id, 'https://partner.example/hooks', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', false
        FROM partner_organizations"
  read -r -a baseline_modes <<<"${BASELINE_MODES:-baseline-none baseline}"
  modes+=("${baseline_modes[@]}")
fi
# The host's own tables, migrated and registered as the hosting page says.
mapped_database=${database%/*}/mapped
make_mapped_database "$mapped_database" "$work"
psql -q "$mapped_database" -c \
  "INSERT INTO media_buys (buy_id, account_id, channels, advertiser, campaign, budget_ore,
       starts_on, ends_on, state, po_number)
   SELECT format('00000000-0000-0000-0000-%s', pg_catalog.lpad(n::text, 12, '0'))::uuid, 1,
       ARRAY['meta'], 'A', 'C', 100, '2026-03-01', '2026-04-30', 'BOOKED', 'PO'
   FROM generate_series(0, 99) n"

# The capture mode's databases: copies switched to it while the server runs (with
# `wal_level = logical`, as .ci/servers.sh starts it), their slots dropped then, since
# single-user mode starts with the default `wal_level` unless told (a logical slot would stop
# it) and reads no slot anyway. The switch is what a host runs: `order-capture start`.
case " ${modes[*]} " in
  *capture*)
    psql -q "${database%/*}/template1" -c "CREATE DATABASE capture TEMPLATE ${database##*/}" \
      -c "CREATE DATABASE mapped_capture TEMPLATE ${mapped_database##*/}"
    cargo run -q --example standalone --features postgres -- --no-migrate \
      --database-url "${database%/*}/capture" order-capture start >/dev/null
    cargo run -q --example standalone --features postgres -- --no-migrate \
      --database-url "${database%/*}/mapped_capture" --schema-map "$work/schema-map.toml" \
      order-capture start >/dev/null
    psql -q -o /dev/null "$database" -c "SELECT pg_catalog.pg_drop_replication_slot(slot_name)
                            FROM pg_catalog.pg_replication_slots"
    ;;
esac

# Single-user mode needs the server stopped, and runs as the data directory's owner.
data=$(psql -Atc "SHOW data_directory" "$database")
run=()
[ "$(id -u)" = 0 ] && run=(runuser -u "$(stat -c %U "$data")" --)
"${run[@]}" "$bin/pg_ctl" -D "$data" -m fast -w stop >/dev/null

# Every organization's events stamped: what a reader of each feed would do.
stamp_all="SELECT partner_api_stamp_order_events(format('org_%s', o), 100000000) FROM generate_series(0, 49) o;"

# single_user DATABASE [COMMAND...]: PostgreSQL's backend on DATABASE, in single-user mode,
# reading statements from the standard input (under COMMAND, a profiler, when given).
single_user() {
  local database=$1
  shift
  "${run[@]}" "$@" "$bin/postgres" --single -D "$data" "${server_options[@]}" "$database"
}
server_options=()

# instructions DATABASE SETUP-STATEMENT INSERTS TABLE [AFTER]: the backend's total for the
# setup, INSERTS single-row inserts into TABLE (`crate` or `mapped`) and the statements AFTER
# them. A statement that fails fails the bench: the cost of failing inserts is no figure.
instructions() {
  local database=$1 setup=$2 inserts=$3 table=$4 after=${5:-} log=$work/single-user.log
  {
    echo "$setup"
    for i in $(seq 1 "$inserts"); do
      if [ "$table" = mapped-updates ]; then
        echo "UPDATE media_buys SET budget_ore = budget_ore + 100 WHERE buy_id = '00000000-0000-0000-0000-$(printf %012d $((i % 100)))';"
      elif [ "$table" = updates ]; then
        echo "UPDATE partner_orders SET budget_dkk = budget_dkk + 1 WHERE organization_id = 'org_0' AND id = 'u$((i % 100))';"
      elif [ "$table" = mapped ]; then
        echo "INSERT INTO media_buys (account_id, channels, advertiser, campaign, budget_ore, starts_on, ends_on, state, po_number) VALUES ($((i % 50 + 1)), ARRAY['meta'], 'A', 'C', 100, '2026-03-01', '2026-04-30', 'BOOKED', 'PO');"
      else
        echo "INSERT INTO partner_orders VALUES ('org_$((i % 50))', md5(random()::text || clock_timestamp()::text), ARRAY['meta'], 'A', 'C', 1, '2026-03-01', '2026-04-30', 'booked', 'PO', now());"
      fi
    done
    echo "$after"
  } | single_user "$database" valgrind --tool=callgrind --callgrind-out-file=/dev/null \
    >"$log" 2>&1
  if grep -Eq '(ERROR|FATAL|PANIC): ' "$log"; then
    grep -E '(ERROR|FATAL|PANIC): ' "$log" | head -n 5 >&2
    echo "error: a statement failed in $database" >&2
    return 1
  fi
  sed -n 's/.*Collected : //p' "$log"
}

echo "order writes, one a transaction; PostgreSQL $("$bin/postgres" --version | awk '{print $3}') backend in single-user mode under callgrind"
printf '%-10s %-18s %14s %8s\n' table mode "instr./write" "of none"
declare -A per_insert
for mode in "${modes[@]}"; do
  case $mode in
    none | triggers | stamped | endpoints | provider-index | other-provider-index)
      database_name=postgres table=crate relation=partner_orders trigger=partner_orders_webhooks ;;
    updates-none | updates)
      database_name=postgres table=updates relation=partner_orders trigger=partner_orders_webhooks ;;
    mapped-updates-none | mapped-updates)
      database_name=mapped table=mapped-updates relation=media_buys trigger=partner_api_orders ;;
    mapped-none | mapped)
      database_name=mapped table=mapped relation=media_buys trigger=partner_api_orders ;;
    capture) database_name=capture table=crate ;;
    updates-capture) database_name=capture table=updates ;;
    mapped-capture) database_name=mapped_capture table=mapped ;;
    mapped-updates-capture) database_name=mapped_capture table=mapped-updates ;;
    baseline-none | baseline | baseline-stamped | baseline-endpoints)
      database_name=baseline table=crate relation=partner_orders trigger=USER ;;
    *) echo "error: unknown mode $mode" >&2; exit 2 ;;
  esac
  state=ENABLE
  case $mode in *none | *provider-index) state=DISABLE ;; esac
  # A provider's own index, built and dropped outside the count.
  provider_index=
  case $mode in
    provider-index) provider_index=meta ;;
    other-provider-index) provider_index=google ;;
  esac
  if [ -n "$provider_index" ]; then
    printf '%s\n' "CREATE INDEX partner_orders_for_bench ON partner_orders USING btree (organization_id, created_at DESC, id DESC) WHERE providers && ARRAY[E'$provider_index']::text[];" |
      single_user "$database_name" >"$work/prepare.log" 2>&1
    if grep -Eq '(ERROR|FATAL|PANIC): ' "$work/prepare.log"; then
      grep -E '(ERROR|FATAL|PANIC): ' "$work/prepare.log" | head -n 5 >&2
      echo "error: building the provider's index for $mode failed" >&2
      exit 1
    fi
  fi
  setup="ALTER TABLE $relation $state TRIGGER $trigger;"
  server_options=()
  case $mode in
    # The switch disabled the triggers: nothing to set but the server's log level.
    *capture) setup= server_options=(-c wal_level=logical) ;;
  esac
  after=
  case $mode in
    stamped | baseline-stamped) after=$stamp_all ;;
    endpoints | baseline-endpoints)
      after="SELECT partner_api_open_feeds_for_webhooks(1000);
SELECT partner_api_stamp_for_webhooks(1000, 100000000);" ;;
  esac
  if [ "$table" != mapped ] && [ "$table" != mapped-updates ]; then
    enabled=false
    case $mode in *endpoints) enabled=true ;; esac
    setup="$setup
UPDATE partner_webhook_endpoints SET enabled = $enabled;"
    # The events earlier modes left unstamped, stamped outside the count: each counted run
    # then stamps its own inserts' events alone.
    if [ -n "$after" ]; then
      printf '%s\n' "$stamp_all" | single_user "$database_name" >"$work/prepare.log" 2>&1
      if grep -Eq '(ERROR|FATAL|PANIC): ' "$work/prepare.log"; then
        grep -E '(ERROR|FATAL|PANIC): ' "$work/prepare.log" | head -n 5 >&2
        echo "error: stamping the events left before $mode failed" >&2
        exit 1
      fi
    fi
  fi
  few=$(instructions "$database_name" "$setup" "$N_FEW" "$table" "$after")
  many=$(instructions "$database_name" "$setup" "$N_MANY" "$table" "$after")
  [ -n "$few" ] && [ -n "$many" ] || { echo "error: callgrind counted nothing for $mode" >&2; exit 1; }
  if [ -n "$provider_index" ]; then
    echo "DROP INDEX partner_orders_for_bench;" | single_user "$database_name" >"$work/prepare.log" 2>&1
  fi
  per_insert[$mode]=$(((many - few) / (N_MANY - N_FEW)))
  case $mode in
    none | triggers | stamped | endpoints | *provider-index | capture) base=none ;;
    updates*) base=updates-none ;;
    mapped-updates*) base=mapped-updates-none ;;
    mapped*) base=mapped-none ;;
    *) base=baseline-none ;;
  esac
  none=${per_insert[$base]:-}
  ratio=-
  [ -n "$none" ] && ratio=$(awk "BEGIN { printf \"%.3f\", $none / ${per_insert[$mode]} }")
  printf '%-10s %-18s %14d %8s\n' "$table" "$mode" "${per_insert[$mode]}" "$ratio"
done
