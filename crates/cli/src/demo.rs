//! `fleetsync demo`: an embedded hub (SQLite in a temporary directory, the real
//! runtime) against the simulated fleet with the hive-fleet latency distribution.
//! Shows progress while the fleet converges, then a summary: applies/s, each
//! cluster's make-span over its critical path, failures, CPU and peak memory.

use crate::args::DemoArgs;
use crate::engine::{appliers, check_fail_rate, egress_policy, runtime_config, store_config};
use crate::process::{cpu_time, peak_rss_bytes};
use crate::report::{fleet_shape, print_rows, progress_bar, quantiles, wait_settled, Report};
use anyhow::{bail, Context, Result};
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig, Totals};
use fleetsync_k8s_sim::hive::{hive_fleet, FleetShape};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::Endpoint;
use fleetsync_runtime::{Runtime, RuntimeMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::Store;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// What is printed beside the report for people.
struct Extra {
    shape: FleetShape,
    load: Duration,
    cpu: Duration,
    totals: Totals,
}

pub async fn run(a: DemoArgs) -> Result<bool> {
    let shape = fleet_shape(a.clusters, a.syncsets, a.resources)?;
    if !(a.latency_scale.is_finite() && a.latency_scale >= 0.0) {
        bail!("--latency-scale must be a number of at least 0, got {}", a.latency_scale);
    }
    let sim = SimFleet::new(SimFleetConfig {
        latency: LatencyModel::hive_fleet_scaled(a.latency_scale),
        fail_rate: check_fail_rate(a.fail_rate)?,
    });
    let runtime_cfg = runtime_config(&a.engine)?;
    let egress = egress_policy(&a.engine)?;
    let dir = tempfile::tempdir().context("cannot create a temporary directory for the demo store")?;
    let path = a.db.clone().unwrap_or_else(|| dir.path().join("demo.db"));
    let (store, _) = SqliteStore::open_for_work(&path, store_config(&a.engine)?)
        .await
        .with_context(|| format!("cannot open {}", path.display()))?;
    let store: Arc<dyn Store> = Arc::new(store);

    let load_start = Instant::now();
    store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.context("loading the fleet")?;
    let load = load_start.elapsed();

    let progress = progress_bar(shape.applies() as u64, a.json);
    let (cpu0, start) = (cpu_time(), Instant::now());
    let shutdown = CancellationToken::new();
    let runtime = Runtime::new(
        store.clone(),
        appliers(sim.clone(), store.clone(), egress),
        runtime_cfg,
        RuntimeMetrics::unregistered(),
    );
    let workers = tokio::spawn(runtime.run(shutdown.clone()));
    let (settled, parked) =
        wait_settled(&*store, &progress, || sim.totals().applies, shape.applies() as u64, a.timeout).await?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu = cpu_time().saturating_sub(cpu0);
    progress.finish_and_clear();
    shutdown.cancel();
    workers.await.context("the workers panicked")??;

    let totals = sim.totals();
    let report = Report {
        applies: totals.applies,
        seconds,
        applies_per_sec: totals.applies as f64 / seconds.max(1e-9),
        makespan_over_critical: quantiles(sim.cluster_timings().values().map(|t| (t.makespan, t.critical_path))),
        failed_keys: parked,
        converged: settled && parked == 0 && totals.overlaps == 0 && totals.order_violations == 0,
        peak_rss_bytes: peak_rss_bytes(),
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_summary(&report, &Extra { shape, load, cpu, totals }, a.fail_rate);
    }
    Ok(report.converged)
}

fn print_summary(r: &Report, x: &Extra, fail_rate: f64) {
    let s = x.shape;
    println!(
        "fleetsync demo: {} clusters × {} SyncSets × {} resources = {} applies (simulated latency, fail rate {fail_rate})",
        s.clusters,
        s.syncsets,
        s.resources,
        s.applies()
    );
    let q = &r.makespan_over_critical;
    let rows = vec![
        ("converged", if r.converged { "yes".to_string() } else { "NO".to_string() }),
        ("applies", r.applies.to_string()),
        ("seconds", format!("{:.1} (loading the documents took {:.1} s more)", r.seconds, x.load.as_secs_f64())),
        ("applies/s", format!("{:.0}", r.applies_per_sec)),
        ("make-span / critical path", format!("p50 {:.3}   p99 {:.3}   max {:.3}", q.p50, q.p99, q.max)),
        ("failed (parked) keys", r.failed_keys.to_string()),
        ("failed applies (retried)", x.totals.failures.to_string()),
        (
            "CPU seconds",
            format!(
                "{:.1} ({:.0}% of one core)",
                x.cpu.as_secs_f64(),
                100.0 * x.cpu.as_secs_f64() / r.seconds.max(1e-9)
            ),
        ),
        ("peak RSS", format!("{:.0} MiB", r.peak_rss_bytes as f64 / (1024.0 * 1024.0))),
        (
            "verdict",
            format!(
                "overlaps {}, order violations {}, fenced {}",
                x.totals.overlaps, x.totals.order_violations, x.totals.fenced
            ),
        ),
    ];
    print_rows(&rows);
}
