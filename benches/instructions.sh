#!/usr/bin/env bash
# User-space instructions per request (callgrind), the figure that compares across machines:
# whatever the machine's load or speed, a request costs the same instructions.
#
#   bash benches/instructions.sh         # benches/load.sh runs it (CALLGRIND=0 skips it there)
#   SERVERS= ROUTES= bash benches/instructions.sh   # the host's layers alone (LAYERS=0 skips them)
#
# For each server of the load harness (`baseline`: bare hyper sending the captured bytes;
# `api`: the same loop serving `PartnerApi` over the demo data, counting usage, with the
# events feed; `host`: the standalone host with its layers) and each route (/v1/me,
# /v1/orders, /v1/events: its oldest 100 events), it runs the server under callgrind twice, once answering FEW and once MANY
# requests on one keep-alive connection, and divides the difference of the two totals by
# MANY - FEW: start-up, the first requests' warm-up and shutdown cancel out. Every thread of
# the process is counted (the runtime has one worker, as in the load harness). Then, for the
# library's server, the instructions per request of the crate's own functions on the path
# (inclusive: what each calls counts in it), by the same difference.
set -euo pipefail
cd "$(dirname "$0")/.."

FEW=${FEW:-300}
MANY=${MANY:-1300}
# API_VERSION=2026-11-28 sends `Api-Version` with every request (the demo keys are pinned to the
# first version): the cost of each version. SERVERS and ROUTES narrow the table.
API_VERSION=${API_VERSION:-}
# KEY_ARGS="--key-version 2026-11-28 --key-provider meta" has the library's server issue a key
# so (examples/baseline.rs's --key-* flags) and ask with it: the cost of a key pinned to a
# version or restricted. It applies to the `api` server only (the others answer the demo key).
KEY_ARGS=${KEY_ARGS:-}
SERVERS=${SERVERS-baseline api host}
ROUTES=${ROUTES-me orders events}

if ! command -v valgrind >/dev/null; then
  echo "installing valgrind (Debian package)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
fi
# Symbols for the per-function figures; the code is the release build's.
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
  cargo build --quiet --release --features postgres --example standalone --example baseline
bin=target/release/examples
work=$(mktemp -d)
pid=
cleanup() {
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
  rm -rf "$work" || true
}
trap cleanup EXIT

# under_callgrind OUT CMD...: starts CMD under callgrind (its profile in OUT), sets pid and
# base once it listens.
under_callgrind() {
  local out=$1
  shift
  : >"$work/stdout"
  RUST_LOG=warn TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$@" --listen 127.0.0.1:0 >"$work/stdout" 2>"$work/valgrind.log" &
  pid=$!
  for _ in $(seq 1 1200); do
    base=$(sed -n 's/^listening on //p' "$work/stdout" | head -n 1)
    [ -n "$base" ] && return 0
    sleep 0.05
  done
  cat "$work/valgrind.log" >&2
  echo "server did not start under callgrind: $*" >&2
  exit 1
}

# requests URL N: N GET requests with the key on one keep-alive connection; fails unless
# each is a 200.
requests() {
  python3 - "$1" "$2" "$key" "$API_VERSION" <<'PY'
import http.client, sys, urllib.parse
url, n, key, version = urllib.parse.urlsplit(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
headers = {"Authorization": "Bearer " + key}
if version:
    headers["Api-Version"] = version
connection = http.client.HTTPConnection(url.hostname, url.port)
for _ in range(n):
    connection.request("GET", url.path, headers=headers)
    response = connection.getresponse()
    response.read()
    if response.status != 200:
        sys.exit(f"{url.path}: {response.status}")
PY
}

# profile NAME N CMD...: the callgrind profile of CMD answering N requests of $route.
profile() {
  local name=$1 n=$2
  shift 2
  under_callgrind "$work/$name.$route.$n.out" "$@"
  local key=$demo_key
  if [ "$name" = api ] && [ -n "$KEY_ARGS" ]; then
    key=$(sed -n 's/^key: //p' "$work/stdout")
  fi
  requests "$base/v1/$route" "$n"
  kill -INT "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

total() { awk '/^(summary|totals):/ { print $2 }' "$1" | tail -n 1; }

# The key and the captured responses, from the standalone host on the demo data.
: >"$work/stdout"
"$bin/standalone" --listen 127.0.0.1:0 >"$work/stdout" 2>/dev/null &
pid=$!
for _ in $(seq 1 600); do
  base=$(sed -n 's/^listening on //p' "$work/stdout" | head -n 1)
  [ -n "$base" ] && break
  sleep 0.05
done
demo_key=$(grep -o 'Bearer [A-Za-z0-9_]*' "$work/stdout" | head -n 1 | cut -d' ' -f2)
for route in me orders events; do
  curl -s --include -H "Authorization: Bearer $demo_key" ${API_VERSION:+-H "Api-Version: $API_VERSION"} \
    "$base/v1/$route" >"$work/$route.http"
done
kill "$pid"
wait "$pid" 2>/dev/null || true
pid=

echo "instructions per request (callgrind, user space, one keep-alive connection, ($MANY - $FEW) requests${API_VERSION:+, Api-Version: $API_VERSION}${KEY_ARGS:+, the api server asks with a key of: $KEY_ARGS})"
printf '%-10s %14s %14s %14s %14s %14s\n' route baseline api host "api added" "host added"
declare -A added=()
for route in $ROUTES; do
  declare -A per=([baseline]=0 [api]=0 [host]=0)
  for server in $SERVERS; do
    for n in "$FEW" "$MANY"; do
      case $server in
        baseline) profile "$server" "$n" "$bin/baseline" --route "/v1/$route=$work/$route.http" ;;
        # shellcheck disable=SC2086 # KEY_ARGS is a list of flags
        api) profile "$server" "$n" "$bin/baseline" --partner-api $KEY_ARGS ;;
        host) profile "$server" "$n" "$bin/standalone" ;;
      esac
    done
    per[$server]=$((($(total "$work/$server.$route.$MANY.out") - $(total "$work/$server.$route.$FEW.out")) / (MANY - FEW)))
  done
  added[$route]=$((per[api] - per[baseline]))
  printf '%-10s %14s %14s %14s %14s %14s\n' "/v1/$route" "${per[baseline]}" "${per[api]}" "${per[host]}" \
    "$((per[api] - per[baseline]))" "$((per[host] - per[baseline]))"
done

# Each layer of the standalone host by itself around the API, in process (benches/host_layers.rs:
# GET /v1/me, the body read to its end): its instructions per request, and those it adds to
# the API alone. LAYERS=0 skips it.
if [ "${LAYERS:-1}" != 0 ]; then
  if ! CARGO_PROFILE_BENCH_DEBUG=line-tables-only cargo bench --bench host_layers --no-run >"$work/build.log" 2>&1; then
    cat "$work/build.log" >&2
    exit 1
  fi
  layers=$(grep -o 'target/release/deps/host_layers-[0-9a-f]*' "$work/build.log" | head -n 1)
  echo
  echo "the host's layers, each alone around the API (benches/host_layers.rs, GET /v1/me in process, ($MANY - $FEW) calls)"
  printf '%-20s %14s %14s\n' case instructions "added to api"
  api_alone=
  for case in $("$layers" --list); do
    for n in "$FEW" "$MANY"; do
      if ! valgrind --tool=callgrind --callgrind-out-file="$work/layers.$case.$n.out" \
        "$layers" --only "$case" --calls "$n" 2>"$work/valgrind.log" >/dev/null; then
        cat "$work/valgrind.log" >&2
        exit 1
      fi
    done
    per_case=$((($(total "$work/layers.$case.$MANY.out") - $(total "$work/layers.$case.$FEW.out")) / (MANY - FEW)))
    api_alone=${api_alone:-$per_case}
    printf '%-20s %14s %14s\n' "$case" "$per_case" "$((per_case - api_alone))"
  done
fi

# The crate's functions on the library's path, per request (inclusive), from the api server's
# two profiles: the functions whose cost grew with the requests.
case " $SERVERS " in *" api "*) ;; *) exit 0 ;; esac
for route in $ROUTES; do
  echo
  echo "api server, /v1/$route: instructions per request of the crate's functions (inclusive, over 100)"
  for n in "$FEW" "$MANY"; do
    callgrind_annotate --inclusive=yes --threshold=100 --show-percs=no --auto=no \
      "$work/api.$route.$n.out" 2>/dev/null |
      awk '$1 ~ /^[0-9,]+$/ && $0 ~ /partner_api::/ { ir = $1; gsub(",", "", ir); $1 = ""; sub(/^ +/, ""); print ir "\t" $0 }' \
        >"$work/functions.$n"
  done
  awk -F'\t' -v few="$FEW" -v many="$MANY" '
    FNR == NR { before[$2] = $1; next }
    { per = ($1 - before[$2]) / (many - few); if (per >= 100) printf "%10.0f  %s\n", per, $2 }' \
    "$work/functions.$FEW" "$work/functions.$MANY" | sort -rn >"$work/per_function.$route"
  head -n 25 "$work/per_function.$route"
  # The key's digest: a SipHash tag and the thread's memo, or on a miss the SHA-256 in
  # sha2's portable code (valgrind cannot run the SHA extensions that sha2 uses natively).
  digest=$(awk '/key::digest::KeyDigest::of_presented/ { print $1; exit }' "$work/per_function.$route")
  echo "of which the key's digest (memoised per thread): ${digest:-0}"
done
