//! Identity and access with real processes: the quick start's two terminals (the CLI
//! finds the embedded hub's first token), tokens issued, used, listed and revoked from
//! the command line, who made each change in the event log, CLI contexts, and no
//! token in clear in the store's file or the hub's debug log.

mod common;

use common::{bin, example, stderr, stdout, Hub};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// `fleetsync ARGS` run in `dir`, with only `env` set among fleetsync's variables.
fn run_in(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = bin();
    c.current_dir(dir).args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run fleetsync")
}

fn anonymous_status(url: &str) -> u16 {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async { reqwest::get(format!("{url}/v1/clusters")).await.expect("reach the hub").status().as_u16() })
}

/// The README's quick start, two terminals in one directory: `fleetsync serve` issues
/// its first token into `fleetsync.db.admin-token` (mode 0600) and the CLI finds it;
/// without it the API answers 401.
#[test]
fn the_quick_start_needs_no_setup_and_strangers_get_401() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let listen = format!("127.0.0.1:{port}");
    let mut serve = bin()
        .current_dir(dir.path())
        .args(["serve", "--listen", &listen])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("serve");
    let url = format!("http://{listen}");
    let token_file = dir.path().join("fleetsync.db.admin-token");
    let start = Instant::now();
    let applied = loop {
        let out = run_in(dir.path(), &["apply", "-f", example().to_str().expect("utf-8"), "--server", &url], &[]);
        if out.status.success() {
            break out;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "apply never worked: {}", stderr(&out));
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(stdout(&applied).contains("cluster/eu-west-1 created"), "{}", stdout(&applied));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&token_file).expect("token file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the token file is the owner's only");
    }
    assert_eq!(anonymous_status(&url), 401);
    let wrong = run_in(dir.path(), &["get", "clusters", "--server", &url, "--token", "fst_wrong"], &[]);
    assert!(!wrong.status.success());
    assert!(stderr(&wrong).contains("401") && stderr(&wrong).contains("--token"), "{}", stderr(&wrong));
    let _ = serve.kill();
    let out = serve.wait_with_output().expect("serve output");
    let log = stderr(&out);
    let token = std::fs::read_to_string(&token_file).expect("token");
    assert!(log.contains("fleetsync.db.admin-token"), "the log names the file: {log}");
    assert!(!log.contains(token.trim()), "the log never holds the token");
}

/// Tokens from the command line: `token create --db` prints the token alone; it works
/// for its tenant and role only; `token list` never shows a token; a revoked token is
/// refused; the event log names who made each change; neither the store's file nor
/// the hub's debug log holds a token in clear.
#[test]
fn tokens_are_issued_scoped_revoked_and_never_kept_in_clear() {
    let log = tempfile::NamedTempFile::new().expect("log file");
    let hub = Hub::start_logged(Some(log.path()));
    let db = hub.dir.path().join("hub.db");
    let db = db.to_str().expect("utf-8");
    let create = |args: &[&str]| {
        let out = common::run(&[&["token", "create", "--db", db][..], args].concat());
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out).lines().count(), 1, "the token alone on stdout");
        stdout(&out).trim().to_string()
    };
    let editor = create(&["--tenant", "default", "--role", "editor", "--name", "ci"]);
    let viewer = create(&["--tenant", "default", "--role", "viewer", "--ttl", "1h"]);
    let other = create(&["--tenant", "team-b", "--role", "admin"]);
    assert!(editor.starts_with("fst_") && editor.len() >= 4 + 64, "256 random bits");

    let as_ = |token: &str, args: &[&str]| {
        bin().args(args).args(["--server", &hub.url, "--token", token]).output().expect("run")
    };
    let file = example();
    let applied = as_(&editor, &["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(applied.status.success(), "{}", stderr(&applied));
    let refused = as_(&viewer, &["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(!refused.status.success() && stderr(&refused).contains("403"), "{}", stderr(&refused));
    assert!(as_(&viewer, &["get", "clusters"]).status.success());
    let elsewhere = as_(&other, &["get", "clusters"]);
    assert!(!elsewhere.status.success() && stderr(&elsewhere).contains("403"), "{}", stderr(&elsewhere));

    let events = as_(&viewer, &["get", "events"]);
    assert!(stdout(&events).contains("ACTOR") && stdout(&events).contains("token:ci"), "{}", stdout(&events));

    let list = common::run(&["token", "list", "--db", db, "-o", "json"]);
    assert!(list.status.success(), "{}", stderr(&list));
    for t in [&editor, &viewer, &other, &hub.token] {
        assert!(!stdout(&list).contains(t.as_str()), "token list shows no token");
    }
    assert!(stdout(&list).contains("\"default:editor\""), "{}", stdout(&list));

    let revoked = common::run(&["token", "revoke", "ci", "--db", db]);
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    let after = as_(&editor, &["get", "clusters"]);
    assert!(!after.status.success() && stderr(&after).contains("401"), "{}", stderr(&after));

    let stored = std::fs::read(hub.dir.path().join("hub.db")).expect("db");
    let mut wal = std::fs::read(hub.dir.path().join("hub.db-wal")).unwrap_or_default();
    wal.extend(stored);
    let logged = std::fs::read_to_string(log.path()).expect("log");
    for t in [&editor, &viewer, &other, &hub.token] {
        let marker = &t.as_bytes()[4..];
        assert!(!wal.windows(marker.len()).any(|w| w == marker), "a token is stored in clear");
        assert!(!logged.contains(&t[4..]), "a token is in the debug log");
    }
}

/// A config file's context gives the server, the token and the tenant; `--context`
/// picks another; an unknown one is named.
#[test]
fn contexts_say_where_and_as_whom() {
    let hub = Hub::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{}\n", hub.token)).expect("token file");
    let config = dir.path().join("config.yaml");
    let text = format!(
        "current-context: nowhere\ncontexts:\n  - name: nowhere\n    server: http://127.0.0.1:9\n  - name: hub\n    server: {}\n    token-file: {}\n    tenant: default\n",
        hub.url,
        token_file.display()
    );
    std::fs::write(&config, text).expect("config");
    let cfg = config.to_str().expect("utf-8");
    let ok = run_in(dir.path(), &["get", "clusters", "--context", "hub"], &[("FLEETSYNC_CONFIG", cfg)]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let current = run_in(dir.path(), &["get", "clusters"], &[("FLEETSYNC_CONFIG", cfg)]);
    assert!(!current.status.success() && stderr(&current).contains("127.0.0.1:9"), "{}", stderr(&current));
    let unknown = run_in(dir.path(), &["get", "clusters", "--context", "zz"], &[("FLEETSYNC_CONFIG", cfg)]);
    assert!(
        stderr(&unknown).contains("no context named \"zz\"") && stderr(&unknown).contains("nowhere, hub"),
        "{}",
        stderr(&unknown)
    );
}
