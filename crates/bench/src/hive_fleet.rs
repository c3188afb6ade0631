//! `fleetsync bench hive-fleet`: the fleet workload through the Kubernetes applier
//! over loopback HTTP, against the simulator (`sim`) in its own process (so the CPU and
//! memory figures are the hub's alone). With `--baseline hive`, the same workload the
//! way today's controllers run it, in the same run, for a ratio; with `--baseline
//! hive-rabbitmq`, the Hive proposal's RabbitMQ design ([`crate::rabbit`]) after the
//! hub, on the same simulator, judged the same way. With `--database-url` the hub is
//! `--processes` worker processes on PostgreSQL instead ([`crate::processes`]).

use crate::args::{Baseline, HiveFleetArgs};
use crate::processes::{self, ProcessUsage};
use anyhow::{anyhow, bail, Context, Result};
use fleetsync::engine::{check_fail_rate, runtime_config, store_config};
use fleetsync::process::{cpu_time, peak_rss_bytes};
use fleetsync::report::{fleet_shape, print_rows, progress_bar, quantiles, wait_settled, Report};
use fleetsync_applier::egress::EgressPolicy;
use fleetsync_applier::kubernetes::{KubeApplier, KubeConfig};
use fleetsync_applier::{Applier, ApplyContext, ByEndpoint};
use fleetsync_k8s_sim::{Report as SimReport, Totals};
use fleetsync_model::{Document, Endpoint, WorkKey};
use fleetsync_runtime::metrics::OutcomeLabel;
use fleetsync_runtime::{Runtime, RuntimeMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::Objects;
use fleetsync_testkit::{cluster_name, hive_cluster, hive_fleet, hive_syncset, syncset_name, FleetShape};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(Debug, Serialize)]
struct BenchReport {
    #[serde(flatten)]
    report: Report,
    /// How long loading the fleet (its Clusters and SyncSets, one apply) took.
    load_seconds: f64,
    cpu_seconds: f64,
    /// `cpu_seconds` per apply, in microseconds.
    cpu_us_per_apply: f64,
    verdict: Verdict,
    /// Worker processes (with `--database-url` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    processes: Option<usize>,
    /// Each worker process's share of `cpu_seconds` and its peak RSS.
    #[serde(skip_serializing_if = "Option::is_none")]
    per_process: Option<Vec<ProcessUsage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline: Option<BaselineOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    speedup: Option<f64>,
}

#[derive(Debug, Serialize)]
struct BaselineReport {
    #[serde(flatten)]
    report: Report,
    cpu_seconds: f64,
}

/// The baseline run: today's controllers, or the proposal's RabbitMQ design.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum BaselineOut {
    Hive(BaselineReport),
    Rabbit(Box<crate::rabbit::RabbitReport>),
}

impl BaselineOut {
    fn report(&self) -> &Report {
        match self {
            BaselineOut::Hive(b) => &b.report,
            BaselineOut::Rabbit(b) => &b.report,
        }
    }
}

/// What the simulator saw one side do (one tenant's keys, over its run).
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Every key holds every resource at its latest generation.
    pub latest_generation: bool,
    /// Keys that do not.
    pub keys_not_latest: u64,
    pub order_kept: bool,
    /// Times a key had two calls in flight at once.
    pub overlaps: u64,
    /// Applies of an older generation over a newer one of the same key.
    pub stale_writes: u64,
    /// Work done twice: applies of a (key, resource, generation) the cluster already
    /// held from a completed run.
    pub repeated_applies: u64,
}

impl Verdict {
    /// Nothing wrong with the end state or the order of writes (work done twice is
    /// waste, reported, but not wrong).
    fn clean(&self) -> bool {
        self.latest_generation && self.order_kept && self.overlaps == 0 && self.stale_writes == 0
    }
}

/// How the hub ran: its report, CPU time, store size, the simulator's report read
/// once at the end, and (worker processes) each process's usage.
pub(crate) struct HubRun {
    pub report: Report,
    pub load_seconds: f64,
    pub cpu: Duration,
    pub store_bytes: u64,
    pub sim: SimReport,
    pub per_process: Option<Vec<ProcessUsage>>,
}

pub async fn run(a: HiveFleetArgs) -> Result<bool> {
    let shape = fleet_shape(a.clusters, a.syncsets, a.resources)?;
    if a.baseline.is_some() && a.baseline_workers == 0 {
        bail!("--baseline-workers must be at least 1");
    }
    processes::check(&a)?;
    if a.churn && (a.database_url.is_none() || a.processes < 2) {
        bail!("--churn kills a worker process: it needs --database-url and --processes 2 or more");
    }
    let rabbit = rabbit_options(&a)?;
    let fail_rate = check_fail_rate(a.fail_rate)?;
    let _sim_process;
    let sim_url = match &a.sim {
        Some(url) => url.trim_end_matches('/').to_string(),
        None => {
            let p = SimProcess::start(a.latency_scale, fail_rate)?;
            let url = p.url.clone();
            _sim_process = p;
            url
        }
    };
    let http = reqwest::Client::new();
    let hub = match &a.database_url {
        None => run_hub(&a, shape, &sim_url, &http).await?,
        Some(url) => processes::run(&a, url, shape, &sim_url, &http).await?,
    };
    let HubRun { report, load_seconds, cpu, store_bytes, sim: sim_report, per_process } = hub;
    let expected = |s: usize| if a.churn && crate::rabbit::edited(s) { 2 } else { 1 };
    let verdict =
        sim_verdict(&http, &sim_url, "default", shape, expected, &Totals::default(), &sim_report.totals).await?;
    let clean = report.converged && verdict.clean();
    let baseline = match (a.baseline, rabbit) {
        (Some(Baseline::Hive), _) => {
            Some(BaselineOut::Hive(run_baseline(shape, &sim_url, a.baseline_workers, a.baseline_window).await))
        }
        (Some(Baseline::HiveRabbitmq), Some(o)) => {
            Some(BaselineOut::Rabbit(Box::new(crate::rabbit::run(&o, shape, &sim_url, &http).await?)))
        }
        _ => None,
    };
    let speedup = baseline.as_ref().map(|b| report.applies_per_sec / b.report().applies_per_sec.max(1e-9));
    let processes = a.database_url.is_some().then_some(a.processes);
    let out = BenchReport {
        cpu_us_per_apply: cpu.as_secs_f64() * 1e6 / report.applies.max(1) as f64,
        report,
        load_seconds,
        cpu_seconds: cpu.as_secs_f64(),
        verdict,
        processes,
        per_process,
        baseline,
        speedup,
    };
    if a.json {
        println!("{}", serde_json::to_string(&out)?);
    } else {
        print_summary(&out, shape, store_bytes, a.baseline_workers);
    }
    Ok(clean)
}

/// `--baseline hive-rabbitmq`'s options: as many consumers as worker processes unless
/// told, each with a prefetch of its share of fleetsync's applies in flight in all.
fn rabbit_options(a: &HiveFleetArgs) -> Result<Option<crate::rabbit::RabbitOptions>> {
    if !matches!(a.baseline, Some(Baseline::HiveRabbitmq)) {
        return Ok(None);
    }
    let consumers = a.baseline_consumers.unwrap_or(a.processes);
    if consumers == 0 {
        bail!("--baseline-consumers must be at least 1");
    }
    let total = a.engine.max_in_flight * a.processes;
    if !total.is_multiple_of(consumers) {
        bail!(
            "--baseline-consumers {consumers} cannot share fleetsync's {total} applies in flight              (--max-in-flight × --processes) evenly: pick a divisor"
        );
    }
    let prefetch = u16::try_from(total / consumers)
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| anyhow!("a prefetch of {} per consumer is beyond RabbitMQ's 1 to 65535", total / consumers))?;
    if a.baseline_dlq && a.baseline_dlq_after == 0 {
        bail!("--baseline-dlq-after must be at least 1");
    }
    Ok(Some(crate::rabbit::RabbitOptions {
        amqp_url: a.amqp_url.clone(),
        consumers,
        prefetch,
        dlq_after: a.baseline_dlq.then_some(a.baseline_dlq_after),
        dlq_scan: a.baseline_dlq_scan,
        churn: a.churn,
        status_patch: a.baseline_status_patch,
        timeout: a.timeout,
        quiet: a.json,
    }))
}

/// `--templated`: every resource of a SyncSet rendered per cluster — its revision from
/// the SyncSet's values, and the cluster's name and label in its data.
fn template(doc: &mut Document) {
    let Document::SyncSet(s) = doc else { return };
    s.spec.templated = true;
    s.spec.values.0.insert("revision".into(), "r1".into());
    for m in &mut s.spec.resources {
        let data = &mut m.0["data"];
        data["revision"] = "{{ values.revision }}".into();
        data["cluster"] = "{{ cluster.name }} in {{ cluster.labels.fleet }}".into();
    }
}

/// Runs the hub on the embedded store, in this process, until the fleet settles.
async fn run_hub(a: &HiveFleetArgs, shape: FleetShape, sim: &str, http: &reqwest::Client) -> Result<HubRun> {
    let dir = tempfile::tempdir().context("cannot create a temporary directory for the store")?;
    let path = match &a.db {
        Some(path) if path.exists() => bail!("--db {}: the file exists; name a new one", path.display()),
        Some(path) => path.clone(),
        None => dir.path().join("bench.db"),
    };
    let store = Arc::new(SqliteStore::open(&path, store_config(&a.engine)?)?);
    let endpoint = |i: usize| Endpoint::Http { url: format!("{sim}/clusters/{}", cluster_name(i)) };
    let loading = Instant::now();
    let mut docs = hive_fleet(shape, endpoint, "r1");
    if a.templated {
        docs.iter_mut().for_each(template);
    }
    store.objects_apply(docs).await.context("loading the fleet")?;
    let load_seconds = loading.elapsed().as_secs_f64();

    let metrics = RuntimeMetrics::unregistered();
    let applies_ok = metrics.applies.get_or_create(&OutcomeLabel { outcome: "ok" }).clone();
    let applier: Arc<dyn Applier> = Arc::new(ByEndpoint { http: Some(Arc::new(kube())), ..ByEndpoint::default() });
    let progress = progress_bar(shape.applies() as u64, a.json);
    let (cpu0, start) = (cpu_time(), Instant::now());
    let shutdown = CancellationToken::new();
    let runtime = Runtime::new(store.clone(), applier, runtime_config(&a.engine)?, metrics);
    let workers = tokio::spawn(runtime.run(shutdown.clone()));
    let (settled, parked) =
        wait_settled(&*store, &progress, || applies_ok.get(), shape.applies() as u64, a.timeout).await?;
    let seconds = start.elapsed().as_secs_f64();
    let cpu = cpu_time().saturating_sub(cpu0);
    progress.finish_and_clear();
    shutdown.cancel();
    workers.await.context("the workers panicked")??;

    let sim_report = read_sim_report(http, sim).await?;
    let report = hub_report(&sim_report, seconds, settled, parked, peak_rss_bytes());
    Ok(HubRun { report, load_seconds, cpu, store_bytes: store.size_bytes(), sim: sim_report, per_process: None })
}

/// `GET /_sim/report`.
pub(crate) async fn read_sim_report(http: &reqwest::Client, sim: &str) -> Result<SimReport> {
    serde_json::from_value(get_json(http, &format!("{sim}/_sim/report")).await?)
        .context("the simulator's report has an unexpected shape")
}

/// The hub's report: applies and make-spans as the simulator saw them, over `seconds`.
pub(crate) fn hub_report(sim: &SimReport, seconds: f64, settled: bool, parked: u64, peak_rss_bytes: u64) -> Report {
    let applies = sim.totals.applies;
    let ms = |v: f64| Duration::from_secs_f64(v.max(0.0) / 1e3);
    let pairs = sim.clusters.values().map(|c| (ms(c.makespan_ms), ms(c.critical_path_ms)));
    Report {
        applies,
        seconds,
        applies_per_sec: applies as f64 / seconds.max(1e-9),
        makespan_over_critical: quantiles(pairs),
        failed_keys: parked,
        converged: settled && parked == 0,
        peak_rss_bytes,
    }
}

/// The Kubernetes applier against the simulator, which listens on loopback: the egress
/// policy allows loopback explicitly (it refuses it by default).
pub(crate) fn kube() -> KubeApplier {
    let egress = EgressPolicy::parse(&LOOPBACK, &[]).unwrap_or_default();
    KubeApplier::new(KubeConfig { egress, ..KubeConfig::default() })
}

/// The `--egress-allow` entries that let workers reach a simulator on this machine.
pub(crate) const LOOPBACK: [&str; 3] = ["127.0.0.0/8", "::1", "localhost"];

async fn get_json(http: &reqwest::Client, url: &str) -> Result<Value> {
    let resp = http.get(url).send().await.with_context(|| format!("cannot reach the simulator at {url}"))?;
    resp.json().await.with_context(|| format!("the simulator's answer at {url} is not JSON"))
}

/// The sim's verdict on `tenant`'s keys over a run (its counters from `before` to
/// `after`): every key's resources at the latest generation (`expected` of its
/// SyncSet's index), order kept within every run, no two requests of one key in
/// flight together, no older generation over a newer one, and the work done twice.
pub(crate) async fn sim_verdict(
    http: &reqwest::Client,
    sim: &str,
    tenant: &str,
    shape: FleetShape,
    expected: impl Fn(usize) -> i64,
    before: &Totals,
    after: &Totals,
) -> Result<Verdict> {
    let keys = get_json(http, &format!("{sim}/_sim/keys")).await?;
    let mut not_latest = 0;
    for c in 0..shape.clusters {
        for s in 0..shape.syncsets {
            let key = WorkKey::new(tenant, cluster_name(c), syncset_name(s)).to_string();
            let resources = keys.get(&key).and_then(Value::as_object);
            let want = expected(s);
            let all =
                resources.is_some_and(|r| r.len() == shape.resources && r.values().all(|g| g.as_i64() == Some(want)));
            not_latest += u64::from(!all);
        }
    }
    let delta = |f: fn(&Totals) -> u64| f(after).saturating_sub(f(before));
    Ok(Verdict {
        latest_generation: not_latest == 0,
        keys_not_latest: not_latest,
        order_kept: delta(|t| t.order_violations) == 0,
        overlaps: delta(|t| t.overlaps),
        stale_writes: delta(|t| t.stale_writes),
        repeated_applies: delta(|t| t.repeated_applies),
    })
}

/// Today's controllers: `workers` threads of control, each taking a whole cluster and
/// applying its SyncSets one resource after another. Runs for at most `window`.
async fn run_baseline(shape: FleetShape, sim: &str, workers: usize, window: Duration) -> BaselineReport {
    let applier = Arc::new(kube());
    let next = Arc::new(AtomicUsize::new(0));
    let applies = Arc::new(AtomicU64::new(0));
    let (cpu0, start) = (cpu_time(), Instant::now());
    let deadline = start + window;
    let syncsets: Arc<Vec<Document>> =
        Arc::new((0..shape.syncsets).map(|s| hive_syncset(s, shape.resources, "r1")).collect());
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let (applier, next, applies, syncsets, sim) =
                (applier.clone(), next.clone(), applies.clone(), syncsets.clone(), sim.to_string());
            tokio::spawn(
                async move { baseline_worker(&*applier, &next, &applies, &syncsets, &sim, shape, deadline).await },
            )
        })
        .collect();
    let mut spans = Vec::new();
    for t in tasks {
        spans.extend(t.await.unwrap_or_default());
    }
    let seconds = start.elapsed().as_secs_f64();
    let applies = applies.load(Ordering::Relaxed);
    let report = Report {
        applies,
        seconds,
        applies_per_sec: applies as f64 / seconds.max(1e-9),
        makespan_over_critical: quantiles(spans),
        failed_keys: 0,
        converged: next.load(Ordering::Relaxed) >= shape.clusters && Instant::now() <= deadline,
        peak_rss_bytes: peak_rss_bytes(),
    };
    BaselineReport { report, cpu_seconds: cpu_time().saturating_sub(cpu0).as_secs_f64() }
}

/// One baseline worker; returns (make-span, critical path) of each cluster it finished.
async fn baseline_worker(
    applier: &dyn Applier,
    next: &AtomicUsize,
    applies: &AtomicU64,
    syncsets: &[Document],
    sim: &str,
    shape: FleetShape,
    deadline: Instant,
) -> Vec<(Duration, Duration)> {
    let mut spans = Vec::new();
    'clusters: loop {
        let c = next.fetch_add(1, Ordering::Relaxed);
        if c >= shape.clusters || Instant::now() >= deadline {
            return spans;
        }
        let Document::Cluster(cluster) =
            hive_cluster(c, Endpoint::Http { url: format!("{sim}/clusters/{}", cluster_name(c)) })
        else {
            return spans;
        };
        let started = Instant::now();
        let mut per_syncset: HashMap<usize, Duration> = HashMap::new();
        for (s, doc) in syncsets.iter().enumerate() {
            let Document::SyncSet(ss) = doc else { continue };
            // A tenant of its own, so its fences never meet the hub's.
            let key = WorkKey::new("baseline", cluster_name(c), syncset_name(s));
            for (index, m) in ss.spec.resources.iter().enumerate() {
                if Instant::now() >= deadline {
                    break 'clusters;
                }
                let ctx = ApplyContext::new(key.clone(), fleetsync_model::Fence::new(1), 1, index);
                let t = Instant::now();
                if applier.apply(&cluster, m, &ctx).await.is_ok() {
                    applies.fetch_add(1, Ordering::Relaxed);
                }
                *per_syncset.entry(s).or_default() += t.elapsed();
            }
        }
        let critical = per_syncset.values().copied().max().unwrap_or_default();
        spans.push((started.elapsed(), critical));
    }
    spans
}

/// A simulator child process (this binary's `sim`) on a free loopback port, killed on
/// drop.
struct SimProcess {
    child: Child,
    url: String,
}

impl SimProcess {
    fn start(latency_scale: f64, fail_rate: f64) -> Result<Self> {
        let exe = std::env::current_exe().context("cannot find this executable, to start its simulator")?;
        let mut child = Command::new(exe)
            .args([
                "sim",
                "--listen",
                "127.0.0.1:0",
                "--latency-scale",
                &latency_scale.to_string(),
                "--fail-rate",
                &fail_rate.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("cannot start `fleetsync-bench sim`")?;
        let stdout = child.stdout.take().ok_or_else(|| anyhow!("the simulator has no stdout"))?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).context("reading the simulator's address")?;
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .ok_or_else(|| anyhow!("the simulator did not start: {line:?}"))?;
        Ok(Self { url: format!("http://{addr}"), child })
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn print_summary(b: &BenchReport, s: FleetShape, store_bytes: u64, workers: usize) {
    println!(
        "fleetsync bench hive-fleet: {} clusters × {} SyncSets × {} resources = {} applies, Kubernetes applier over loopback HTTP",
        s.clusters,
        s.syncsets,
        s.resources,
        s.applies()
    );
    let r = &b.report;
    let q = &r.makespan_over_critical;
    let mut rows = vec![
        ("converged", if r.converged { "yes".to_string() } else { "NO".to_string() }),
        ("applies", r.applies.to_string()),
        ("fleet loaded in", format!("{:.1} s", b.load_seconds)),
        ("seconds", format!("{:.1}", r.seconds)),
        ("applies/s", format!("{:.0}", r.applies_per_sec)),
        ("make-span / critical path", format!("p50 {:.3}   p99 {:.3}   max {:.3}", q.p50, q.p99, q.max)),
        ("failed (parked) keys", r.failed_keys.to_string()),
        (
            "hub CPU seconds",
            format!("{:.1} ({:.0}% of one core)", b.cpu_seconds, 100.0 * b.cpu_seconds / r.seconds.max(1e-9)),
        ),
        ("hub CPU per apply", format!("{:.1} µs", b.cpu_us_per_apply)),
        ("hub peak RSS", format!("{:.0} MiB", r.peak_rss_bytes as f64 / (1024.0 * 1024.0))),
        ("store size", format!("{:.1} MiB", store_bytes as f64 / (1024.0 * 1024.0))),
    ];
    if let (Some(n), Some(each)) = (b.processes, &b.per_process) {
        let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
        let shares: Vec<String> = each
            .iter()
            .map(|p| format!("{} clusters, {:.1} s, {:.0} MiB", p.clusters, p.cpu_seconds, mib(p.peak_rss_bytes)))
            .collect();
        rows.push(("worker processes", format!("{n} on PostgreSQL (CPU and RSS are their sums)")));
        rows.push(("per process", shares.join("; ")));
    }
    rows.push(("sim verdict", verdict_text(&b.verdict)));
    match (&b.baseline, b.speedup) {
        (Some(BaselineOut::Hive(base)), Some(x)) => {
            rows.push((
                "baseline (hive)",
                format!(
                    "{workers} workers, {:.0} applies/s over {:.0} s",
                    base.report.applies_per_sec, base.report.seconds
                ),
            ));
            rows.push(("speed-up", format!("{x:.0}×")));
        }
        (Some(BaselineOut::Rabbit(base)), Some(x)) => rabbit_rows(&mut rows, base, x),
        _ => {}
    }
    print_rows(&rows);
}

fn verdict_text(v: &Verdict) -> String {
    format!(
        "keys not at their latest generation {}, order kept {}, overlaps {}, older generation after newer {}, \
         work done twice {} applies",
        v.keys_not_latest, v.order_kept, v.overlaps, v.stale_writes, v.repeated_applies
    )
}

fn rabbit_rows(rows: &mut Vec<(&str, String)>, b: &crate::rabbit::RabbitReport, speedup: f64) {
    let r = &b.report;
    let variant = format!(
        "hive-rabbitmq{}, ClusterSync by {}",
        if b.dlq { ", dead-letter queue" } else { "" },
        if b.status_write == "patch" { "merge patch" } else { "read and conditional write" }
    );
    rows.push(("baseline", format!("{variant}: {} consumers, prefetch {} each", b.consumers, b.prefetch)));
    rows.push(("  converged", if r.converged { "yes".to_string() } else { "NO (timed out)".to_string() }));
    rows.push(("  applies", format!("{} in {:.1} s: {:.0} applies/s", r.applies, r.seconds, r.applies_per_sec)));
    rows.push((
        "  CPU",
        format!(
            "{:.1} s (consumers {:.1} + publisher {:.1}), {:.1} µs per apply",
            b.cpu_seconds, b.consumer_cpu_seconds, b.publisher_cpu_seconds, b.cpu_us_per_apply
        ),
    ));
    let broker = b.broker_cpu_seconds.map_or("not found".to_string(), |s| format!("{s:.1} s"));
    rows.push(("  broker CPU", format!("{broker}, not counted above (nor is PostgreSQL's for the hub)")));
    let c = &b.counts;
    rows.push((
        "  messages",
        format!(
            "{} published, {} taken ({} superseded), {} failed runs, {} republished, {} dead-lettered",
            b.published, c.messages, c.superseded, c.failed_runs, c.republished, c.dead_lettered
        ),
    ));
    rows.push(("  ClusterSync writes", format!("{} ({} conflicts or failures)", c.status_writes, c.status_conflicts)));
    rows.push(("  sim verdict", verdict_text(&b.verdict)));
    rows.push(("speed-up", format!("{speedup:.2}× the baseline's applies/s")));
}
