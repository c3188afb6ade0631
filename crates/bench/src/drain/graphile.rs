//! The peer: `graphile_worker` on the same database, set up for throughput as its
//! documentation advises (batched fetches through local queues, batched completions),
//! with the sizes tuned on this machine.

use super::{fresh_schema_name, wait_until, Admin, Measured, SYNCSETS_PER_CLUSTER};
use crate::args::DrainArgs;
use anyhow::{ensure, Context, Result};
use fleetsync_model::WorkKey;
use fleetsync_testkit::{cluster_name, syncset_name};
use graphile_worker::{
    IntoTaskHandlerResult, JobComplete, JobSpec, LocalQueueConfig, RawJobSpec, TaskHandler, WorkerContext,
    WorkerOptions,
};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Jobs per `add_raw_jobs` call (one statement each).
const ADD_BATCH: usize = 5_000;
/// Tuned on this machine (2 cores, 50,000 items) from the documentation's
/// "throughput-oriented worker" (concurrency 16, local queue 100, completions
/// batched over 5 ms), which drained only ~1,200 items/s: a slot stays busy until
/// its completion batch is flushed, so concurrency / delay caps the rate. Of
/// concurrency 16–2048, local queues 100–4000 (1–8 of them) and delays 1–5 ms,
/// this was the fastest (~10–12k items/s); smaller settings were slower.
const CONCURRENCY: usize = 1024;
const LOCAL_QUEUE: usize = 2000;
const LOCAL_QUEUES: usize = 4;
const COMPLETE_BATCH_DELAY: Duration = Duration::from_millis(2);

/// The no-op task.
#[derive(Debug, Serialize, Deserialize)]
struct Noop {}

impl TaskHandler for Noop {
    const IDENTIFIER: &'static str = "fleetsync_drain_noop";

    async fn run(self, _ctx: WorkerContext) -> impl IntoTaskHandlerResult {
        Ok::<(), String>(())
    }
}

/// Same window as ours: jobs added first (timed apart), then the worker runs until
/// the last completion is persisted; afterwards its jobs table must be empty.
pub(super) async fn drain(url: &str, a: &DrainArgs) -> Result<Measured> {
    let schema = format!("{}_gw", fresh_schema_name());
    let admin = Admin::connect(url).await?;
    admin.drop_schema(&schema).await?;
    let result = drain_in(url, &schema, &admin, a).await;
    admin.drop_schema(&schema).await?;
    result
}

async fn drain_in(url: &str, schema: &str, admin: &Admin, a: &DrainArgs) -> Result<Measured> {
    let completed = Arc::new(AtomicU64::new(0));
    let worker = Arc::new(worker(url, schema, a, completed.clone()).await?);
    let enqueue = enqueue(&worker, a.items).await?;
    let start = Instant::now();
    let running = tokio::spawn({
        let worker = worker.clone();
        async move { worker.run().await }
    });
    let finished = wait_until(|| completed.load(Ordering::Relaxed) >= a.items as u64, a.timeout).await;
    let drain = start.elapsed();
    worker.request_shutdown();
    running.await.context("the graphile_worker worker panicked")?.context("the graphile_worker worker failed")?;
    let done = completed.load(Ordering::Relaxed);
    ensure!(
        finished,
        "graphile_worker did not finish within --timeout {:?}: {done} of {} jobs completed",
        a.timeout,
        a.items
    );
    let left = admin.count(&format!("SELECT count(*) FROM {schema}._private_jobs")).await?;
    ensure!(left == 0, "graphile_worker left {left} jobs in its table after completing {done}");
    Ok(Measured { items: a.items, enqueue, drain })
}

/// A worker counting persisted completions (the `JobComplete` hook fires after the
/// completion is committed).
async fn worker(url: &str, schema: &str, a: &DrainArgs, completed: Arc<AtomicU64>) -> Result<graphile_worker::Worker> {
    WorkerOptions::default()
        .database_url(url)
        .max_pg_conn(u32::try_from(a.pool_size).unwrap_or(u32::MAX))
        .schema(schema)
        .concurrency(CONCURRENCY)
        .poll_interval(Duration::from_millis(500))
        .local_queue(
            LocalQueueConfig::default()
                .with_size(LOCAL_QUEUE)
                .with_queue_count(LOCAL_QUEUES)
                .with_ttl(Duration::from_secs(60)),
        )
        .complete_job_batch_delay(COMPLETE_BATCH_DELAY)
        .listen_os_shutdown_signals(false)
        .define_job::<Noop>()
        .on(JobComplete, move |_| {
            let completed = completed.clone();
            async move {
                completed.fetch_add(1, Ordering::Relaxed);
            }
        })
        .init()
        .await
        .context("starting graphile_worker (connecting and migrating its schema)")
}

/// One keyed job per item, named as our work keys are: the job key coalesces
/// pending duplicates (our guarantee 1) and a queue of the same name runs the key's
/// jobs one at a time (our guarantee 2), the pairing Graphile Worker offers.
async fn enqueue(worker: &graphile_worker::Worker, items: usize) -> Result<Duration> {
    let specs: Vec<RawJobSpec> = (0..items)
        .map(|i| {
            let key =
                WorkKey::new("default", cluster_name(i / SYNCSETS_PER_CLUSTER), syncset_name(i % SYNCSETS_PER_CLUSTER));
            let spec =
                JobSpec { job_key: Some(key.to_string()), queue_name: Some(key.to_string()), ..JobSpec::default() };
            RawJobSpec { identifier: Noop::IDENTIFIER.to_string(), payload: serde_json::json!({}), spec }
        })
        .collect();
    let utils = worker.create_utils();
    let start = Instant::now();
    for chunk in specs.chunks(ADD_BATCH) {
        let added = utils.add_raw_jobs(chunk).await.context("adding graphile_worker jobs")?;
        ensure!(added.len() == chunk.len(), "graphile_worker added {} of {} jobs", added.len(), chunk.len());
    }
    Ok(start.elapsed())
}
