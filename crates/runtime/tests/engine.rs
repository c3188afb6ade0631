//! The engine end to end on the embedded store: a real SQLite file, the simulated
//! fleet, real time (with scaled-down latencies).

use fleetsync_applier::{Applier, ByEndpoint};
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::{ApplyMode, Document, Endpoint, Kind, Phase, WorkKey};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{RetryPolicy, StatusFilter, Store, StoreConfig};
use fleetsync_testkit::{cluster_name, hive_fleet, hive_syncset, syncset_name, wait_settled, FleetShape};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

struct Hub {
    store: Arc<dyn Store>,
    sim: SimFleet,
    shutdown: CancellationToken,
    task: JoinHandle<()>,
    _dir: tempfile::TempDir,
}

fn fast_retry() -> RetryPolicy {
    RetryPolicy { base: Duration::from_millis(10), cap: Duration::from_millis(50), max_attempts: 3, jitter: 0.2 }
}

fn hub(sim: SimFleetConfig, retry: RetryPolicy, config: RuntimeConfig) -> Hub {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(dir.path().join("f.db"), StoreConfig { retry, ..StoreConfig::default() }).expect("open"),
    );
    let sim = SimFleet::new(sim);
    let applier: Arc<dyn Applier> =
        Arc::new(ByEndpoint { simulator: Some(Arc::new(sim.clone())), ..ByEndpoint::default() });
    let shutdown = CancellationToken::new();
    let runtime = Runtime::new(store.clone(), applier, config, RuntimeMetrics::unregistered());
    let stop = shutdown.clone();
    let task = tokio::spawn(async move { runtime.run(stop).await.expect("runtime") });
    Hub { store, sim, shutdown, task, _dir: dir }
}

fn config() -> RuntimeConfig {
    RuntimeConfig { max_in_flight: 256, poll_interval: Duration::from_millis(500), ..RuntimeConfig::default() }
}

fn sim(scale: f64, fail_rate: f64) -> SimFleetConfig {
    SimFleetConfig { latency: LatencyModel::hive_fleet_scaled(scale), fail_rate }
}

/// Every key of the fleet is Applied at its SyncSet's latest generation, and the
/// simulated clusters hold that generation of every resource.
async fn assert_latest_everywhere(h: &Hub, shape: FleetShape) {
    let status = h.store.status_list(&StatusFilter::default()).await.expect("status");
    assert_eq!(status.len(), shape.keys());
    for k in &status {
        assert_eq!(k.phase, Phase::Applied, "{}: {:?}", k.key, k.last_error);
        assert_eq!(k.observed_generation, k.generation, "{}", k.key);
        let ss = h.store.syncset_get("default", &k.key.syncset).await.expect("get").expect("exists");
        assert_eq!(k.generation, ss.metadata.generation);
        for m in &ss.spec.resources {
            let r = m.resource_ref().expect("ref");
            assert_eq!(h.sim.generation_of(&k.key, &r), Some(k.generation), "{} {r}", k.key);
        }
    }
    let t = h.sim.totals();
    assert_eq!((t.overlaps, t.order_violations, t.fenced), (0, 0, 0), "{t:?}");
}

/// Waits (up to 10 s) until at least `n` keys are being applied.
async fn wait_for_applying(store: &dyn Store, n: u64) {
    let start = std::time::Instant::now();
    while store.queue_stats().await.expect("stats").by_phase[&Phase::Applying] < n {
        assert!(start.elapsed() < Duration::from_secs(10), "fewer than {n} keys started applying");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn stop(h: Hub) {
    h.shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(10), h.task).await.expect("stops").expect("joins");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_converges_in_order_without_overlaps() {
    let h = hub(sim(0.02, 0.0), fast_retry(), config());
    let shape = FleetShape { clusters: 8, syncsets: 5, resources: 4 };
    h.store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    let (_, settled) = wait_settled(&*h.store, Duration::from_secs(30)).await.expect("stats");
    assert!(settled);
    assert_latest_everywhere(&h, shape).await;
    assert_eq!(h.sim.totals().applies, shape.applies() as u64);
    stop(h).await;
}

/// With a per-cluster limit, no cluster ever has more keys in flight than the limit,
/// the limit is reached (held-back keys are claimed as runs end, not left waiting for
/// the poll), and the fleet converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_cluster_limit_bounds_each_cluster() {
    let limited = RuntimeConfig { max_per_cluster: Some(3), poll_interval: Duration::from_secs(60), ..config() };
    let h = hub(sim(0.1, 0.0), fast_retry(), limited);
    let shape = FleetShape { clusters: 2, syncsets: 12, resources: 2 };
    h.store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    let (mut most, mut both_full) = (0, false);
    let start = std::time::Instant::now();
    loop {
        let status = h.store.status_list(&StatusFilter::default()).await.expect("status");
        let applying = |c: &str| status.iter().filter(|k| k.key.cluster == c && k.phase == Phase::Applying).count();
        let (a, b) = (applying(&cluster_name(0)), applying(&cluster_name(1)));
        most = most.max(a).max(b);
        both_full |= a == 3 && b == 3;
        if status.iter().all(|k| k.phase == Phase::Applied) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "did not converge (a 60 s poll must not be needed)");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(most, 3, "a cluster had more keys in flight than its limit, or never reached it");
    assert!(both_full, "both clusters ran at their limit at once");
    assert_latest_everywhere(&h, shape).await;
    stop(h).await;
}

/// A SyncSet changed while its keys are being applied: every key ends at the newest
/// generation, and no key ever ran twice at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_during_apply_reruns_after_never_beside() {
    let h = hub(sim(0.2, 0.0), fast_retry(), config());
    let shape = FleetShape { clusters: 6, syncsets: 3, resources: 5 };
    h.store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    // Wait until runs are under way (a key takes at least 5 × 40 ms), then change
    // every SyncSet twice.
    wait_for_applying(&*h.store, 1).await;
    for rev in ["r2", "r3"] {
        let docs: Vec<Document> = (0..shape.syncsets).map(|i| hive_syncset(i, shape.resources, rev)).collect();
        h.store.objects_apply(docs).await.expect("update");
    }
    let (_, settled) = wait_settled(&*h.store, Duration::from_secs(30)).await.expect("stats");
    assert!(settled);
    assert_latest_everywhere(&h, shape).await;
    let st = h.store.status_list(&StatusFilter::default()).await.expect("status");
    assert!(st.iter().all(|k| k.generation == 3));
    stop(h).await;
}

/// Transient failures are retried with backoff until the fleet converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_retry_until_converged() {
    let retry = RetryPolicy { max_attempts: 50, ..fast_retry() };
    let h = hub(sim(0.01, 0.2), retry, config());
    let shape = FleetShape { clusters: 5, syncsets: 4, resources: 3 };
    h.store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    let (_, settled) = wait_settled(&*h.store, Duration::from_secs(30)).await.expect("stats");
    assert!(settled);
    assert!(h.sim.totals().failures > 0, "some applies failed");
    assert_latest_everywhere(&h, shape).await;
    stop(h).await;
}

/// A key that always fails parks after max attempts with its error, and an explicit
/// retry runs it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_key_parks_with_its_error() {
    let h = hub(sim(0.0, 1.0), fast_retry(), config());
    let shape = FleetShape { clusters: 1, syncsets: 1, resources: 2 };
    h.store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    let (stats, settled) = wait_settled(&*h.store, Duration::from_secs(10)).await.expect("stats");
    assert!(settled);
    assert_eq!(stats.by_phase[&Phase::Parked], 1);
    let key = WorkKey::new("default", cluster_name(0), syncset_name(0));
    let st = h.store.status_get(&key).await.expect("status").expect("exists");
    assert_eq!(st.attempts, 3);
    assert!(st.last_error.as_deref().is_some_and(|e| e.contains("simulated failure")), "{st:?}");
    assert_eq!(h.sim.totals().failures, 3, "3 attempts, each stopping at the first resource");
    h.store.work_retry(&key).await.expect("retry");
    let (_, settled) = wait_settled(&*h.store, Duration::from_secs(10)).await.expect("stats");
    assert!(settled);
    assert_eq!(h.sim.totals().failures, 6, "the retry ran 3 more attempts");
    stop(h).await;
}

/// A cluster whose endpoint kind has no applier fails with a message that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_endpoint_says_why() {
    let h = hub(sim(0.0, 0.0), fast_retry(), config());
    let shape = FleetShape { clusters: 1, syncsets: 1, resources: 1 };
    let docs = hive_fleet(shape, |_| Endpoint::Http { url: "http://127.0.0.1:9".into() }, "r1");
    h.store.objects_apply(docs).await.expect("apply");
    wait_settled(&*h.store, Duration::from_secs(10)).await.expect("stats");
    let st = h.store.status_list(&StatusFilter::default()).await.expect("status").remove(0);
    assert_eq!(st.phase, Phase::Parked);
    assert!(st.last_error.as_deref().is_some_and(|e| e.contains("no applier for http endpoints")), "{st:?}");
    stop(h).await;
}

/// Sync mode deletes resources removed from the SyncSet, and deleting the SyncSet
/// deletes the rest and removes its keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_mode_deletes_what_was_removed() {
    let h = hub(sim(0.0, 0.0), fast_retry(), config());
    let with_mode = |n: usize| {
        let Document::SyncSet(mut s) = hive_syncset(0, n, "r1") else { unreachable!() };
        s.spec.resource_apply_mode = ApplyMode::Sync;
        Document::SyncSet(s)
    };
    let cluster = fleetsync_testkit::hive_cluster(0, Endpoint::Simulator {});
    h.store.objects_apply(vec![cluster, with_mode(4)]).await.expect("apply");
    wait_settled(&*h.store, Duration::from_secs(10)).await.expect("stats");
    let key = WorkKey::new("default", cluster_name(0), syncset_name(0));
    assert_eq!(h.sim.resource_count(&key), 4);
    h.store.objects_apply(vec![with_mode(2)]).await.expect("shrink");
    wait_settled(&*h.store, Duration::from_secs(10)).await.expect("stats");
    assert_eq!(h.sim.resource_count(&key), 2, "two removed resources deleted");
    h.store.object_delete(Kind::SyncSet, "default", &syncset_name(0)).await.expect("delete");
    wait_settled(&*h.store, Duration::from_secs(10)).await.expect("stats");
    assert_eq!(h.sim.resource_count(&key), 0, "everything it applied is gone");
    assert!(h.store.status_get(&key).await.expect("status").is_none(), "and so is the key");
    stop(h).await;
}

/// Shutdown lets short runs finish; runs that outlast the grace give their keys back,
/// un-counted, and a new runtime picks them up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_releases_unfinished_keys() {
    let slow = RuntimeConfig { shutdown_grace: Duration::from_millis(100), ..config() };
    let h = hub(sim(20.0, 0.0), fast_retry(), slow);
    let shape = FleetShape { clusters: 2, syncsets: 2, resources: 1 };
    h.store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    wait_for_applying(&*h.store, 4).await;
    let store = h.store.clone();
    let started = std::time::Instant::now();
    stop(h).await;
    assert!(started.elapsed() < Duration::from_secs(3), "stopped within the grace, not after the 4 s applies");
    let status = store.status_list(&StatusFilter::default()).await.expect("status");
    assert!(status.iter().all(|k| k.phase == Phase::Pending && k.attempts == 0), "{status:?}");
}

/// New work wakes an idle worker at once: no poll interval in the way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_worker_wakes_at_once() {
    let lazy = RuntimeConfig { poll_interval: Duration::from_secs(60), ..config() };
    let h = hub(sim(0.0, 0.0), fast_retry(), lazy);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let shape = FleetShape { clusters: 1, syncsets: 1, resources: 1 };
    h.store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    let (_, settled) = wait_settled(&*h.store, Duration::from_secs(5)).await.expect("stats");
    assert!(settled, "claimed long before the 60 s poll");
    stop(h).await;
}
