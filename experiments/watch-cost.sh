#!/usr/bin/env bash
# What event watches cost `fleetsync serve`: RSS with 500 watches that never read, and
# CPU per apply with 200 reading watches, on the embedded store and on PostgreSQL
# (FLEETSYNC_TEST_DATABASE_URL, default postgres://postgres@127.0.0.1:5432/test).
#   cargo build --release -p fleetsync && bash experiments/watch-cost.sh
# Run it on two builds (FLEETSYNC=path/to/fleetsync) to compare them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${FLEETSYNC:-$here/../target/release/fleetsync}
pg=${FLEETSYNC_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
work=$(mktemp -d)
cd "$work"
run() { # label mode watches applies [serve flags...]
    local label=$1 mode=$2 n=$3 applies=$4; shift 4
    local caps=() # builds with watch caps: lift them above the test's watches
    "$bin" serve --help | grep -q -- --max-watches && caps=(--max-watches 1000 --max-watches-per-identity 1000)
    "$bin" serve --listen 127.0.0.1:18480 "${caps[@]}" "$@" 2>/dev/null & local pid=$!
    sleep 3
    local token
    if [ "${1:-}" = --database-url ]; then
        token=$("$bin" token create --database-url "$pg" --schema watchcost --tenant default --role fleet-admin 2>/dev/null)
    else
        token=$(cat hub.db.admin-token)
    fi
    echo "$label $(python3 "$here/watch-cost.py" "$pid" 18480 "$token" "$mode" "$n" "$applies")"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}
psql "$pg" -qc "drop schema if exists watchcost cascade" 2>/dev/null || true
run sqlite-idle-500 idle 500 2000 --db hub.db
rm -f hub.db*
run sqlite-reading-200 reading 200 500 --db hub.db
run pg-reading-0 reading 0 500 --database-url "$pg" --schema watchcost
run pg-reading-200 reading 200 500 --database-url "$pg" --schema watchcost
rm -rf "$work"
