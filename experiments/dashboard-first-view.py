#!/usr/bin/env python3
"""How long the dashboard's first view takes in a real browser (headless Chromium, see
webdriver.py).

    dashboard-first-view.py PORT TOKEN_FILE [RUNS]

Signs in once (the session cookie), then loads `/` RUNS times (default 5) and measures,
inside the page, the time from the start of navigation until the fleet view has drawn
its totals, its matrix and its SyncSet list. Prints one JSON line per run and the
median.
"""
import json, statistics, sys
from webdriver import Browser

port, token = sys.argv[1], open(sys.argv[2]).read().strip()
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
browser = Browser(f"http://127.0.0.1:{port}", token)
try:
    times = []
    for i in range(runs):
        browser.goto("/#/")
        browser.reload()
        ms = browser.run("""
            const drawn = () => document.getElementById('total') && document.getElementById('matrix')
              && document.querySelector('#syncset-list tr[data-syncset]');
            (function wait() { drawn() ? done(performance.now()) : setTimeout(wait, 5); })();""")
        times.append(ms)
        print(json.dumps({"run": i + 1, "first_view_ms": round(ms, 1)}))
    print(json.dumps({"view": "dashboard first view", "median_ms": round(statistics.median(times), 1)}))
finally:
    browser.close()
