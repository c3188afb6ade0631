//! LISTEN/NOTIFY latency on the shared PostgreSQL (issue 4): a change written by one
//! process is claimed by an idle worker in another process in well under the safety
//! poll (30 s here), because the commit's NOTIFY wakes it.
//!
//! Two `PgStore`s on one schema stand for the two processes, so the only way the
//! change reaches the worker is through the database. The bound asserted is generous
//! (p99 under 1 s) as the machine is shared; the figures are printed (`--nocapture`).
//!
//! Database: `FLEETSYNC_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`.
//! Each test works in a schema of its own, dropped at the end.

use fleetsync_applier::{Applier, ApplyContext, ApplyError};
use fleetsync_model::{Cluster, Endpoint, Manifest, ResourceRef};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_store::postgres::{
    testing::{test_database_url, ScratchSchema},
    PgOptions, PgStore,
};
use fleetsync_store::{ClaimParams, Completion, RunOutcome, Store, StoreConfig};
use fleetsync_testkit::{hive_cluster, hive_syncset, syncset_name};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const POLL: Duration = Duration::from_secs(30);
const CHANGES: usize = 50;
const BOUND_P99: Duration = Duration::from_secs(1);

/// A store on the test's schema, as a process of its own would open it.
async fn store(scratch: &ScratchSchema, pool_size: usize) -> Arc<dyn Store> {
    let options = PgOptions { schema: Some(scratch.name.clone()), pool_size, migrate: true };
    Arc::new(PgStore::connect_with(&test_database_url(), options, StoreConfig::default()).await.expect("connect"))
}

/// Sorted samples' p50, p99 and max.
fn summary(samples: &mut [Duration]) -> (Duration, Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    (at(0.50), at(0.99), samples[samples.len() - 1])
}

/// Makes `CHANGES` changes through `api`, one at a time with the worker idle in
/// between, each a new SyncSet (so a new key) for the one cluster; returns each
/// change's latency from the start of its `objects_apply` (the NOTIFY goes out with
/// its commit) to the moment `claimed` reports its SyncSet, and how long the
/// `objects_apply` itself took.
async fn measure(
    api: &dyn Store,
    claimed: &mut mpsc::UnboundedReceiver<(String, Instant)>,
) -> (Vec<Duration>, Vec<Duration>) {
    let (mut samples, mut writes) = (Vec::with_capacity(CHANGES), Vec::with_capacity(CHANGES));
    for i in 0..CHANGES {
        // Let the worker finish the previous key and go back to waiting.
        tokio::time::sleep(Duration::from_millis(20 + rand::random::<u64>() % 30)).await;
        let want = syncset_name(i);
        let start = Instant::now();
        api.objects_apply(vec![hive_syncset(i, 1, "r1")]).await.expect("apply");
        writes.push(start.elapsed());
        let at = loop {
            match tokio::time::timeout(Duration::from_secs(10), claimed.recv()).await {
                Ok(Some((name, at))) if name == want => break at,
                Ok(Some(_)) => {}
                Ok(None) => panic!("the worker stopped"),
                Err(_) => panic!("change {i} not claimed within 10 s (the poll is {POLL:?}): no wake-up?"),
            }
        };
        samples.push(at.saturating_duration_since(start));
    }
    (samples, writes)
}

fn report(what: &str, (mut samples, mut writes): (Vec<Duration>, Vec<Duration>)) {
    let (p50, p99, max) = summary(&mut samples);
    let (write_p50, write_p99, _) = summary(&mut writes);
    eprintln!(
        "{what}: {} changes, p50 {p50:?}, p99 {p99:?}, max {max:?} (poll {POLL:?}); \
         the writer's objects_apply alone took p50 {write_p50:?}, p99 {write_p99:?}",
        samples.len()
    );
    assert!(p99 < BOUND_P99, "{what}: p99 {p99:?} is not under {BOUND_P99:?}");
}

/// An applier that only reports when each key's first resource starts applying.
struct Stamp {
    tx: mpsc::UnboundedSender<(String, Instant)>,
}

type ApplyFuture<'a> = Pin<Box<dyn Future<Output = Result<(), ApplyError>> + Send + 'a>>;

// `Applier` is an `async_trait`; this is what the macro would write.
impl Applier for Stamp {
    fn apply<'a, 'b, 'c, 'd, 'async_trait>(
        &'a self,
        _: &'b Cluster,
        _: &'c Manifest,
        ctx: &'d ApplyContext,
    ) -> ApplyFuture<'async_trait>
    where
        'a: 'async_trait,
        'b: 'async_trait,
        'c: 'async_trait,
        'd: 'async_trait,
        Self: 'async_trait,
    {
        if ctx.index == 0 {
            let _ = self.tx.send((ctx.key.syncset.clone(), Instant::now()));
        }
        Box::pin(std::future::ready(Ok(())))
    }

    fn delete<'a, 'b, 'c, 'd, 'async_trait>(
        &'a self,
        _: &'b Cluster,
        _: &'c ResourceRef,
        _: &'d ApplyContext,
    ) -> ApplyFuture<'async_trait>
    where
        'a: 'async_trait,
        'b: 'async_trait,
        'c: 'async_trait,
        'd: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The real runtime as the waiting process: change → its first apply starts (the claim,
/// then reading the new SyncSet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_runtime_claims_another_process_change_promptly() {
    let scratch = ScratchSchema::new();
    let api = store(&scratch, 2).await;
    let worker = store(&scratch, 4).await;
    api.objects_apply(vec![hive_cluster(0, Endpoint::Simulator {})]).await.expect("cluster");

    let (tx, mut claimed) = mpsc::unbounded_channel();
    let config =
        RuntimeConfig { max_in_flight: 64, poll_interval: POLL, resync_every: None, ..RuntimeConfig::default() };
    let runtime = Runtime::new(worker, Arc::new(Stamp { tx }), config, RuntimeMetrics::unregistered());
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move { runtime.run(stop).await });

    let samples = measure(&*api, &mut claimed).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), task).await.expect("stops").expect("joins").expect("runtime");
    report("change to claim (runtime, to its first apply)", samples);
}

/// The store alone as the waiting process: a claimer that waits on `subscribe()` and
/// claims when woken (or after the poll), as the runtime's claim loop does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_claimer_claims_another_process_change_promptly() {
    let scratch = ScratchSchema::new();
    let api = store(&scratch, 2).await;
    let worker = store(&scratch, 2).await;
    api.objects_apply(vec![hive_cluster(0, Endpoint::Simulator {})]).await.expect("cluster");

    let (tx, mut claimed) = mpsc::unbounded_channel();
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let claimer = tokio::spawn(async move {
        let mut wake = worker.subscribe();
        loop {
            wake.borrow_and_update();
            let params = ClaimParams::new("latency", 16, Duration::from_secs(30));
            let items = worker.work_claim(params).await.expect("claim");
            let at = Instant::now();
            if items.is_empty() {
                tokio::select! {
                    _ = wake.changed() => {}
                    () = tokio::time::sleep(POLL) => {}
                    () = stop.cancelled() => return,
                }
                continue;
            }
            for i in &items {
                let _ = tx.send((i.key.syncset.clone(), at));
            }
            let done = items
                .into_iter()
                .map(|i| Completion {
                    key: i.key,
                    fence: i.fence,
                    outcome: RunOutcome::Applied { generation: i.generation, inventory: vec![], rendered: None },
                    resources: vec![],
                })
                .collect();
            worker.work_complete(done).await.expect("complete");
        }
    });

    let samples = measure(&*api, &mut claimed).await;
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), claimer).await.expect("stops").expect("joins");
    report("change to claim (store, subscribe + work_claim)", samples);
}
