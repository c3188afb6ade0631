#!/usr/bin/env bash
# The dashboard on a converged fleet: `fleetsync demo` applies CLUSTERS × SYNCSETS (one
# resource each) into an embedded store, `fleetsync serve` serves that file, and
# experiments/dashboard-day.py times the first view, a search and an action in headless
# Chromium; experiments/fleet-view.py times the API views beside it.
#   cargo build --release -p fleetsync && bash experiments/dashboard-day.sh 10000 [SYNCSETS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${FLEETSYNC:-$here/../target/release/fleetsync}
clusters=${1:-10000}
syncsets=${2:-20}
work=$(mktemp -d)
cd "$work"
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
pid=
"$bin" demo --clusters "$clusters" --syncsets "$syncsets" --resources 1 --latency-scale 0.2 --db fleet.db --json
"$bin" serve --db fleet.db --listen 127.0.0.1:18492 2>/dev/null & pid=$!
for _ in $(seq 50); do [ -s fleet.db.admin-token ] && break; sleep 0.2; done
sleep 1
python3 "$here/fleet-view.py" 18492 fleet.db.admin-token
python3 "$here/dashboard-day.py" 18492 fleet.db.admin-token
