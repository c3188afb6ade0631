//! Event handlers driven by named consumers on the embedded store (a real SQLite file):
//! every event, in order, at least once, from a durable cursor — across a consumer
//! killed mid-stream, a failing handler, and a log trimmed past the cursor.

use async_trait::async_trait;
use fleetsync_runtime::{Consumer, ConsumerConfig, ConsumerError, EventHandler, HandlerError, OnExpired};
use fleetsync_store::conformance::syncset;
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Event, EventRetention, Store, StoreConfig};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

fn open(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open"))
}

/// Records the sequence numbers it is handed, taking `pace` over each; fails the first
/// `fail_first` tries of event `fail_at`.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<u64>>,
    pace: Duration,
    fail_at: Option<u64>,
    fail_first: u32,
    failures: AtomicU32,
}

impl Recorder {
    fn seen(&self) -> Vec<u64> {
        self.seen.lock().expect("lock").clone()
    }

    fn last(&self) -> u64 {
        self.seen.lock().expect("lock").last().copied().unwrap_or(0)
    }
}

#[async_trait]
impl EventHandler for Recorder {
    async fn handle(&self, event: &Event) -> Result<(), HandlerError> {
        if Some(event.seq) == self.fail_at && self.failures.fetch_add(1, Ordering::SeqCst) < self.fail_first {
            return Err(format!("refusing event {} for now", event.seq).into());
        }
        if !self.pace.is_zero() {
            tokio::time::sleep(self.pace).await;
        }
        self.seen.lock().expect("lock").push(event.seq);
        Ok(())
    }
}

/// Appends `n` events: `n / 10` transactions of 10 SyncSet updates each.
async fn write_events(store: &dyn Store, n: usize, round: usize) {
    for t in 0..n / 10 {
        let docs = (0..10).map(|i| syncset(&format!("s{i}"), 1, &format!("r{round}-{t}"))).collect();
        store.objects_apply(docs).await.expect("apply");
    }
}

async fn last_seq(store: &dyn Store) -> u64 {
    store.queue_stats().await.expect("stats").last_event_seq
}

/// Waits (up to 30 s) until `handler` has seen event `seq`.
async fn wait_seen(handler: &Recorder, seq: u64) {
    let start = Instant::now();
    while handler.last() < seq {
        assert!(start.elapsed() < Duration::from_secs(30), "handler stuck at {} of {seq}", handler.last());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn spawn(
    store: &Arc<dyn Store>,
    config: ConsumerConfig,
    handler: Arc<Recorder>,
) -> (CancellationToken, tokio::task::JoinHandle<Result<u64, ConsumerError>>) {
    let stop = CancellationToken::new();
    let task = tokio::spawn(Consumer::with_config(store.clone(), config, handler).run(stop.clone()));
    (stop, task)
}

/// A consumer killed (its task aborted, mid-handler or mid-read) while events keep
/// arriving, then restarted under the same name, resumes from its last acknowledgement:
/// every event is handled at least once, none is skipped, each run sees them in order,
/// and what is seen twice is at most the one unacknowledged page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_consumer_resumes_from_its_ack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let page = 50;
    let config = ConsumerConfig { page, ..ConsumerConfig::new("audit") };
    // Slow enough that the kill lands inside a page rather than right after an ack.
    let first = Arc::new(Recorder { pace: Duration::from_micros(300), ..Recorder::default() });
    let (_, task) = spawn(&store, config.clone(), first.clone());
    let writer = {
        let store = store.clone();
        tokio::spawn(async move { write_events(&*store, 3_000, 0).await })
    };
    wait_seen(&first, 1_025).await;
    task.abort();
    let _ = task.await;
    // An acknowledgement already on the store's blocking pool still lands: let it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let acked = store.consumer_get("audit").await.expect("cursor").expect("acknowledged something");
    let first_seen = first.seen();
    assert!(acked <= *first_seen.last().expect("seen"), "never acknowledged past a handled event");

    let second = Arc::new(Recorder::default());
    let (stop, task) = spawn(&store, config, second.clone());
    writer.await.expect("writer");
    write_events(&*store, 500, 1).await;
    let last = last_seq(&*store).await;
    wait_seen(&second, last).await;
    stop.cancel();
    assert_eq!(task.await.expect("joins").expect("runs"), last);
    assert_eq!(store.consumer_get("audit").await.expect("cursor"), Some(last), "acknowledged on shutdown");

    let second_seen = second.seen();
    assert_eq!(second_seen[0], acked + 1, "resumed right after its acknowledgement");
    for run in [&first_seen, &second_seen] {
        assert!(run.windows(2).all(|w| w[1] == w[0] + 1), "in order, none skipped within a run");
    }
    assert_eq!(first_seen[0], 1);
    let again = first_seen.last().expect("seen") - acked;
    assert!(again <= page as u64, "seen twice: {again} events, more than one page");
    eprintln!("killed after {} events, acknowledged {acked}; {again} seen again after the restart", first_seen.len());
}

/// A failing handler is retried (with backoff) on the same event; the events after it
/// wait, nothing is skipped.
#[tokio::test]
async fn a_failing_handler_is_retried_without_skipping() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    write_events(&*store, 30, 0).await;
    let handler = Arc::new(Recorder { fail_at: Some(7), fail_first: 3, ..Recorder::default() });
    let mut config = ConsumerConfig::new("flaky");
    config.retry.base = Duration::from_millis(5);
    let (stop, task) = spawn(&store, config, handler.clone());
    wait_seen(&handler, 30).await;
    stop.cancel();
    task.await.expect("joins").expect("runs");
    assert_eq!(handler.seen(), (1..=30).collect::<Vec<u64>>());
    assert_eq!(handler.failures.load(Ordering::SeqCst), 4, "three failures, then success");
}

/// A cursor that fell off the log stops the consumer with a typed error by default;
/// `RestartAtHorizon` carries on from the oldest event left.
#[tokio::test]
async fn an_expired_cursor_stops_or_restarts_at_the_horizon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    write_events(&*store, 100, 0).await;
    store.consumer_ack("strict", 10).await.expect("ack");
    store.consumer_ack("lenient", 10).await.expect("ack");
    let trimmed = store.events_trim(EventRetention { max_events: Some(40), max_age: None }).await.expect("trim");
    assert_eq!(trimmed.horizon, 60);

    let strict = Consumer::new(store.clone(), "strict", Arc::new(Recorder::default()));
    match strict.run(CancellationToken::new()).await {
        Err(e @ ConsumerError::CursorExpired { cursor: 10, horizon: 60, .. }) => {
            assert!(e.to_string().contains("events 11..=60 were trimmed"), "{e}");
        }
        other => panic!("expected CursorExpired, got {other:?}"),
    }

    let handler = Arc::new(Recorder::default());
    let config = ConsumerConfig { on_expired: OnExpired::RestartAtHorizon, ..ConsumerConfig::new("lenient") };
    let (stop, task) = spawn(&store, config, handler.clone());
    wait_seen(&handler, 100).await;
    stop.cancel();
    task.await.expect("joins").expect("runs");
    assert_eq!(handler.seen(), (61..=100).collect::<Vec<u64>>());
}

/// A bad name is refused before anything runs, with the store's explanation.
#[tokio::test]
async fn a_bad_consumer_name_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let err = Consumer::new(store, "", Arc::new(Recorder::default()))
        .run(CancellationToken::new())
        .await
        .expect_err("refused");
    assert!(matches!(err, ConsumerError::Store { .. }), "{err:?}");
    assert!(err.to_string().contains("must not be empty"), "{err}");
}
