//! The `fleetsync` binary as a user runs it: demo, bad input, and a hub served on
//! loopback driven by apply, get and delete.

mod common;

use common::*;
use std::process::Stdio;
use std::time::Duration;

#[test]
fn demo_json_converges_and_prints_one_object() {
    let args = ["demo", "--clusters", "12", "--syncsets", "5", "--resources", "3", "--latency-scale", "0.02", "--json"];
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.trim().lines().count(), 1, "one line of JSON: {text}");
    let v: serde_json::Value = serde_json::from_str(text.trim()).expect("JSON");
    let mut keys: Vec<&str> = v.as_object().expect("object").keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["applies", "applies_per_sec", "converged", "failed_keys", "makespan_over_critical", "peak_rss_bytes", "seconds"]
    );
    assert_eq!(v["applies"], 12 * 5 * 3);
    assert_eq!(v["converged"], true);
    assert_eq!(v["failed_keys"], 0);
    let m = &v["makespan_over_critical"];
    let (p50, max) = (m["p50"].as_f64().expect("p50"), m["max"].as_f64().expect("max"));
    assert!(p50 >= 0.99 && max >= p50, "{m}");
    assert!(v["applies_per_sec"].as_f64().expect("rate") > 0.0);
    assert!(v["peak_rss_bytes"].as_u64().expect("rss") > 1 << 20);
}

#[test]
fn demo_with_failures_retries_and_converges() {
    let args = [
        "demo", "--clusters", "4", "--syncsets", "3", "--resources", "3", "--latency-scale", "0.01", "--fail-rate", "0.2",
        "--backoff-base", "10ms", "--backoff-cap", "50ms", "--max-attempts", "50", "--json",
    ];
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("JSON");
    assert_eq!(v["converged"], true);
    // A retry re-applies the resources before the one that failed, so more than 36.
    assert!(v["applies"].as_u64().expect("applies") >= 36, "{v}");
}

#[test]
fn bad_flags_say_what_to_fix() {
    let cases: [(&[&str], &str); 5] = [
        (&["demo", "--fail-rate", "2"], "fail rate must be between 0 and 1"),
        (&["demo", "--worker-id", " "], "--worker-id must be a non-empty name"),
        (&["demo", "--clusters", "0"], "--clusters, --syncsets and --resources must each be at least 1"),
        (&["demo", "--renew-every", "40s"], "--renew-every"),
        (&["demo", "--lease-ttl", "soon"], "--lease-ttl"),
    ];
    for (args, want) in cases {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} must fail");
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn apply_rejects_an_invalid_file_naming_the_problem() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: Bad_Name}\nspec: {endpoint: {simulator: {}}}\n")
        .expect("write");
    let out = run(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("bad.yaml") && err.contains("metadata.name") && err.contains("DNS-1123"), "{err}");
    let out = run(&["apply", "-f", "/nonexistent/fleet.yaml"]);
    assert!(!out.status.success() && stderr(&out).contains("cannot read /nonexistent/fleet.yaml"), "{}", stderr(&out));
}

#[test]
fn client_without_a_hub_says_so() {
    let out = run(&["get", "clusters", "--server", "http://127.0.0.1:9"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("cannot reach the hub at http://127.0.0.1:9"), "{}", stderr(&out));
}

/// A `fleetsync serve` child, stopped with SIGTERM when the test ends.
#[test]
fn serve_apply_get_delete() {
    let mut hub = Hub::start();
    let file = example();
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("syncset/base created"), "{}", stdout(&out));
    let again = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(stdout(&again).contains("syncset/base unchanged"), "{}", stdout(&again));

    // 2 clusters × base + eu-only on one = 3 keys, all applied.
    hub.wait_until(Duration::from_secs(30), |h| {
        let items = status_items(h);
        items.len() == 3 && items.iter().all(|k| k["phase"] == "Applied")
    });
    let out = hub.cli(&["get", "status", "eu-west-1"]);
    assert!(stdout(&out).contains("reason=Converged"), "{}", stdout(&out));
    let out = hub.cli(&["get", "clusters"]);
    assert!(stdout(&out).contains("eu-west-1") && stdout(&out).contains("env=prod"), "{}", stdout(&out));

    let out = hub.cli(&["delete", "syncset", "eu-only"]);
    assert!(out.status.success(), "{}", stderr(&out));
    hub.wait_until(Duration::from_secs(30), |h| status_items(h).len() == 2);
    let out = hub.cli(&["get", "syncsets", "-o", "yaml"]);
    assert!(stdout(&out).contains("name: base") && !stdout(&out).contains("eu-only"), "{}", stdout(&out));

    let out = hub.cli(&["get", "clusters", "nope"]);
    assert!(!out.status.success() && stderr(&out).contains("404"), "{}", stderr(&out));
    let out = hub.cli(&["delete", "cluster", "nope"]);
    assert!(!out.status.success(), "deleting what does not exist fails");

    assert!(hub.terminate().success(), "serve exits 0 on SIGTERM");
}

/// The fleet through the Kubernetes applier over loopback HTTP against a `fleetsync
/// sim` child process: the sim's verdict must be clean. Speed is not asserted.
#[test]
fn bench_hive_fleet_small_has_a_clean_verdict() {
    let args = [
        "bench", "hive-fleet", "--clusters", "50", "--syncsets", "10", "--resources", "5", "--latency-scale", "0.02",
        "--baseline", "hive", "--baseline-window", "2s", "--json",
    ];
    let out = run(&args);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON object");
    assert_eq!(v["verdict"], serde_json::json!({"latest_generation": true, "order_kept": true, "overlaps": 0}));
    assert_eq!((v["converged"].as_bool(), v["applies"].as_u64(), v["failed_keys"].as_u64()), (Some(true), Some(2500), Some(0)));
    assert!(v["cpu_seconds"].as_f64().expect("cpu") > 0.0);
    assert!(v["makespan_over_critical"]["p50"].as_f64().expect("p50") >= 0.99, "{v}");
    assert!(v["baseline"]["applies_per_sec"].as_f64().expect("baseline rate") > 0.0, "{v}");
    assert!(v["speedup"].as_f64().expect("speedup") > 0.0);
}

#[test]
fn bench_rejects_bad_flags() {
    let out = run(&["bench", "hive-fleet", "--resources", "0"]);
    assert!(!out.status.success() && stderr(&out).contains("--resources"), "{}", stderr(&out));
    let out = run(&["sim", "--fail-status", "200"]);
    assert!(!out.status.success() && stderr(&out).contains("--fail-status"), "{}", stderr(&out));
    let out = run(&["bench", "hive-fleet", "--processes", "2"]);
    assert!(!out.status.success() && stderr(&out).contains("--processes 2 needs --database-url"), "{}", stderr(&out));
    let out = run(&["bench", "hive-fleet", "--processes", "0", "--database-url", "postgres://postgres@127.0.0.1:1/test"]);
    assert!(!out.status.success() && stderr(&out).contains("--processes must be at least 1"), "{}", stderr(&out));
}

/// `bench hive-fleet --database-url … --processes N --json` as scripts run it: the
/// hive-fleet fields plus `processes`, a clean verdict, each worker's usage, and the
/// run's schema (`bench_fleet_<pid>`) dropped afterwards.
#[test]
fn bench_hive_fleet_with_worker_processes() {
    let url = database_url();
    let args = [
        "bench", "hive-fleet", "--clusters", "20", "--syncsets", "5", "--resources", "3", "--latency-scale", "0.02",
        "--database-url", &url, "--processes", "2", "--max-in-flight", "8", "--member-ttl", "1s", "--json",
    ];
    let child = bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run fleetsync");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for fleetsync");
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON object");
    assert_eq!(v["processes"], 2, "{v}");
    assert_eq!(v["verdict"], serde_json::json!({"latest_generation": true, "order_kept": true, "overlaps": 0}));
    assert_eq!((v["converged"].as_bool(), v["applies"].as_u64(), v["failed_keys"].as_u64()), (Some(true), Some(300), Some(0)));
    let each = v["per_process"].as_array().expect("per_process");
    assert_eq!(each.len(), 2, "{v}");
    assert!(each.iter().all(|p| p["peak_rss_bytes"].as_u64() > Some(1 << 20)), "worker RSS read from /proc: {v}");
    assert_eq!(each.iter().filter_map(|p| p["clusters"].as_u64()).sum::<u64>(), 20, "the clusters are shared out: {v}");
    let sql = format!("SELECT count(*) FROM pg_namespace WHERE nspname = 'bench_fleet_{pid}'");
    let left = std::process::Command::new("psql").args([url.as_str(), "-Atc", &sql]).output().expect("psql");
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "0", "the run's schema was left behind");
}

/// Many processes on one PostgreSQL store: `migrate`, then a hub (`serve`) and a
/// separate `worker` run against the same schema while a fleet converges. (Which
/// process takes which key is not asserted here; the store's exclusivity is tested
/// by the conformance suite.)
#[test]
fn hub_and_worker_share_a_postgres_store() {
    let schema = Schema(format!("fs_cli_{}", std::process::id()));
    let url = database_url();
    let out = run(&["migrate", "--database-url", &url, "--schema", &schema.0]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("at version"), "{}", stdout(&out));

    let store = ["--database-url", url.as_str(), "--schema", schema.0.as_str(), "--no-migrate"];
    let mut hub = Hub::start_with(tempfile::tempdir().expect("tempdir"), &store);
    let mut worker = bin().arg("worker").args(store).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("worker");
    let file = example();
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    hub.wait_until(Duration::from_secs(30), |h| {
        let items = status_items(h);
        items.len() == 3 && items.iter().all(|k| k["phase"] == "Applied")
    });
    let _ = worker.kill();
    let _ = worker.wait();
    assert!(hub.terminate().success());
}

#[test]
fn postgres_commands_say_what_is_wrong() {
    let out = run(&["worker"]);
    assert!(!out.status.success() && stderr(&out).contains("--database-url"), "{}", stderr(&out));
    let out = run(&["migrate", "--database-url", "postgres://postgres@127.0.0.1:1/test"]);
    assert!(!out.status.success() && stderr(&out).contains("connecting to PostgreSQL"), "{}", stderr(&out));
}
