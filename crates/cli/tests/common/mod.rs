//! What the binary's tests share: running `fleetsync`, a hub served on loopback, the
//! simulated clusters it applies to, and a PostgreSQL test schema that is dropped when
//! the test ends.
#![allow(dead_code)] // each test file uses its own part of this

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fleetsync"));
    for var in [
        "FLEETSYNC_SERVER",
        "FLEETSYNC_TOKEN",
        "FLEETSYNC_CONTEXT",
        "FLEETSYNC_DB",
        "FLEETSYNC_REQUEST_TIMEOUT",
        "RUST_LOG",
    ] {
        c.env_remove(var);
    }
    // No config file of the person running the tests.
    c.env("FLEETSYNC_CONFIG", "/dev/null");
    // The simulated clusters listen on loopback, which the egress policy refuses unless allowed.
    c.env("FLEETSYNC_EGRESS_ALLOW", "127.0.0.1").env_remove("FLEETSYNC_EGRESS_DENY");
    c
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run fleetsync")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/fleet.yaml")
}

/// A `fleetsync serve` child process on a free loopback port, killed on drop.
pub struct Hub {
    child: Child,
    pub url: String,
    pub dir: tempfile::TempDir,
    /// `serve`'s flags (listen address included), to start it again the same way.
    args: Vec<String>,
    /// A fleet-admin token: the one an embedded hub issued itself, or for PostgreSQL
    /// one `token create` issued before the hub started. [`Hub::cli`] sends it.
    pub token: String,
    log: Option<PathBuf>,
}

impl Hub {
    /// A hub on a SQLite file in a new temporary directory.
    pub fn start() -> Hub {
        Hub::start_logged(None)
    }

    /// The same, with its log (stderr, at `RUST_LOG=debug`) written to `log` if given.
    pub fn start_logged(log: Option<&Path>) -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("hub.db");
        let db = db.to_str().expect("utf-8").to_string();
        Hub::spawn(dir, &["--db", &db], log)
    }

    /// A hub on the given store flags.
    pub fn start_with(dir: tempfile::TempDir, store: &[&str]) -> Hub {
        Hub::spawn(dir, store, None)
    }

    /// A hub on a SQLite file in a new temporary directory, with more `serve` flags.
    pub fn start_flags(flags: &[&str]) -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("hub.db").to_str().expect("utf-8").to_string();
        let mut all = vec!["--db", &db];
        all.extend_from_slice(flags);
        Hub::spawn(dir, &all, None)
    }

    fn spawn(dir: tempfile::TempDir, store: &[&str], log: Option<&Path>) -> Hub {
        let listen = free_address();
        let mut args = vec!["--listen".to_string(), listen.clone()];
        args.extend(store.iter().map(|s| s.to_string()));
        let log = log.map(Path::to_path_buf);
        let issued = pg_admin_token(store);
        let child = Hub::launch(&args, log.as_deref());
        let token = match issued {
            Some(t) => t,
            None => bootstrap_token(store),
        };
        let hub = Hub { child, url: format!("http://{listen}"), dir, args, log, token };
        hub.wait_until(Duration::from_secs(20), |h| h.cli(&["get", "clusters"]).status.success());
        hub
    }

    fn launch(args: &[String], log: Option<&Path>) -> Child {
        let mut cmd = bin();
        cmd.arg("serve").args(args).stdout(Stdio::null());
        match log {
            Some(path) => {
                let file = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("log file");
                cmd.env("RUST_LOG", "debug").stderr(file)
            }
            None => cmd.stderr(Stdio::null()),
        };
        cmd.spawn().expect("spawn serve")
    }

    /// Stops the hub (SIGTERM, graceful, or SIGKILL, a crash) and starts it again on
    /// the same address and store; returns once it answers.
    pub fn restart(&mut self, graceful: bool) {
        if graceful {
            assert!(self.terminate().success(), "serve exits 0 on SIGTERM");
        } else {
            self.child.kill().expect("kill -9");
            self.child.wait().expect("wait");
        }
        self.child = Hub::launch(&self.args, self.log.as_deref());
        self.wait_until(Duration::from_secs(30), |h| h.cli(&["get", "clusters"]).status.success());
    }

    /// Runs a client command against this hub as its fleet-admin.
    /// The hub process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn cli(&self, args: &[&str]) -> Output {
        bin().args(args).args(["--server", &self.url]).env("FLEETSYNC_TOKEN", &self.token).output().expect("run client")
    }

    /// The typed API client of this hub, as its fleet-admin.
    pub fn client(&self) -> fleetsync_api::Client {
        fleetsync_api::Client::new(&self.url).with_token(self.token.clone())
    }

    /// `fleetsync apply -f` of `yaml` (written to a file in the hub's directory);
    /// panics if it fails.
    pub fn apply(&self, yaml: &str) {
        let path = self.dir.path().join("apply.yaml");
        std::fs::write(&path, yaml).expect("write YAML");
        let out = self.cli(&["apply", "-f", path.to_str().expect("utf-8")]);
        assert!(out.status.success(), "apply: {}", stderr(&out));
    }

    pub fn wait_until(&self, timeout: Duration, ok: impl Fn(&Hub) -> bool) {
        let start = Instant::now();
        while !ok(self) {
            assert!(start.elapsed() < timeout, "timed out");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().expect("kill");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// For a hub on PostgreSQL (`--database-url` among its flags): a fleet-admin token
/// issued with `fleetsync token create` on the same schema.
fn pg_admin_token(store: &[&str]) -> Option<String> {
    let url = store.iter().position(|a| *a == "--database-url").map(|i| store[i + 1])?;
    let mut args = vec!["token", "create", "--database-url", url, "--tenant", "default", "--role", "fleet-admin"];
    if let Some(i) = store.iter().position(|a| *a == "--schema") {
        args.extend(["--schema", store[i + 1]]);
    }
    let out = run(&args);
    assert!(out.status.success(), "token create: {}", stderr(&out));
    Some(stdout(&out).trim().to_string())
}

/// For an embedded hub: the token it wrote beside its database (`--db FILE`) at its
/// first start.
fn bootstrap_token(store: &[&str]) -> String {
    let db = store.iter().position(|a| *a == "--db").map(|i| store[i + 1]).expect("--db or --database-url");
    let file = PathBuf::from(format!("{db}.admin-token"));
    let start = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(&file) {
            if !t.trim().is_empty() {
                return t.trim().to_string();
            }
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no token at {}", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        let _ = self.child.kill();
    }
}

pub fn status_items(hub: &Hub) -> Vec<fleetsync_model::KeyStatus> {
    let out = hub.cli(&["get", "status", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status: fleetsync_api::Items<fleetsync_model::KeyStatus> =
        serde_json::from_str(&stdout(&out)).expect("key statuses");
    status.items
}

/// A child process killed when dropped, so a failing test leaves none behind.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback address with a port free at the time of asking, for a child to listen on.
pub fn free_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    format!("127.0.0.1:{port}")
}

/// `GET http://{address}{path}`: its status and body, or `None` while nothing answers.
pub fn http_get(address: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(address).ok()?;
    tcp.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(tcp, "GET {path} HTTP/1.1\r\nHost: {address}\r\nAccept: text/plain\r\nConnection: close\r\n\r\n").ok()?;
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).ok()?;
    let status = answer.split(' ').nth(1)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Some((status, body))
}

pub fn database_url() -> String {
    std::env::var("FLEETSYNC_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Drops a test schema when the test ends, pass or fail (best effort, with psql).
pub struct Schema(pub String);

impl Drop for Schema {
    fn drop(&mut self) {
        let sql = format!("DROP SCHEMA IF EXISTS {} CASCADE", self.0);
        let _ = Command::new("psql").args([database_url().as_str(), "-qc", &sql]).output();
    }
}

/// The simulated clusters a test applies to: the simulator's server (what `fleetsync
/// sim` serves, which the binary runs from `fleetsync-bench`) on a free loopback port,
/// on a thread and runtime of its own in the test process, so that the tests do not
/// need the plugin built. Stopped on drop.
pub struct SimChild {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// `host:port`.
    pub addr: String,
}

impl SimChild {
    pub fn start(latency_scale: f64) -> SimChild {
        use fleetsync_k8s_sim::{LatencyModel, SimConfig, SimServer};
        let config = SimConfig { latency: LatencyModel::hive_fleet_scaled(latency_scale), ..SimConfig::default() };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt =
                tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the simulator");
                addr_tx.send(listener.local_addr().expect("its address").to_string()).expect("send the address");
                // Ended by dropping the runtime, as a killed process would end: open
                // watches do not hold it up.
                tokio::spawn(async move { SimServer::new(config).serve(listener, std::future::pending()).await });
                let _ = stopped.await;
            });
            rt.shutdown_background();
        });
        let addr = addr_rx.recv().expect("the simulator started");
        SimChild { stop: Some(stop), thread: Some(thread), addr }
    }
}

impl Drop for SimChild {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs `f` to its end on a runtime of its own (the tests are synchronous).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(f)
}

/// Waits until `ok`, looking every 50 ms; fails the test naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
