"""A headless Chromium driven through chromedriver's WebDriver HTTP API (no client
library), signed in to a fleetsync hub: what the dashboard experiments share.

Needs `chromium` and `chromium-driver` (apt-get install chromium chromium-driver).
"""
import json, socket, subprocess, time, urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browser:
    """One browser session on the hub at `hub` (http://127.0.0.1:PORT), signed in with `token`."""

    def __init__(self, hub, token):
        self.hub = hub
        self.port = free_port()
        self.driver = subprocess.Popen(["chromedriver", f"--port={self.port}"],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                    break
                except OSError:
                    time.sleep(0.05)
            args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000"]
            caps = {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": args}}}}
            self.session = f"/session/{self.call('POST', '/session', caps)['sessionId']}"
            self.call("POST", f"{self.session}/timeouts", {"script": 120000})
            self.goto("/")
            signed = self.run("""
                fetch('/ui/session', {method: 'POST', credentials: 'same-origin',
                      headers: {'Content-Type': 'application/json'}, body: JSON.stringify({token: arguments[0]})})
                  .then(r => done(r.status), e => done(String(e)));""", token)
            if signed != 200:
                raise SystemExit(f"signing in answered {signed}")
        except BaseException:
            self.driver.kill()
            raise

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        return json.loads(urllib.request.urlopen(req, timeout=120).read())["value"]

    def goto(self, path):
        self.call("POST", f"{self.session}/url", {"url": self.hub + path})

    def reload(self):
        self.call("POST", f"{self.session}/refresh", {})

    def run(self, script, *args):
        """Runs `script` in the page, where `done(value)` answers."""
        return self.call("POST", f"{self.session}/execute/async", {
            "script": "const done = arguments[arguments.length - 1];\n" + script, "args": list(args)})

    def close(self):
        try:
            self.call("DELETE", self.session)
        finally:
            self.driver.kill()
