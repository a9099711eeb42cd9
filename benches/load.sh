#!/usr/bin/env bash
# Load harness: the partner API against bare hyper serving the identical bytes.
#
#   bash benches/load.sh                 # RUNS=5 DURATION=5 CONNECTIONS=32 by default
#   METRICS=0 POSTGRES=0 bash benches/load.sh   # skip the metrics or PostgreSQL sections
#   CALLGRIND=0 bash benches/load.sh    # skip the instructions per request (benches/instructions.sh)
#   SERVER_CPU=1 bash benches/load.sh    # each server on its whole CPU (default 0.7: a cgroup quota)
#   ROUTES=me bash benches/load.sh       # the three servers compared on these routes only (default: me orders events; empty: none)
#   WORKERS=0 bash benches/load.sh       # skip the multi-core section (1 and 2 runtime workers, one key and 1,000)
#
# Builds both servers in release mode, captures the host's responses for /v1/me, /v1/orders
# (100 orders of the demo data) and /v1/events (its oldest 100 events) with curl, and serves those bytes from `examples/baseline.rs`.
# Three servers are measured: `baseline` (those bytes, no partner-api code), `api` (the same
# hyper loop serving `PartnerApi` itself: the library's request path) and `host` (the
# standalone host, with its layers: request ids, access log span, CatchPanic, request
# timeout; logging at RUST_LOG=warn so no line is written per request). Per route, RUNS
# times, it starts a fresh process of each (all three pinned to CPU 0, one runtime worker;
# wrk on CPU 1), warms each for a second, then measures them in turns of one-second wrk runs,
# DURATION turns each, each server first, second and third in turn: a shared machine's speed
# changes within seconds, and interleaving puts those changes on all three alike (runs of
# five seconds each, one server after the other, varied from 0.74 to 1.15 on one evening).
# It prints the medians over runs of requests/s (a run's mean over its slices), p50 and p99
# latency (a run's median over its slices), resident memory after the warm-up and at its
# peak, and the share of its one CPU each server used during its slices (its CPU time from
# /proc over the seconds wrk reports it loaded the server). The ratios api/baseline and host/baseline are medians of each run's
# ratios, counted only from runs where both servers used at least MIN_CPU_SHARE (default
# 0.95) of their CPU: below it something else (wrk, the machine) set the pace, and the ratio
# is refused. It fails when any request is not a 200.
#
# Then the metrics' cost (METRICS=0 skips it): the host with the Prometheus exporter installed
# (--metrics-listen, scraped every second) against the same host without, alternated.
# Then multi-core (WORKERS=0 skips it): the library's server and the host on 1 and 2 runtime
# workers, one hot key and 1,000 keys, and the server's CPU time per request of each.
# Then the PostgreSQL path (POSTGRES=0 skips it): on a throwaway PostgreSQL (.ci/servers.sh),
# one seed of 50 organizations x 200 orders, the standalone host on MemoryStore (`memory`), on
# PostgreSQL with its caches (`pg`, the default) and without them (`pg-nocache`), alternated
# in one run; then a deep page (DEEP=0 skips it): page 50 of an organization of 5,000 orders
# (pages of 100, found by following the Link headers) against its first page, both on
# PostgreSQL without caches (the cost of the query) and the first page with them; then the
# revocation delay over many trials (benches/revocation_delay.rs).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
ROUTES=${ROUTES-me orders events}
for route in $ROUTES; do
  case $route in
    me | orders | events) ;;
    *) echo "ROUTES: '$route' is none of me, orders, events" >&2 && exit 2 ;;
  esac
done
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-32}

if ! command -v wrk >/dev/null; then
  echo "installing wrk (Debian package)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
cargo build --quiet --release --features postgres --example standalone --example baseline
bin=target/release/examples
work=$(mktemp -d)
pid=
source .ci/servers.sh
# The servers of one interleaved run (below), by name.
declare -A pids=() bases=()
scraper=
# In the EXIT trap, under set -e: a server that already died must not stop the rest.
cleanup() {
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
  [ -z "$scraper" ] || kill "$scraper" 2>/dev/null || true
  for held in "${pids[@]}"; do kill "$held" 2>/dev/null || true; done
  rm -rf "$work" || true
  stop_servers
  # A cgroup goes once its process has exited.
  for group in "${cgroups[@]}"; do
    for _ in $(seq 1 50); do rmdir "$group" 2>/dev/null && break; sleep 0.1; done
  done
}
trap cleanup EXIT

# Each server is held to SERVER_CPU of its CPU (default 0.7; 1 for its whole CPU) through a
# CPU-quota cgroup of its own (cgroup v2's cpu.max, or v1's cpu.cfs_quota_us, a 10 ms
# period): wrk on the one other CPU cannot keep a server on a whole CPU busy on this
# project's 2-vCPU machines (a 27 KB page costs the client about as much to read as the
# server to send: the baselines ran at 0.80 to 0.90 of their CPU), while a server held to
# less is the bottleneck again, and the servers are compared at equal CPU. "CPU used" is the
# share of that allotment. Where no cgroup can be made, servers get their whole CPU (said in
# the header), and the CPU check refuses the ratios wrk paced.
SERVER_CPU=${SERVER_CPU:-0.7}
cgroup_root=
if awk -v share="$SERVER_CPU" 'BEGIN { exit !(share > 0 && share < 1) }'; then
  if [ -w /sys/fs/cgroup/cgroup.subtree_control ]; then
    cgroup_root=/sys/fs/cgroup
    echo +cpu >"$cgroup_root/cgroup.subtree_control" 2>/dev/null || true
  elif [ -w /sys/fs/cgroup/cpu ]; then
    cgroup_root=/sys/fs/cgroup/cpu
  else
    echo "no writable cgroup CPU controller: each server gets its whole CPU" >&2
  fi
fi
[ -n "$cgroup_root" ] || SERVER_CPU=1
cgroups=()
# held_to_its_share PID: moves PID into a cgroup of its own allowed SERVER_CPU of a CPU.
held_to_its_share() {
  [ -n "$cgroup_root" ] || return 0
  local group="$cgroup_root/partner-api-load-$1"
  local quota
  quota=$(awk -v share="$SERVER_CPU" 'BEGIN { printf "%d", share * 10000 }')
  mkdir "$group"
  if [ -e "$group/cpu.max" ]; then
    echo "$quota 10000" >"$group/cpu.max"
  else
    echo 10000 >"$group/cpu.cfs_period_us"
    echo "$quota" >"$group/cpu.cfs_quota_us"
  fi
  echo "$1" >"$group/cgroup.procs"
  cgroups+=("$group")
}

# start CMD...: runs CMD on CPU 0, sets pid and base.
start() {
  : >"$work/out"
  # One runtime worker: the server has one CPU, and two workers taking turns on it made
  # single runs of the same pair vary from 0.62 to 1.02.
  RUST_LOG=${RUST_LOG:-warn} TOKIO_WORKER_THREADS=1 taskset -c 0 "$@" --listen 127.0.0.1:0 >"$work/out" 2>/dev/null &
  pid=$!
  held_to_its_share "$pid"
  for _ in $(seq 1 600); do
    base=$(sed -n 's/^listening on //p' "$work/out" | head -n 1)
    [ -n "$base" ] && return 0
    sleep 0.05
  done
  echo "server did not start: $*" >&2
  exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
# rss_kib KEY [PID]: VmRSS or VmHWM of PID (default: $pid).
rss_kib() { awk -v key="$1:" '$1 == key { print $2 }' "/proc/${2:-$pid}/status"; }
# start_as NAME CMD...: start, for one of the servers that run at once; sets pids and bases.
start_as() {
  local name=$1
  shift
  start "$@"
  pids[$name]=$pid
  bases[$name]=$base
  pid=
}
stop_all() {
  for name in "${!pids[@]}"; do
    kill "${pids[$name]}" 2>/dev/null
    wait "${pids[$name]}" 2>/dev/null || true
  done
  pids=()
  bases=()
}

start "$bin/standalone"
key=$(grep -o 'Bearer [A-Za-z0-9_]*' "$work/out" | head -n 1 | cut -d' ' -f2)
for route in me orders events; do
  curl -s --include -H "Authorization: Bearer $key" "$base/v1/$route" >"$work/$route.http"
done
stop

# measure URL: a warm-up second, then one wrk run of DURATION seconds on CPU 1; prints
# "rps p50 p99 seconds" (latencies in microseconds).
measure() {
  taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d1s -H "Authorization: Bearer $key" "$1" >/dev/null
  wrk_once "$1" "$DURATION"
}

# wrk_once URL SECONDS: one wrk run on CPU 1; prints "rps p50 p99 seconds" (the seconds wrk
# loaded the server, as it reports them).
wrk_once() {
  taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"${2}s" --latency \
    -H "Authorization: Bearer $key" "$1" >"$work/wrk"
  if grep -q 'Non-2xx\|Socket errors' "$work/wrk"; then
    cat "$work/wrk" >&2
    echo "error: requests failed" >&2
    exit 1
  fi
  awk '
    function us(v) { if (v ~ /us$/) return v + 0; if (v ~ /ms$/) return v * 1000; if (v ~ /s$/) return v * 1000000; return v }
    /Requests\/sec:/ { rps = $2 }
    $1 == "50%" { p50 = us($2) }
    $1 == "99%" { p99 = us($2) }
    / requests in / { for (i = 1; i < NF; i++) if ($i == "in") { d = $(i + 1); sub(/s,?$/, "", d) } }
    END { printf "%.0f %.0f %.0f %s\n", rps, p50, p99, d }' "$work/wrk"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# cpu_ticks PID: the CPU time PID (all its threads) has used, in clock ticks (user + system).
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# The least share of its CPU a server must use during its slices for a ratio to count: below
# it, wrk (or anything else on the machine), not the server, set the pace.
MIN_CPU_SHARE=${MIN_CPU_SHARE:-0.95}
ticks_per_second=$(getconf CLK_TCK)

echo "load: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(date -u +%Y-%m-%d)"
echo "wrk -t1 -c$CONNECTIONS, $RUNS runs of ${DURATION} one-second slices per server, interleaved; /v1/orders body $(( $(wc -c <"$work/orders.http") )) bytes with headers"
echo "each server held to $SERVER_CPU of its CPU (SERVER_CPU); CPU used is the share of that"
printf '%-8s %-9s %10s %8s %8s %12s %12s %9s\n' route server "req/s" "p50 us" "p99 us" "RSS warm KiB" "RSS peak KiB" "CPU used"
servers=(baseline api host)
for route in $ROUTES; do
  for server in "${servers[@]}"; do : >"$work/$route.$server"; done
  : >"$work/$route.api.ratios"
  : >"$work/$route.host.ratios"
  for _ in $(seq 1 "$RUNS"); do
    # Fresh servers for every run, all three up at once (on CPU 0; one is loaded at a time,
    # the others wait in epoll), measured in turns of one second, so that a change in the
    # machine's speed, which on a shared host comes and goes within seconds, falls on all
    # three alike.
    start_as baseline "$bin/baseline" --route "/v1/$route=$work/$route.http"
    start_as api "$bin/baseline" --partner-api
    start_as host "$bin/standalone"
    declare -A warm=()
    for server in "${servers[@]}"; do
      taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d1s -H "Authorization: Bearer $key" "${bases[$server]}/v1/$route" >/dev/null
      warm[$server]=$(rss_kib VmRSS "${pids[$server]}")
      : >"$work/slices.$server"
      : >"$work/cpu.$server"
    done
    for slice in $(seq 0 $((DURATION - 1))); do
      # Each server goes first, second and third in turn.
      for turn in 0 1 2; do
        server=${servers[$(((slice + turn) % 3))]}
        ticks=$(cpu_ticks "${pids[$server]}")
        wrk_once "${bases[$server]}/v1/$route" 1 >>"$work/slices.$server"
        # The server's CPU time in the slice (it idles while wrk starts and stops).
        echo "$(($(cpu_ticks "${pids[$server]}") - ticks))" >>"$work/cpu.$server"
      done
    done
    for server in "${servers[@]}"; do
      rps=$(awk '{ sum += $1 } END { printf "%.0f", sum / NR }' "$work/slices.$server")
      p50=$(cut -d' ' -f2 "$work/slices.$server" | median)
      p99=$(cut -d' ' -f3 "$work/slices.$server" | median)
      # CPU seconds over the seconds wrk loaded it.
      cpu=$(paste -d' ' "$work/cpu.$server" "$work/slices.$server" |
        awk -v hz="$ticks_per_second" -v share="$SERVER_CPU" \
          '{ ticks += $1; seconds += $5 } END { printf "%.3f", ticks / hz / seconds / share }')
      echo "$rps $p50 $p99 ${warm[$server]} $(rss_kib VmHWM "${pids[$server]}") $cpu" >>"$work/$route.$server"
    done
    stop_all
    for server in api host; do
      # A ratio of this run only when both servers used their whole CPU: else "-".
      paste -d' ' "$work/$route.baseline" "$work/$route.$server" | tail -n 1 |
        awk -v min="$MIN_CPU_SHARE" '{ if ($6 >= min && $12 >= min) printf "%.4f\n", $7 / $1; else print "-" }' \
        >>"$work/$route.$server.ratios"
    done
  done
  for server in baseline api host; do
    file="$work/$route.$server"
    rps=$(cut -d' ' -f1 "$file" | median)
    printf '%-8s %-9s %10s %8s %8s %12s %12s %9s\n' "/v1/$route" "$server" "$rps" \
      "$(cut -d' ' -f2 "$file" | median)" "$(cut -d' ' -f3 "$file" | median)" \
      "$(cut -d' ' -f4 "$file" | median)" "$(cut -d' ' -f5 "$file" | median)" \
      "$(cut -d' ' -f6 "$file" | median)"
  done
  for server in api host; do
    counted=$(grep -v '^-$' "$work/$route.$server.ratios" || true)
    if [ -z "$counted" ]; then
      printf '%-8s ratio %s/baseline: refused: in no run did both servers use %s of their CPU (runs: %s)\n' \
        "/v1/$route" "$server" "$MIN_CPU_SHARE" "$(tr '\n' ' ' <"$work/$route.$server.ratios" | xargs)"
    else
      printf '%-8s ratio %s/baseline: %s (runs: %s; "-": a server below %s of its CPU)\n' "/v1/$route" "$server" \
        "$(median <<<"$counted")" "$(tr '\n' ' ' <"$work/$route.$server.ratios" | xargs)" "$MIN_CPU_SHARE"
    fi
  done
done

# Instructions per request, the figure that compares across machines (CALLGRIND=0 skips it).
if [ "${CALLGRIND:-1}" = 1 ]; then
  echo
  bash benches/instructions.sh
fi

if [ "${METRICS:-1}" = 1 ]; then
  echo
  echo "Metrics: the host with the Prometheus exporter (--metrics-listen, scraped every second) and without"
  printf '%-10s %-13s %10s %8s %8s\n' route server "req/s" "p50 us" "p99 us"
  for route in me orders; do
    for server in host host-metrics; do : >"$work/$route.$server"; done
    for _ in $(seq 1 "$RUNS"); do
      for server in host host-metrics; do
        scraper=
        case $server in
          host) start "$bin/standalone" ;;
          host-metrics)
            start "$bin/standalone" --metrics-listen 127.0.0.1:0
            metrics_url=$(sed -n 's/^metrics on //p' "$work/out" | head -n 1)
            # A scrape a second, on wrk's core, as Prometheus would (every 15 s by default).
            (while sleep 1; do taskset -c 1 curl -s -o /dev/null "$metrics_url"; done) &
            scraper=$!
            ;;
        esac
        measure "$base/v1/$route" >>"$work/$route.$server"
        [ -z "$scraper" ] || kill "$scraper" 2>/dev/null || true
        scraper=
        stop
      done
    done
    for server in host host-metrics; do
      file="$work/$route.$server"
      printf '%-10s %-13s %10s %8s %8s\n' "/v1/$route" "$server" "$(cut -d' ' -f1 "$file" | median)" \
        "$(cut -d' ' -f2 "$file" | median)" "$(cut -d' ' -f3 "$file" | median)"
    done
    paste -d' ' "$work/$route.host" "$work/$route.host-metrics" | awk '{ printf "%.4f\n", $4 / $1 }' >"$work/$route.metrics.ratios"
    printf '%-10s ratio host-metrics/host: %s (runs: %s)\n' "/v1/$route" \
      "$(median <"$work/$route.metrics.ratios")" "$(tr '\n' ' ' <"$work/$route.metrics.ratios" | xargs)"
  done
fi

# Multi-core (WORKERS=0 skips it): the library's server (`api`) and the host on 1 and 2
# runtime workers, for one hot key and for 1,000 keys (each request the next key of a seed
# of 1,000 organizations), GET /v1/me. Servers and wrk share both CPUs, unpinned and
# unthrottled: what is compared is the server's CPU time per request (user + system, from
# /proc, over wrk's seconds), which stays flat when nothing on the path is shared between
# the workers more than it must be.
if [ "${WORKERS:-1}" = 1 ]; then
  python3 - "$work/keys.json" "$work/keys.txt" <<'PY'
import json, sys
orgs = [{"id": f"org_{o:04}", "name": f"Organization {o}"} for o in range(1000)]
keys = [{"key": f"pk_test_many_{o:04}_abcdefghijklmnopqrst", "organizationId": f"org_{o:04}"} for o in range(1000)]
json.dump({"organizations": orgs, "apiKeys": keys, "orders": []}, open(sys.argv[1], "w"))
open(sys.argv[2], "w").write("".join(k["key"] + "\n" for k in keys))
PY
  cat >"$work/keys.lua" <<'LUA'
local keys = {}
for line in io.lines(os.getenv("KEYS_FILE")) do keys[#keys + 1] = line end
local next_key = 0
request = function()
  next_key = next_key % #keys + 1
  return wrk.format("GET", "/v1/me", { ["Authorization"] = "Bearer " .. keys[next_key] })
end
LUA
  echo
  echo "multi-core: GET /v1/me, servers and wrk -t2 -c$CONNECTIONS unpinned on both CPUs, $RUNS runs of ${DURATION} s; CPU per request is the server's user + system time over its requests"
  printf '%-6s %8s %-10s %10s %10s %16s\n' server workers keys "req/s" "CPUs used" "CPU us/request"
  for server in api host; do
    for workers in 1 2; do
      for keys in one 1000; do
        case $server in
          api) command=("$bin/baseline" --partner-api --seed "$work/keys.json") ;;
          host) command=("$bin/standalone" --seed "$work/keys.json") ;;
        esac
        : >"$work/out"
        RUST_LOG=${RUST_LOG:-warn} TOKIO_WORKER_THREADS=$workers "${command[@]}" --listen 127.0.0.1:0 >"$work/out" 2>/dev/null &
        pid=$!
        base=
        for _ in $(seq 1 600); do
          base=$(sed -n 's/^listening on //p' "$work/out" | head -n 1)
          [ -n "$base" ] && break
          sleep 0.05
        done
        [ -n "$base" ] || { echo "server did not start: ${command[*]}" >&2; exit 1; }
        : >"$work/workers.runs"
        for _ in $(seq 1 "$RUNS"); do
          before=$(cpu_ticks "$pid")
          if [ "$keys" = one ]; then
            wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" -H "Authorization: Bearer pk_test_many_0000_abcdefghijklmnopqrst" "$base/v1/me" >"$work/wrk"
          else
            KEYS_FILE="$work/keys.txt" wrk -t2 -c"$CONNECTIONS" -d"${DURATION}s" -s "$work/keys.lua" "$base/v1/me" >"$work/wrk"
          fi
          after=$(cpu_ticks "$pid")
          if grep -q 'Non-2xx\|Socket errors' "$work/wrk"; then
            cat "$work/wrk" >&2
            echo "error: requests failed" >&2
            exit 1
          fi
          awk -v ticks=$((after - before)) -v hz="$ticks_per_second" '
            / requests in / { n = $1; for (i = 1; i < NF; i++) if ($i == "in") { d = $(i + 1); sub(/s,?$/, "", d) } }
            END { printf "%.0f %.2f %.2f\n", n / d, ticks / hz / d, ticks / hz * 1e6 / n }' "$work/wrk" >>"$work/workers.runs"
        done
        stop
        printf '%-6s %8s %-10s %10s %10s %16s\n' "$server" "$workers" "$keys" \
          "$(cut -d' ' -f1 "$work/workers.runs" | median)" "$(cut -d' ' -f2 "$work/workers.runs" | median)" \
          "$(cut -d' ' -f3 "$work/workers.runs" | median)"
      done
    done
  done
fi

[ "${POSTGRES:-1}" = 1 ] || exit 0

echo
echo "PostgreSQL path: the same host on MemoryStore, on PostgreSQL with its caches, and without"
start_postgres
python3 - "$work/seed.json" <<'PY'
import json, sys
orgs = [{"id": f"org_{o:02}", "name": f"Organization {o}"} for o in range(50)]
keys = [{"key": f"pk_test_load_org_{o:02}_abcdefghijklmnop", "organizationId": f"org_{o:02}"} for o in range(50)]
orders = [{"organizationId": f"org_{o:02}", "id": f"ord_{o:02}_{n:04}", "providers": ["meta", "google"],
           "advertiserName": f"Advertiser {n}", "campaignName": f"Campaign {n} of organization {o}",
           "budgetDkk": 10000 + n * 1250, "startDate": "2026-03-01", "endDate": "2026-04-30",
           "status": "booked", "externalReference": f"PO-{o}-{n}",
           "createdAt": f"2026-01-{1 + n // 24:02}T{n % 24:02}:00:00.000Z"}
          for o in range(50) for n in range(200)]
json.dump({"organizations": orgs, "apiKeys": keys, "orders": orders}, open(sys.argv[1], "w"))
PY
database="${PARTNER_API_TEST_DATABASE_URL%/*}/partner_api_load_$$"
psql -q "$PARTNER_API_TEST_DATABASE_URL" -c "CREATE DATABASE partner_api_load_$$" >/dev/null
key=pk_test_load_org_00_abcdefghijklmnop
# Seeded once; every later start reads what is there.
start "$bin/standalone" --seed "$work/seed.json" --database-url "$database"
stop
printf '%-10s %-11s %10s %8s %8s\n' route server "req/s" "p50 us" "p99 us"
for route in me orders events; do
  for server in memory pg pg-nocache; do : >"$work/$route.$server"; done
  for _ in $(seq 1 "$RUNS"); do
    for server in memory pg pg-nocache; do
      case $server in
        memory) start "$bin/standalone" --seed "$work/seed.json" ;;
        pg) start "$bin/standalone" --database-url "$database" ;;
        pg-nocache) start "$bin/standalone" --database-url "$database" --no-cache ;;
      esac
      measure "$base/v1/$route" >>"$work/$route.$server"
      stop
    done
  done
  for server in memory pg pg-nocache; do
    file="$work/$route.$server"
    printf '%-10s %-11s %10s %8s %8s\n' "/v1/$route" "$server" "$(cut -d' ' -f1 "$file" | median)" \
      "$(cut -d' ' -f2 "$file" | median)" "$(cut -d' ' -f3 "$file" | median)"
  done
  for server in pg pg-nocache; do
    paste -d' ' "$work/$route.memory" "$work/$route.$server" | awk '{ printf "%.4f\n", $4 / $1 }' >"$work/$route.$server.ratios"
    printf '%-10s ratio %s/memory: %s (runs: %s)\n' "/v1/$route" "$server" \
      "$(median <"$work/$route.$server.ratios")" "$(tr '\n' ' ' <"$work/$route.$server.ratios" | xargs)"
  done
done

if [ "${DEEP:-1}" != 0 ]; then
  echo
  echo "Deep page: page 50 of 5,000 orders (keyset) against the first page, on PostgreSQL"
  python3 - "$work/deep.json" <<'PY'
import json, sys
orders = [{"organizationId": "org_deep", "id": f"deep_{n:05}", "providers": ["meta", "google"],
           "advertiserName": f"Advertiser {n}", "campaignName": f"Campaign {n}",
           "budgetDkk": 10000 + n, "startDate": "2026-03-01", "endDate": "2026-04-30",
           "status": "booked", "externalReference": f"PO-{n}",
           # ties: three orders a second
           "createdAt": f"2026-02-{1 + n // 3 // 86400:02}T{n // 3 // 3600 % 24:02}:{n // 3 // 60 % 60:02}:{n // 3 % 60:02}.000Z"}
          for n in range(5000)]
json.dump({"organizations": [{"id": "org_deep", "name": "Deep"}],
           "apiKeys": [{"key": "pk_test_load_deep_abcdefghijklmnop", "organizationId": "org_deep"}],
           "orders": orders}, open(sys.argv[1], "w"))
PY
  deep_key=pk_test_load_deep_abcdefghijklmnop
  key=$deep_key
  start "$bin/standalone" --seed "$work/deep.json" --database-url "$database"
  stop
  # The path of page 50, by following 49 Link headers.
  start "$bin/standalone" --database-url "$database" --no-cache
  page="/v1/orders"
  for _ in $(seq 1 49); do
    page=$(curl -s -D - -o /dev/null -H "Authorization: Bearer $deep_key" "$base$page" \
      | sed -n 's/^[Ll]ink: <\([^>]*\)>.*/\1/p' | tr -d '\r')
    [ -n "$page" ] || { echo "no next link" >&2; exit 1; }
  done
  stop
  printf '%-26s %10s %8s %8s\n' page "req/s" "p50 us" "p99 us"
  for kind in first-nocache deep-nocache first-cached; do : >"$work/deep.$kind"; done
  for _ in $(seq 1 "$RUNS"); do
    for kind in first-nocache deep-nocache first-cached; do
      case $kind in
        first-cached) start "$bin/standalone" --database-url "$database" ;;
        *) start "$bin/standalone" --database-url "$database" --no-cache ;;
      esac
      case $kind in
        deep-*) url="$base$page" ;;
        *) url="$base/v1/orders" ;;
      esac
      measure "$url" >>"$work/deep.$kind"
      stop
    done
  done
  for kind in first-nocache deep-nocache first-cached; do
    file="$work/deep.$kind"
    printf '%-26s %10s %8s %8s\n' "$kind" "$(cut -d' ' -f1 "$file" | median)" \
      "$(cut -d' ' -f2 "$file" | median)" "$(cut -d' ' -f3 "$file" | median)"
  done
  paste -d' ' "$work/deep.first-nocache" "$work/deep.deep-nocache" | awk '{ printf "%.4f\n", $1 / $4 }' >"$work/deep.ratios"
  printf 'cost of page 50 / first page (uncached, req/s ratio): %s (runs: %s)\n' \
    "$(median <"$work/deep.ratios")" "$(tr '\n' ' ' <"$work/deep.ratios" | xargs)"
fi

echo
TRIALS=${TRIALS:-500} cargo bench --quiet --features postgres --bench revocation_delay 2>/dev/null | grep 'revocation delay'
