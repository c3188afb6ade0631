//! What `demo` and `bench` share: the JSON report (a fixed interface), make-span
//! quantiles, the progress bar, and waiting for the fleet to settle.

use anyhow::{bail, Context, Result};
use fleetsync_k8s_sim::hive::FleetShape;
use fleetsync_model::Phase;
use fleetsync_store::{QueueStats, Store};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::time::Duration;

/// The `--json` output of `demo`; `bench` adds fields around it. Scripts depend on
/// these names.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub applies: u64,
    pub seconds: f64,
    pub applies_per_sec: f64,
    pub makespan_over_critical: Quantiles,
    pub failed_keys: u64,
    pub converged: bool,
    pub peak_rss_bytes: u64,
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Quantiles {
    pub p50: f64,
    pub p99: f64,
    pub max: f64,
}

/// The fleet's shape from `--clusters`, `--syncsets` and `--resources`.
pub fn fleet_shape(clusters: usize, syncsets: usize, resources: usize) -> Result<FleetShape> {
    if clusters == 0 || syncsets == 0 || resources == 0 {
        bail!("--clusters, --syncsets and --resources must each be at least 1");
    }
    Ok(FleetShape { clusters, syncsets, resources })
}

/// p50, p99 and max of make-span over critical path across clusters, from
/// `(make-span, critical path)` pairs; clusters without a path are left out.
pub fn quantiles(pairs: impl IntoIterator<Item = (Duration, Duration)>) -> Quantiles {
    let mut ratios: Vec<f64> = pairs
        .into_iter()
        .filter(|(_, critical)| !critical.is_zero())
        .map(|(span, critical)| span.as_secs_f64() / critical.as_secs_f64())
        .collect();
    if ratios.is_empty() {
        return Quantiles::default();
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((ratios.len() - 1) as f64 * q).round() as usize];
    Quantiles { p50: at(0.5), p99: at(0.99), max: at(1.0) }
}

pub fn progress_bar(total: u64, hidden: bool) -> ProgressBar {
    if hidden {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(total);
    let style = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {bar:40} {human_pos}/{human_len} applies ({per_sec}) {msg}",
    );
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar
}

/// Waits until every key is Applied or Parked, or the timeout, feeding the progress
/// bar every 200 ms; returns (settled, parked). `applies` counts what is done.
///
/// The queue's stats (a scan of every key) are read only once `applies()` reached
/// `expected` — a fleet cannot settle before it has applied everything once — or
/// every 2 s (failures and parking can settle it with fewer). Reading them five times
/// a second took ~5% of the hub's CPU in a 300-cluster `bench hive-fleet` profile.
pub async fn wait_settled(
    store: &dyn Store,
    progress: &ProgressBar,
    applies: impl Fn() -> u64,
    expected: u64,
    timeout: Duration,
) -> Result<(bool, u64)> {
    let parked = |stats: &QueueStats| stats.by_phase.get(&Phase::Parked).copied().unwrap_or(0);
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last_read: Option<tokio::time::Instant> = None;
    loop {
        let done = applies();
        progress.set_position(done);
        let due = last_read.is_none_or(|t| t.elapsed() >= Duration::from_secs(2));
        let timed_out = tokio::time::Instant::now() >= deadline;
        if done >= expected || due || timed_out {
            let stats = store.queue_stats().await.context("reading queue stats")?;
            last_read = Some(tokio::time::Instant::now());
            let left = stats.unsettled();
            progress.set_message(format!("{left} keys to go"));
            if left == 0 || timed_out {
                return Ok((left == 0, parked(&stats)));
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Prints `label value` rows, aligned.
pub fn print_rows(rows: &[(&str, String)]) {
    for (k, v) in rows {
        println!("  {k:<27} {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_ratios() {
        let s = Duration::from_secs;
        let q = quantiles([(s(2), s(2)), (s(3), s(2)), (s(4), s(2)), (s(1), Duration::ZERO)]);
        assert_eq!((q.p50, q.max), (1.5, 2.0));
        assert_eq!(quantiles([]).max, 0.0);
    }
}
