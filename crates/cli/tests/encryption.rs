//! Secrets at rest: with `--encryption-key-file` a Secret's value is nowhere in the
//! store's bytes (SQLite's file and WAL, PostgreSQL's row), yet clusters still reach
//! their targets through it; a hub given a wrong key, or none, refuses to start on a
//! sealed store without showing a value; a key file of [new, old] opens what the old
//! key sealed and seals it again with the new one at start. The SQLite store and its
//! side files are created 0600 whatever the umask.

mod common;

use common::*;
use fleetsync_model::{KeyStatus, Phase};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The credential; it must never be in the store's bytes, nor in an error.
const MARKER: &str = "MARKER-5e1c0d-sealed-credential";

/// A new key as the docs say to make one: `head -c 32 /dev/urandom | base64`.
fn new_key() -> String {
    let out = Command::new("sh").args(["-c", "head -c 32 /dev/urandom | base64"]).output().expect("sh");
    assert!(out.status.success());
    stdout(&out).trim().to_string()
}

fn write_keys(path: &Path, lines: &[(&str, &str)]) {
    let text: String = lines.iter().map(|(name, key)| format!("{name}:{key}\n")).collect();
    std::fs::write(path, format!("# fleetsync encryption keys: the first seals, all open\n{text}"))
        .expect("write keys");
}

/// A Secret holding a kubeconfig (whose token is the marker) that points cluster c1 at
/// the simulator, the cluster, and a SyncSet of `configmaps` ConfigMaps on it.
fn fleet(sim: &str, configmaps: usize) -> String {
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: 'http://{sim}/clusters/c1'}}}}]\nusers: [{{name: u, user: {{token: {MARKER}}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
    );
    let indented: String = kubeconfig.lines().map(|l| format!("    {l}\n")).collect();
    let resources: String =
        (0..configmaps).map(|i| format!("    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: cm{i}, namespace: default}}, data: {{k: v}}}}\n")).collect();
    format!(
        "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: kc}}\nstringData:\n  kubeconfig: |\n{indented}---\n\
         apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c1}}\nspec: {{endpoint: {{kubeconfig: {{secretRef: kc}}}}}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: base}}\nspec:\n  clusterNames: [c1]\n  resources:\n{resources}"
    )
}

/// A `fleetsync serve` on the given store flags, its log (at info) in `log`.
struct Served {
    child: Killed,
    url: String,
    token: String,
}

impl Served {
    fn start(store: &[&str], token: Option<&str>, log: &Path) -> Served {
        let listen = free_address();
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log).expect("log");
        let child = bin()
            .arg("serve")
            .args(["--listen", &listen])
            .args(store)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .expect("serve");
        let mut child = Killed(child);
        let token = match token {
            Some(t) => t.to_string(),
            None => {
                let db = store.iter().position(|a| *a == "--db").map(|i| store[i + 1]).expect("--db");
                read_when_there(&PathBuf::from(format!("{db}.admin-token")), &mut child, log)
            }
        };
        let mut served = Served { child, url: format!("http://{listen}"), token };
        let start = Instant::now();
        while !served.cli(&["get", "clusters"]).status.success() {
            if let Some(status) = served.child.0.try_wait().expect("wait") {
                panic!("serve exited ({status}): {}", std::fs::read_to_string(log).unwrap_or_default());
            }
            assert!(start.elapsed() < Duration::from_secs(30), "serve did not answer");
            std::thread::sleep(Duration::from_millis(100));
        }
        served
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        bin().args(args).args(["--server", &self.url]).env("FLEETSYNC_TOKEN", &self.token).output().expect("run client")
    }

    fn apply(&self, dir: &Path, yaml: &str) -> String {
        let file = dir.join("fleet.yaml");
        std::fs::write(&file, yaml).expect("write");
        let out = self.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    }

    /// Waits until c1's key is applied at SyncSet generation `generation` (reaching the
    /// simulator needs the kubeconfig the Secret holds).
    fn wait_applied(&self, generation: i64) {
        let start = Instant::now();
        loop {
            let out = self.cli(&["get", "status", "-o", "json"]);
            assert!(out.status.success(), "{}", stderr(&out));
            let items: fleetsync_api::Items<KeyStatus> = serde_json::from_str(&stdout(&out)).expect("status");
            let c1 = items.items.iter().find(|k| k.key.cluster == "c1");
            if c1.is_some_and(|k| k.phase == Phase::Applied && k.observed_generation == generation) {
                return;
            }
            assert!(start.elapsed() < Duration::from_secs(30), "c1 not applied at generation {generation}: {c1:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops it (SIGTERM) and waits for it to exit.
    fn stop(mut self) {
        Command::new("kill").args(["-TERM", &self.child.0.id().to_string()]).status().expect("kill");
        let start = Instant::now();
        while self.child.0.try_wait().expect("wait").is_none() {
            assert!(start.elapsed() < Duration::from_secs(30), "serve did not stop");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

fn read_when_there(file: &Path, child: &mut Killed, log: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(file) {
            if !t.trim().is_empty() {
                return t.trim().to_string();
            }
        }
        if let Some(status) = child.0.try_wait().expect("wait") {
            panic!("serve exited ({status}): {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        assert!(start.elapsed() < Duration::from_secs(20), "no token at {}", file.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `fleetsync serve` on the store flags, expecting it to refuse to start; returns
/// what it said (its stderr).
fn refused(store: &[&str]) -> String {
    let child = bin()
        .arg("serve")
        .args(["--listen", &free_address()])
        .args(store)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    let mut child = Killed(child);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.0.try_wait().expect("wait") {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "serve started instead of refusing");
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut said = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().expect("stderr"), &mut said).expect("read stderr");
    assert!(!status.success(), "serve exited 0: {said}");
    said
}

/// The store's files as they are on disk: the database, its WAL and shared memory.
fn store_files(db: &Path) -> Vec<PathBuf> {
    ["", "-wal", "-shm"].iter().map(|s| PathBuf::from(format!("{}{s}", db.display()))).filter(|p| p.exists()).collect()
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Whether any of the store's files holds `text`.
fn on_disk(db: &Path, text: &str) -> bool {
    store_files(db).iter().any(|f| contains(&std::fs::read(f).expect("read store file"), text))
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).expect("metadata").permissions().mode() & 0o777
}

/// This test process's umask, which the hub inherits (Linux: /proc/self/status).
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status.lines().find(|l| l.starts_with("Umask:")).expect("Umask line");
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).expect("octal")
}

#[test]
fn sqlite_secrets_are_sealed_private_and_rotated() {
    // What the hub would create files as without its own rule: a umask that lets
    // others read (022, the usual one) makes the mode check below meaningful.
    assert_eq!(umask() & 0o044, 0, "run this test with a umask that lets others read new files (e.g. 022)");
    let sim = SimChild::start(0.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, keys, log) = (dir.path().join("hub.db"), dir.path().join("keys"), dir.path().join("hub.log"));
    let (k1, k2) = (new_key(), new_key());
    write_keys(&keys, &[("k1", &k1)]);
    let store = ["--db", db.to_str().expect("utf-8"), "--encryption-key-file", keys.to_str().expect("utf-8")];

    let hub = Served::start(&store, None, &log);
    let said = hub.apply(dir.path(), &fleet(&sim.addr, 1));
    assert!(said.contains("secret/kc created"), "{said}");
    hub.wait_applied(1);
    // Sealed with k1, in the file or the WAL; the value itself in neither.
    assert!(on_disk(&db, "fleetsync:enc:aes256gcm:v1:k1:"), "the Secret is stored sealed with k1");
    assert!(!on_disk(&db, MARKER), "a store file holds the credential in clear");
    let files = store_files(&db);
    assert!(files.len() == 3, "the database, its WAL and shm: {files:?}");
    for f in &files {
        assert_eq!(mode(f), 0o600, "{} is {:o}", f.display(), mode(f));
    }
    // The same Secret applied again is unchanged (compared opened, not as sealed bytes).
    assert!(hub.apply(dir.path(), &fleet(&sim.addr, 1)).contains("secret/kc unchanged"));
    hub.stop();

    // A wrong key of the same name, an unknown key, no key: refused, naming the Secret
    // and the key, never a value or a key.
    write_keys(&keys, &[("k1", &k2)]);
    let wrong = refused(&store);
    assert!(wrong.contains("Secret default/kc does not open with key \"k1\""), "{wrong}");
    write_keys(&keys, &[("k2", &k2)]);
    let unknown = refused(&store);
    assert!(unknown.contains("sealed with key \"k1\", which the encryption key file does not hold"), "{unknown}");
    let none = refused(&store[..2]);
    assert!(none.contains("sealed with key \"k1\", but this process was given no encryption key"), "{none}");
    for said in [&wrong, &unknown, &none] {
        assert!(!said.contains(MARKER) && !said.contains(&k1) && !said.contains(&k2), "{said}");
    }
    std::fs::write(&keys, format!("k1:{}\n", &k1[..20])).expect("write");
    let bad = refused(&store);
    assert!(bad.contains("line 1: expected [NAME:]BASE64 of exactly 32 bytes") && !bad.contains(&k1[..20]), "{bad}");

    // Rotation: [k2, k1] opens what k1 sealed and seals it again with k2 at start.
    write_keys(&keys, &[("k2", &k2), ("k1", &k1)]);
    let hub = Served::start(&store, Some(&hub_token(&db)), &log);
    assert!(on_disk(&db, "fleetsync:enc:aes256gcm:v1:k2:"), "sealed again with k2 at start");
    assert!(hub.apply(dir.path(), &fleet(&sim.addr, 1)).contains("secret/kc unchanged"));
    hub.stop();
    // …so k1 can go: with k2 alone the hub starts, and the Secret still reaches c1 (a
    // new SyncSet generation is applied through it).
    write_keys(&keys, &[("k2", &k2)]);
    let hub = Served::start(&store, Some(&hub_token(&db)), &log);
    hub.apply(dir.path(), &fleet(&sim.addr, 2));
    hub.wait_applied(2);
    assert!(!on_disk(&db, MARKER));
    hub.stop();
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(logged.contains("sealed Secrets again with the first key"), "{logged}");
    assert!(!logged.contains(MARKER) && !logged.contains(&k1) && !logged.contains(&k2), "{logged}");
}

fn hub_token(db: &Path) -> String {
    std::fs::read_to_string(format!("{}.admin-token", db.display())).expect("admin token").trim().to_string()
}

/// A store written before a key was given holds its Secrets in clear (and says so at
/// start); the first start with a key seals them, and leaves no clear copy in the
/// file's free pages or its WAL. A store file others may read is warned about.
#[test]
fn sqlite_secrets_written_in_clear_are_sealed_when_a_key_is_given() {
    let sim = SimChild::start(0.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let (db, keys, log) = (dir.path().join("hub.db"), dir.path().join("keys"), dir.path().join("hub.log"));
    let db_arg = db.to_str().expect("utf-8");
    let hub = Served::start(&["--db", db_arg], None, &log);
    hub.apply(dir.path(), &fleet(&sim.addr, 1));
    hub.wait_applied(1);
    assert!(on_disk(&db, MARKER), "without a key the value is kept in clear");
    hub.stop();
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(
        logged.contains("no --encryption-key-file: Secret values (the clusters' credentials) are kept in clear"),
        "{logged}"
    );

    // A store file made readable by others is warned about (it still opens).
    std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o644)).expect("chmod");
    write_keys(&keys, &[("k1", &new_key())]);
    let hub = Served::start(
        &["--db", db_arg, "--encryption-key-file", keys.to_str().expect("utf-8")],
        Some(&hub_token(&db)),
        &log,
    );
    assert!(!on_disk(&db, MARKER), "sealing left the credential in clear on disk");
    assert!(on_disk(&db, "fleetsync:enc:aes256gcm:v1:k1:"));
    hub.apply(dir.path(), &fleet(&sim.addr, 2));
    hub.wait_applied(2);
    hub.stop();
    let logged = std::fs::read_to_string(&log).expect("log");
    assert!(logged.contains("the store file may be read by other users"), "{logged}");
}

/// PostgreSQL: the row holds the sealed document, never the value; a wrong key is
/// refused; [new, old] seals again with the new key at start.
#[test]
fn postgres_secrets_are_sealed_and_rotated() {
    let sim = SimChild::start(0.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let (keys, log) = (dir.path().join("keys"), dir.path().join("hub.log"));
    let schema = Schema(format!("fs_seal_{}", std::process::id()));
    let url = database_url();
    let (k1, k2) = (new_key(), new_key());
    write_keys(&keys, &[("k1", &k1)]);
    let store = [
        "--database-url",
        url.as_str(),
        "--schema",
        schema.0.as_str(),
        "--encryption-key-file",
        keys.to_str().expect("utf-8"),
    ];
    let migrated = run(&["migrate", "--database-url", &url, "--schema", &schema.0]);
    assert!(migrated.status.success(), "{}", stderr(&migrated));
    let issued = run(&[
        "token",
        "create",
        "--database-url",
        &url,
        "--schema",
        &schema.0,
        "--tenant",
        "default",
        "--role",
        "fleet-admin",
    ]);
    assert!(issued.status.success(), "{}", stderr(&issued));
    let token = stdout(&issued).trim().to_string();
    let row = || {
        let sql = format!("SELECT doc FROM {}.secrets WHERE tenant = 'default' AND name = 'kc'", schema.0);
        let out = Command::new("psql").args([url.as_str(), "-XAtc", &sql]).output().expect("psql");
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };

    let hub = Served::start(&store, Some(&token), &log);
    hub.apply(dir.path(), &fleet(&sim.addr, 1));
    hub.wait_applied(1);
    let sealed = row();
    assert!(sealed.starts_with("fleetsync:enc:aes256gcm:v1:k1:") && !sealed.contains(MARKER), "{sealed}");
    assert!(hub.apply(dir.path(), &fleet(&sim.addr, 1)).contains("secret/kc unchanged"));
    hub.stop();

    write_keys(&keys, &[("k1", &k2)]);
    let wrong = refused(&store);
    assert!(
        wrong.contains("Secret default/kc does not open with key \"k1\"")
            && !wrong.contains(MARKER)
            && !wrong.contains(&k2),
        "{wrong}"
    );

    write_keys(&keys, &[("k2", &k2), ("k1", &k1)]);
    let hub = Served::start(&store, Some(&token), &log);
    let resealed = row();
    assert!(resealed.starts_with("fleetsync:enc:aes256gcm:v1:k2:") && !resealed.contains(MARKER), "{resealed}");
    hub.apply(dir.path(), &fleet(&sim.addr, 2));
    hub.wait_applied(2);
    hub.stop();
}
