#!/usr/bin/env python3
"""A four-step rollout with no soak against the same change without a rollout.

    rollout-steps.py PORT TOKEN_FILE SIM_ADDR CLUSTERS

Loads CLUSTERS clusters and SyncSet `app` (one ConfigMap), then changes the ConfigMap
three times with `spec.rollout` (steps: 10 clusters, 10%, 50%, 100%) and three times
without, alternately. A change is done when every key applied it (and the rollout
completed). Prints, per change, the seconds to done and, for rollouts, each step's
seconds; then the medians and their ratio.
"""
import json, statistics, sys, time, urllib.request

port, token, sim, clusters = sys.argv[1], open(sys.argv[2]).read().strip(), sys.argv[3], int(sys.argv[4])
STEPS = "[{count: 10}, {percent: 10}, {percent: 50}, {percent: 100}]"

def call(method, path, body=None):
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method, headers=headers)
    return json.loads(urllib.request.urlopen(req, timeout=600).read() or b"null")

def apply(yaml):
    call("POST", "/v1/apply", yaml.encode())

def syncset(value, staged):
    rollout = f"  rollout:\n    steps: {STEPS}\n" if staged else ""
    return (f"apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterSelector: {{matchLabels: {{env: prod}}}}\n"
            f"{rollout}  resources:\n    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: app, namespace: apps}}, data: {{v: \"{value}\"}}}}\n")

def applied_everywhere():
    s = call("GET", "/v1/status/syncsets/app?limit=1")["summary"]
    return s["total"] == clusters and s["atGeneration"] == clusters and s["phases"].get("Applied") == clusters

def wait(done, what, timeout=600):
    start = time.perf_counter()
    while not done():
        if time.perf_counter() - start > timeout:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.02)

docs = "".join(
    f"apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i:05d}, labels: {{env: prod}}}}\n"
    f"spec: {{endpoint: {{http: {{url: 'http://{sim}/clusters/c{i:05d}'}}}}}}\n---\n" for i in range(clusters))
apply(docs + syncset("0", staged=True))
wait(applied_everywhere, "the fleet to load")

runs = {True: [], False: []}
for n in range(1, 7):
    staged = n % 2 == 1
    start = time.perf_counter()
    apply(syncset(str(n), staged))
    steps, step, phase = [], None, None
    while True:
        now = time.perf_counter() - start
        if staged:
            r = call("GET", "/v1/rollouts/app")
            if r["step"] != step:
                step = r["step"]
                steps.append(now)
            phase = r["phase"]
        if (not staged or phase == "Completed") and applied_everywhere():
            break
        if phase in ("RolledBack", "Failed"):
            sys.exit(f"the rollout ended {phase}: {r.get('reason')}")
        time.sleep(0.02)
    total = time.perf_counter() - start
    runs[staged].append(total)
    per_step = [b - a for a, b in zip(steps, steps[1:] + [total])]
    print(json.dumps({"change": n, "rollout": staged, "seconds": round(total, 2),
                      "step_seconds": [round(s, 2) for s in per_step] if staged else None}))
staged, plain = statistics.median(runs[True]), statistics.median(runs[False])
print(json.dumps({"clusters": clusters, "rollout_median_s": round(staged, 2), "at_once_median_s": round(plain, 2),
                  "ratio": round(staged / plain, 2)}))
