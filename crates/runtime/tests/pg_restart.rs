//! PostgreSQL restarted under a running fleet (issue 4): the worker reconnects by
//! itself, the fleet converges, and nothing the store acknowledged is lost.
//!
//! The test runs a PostgreSQL server of its own (testkit's `ThrowawayPg`), never the
//! shared one, since it restarts it: once with `pg_ctl restart -m fast`, once with `-m
//! immediate` (a crash: recovery from the WAL). Two stores on it stand for two
//! processes: `api` writes objects (as `fleetsync serve` would), `worker` is the
//! runtime's. The runtime's safety poll is 30 s, so a change made after a restart is
//! picked up within seconds only if the worker's LISTEN connection came back.

use fleetsync_applier::{Applier, ByEndpoint};
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::{Document, Endpoint, KeyStatus, Kind, Phase, WorkKey};
use fleetsync_runtime::metrics::OutcomeLabel;
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::{Event, RetryPolicy, StatusFilter, Store, StoreConfig};
use fleetsync_testkit::pg::{StopMode, ThrowawayPg};
use fleetsync_testkit::{hive_fleet, hive_syncset, syncset_name, FleetShape};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The safety-net poll: far longer than anything this test waits for.
const POLL: Duration = Duration::from_secs(30);
const LEASE_TTL: Duration = Duration::from_secs(4);
/// Each key is 4 applies of the hive-fleet latency (median 0.25 s): about a second, so
/// a restart lands while keys are in flight.
const SHAPE: FleetShape = FleetShape { clusters: 6, syncsets: 5, resources: 4 };
const SETTLE: Duration = Duration::from_secs(20);

async fn open(url: &str, pool_size: usize) -> Arc<dyn Store> {
    let retry =
        RetryPolicy { base: Duration::from_millis(20), cap: Duration::from_millis(200), max_attempts: 20, jitter: 0.2 };
    let options = PgOptions { schema: None, pool_size, migrate: true };
    Arc::new(
        PgStore::connect_with(url, options, StoreConfig { retry, ..StoreConfig::default() }).await.expect("connect"),
    )
}

/// Every SyncSet at `revision`.
fn syncsets(revision: &str) -> Vec<Document> {
    (0..SHAPE.syncsets).map(|i| hive_syncset(i, SHAPE.resources, revision)).collect()
}

/// What the store has acknowledged: SyncSet generations from `objects_apply`, and
/// snapshots (status, event log) read just before each restart.
#[derive(Default)]
struct Acked {
    generations: HashMap<String, i64>,
}

impl Acked {
    async fn apply(&mut self, api: &dyn Store, docs: Vec<Document>) {
        for o in api.objects_apply(docs).await.expect("objects_apply") {
            if o.kind == Kind::SyncSet {
                self.generations.insert(o.name, o.generation);
            }
        }
    }
}

struct Snapshot {
    status: HashMap<WorkKey, KeyStatus>,
    events: Vec<Event>,
}

async fn snapshot(store: &dyn Store) -> Snapshot {
    let status = store.status_list(&StatusFilter::default()).await.expect("status");
    let events = store.events_read(0, 1_000_000).await.expect("events");
    Snapshot { status: status.into_iter().map(|s| (s.key.clone(), s)).collect(), events }
}

/// Right after a restart, before any new work: every acknowledged completion and event
/// is still there. Returns how long the store took to answer again.
async fn assert_nothing_lost(api: &dyn Store, before: &Snapshot, acked: &Acked) -> Duration {
    let start = Instant::now();
    let after = loop {
        match api.status_list(&StatusFilter::default()).await {
            Ok(s) => break s,
            Err(e) => {
                assert!(start.elapsed() < Duration::from_secs(10), "store unusable 10 s after the restart: {e}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let answered = start.elapsed();
    let after: HashMap<&WorkKey, &KeyStatus> = after.iter().map(|s| (&s.key, s)).collect();
    for (key, was) in &before.status {
        let now = after.get(key).unwrap_or_else(|| panic!("{key} vanished in the restart"));
        assert!(
            now.generation >= was.generation,
            "{key}: generation {} went back to {}",
            was.generation,
            now.generation
        );
        assert!(
            now.observed_generation >= was.observed_generation,
            "{key}: committed generation {} lost, now {}",
            was.observed_generation,
            now.observed_generation
        );
        if was.phase == Phase::Applied && now.generation == was.generation {
            assert_eq!(now.phase, Phase::Applied, "{key}: an acknowledged completion was undone");
        }
    }
    let log = api.events_read(0, 1_000_000).await.expect("events");
    let log: HashMap<u64, &Event> = log.iter().map(|e| (e.seq, e)).collect();
    for e in &before.events {
        assert_eq!(log.get(&e.seq).copied(), Some(e), "event {} lost or changed in the restart", e.seq);
    }
    for (name, generation) in &acked.generations {
        let stored = api.syncset_get("default", name).await.expect("get").expect("acknowledged SyncSet exists");
        assert_eq!(stored.metadata.generation, *generation, "{name}: acknowledged generation lost");
    }
    answered
}

/// Waits until some keys have committed this generation and others are still applying.
async fn wait_mid_run(api: &dyn Store) {
    let start = Instant::now();
    loop {
        let s = api.queue_stats().await.expect("stats");
        let count = |p: Phase| s.by_phase.get(&p).copied().unwrap_or(0);
        if count(Phase::Applied) > 0 && count(Phase::Applying) > 0 {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "never saw keys both applied and applying: {s:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until every key is settled (errors while the database is away are retried);
/// returns how long that took.
async fn settle(api: &dyn Store) -> Duration {
    let start = Instant::now();
    let mut last: String;
    loop {
        match api.queue_stats().await {
            Ok(s) if s.unsettled() == 0 => return start.elapsed(),
            Ok(s) => last = format!("{s:?}"),
            Err(e) => last = e.to_string(),
        }
        assert!(start.elapsed() < SETTLE, "not settled within {SETTLE:?}: {last}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every key Applied at its SyncSet's acknowledged generation, on the simulated
/// clusters too, with no overlapping or out-of-order applies.
async fn assert_converged(api: &dyn Store, sim: &SimFleet, acked: &Acked) {
    let status = api.status_list(&StatusFilter::default()).await.expect("status");
    assert_eq!(status.len(), SHAPE.keys());
    for k in &status {
        let want = acked.generations[&k.key.syncset];
        assert_eq!(
            (k.phase, k.generation, k.observed_generation),
            (Phase::Applied, want, want),
            "{}: {:?}",
            k.key,
            k.last_error
        );
        let ss = api.syncset_get("default", &k.key.syncset).await.expect("get").expect("exists");
        for m in &ss.spec.resources {
            let r = m.resource_ref().expect("ref");
            assert_eq!(sim.generation_of(&k.key, &r), Some(want), "{} {r}", k.key);
        }
    }
    let t = sim.totals();
    assert_eq!((t.overlaps, t.order_violations), (0, 0), "{t:?}");
}

/// A change written by the other process wakes the idle worker through LISTEN/NOTIFY
/// and is applied: returns (wake-up, change-to-settled).
async fn change_is_picked_up(
    api: &dyn Store,
    worker: &dyn Store,
    acked: &mut Acked,
    revision: &str,
) -> (Duration, Duration) {
    let mut wake = worker.subscribe();
    wake.borrow_and_update();
    let start = Instant::now();
    acked.apply(api, vec![hive_syncset(0, SHAPE.resources, revision)]).await;
    // The listener may still be in its reconnect backoff (at most 5 s): generous
    // bounds, but far under the poll.
    let woke = tokio::time::timeout(Duration::from_secs(10), wake.changed()).await;
    assert!(matches!(woke, Ok(Ok(()))), "the worker's listener did not deliver a change within 10 s");
    let woke = start.elapsed();
    settle(api).await;
    let settled = start.elapsed();
    assert!(settled < POLL / 2, "took {settled:?}: waited for the {POLL:?} poll?");
    (woke, settled)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restarts_mid_run_lose_nothing_and_the_fleet_converges() {
    let test_start = Instant::now();
    let pg = tokio::task::block_in_place(ThrowawayPg::start).expect("throwaway PostgreSQL");
    let api = open(&pg.url(), 4).await;
    let worker = open(&pg.url(), 8).await;
    let sim = SimFleet::new(SimFleetConfig { latency: LatencyModel::hive_fleet_scaled(1.0), fail_rate: 0.0 });
    let applier: Arc<dyn Applier> =
        Arc::new(ByEndpoint { simulator: Some(Arc::new(sim.clone())), ..ByEndpoint::default() });
    let config = RuntimeConfig {
        max_in_flight: 256,
        lease_ttl: LEASE_TTL,
        renew_every: Duration::from_secs(1),
        poll_interval: POLL,
        resync_every: None,
        shutdown_grace: Duration::from_secs(2),
        ..RuntimeConfig::default()
    };
    let metrics = RuntimeMetrics::unregistered();
    let shutdown = CancellationToken::new();
    let runtime = Runtime::new(worker.clone(), applier, config, metrics.clone());
    let stop = shutdown.clone();
    let task = tokio::spawn(async move { runtime.run(stop).await });

    let mut acked = Acked::default();
    acked.apply(&*api, hive_fleet(SHAPE, |_| Endpoint::Simulator {}, "r1")).await;
    settle(&*api).await;
    assert_converged(&*api, &sim, &acked).await;
    eprintln!("[{:?}] r1 converged", test_start.elapsed());

    for (mode, during, after) in [(StopMode::Fast, "r2", "r3"), (StopMode::Immediate, "r4", "r5")] {
        acked.apply(&*api, syncsets(during)).await;
        wait_mid_run(&*api).await;
        let before = snapshot(&*api).await;
        let in_flight = before.status.values().filter(|s| s.phase == Phase::Applying).count();
        let restart = tokio::task::block_in_place(|| pg.restart_with(mode)).expect("restart");
        let answered = assert_nothing_lost(&*api, &before, &acked).await;
        // A new generation after the restart, on top of the runs it interrupted.
        acked.apply(&*api, syncsets(after)).await;
        let converged = settle(&*api).await;
        assert_converged(&*api, &sim, &acked).await;
        eprintln!(
            "[{:?}] restart -m {mode:?} with {in_flight} keys applying: pg_ctl took {restart:?}; store answered \
             {answered:?} later; fleet converged at {after} {converged:?} after that",
            test_start.elapsed()
        );
    }

    // The worker is idle, its next poll 30 s away: only NOTIFY can wake it now, and
    // twice in a row rules out the one wake-up the listener gives after reconnecting.
    for revision in ["r6", "r7"] {
        let (woke, settled) = change_is_picked_up(&*api, &*worker, &mut acked, revision).await;
        eprintln!(
            "[{:?}] change {revision} after the restarts: worker woken in {woke:?}, applied in {settled:?}",
            test_start.elapsed()
        );
    }
    assert_converged(&*api, &sim, &acked).await;
    assert_eq!(acked.generations[&syncset_name(0)], 7);

    assert!(!task.is_finished(), "the runtime kept running through both restarts");
    shutdown.cancel();
    let ended = tokio::time::timeout(Duration::from_secs(10), task).await.expect("stops").expect("joins");
    ended.expect("runtime");
    let committed = metrics.runs.get_or_create(&OutcomeLabel { outcome: "applied" }).get();
    eprintln!(
        "sim {:?}; {} claims, {committed} runs committed; test took {:?}",
        sim.totals(),
        metrics.claimed.get(),
        test_start.elapsed()
    );
}
