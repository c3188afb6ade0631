//! `fleetsync bench hive-fleet --database-url URL --processes N`: the hub as N
//! `fleetsync worker` child processes (the `fleetsync` binary next to this one) on one PostgreSQL, on a schema
//! of the run's own (created and migrated here, dropped afterwards, also when the run
//! fails). Each worker gets the engine knobs this command was given, so
//! `--max-in-flight` is a per-process limit: scaling is measured with that limit fixed.
//!
//! The run: start the workers; wait until each has heard of all the others (every
//! member's latest heartbeat comes after the last one joined), so none starts out
//! claiming the whole fleet alone; load the fleet through the store in one
//! transaction; time from its commit until every key is Applied or Parked.
//!
//! CPU and memory are the workers' (this process only loads the fleet and watches;
//! PostgreSQL's own CPU is not counted, as no database server is in the SQLite run):
//! each worker's utime + stime over the run and its peak RSS (VmHWM), read from
//! `/proc/<pid>/stat` and `/proc/<pid>/status` once the fleet has settled, before the
//! worker is stopped. `cpu_seconds` sums the workers; `peak_rss_bytes` sums their
//! peaks (an upper bound of their peak together).
//!
//! With `--churn`, worker 0 is killed with SIGKILL once 30% of the keys are Applied
//! and started again (with a new id, as a new pod) a second later, and every fifth
//! SyncSet is edited to revision r2 (generation 2) through the store at 50%; a
//! killed worker's CPU counts up to its death.
//!
//! Each worker's `clusters` is its share of the fleet by rendezvous hashing. A worker
//! only runs keys of its own shards, so with a per-process limit the run lasts as long
//! as the largest share takes: an uneven split shows up as less than linear scaling.

use crate::args::HiveFleetArgs;
use crate::drain::Admin;
use crate::hive_fleet::{hub_report, read_sim_report, HubRun};
use anyhow::{bail, Context, Result};
use fleetsync::engine::{runtime_config, store_config};
use fleetsync::process::Proc;
use fleetsync::report::progress_bar;
use fleetsync_model::shard::{owner_of, shard_of};
use fleetsync_model::{Endpoint, Phase};
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::Objects;
use fleetsync_store::Store;
use fleetsync_testkit::{cluster_name, hive_fleet, hive_syncset, FleetShape};
use indicatif::ProgressBar;
use serde::Serialize;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the workers may take to start and see each other (a heartbeat is every
/// third of `--member-ttl`).
const JOIN_TIMEOUT: Duration = Duration::from_secs(60);
/// How long stopped workers may take to leave before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(15);
/// How often the queue is looked at while the fleet converges.
const POLL: Duration = Duration::from_millis(200);
/// How long a killed worker stays down before it is started again (`--churn`).
const RESTART_AFTER: Duration = Duration::from_secs(1);

/// One worker process's share of the run.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessUsage {
    pub id: String,
    /// Clusters whose shards hashing gives this worker.
    pub clusters: usize,
    pub cpu_seconds: f64,
    pub peak_rss_bytes: u64,
}

/// Rejects `--processes` the store cannot serve, before anything starts.
pub fn check(a: &HiveFleetArgs) -> Result<()> {
    if a.processes == 0 {
        bail!("--processes must be at least 1");
    }
    if a.database_url.is_none() && a.processes > 1 {
        bail!(
            "--processes {} needs --database-url: worker processes share a PostgreSQL store \
             (without it the hub runs in this process on the embedded SQLite store)",
            a.processes
        );
    }
    if a.database_url.is_some() {
        if a.pool_size == 0 {
            bail!("--pool-size must be at least 1");
        }
        // The workers would refuse these too, each on its own; say it once, here.
        runtime_config(&a.engine)?;
    }
    Ok(())
}

pub async fn run(a: &HiveFleetArgs, url: &str, shape: FleetShape, sim: &str, http: &reqwest::Client) -> Result<HubRun> {
    // One run per process: the pid makes the name unique among live runs, and a
    // leftover of a killed run with the same pid is dropped first.
    let schema = format!("bench_fleet_{}", std::process::id());
    let admin = Admin::connect(url).await?;
    admin.drop_schema(&schema).await?;
    let result = run_in(a, url, &schema, &admin, shape, sim, http).await;
    let dropped = admin.drop_schema(&schema).await;
    let run = result?;
    dropped?;
    Ok(run)
}

async fn run_in(
    a: &HiveFleetArgs,
    url: &str,
    schema: &str,
    admin: &Admin,
    shape: FleetShape,
    sim: &str,
    http: &reqwest::Client,
) -> Result<HubRun> {
    let options = PgOptions { schema: Some(schema.to_string()), pool_size: 2, migrate: true };
    let store = PgStore::connect_with(url, options, store_config(&a.engine)?)
        .await
        .context("cannot open the PostgreSQL store (check --database-url)")?;
    let mut workers = Workers::start(a, url, schema)?;
    workers.wait_joined(&store).await?;
    let churn = a.churn.then_some(Churn { a, url, schema });

    let endpoint = |i: usize| Endpoint::Http { url: format!("{sim}/clusters/{}", cluster_name(i)) };
    let docs = hive_fleet(shape, endpoint, "r1");
    workers.mark_cpu();
    let loading = Instant::now();
    store.objects_apply(docs).await.context("loading the fleet")?;
    let load_seconds = loading.elapsed().as_secs_f64();
    let start = Instant::now();
    // Fresh planner statistics for the freshly filled tables (see `Admin::analyze`).
    admin.analyze(schema).await?;
    let progress = progress_bar(shape.applies() as u64, a.json);
    let (settled, parked) = workers.wait_settled(&store, &progress, shape, churn, a.timeout).await?;
    let seconds = start.elapsed().as_secs_f64();
    let usage = workers.usage(shape);
    progress.finish_and_clear();
    workers.stop().await;

    let store_bytes = admin
        .count(&format!(
            "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = '{schema}' AND c.relkind = 'r'"
        ))
        .await?;
    let sim_report = read_sim_report(http, sim).await?;
    let report = hub_report(&sim_report, seconds, settled, parked, usage.iter().map(|u| u.peak_rss_bytes).sum());
    let cpu = Duration::from_secs_f64(usage.iter().map(|u| u.cpu_seconds).sum());
    Ok(HubRun {
        report,
        load_seconds,
        cpu,
        store_bytes: u64::try_from(store_bytes).unwrap_or(0),
        sim: sim_report,
        per_process: Some(usage),
    })
}

/// What `--churn` needs to start a worker again.
#[derive(Clone, Copy)]
struct Churn<'a> {
    a: &'a HiveFleetArgs,
    url: &'a str,
    schema: &'a str,
}

/// The worker child processes, killed on drop (a failed run leaves none behind).
struct Workers {
    children: Vec<(String, Child)>,
    /// Each slot's CPU time when the run started (0 for a worker started since).
    cpu0: Vec<Duration>,
    /// Each slot's CPU time of workers killed since the run started.
    retired: Vec<Duration>,
}

impl Workers {
    fn start(a: &HiveFleetArgs, url: &str, schema: &str) -> Result<Workers> {
        let mut workers = Workers {
            children: Vec::with_capacity(a.processes),
            cpu0: vec![Duration::ZERO; a.processes],
            retired: vec![Duration::ZERO; a.processes],
        };
        for i in 0..a.processes {
            let id = format!("bench-{}-{i}", std::process::id());
            workers.children.push((id.clone(), Self::spawn(a, url, schema, &id)?));
        }
        Ok(workers)
    }

    fn spawn(a: &HiveFleetArgs, url: &str, schema: &str, id: &str) -> Result<Child> {
        let exe = crate::fleetsync_exe::find()?;
        let mut cmd = Command::new(&exe);
        cmd.args(["worker", "--database-url", url, "--schema", schema, "--no-migrate"])
            .args(["--pool-size", &a.pool_size.to_string(), "--worker-id", id])
            .args(a.engine.to_args())
            .args(["--egress-allow", &crate::hive_fleet::LOOPBACK.join(",")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        if std::env::var_os("RUST_LOG").is_none() {
            // Workers log at info; a benchmark's stderr shows only what went wrong.
            cmd.env("RUST_LOG", "warn");
        }
        cmd.spawn().context("cannot start a `fleetsync worker` process")
    }

    /// Kills worker `i` with SIGKILL (its CPU so far kept) and starts a new one in its
    /// place, with a new id, after [`RESTART_AFTER`].
    async fn kill_and_restart(&mut self, i: usize, churn: Churn<'_>) -> Result<()> {
        let (_, child) = &mut self.children[i];
        self.retired[i] += Proc::Pid(child.id()).cpu_time().saturating_sub(self.cpu0[i]);
        self.cpu0[i] = Duration::ZERO;
        let _ = child.kill();
        let _ = child.wait();
        tokio::time::sleep(RESTART_AFTER).await;
        let id = format!("bench-{}-{i}-restarted", std::process::id());
        let child = Self::spawn(churn.a, churn.url, churn.schema, &id)?;
        self.children[i] = (id, child);
        Ok(())
    }

    /// Fails if a worker has exited (it should run until stopped).
    fn check_running(&mut self) -> Result<()> {
        for (id, child) in &mut self.children {
            if let Some(status) = child.try_wait().context("checking on a worker process")? {
                bail!("worker process {id} exited early ({status}); its error is above");
            }
        }
        Ok(())
    }

    /// Waits until every worker is a member and each has heard of all the others.
    async fn wait_joined(&mut self, store: &dyn Store) -> Result<()> {
        let deadline = Instant::now() + JOIN_TIMEOUT;
        loop {
            self.check_running()?;
            let members = store.member_list().await.context("listing the members")?;
            let ours: Vec<_> = members.iter().filter(|m| self.children.iter().any(|(id, _)| *id == m.id)).collect();
            if ours.len() == self.children.len() {
                let last = ours.iter().map(|m| m.started_at).max();
                let last_alone = ours.iter().filter(|m| Some(m.started_at) == last).count() == 1;
                // The last to join saw the others when it joined; the others have to
                // beat once more.
                let heard = |m: &&fleetsync_store::Member| {
                    Some(m.heartbeat_at) > last || (last_alone && Some(m.started_at) == last)
                };
                if ours.iter().all(heard) {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                bail!(
                    "the worker processes did not all join within {JOIN_TIMEOUT:?} ({} of {} are members)",
                    ours.len(),
                    self.children.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until no key is unsettled or the timeout; returns (settled, parked keys).
    /// With `churn`, kills and restarts worker 0 at 30% of the keys Applied and edits
    /// every fifth SyncSet at 50%; the fleet is settled only after the edit.
    async fn wait_settled(
        &mut self,
        store: &dyn Store,
        progress: &ProgressBar,
        shape: FleetShape,
        churn: Option<Churn<'_>>,
        timeout: Duration,
    ) -> Result<(bool, u64)> {
        let deadline = Instant::now() + timeout;
        let (mut killed, mut edited) = (false, false);
        loop {
            self.check_running()?;
            let stats = store.queue_stats().await.context("reading queue stats")?;
            let count = |p: Phase| stats.by_phase.get(&p).copied().unwrap_or(0);
            progress.set_position(count(Phase::Applied) * shape.resources as u64);
            progress.set_message(format!("{} keys to go", stats.unsettled()));
            let done = count(Phase::Applied) as f64 / shape.keys() as f64;
            if let Some(churn) = churn {
                if !killed && done >= 0.3 {
                    self.kill_and_restart(0, churn).await?;
                    killed = true;
                }
                if !edited && done >= 0.5 {
                    let docs = (0..shape.syncsets)
                        .filter(|s| crate::rabbit::edited(*s))
                        .map(|s| hive_syncset(s, shape.resources, &crate::rabbit::revision(2)))
                        .collect();
                    store.objects_apply(docs).await.context("editing SyncSets mid-run")?;
                    edited = true;
                    continue;
                }
            }
            if stats.unsettled() == 0 && (churn.is_none() || edited) {
                return Ok((true, count(Phase::Parked)));
            }
            if Instant::now() >= deadline {
                return Ok((false, count(Phase::Parked)));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Takes each worker's CPU time so far as the run's start.
    fn mark_cpu(&mut self) {
        self.cpu0 = self.children.iter().map(|(_, c)| Proc::Pid(c.id()).cpu_time()).collect();
    }

    /// Each worker's share of the fleet, CPU time since the run started (with the
    /// workers killed in its slot) and peak RSS (read while it runs).
    fn usage(&self, shape: FleetShape) -> Vec<ProcessUsage> {
        let ids: Vec<String> = self.children.iter().map(|(id, _)| id.clone()).collect();
        let owners: Vec<Option<&str>> =
            (0..shape.clusters).map(|c| owner_of(shard_of("default", &cluster_name(c)), &ids)).collect();
        self.children
            .iter()
            .zip(self.cpu0.iter().zip(&self.retired))
            .map(|((id, c), (before, retired))| {
                let p = Proc::Pid(c.id());
                ProcessUsage {
                    id: id.clone(),
                    clusters: owners.iter().filter(|o| **o == Some(id.as_str())).count(),
                    cpu_seconds: (p.cpu_time().saturating_sub(*before) + *retired).as_secs_f64(),
                    peak_rss_bytes: p.peak_rss_bytes(),
                }
            })
            .collect()
    }

    /// Asks every worker to stop (SIGTERM: it leaves the members and exits), and kills
    /// those still running after [`STOP_GRACE`].
    async fn stop(&mut self) {
        for (_, child) in &mut self.children {
            let term = Command::new("kill").args(["-TERM", &child.id().to_string()]).stderr(Stdio::null()).status();
            if !term.is_ok_and(|s| s.success()) {
                let _ = child.kill();
            }
        }
        let deadline = Instant::now() + STOP_GRACE;
        while Instant::now() < deadline && self.children.iter_mut().any(|(_, c)| c.try_wait().ok().flatten().is_none())
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (id, child) in &mut self.children {
            if child.try_wait().ok().flatten().is_none() {
                tracing::warn!(worker = %id, "the worker did not stop within {STOP_GRACE:?}; killing it");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}
