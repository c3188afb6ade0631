#!/usr/bin/env bash
# The fleet at scale: `fleetsync bench hive-fleet` converges CLUSTERS × 60 SyncSets × 1
# resource through the Kubernetes applier against `fleetsync sim` in a process of its
# own (so the hub's peak memory is the hub's alone), keeping its store; then
# `fleetsync serve` serves that store and experiments/fleet-view.py and
# experiments/dashboard-first-view.py time the views on it.
#   cargo build --release -p fleetsync -p fleetsync-bench && bash experiments/fleet-scale.sh 10000
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${FLEETSYNC:-$here/../target/release/fleetsync}
clusters=${1:-10000}
syncsets=${2:-60}
work=$(mktemp -d)
cd "$work"
pid=
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
"$bin" bench hive-fleet --clusters "$clusters" --syncsets "$syncsets" --resources 1 --latency-scale 0.2 \
    --timeout 60m --db fleet.db --json
"$bin" serve --db fleet.db --listen 127.0.0.1:18491 2>/dev/null & pid=$!
for _ in $(seq 100); do [ -s fleet.db.admin-token ] && break; sleep 0.2; done
sleep 1
python3 "$here/fleet-view.py" 18491 fleet.db.admin-token
python3 "$here/dashboard-first-view.py" 18491 fleet.db.admin-token
echo "{\"view\": \"hub serving the fleet\", \"rss_mb\": $(( $(awk '/VmRSS/ {print $2}' /proc/$pid/status) / 1024 ))}"
