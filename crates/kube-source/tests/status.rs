//! Custom resources' status kept current against a `fleetsync sim` hub cluster:
//! `observedGeneration` and the `Synced` and `Ready` conditions in Kubernetes'
//! standard shape, `Ready` reaching `True` once the keys are applied (a change of
//! status, not of spec), and going back to `False` when a spec change is pending.

mod common;

use common::{poll, Hub, Seen, TENANT};
use fleetsync_kube_source::{CrKind, KubeSource, SourceConfig, StoreReconciler};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{ClaimParams, Completion, RunOutcome, WorkQueue};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    let conditions = status["conditions"].as_array().map(Vec::as_slice).unwrap_or_default();
    conditions.iter().find(|c| c["type"] == kind).unwrap_or(&Value::Null)
}

/// Claims every pending key and reports it applied, as a worker would.
async fn apply_all(store: &SqliteStore) -> usize {
    let claimed = store.work_claim(ClaimParams::new("worker", 100, Duration::from_secs(30))).await.expect("claim");
    let completions: Vec<Completion> = claimed
        .iter()
        .map(|item| Completion {
            key: item.key.clone(),
            fence: item.fence,
            outcome: RunOutcome::Applied { generation: item.generation, inventory: vec![], rendered: None },
            resources: vec![],
        })
        .collect();
    let n = completions.len();
    store.work_complete(completions).await.expect("complete");
    n
}

#[tokio::test]
async fn status_reaches_ready_once_the_keys_are_applied() {
    let hub = Hub::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open(dir.path().join("s.db"), Default::default()).expect("store"));
    let config = SourceConfig { status_interval: Duration::from_millis(100), ..SourceConfig::default() };
    let source = KubeSource::new(hub.client(), Arc::new(StoreReconciler::new(store.clone())))
        .config(config)
        .handler(Arc::new(Seen::default()));
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(source.run(async move { drop(stopped.await) }));
    let wait = Duration::from_secs(10);
    let api = hub.api(CrKind::SyncSet);
    let status = || async { api.get_status("s").await.expect("status").data["status"].clone() };

    hub.apply_cluster("c1").await;
    hub.apply_syncset("s", "user", json!({}), &["x"]).await;
    poll(wait, "status written", || async { status().await["observedGeneration"] == 1 }).await;
    // The Cluster may reach the store after the SyncSet (two watches): until then the
    // SyncSet selects no cluster; the refresh follows as its key appears.
    poll(wait, "the key in status", || async { condition(&status().await, "Ready")["reason"] == "Progressing" }).await;
    let s = status().await;
    let (synced, ready) = (condition(&s, "Synced"), condition(&s, "Ready"));
    assert_eq!((synced["status"].as_str(), synced["reason"].as_str()), (Some("True"), Some("Accepted")), "{s}");
    assert_eq!((ready["status"].as_str(), ready["reason"].as_str()), (Some("False"), Some("Progressing")), "{s}");
    for c in [synced, ready] {
        assert_eq!(c["observedGeneration"], 1, "{c}");
        assert!(c["message"].is_string(), "{c}");
        let time = c["lastTransitionTime"].as_str().unwrap_or_default();
        assert!(time.len() == 20 && time.ends_with('Z'), "RFC 3339 in seconds, as Kubernetes writes it: {time}");
    }
    assert_eq!(s["keys"][0]["phase"], "Pending", "{s}");
    let synced_since = synced["lastTransitionTime"].clone();

    // The key applies: no spec change, yet status follows.
    poll(wait, "the key claimed and applied", || async { apply_all(&store).await > 0 }).await;
    poll(wait, "Ready", || async { condition(&status().await, "Ready")["status"] == "True" }).await;
    let s = status().await;
    let ready = condition(&s, "Ready");
    assert_eq!((ready["reason"].as_str(), ready["observedGeneration"].as_i64()), (Some("Applied"), Some(1)), "{s}");
    assert_eq!(s["keys"][0]["phase"], "Applied", "{s}");
    assert_eq!(condition(&s, "Synced")["lastTransitionTime"], synced_since, "unchanged conditions keep their time");

    // Settled: the refresh writes nothing more.
    let settled = api.get_status("s").await.expect("get").metadata.resource_version;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(api.get_status("s").await.expect("get").metadata.resource_version, settled, "no write without a change");

    // A spec change: Ready goes back to False at generation 2, then True again.
    hub.apply_syncset("s", "user", json!({}), &["x", "y"]).await;
    poll(wait, "generation 2 observed", || async { status().await["observedGeneration"] == 2 }).await;
    let s = status().await;
    assert_eq!(condition(&s, "Ready")["status"], "False", "{s}");
    assert_eq!(condition(&s, "Ready")["observedGeneration"], 2, "{s}");
    poll(wait, "generation 2 applied", || async { apply_all(&store).await > 0 }).await;
    poll(wait, "Ready again", || async { condition(&status().await, "Ready")["status"] == "True" }).await;
}

#[tokio::test]
async fn a_rejected_spec_is_neither_synced_nor_ready() {
    let hub = Hub::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open(dir.path().join("s.db"), Default::default()).expect("store"));
    let source = KubeSource::new(hub.client(), Arc::new(StoreReconciler::new(store)));
    let (_stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(source.run(async move { drop(stopped.await) }));
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(hub.client(), TENANT, &fleetsync_kube_source::api_resource(CrKind::Cluster));
    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "fleetsync.io/v1", "kind": "Cluster", "metadata": {"name": "c1", "namespace": TENANT},
        "spec": {"endpoint": {"http": {"url": "ftp://nope"}}},
    }))
    .expect("object");
    api.patch("c1", &kube::api::PatchParams::apply("user"), &kube::api::Patch::Apply(&bad)).await.expect("apply");
    let status = || async { api.get_status("c1").await.expect("status").data["status"].clone() };
    poll(Duration::from_secs(10), "the error in status", || async { status().await["error"].is_string() }).await;
    let s = status().await;
    for kind in ["Synced", "Ready"] {
        let c = condition(&s, kind);
        assert_eq!((c["status"].as_str(), c["reason"].as_str()), (Some("False"), Some("ReconcileFailed")), "{s}");
        assert!(c["message"].as_str().is_some_and(|m| m.contains("spec.endpoint.http.url")), "{s}");
    }
}
