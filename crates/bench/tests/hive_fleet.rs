//! `fleetsync-bench hive-fleet` as scripts run it (as `fleetsync bench hive-fleet`, the
//! main binary runs this one). It starts `fleetsync sim` and `fleetsync worker`s from
//! the `fleetsync` binary next to it: `cargo build -p fleetsync` before these tests.

mod common;

use common::*;
use std::process::Stdio;

/// The fleet through the Kubernetes applier over loopback HTTP against a `fleetsync
/// sim` child process: the sim's verdict must be clean. Speed is not asserted.
/// `--db` keeps the converged store, and refuses a file that exists.
#[test]
fn bench_hive_fleet_small_has_a_clean_verdict() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("fleet.db");
    let db = db.to_str().expect("a UTF-8 path");
    let args = [
        "hive-fleet",
        "--clusters",
        "50",
        "--syncsets",
        "10",
        "--resources",
        "5",
        "--latency-scale",
        "0.02",
        "--baseline",
        "hive",
        "--baseline-window",
        "2s",
        "--json",
        "--db",
        db,
    ];
    let out = run(&args);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON object");
    assert_eq!(v["verdict"], clean_verdict());
    assert_eq!(
        (v["converged"].as_bool(), v["applies"].as_u64(), v["failed_keys"].as_u64()),
        (Some(true), Some(2500), Some(0))
    );
    assert!(v["cpu_seconds"].as_f64().expect("cpu") > 0.0);
    assert!(v["makespan_over_critical"]["p50"].as_f64().expect("p50") >= 0.99, "{v}");
    assert!(v["baseline"]["applies_per_sec"].as_f64().expect("baseline rate") > 0.0, "{v}");
    assert!(v["speedup"].as_f64().expect("speedup") > 0.0);
    assert!(v["load_seconds"].as_f64().expect("load_seconds") > 0.0, "{v}");

    let kept = tokio::runtime::Runtime::new().expect("runtime").block_on(async {
        use fleetsync_store::StatusRead;
        let store = fleetsync_store::sqlite::SqliteStore::open(db, fleetsync_store::StoreConfig::default())
            .expect("open the kept store");
        store.queue_stats().await.expect("stats").by_phase
    });
    assert_eq!(kept.get(&fleetsync_model::Phase::Applied), Some(&500), "every key applied in the kept store: {kept:?}");
    let again = run(&args);
    assert!(
        !again.status.success() && stderr(&again).contains("--db") && stderr(&again).contains("exists"),
        "{}",
        stderr(&again)
    );
}

/// What the simulator says of a side that did everything right, once each.
fn clean_verdict() -> serde_json::Value {
    serde_json::json!({
        "latest_generation": true, "keys_not_latest": 0, "order_kept": true, "overlaps": 0,
        "stale_writes": 0, "repeated_applies": 0
    })
}

#[test]
fn bench_rejects_bad_flags() {
    let out = run(&["hive-fleet", "--resources", "0"]);
    assert!(!out.status.success() && stderr(&out).contains("--resources"), "{}", stderr(&out));
    let out = run(&["hive-fleet", "--processes", "2"]);
    assert!(!out.status.success() && stderr(&out).contains("--processes 2 needs --database-url"), "{}", stderr(&out));
    let out = run(&["hive-fleet", "--processes", "0", "--database-url", "postgres://postgres@127.0.0.1:1/test"]);
    assert!(!out.status.success() && stderr(&out).contains("--processes must be at least 1"), "{}", stderr(&out));
    let out = run(&["hive-fleet", "--churn"]);
    assert!(!out.status.success() && stderr(&out).contains("--churn kills a worker process"), "{}", stderr(&out));
    let uneven = ["hive-fleet", "--baseline", "hive-rabbitmq", "--max-in-flight", "8", "--baseline-consumers", "3"];
    let out = run(&uneven);
    assert!(!out.status.success() && stderr(&out).contains("evenly"), "{}", stderr(&out));
}

/// Runs `hive-fleet … --baseline hive-rabbitmq --json` on 5 clusters × 3 SyncSets ×
/// 2 resources and checks what both sides report. Needs RabbitMQ on 127.0.0.1:5672
/// (or FLEETSYNC_BENCH_AMQP_URL).
fn rabbit_run(extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "hive-fleet",
        "--clusters",
        "5",
        "--syncsets",
        "3",
        "--resources",
        "2",
        "--latency-scale",
        "0.05",
        "--baseline",
        "hive-rabbitmq",
        "--max-in-flight",
        "4",
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON object");
    let b = &v["baseline"];
    assert_eq!((b["design"].as_str(), b["converged"].as_bool()), (Some("hive-rabbitmq"), Some(true)), "{b}");
    assert!(b["applies"].as_u64() >= Some(30), "every resource applied at least once: {b}");
    for figure in ["applies_per_sec", "cpu_seconds", "cpu_us_per_apply", "consumer_cpu_seconds"] {
        assert!(b[figure].as_f64().is_some_and(|x| x > 0.0), "{figure}: {b}");
    }
    assert!(b["broker_cpu_seconds"].as_f64().is_some(), "the broker's CPU is read (beam.smp): {b}");
    assert!(b["counts"]["status_writes"].as_u64() > Some(0), "ClusterSync statuses written: {b}");
    assert_eq!(
        (b["verdict"]["latest_generation"].as_bool(), b["verdict"]["keys_not_latest"].as_u64()),
        (Some(true), Some(0)),
        "{b}"
    );
    assert!(v["speedup"].as_f64().is_some_and(|x| x > 0.0), "{v}");
    v
}

/// The proposal's design on RabbitMQ after the hub, on the same simulator: every
/// (cluster, SyncSet) published once, applied, at its generation in the end.
#[test]
fn bench_hive_fleet_with_the_rabbitmq_baseline() {
    let v = rabbit_run(&["--baseline-consumers", "2"]);
    let b = &v["baseline"];
    assert_eq!(
        (b["published"].as_u64(), b["consumers"].as_u64(), b["prefetch"].as_u64()),
        (Some(15), Some(2), Some(2)),
        "{b}"
    );
    assert_eq!(b["verdict"], clean_verdict(), "no failures, no kills: nothing to get wrong: {b}");
    assert_eq!(v["verdict"], clean_verdict());
}

/// With churn, 5% failures and the dead-letter queue: a worker and a consumer killed
/// and restarted, SyncSet 0 edited to generation 2 on both sides mid-run; both end
/// with every key at its latest generation, and the baseline published the edited
/// pairs again.
#[test]
fn bench_hive_fleet_with_the_rabbitmq_baseline_under_churn() {
    let url = database_url();
    let v = rabbit_run(&[
        "--database-url",
        &url,
        "--processes",
        "2",
        "--churn",
        "--fail-rate",
        "0.05",
        "--baseline-dlq",
        "--baseline-dlq-after",
        "2",
        "--baseline-dlq-scan",
        "1s",
        "--member-ttl",
        "1s",
        "--lease-ttl",
        "3s",
        "--renew-every",
        "1s",
        "--backoff-base",
        "100ms",
        "--max-attempts",
        "50",
    ]);
    let b = &v["baseline"];
    assert_eq!(
        (b["published"].as_u64(), b["consumers"].as_u64(), b["dlq"].as_bool()),
        (Some(20), Some(2), Some(true)),
        "{b}"
    );
    assert_eq!(
        (v["verdict"]["latest_generation"].as_bool(), v["converged"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );
    assert_eq!(v["applies"].as_u64().map(|n| n >= 40), Some(true), "30 applies and 10 of the edit: {v}");
}

/// `hive-fleet --database-url … --processes N --json` as scripts run it: the
/// hive-fleet fields plus `processes`, a clean verdict, each worker's usage, and the
/// run's schema (`bench_fleet_<pid>`) dropped afterwards.
#[test]
fn bench_hive_fleet_with_worker_processes() {
    let url = database_url();
    let args = [
        "hive-fleet",
        "--clusters",
        "20",
        "--syncsets",
        "5",
        "--resources",
        "3",
        "--latency-scale",
        "0.02",
        "--database-url",
        &url,
        "--processes",
        "2",
        "--max-in-flight",
        "8",
        "--member-ttl",
        "1s",
        "--json",
    ];
    let child = bin().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run fleetsync-bench");
    let pid = child.id();
    let out = child.wait_with_output().expect("wait for fleetsync-bench");
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let v: serde_json::Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON object");
    assert_eq!(v["processes"], 2, "{v}");
    assert_eq!(v["verdict"], clean_verdict());
    assert_eq!(
        (v["converged"].as_bool(), v["applies"].as_u64(), v["failed_keys"].as_u64()),
        (Some(true), Some(300), Some(0))
    );
    let each = v["per_process"].as_array().expect("per_process");
    assert_eq!(each.len(), 2, "{v}");
    assert!(each.iter().all(|p| p["peak_rss_bytes"].as_u64() > Some(1 << 20)), "worker RSS read from /proc: {v}");
    assert_eq!(each.iter().filter_map(|p| p["clusters"].as_u64()).sum::<u64>(), 20, "the clusters are shared out: {v}");
    let sql = format!("SELECT count(*) FROM pg_namespace WHERE nspname = 'bench_fleet_{pid}'");
    let left = std::process::Command::new("psql").args([url.as_str(), "-Atc", &sql]).output().expect("psql");
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "0", "the run's schema was left behind");
}
