//! Status queries, roll-ups and retries.

use crate::harness::{Api, FLEET};
use axum::http::StatusCode;
use fleetsync_api::{ApplyResponse, DeleteResponse, ErrorBody, Event, Health, Items, Member, Retried, SyncSetStatus};
use fleetsync_model::{ClusterStatus, KeyStatus, Kind, Phase};

/// What the server sends is what the client's types read: each answer, read back
/// into the type `fleetsync_api::Client` returns for its route.
#[tokio::test]
async fn every_answer_reads_back_as_the_clients_types() {
    let api = Api::new();
    let applied: ApplyResponse = api.apply(FLEET).await.typed();
    assert!(
        applied.results.iter().any(|r| r.kind == Kind::Cluster && r.name == "c1" && r.result == "created"),
        "{applied:?}"
    );
    let keys: Items<KeyStatus> = api.get("/v1/status").await.typed();
    assert!(keys.items.len() == 2 && keys.items.iter().all(|k| k.phase == Phase::Pending), "{keys:?}");
    let cluster: ClusterStatus = api.get("/v1/status/clusters/c1").await.typed();
    assert_eq!((cluster.cluster.as_str(), cluster.syncsets.len()), ("c1", 1));
    let set: SyncSetStatus = api.get("/v1/status/syncsets/base").await.typed();
    assert_eq!((set.generation, set.items.len()), (1, 2));
    let events: Items<Event> = api.get("/v1/events").await.typed();
    assert_eq!(events.items.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
    let retried: Retried = api.call("POST", "/v1/status/clusters/c1/syncsets/base/retry", "").await.typed();
    assert_eq!((retried.retried.cluster.as_str(), retried.retried.syncset.as_str()), ("c1", "base"));
    let members: Items<Member> = api.get("/v1/members").await.typed();
    assert!(members.items.iter().all(|m| !m.member.id.is_empty()), "{members:?}");
    assert_eq!(api.get("/healthz").await.typed::<Health>().status, "ok");
    let deleted: DeleteResponse = api.call("DELETE", "/v1/clusters/c1", "").await.typed();
    assert_eq!((deleted.deleted.kind, deleted.deleted.name.as_str()), (Kind::Cluster, "c1"));
    let gone: ErrorBody = api.get("/v1/clusters/c1").await.typed();
    assert_eq!(gone.error, "Cluster default/c1 not found");
}

#[tokio::test]
async fn status_of_keys_after_apply() {
    let api = Api::new();
    api.apply(FLEET).await;
    let all = api.get("/v1/status").await.json();
    let items = all["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 2);
    assert!(items.iter().all(|k| k["phase"] == "Pending" && k["syncset"] == "base"), "{all}");
    let one = api.get("/v1/status?cluster=c2&syncset=base").await.json();
    assert_eq!(one["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(one["items"][0]["cluster"], "c2");
}

#[tokio::test]
async fn unknown_names_in_status_queries_are_404() {
    let api = Api::new();
    api.apply(FLEET).await;
    for uri in
        ["/v1/status/clusters/nope", "/v1/status/syncsets/nope", "/v1/status?cluster=nope", "/v1/status?syncset=nope"]
    {
        let a = api.get(uri).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{uri}: {}", a.text);
        assert!(a.error().contains("nope not found"), "{uri}: {}", a.text);
    }
    // Known in another tenant only: still unknown here.
    assert_eq!(api.get("/v1/status/clusters/c1?tenant=other").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn cluster_roll_up() {
    let api = Api::new();
    api.apply(FLEET).await;
    let a = api.get("/v1/status/clusters/c1").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let s = a.json();
    assert_eq!(s["cluster"], "c1");
    assert_eq!(s["condition"]["ready"], false);
    assert_eq!(s["condition"]["reason"], "Progressing");
    assert_eq!(s["syncsets"].as_array().map(Vec::len), Some(1));
}

#[tokio::test]
async fn syncset_status() {
    let api = Api::new();
    api.apply(FLEET).await;
    let s = api.get("/v1/status/syncsets/base").await.json();
    assert_eq!(s["tenant"], "default");
    assert_eq!(s["syncset"], "base");
    assert_eq!(s["generation"], 1);
    assert_eq!(s["items"].as_array().map(Vec::len), Some(2));
}

/// The summary counts every key of the SyncSet by phase and generation, whatever the
/// page; failures come with their reasons; pages of its keys follow `continue`.
#[tokio::test]
async fn syncset_summary_counts_every_key_and_its_keys_page() {
    use fleetsync_store::{ClaimParams, Completion, RunOutcome};
    use std::time::Duration;
    let api = Api::new();
    let clusters: String = (0..5)
        .map(|i| format!("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i}, labels: {{env: prod}}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n---\n"))
        .collect();
    api.apply(&format!(
        "{clusters}{}",
        FLEET.split("---").find(|d| d.contains("name: base")).expect("the base SyncSet")
    ))
    .await;
    // Two keys applied, one failed, two still pending.
    let claimed = api.store.work_claim(ClaimParams::new("w", 3, Duration::from_secs(30))).await.expect("claim");
    let outcome = |i: usize, generation: i64| match i {
        0 | 1 => RunOutcome::Applied { generation, inventory: vec![], rendered: None },
        _ => RunOutcome::Failed { error: "admission webhook denied the request".into() },
    };
    let completions = claimed
        .iter()
        .enumerate()
        .map(|(i, c)| Completion {
            key: c.key.clone(),
            fence: c.fence,
            outcome: outcome(i, c.generation),
            resources: vec![],
        })
        .collect();
    api.store.work_complete(completions).await.expect("complete");

    let first = api.get("/v1/status/syncsets/base?limit=2").await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    let first = first.json();
    let summary = &first["summary"];
    assert_eq!(summary["total"], 5);
    assert_eq!(
        summary["phases"],
        serde_json::json!({"Pending": 2, "Applying": 0, "Applied": 2, "Failed": 1, "Parked": 0})
    );
    assert_eq!(summary["atGeneration"], 2);
    assert_eq!(summary["failures"][0]["lastError"], "admission webhook denied the request");
    assert_eq!(summary["failures"][0]["phase"], "Failed");
    assert!(summary["failures"][0].get("syncset").is_none(), "a SyncSet's failures do not repeat its name");
    let mut seen: Vec<String> = vec![];
    let mut page = first;
    loop {
        assert_eq!(page["summary"]["total"], 5, "every page carries the whole summary");
        seen.extend(
            page["items"].as_array().expect("items").iter().map(|k| k["cluster"].as_str().unwrap_or("").to_string()),
        );
        let Some(token) = page["continue"].as_str().map(str::to_string) else { break };
        page = api.get(&format!("/v1/status/syncsets/base?limit=2&continue={token}")).await.json();
    }
    assert_eq!(seen, ["c0", "c1", "c2", "c3", "c4"]);
    let unpaged = api.get("/v1/status/syncsets/base").await.typed::<fleetsync_api::SyncSetStatus>();
    assert_eq!((unpaged.items.len(), unpaged.continue_, unpaged.summary.total), (5, None, 5));
    // The tenant's summary counts the same keys, plus the other SyncSets' (none run).
    let tenant: fleetsync_api::TenantStatus = api.get("/v1/status/summary").await.typed();
    let all: Items<KeyStatus> = api.get("/v1/status").await.typed();
    assert_eq!(tenant.summary.total, all.items.len() as u64);
    assert_eq!(tenant.summary.phases[&Phase::Applied], 2);
    assert_eq!(tenant.summary.phases[&Phase::Failed], 1);
    let failure = &tenant.summary.failures[0];
    assert_eq!((failure.syncset.as_deref(), failure.phase), (Some("base"), Phase::Failed), "{tenant:?}");
    let other = api
        .get(&format!(
            "/v1/status/syncsets/base?limit=2&continue={}",
            api.get("/v1/status?limit=1").await.json()["continue"].as_str().unwrap_or("")
        ))
        .await;
    assert_eq!(other.status, StatusCode::BAD_REQUEST, "a token of another list: {}", other.text);
}

/// A retry runs the key again and is logged among the key's events, naming who asked.
#[tokio::test]
async fn retry() {
    let api = Api::new();
    api.apply(FLEET).await;
    let unknown = api.call("POST", "/v1/status/clusters/c1/syncsets/nope/retry", "").await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    assert_eq!(unknown.error(), "key default/c1/nope not found");
    let ops = api.issue_named("default:editor", "ops").await;
    let ok = api.call_as(Some(&ops), "POST", "/v1/status/clusters/c1/syncsets/base/retry", None, "").await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.text);
    assert_eq!(ok.json(), serde_json::json!({"retried": {"tenant": "default", "cluster": "c1", "syncset": "base"}}));
    let bad = api.call("POST", "/v1/status/clusters/C1/syncsets/base/retry", "").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    let events: Items<Event> = api.get("/v1/status/clusters/c1/syncsets/base/events").await.typed();
    let seen: Vec<_> =
        events.items.iter().map(|e| (e.kind.as_str(), e.action.as_str(), e.generation, e.actor.as_deref())).collect();
    assert_eq!(seen, [("Status", "Retry", 1, Some("token:ops"))], "{events:?}");
}

/// A key's events: its own runs and retries only, newest first, paged back with
/// `before`; a bad `limit` is a 400 naming the limit.
#[tokio::test]
async fn a_keys_events_are_its_runs_newest_first() {
    use fleetsync_store::{ClaimParams, Completion, RunOutcome};
    use std::time::Duration;
    let api = Api::new();
    api.apply(FLEET).await;
    let run = |fail: bool| {
        let api = &api;
        async move {
            let claimed = api.store.work_claim(ClaimParams::new("w", 2, Duration::from_secs(30))).await.expect("claim");
            let completions = claimed
                .iter()
                .map(|c| {
                    let outcome = match (fail, c.key.cluster.as_str()) {
                        (true, "c1") => RunOutcome::Failed { error: "denied".into() },
                        _ => RunOutcome::Applied { generation: c.generation, inventory: vec![], rendered: None },
                    };
                    Completion { key: c.key.clone(), fence: c.fence, outcome, resources: vec![] }
                })
                .collect();
            api.store.work_complete(completions).await.expect("complete");
        }
    };
    run(true).await;
    api.call("POST", "/v1/status/clusters/c1/syncsets/base/retry", "").await;
    run(false).await;

    let uri = "/v1/status/clusters/c1/syncsets/base/events";
    let page: Items<Event> = api.get(uri).await.typed();
    let actions: Vec<&str> = page.items.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["Applied", "Retry", "Failed"], "newest first: {page:?}");
    assert!(page.items.iter().all(|e| e.kind == "Status" && e.name == "c1/base"), "{page:?}");
    assert!(page.items[0].seq > page.items[1].seq);
    let older: Items<Event> = api.get(&format!("{uri}?limit=1&before={}", page.items[1].seq)).await.typed();
    assert_eq!(older.items.iter().map(|e| e.seq).collect::<Vec<_>>(), [page.items[2].seq]);
    let c2: Items<Event> = api.get("/v1/status/clusters/c2/syncsets/base/events").await.typed();
    assert_eq!(c2.items.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["Applied"]);
    let elsewhere: Items<Event> = api.get(&format!("{uri}?tenant=other")).await.typed();
    assert!(elsewhere.items.is_empty(), "another tenant's key of the same name: {elsewhere:?}");
    let bad = api.get(&format!("{uri}?limit=0")).await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(bad.error().contains("between 1 and 1000"), "{}", bad.text);
}

/// The tenant's summary counts stale clusters by the hub's window: none at the default
/// (3 h) right after an apply, every cluster with keys when the window is zero and a
/// moment has passed, since no key has run.
#[tokio::test]
async fn the_summary_counts_clusters_stale_by_the_hubs_window() {
    for (window, want) in [(fleetsync_server::DEFAULT_STALE_AFTER, 0), (std::time::Duration::ZERO, 2)] {
        let api = Api::with_stale_after(window);
        api.apply(FLEET).await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let summary: fleetsync_api::TenantStatus = api.get("/v1/status/summary").await.typed();
        assert_eq!(summary.clusters.stale, want, "stale after {window:?}: {:?}", summary.clusters);
        assert_eq!(summary.clusters.progressing, 2, "stale clusters are counted in their condition too");
    }
}
