#!/usr/bin/env python3
"""How long the fleet views take on a hub: readiness, a metrics scrape, pages of status
and clusters, a filtered status page, a SyncSet's summary (with one page of its keys,
and with all of them), the tenant's summary, a key's newest events, the clusters list,
the heat map, the failures by cause and the applies per minute (a route a build does
not have fails, and is printed as such).

    fleet-view.py PORT TOKEN_FILE

Prints the median of 7 requests and the size of the answer, per view.
"""
import json, statistics, sys, time, urllib.error, urllib.request

port, token = sys.argv[1], open(sys.argv[2]).read().strip()

def get(path):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"})
    start = time.perf_counter()
    body = urllib.request.urlopen(req, timeout=600).read()
    return time.perf_counter() - start, body

name = json.loads(get("/v1/syncsets?limit=1")[1])["items"][0]["metadata"]["name"]
first = json.loads(get("/v1/status?limit=500")[1])
second = first["continue"]
# A key with events: the one of the newest Status event (retention may have trimmed
# the first keys' events).
newest = json.loads(get("/v1/events?order=desc&limit=100")[1])["items"]
cluster, key_set = next((e["name"].split("/", 1) for e in newest if e["kind"] == "Status"), (first["items"][0]["cluster"], name))
views = [
    ("readiness", "/readyz"),
    ("metrics scrape", "/metrics"),
    ("status, first page of 500", "/v1/status?limit=500"),
    ("status, second page of 500", f"/v1/status?limit=500&continue={second}"),
    ("clusters, first page of 500", "/v1/clusters?limit=500"),
    ("status, Failed and Parked only", "/v1/status?limit=500&phase=Failed,Parked"),
    ("SyncSet summary + 100 keys", f"/v1/status/syncsets/{name}?limit=100"),
    ("SyncSet summary + every key", f"/v1/status/syncsets/{name}"),
    ("tenant summary (with clusters by condition)", "/v1/status/summary"),
    ("a key's 20 newest events", f"/v1/status/clusters/{cluster}/syncsets/{key_set}/events"),
    ("clusters list, first 100 by name", "/v1/status/clusters?limit=100"),
    ("clusters list, searched by part of a name", "/v1/status/clusters?limit=100&name=00042"),
    ("clusters list, worst condition first", "/v1/status/clusters?limit=100&sort=condition"),
    ("heat map by a label", "/v1/status/heatmap?groupBy=fleet"),
    ("failures by cause", "/v1/status/failures"),
    ("applies and failures, last hour", "/v1/status/activity"),
]
for label, path in views:
    try:
        runs = [get(path) for _ in range(7)]
    except urllib.error.HTTPError as e:
        print(json.dumps({"view": label, "error": e.code}))
        continue
    ms = statistics.median(r[0] for r in runs) * 1000
    print(json.dumps({"view": label, "median_ms": round(ms, 1), "bytes": len(runs[0][1])}))
