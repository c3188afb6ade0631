#!/usr/bin/env python3
"""What event watches cost a hub: its RSS with N watches whose clients never read, and
its CPU per apply with N watches that read.

    watch-cost.py PID PORT TOKEN idle|reading N APPLIES

Opens N watches (`GET /v1/events?watch=true`) on 127.0.0.1:PORT, then makes APPLIES
applies (one SyncSet update each, one event). `idle` clients never read; `reading`
clients read in threads. Prints the hub's RSS (kB) after the applies, and its CPU time
(user + system, from /proc/PID/stat) per apply.
"""
import json, os, socket, sys, threading, time, urllib.request

pid, port, token, mode, n, applies = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
tick = os.sysconf("SC_CLK_TCK")

def cpu():
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick

def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

def watch():
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /v1/events?watch=true HTTP/1.1\r\nHost: hub\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    if mode == "reading":
        threading.Thread(target=lambda: [None for _ in iter(lambda: s.recv(65536), b"")], daemon=True).start()
    return s

def apply(i):
    doc = ("apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: s}\nspec:\n  clusterNames: [nowhere]\n"
           f"  resources:\n    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: m, namespace: a}}, data: {{v: \"{i}\"}}}}\n")
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/apply", doc.encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"})
    urllib.request.urlopen(req).read()

watches = [watch() for _ in range(n)]
time.sleep(2)
rss_before = rss()
start = cpu()
for i in range(applies):
    apply(i)
time.sleep(2)
used = cpu() - start
print(json.dumps({"mode": mode, "watches": n, "applies": applies, "rss_kb_before": rss_before,
                  "rss_kb_after": rss(), "cpu_ms_per_apply": round(used * 1000 / applies, 3)}))
