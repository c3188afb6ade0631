#!/usr/bin/env python3
"""An operator's moves in the dashboard, timed in a real browser (headless Chromium,
see webdriver.py) against a hub serving a large fleet:

- first view: from the start of navigation until the fleet page has drawn its totals,
  its clusters by label, its failures, its matrix and its SyncSet list;
- a search: from submitting the clusters search (part of a name) until the page shows
  what was found;
- an action: from confirming "Retry now" on a key's page until the page shows the
  key's Retry event (followed through the event watch, no reload).

    dashboard-day.py PORT TOKEN_FILE [RUNS]

Each is measured inside the page (performance.now()), RUNS times (default 5); prints
one JSON line per measure and the medians.
"""
import json, statistics, sys, urllib.request
from webdriver import Browser

port, token = sys.argv[1], open(sys.argv[2]).read().strip()
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
hub = f"http://127.0.0.1:{port}"


def get(path):
    req = urllib.request.Request(hub + path, headers={"Authorization": f"Bearer {token}"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())


clusters = get("/v1/status/clusters?limit=1")["total"]
syncset = get("/v1/syncsets?limit=1")["items"][0]["metadata"]["name"]
names = [c["name"] for c in get(f"/v1/status/clusters?limit={runs}&offset={clusters // 2}")["items"]]
browser = Browser(hub, token)
medians = {}
try:
    first = []
    for i in range(runs):
        browser.goto("/#/")
        browser.reload()
        ms = browser.run("""
            const drawn = () => document.getElementById('total') && document.getElementById('matrix')
              && document.querySelector('#syncset-list tr[data-syncset]') && document.getElementById('heat-table')
              && document.querySelector('#failures > *');
            (function wait() { drawn() ? done(performance.now()) : setTimeout(wait, 5); })();""")
        first.append(ms)
        print(json.dumps({"measure": "first view", "run": i + 1, "ms": round(ms, 1)}))
    medians["first view"] = first

    browser.goto("/#/clusters")
    searches = []
    for i, name in enumerate(names):
        # Part of a cluster's name: its last five characters.
        part = name[-5:]
        found = browser.run("""
            const part = arguments[0];
            (function ready() {
              if (!document.getElementById('cluster-search')) return setTimeout(ready, 5);
              const old = document.getElementById('cluster-count');
              if (old) old.remove();
              document.querySelector('#cluster-search [name=name]').value = part;
              const t0 = performance.now();
              document.querySelector('#cluster-search button[type=submit]').click();
              (function wait() {
                const n = document.getElementById('cluster-count');
                n ? done([performance.now() - t0, Number(n.dataset.total)]) : setTimeout(wait, 2);
              })();
            })();""", part)
        searches.append(found[0])
        print(json.dumps({"measure": "search", "run": i + 1, "name_part": part, "found": found[1], "ms": round(found[0], 1)}))
    medians["search"] = searches

    actions = []
    for i, name in enumerate(names):
        browser.goto(f"/#/key/{name}/{syncset}")
        ms = browser.run("""
            const seqs = () => [...document.querySelectorAll('#key-events tr[data-seq]')]
              .map(r => [Number(r.dataset.seq), r.querySelector('[data-phase]').dataset.phase]);
            (function ready() {
              const button = document.querySelector('#retry-key');
              if (!button || !document.getElementById('key-facts')) return setTimeout(ready, 5);
              const before = Math.max(0, ...seqs().map(([s]) => s));
              button.click();
              const t0 = performance.now();
              document.querySelector('button.confirm').click();
              (function wait() {
                seqs().some(([s, a]) => s > before && a === 'Retry') ? done(performance.now() - t0) : setTimeout(wait, 2);
              })();
            })();""")
        actions.append(ms)
        print(json.dumps({"measure": "action: retry a key until its event shows", "run": i + 1, "ms": round(ms, 1)}))
    medians["action"] = actions
finally:
    browser.close()
print(json.dumps({"clusters": clusters, **{f"{k} median_ms": round(statistics.median(v), 1) for k, v in medians.items()}}))
