#!/usr/bin/env bash
# Documents/s taken in by `POST /v1/apply` of `fleetsync serve` on the embedded store.
#   cargo build --release -p fleetsync && bash experiments/parse-rate.sh
# Run it on two builds (FLEETSYNC=path/to/fleetsync) to compare them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${FLEETSYNC:-$here/../target/release/fleetsync}
work=$(mktemp -d)
cd "$work"
"$bin" serve --listen 127.0.0.1:18481 --db hub.db 2>/dev/null & pid=$!
trap 'kill $pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 50); do [ -s hub.db.admin-token ] && break; sleep 0.2; done
sleep 1
for docs in 100 2000; do
    python3 "$here/parse-rate.py" 18481 "$(cat hub.db.admin-token)" "$docs" 9
done
