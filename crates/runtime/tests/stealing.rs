//! Work stealing between members: a process whose own shards hold nothing takes keys
//! of another member's shards once they have been due for `steal_after`, and the fleet
//! still converges with no key applied twice at once. With stealing off it takes none.
//!
//! Two runtimes share one SQLite store, as two processes share one PostgreSQL: each
//! heartbeats as a member and claims by its own view of the shards.

use fleetsync_applier::{Applier, ByEndpoint};
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::shard::{owner_of, shard_of};
use fleetsync_model::{Endpoint, Phase};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{StatusFilter, Store, StoreConfig};
use fleetsync_testkit::{cluster_name, hive_fleet, wait_settled, FleetShape};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const SHAPE: FleetShape = FleetShape { clusters: 6, syncsets: 8, resources: 3 };
const BUSY: &str = "steal-busy";

/// An id for the idle member such that, among it and [`BUSY`], every cluster of
/// [`SHAPE`] hashes to a shard of `BUSY`: all the work is in the busy member's shards.
fn idle_id() -> String {
    (0..100_000)
        .map(|i| format!("steal-idle-{i}"))
        .find(|idle| {
            let members = [BUSY.to_string(), idle.clone()];
            (0..SHAPE.clusters).all(|c| owner_of(shard_of("default", &cluster_name(c)), &members) == Some(BUSY))
        })
        .expect("some id leaves every cluster to the busy member")
}

struct Member {
    metrics: RuntimeMetrics,
    task: JoinHandle<()>,
}

fn start(
    store: &Arc<dyn Store>,
    applier: &Arc<dyn Applier>,
    id: &str,
    steal_after: Option<Duration>,
    stop: &CancellationToken,
) -> Member {
    let config = RuntimeConfig {
        worker_id: id.to_string(),
        // Few slots: the busy member has a backlog for a few seconds.
        max_in_flight: 4,
        member_ttl: Duration::from_millis(600),
        poll_interval: Duration::from_millis(500),
        resync_every: None,
        steal_after,
        ..RuntimeConfig::default()
    };
    let metrics = RuntimeMetrics::unregistered();
    let runtime = Runtime::new(store.clone(), applier.clone(), config, metrics.clone());
    let stop = stop.clone();
    let task = tokio::spawn(async move { runtime.run(stop).await.expect("runtime") });
    Member { metrics, task }
}

/// Runs the fleet with both members; returns (keys the idle member claimed, of which
/// stolen, keys the busy member claimed), after checking that the fleet converged.
async fn run(steal_after: Option<Duration>) -> (u64, u64, u64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open"));
    let sim = SimFleet::new(SimFleetConfig { latency: LatencyModel::hive_fleet_scaled(0.2), fail_rate: 0.0 });
    let applier: Arc<dyn Applier> =
        Arc::new(ByEndpoint { simulator: Some(Arc::new(sim.clone())), ..ByEndpoint::default() });
    let stop = CancellationToken::new();
    let busy = start(&store, &applier, BUSY, steal_after, &stop);
    let idle = start(&store, &applier, &idle_id(), steal_after, &stop);
    // Both know of each other (each beats every 200 ms) before there is any work.
    while store.member_list().await.expect("members").len() < 2 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;

    store.objects_apply(hive_fleet(SHAPE, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    let (_, settled) = wait_settled(&*store, Duration::from_secs(60)).await.expect("stats");
    assert!(settled, "the fleet did not settle");
    for k in store.status_list(&StatusFilter::default()).await.expect("status") {
        assert_eq!((k.phase, k.observed_generation), (Phase::Applied, k.generation), "{}", k.key);
    }
    let t = sim.totals();
    assert_eq!((t.applies, t.overlaps, t.order_violations), (SHAPE.applies() as u64, 0, 0), "{t:?}");

    stop.cancel();
    let counts = (idle.metrics.claimed.get(), idle.metrics.stolen.get(), busy.metrics.claimed.get());
    for m in [busy, idle] {
        tokio::time::timeout(Duration::from_secs(10), m.task).await.expect("stops").expect("joins");
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_steals_overdue_keys_of_a_busy_one() {
    let (idle_claimed, idle_stole, busy_claimed) = run(Some(Duration::from_millis(200))).await;
    println!("busy member claimed {busy_claimed}, idle member claimed {idle_claimed} (stolen: {idle_stole})");
    assert!(idle_stole > 0, "the idle member stole nothing");
    assert_eq!(idle_claimed, idle_stole, "every key the idle member ran was in the busy member's shards");
    assert_eq!(idle_claimed + busy_claimed, SHAPE.keys() as u64, "a key was claimed twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_stealing_the_idle_member_takes_nothing() {
    let (idle_claimed, idle_stole, busy_claimed) = run(None).await;
    assert_eq!((idle_claimed, idle_stole), (0, 0));
    assert_eq!(busy_claimed, SHAPE.keys() as u64);
}
