#!/usr/bin/env bash
# The fleet views on a converged fleet: `fleetsync demo` applies CLUSTERS × SYNCSETS
# (default 60; one resource each) into an embedded store, then `fleetsync serve` serves
# that file and experiments/fleet-view.py times each view; with DASHBOARD=1,
# experiments/dashboard-day.py then times the dashboard in headless Chromium.
#   cargo build --release -p fleetsync && bash experiments/fleet-view.sh 10000 [SYNCSETS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${FLEETSYNC:-$here/../target/release/fleetsync}
clusters=${1:-10000}
syncsets=${2:-60}
work=$(mktemp -d)
cd "$work"
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
pid=
"$bin" demo --clusters "$clusters" --syncsets "$syncsets" --resources 1 --latency-scale 0.2 --db fleet.db --json
"$bin" serve --db fleet.db --listen 127.0.0.1:18490 2>/dev/null & pid=$!
for _ in $(seq 50); do [ -s fleet.db.admin-token ] && break; sleep 0.2; done
sleep 1
python3 "$here/fleet-view.py" 18490 fleet.db.admin-token
if [ "${DASHBOARD:-0}" = 1 ]; then
    python3 "$here/dashboard-day.py" 18490 fleet.db.admin-token
fi
