#!/usr/bin/env bash
# Runs experiments/access-cost.py against `fleetsync serve` over http and over https
# (a throwaway CA made with openssl), three times each, on a fresh embedded store.
#   cargo build --release && bash experiments/access-cost.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${FLEETSYNC:-$here/../target/release/fleetsync}
work=$(mktemp -d)
cd "$work"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj "/CN=bench CA" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout srv.key -out srv.csr -subj "/CN=localhost" 2>/dev/null
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\n" > ext.cnf
openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem -days 2 -extfile ext.cnf 2>/dev/null
run() { # label scheme [serve flags...]
    local label=$1 scheme=$2; shift 2
    rm -f hub.db*
    "$bin" serve --listen 127.0.0.1:18443 --db hub.db "$@" 2>/dev/null & local pid=$!
    sleep 2
    local token; token=$(cat hub.db.admin-token)
    printf 'apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: c1}\nspec: {endpoint: {simulator: {}}}\n' |
        "$bin" apply --server "$scheme://127.0.0.1:18443" --token "$token" --certificate-authority ca.pem -f - >/dev/null
    local agent; agent=$("$bin" token create --db hub.db --tenant default --role agent --cluster c1 2>/dev/null)
    echo "$label $(python3 "$here/access-cost.py" 127.0.0.1 18443 "$token" "$agent" "$scheme" ca.pem)"
    kill "$pid"; wait "$pid" 2>/dev/null || true
}
for i in 1 2 3; do
    run "http-$i" http
    run "https-$i" https --tls-cert-file srv.pem --tls-private-key-file srv.key
done
rm -rf "$work"
