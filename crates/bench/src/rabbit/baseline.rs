//! The RabbitMQ baseline's run, in the `hive-fleet` process: queues of the run's own
//! (deleted afterwards, also when the run fails), the hub's ClusterSyncs created
//! (untimed, as the hub has them before any SyncSet changes), the consumers started
//! and ready, then the clock starts with the publisher and stops when every
//! (cluster, SyncSet) of [`TENANT`] is at its latest generation in the simulator, or
//! at the timeout. With churn, one consumer is killed with SIGKILL at 30% and started
//! again (as Kubernetes restarts a pod), and the publisher edits every fifth SyncSet
//! at 50%.
//!
//! CPU is the consumers' and the publisher's utime + stime from `/proc/<pid>/stat`
//! (a killed consumer's up to its death); the broker's (`beam.smp`) is measured over
//! the same window and reported apart, as PostgreSQL's is not counted on fleetsync's
//! side. Applies are those that took effect on the fleet's clusters (not the hub's
//! status writes).

use super::consumer::{cluster, empty_clustersync};
use super::{connect, edited, Names, HUB, HUB_LATENCY_MS, TENANT};
use crate::hive_fleet::{kube, read_sim_report, sim_verdict, Verdict};
use anyhow::{anyhow, bail, Context, Result};
use fleetsync::process::Proc;
use fleetsync::report::{progress_bar, Quantiles, Report};
use fleetsync_applier::{Applier, ApplyContext};
use fleetsync_k8s_sim::{KeySummary, Report as SimReport};
use fleetsync_model::{Fence, WorkKey};
use fleetsync_testkit::FleetShape;
use lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions, QueuePurgeOptions,
};
use lapin::types::FieldTable;
use lapin::ExchangeKind;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the simulator is asked how far the baseline got (each answer walks every
/// object it holds, so not too often: it shares the machine with both sides).
const POLL: Duration = Duration::from_secs(1);
/// How long a stopped process may take to print its counts and exit.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long Kubernetes takes to start the killed pod again, here.
const RESTART_AFTER: Duration = Duration::from_secs(1);

/// How the baseline runs.
#[derive(Debug, Clone)]
pub struct RabbitOptions {
    pub amqp_url: String,
    pub consumers: usize,
    pub prefetch: u16,
    pub dlq_after: Option<u32>,
    pub dlq_scan: Duration,
    pub churn: bool,
    /// ClusterSync status by merge patch instead of read and conditional write.
    pub status_patch: bool,
    pub timeout: Duration,
    pub quiet: bool,
}

/// What the baseline did, for the JSON and the summary.
#[derive(Debug, Serialize)]
pub struct RabbitReport {
    pub design: &'static str,
    pub dlq: bool,
    /// How the ClusterSync status is written: `update` (read, change, conditional
    /// write, as the controller does today) or `patch` (one merge patch).
    pub status_write: &'static str,
    #[serde(flatten)]
    pub report: Report,
    /// The consumers' and the publisher's CPU.
    pub cpu_seconds: f64,
    pub cpu_us_per_apply: f64,
    pub consumer_cpu_seconds: f64,
    pub publisher_cpu_seconds: f64,
    /// RabbitMQ's own (`beam.smp`), over the same window; not in `cpu_seconds`.
    pub broker_cpu_seconds: Option<f64>,
    pub consumers: usize,
    pub prefetch: u16,
    pub published: u64,
    /// Summed over the consumers that stopped on request (a consumer killed with
    /// SIGKILL took its counts with it).
    pub counts: Counts,
    pub verdict: Verdict,
}

/// A consumer's counts (see `consumer.rs`).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub struct Counts {
    pub messages: u64,
    pub superseded: u64,
    pub failed_runs: u64,
    pub republished: u64,
    pub dead_lettered: u64,
    pub status_writes: u64,
    pub status_conflicts: u64,
}

pub async fn run(o: &RabbitOptions, shape: FleetShape, sim: &str, http: &reqwest::Client) -> Result<RabbitReport> {
    let names = Names::for_run(std::process::id());
    let conn = connect(&o.amqp_url).await?;
    let channel = conn.create_channel().await?;
    let durable = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
    for q in [&names.queue, &names.dlq] {
        channel.queue_declare(q.as_str().into(), durable, FieldTable::default()).await?;
        channel.queue_purge(q.as_str().into(), QueuePurgeOptions::default()).await?;
    }
    let options = ExchangeDeclareOptions { durable: true, ..ExchangeDeclareOptions::default() };
    channel
        .exchange_declare(names.exchange.as_str().into(), ExchangeKind::Fanout, options, FieldTable::default())
        .await?;
    let result = run_in(o, &names, shape, sim, http).await;
    for q in [&names.queue, &names.dlq] {
        let _ = channel.queue_delete(q.as_str().into(), QueueDeleteOptions::default()).await;
    }
    let _ = channel.exchange_delete(names.exchange.as_str().into(), ExchangeDeleteOptions::default()).await;
    let _ = conn.close(200, "done".into()).await;
    result
}

async fn run_in(
    o: &RabbitOptions,
    names: &Names,
    shape: FleetShape,
    sim: &str,
    http: &reqwest::Client,
) -> Result<RabbitReport> {
    prepare_hub(shape, sim, http, o.status_patch).await?;
    let before = read_sim_report(http, sim).await?;
    let consumer_args = |edited: bool| {
        let mut args = vec![
            "rabbit-consumer".to_string(),
            "--amqp-url".into(),
            o.amqp_url.clone(),
            "--prefetch".into(),
            o.prefetch.to_string(),
            "--sim".into(),
            sim.to_string(),
            "--syncsets".into(),
            shape.syncsets.to_string(),
            "--resources".into(),
            shape.resources.to_string(),
        ];
        args.extend(names.to_args());
        if let Some(k) = o.dlq_after {
            args.extend(["--dlq-after".into(), k.to_string()]);
        }
        if edited {
            args.push("--edited".into());
        }
        if o.status_patch {
            args.push("--status-patch".into());
        }
        args
    };
    let mut consumers = Vec::with_capacity(o.consumers);
    for _ in 0..o.consumers {
        consumers.push(Worker::start(&consumer_args(false), false)?);
    }
    for c in &mut consumers {
        c.expect_line("ready")?;
    }
    let broker = broker_pid();
    let broker0 = broker.map(|p| Proc::Pid(p).cpu_time());
    let mut publisher_args = vec![
        "rabbit-publisher".to_string(),
        "--amqp-url".into(),
        o.amqp_url.clone(),
        "--clusters".into(),
        shape.clusters.to_string(),
        "--syncsets".into(),
        shape.syncsets.to_string(),
    ];
    publisher_args.extend(names.to_args());
    if o.dlq_after.is_some() {
        publisher_args.extend(["--dlq-scan".into(), humantime::format_duration(o.dlq_scan).to_string()]);
    }
    let start = Instant::now();
    let mut publisher = Worker::start(&publisher_args, true)?;

    let churned = shape.clusters * (0..shape.syncsets).filter(|s| edited(*s)).count();
    let progress = progress_bar(shape.applies() as u64, o.quiet);
    let (mut killed, mut is_edited, mut retired_cpu) = (false, false, Duration::ZERO);
    let url = format!("{sim}/_sim/keys/summary?prefix={TENANT}/");
    let converged = loop {
        for w in consumers.iter_mut().chain(std::iter::once(&mut publisher)) {
            w.check_running()?;
        }
        let summary: KeySummary = http.get(&url).send().await?.json().await.context("the simulator's key summary")?;
        let held: u64 = summary.by_generation.values().sum();
        progress.set_position(held);
        let done = held as f64 / shape.applies() as f64;
        if o.churn && !killed && done >= 0.3 {
            let victim = &mut consumers[0];
            retired_cpu += victim.cpu();
            victim.kill9();
            tokio::time::sleep(RESTART_AFTER).await;
            *victim = Worker::start(&consumer_args(is_edited), false)?;
            victim.expect_line("ready")?;
            killed = true;
        }
        if o.churn && !is_edited && done >= 0.5 {
            publisher.send("churn")?;
            is_edited = true;
        }
        if (!o.churn || is_edited) && at_latest(&summary, shape, if is_edited { churned } else { 0 }) {
            break true;
        }
        if start.elapsed() >= o.timeout {
            break false;
        }
        tokio::time::sleep(POLL).await;
    };
    let seconds = start.elapsed().as_secs_f64();
    let consumer_cpu = consumers.iter().map(Worker::cpu).sum::<Duration>() + retired_cpu;
    let publisher_cpu = publisher.cpu();
    let broker_cpu = broker.zip(broker0).map(|(p, before)| Proc::Pid(p).cpu_time().saturating_sub(before));
    let peak_rss = consumers.iter().chain(std::iter::once(&publisher)).map(Worker::peak_rss).sum();
    progress.finish_and_clear();

    publisher.send("stop")?;
    let publisher_counts: serde_json::Value =
        publisher.stop().and_then(|l| serde_json::from_str(&l).ok()).unwrap_or_default();
    let mut counts = Counts::default();
    for c in &mut consumers {
        c.terminate();
    }
    for c in &mut consumers {
        if let Some(each) = c.stop().and_then(|l| serde_json::from_str::<Counts>(&l).ok()) {
            counts.messages += each.messages;
            counts.superseded += each.superseded;
            counts.failed_runs += each.failed_runs;
            counts.republished += each.republished;
            counts.dead_lettered += each.dead_lettered;
            counts.status_writes += each.status_writes;
            counts.status_conflicts += each.status_conflicts;
        }
    }

    let after = read_sim_report(http, sim).await?;
    let applies = fleet_applies(&after) - fleet_applies(&before);
    let expected = |s: usize| if is_edited && edited(s) { 2 } else { 1 };
    let verdict = sim_verdict(http, sim, TENANT, shape, expected, &before.totals, &after.totals).await?;
    let cpu = consumer_cpu + publisher_cpu;
    let report = Report {
        applies,
        seconds,
        applies_per_sec: applies as f64 / seconds.max(1e-9),
        makespan_over_critical: Quantiles::default(),
        failed_keys: 0,
        converged,
        peak_rss_bytes: peak_rss,
    };
    Ok(RabbitReport {
        design: "hive-rabbitmq",
        dlq: o.dlq_after.is_some(),
        status_write: if o.status_patch { "patch" } else { "update" },
        report,
        cpu_seconds: cpu.as_secs_f64(),
        cpu_us_per_apply: cpu.as_secs_f64() * 1e6 / (applies.max(1) as f64),
        consumer_cpu_seconds: consumer_cpu.as_secs_f64(),
        publisher_cpu_seconds: publisher_cpu.as_secs_f64(),
        broker_cpu_seconds: broker_cpu.map(|d| d.as_secs_f64()),
        consumers: o.consumers,
        prefetch: o.prefetch,
        published: publisher_counts["published"].as_u64().unwrap_or(0),
        counts,
        verdict,
    })
}

/// Whether every key holds all its resources at its latest generation: `churned`
/// keys at 2, the others at 1.
fn at_latest(summary: &KeySummary, shape: FleetShape, churned: usize) -> bool {
    let count = |g: i64| summary.by_generation.get(&g).copied().unwrap_or(0);
    let want_two = (churned * shape.resources) as u64;
    let want_one = shape.applies() as u64 - want_two;
    summary.keys == shape.keys() as u64
        && count(1) == want_one
        && count(2) == want_two
        && summary.by_generation.len() <= 2
}

/// Applies that took effect on the fleet's clusters (the hub's status writes left out).
fn fleet_applies(r: &SimReport) -> u64 {
    r.clusters.iter().filter(|(name, _)| name.as_str() != HUB).map(|(_, c)| c.applies).sum()
}

/// The hub's API answers in [`HUB_LATENCY_MS`], and holds an empty ClusterSync per
/// cluster.
async fn prepare_hub(shape: FleetShape, sim: &str, http: &reqwest::Client, patch: bool) -> Result<()> {
    let faults = serde_json::json!({ "latency_ms": HUB_LATENCY_MS });
    let resp = http.put(format!("{sim}/_sim/clusters/{HUB}/faults")).json(&faults).send().await?;
    if !resp.status().is_success() {
        bail!("the simulator refused the hub's latency: {}", resp.status());
    }
    let applier = Arc::new(kube());
    let hub = Arc::new(cluster(sim, HUB));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..shape.clusters {
        let (applier, hub) = (applier.clone(), hub.clone());
        tasks.spawn(async move {
            let name = fleetsync_testkit::cluster_name(c);
            let key = WorkKey::new("baseline-status", HUB, format!("{name}.create"));
            let ctx = ApplyContext::new(key, Fence::new(0), 0, 0);
            // The simulator fails writes at the fleet's rate, the hub's too: try again.
            for _ in 0..20 {
                if applier.apply(&hub, &empty_clustersync(&name, patch), &ctx).await.is_ok() {
                    return Ok(());
                }
            }
            Err(anyhow!("cannot create the ClusterSync of {name} on the hub"))
        });
        if tasks.len() >= 64 {
            tasks.join_next().await.transpose()?.transpose()?;
        }
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    Ok(())
}

/// The RabbitMQ broker's process (`beam.smp`), if it runs on this machine.
fn broker_pid() -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "beam.smp"))
}

/// A child process of this binary (consumer or publisher), killed on drop.
struct Worker {
    child: Child,
    out: BufReader<ChildStdout>,
}

impl Worker {
    fn start(args: &[String], stdin: bool) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find this executable, to start the baseline's processes")?;
        let mut cmd = Command::new(exe);
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::inherit());
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() });
        let mut child = cmd.spawn().with_context(|| format!("cannot start `fleetsync-bench {}`", args[0]))?;
        let out = BufReader::new(child.stdout.take().ok_or_else(|| anyhow!("the child has no stdout"))?);
        Ok(Self { child, out })
    }

    /// Waits for the line `want` (what the process says when it is ready).
    fn expect_line(&mut self, want: &str) -> Result<()> {
        let mut line = String::new();
        self.out.read_line(&mut line).context("reading a baseline process's output")?;
        if line.trim() != want {
            bail!("a baseline process did not start (said {line:?}); its error is above");
        }
        Ok(())
    }

    fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("a baseline process exited early ({status}); its error is above");
        }
        Ok(())
    }

    fn send(&mut self, line: &str) -> Result<()> {
        let stdin = self.child.stdin.as_mut().ok_or_else(|| anyhow!("the publisher has no stdin"))?;
        writeln!(stdin, "{line}")?;
        stdin.flush()?;
        Ok(())
    }

    fn cpu(&self) -> Duration {
        Proc::Pid(self.child.id()).cpu_time()
    }

    fn peak_rss(&self) -> u64 {
        Proc::Pid(self.child.id()).peak_rss_bytes()
    }

    fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn terminate(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).stderr(Stdio::null()).status();
    }

    /// Waits for the process to exit (killing it after [`STOP_GRACE`]) and returns the
    /// last line it printed.
    fn stop(&mut self) -> Option<String> {
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill9();
        let mut rest = String::new();
        let _ = self.out.read_to_string(&mut rest);
        rest.lines().last().map(str::to_string)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latest_means_every_resource_at_its_generation() {
        let shape = FleetShape { clusters: 2, syncsets: 5, resources: 3 };
        let summary = |keys, one, two| KeySummary { keys, by_generation: [(1, one), (2, two)].into() };
        assert!(at_latest(&summary(10, 30, 0), shape, 0));
        assert!(!at_latest(&summary(9, 30, 0), shape, 0));
        assert!(!at_latest(&summary(10, 29, 0), shape, 0));
        // Two keys edited (SyncSet 0 of each cluster): 6 resources at generation 2.
        assert!(at_latest(&summary(10, 24, 6), shape, 2));
        assert!(!at_latest(&summary(10, 27, 3), shape, 2));
    }
}
