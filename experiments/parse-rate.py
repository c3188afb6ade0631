#!/usr/bin/env python3
"""Documents per second that `POST /v1/apply` takes in, parse included.

    parse-rate.py PORT TOKEN DOCS ROUNDS

Posts one body of DOCS SyncSets (each with a ConfigMap and a Deployment, selecting a
cluster that does not exist, so no work is enqueued) to 127.0.0.1:PORT, then posts the
same body ROUNDS more times: those applies are unchanged, so their time is the parse,
the validation and the store's comparison. Prints the median documents/s of the
unchanged rounds, and the first (writing) round's.
"""
import json, statistics, sys, time, urllib.request

port, token, docs, rounds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def syncset(i):
    return f"""apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {{name: set-{i}, labels: {{team: t{i % 7}}}}}
spec:
  clusterNames: [nowhere]
  resourceApplyMode: Sync
  resources:
    - apiVersion: v1
      kind: ConfigMap
      metadata: {{name: settings-{i}, namespace: payments}}
      data: {{logLevel: info, replicas: "3", region: eu-west-1}}
    - apiVersion: apps/v1
      kind: Deployment
      metadata: {{name: web-{i}, namespace: payments, labels: {{app: web}}}}
      spec:
        replicas: 3
        selector: {{matchLabels: {{app: web}}}}
        template:
          metadata: {{labels: {{app: web}}}}
          spec:
            containers:
              - name: web
                image: registry.example.com/web:1.{i}
                ports: [{{containerPort: 8080}}]
"""

body = "---\n".join(syncset(i) for i in range(docs)).encode()

def post():
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/apply", body, method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"})
    start = time.perf_counter()
    urllib.request.urlopen(req, timeout=600).read()
    return docs / (time.perf_counter() - start)

first = post()
rates = [post() for _ in range(rounds)]
print(json.dumps({"docs": docs, "body_bytes": len(body), "rounds": rounds,
                  "first_docs_per_s": round(first), "median_docs_per_s": round(statistics.median(rates))}))
