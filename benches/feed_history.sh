#!/usr/bin/env bash
# The events feed's history checker in its long mode (tests/it/feed_history.rs): four writers
# in concurrent transactions of random length (a fifth rolled back, moves between two
# organizations, inserts) while pollers on two replicas resume with `after`, beside CPU hogs
# on every core; then the check that every committed change was seen exactly once by each
# replica, each order's in commit order. Prints the run's figures (committed versions, events
# read); any violation fails it.
#
#   bash benches/feed_history.sh                       # 600 s
#   PARTNER_API_FEED_HISTORY_SECONDS=60 bash benches/feed_history.sh
#
# Starts a throwaway PostgreSQL as .ci/test does (unless PARTNER_API_TEST_DATABASE_URL is set).
set -euo pipefail
cd "$(dirname "$0")/.."
source .ci/servers.sh
hogs=()
cleanup() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
  stop_servers
}
trap cleanup EXIT
start_postgres
export PARTNER_API_FEED_HISTORY_SECONDS=${PARTNER_API_FEED_HISTORY_SECONDS:-600}
cargo test --all-features --test it --no-run
for _ in $(seq 1 "$(nproc)"); do
  (while :; do :; done) &
  hogs+=($!)
done
cargo test --all-features --test it \
  feed_history::concurrent_writers_and_two_replicas_pollers_see_every_committed_change_once_in_order \
  -- --exact --nocapture
