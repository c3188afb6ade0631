#!/usr/bin/env bash
# A staged change against the same change at once: `fleetsync serve` (embedded store)
# over CLUSTERS simulated clusters (`fleetsync sim` in a process of its own), one SyncSet
# of one ConfigMap; experiments/rollout-steps.py times a four-step rollout with no soak
# and the same change without a rollout, alternately.
#   cargo build --release -p fleetsync -p fleetsync-bench && bash experiments/rollout-steps.sh 1000
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${FLEETSYNC:-$here/../target/release/fleetsync}
clusters=${1:-1000}
work=$(mktemp -d)
cd "$work"
sim= hub=
trap 'kill $sim $hub 2>/dev/null; rm -rf "$work"' EXIT
"$bin" sim --listen 127.0.0.1:18493 --latency-scale 0.2 >/dev/null & sim=$!
"$bin" serve --db fleet.db --listen 127.0.0.1:18494 --egress-allow 127.0.0.1 2>/dev/null & hub=$!
for _ in $(seq 100); do [ -s fleet.db.admin-token ] && break; sleep 0.2; done
sleep 1
python3 "$here/rollout-steps.py" 18494 fleet.db.admin-token 127.0.0.1:18493 "$clusters"
