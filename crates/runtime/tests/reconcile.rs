//! State reconcilers on the runtime, beside event handlers, on the embedded store (a
//! real SQLite file, real time): handlers see every event while the reconciler sees the
//! latest state and never runs a key twice at once; a reconciler's own writes do not
//! run it again; a requeue runs it again after its delay; and how long a change takes
//! to reach a handler and a reconciler (printed; `--nocapture`).

use async_trait::async_trait;
use fleetsync_model::{Document, Phase, WorkKey};
use fleetsync_runtime::{
    Action, Consumer, Context, EventHandler, HandlerError, ReconcileError, Reconciler, Runtime, RuntimeConfig,
    RuntimeMetrics,
};
use fleetsync_store::conformance::{cluster, syncset};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Event, Store, StoreConfig};
use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// A store, a runtime running `reconciler` and a consumer named `events` driving
/// `handler`, all stopped by `stop`.
struct Engine {
    store: Arc<dyn Store>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Engine {
    fn start(reconciler: Arc<dyn Reconciler>, handler: Arc<dyn EventHandler>) -> Engine {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open"));
        let stop = CancellationToken::new();
        let config = RuntimeConfig {
            max_in_flight: 64,
            poll_interval: Duration::from_secs(1),
            resync_every: None,
            shutdown_grace: Duration::from_secs(5),
            ..RuntimeConfig::default()
        };
        let runtime = Runtime::with_reconciler(store.clone(), reconciler, config, RuntimeMetrics::unregistered());
        let consumer = Consumer::new(store.clone(), "events", handler);
        let (a, b) = (stop.clone(), stop.clone());
        let tasks = vec![
            tokio::spawn(async move { runtime.run(a).await.expect("runtime") }),
            tokio::spawn(async move {
                consumer.run(b).await.expect("consumer");
            }),
        ];
        Engine { store, stop, tasks, _dir: dir }
    }

    async fn stop(self) {
        self.stop.cancel();
        for t in self.tasks {
            tokio::time::timeout(Duration::from_secs(10), t).await.expect("stops").expect("joins");
        }
    }
}

/// Polls `cond` every few milliseconds for up to 30 s.
async fn eventually<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Every key Applied at its SyncSet's generation.
async fn settled(store: &dyn Store) -> bool {
    let status = store.status_list(&Default::default()).await.expect("status");
    !status.is_empty() && status.iter().all(|k| k.phase == Phase::Applied && k.observed_generation == k.generation)
}

/// Records every event it is handed.
#[derive(Default)]
struct Log {
    events: Mutex<Vec<Event>>,
}

impl Log {
    fn events(&self) -> Vec<Event> {
        self.events.lock().expect("lock").clone()
    }

    fn last(&self) -> u64 {
        self.events.lock().expect("lock").last().map_or(0, |e| e.seq)
    }
}

#[async_trait]
impl EventHandler for Log {
    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        self.events.lock().expect("lock").push(event.clone());
        Ok(())
    }
}

/// Notes which keys it is running (to catch two runs of one key at once) and the
/// SyncSet generation each run read.
#[derive(Default)]
struct Watchful {
    running: Mutex<HashSet<WorkKey>>,
    overlaps: AtomicUsize,
    seen: Mutex<BTreeMap<WorkKey, Vec<i64>>>,
}

#[async_trait]
impl Reconciler for Watchful {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
        if !self.running.lock().expect("lock").insert(ctx.key().clone()) {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        let generation = ctx.syncset().await?.map_or(0, |s| s.metadata.generation);
        tokio::time::sleep(Duration::from_micros(500)).await;
        self.seen.lock().expect("lock").entry(ctx.key().clone()).or_default().push(generation);
        self.running.lock().expect("lock").remove(ctx.key());
        Ok(Action::Done)
    }
}

/// 2,000 rapid updates to five SyncSets on two clusters: the handler sees every event
/// in log order, each SyncSet's generations one by one; the reconciler reads
/// non-decreasing generations, ends at the latest one of every key, and never runs a
/// key twice at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handlers_see_every_event_and_the_reconciler_the_latest_state() {
    let (reconciler, log) = (Arc::new(Watchful::default()), Arc::new(Log::default()));
    let engine = Engine::start(reconciler.clone(), log.clone());
    let s = &*engine.store;
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), cluster("c2", &[("env", "prod")])])
        .await
        .expect("clusters");
    let (syncsets, updates) = (5, 2_000);
    for i in 0..updates {
        s.objects_apply(vec![syncset(&format!("s{}", i % syncsets), 1, &format!("v{i}"))]).await.expect("update");
    }
    eventually("every key is applied at its latest generation", || settled(s)).await;
    let last = s.queue_stats().await.expect("stats").last_event_seq;
    eventually("the handler has seen the last event", || async { log.last() >= last }).await;
    let all = s.events_read(0, 100_000).await.expect("events");
    engine.stop().await;

    let seen = log.events();
    assert_eq!(seen, all, "every event, in log order, none missing, none twice");
    for n in 0..syncsets {
        let name = format!("s{n}");
        let gens: Vec<i64> =
            seen.iter().filter(|e| e.kind == "SyncSet" && e.name == name).map(|e| e.generation).collect();
        assert_eq!(gens, (1..=(updates / syncsets) as i64).collect::<Vec<_>>(), "{name}: every generation, in order");
    }
    assert_eq!(reconciler.overlaps.load(Ordering::SeqCst), 0, "a key ran twice at once");
    let runs = reconciler.seen.lock().expect("lock").clone();
    assert_eq!(runs.len(), 2 * syncsets, "every key ran");
    for (key, gens) in &runs {
        assert!(gens.windows(2).all(|w| w[0] <= w[1]), "{key}: went back to an older state: {gens:?}");
        assert_eq!(gens.last(), Some(&((updates / syncsets) as i64)), "{key}: ended at the latest generation");
    }
    let total: usize = runs.values().map(Vec::len).sum();
    eprintln!("{updates} updates, {} events: the reconciler ran {total} times for {} keys", all.len(), runs.len());
}

/// Labels its SyncSet with the generation it last saw, through an own write, every run.
/// Were own writes to re-trigger it, every run would cause another, forever.
#[derive(Default)]
struct Stamper {
    runs: AtomicUsize,
}

#[async_trait]
impl Reconciler for Stamper {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let Some(ss) = ctx.syncset().await? else { return Ok(Action::Done) };
        let mut stamped = (*ss).clone();
        stamped.metadata.labels.insert("stamped-from".into(), ss.metadata.generation.to_string());
        ctx.apply_own(vec![Document::SyncSet(stamped)]).await?;
        Ok(Action::Done)
    }
}

/// N real changes run a self-patching reconciler N times, not 2N; event handlers see
/// its writes all the same; the key ends Applied at the generation its own write made.
#[tokio::test]
async fn own_writes_do_not_run_the_reconciler_again() {
    let (reconciler, log) = (Arc::new(Stamper::default()), Arc::new(Log::default()));
    let engine = Engine::start(reconciler.clone(), log.clone());
    let s = &*engine.store;
    let changes = 20;
    s.objects_apply(vec![cluster("c1", &[("env", "prod")])]).await.expect("cluster");
    for i in 1..=changes {
        s.objects_apply(vec![syncset("s1", 1, &format!("v{i}"))]).await.expect("change");
        eventually("the change is reconciled", || settled(s)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(reconciler.runs.load(Ordering::SeqCst), changes, "one run per real change");
    let st = s.status_get(&WorkKey::new("default", "c1", "s1")).await.expect("status").expect("key");
    assert_eq!(
        (st.phase, st.generation, st.observed_generation),
        (Phase::Applied, 2 * changes as i64, 2 * changes as i64)
    );

    let last = s.queue_stats().await.expect("stats").last_event_seq;
    eventually("the handler has seen the last event", || async { log.last() >= last }).await;
    engine.stop().await;
    let updates: Vec<i64> = log.events().iter().filter(|e| e.kind == "SyncSet").map(|e| e.generation).collect();
    assert_eq!(updates, (1..=2 * changes as i64).collect::<Vec<_>>(), "each change and each own write is an event");
}

/// Requeues after `delay` once, then is done; records when each run started and ended.
struct Requeuer {
    delay: Duration,
    runs: Mutex<Vec<(Instant, Instant)>>,
}

#[async_trait]
impl Reconciler for Requeuer {
    async fn reconcile(&self, _: &Context) -> Result<Action, ReconcileError> {
        let start = Instant::now();
        let mut runs = self.runs.lock().expect("lock");
        let action = if runs.is_empty() { Action::Requeue(self.delay) } else { Action::Done };
        runs.push((start, Instant::now()));
        Ok(action)
    }
}

/// `Requeue(d)` runs the key again after d (and no sooner), then not again.
#[tokio::test]
async fn a_requeue_runs_again_after_its_delay() {
    let delay = Duration::from_millis(300);
    let reconciler = Arc::new(Requeuer { delay, runs: Mutex::new(Vec::new()) });
    let engine = Engine::start(reconciler.clone(), Arc::new(Log::default()));
    engine.store.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply");
    eventually("the requeued run happened", || async { reconciler.runs.lock().expect("lock").len() >= 2 }).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let runs = reconciler.runs.lock().expect("lock").clone();
    engine.stop().await;
    assert_eq!(runs.len(), 2, "done after the requeued run");
    let gap = runs[1].0 - runs[0].1;
    eprintln!("requeue after {delay:?}: ran again {gap:?} after the first run ended");
    assert!(gap >= delay - Duration::from_millis(1), "ran again after {gap:?}, before its delay");
    assert!(gap < delay + Duration::from_millis(500), "ran again only after {gap:?}");
}

/// Sends the time each SyncSet event reaches it.
struct StampEvents(mpsc::UnboundedSender<(Event, Instant)>);

#[async_trait]
impl EventHandler for StampEvents {
    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        let _ = self.0.send((event.clone(), Instant::now()));
        Ok(())
    }
}

/// Sends the time each run starts, with the generation it was claimed for.
struct StampRuns(mpsc::UnboundedSender<(i64, Instant)>);

#[async_trait]
impl Reconciler for StampRuns {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
        let _ = self.0.send((ctx.item().generation, Instant::now()));
        Ok(Action::Done)
    }
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// Change-to-handler and change-to-reconciler latency on the embedded store, one change
/// at a time, measured from the start of the change's `objects_apply` (and, printed
/// too, from its return: the commit). The bound asserted is generous (the machine is
/// shared); the figures are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_to_handler_and_reconciler_latency_on_the_embedded_store() {
    let (runs_tx, mut runs) = mpsc::unbounded_channel();
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let engine = Engine::start(Arc::new(StampRuns(runs_tx)), Arc::new(StampEvents(events_tx)));
    let s = &*engine.store;
    s.objects_apply(vec![cluster("c1", &[("env", "prod")])]).await.expect("cluster");
    let changes = 300;
    let (mut to_handler, mut to_reconciler) = (Vec::new(), Vec::new());
    let (mut committed_to_handler, mut committed_to_reconciler) = (Vec::new(), Vec::new());
    for generation in 1..=changes {
        let t0 = Instant::now();
        s.objects_apply(vec![syncset("s1", 1, &format!("v{generation}"))]).await.expect("change");
        let t1 = Instant::now();
        let (mut handled, mut reconciled, mut committed) = (None, None, false);
        while handled.is_none() || reconciled.is_none() || !committed {
            tokio::select! {
                Some((e, at)) = events.recv() => match e.kind.as_str() {
                    "SyncSet" if e.generation == generation => handled = Some(at),
                    // The run's completion: the key is free for the next change.
                    "Status" if e.generation == generation => committed = true,
                    _ => {}
                },
                Some((g, at)) = runs.recv() => if g == generation { reconciled = Some(at) },
                () = tokio::time::sleep(Duration::from_secs(10)) => panic!("change {generation} not delivered within 10 s"),
            }
        }
        let (handled, reconciled) = (handled.expect("handled"), reconciled.expect("reconciled"));
        to_handler.push(handled - t0);
        to_reconciler.push(reconciled - t0);
        committed_to_handler.push(handled.saturating_duration_since(t1));
        committed_to_reconciler.push(reconciled.saturating_duration_since(t1));
    }
    engine.stop().await;
    for samples in [&mut to_handler, &mut to_reconciler, &mut committed_to_handler, &mut committed_to_reconciler] {
        samples.sort();
    }
    let (h50, h99) = (percentile(&to_handler, 0.5), percentile(&to_handler, 0.99));
    let (r50, r99) = (percentile(&to_reconciler, 0.5), percentile(&to_reconciler, 0.99));
    let p = |s: &[Duration]| format!("p50={:?} p99={:?}", percentile(s, 0.5), percentile(s, 0.99));
    eprintln!(
        "change-to-handler latency over {changes} changes: from the apply's start p50={h50:?} p99={h99:?}; from its commit {}",
        p(&committed_to_handler)
    );
    eprintln!(
        "change-to-reconciler latency over {changes} changes: from the apply's start p50={r50:?} p99={r99:?}; from its commit {}",
        p(&committed_to_reconciler)
    );
    assert!(h99 < Duration::from_millis(250) && r99 < Duration::from_millis(250), "p99 over 250 ms");
}
