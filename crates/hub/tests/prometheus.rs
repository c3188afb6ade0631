//! What Prometheus is given: a hub's `/metrics`, in the classic text format by default
//! and OpenMetrics when asked, clean under `promtool check metrics` after the hub has
//! applied a fleet; and the shipped alert rules (`deploy/prometheus`), valid under
//! `promtool check rules` and passing their unit tests (`promtool test rules`); and the
//! shipped Grafana dashboard (`deploy/grafana`), whose queries parse, are narrowed to
//! the job and namespace picked and, like the rules', name only series a hub serves.
//! promtool comes from Debian's `prometheus` package (installed here as root).

mod common;

use common::{promtool, report, TestHub};
use fleetsync_runtime::RuntimeConfig;
use fleetsync_testkit::FleetShape;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn check_metrics(text: &str) -> (bool, String) {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run promtool");
    child.stdin.take().expect("stdin").write_all(text.as_bytes()).expect("feed promtool");
    report(&child.wait_with_output().expect("promtool ends"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hubs_metrics_pass_promtool_and_openmetrics_is_served_when_asked() {
    let hub = TestHub::start(RuntimeConfig::default(), 0.01).await;
    hub.apply_fleet(FleetShape { clusters: 3, syncsets: 2, resources: 1 }).await;

    // Scrape until every key ran (runs counted), so that counters and histograms have samples.
    let start = Instant::now();
    let classic = loop {
        let resp = hub.get("/metrics").send().await.expect("scrape");
        let content_type = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_string();
        assert_eq!(content_type, "text/plain; version=0.0.4; charset=utf-8");
        let text = resp.text().await.expect("text");
        if text.contains("fleetsync_runs_total{outcome=\"applied\"} 6\n") {
            break text;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the fleet never applied:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for series in [
        "# TYPE fleetsync_runs_total counter\n",
        "fleetsync_build_info{version=\"",
        "fleetsync_members 1\n",
        "fleetsync_shards_owned ",
        "fleetsync_keys{phase=\"Applied\"} 6\n",
        "fleetsync_apply_duration_seconds_bucket{le=",
        "fleetsync_http_requests_total{method=\"POST\",route=\"/v1/apply\",code=\"200\"} 1\n",
        "fleetsync_http_request_duration_seconds_count{route=\"/v1/apply\"} 1\n",
        "fleetsync_watches 0\n",
        "fleetsync_store_call_duration_seconds_count{call=\"claim\"} ",
        "fleetsync_store_call_errors_total{call=\"complete\"} 0\n",
        "fleetsync_run_duration_seconds_count 6\n",
        // Each key's change applied once: six latencies, from the apply to each result.
        "fleetsync_change_to_applied_seconds_count 6\n",
        "fleetsync_lease_takeovers_total 0\n",
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
    ] {
        assert!(classic.contains(series), "no {series:?} in\n{classic}");
    }
    assert!(!classic.contains("# EOF"), "{classic}");
    let (ok, out) = check_metrics(&classic);
    assert!(ok && out.trim().is_empty(), "promtool check metrics:\n{out}\non\n{classic}");
    for (file, text) in [
        ("alerts.yaml", read(&deploy("prometheus/alerts.yaml"))),
        ("fleetsync.json", read(&deploy("grafana/fleetsync.json"))),
    ] {
        for name in series_named(&text).into_iter().filter(|n| !ONLY_WITH_SOMETHING_TO_COUNT.contains(&n.as_str())) {
            assert!(
                classic.contains(&format!(" {name} ")) || classic.contains(&format!("\n{name}")),
                "{file} names {name}, which the hub does not serve"
            );
        }
    }

    let open = hub.get("/metrics").header("accept", "application/openmetrics-text;version=1.0.0,text/plain;q=0.5");
    let open = open.send().await.expect("scrape");
    assert_eq!(open.headers()["content-type"], "application/openmetrics-text; version=1.0.0; charset=utf-8");
    let open = open.text().await.expect("text");
    assert!(open.ends_with("# EOF\n") && open.contains("# TYPE fleetsync_runs counter\n"), "{open}");

    hub.stop().await;
}

/// Series a hub serves only once there is something to count (a tenant with a rollout,
/// or with an unreachable cluster); the server's unit tests show them served then.
const ONLY_WITH_SOMETHING_TO_COUNT: &[&str] = &["fleetsync_rollouts", "fleetsync_unreachable_clusters"];

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(path)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fleetsync series a text names (`fleetsync_` and what follows).
fn series_named(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("fleetsync_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Every `expr` of a Grafana dashboard.
fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v.as_str()) {
                    ("expr", Some(e)) => out.push(e.to_string()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn the_shipped_grafana_dashboards_queries_parse() {
    let dashboard: serde_json::Value =
        serde_json::from_str(&read(&deploy("grafana/fleetsync.json"))).expect("the dashboard is JSON");
    let mut queries = vec![];
    exprs(&dashboard, &mut queries);
    assert!(queries.len() >= 8, "{queries:?}");
    // One dashboard for every installation: each series narrowed to the jobs and
    // namespaces picked.
    let variables: Vec<&str> =
        dashboard["templating"]["list"].as_array().into_iter().flatten().filter_map(|v| v["name"].as_str()).collect();
    assert!(variables.contains(&"job") && variables.contains(&"namespace"), "{variables:?}");
    for q in &queries {
        let selectors = q.matches("fleetsync_").count();
        let narrowed = q.matches(r#"{job=~"$job", namespace=~"$namespace"}"#).count();
        assert_eq!(selectors, narrowed, "every series of {q} is narrowed to $job and $namespace");
    }
    // promtool parses PromQL when it checks rules: each query as a recording rule.
    let rules: String = queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            format!("      - record: panel_query_{i}\n        expr: {}\n", serde_json::Value::from(q.as_str()))
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("queries.yaml");
    std::fs::write(&file, format!("groups:\n  - name: dashboard\n    rules:\n{rules}")).expect("write");
    let (ok, out) =
        report(&Command::new(promtool()).args(["check", "rules"]).arg(&file).output().expect("run promtool"));
    assert!(ok, "a dashboard query does not parse:\n{out}");
}

#[test]
fn the_shipped_alert_rules_are_valid_and_pass_their_unit_tests() {
    let dir = deploy("prometheus");
    let check = Command::new(promtool())
        .args(["check", "rules", "alerts.yaml"])
        .current_dir(&dir)
        .output()
        .expect("run promtool");
    let (ok, out) = report(&check);
    assert!(ok, "promtool check rules:\n{out}");
    let test = Command::new(promtool())
        .args(["test", "rules", "alerts.test.yaml"])
        .current_dir(&dir)
        .output()
        .expect("run promtool");
    let (ok, out) = report(&test);
    assert!(ok, "promtool test rules:\n{out}");
}
