//! A flood: one apply offers a hub far more work than its workers may run at once. The
//! saturation metrics show it while it lasts; the shipped alert fires when evaluated on
//! what was scraped; the API and the probes keep answering; and the work converges on
//! the target (as the target recorded its writes) once the flood is through. Prints
//! its figures (run with `--nocapture` to see them).

mod common;

use common::{promtool, report, TestHub};
use fleetsync_runtime::RuntimeConfig;
use fleetsync_testkit::FleetShape;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// 2,400 keys of one resource each, about 0.1 s per apply, at most 32 at once: about
/// 7 s of work for a hub that could take it in a tenth of that with no limit.
const SHAPE: FleetShape = FleetShape { clusters: 800, syncsets: 3, resources: 1 };
const LIMIT: usize = 32;
const LATENCY_SCALE: f64 = 0.4;

/// One look at the hub during the flood.
struct Sample {
    in_flight: f64,
    limit: f64,
    oldest_ready_age: f64,
    readyz: Duration,
    status_page: Duration,
}

/// `name`'s value in a classic-format scrape (a series without labels).
fn value(scrape: &str, name: &str) -> f64 {
    let line = scrape.lines().find(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ')));
    line.and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{scrape}"))
}

fn percentile(mut xs: Vec<Duration>, p: f64) -> Duration {
    xs.sort();
    xs[((xs.len() - 1) as f64 * p).round() as usize]
}

/// A promtool unit test that feeds the scraped samples to the shipped rules, one
/// scrape per (virtual) minute, and expects the saturation alert at `eval_minute`.
fn alert_test(samples: &[Sample], eval_minute: usize) -> String {
    let rules = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus/alerts.yaml");
    let series = |f: &dyn Fn(&Sample) -> f64| samples.iter().map(|s| f(s).to_string()).collect::<Vec<_>>().join(" ");
    format!(
        "rule_files: ['{rules}']
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'fleetsync_applies_in_flight{{instance=\"hub\"}}'
        values: '{in_flight}'
      - series: 'fleetsync_apply_concurrency_limit{{instance=\"hub\"}}'
        values: '{limit}'
    alert_rule_test:
      - eval_time: {eval_minute}m
        alertname: FleetsyncWorkersSaturated
        exp_alerts:
          - exp_labels: {{severity: warning}}
            exp_annotations:
              summary: The workers run more than 80% of the applies they may
              description: \"Add worker processes (they take shards by themselves) or raise --max-in-flight.\"
",
        rules = rules.display(),
        in_flight = series(&|s| s.in_flight),
        limit = series(&|s| s.limit),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_shows_in_the_saturation_metrics_fires_the_alert_and_drains_while_the_api_answers() {
    let config = RuntimeConfig { max_in_flight: LIMIT, ..RuntimeConfig::default() };
    let hub = TestHub::start(config, LATENCY_SCALE).await;
    let keys = SHAPE.clusters * SHAPE.syncsets;
    let start = Instant::now();
    hub.apply_fleet(SHAPE).await;

    let mut samples = vec![];
    let drained = loop {
        let t = Instant::now();
        let ready = hub.get("/readyz").send().await.expect("readyz");
        assert!(ready.status().is_success(), "readyz during the flood: {}", ready.status());
        let readyz = t.elapsed();
        let t = Instant::now();
        let page = hub.get("/v1/status?limit=100").send().await.expect("a status page");
        assert!(page.status().is_success(), "a status page during the flood: {}", page.status());
        page.bytes().await.expect("the page");
        let status_page = t.elapsed();
        let scrape = hub.get("/metrics").send().await.expect("scrape").text().await.expect("text");
        samples.push(Sample {
            in_flight: value(&scrape, "fleetsync_applies_in_flight"),
            limit: value(&scrape, "fleetsync_apply_concurrency_limit"),
            oldest_ready_age: value(&scrape, "fleetsync_oldest_ready_age_seconds"),
            readyz,
            status_page,
        });
        if hub.on_target(SHAPE) == keys {
            break start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the flood never drained: {} of {keys} keys on the target",
            hub.on_target(SHAPE)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };

    // The flood: the scrapes from the first with the workers at half their limit or
    // more to the last before they drop under it. Each stands for a minute of
    // Prometheus's time; the rule averages 5 minutes and waits 10, so the alert must
    // fire by the flood's last minute.
    let scrapes = samples.len();
    let busy = |s: &Sample| s.in_flight / s.limit >= 0.5;
    let seen: Vec<f64> = samples.iter().map(|s| s.in_flight).collect();
    let begin = samples.iter().position(busy).unwrap_or_else(|| panic!("the workers were never busy: {seen:?}"));
    let flood = samples[begin..].iter().position(|s| !busy(s)).unwrap_or(samples.len() - begin);
    let samples = &samples[begin..begin + flood];
    assert!(flood >= 12, "too short a flood to judge (in flight at each scrape: {seen:?})");
    let dir = tempfile::tempdir().expect("tempdir");
    let test = dir.path().join("flood.test.yaml");
    std::fs::write(&test, alert_test(samples, flood - 1)).expect("write the rule test");
    let (ok, said) =
        report(&Command::new(promtool()).args(["test", "rules"]).arg(&test).output().expect("run promtool"));
    assert!(ok, "the saturation alert did not fire on what was scraped ({seen:?}):\n{said}");

    let readyz: Vec<Duration> = samples.iter().map(|s| s.readyz).collect();
    let pages: Vec<Duration> = samples.iter().map(|s| s.status_page).collect();
    let (readyz_p99, page_p99) = (percentile(readyz.clone(), 0.99), percentile(pages.clone(), 0.99));
    assert!(
        readyz_p99 < Duration::from_secs(2) && page_p99 < Duration::from_secs(2),
        "the API lagged: readyz p99 {readyz_p99:?}, page p99 {page_p99:?}"
    );
    let max_age = samples.iter().map(|s| s.oldest_ready_age).fold(0.0, f64::max);
    println!(
        "{{\"offered_keys\": {keys}, \"limit\": {LIMIT}, \"scrapes\": {}, \"flood_scrapes\": {flood}, \"mean_saturation\": {:.2}, \"max_oldest_ready_age_s\": {max_age}, \
\"readyz_ms\": {{\"p50\": {:.1}, \"p99\": {:.1}}}, \"status_page_ms\": {{\"p50\": {:.1}, \"p99\": {:.1}}}, \"drain_s\": {:.2}}}",
        scrapes,
        samples.iter().map(|s| s.in_flight / s.limit).sum::<f64>() / flood as f64,
        percentile(readyz, 0.5).as_secs_f64() * 1e3,
        readyz_p99.as_secs_f64() * 1e3,
        percentile(pages, 0.5).as_secs_f64() * 1e3,
        page_p99.as_secs_f64() * 1e3,
        drained.as_secs_f64(),
    );
    // Nothing was applied twice at once or out of order on the target.
    let t = hub.sim.totals();
    assert_eq!((t.overlaps, t.order_violations, t.fenced), (0, 0, 0), "{t:?}");
    hub.stop().await;
}
