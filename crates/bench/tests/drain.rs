//! `fleetsync bench drain` (the `fleetsync-bench drain` it runs) as scripts run it:
//! the JSON shape fixed by issue 4, on SQLite and on PostgreSQL, with and without the
//! graphile_worker peer. Speed is not asserted (the machine is shared); completeness
//! is: the bench itself checks that every item was completed and exits non-zero
//! otherwise.

mod common;

use common::{bin, database_url, run, stderr, stdout};
use serde_json::Value;
use std::process::{Command, Stdio};

/// Runs `bench drain … --json`, expects success and exactly one JSON object on
/// stdout; returns it and the run's pid (which names its PostgreSQL schemas).
fn drain_json(args: &[&str]) -> (Value, u32) {
    let child = bin()
        .args([&["drain", "--json"], args].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run fleetsync-bench");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for fleetsync-bench");
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.trim().lines().count(), 1, "one line of JSON: {text}");
    (serde_json::from_str(text.trim()).expect("JSON"), pid)
}

/// A run drops the schemas it made (named `bench_drain_<pid>_…`), its own and the peer's.
fn assert_schemas_dropped(url: &str, pid: u32) {
    let sql = format!("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'bench\\_drain\\_{pid}\\_%'");
    let out = Command::new("psql").args([url, "-Atc", &sql]).output().expect("psql");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "0", "schemas of run {pid} left behind");
}

/// The fixed fields are there with the right types; extra detail may follow.
fn assert_shape(v: &Value, backend: &str, items: u64) {
    for field in ["backend", "items", "items_per_sec", "peer", "ratio"] {
        assert!(v.get(field).is_some(), "missing {field}: {v}");
    }
    assert_eq!(v["backend"], backend, "{v}");
    assert_eq!(v["items"], items, "{v}");
    assert!(v["items_per_sec"].as_f64().expect("items_per_sec") > 0.0, "{v}");
}

#[test]
fn drain_on_sqlite_completes_every_item() {
    // Not a multiple of the SyncSets per cluster: the remainder must be enqueued too.
    let (v, _) = drain_json(&["--items", "2013"]);
    assert_shape(&v, "sqlite", 2013);
    assert!(v["peer"].is_null() && v["ratio"].is_null(), "{v}");
}

#[test]
fn drain_on_postgres_completes_every_item() {
    let url = database_url();
    let (v, pid) = drain_json(&["--items", "2000", "--database-url", &url]);
    assert_shape(&v, "postgres", 2000);
    assert!(v["peer"].is_null() && v["ratio"].is_null(), "{v}");
    assert_schemas_dropped(&url, pid);
}

#[test]
fn drain_beside_graphile_worker_reports_a_ratio() {
    let url = database_url();
    let (v, pid) = drain_json(&["--items", "1000", "--database-url", &url, "--peer", "graphile-worker"]);
    assert_shape(&v, "postgres", 1000);
    let peer = &v["peer"];
    assert_eq!(peer["name"], "graphile-worker", "{v}");
    let peer_rate = peer["items_per_sec"].as_f64().expect("peer items_per_sec");
    let ratio = v["ratio"].as_f64().expect("ratio");
    let ours = v["items_per_sec"].as_f64().expect("items_per_sec");
    assert!(peer_rate > 0.0, "{v}");
    assert!((ratio - ours / peer_rate).abs() <= 1e-6 * ratio.max(1.0), "ratio is ours / peer: {v}");
    assert_schemas_dropped(&url, pid);
}

#[test]
fn peer_without_a_database_says_what_is_missing() {
    let out = run(&["drain", "--items", "10", "--peer", "graphile-worker"]);
    assert!(!out.status.success(), "must fail");
    assert!(stderr(&out).contains("--peer graphile-worker needs --database-url"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "nothing on stdout when it fails");
}

#[test]
fn bad_drain_flags_say_what_to_fix() {
    let out = run(&["drain", "--items", "0"]);
    assert!(!out.status.success() && stderr(&out).contains("--items must be at least 1"), "{}", stderr(&out));
    let out = run(&["drain", "--items", "10", "--database-url", "postgres://postgres@127.0.0.1:1/test"]);
    assert!(!out.status.success() && stderr(&out).contains("cannot connect to PostgreSQL"), "{}", stderr(&out));
}

#[test]
fn churn_under_a_held_transaction_reports_each_round() {
    let url = database_url();
    let (v, pid) = drain_json(&["--items", "600", "--database-url", &url, "--churn", "3"]);
    assert_shape(&v, "postgres", 600);
    let churn = &v["churn"];
    assert_eq!(churn["rounds"], 3, "{v}");
    let rates = churn["items_per_sec_by_round"].as_array().expect("rates by round");
    assert_eq!(rates.len(), 3, "{v}");
    assert!(rates.iter().all(|r| r.as_f64().is_some_and(|r| r > 0.0)), "{v}");
    // The held transaction keeps every round's dead row versions: the table only grows.
    let (before, after) =
        (churn["work_bytes_before"].as_i64().expect("before"), churn["work_bytes_after"].as_i64().expect("after"));
    assert!(before > 0 && after > before, "work table {before} → {after} bytes: {v}");
    assert!(churn["loss"].as_f64().is_some(), "{v}");
    assert_schemas_dropped(&url, pid);
}

#[test]
fn churn_without_a_database_says_what_is_missing() {
    let out = run(&["drain", "--items", "10", "--churn", "2"]);
    assert!(!out.status.success(), "must fail");
    assert!(stderr(&out).contains("--churn needs --database-url"), "{}", stderr(&out));
}
