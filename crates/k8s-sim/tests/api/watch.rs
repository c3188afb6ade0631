//! Watches: ordered events with increasing resource versions, resuming, `410
//! Expired` past the history, selectors, bookmarks and the `watchDelayMs` fault.

use crate::harness::{cm, object_uri, Sim};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::time::Instant;

const CMS: &str = "/clusters/c1/api/v1/namespaces/app/configmaps";

fn list_version(list: &Value) -> u64 {
    list["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).expect("list resourceVersion")
}

async fn list_rv(sim: &Sim, uri: &str) -> u64 {
    list_version(&sim.get(uri).await.body)
}

#[tokio::test]
async fn events_arrive_in_order_with_increasing_versions_and_resume() {
    let sim = Sim::instant();
    sim.apply("c1", &cm("other", "0")).await;
    let rv0 = list_rv(&sim, CMS).await;
    let mut w = sim.watch(&format!("{CMS}?watch=1&resourceVersion={rv0}&allowWatchBookmarks=true")).await;
    assert_eq!(w.status, 200);
    sim.apply("c1", &cm("a", "1")).await;
    sim.apply("c1", &cm("a", "1")).await; // a no-op: no event
    sim.apply("c1", &cm("a", "2")).await;
    sim.delete(&object_uri("c1", &cm("a", "2")), None).await;

    let events = [w.next_brief().await, w.next_brief().await, w.next_brief().await];
    let kinds: Vec<(&str, &str)> = events.iter().map(|(t, n, _)| (t.as_str(), n.as_str())).collect();
    assert_eq!(kinds, [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]);
    let versions: Vec<u64> = events.iter().map(|e| e.2).collect();
    assert!(rv0 < versions[0] && versions[0] < versions[1] && versions[1] < versions[2], "{versions:?}");
    assert_eq!(list_rv(&sim, CMS).await, versions[2], "the list is at the latest change");

    let mut resumed = sim.watch(&format!("{CMS}?watch=true&resourceVersion={}", versions[0])).await;
    assert_eq!(resumed.next_brief().await, events[1]);
    assert_eq!(resumed.next_brief().await, events[2]);
}

#[tokio::test]
async fn a_watch_from_a_lists_version_sees_the_writes_made_since() {
    let sim = Sim::instant();
    sim.apply("c1", &cm("a", "1")).await;
    let rv = list_rv(&sim, CMS).await;
    sim.apply("c1", &cm("b", "1")).await;
    let mut w = sim.watch(&format!("{CMS}?watch=true&resourceVersion={rv}")).await;
    let (t, name, version) = w.next_brief().await;
    assert_eq!((t.as_str(), name.as_str(), version), ("ADDED", "b", rv + 1), "kube-rs's watcher lists, then watches");
}

#[tokio::test]
async fn too_old_a_version_is_gone_with_reason_expired() {
    let sim = Sim::instant();
    for v in 0..3 {
        sim.apply("c1", &cm("a", &v.to_string())).await;
    }
    // The cluster's history starts when it is first listed or watched: version 1 is
    // before it.
    let mut w = sim.watch(&format!("{CMS}?watch=true&resourceVersion=1")).await;
    assert_eq!(w.status, 200, "as the API server does: the 410 comes as an event");
    let e = w.next().await.expect("an event");
    assert_eq!((e["type"].as_str(), e["object"]["kind"].as_str()), (Some("ERROR"), Some("Status")));
    assert_eq!((e["object"]["code"].as_u64(), e["object"]["reason"].as_str()), (Some(410), Some("Expired")));
    assert!(w.next().await.is_none(), "the stream ends");

    // Past the bounded history too: a watcher that was there but fell behind.
    let rv = list_rv(&sim, CMS).await;
    let w = sim.watch(&format!("{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=0")).await;
    drop(w);
    for v in 0..1100 {
        sim.apply("c1", &cm("a", &format!("x{v}"))).await;
    }
    let mut late = sim.watch(&format!("{CMS}?watch=true&resourceVersion={rv}")).await;
    assert_eq!(late.next().await.expect("an event")["object"]["code"], 410);
    let recent = list_rv(&sim, CMS).await - 5;
    let mut ok = sim.watch(&format!("{CMS}?watch=true&resourceVersion={recent}")).await;
    assert_eq!(ok.next_brief().await.2, recent + 1, "recent versions resume");
}

#[tokio::test]
async fn without_a_version_current_objects_come_first_and_selectors_filter() {
    let sim = Sim::instant();
    let labelled = |name: &str, env: &str| {
        let mut o = cm(name, "1");
        o["metadata"]["labels"] = json!({"env": env});
        o
    };
    sim.apply("c1", &labelled("a", "prod")).await;
    sim.apply("c1", &labelled("b", "dev")).await;
    let mut other_ns = cm("z", "1");
    other_ns["metadata"]["namespace"] = json!("elsewhere");
    sim.apply("c1", &other_ns).await;

    let prod = sim.get(&format!("{CMS}?labelSelector=env%3Dprod")).await.body;
    let names: Vec<&str> =
        prod["items"].as_array().into_iter().flatten().filter_map(|i| i["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["a"]);
    sim.get(&format!("{CMS}?labelSelector=env+in+%28a%29")).await.assert_status(400, "BadRequest");

    let mut w = sim.watch(&format!("{CMS}?watch=true&labelSelector=env%21%3Ddev")).await;
    assert_eq!(w.next_brief().await.0, "ADDED");
    let mut b2 = labelled("b", "dev");
    b2["data"]["value"] = json!("2");
    sim.apply("c1", &b2).await;
    sim.apply("c1", &labelled("c", "prod")).await;
    let (t, name, _) = w.next_brief().await;
    assert_eq!((t.as_str(), name.as_str()), ("ADDED", "c"), "b (dev) is filtered out");

    let mut all = sim.watch("/clusters/c1/api/v1/configmaps?watch=true&sendInitialEvents=true").await;
    let mut names = Vec::new();
    for _ in 0..4 {
        names.push(all.next_brief().await.1);
    }
    assert_eq!(names, ["a", "b", "c", "z"], "all namespaces, sorted");
    let end = all.next().await.expect("bookmark");
    assert_eq!(end["type"], "BOOKMARK");
    assert_eq!(end["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true");
}

#[tokio::test]
async fn a_timeout_ends_the_stream_with_a_bookmark() {
    let sim = Sim::instant();
    let rv = list_rv(&sim, CMS).await;
    let mut w =
        sim.watch(&format!("{CMS}?watch=true&resourceVersion={rv}&timeoutSeconds=1&allowWatchBookmarks=true")).await;
    sim.apply("c1", &cm("a", "1")).await;
    let (_, _, added) = w.next_brief().await;
    let start = Instant::now();
    let bookmark = w.next().await.expect("bookmark");
    assert!(start.elapsed() < Duration::from_secs(3));
    assert_eq!(bookmark["type"], "BOOKMARK");
    assert_eq!(bookmark["object"]["metadata"]["resourceVersion"], added.to_string());
    assert!(w.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn watch_delay_holds_every_event_in_order() {
    let sim = Sim::instant();
    sim.set_faults("c1", json!({"watchDelayMs": 3000})).await;
    assert_eq!(sim.get("/_sim/clusters/c1/faults").await.body["watch_delay_ms"], 3000);
    let rv = list_rv(&sim, CMS).await;
    let mut w = sim.watch(&format!("{CMS}?watch=true&resourceVersion={rv}")).await;
    let start = Instant::now();
    sim.apply("c1", &cm("a", "1")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    sim.apply("c1", &cm("a", "2")).await;
    assert_eq!(sim.get(&object_uri("c1", &cm("a", "2"))).await.body["data"]["value"], "2", "reads are not delayed");

    assert_eq!(w.next_brief().await.0, "ADDED");
    assert_eq!(start.elapsed(), Duration::from_millis(3000));
    assert_eq!(w.next_brief().await.0, "MODIFIED");
    assert_eq!(start.elapsed(), Duration::from_millis(3500), "each event 3 s after its own write");
}
