//! The event log: watch streams (backlog, then each commit as it happens, in pages,
//! keep-alive bookmarks, the end at shutdown) and retention (410 Gone for a trimmed
//! cursor, in a list, at the start of a watch, and in the middle of one).

use crate::harness::{Api, FLEET};
use axum::http::StatusCode;
use fleetsync_model::Kind;
use fleetsync_server::Watches;
use fleetsync_store::{ClaimParams, Completion, EventRetention, RunOutcome};
use serde_json::Value;
use std::time::Duration;

fn syncset(name: &str, marker: usize) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: {name}}}\nspec:\n  clusterNames: [nowhere]\n  resources:\n    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: m, namespace: a}}, data: {{v: \"{marker}\"}}}}\n"
    )
}

/// `n` updates of one SyncSet, each its own transaction: events 1..=n.
async fn updates(api: &Api, n: usize) {
    for i in 0..n {
        assert_eq!(api.apply(&syncset("s", i)).await.status, StatusCode::OK);
    }
}

fn event(line: &Value) -> &Value {
    assert_eq!(line["type"], "EVENT", "{line}");
    &line["event"]
}

fn seqs(lines: &[Value]) -> Vec<u64> {
    lines.iter().map(|l| event(l)["seq"].as_u64().expect("seq")).collect()
}

fn bookmark(line: &Value) -> u64 {
    assert_eq!(line["type"], "BOOKMARK", "{line}");
    line["seq"].as_u64().expect("seq")
}

#[tokio::test]
async fn a_watch_sends_the_backlog_then_every_commit_as_it_happens() {
    // No keep-alive and no safety poll within the test: only wake-ups deliver events.
    let api = Api::with_watches(Watches::new(Duration::from_secs(600), Duration::from_secs(600)));
    api.apply(FLEET).await;
    let (status, content_type, mut lines) = api.stream("/v1/events?after=1&watch=true").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "application/x-ndjson");
    assert_eq!(seqs(&lines.expect_chunk().await), vec![2, 3], "the backlog after the cursor");
    assert_eq!(bookmark(&lines.expect_chunk().await[0]), 3, "caught up");

    // An object write.
    api.apply(&syncset("extra", 0)).await;
    let got = lines.expect_chunk().await;
    assert_eq!((event(&got[0])["seq"].as_u64(), &event(&got[0])["name"]), (Some(4), &Value::from("extra")));

    // A status transition, committed by a worker (here: the store directly).
    let item = api.store.work_claim(ClaimParams::new("w", 1, Duration::from_secs(30))).await.expect("claim").remove(0);
    let outcome = RunOutcome::Applied { generation: item.generation, inventory: vec![], rendered: None };
    api.store
        .work_complete(vec![Completion { key: item.key.clone(), fence: item.fence, outcome, resources: vec![] }])
        .await
        .expect("complete");
    let got = lines.expect_chunk().await;
    let e = event(&got[0]);
    assert_eq!(
        (&e["kind"], &e["action"], e["seq"].as_u64()),
        (&Value::from("Status"), &Value::from("Applied"), Some(5))
    );
    assert_eq!(e["name"], format!("{}/{}", item.key.cluster, item.key.syncset));

    // A delete.
    api.store.object_delete(Kind::SyncSet, "default", "extra").await.expect("delete");
    let got = lines.expect_chunk().await;
    assert_eq!((&event(&got[0])["action"], event(&got[0])["seq"].as_u64()), (&Value::from("Deleted"), Some(6)));
}

/// `since=now` starts after the newest event: a watch sends no backlog (its first line
/// is a bookmark at the newest event), then each new commit; a list is empty. It takes
/// no `after`, and no `order=desc`.
#[tokio::test]
async fn since_now_skips_the_backlog() {
    let api = Api::with_watches(Watches::new(Duration::from_secs(600), Duration::from_secs(600)));
    updates(&api, 30).await;
    let (status, _, mut lines) = api.stream("/v1/events?watch=true&since=now&limit=5").await;
    assert_eq!(status, StatusCode::OK);
    let first = lines.expect_chunk().await;
    assert_eq!(first.len(), 1, "no backlog: {first:?}");
    assert_eq!(bookmark(&first[0]), 30, "caught up at the newest event");
    api.apply(&syncset("s", 99)).await;
    assert_eq!(seqs(&lines.expect_chunk().await), vec![31], "then each new commit");

    let list = api.get("/v1/events?since=now").await;
    assert_eq!(
        (list.status, list.json()["items"].as_array().map(Vec::len)),
        (StatusCode::OK, Some(0)),
        "{}",
        list.text
    );
    for bad in ["/v1/events?since=now&after=3", "/v1/events?since=now&order=desc", "/v1/events?since=later"] {
        assert_eq!(api.get(bad).await.status, StatusCode::BAD_REQUEST, "{bad}");
    }
}

/// A long backlog goes out a page at a time (bounded memory), in order, none missing.
#[tokio::test]
async fn a_long_backlog_is_sent_page_by_page() {
    let api = Api::new();
    let docs: Vec<String> = (0..1_200).map(|i| syncset(&format!("s{i}"), 0)).collect();
    assert_eq!(api.apply(&docs.join("---\n")).await.status, StatusCode::OK);
    let (status, _, mut lines) = api.stream("/v1/events?watch=true&limit=100").await;
    assert_eq!(status, StatusCode::OK);
    let mut seen = Vec::new();
    loop {
        let chunk = lines.expect_chunk().await;
        if chunk[0]["type"] == "BOOKMARK" {
            assert_eq!(bookmark(&chunk[0]), 1_200);
            break;
        }
        assert!(chunk.len() <= 100, "a chunk holds at most one page");
        seen.extend(seqs(&chunk));
    }
    assert_eq!(seen, (1..=1_200).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_trimmed_cursor_is_gone_for_lists_and_watches() {
    let api = Api::new();
    updates(&api, 10).await;
    let trimmed = api.store.events_trim(EventRetention { max_events: Some(4), max_age: None }).await.expect("trim");
    assert_eq!((trimmed.deleted, trimmed.horizon), (6, 6));

    for uri in ["/v1/events?after=2", "/v1/events?after=2&watch=true", "/v1/events?after=5&limit=1"] {
        let a = api.get(uri).await;
        assert_eq!(a.status, StatusCode::GONE, "{uri}");
        assert!(a.content_type.starts_with("application/json"), "{uri}: {}", a.content_type);
        let body = a.json();
        assert_eq!(body["horizon"], 6, "{uri}");
        assert!(a.error().contains("fell off the event log (oldest kept is 7): re-list"), "{uri}: {}", a.text);
    }
    assert_eq!(api.get("/v1/events?after=2").await.json()["cursor"], 2);

    // Re-listing: without a cursor the log is read from the oldest event kept; a cursor
    // at the horizon is good.
    let ids = |v: Value| v["items"].as_array().map(|a| a.iter().filter_map(|e| e["seq"].as_u64()).collect::<Vec<_>>());
    assert_eq!(ids(api.get("/v1/events").await.json()), Some(vec![7, 8, 9, 10]));
    assert_eq!(ids(api.get("/v1/events?after=6").await.json()), Some(vec![7, 8, 9, 10]));
    let (status, _, mut lines) = api.stream("/v1/events?watch=true").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(seqs(&lines.expect_chunk().await), vec![7, 8, 9, 10]);
    assert_eq!(bookmark(&lines.expect_chunk().await[0]), 10);
}

/// A watch that falls behind while it runs (a trim passes its cursor) ends with an
/// error line carrying the 410, never with a silent gap.
#[tokio::test]
async fn a_watch_overtaken_by_a_trim_ends_with_a_gone_line() {
    let api = Api::new();
    updates(&api, 10).await;
    let (_, _, mut lines) = api.stream("/v1/events?watch=true&after=0&limit=2").await;
    assert_eq!(seqs(&lines.expect_chunk().await), vec![1, 2]);
    api.store.events_trim(EventRetention { max_events: Some(3), max_age: None }).await.expect("trim");
    let last = lines.expect_chunk().await;
    assert_eq!(last.len(), 1);
    assert_eq!((&last[0]["type"], &last[0]["code"]), (&Value::from("ERROR"), &Value::from(410)));
    assert_eq!((&last[0]["cursor"], &last[0]["horizon"]), (&Value::from(2), &Value::from(7)));
    assert!(lines.chunk().await.is_none(), "the stream ends after the error");
}

#[tokio::test]
async fn an_idle_watch_sends_keepalive_bookmarks() {
    let api = Api::with_watches(Watches::new(Duration::from_millis(50), Duration::from_secs(60)));
    api.apply(FLEET).await;
    let (_, _, mut lines) = api.stream("/v1/events?after=3&watch=true").await;
    assert_eq!(bookmark(&lines.expect_chunk().await[0]), 3, "caught up at once");
    assert_eq!(bookmark(&lines.expect_chunk().await[0]), 3, "keep-alive");
    api.apply(&syncset("extra", 0)).await;
    // Keep-alives may come before the event; the event comes, then bookmarks carry its seq.
    let mut got = lines.expect_chunk().await;
    while got[0]["type"] == "BOOKMARK" {
        got = lines.expect_chunk().await;
    }
    assert_eq!(seqs(&got), vec![4]);
    assert_eq!(bookmark(&lines.expect_chunk().await[0]), 4);
}

#[tokio::test]
async fn closing_ends_every_watch() {
    let api = Api::new();
    api.apply(FLEET).await;
    let (_, _, mut first) = api.stream("/v1/events?watch=true").await;
    let (_, _, mut second) = api.stream("/v1/events?after=3&watch=true").await;
    assert_eq!(seqs(&first.expect_chunk().await), vec![1, 2, 3]);
    assert_eq!(bookmark(&first.expect_chunk().await[0]), 3);
    assert_eq!(bookmark(&second.expect_chunk().await[0]), 3);
    api.watches.close();
    assert!(first.chunk().await.is_none(), "ended");
    assert!(second.chunk().await.is_none(), "ended");
    let (status, _, mut late) = api.stream("/v1/events?watch=true").await;
    assert_eq!(status, StatusCode::OK);
    assert!(late.chunk().await.is_none(), "a watch opened while closing ends at once");
}

#[tokio::test]
async fn bad_watch_parameters_are_400() {
    let api = Api::new();
    for (uri, param) in [("/v1/events?watch=maybe", "watch"), ("/v1/events?watch=true&limit=0", "limit")] {
        let a = api.get(uri).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(a.error().contains(&format!("`{param}`")), "{uri}: {}", a.text);
    }
}

/// `order=desc`: the newest events first, paging back with `before`, past a trimmed
/// horizon and other tenants' events; a start for a watch "from now".
#[tokio::test]
async fn newest_events_first_and_paging_back() {
    let api = Api::new();
    updates(&api, 30).await;
    let ids = |v: Value| v["items"].as_array().map(|a| a.iter().filter_map(|e| e["seq"].as_u64()).collect::<Vec<_>>());
    assert_eq!(ids(api.get("/v1/events?order=desc&limit=3").await.json()), Some(vec![30, 29, 28]));
    assert_eq!(ids(api.get("/v1/events?order=desc&limit=3&before=28").await.json()), Some(vec![27, 26, 25]));
    assert_eq!(ids(api.get("/v1/events?order=desc&limit=5&before=3").await.json()), Some(vec![2, 1]));
    assert_eq!(ids(api.get("/v1/events?order=desc&limit=100").await.json()).map(|v| v.len()), Some(30));

    api.store.events_trim(EventRetention { max_events: Some(10), max_age: None }).await.expect("trim");
    assert_eq!(ids(api.get("/v1/events?order=desc&limit=100").await.json()), Some((21..=30).rev().collect()));

    // Another tenant's 50 newer events are skipped, not counted.
    let b = api.issue("default:viewer", None).await;
    let other: Vec<String> = (0..50)
        .map(|i| syncset(&format!("o{i}"), 0).replacen("metadata: {name:", "metadata: {namespace: other, name:", 1))
        .collect();
    let applied = api.apply(&other.join("---\n")).await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.text);
    let page = api.call_as(Some(&b), "GET", "/v1/events?order=desc&limit=2", None, "").await;
    assert_eq!(ids(page.json()), Some(vec![30, 29]), "{}", page.text);
    let all = ids(api.get("/v1/events?order=desc&limit=1").await.json()).expect("items");
    assert_eq!(all, vec![80], "a fleet-admin sees every tenant's");

    for (uri, param) in [
        ("/v1/events?order=desc&watch=true", "order"),
        ("/v1/events?order=desc&after=3", "order"),
        ("/v1/events?before=3", "before"),
        ("/v1/events?order=up", "order"),
    ] {
        let a = api.get(uri).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}");
        assert!(a.error().contains(&format!("`{param}`")), "{uri}: {}", a.text);
    }
}
