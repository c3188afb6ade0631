//! The `fleetsync` binary as a user runs it: demo, bad input, and a hub served on
//! loopback driven by apply, get and delete.

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
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
        [
            "applies",
            "applies_per_sec",
            "converged",
            "failed_keys",
            "makespan_over_critical",
            "peak_rss_bytes",
            "seconds"
        ]
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
        "demo",
        "--clusters",
        "4",
        "--syncsets",
        "3",
        "--resources",
        "3",
        "--latency-scale",
        "0.01",
        "--fail-rate",
        "0.2",
        "--backoff-base",
        "10ms",
        "--backoff-cap",
        "50ms",
        "--max-attempts",
        "50",
        "--json",
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
    let cases: [(&[&str], &str); 6] = [
        (&["demo", "--fail-rate", "2"], "fail rate must be between 0 and 1"),
        (&["demo", "--worker-id", " "], "--worker-id must be a non-empty name"),
        (&["demo", "--clusters", "0"], "--clusters, --syncsets and --resources must each be at least 1"),
        (&["demo", "--renew-every", "40s"], "--renew-every"),
        (&["demo", "--lease-ttl", "soon"], "--lease-ttl"),
        (
            &["demo", "--egress-deny", "10.0.0.0/8,10.0.0.0/33"],
            "egress rule \"10.0.0.0/33\" is neither a host name nor an IP address or CIDR",
        ),
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
    std::fs::write(
        &file,
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: Bad_Name}\nspec: {endpoint: {simulator: {}}}\n",
    )
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
        items.len() == 3 && items.iter().all(|k| k.phase == fleetsync_model::Phase::Applied)
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

/// `fleetsync sim …` runs the simulator of the `fleetsync-bench` next to the binary,
/// named `fleetsync sim` in its usage; without the plugin there, the command must say
/// how to build it instead.
#[test]
fn sim_reaches_the_simulator_in_the_fleetsync_bench_plugin() {
    let dir = Path::new(env!("CARGO_BIN_EXE_fleetsync")).parent().expect("the binary's directory");
    if dir.join("fleetsync-bench").is_file() {
        let out = run(&["sim", "--fail-status", "200"]);
        assert!(!out.status.success() && stderr(&out).contains("--fail-status"), "{}", stderr(&out));
        let out = run(&["sim", "--help"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let help = stdout(&out);
        assert!(help.contains("Usage: fleetsync sim ") && help.contains("--latency-scale"), "{help}");
    } else {
        let out = bin().args(["sim", "--help"]).env("PATH", "").output().expect("run fleetsync");
        assert!(!out.status.success(), "no plugin: must fail");
        assert!(stderr(&out).contains("cargo build --release -p fleetsync-bench"), "{}", stderr(&out));
    }
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
    let probes = common::free_address();
    let worker =
        bin().arg("worker").args(store).args(["--listen", &probes]).stdout(Stdio::null()).stderr(Stdio::null()).spawn();
    let _worker = common::Killed(worker.expect("worker"));
    let file = example();
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    hub.wait_until(Duration::from_secs(30), |h| {
        let items = status_items(h);
        items.len() == 3 && items.iter().all(|k| k.phase == fleetsync_model::Phase::Applied)
    });
    // The worker's probes and metrics (`--listen`): ready on a ready store, and its own
    // runtime's and process's series.
    assert_eq!(common::http_get(&probes, "/livez").map(|a| a.0), Some(200));
    assert_eq!(common::http_get(&probes, "/readyz").map(|a| a.0), Some(200));
    let (status, metrics) = common::http_get(&probes, "/metrics").expect("the worker's /metrics");
    assert_eq!(status, 200);
    for series in [
        "fleetsync_claimed_keys_total ",
        "fleetsync_members ",
        "fleetsync_lease_renewal_failures_total ",
        "process_resident_memory_bytes ",
    ] {
        assert!(metrics.contains(series), "{series} in the worker's metrics:\n{metrics}");
    }
    assert!(!metrics.contains("fleetsync_keys{"), "the store-wide gauges are the API's, not a worker's:\n{metrics}");
    assert!(hub.terminate().success());
}

#[test]
fn postgres_commands_say_what_is_wrong() {
    let out = run(&["worker"]);
    assert!(!out.status.success() && stderr(&out).contains("--database-url"), "{}", stderr(&out));
    let out = run(&["migrate", "--database-url", "postgres://postgres@127.0.0.1:1/test"]);
    assert!(!out.status.success() && stderr(&out).contains("connecting to PostgreSQL"), "{}", stderr(&out));
}

/// `fleetsync bench …` runs the `fleetsync-bench` next to the binary. `cargo test
/// --workspace` builds both into one directory; without the plugin there (`cargo test
/// -p fleetsync` alone), the command must say how to build it instead.
#[test]
fn bench_reaches_the_fleetsync_bench_plugin_beside_the_binary() {
    let dir = Path::new(env!("CARGO_BIN_EXE_fleetsync")).parent().expect("the binary's directory");
    if dir.join("fleetsync-bench").is_file() {
        let out = run(&["bench", "--help"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let help = stdout(&out);
        assert!(
            help.contains("fleetsync's benchmarks") && help.contains("hive-fleet") && help.contains("drain"),
            "{help}"
        );
        assert!(help.contains("Usage: fleetsync bench "), "named as run: {help}");
    } else {
        let out = bin().args(["bench", "--help"]).env("PATH", "").output().expect("run fleetsync");
        assert!(!out.status.success(), "no plugin: must fail");
        assert!(stderr(&out).contains("cargo build --release -p fleetsync-bench"), "{}", stderr(&out));
    }
}

/// The binary in a directory of its own, beside a stand-in plugin (a shell script) or
/// none: arguments, output and exit status of `bench` and `sim` pass through as given;
/// a missing plugin is named, with how to build it.
#[test]
fn bench_passes_arguments_output_and_exit_status_through() {
    let dir =
        tempfile::tempdir_in(Path::new(env!("CARGO_BIN_EXE_fleetsync")).parent().expect("dir")).expect("temp dir");
    let exe = dir.path().join("fleetsync");
    std::fs::hard_link(env!("CARGO_BIN_EXE_fleetsync"), &exe)
        .or_else(|_| std::fs::copy(env!("CARGO_BIN_EXE_fleetsync"), &exe).map(|_| ()))
        .expect("the binary in a directory of its own");
    let bench =
        |args: &[&str]| Command::new(&exe).arg("bench").args(args).env("PATH", "").output().expect("run fleetsync");

    let out = bench(&["hive-fleet", "--json"]);
    assert!(!out.status.success(), "no plugin: must fail");
    let err = stderr(&out);
    assert!(err.contains("`fleetsync-bench`") && err.contains("cargo build --release -p fleetsync-bench"), "{err}");

    let plugin = dir.path().join("fleetsync-bench");
    std::fs::write(&plugin, "#!/bin/sh\necho \"args: $*\"\necho oops >&2\nexit 7\n").expect("write the plugin");
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    let out = bench(&["drain", "--items", "10", "--json", "--help", "-x"]);
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(stdout(&out), "args: drain --items 10 --json --help -x\n");
    assert_eq!(stderr(&out), "oops\n");
    let out = Command::new(&exe)
        .args(["sim", "--listen", "127.0.0.1:0", "--help"])
        .env("PATH", "")
        .output()
        .expect("run fleetsync");
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    assert_eq!(stdout(&out), "args: sim --listen 127.0.0.1:0 --help\n", "`fleetsync sim` is the plugin's `sim`");
}

/// Every failed run and every parked key is a WARN naming the key, the attempt and the
/// reason; `--log-format json` writes one JSON object per line.
#[test]
fn failed_runs_and_parked_keys_are_logged_as_json_lines() {
    let args = [
        "--log-format",
        "json",
        "demo",
        "--clusters",
        "2",
        "--syncsets",
        "1",
        "--resources",
        "1",
        "--latency-scale",
        "0.01",
        "--fail-rate",
        "1",
        "--max-attempts",
        "2",
        "--backoff-base",
        "10ms",
        "--backoff-cap",
        "10ms",
        "--timeout",
        "3s",
    ];
    let out = run(&args);
    let lines: Vec<serde_json::Value> = stderr(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let said = |message: &str| {
        lines
            .iter()
            .filter(|l| l["level"] == "WARN" && l["fields"]["message"].as_str().is_some_and(|m| m.starts_with(message)))
            .collect::<Vec<_>>()
    };
    let (failed, parked) = (said("run failed; the key runs again"), said("run failed; the key is parked"));
    assert_eq!((failed.len(), parked.len()), (2, 2), "one failure, then parked, per key: {lines:?}");
    for line in failed.iter().chain(&parked) {
        assert!(line["fields"]["key"].as_str().is_some_and(|k| k.starts_with("default/cluster-")), "{line}");
        assert!(line["fields"]["error"].as_str().is_some_and(|e| e.contains("simulated failure")), "{line}");
    }
    assert!(parked.iter().all(|l| l["fields"]["attempt"] == 2), "{parked:?}");
}

/// Text logs into a pipe or a file carry no colour codes.
#[test]
fn text_logs_into_a_pipe_have_no_colour_codes() {
    let out = run(&[
        "demo",
        "--clusters",
        "1",
        "--syncsets",
        "1",
        "--resources",
        "1",
        "--latency-scale",
        "0.01",
        "--fail-rate",
        "1",
        "--max-attempts",
        "1",
        "--timeout",
        "2s",
    ]);
    let logs = stderr(&out);
    assert!(logs.contains("WARN") && logs.contains("run failed"), "{logs}");
    assert!(!logs.contains('\u{1b}'), "escape codes in piped logs: {logs:?}");
}
