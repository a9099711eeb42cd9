#!/usr/bin/env bash
# Load harness: the partner API against bare hyper serving the identical bytes.
#
#   bash benches/load.sh                 # RUNS=5 DURATION=5 CONNECTIONS=32 by default
#
# Builds both servers in release mode, captures the host's responses for /v1/me and /v1/orders
# (100 orders of the demo data) with curl, and serves those bytes from `examples/baseline.rs`.
# Three servers are measured: `baseline` (those bytes, no partner-api code), `api` (the same
# hyper loop serving `PartnerApi` itself: the library's request path) and `host` (the
# standalone host, with its tower-http layers: request ids, access log span, CatchPanic,
# request timeout; logging at RUST_LOG=warn so no line is written per request). Per route,
# it runs wrk against a fresh process of each in turn, RUNS times, with the server pinned to CPU 0 and wrk to CPU 1, and prints the medians
# of requests/s, p50 and p99 latency, and resident memory after the warm-up and at its peak.
# The ratios api/baseline and host/baseline are medians of the ratios of each run's servers,
# measured back to back, so drift of the machine cancels. It fails when any request is not a 200.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-5}
DURATION=${DURATION:-5}
CONNECTIONS=${CONNECTIONS:-32}

if ! command -v wrk >/dev/null; then
  echo "installing wrk (Debian package)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
cargo build --quiet --release --example standalone --example baseline
bin=target/release/examples
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

# start CMD...: runs CMD on CPU 0, sets pid and base.
start() {
  : >"$work/out"
  RUST_LOG=${RUST_LOG:-warn} taskset -c 0 "$@" --listen 127.0.0.1:0 >"$work/out" 2>/dev/null &
  pid=$!
  for _ in $(seq 1 100); do
    base=$(sed -n 's/^listening on //p' "$work/out" | head -n 1)
    [ -n "$base" ] && return 0
    sleep 0.05
  done
  echo "server did not start: $*" >&2
  exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }
rss_kib() { awk -v key="$1:" '$1 == key { print $2 }' "/proc/$pid/status"; }

start "$bin/standalone"
key=$(grep -o 'Bearer [A-Za-z0-9_]*' "$work/out" | head -n 1 | cut -d' ' -f2)
for route in me orders; do
  curl -s --include -H "Authorization: Bearer $key" "$base/v1/$route" >"$work/$route.http"
done
stop

# measure URL: one wrk run on CPU 1; prints "rps p50 p99" (latencies in microseconds).
measure() {
  taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d1s -H "Authorization: Bearer $key" "$1" >/dev/null
  taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d"${DURATION}s" --latency \
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
    END { printf "%.0f %.0f %.0f\n", rps, p50, p99 }' "$work/wrk"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "load: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(date -u +%Y-%m-%d)"
echo "wrk -t1 -c$CONNECTIONS -d${DURATION}s, $RUNS runs each, fresh server per run; /v1/orders body $(( $(wc -c <"$work/orders.http") )) bytes with headers"
printf '%-8s %-9s %10s %8s %8s %12s %12s\n' route server "req/s" "p50 us" "p99 us" "RSS warm KiB" "RSS peak KiB"
for route in me orders; do
  for server in baseline api host; do : >"$work/$route.$server"; done
  : >"$work/$route.api.ratios"
  : >"$work/$route.host.ratios"
  for _ in $(seq 1 "$RUNS"); do
    for server in baseline api host; do
      case $server in
        baseline) start "$bin/baseline" --route "/v1/$route=$work/$route.http" ;;
        api) start "$bin/baseline" --partner-api ;;
        host) start "$bin/standalone" ;;
      esac
      taskset -c 1 wrk -t1 -c"$CONNECTIONS" -d1s -H "Authorization: Bearer $key" "$base/v1/$route" >/dev/null
      warm=$(rss_kib VmRSS)
      result=$(measure "$base/v1/$route")
      echo "$result $warm $(rss_kib VmHWM)" >>"$work/$route.$server"
      stop
    done
    for server in api host; do
      paste -d' ' "$work/$route.baseline" "$work/$route.$server" | tail -n 1 |
        awk '{ printf "%.4f\n", $6 / $1 }' >>"$work/$route.$server.ratios"
    done
  done
  for server in baseline api host; do
    file="$work/$route.$server"
    rps=$(cut -d' ' -f1 "$file" | median)
    printf '%-8s %-9s %10s %8s %8s %12s %12s\n' "/v1/$route" "$server" "$rps" \
      "$(cut -d' ' -f2 "$file" | median)" "$(cut -d' ' -f3 "$file" | median)" \
      "$(cut -d' ' -f4 "$file" | median)" "$(cut -d' ' -f5 "$file" | median)"
  done
  for server in api host; do
    printf '%-8s ratio %s/baseline: %s (runs: %s)\n' "/v1/$route" "$server" \
      "$(median <"$work/$route.$server.ratios")" "$(tr '\n' ' ' <"$work/$route.$server.ratios" | xargs)"
  done
done
