#!/usr/bin/env bash
# The history checker's long mode: the revocation bound checked over a long, adversarial
# history (tests/it/history), with four replicas, beside CPU hogs on every core. Prints the
# checker's summary: requests checked, revocations, faults, reads that straddled a
# revocation, and the violations (there must be none).
#
#   bash benches/history.sh                  # 1800 s, 4 replicas
#   PARTNER_API_HISTORY_SECONDS=300 bash benches/history.sh
#   CLOCK_STEPS=1 bash benches/history.sh    # the run that also steps the wall clock back
#                                            # around rolls (CAP_SYS_TIME; run nothing beside)
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
export PARTNER_API_HISTORY_SECONDS=${PARTNER_API_HISTORY_SECONDS:-1800}
export PARTNER_API_HISTORY_REPLICAS=${PARTNER_API_HISTORY_REPLICAS:-4}
cargo test --all-features --test it --no-run
for _ in $(seq 1 "$(nproc)"); do
  (while :; do :; done) &
  hogs+=($!)
done
if [ "${CLOCK_STEPS:-0}" = 1 ]; then
  cargo test --all-features --test it history:: -- --nocapture --exact --ignored \
    history::no_history_serves_a_revoked_key_past_the_bound_across_clock_steps
else
  cargo test --all-features --test it history:: -- --nocapture --exact \
    history::no_history_serves_a_revoked_key_past_the_bound
fi
