//! The event log as users follow it: `fleetsync get events --watch` against real hubs
//! (restarted gracefully and killed mid-stream), retention and 410 Gone, and the
//! change-to-watcher latency of an in-process hub over loopback HTTP.

mod common;

use common::*;
use fleetsync_api::{Client, Event, EventWatch, Items, WatchLine};
use fleetsync_model::Grant;
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_server::{AppState, QueueMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// A SyncSet that selects no cluster (so that applying it makes exactly one event).
fn syncset(name: &str, marker: usize) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: {name}}}\nspec:\n  clusterNames: [nowhere]\n  resources:\n    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: m, namespace: a}}, data: {{v: \"{marker}\"}}}}\n"
    )
}

/// `n` SyncSets `s0..s{n}`, all with `marker`, as one file's text.
fn syncsets(n: usize, marker: usize) -> String {
    (0..n).map(|i| syncset(&format!("s{i}"), marker)).collect::<Vec<_>>().join("---\n")
}

fn apply_text(hub: &Hub, text: &str) {
    let file = hub.dir.path().join("batch.yaml");
    std::fs::write(&file, text).expect("write batch");
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
}

/// The whole log kept, as the API lists it (page by page, from the oldest kept).
fn log(hub: &Hub) -> Vec<Event> {
    // The oldest kept come from the newest-first listing (of the last day: all of
    // them); pages after its newest follow with --after.
    let mut args = vec!["get".to_string(), "events".into(), "-o".into(), "json".into(), "--since".into(), "1d".into()];
    let mut all: Vec<Event> = Vec::new();
    loop {
        let out = hub.cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert!(out.status.success(), "{}", stderr(&out));
        let page: Items<Event> = serde_json::from_str(&stdout(&out)).expect("a page of events");
        let mut items = page.items;
        if items.is_empty() {
            return all;
        }
        if all.is_empty() {
            items.reverse();
        }
        all.extend(items);
        let seq = all.last().map(|e| e.seq).unwrap_or_default();
        args = vec!["get".to_string(), "events".into(), "-o".into(), "json".into(), "--after".into(), seq.to_string()];
    }
}

/// `fleetsync get events --watch -o json` in the background, its lines collected.
struct Watcher {
    child: Child,
    seen: Arc<(Mutex<Vec<Event>>, Condvar)>,
    stderr: Arc<Mutex<String>>,
}

impl Watcher {
    fn start(hub: &Hub, after: u64) -> Watcher {
        let after = after.to_string();
        let mut child = bin()
            .args(["get", "events", "--watch", "-o", "json", "--after", &after, "--server", &hub.url])
            .env("FLEETSYNC_TOKEN", &hub.token)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn watcher");
        let seen: Arc<(Mutex<Vec<Event>>, Condvar)> = Arc::default();
        let out = child.stdout.take().expect("stdout");
        let sink = seen.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                let v: Event = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not an event ({e}): {line}"));
                sink.0.lock().expect("lock").push(v);
                sink.1.notify_all();
            }
        });
        let stderr: Arc<Mutex<String>> = Arc::default();
        let (err, sink) = (child.stderr.take().expect("stderr"), stderr.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                sink.lock().expect("lock").push_str(&format!("{line}\n"));
            }
        });
        Watcher { child, seen, stderr }
    }

    /// Waits (at most `limit`, a bound on failure) until `n` events were printed.
    fn wait_for(&self, n: usize, limit: Duration) -> Vec<Event> {
        let (lock, cv) = &*self.seen;
        let deadline = Instant::now() + limit;
        let mut seen = lock.lock().expect("lock");
        while seen.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "the watcher printed {} of {n} events; stderr: {}", seen.len(), self.stderr());
            seen = cv.wait_timeout(seen, left).expect("wait").0;
        }
        seen.clone()
    }

    fn stderr(&self) -> String {
        self.stderr.lock().expect("lock").clone()
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A burst of 10,000 changes (SyncSet updates in 100 applies of 100 documents), with
/// the hub stopped gracefully after a third and killed with SIGKILL after two thirds,
/// each time started again on the same database: the watcher reconnects by itself,
/// resumes from its cursor, and prints every event exactly once, in order, exactly as
/// the log has it.
#[test]
fn a_watcher_sees_every_change_of_a_10k_burst_across_hub_restarts() {
    const SETS: usize = 100;
    const ROUNDS: usize = 100;
    let mut hub = Hub::start();
    apply_text(&hub, &syncsets(SETS, 0));
    let watcher = Watcher::start(&hub, 0);

    let start = Instant::now();
    for round in 1..=ROUNDS {
        apply_text(&hub, &syncsets(SETS, round));
        if round == ROUNDS / 3 {
            hub.restart(true);
        }
        if round == 2 * ROUNDS / 3 {
            hub.restart(false);
        }
    }
    let applied = start.elapsed();
    let total = SETS * (ROUNDS + 1);
    let seen = watcher.wait_for(total, Duration::from_secs(300));
    eprintln!(
        "10,000 changes (2 hub restarts) applied in {applied:?}, all delivered to the watcher {:?} after the first",
        start.elapsed()
    );

    let seqs: Vec<u64> = seen.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=total as u64).collect::<Vec<_>>(), "every event once, in order");
    for i in 0..SETS {
        let name = format!("s{i}");
        let gens: Vec<i64> = seen.iter().filter(|e| e.name == name).map(|e| e.generation).collect();
        assert_eq!(gens, (1..=(ROUNDS as i64 + 1)).collect::<Vec<_>>(), "{name}: every generation, in order");
    }
    assert_eq!(seen, log(&hub), "the watcher printed the log as the API lists it");
    let notes = watcher.stderr();
    assert!(notes.matches("reconnecting after seq").count() >= 2, "reconnected after each restart: {notes}");
    assert_eq!(watcher.wait_for(total, Duration::ZERO).len(), total, "nothing after the end");
}

/// A hub keeping 5 events: a cursor that fell off the log makes `get events` and
/// `get events --watch` exit non-zero saying what to do; a good cursor follows on.
#[test]
fn a_cursor_that_fell_off_the_log_exits_non_zero_with_what_to_do() {
    let hub = Hub::start_flags(&["--event-retention-count", "5", "--event-trim-every", "100ms"]);
    apply_text(&hub, &syncsets(20, 0));
    hub.wait_until(Duration::from_secs(30), |h| log(h).first().map(|e| e.seq) == Some(16));
    let kept: Vec<u64> = log(&hub).iter().map(|e| e.seq).collect();
    assert_eq!(kept, vec![16, 17, 18, 19, 20]);

    let want = "error: the cursor 3 fell off the log (oldest kept is 16): re-list with `fleetsync get events`";
    for args in [&["get", "events", "--after", "3"][..], &["get", "events", "--watch", "--after", "3"]] {
        let out = hub.cli(args);
        assert!(!out.status.success(), "{args:?} must fail");
        assert_eq!(stderr(&out).trim(), want, "{args:?}");
    }

    let watcher = Watcher::start(&hub, 15);
    let seen = watcher.wait_for(5, Duration::from_secs(30));
    assert_eq!(seen.iter().map(|e| e.seq).collect::<Vec<_>>(), kept);
    apply_text(&hub, &syncset("late", 0));
    assert_eq!(watcher.wait_for(6, Duration::from_secs(30))[5].name, "late");

    let out = hub.cli(&["get", "clusters", "--watch"]);
    assert!(
        !out.status.success() && stderr(&out).contains("--watch applies to `get events` and `get status` only"),
        "{}",
        stderr(&out)
    );
    let out = hub.cli(&["get", "status", "--after", "3"]);
    assert!(!out.status.success() && stderr(&out).contains("apply to `get events` only"), "{}", stderr(&out));
}

/// Retention is per tenant: with 5 events kept, one tenant's 20 changes do not push
/// out another tenant's one record, and that tenant's cursor 0 still reads (no 410).
#[test]
fn one_tenants_changes_do_not_push_out_another_tenants_record() {
    let hub = Hub::start_flags(&["--event-retention-count", "5", "--event-trim-every", "100ms"]);
    apply_text(&hub, "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: prod-1, namespace: team-b}\nspec: {endpoint: {simulator: {}}}\n");
    let in_a = syncsets(20, 0)
        .replace("kind: SyncSet\nmetadata: {name: ", "kind: SyncSet\nmetadata: {namespace: team-a, name: ");
    apply_text(&hub, &in_a);
    let viewer = |tenant: &str| {
        let out = hub.cli(&["token", "create", "--tenant", tenant, "--role", "viewer"]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    let (a, b) = (viewer("team-a"), viewer("team-b"));
    let events = |token: &str, args: &[&str]| -> Vec<Event> {
        let out = bin()
            .args(["get", "events", "-o", "json", "--server", &hub.url])
            .args(args)
            .env("FLEETSYNC_TOKEN", token)
            .output()
            .expect("run");
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        serde_json::from_str::<Items<Event>>(&stdout(&out)).expect("events").items
    };
    // team-a's own log is trimmed to its newest five.
    hub.wait_until(Duration::from_secs(30), |_| events(&a, &[]).len() == 5);
    let kept_of_a: Vec<String> = events(&a, &[]).into_iter().map(|e| e.name).collect();
    assert_eq!(kept_of_a, ["s19", "s18", "s17", "s16", "s15"], "newest first");
    // team-b's record of who created prod-1 is still there, from cursor 0 on.
    for args in [&[][..], &["--after", "0"]] {
        let of_b = events(&b, args);
        assert_eq!(of_b.len(), 1, "{args:?}: {of_b:?}");
        assert_eq!(
            (of_b[0].kind.as_str(), of_b[0].name.as_str(), of_b[0].action.as_str()),
            ("Cluster", "prod-1", "Created")
        );
        assert!(of_b[0].actor.is_some(), "the change names who made it");
    }
}

/// Reads a watch stream's lines as they come and hands them on with the time each
/// arrived.
async fn read_watch(mut watch: EventWatch, lines: tokio::sync::mpsc::UnboundedSender<(WatchLine, Instant)>) {
    while let Some(line) = watch.next().await.expect("a watch line") {
        let _ = lines.send((line, Instant::now()));
    }
}

/// The next line of the watch (within a minute: a bound on failure, not a delay).
async fn next_line(rx: &mut tokio::sync::mpsc::UnboundedReceiver<(WatchLine, Instant)>) -> (WatchLine, Instant) {
    let line = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.expect("a line within a minute");
    line.expect("the stream goes on")
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Figures, printed (run with `--nocapture`), not asserted: how long after a change is
/// committed a watcher connected over loopback HTTP has it (embedded store, one change
/// per apply), and how long a burst of 10,000 changes (100 applies of 100) takes to
/// reach it. Also: the stream ends cleanly when the server shuts down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_to_watcher_latency_on_the_embedded_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("hub.db"), StoreConfig::default()).expect("open"));
    let mut registry = prometheus_client::registry::Registry::default();
    let queue_metrics = QueueMetrics::register(&mut registry);
    let admin = TokenRequest { grant: Grant::Fleet, name: None, ttl: None, created_by: "test".into() };
    let (token, _) = issue(store.as_ref(), store.clock().as_ref(), admin).await.expect("a token");
    let state = AppState::new(store, Arc::new(registry), queue_metrics);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(fleetsync_server::serve(listener, state, None, async {
        let _ = stopped.await;
    }));

    let hub = Client::new(&base).with_token(token);
    let watch = hub.watch_events(None).await.expect("watch");
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = tokio::spawn(read_watch(watch, tx));
    assert!(matches!(next_line(&mut rx).await.0, WatchLine::Bookmark { .. }), "caught up");

    let apply = |body: String| {
        let hub = hub.clone();
        async move {
            hub.apply(body).await.expect("apply");
        }
    };
    // One change at a time: from the start of the apply and from its 2xx.
    let (mut from_start, mut from_ack) = (Vec::new(), Vec::new());
    for i in 1..=500 {
        let t0 = Instant::now();
        apply(syncset("one", i)).await;
        let t1 = Instant::now();
        let (line, at) = next_line(&mut rx).await;
        assert!(matches!(&line, WatchLine::Event { event } if event.seq == i as u64), "event {i}: {line:?}");
        from_start.push(at - t0);
        from_ack.push(at.saturating_duration_since(t1));
    }
    from_start.sort();
    from_ack.sort();
    println!(
        "change-to-watcher latency over 500 changes: from the apply's start p50 {:?} p99 {:?}; after its 2xx p50 {:?} p99 {:?}",
        percentile(&from_start, 0.5),
        percentile(&from_start, 0.99),
        percentile(&from_ack, 0.5),
        percentile(&from_ack, 0.99),
    );

    // A burst: 10,000 changes as fast as the API takes them.
    let t0 = Instant::now();
    for round in 0..100 {
        apply(syncsets(100, round + 1)).await;
    }
    let committed = t0.elapsed();
    let mut last = 500;
    while last < 10_500 {
        let (line, _) = next_line(&mut rx).await;
        if let WatchLine::Event { event } = line {
            let seq = event.seq;
            assert_eq!(seq, last + 1, "in order, none missing");
            last = seq;
        }
    }
    println!(
        "10,000-change burst: committed in {committed:?}, all delivered to the watcher {:?} after the first apply started",
        t0.elapsed()
    );

    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(30), reader).await.expect("the stream ends at shutdown").expect("reader");
    tokio::time::timeout(Duration::from_secs(30), server)
        .await
        .expect("the server stops")
        .expect("join")
        .expect("serve");
}
