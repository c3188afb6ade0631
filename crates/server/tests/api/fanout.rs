//! One reader of the event log feeds every watch: a commit costs the store one read
//! however many watches are open, every watch still gets every event once and in
//! order, and a watch that falls behind the fan-out's buffer catches up from the store.

use crate::harness::{Api, Lines, FLEET};
use async_trait::async_trait;
use axum::http::StatusCode;
use fleetsync_server::{EventFeed, WatchLimits, Watches};
use fleetsync_store::{Event, EventLog, EventObject, EventRetention, EventsTrimmed, Result};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The store's event log, counting its reads.
struct Counting {
    log: Arc<dyn EventLog>,
    reads: Arc<AtomicUsize>,
}

#[async_trait]
impl EventLog for Counting {
    async fn events_read(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.log.events_read(after, limit).await
    }

    async fn events_read_of(&self, tenants: &[String], after: u64, limit: usize) -> Result<Vec<Event>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.log.events_read_of(tenants, after, limit).await
    }

    async fn events_newest(&self, tenants: Option<&[String]>, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.log.events_newest(tenants, before, limit).await
    }

    async fn events_head(&self) -> Result<u64> {
        self.log.events_head().await
    }

    async fn events_of(&self, object: &EventObject, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        self.log.events_of(object, before, limit).await
    }
    async fn events_trim(&self, keep: EventRetention) -> Result<EventsTrimmed> {
        self.log.events_trim(keep).await
    }
    async fn consumer_get(&self, name: &str) -> Result<Option<u64>> {
        self.log.consumer_get(name).await
    }
    async fn consumer_ack(&self, name: &str, seq: u64) -> Result<u64> {
        self.log.consumer_ack(name, seq).await
    }
    async fn consumer_delete(&self, name: &str) -> Result<()> {
        self.log.consumer_delete(name).await
    }
    fn events_subscribe(&self) -> watch::Receiver<u64> {
        self.log.events_subscribe()
    }
}

/// No keep-alive and no safety poll within a test (only commits wake the feed), and
/// room for 200 watches of one caller.
fn quiet() -> Watches {
    let limits = WatchLimits { max_watches: 1000, max_per_identity: 1000, max_per_tenant: 1000 };
    Watches::new(Duration::from_secs(600), Duration::from_secs(600)).with_limits(limits)
}

fn syncset(marker: usize) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: s}}\nspec:\n  clusterNames: [nowhere]\n  resources:\n    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: m, namespace: a}}, data: {{v: \"{marker}\"}}}}\n"
    )
}

/// Reads a watch until its caught-up bookmark; the seqs of the events before it.
async fn until_bookmark(lines: &mut Lines) -> Vec<u64> {
    let mut seqs = Vec::new();
    loop {
        for line in lines.expect_chunk().await {
            match line["type"].as_str() {
                Some("EVENT") => seqs.push(line["event"]["seq"].as_u64().expect("seq")),
                Some("BOOKMARK") => return seqs,
                _ => panic!("unexpected line {line}"),
            }
        }
    }
}

/// [`events_in`] of a watch handed over.
async fn events(mut lines: Lines, n: usize) -> Vec<u64> {
    events_in(&mut lines, n).await
}

async fn all_seqs(api: &Api) -> Vec<u64> {
    let page = api.get("/v1/events?limit=10000").await;
    page.json()["items"].as_array().expect("items").iter().map(|e: &Value| e["seq"].as_u64().expect("seq")).collect()
}

#[tokio::test]
async fn two_hundred_watches_cost_the_store_one_read_per_commit() {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let api = Api::with_feed(quiet(), move |log| EventFeed::new(Arc::new(Counting { log, reads: counter })), |_| {});
    assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
    let before = all_seqs(&api).await;
    let mut watchers = Vec::new();
    for _ in 0..200 {
        let (status, _, mut lines) = api.stream("/v1/events?watch=true").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(until_bookmark(&mut lines).await, before, "the backlog");
        watchers.push(lines);
    }
    // Let the feed take the watches' starting point, then count from here.
    tokio::time::sleep(Duration::from_millis(200)).await;
    reads.store(0, Ordering::SeqCst);

    const COMMITS: usize = 20;
    let collectors: Vec<_> = watchers.into_iter().map(|lines| tokio::spawn(events(lines, COMMITS))).collect();
    for i in 0..COMMITS {
        assert_eq!(api.apply(&syncset(i)).await.status, StatusCode::OK);
    }
    let mut got = Vec::new();
    for c in collectors {
        got.push(c.await.expect("collector"));
    }
    let reads = reads.load(Ordering::SeqCst);
    let expected: Vec<u64> = all_seqs(&api).await.into_iter().filter(|s| !before.contains(s)).collect();
    assert_eq!(expected.len(), COMMITS);
    for seqs in &got {
        assert_eq!(seqs, &expected, "every event once, in order");
    }
    // The list above is one more read.
    assert!(reads <= COMMITS + 2, "{reads} store reads for {COMMITS} commits and 200 watches");
}

/// A page for a tenant with no events costs one store read however many events another
/// tenant has: the store reads the caller's tenants only, never the others' page by page.
#[tokio::test]
async fn a_quiet_tenants_page_costs_one_read_beside_a_busy_tenant() {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = reads.clone();
    let api = Api::with_feed(quiet(), move |log| EventFeed::new(Arc::new(Counting { log, reads: counter })), |_| {});
    let busy: Vec<String> =
        (0..2_000).map(|i| syncset(i).replace("metadata: {name: s}", &format!("metadata: {{name: s{i}}}"))).collect();
    assert_eq!(api.apply(&busy.join("---\n")).await.status, StatusCode::OK);
    assert_eq!(all_seqs(&api).await.len(), 2_000);
    let viewer = api.issue("quiet:viewer", None).await;
    for uri in ["/v1/events?limit=1", "/v1/events?order=desc&limit=1", "/v1/events?limit=1&since=now"] {
        reads.store(0, Ordering::SeqCst);
        let page = api.call_as(Some(&viewer), "GET", uri, None, "").await;
        assert_eq!(page.status, StatusCode::OK, "{uri}");
        assert_eq!(page.json()["items"], serde_json::json!([]), "{uri}");
        assert_eq!(reads.load(Ordering::SeqCst), 1, "{uri}: store reads of events");
    }
}

#[tokio::test]
async fn a_watch_behind_the_fan_out_buffer_still_gets_every_event_once() {
    // The feed keeps one page: a watch that does not read while several commits are
    // fanned out loses pages and must catch up from the store.
    let api = Api::with_feed(quiet(), |log| EventFeed::with_pages(log, 1), |_| {});
    assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
    let (_, _, mut reader) = api.stream("/v1/events?watch=true").await;
    let (_, _, mut sleeper) = api.stream("/v1/events?watch=true").await;
    let backlog = until_bookmark(&mut reader).await;
    assert_eq!(until_bookmark(&mut sleeper).await, backlog);
    let mut seen = Vec::new();
    for i in 0..10 {
        assert_eq!(api.apply(&syncset(i)).await.status, StatusCode::OK);
        // One page per commit: the reader has it before the next commit.
        seen.extend(events_in(&mut reader, 1).await);
    }
    let expected: Vec<u64> = all_seqs(&api).await.into_iter().filter(|s| !backlog.contains(s)).collect();
    assert_eq!(seen, expected);
    assert_eq!(events_in(&mut sleeper, 10).await, expected, "the lagged watch: every event once, in order");
    // Both follow the feed again.
    assert_eq!(api.apply(&syncset(99)).await.status, StatusCode::OK);
    let next = events_in(&mut reader, 1).await;
    assert_eq!(events_in(&mut sleeper, 1).await, next);
    assert!(next[0] > expected[9]);
}

/// Reads a watch until it has `n` events (bookmarks skipped); their seqs.
async fn events_in(lines: &mut Lines, n: usize) -> Vec<u64> {
    let mut seqs = Vec::new();
    while seqs.len() < n {
        for line in lines.expect_chunk().await {
            if line["type"] == "EVENT" {
                seqs.push(line["event"]["seq"].as_u64().expect("seq"));
            }
        }
    }
    seqs
}
