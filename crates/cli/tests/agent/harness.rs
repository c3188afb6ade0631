//! The pieces each agent test puts together: the fleet, a client of the hub's API, the
//! agent process, and a TCP proxy that can blackhole or reset the link.

use crate::common::{bin, stderr, Hub, SimChild};
use fleetsync_model::{LiveState, Phase};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One cluster `c1` on the sim, and a SyncSet of `n` ConfigMaps.
pub(crate) fn fleet(sim: &str, n: usize) -> String {
    let mut y = format!(
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c1}}\n\
         spec: {{endpoint: {{http: {{url: \"http://{sim}/clusters/c1\"}}}}}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: base}}\nspec:\n  clusterNames: [c1]\n  resources:\n"
    );
    for i in 0..n {
        y.push_str(&format!(
            "  - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: cm-{i}, namespace: apps}}, data: {{k: v}}}}\n"
        ));
    }
    y
}

/// Blocking HTTP for the test's own calls (sim and hub), on a small runtime.
pub(crate) struct Http {
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) client: reqwest::Client,
    /// The hub's fleet-admin token, to read its live state.
    pub(crate) admin: String,
}

impl Http {
    pub(crate) fn new(admin: &str) -> Http {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
        Http { rt, client: reqwest::Client::new(), admin: admin.to_string() }
    }

    pub(crate) fn get(&self, url: &str) -> Value {
        self.rt.block_on(async {
            let r = self.client.get(url).send().await.expect("GET");
            assert!(r.status().is_success(), "GET {url}: {}", r.status());
            r.json().await.expect("JSON")
        })
    }

    /// The third party: server-side applies (forced) of `(name, data, annotation)`,
    /// 64 at a time; calls `each` after every one.
    pub(crate) fn meddle(
        &self,
        sim: &str,
        changes: Vec<(String, &'static str, String)>,
        each: impl Fn(usize) + Send + Sync + 'static,
    ) {
        self.rt.block_on(async {
            let each = Arc::new(each);
            let mut set = tokio::task::JoinSet::new();
            for (i, (name, data, note)) in changes.into_iter().enumerate() {
                if set.len() >= 64 {
                    set.join_next().await.expect("task").expect("join");
                }
                let (client, each) = (self.client.clone(), each.clone());
                let url = format!("http://{sim}/clusters/c1/api/v1/namespaces/apps/configmaps/{name}?fieldManager=intruder&force=true");
                let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": name, "namespace": "apps", "annotations": {"touched": note}}, "data": {"k": data}});
                set.spawn(async move {
                    let r = client.patch(url).header("content-type", "application/apply-patch+yaml").body(body.to_string()).send().await;
                    assert!(r.expect("PATCH").status().is_success());
                    each(i);
                });
            }
            while let Some(r) = set.join_next().await {
                r.expect("join");
            }
        });
    }

    pub(crate) fn delete(&self, sim: &str, name: &str) {
        let url = format!("http://{sim}/clusters/c1/api/v1/namespaces/apps/configmaps/{name}");
        let status = self.rt.block_on(async { self.client.delete(url).send().await.expect("DELETE").status() });
        assert!(status.is_success(), "{status}");
    }

    /// The sim's ConfigMaps: name → (resourceVersion, data.k).
    pub(crate) fn sim_state(&self, sim: &str) -> std::collections::BTreeMap<String, (String, String)> {
        let list = self.get(&format!("http://{sim}/clusters/c1/api/v1/namespaces/apps/configmaps"));
        let items = list["items"].as_array().cloned().unwrap_or_default();
        items
            .iter()
            .map(|o| {
                let m = &o["metadata"];
                (text(&m["name"]), (text(&m["resourceVersion"]), text(&o["data"]["k"])))
            })
            .collect()
    }

    /// The hub's live state of c1: name → (resourceVersion, state, versions stored, drift).
    pub(crate) fn hub_live(
        &self,
        hub: &str,
    ) -> std::collections::BTreeMap<String, (String, LiveState, u64, Option<String>)> {
        let hub = fleetsync_api::Client::new(hub).with_token(self.admin.clone());
        let live = self.rt.block_on(hub.live("default", "c1")).expect("the hub's live state");
        live.into_iter().map(|l| (l.resource.name, (l.resource_version, l.state, l.versions, l.drift))).collect()
    }

    /// Whether the hub holds, for every ConfigMap of the sim, its current version.
    pub(crate) fn converged(&self, hub: &str, sim: &str) -> bool {
        let (live, objects) = (self.hub_live(hub), self.sim_state(sim));
        !objects.is_empty()
            && objects
                .iter()
                .all(|(name, (rv, _))| live.get(name).is_some_and(|l| &l.0 == rv && l.1 == LiveState::Present))
    }
}

pub(crate) fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

pub(crate) fn wait_for(what: &str, timeout: Duration, ok: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

pub(crate) fn applied(hub: &Hub) -> bool {
    crate::common::status_items(hub).iter().all(|k| k.phase == Phase::Applied)
        && !crate::common::status_items(hub).is_empty()
}

/// A `fleetsync agent` child, killed on drop; its log goes to `log`.
pub(crate) struct Agent {
    pub(crate) child: Child,
    pub(crate) args: Vec<String>,
    pub(crate) log: std::path::PathBuf,
}

impl Agent {
    pub(crate) fn start(hub: &str, sim: &str, token: &Path, log: &Path) -> Agent {
        Agent::start_with(hub, sim, token, log, &[])
    }

    pub(crate) fn start_with(hub: &str, sim: &str, token: &Path, log: &Path, more: &[&str]) -> Agent {
        let args: Vec<String> = [
            "agent",
            "--hub",
            hub,
            "--cluster",
            "c1",
            "--token-file",
            token.to_str().expect("utf-8"),
            "--target",
            &format!("http://{sim}/clusters/c1"),
            "--resources-interval",
            "1s",
            "--request-timeout",
            "1s",
            "--backoff-base",
            "20ms",
            "--backoff-cap",
            "400ms",
            "--batch",
            "500",
        ]
        .iter()
        .chain(more)
        .map(|s| s.to_string())
        .collect();
        let log = log.to_path_buf();
        Agent { child: Agent::spawn(&args, &log), args, log }
    }

    pub(crate) fn spawn(args: &[String], log: &Path) -> Child {
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log");
        bin().args(args).env("RUST_LOG", "info").stdout(Stdio::null()).stderr(file).spawn().expect("spawn agent")
    }

    pub(crate) fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        self.child.wait().expect("wait");
    }

    pub(crate) fn restart(&mut self) {
        self.child = Agent::spawn(&self.args, &self.log);
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) const PASS: u8 = 0;
pub(crate) const BLACKHOLE: u8 = 1;
pub(crate) const RESET: u8 = 2;

/// A TCP proxy on loopback: passes bytes through, or blackholes (accepts, forwards
/// nothing, answers nothing), or resets (closes every connection, old and new).
pub(crate) struct Proxy {
    pub(crate) addr: String,
    pub(crate) mode: Arc<AtomicU8>,
}

impl Proxy {
    pub(crate) fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let mode = Arc::new(AtomicU8::new(PASS));
        let (upstream, m) = (upstream.to_string(), mode.clone());
        std::thread::spawn(move || {
            let held = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
            for conn in listener.incoming() {
                let Ok(client) = conn else { continue };
                match m.load(Ordering::SeqCst) {
                    PASS => match TcpStream::connect(&upstream) {
                        Ok(server) => {
                            for (from, to) in [(&client, &server), (&server, &client)] {
                                let (from, to, m) =
                                    (from.try_clone().expect("clone"), to.try_clone().expect("clone"), m.clone());
                                std::thread::spawn(move || pipe(from, to, &m));
                            }
                        }
                        Err(_) => drop(client),
                    },
                    BLACKHOLE => held.lock().expect("lock").push(client),
                    _ => {
                        let _ = client.shutdown(Shutdown::Both);
                        for c in held.lock().expect("lock").drain(..) {
                            let _ = c.shutdown(Shutdown::Both);
                        }
                    }
                }
            }
        });
        Proxy { addr, mode }
    }

    pub(crate) fn set(&self, mode: u8) {
        self.mode.store(mode, Ordering::SeqCst);
    }
}

/// Copies bytes one way while passing; holds them while blackholed; closes on reset.
pub(crate) fn pipe(mut from: TcpStream, mut to: TcpStream, mode: &AtomicU8) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 16 * 1024];
    loop {
        match mode.load(Ordering::SeqCst) {
            PASS => match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(_) => break,
            },
            BLACKHOLE => std::thread::sleep(Duration::from_millis(20)),
            _ => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Hub, sim, fleet applied, token file; returns them with the test's HTTP client.
pub(crate) fn setup(n: usize) -> (Hub, SimChild, Http, tempfile::TempDir) {
    let sim = SimChild::start(0.0);
    let hub = Hub::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("fleet.yaml");
    std::fs::write(&file, fleet(&sim.addr, n)).expect("write");
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    agent_credential(&hub, "c1", &dir.path().join("token"));
    hub.wait_until(Duration::from_secs(60), applied);
    let http = Http::new(&hub.token);
    (hub, sim, http, dir)
}

/// Issues the agent credential of `cluster` (through the API, as the fleet-admin) into `file`.
pub(crate) fn agent_credential(hub: &Hub, cluster: &str, file: &Path) {
    let out = hub.cli(&["token", "create", "--agent", "--tenant", "default", "--cluster", cluster]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(file, crate::common::stdout(&out)).expect("token file");
}
