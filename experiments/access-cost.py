# The cost of authentication and TLS on a running hub, from one keep-alive connection
# with sequential requests: per-request medians of /livez (no credential, no work),
# /v1/whoami (a token, no work), a refused unknown token and a request with no
# credential; POST /v1/apply of one SyncSet; and agent report batches (100 reports)
# per second for 10 s. Run by access-cost.sh; prints one JSON object.
import http.client, ssl, json, sys, time, statistics

host, port, token, agent, scheme = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
ca = sys.argv[6] if len(sys.argv) > 6 else None

def conn():
    if scheme == "https":
        ctx = ssl.create_default_context(cafile=ca)
        return http.client.HTTPSConnection(host, port, context=ctx)
    return http.client.HTTPConnection(host, port)

c = conn()
def req(method, path, body=None, tok=None, ctype=None):
    h = {}
    if tok: h["Authorization"] = "Bearer " + tok
    if ctype: h["Content-Type"] = ctype
    t0 = time.perf_counter()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse(); data = r.read()
    return time.perf_counter() - t0, r.status, data

def timed(n, *a, **k):
    xs = []
    for _ in range(n):
        dt, st, data = req(*a, **k)
        xs.append(dt)
    return statistics.median(xs) * 1000, st

out = {}
for name, args, kw in [
    ("livez_no_auth", ("GET", "/livez"), {}),
    ("healthz_no_auth", ("GET", "/healthz"), {}),
    ("whoami_auth", ("GET", "/v1/whoami"), {"tok": token}),
    ("refused_unknown_token", ("GET", "/v1/whoami"), {"tok": "fst_" + "0" * 64}),
    ("refused_no_credential", ("GET", "/v1/clusters"), {}),
]:
    timed(50, *args, **kw)
    ms, st = timed(1000, *args, **kw)
    out[name] = {"median_ms": round(ms, 3), "status": st}

lat = []
for i in range(300):
    doc = "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: bench}\nspec: {clusterNames: [c1], resources: [{apiVersion: v1, kind: ConfigMap, metadata: {name: cm, namespace: a}, data: {i: '%d'}}]}\n" % i
    dt, st, data = req("POST", "/v1/apply", body=doc, tok=token, ctype="application/yaml")
    assert st == 200, data
    lat.append(dt)
out["apply_median_ms"] = round(statistics.median(lat[50:]) * 1000, 3)

def report(rv):
    return {"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "a", "name": "cm"}, "resourceVersion": str(rv),
            "state": "present", "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "a", "resourceVersion": str(rv)}, "data": {"i": "1"}}}
rv, batches, reports = 1000, 0, 0
t_end = time.perf_counter() + 10
while time.perf_counter() < t_end:
    batch = [report(rv + j) for j in range(100)]
    rv += 100
    body = json.dumps({"tenant": "default", "cluster": "c1", "reports": batch})
    dt, st, data = req("POST", "/v1/agent/reports", body=body, tok=agent, ctype="application/json")
    assert st == 200, data
    batches += 1; reports += 100
out["agent_reports_per_s"] = round(reports / 10)
print(json.dumps(out))
