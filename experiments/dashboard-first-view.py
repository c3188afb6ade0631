#!/usr/bin/env python3
"""How long the dashboard's first view takes in a real browser: Debian's headless
Chromium, driven through chromedriver's WebDriver HTTP API (no client library).

    dashboard-first-view.py PORT TOKEN_FILE [RUNS]

Signs in once (the session cookie), then loads `/` RUNS times (default 5) and measures,
inside the page, the time from the start of navigation until the fleet view has drawn
its totals, its matrix and its SyncSet list. Prints one JSON line per run and the
median. Needs `chromium` and `chromium-driver` (apt-get install chromium chromium-driver).
"""
import json, socket, statistics, subprocess, sys, time, urllib.request

port, token = sys.argv[1], open(sys.argv[2]).read().strip()
runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
hub = f"http://127.0.0.1:{port}"

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

driver_port = free_port()
driver = subprocess.Popen(["chromedriver", f"--port={driver_port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{driver_port}{path}", data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    return json.loads(urllib.request.urlopen(req, timeout=120).read())["value"]

try:
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", driver_port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"]
    caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}}}}
    session = call("POST", "/session", caps)["sessionId"]
    s = f"/session/{session}"
    call("POST", f"{s}/timeouts", {"script": 120000})
    call("POST", f"{s}/url", {"url": hub + "/"})
    signed = call("POST", f"{s}/execute/async", {"script": """
        const done = arguments[arguments.length - 1];
        fetch('/ui/session', {method: 'POST', credentials: 'same-origin',
              headers: {'Content-Type': 'application/json'}, body: JSON.stringify({token: arguments[0]})})
          .then(r => done(r.status), e => done(String(e)));""", "args": [token]})
    if signed != 200:
        sys.exit(f"signing in answered {signed}")
    times = []
    for i in range(runs):
        call("POST", f"{s}/url", {"url": hub + "/#/"})
        call("POST", f"{s}/refresh", {})
        ms = call("POST", f"{s}/execute/async", {"script": """
            const done = arguments[arguments.length - 1];
            const drawn = () => document.getElementById('total') && document.getElementById('matrix')
              && document.querySelector('#syncset-list tr[data-syncset]');
            (function wait() { drawn() ? done(performance.now()) : setTimeout(wait, 5); })();""", "args": []})
        times.append(ms)
        print(json.dumps({"run": i + 1, "first_view_ms": round(ms, 1)}))
    print(json.dumps({"view": "dashboard first view", "median_ms": round(statistics.median(times), 1)}))
    call("DELETE", s)
finally:
    driver.kill()
