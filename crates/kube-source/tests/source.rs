//! The Kubernetes source against a real `fleetsync sim` hub on loopback: kube-rs's
//! watcher works against the simulator; own status writes never re-trigger a
//! reconcile; with watch events delayed and a third party writing between our read
//! and our status write, no handler sees an event twice or misses one and no
//! reconcile acts on the stale state; a version that never arrives holds the object
//! only until the timeout.

mod common;

use common::{eventually, poll, version, Hub, Recorder, Seen, TENANT};
use fleetsync_kube_source::{api_resource, Change, CrKind, KubeSource, SourceConfig, StoreReconciler};
use fleetsync_model::{Artifact, WorkKey};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Artifacts, ClaimParams, Objects, OwnWrite, WorkQueue};
use futures_util::stream::BoxStream;
use futures_util::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject};
use kube::runtime::watcher;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Starts a source on `hub`; dropping the answer stops it.
fn start(
    hub: &Hub,
    reconciler: Arc<dyn fleetsync_kube_source::CrReconciler>,
    seen: Arc<Seen>,
    config: SourceConfig,
) -> oneshot::Sender<()> {
    let source = KubeSource::new(hub.client(), reconciler).config(config).handler(seen);
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(source.run(async move { drop(stopped.await) }));
    stop
}

#[tokio::test]
async fn kube_rs_watcher_lists_then_follows_the_simulator() {
    let hub = Hub::start().await;
    hub.apply_syncset("a", "user", json!({}), &["x"]).await;
    let api: Api<DynamicObject> = hub.api(CrKind::SyncSet);
    let mut events = watcher(api.clone(), watcher::Config::default()).boxed();
    let named = |o: &DynamicObject, name: &str| o.metadata.name.as_deref() == Some(name);
    assert!(matches!(next(&mut events).await, watcher::Event::Init));
    assert!(matches!(next(&mut events).await, watcher::Event::InitApply(o) if named(&o, "a")));
    assert!(matches!(next(&mut events).await, watcher::Event::InitDone));
    hub.apply_syncset("b", "user", json!({}), &["x"]).await;
    assert!(matches!(next(&mut events).await, watcher::Event::Apply(o) if named(&o, "b")));
    api.delete("a", &DeleteParams::default()).await.expect("delete");
    assert!(matches!(next(&mut events).await, watcher::Event::Delete(o) if named(&o, "a")));
}

async fn next(
    events: &mut BoxStream<'static, Result<watcher::Event<DynamicObject>, watcher::Error>>,
) -> watcher::Event<DynamicObject> {
    let next = tokio::time::timeout(Duration::from_secs(10), events.next()).await.expect("an event in time");
    next.expect("the watcher goes on").expect("no error")
}

#[tokio::test]
async fn own_status_writes_do_not_retrigger_and_every_event_is_handled_once() {
    let hub = Hub::start().await;
    let (recorder, seen) = Recorder::pair();
    let _stop = start(&hub, recorder.clone(), seen.clone(), SourceConfig::default());
    let wait = Duration::from_secs(10);

    let first = hub.apply_syncset("s", "user", json!({}), &["x"]).await;
    eventually(wait, "gen 1 reconciled and its status written", || seen.events().len() >= 2).await;
    hub.patch_status("s", json!({"note": "someone else"})).await;
    hub.apply_syncset("s", "user", json!({"env": "prod"}), &["x"]).await; // labels only: same generation
    let changed = hub.apply_syncset("s", "user", json!({"env": "prod"}), &["x", "y"]).await;
    assert_eq!(changed.metadata.generation, Some(2));
    eventually(wait, "gen 2 reconciled and its status written", || seen.events().len() >= 6).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let gens: Vec<i64> = recorder.calls().iter().map(|c| c.generation).collect();
    assert_eq!(gens, [1, 2], "once per real spec change");
    let versions = seen.versions_once();
    let last = version(&hub.api(CrKind::SyncSet).get("s").await.expect("get"));
    assert_eq!(versions, (version(&first)..=last).collect::<Vec<_>>(), "none skipped");
    let status = hub.api(CrKind::SyncSet).get_status("s").await.expect("status").data["status"].clone();
    assert_eq!((status["observedGeneration"].as_i64(), status["note"].as_str()), (Some(2), Some("someone else")));
}

#[tokio::test]
async fn a_delayed_watch_and_a_third_party_patch_neither_repeat_nor_skip() {
    let hub = Hub::start().await;
    hub.sim
        .set_faults("hub", fleetsync_k8s_sim::Faults { watch_delay_ms: Some(3000), ..Default::default() })
        .expect("faults");
    let (recorder, seen) = Recorder::pair();
    let third_party = hub.clone();
    let patched = Arc::new(std::sync::Mutex::new(0u64));
    let record = patched.clone();
    recorder.on_first(move || async move {
        // Between our read (gen 1) and our status write: the spec changes.
        let o = third_party.apply_syncset("s", "someone-else", json!({}), &["x", "z"]).await;
        *record.lock().expect("lock") = version(&o);
    });
    let _stop = start(&hub, recorder.clone(), seen.clone(), SourceConfig::default());

    let created = hub.apply_syncset("s", "user", json!({}), &["x"]).await;
    eventually(Duration::from_secs(20), "gen 2 reconciled", || recorder.calls().len() >= 2).await;
    let calls = recorder.calls();
    let third_party_version = *patched.lock().expect("lock");
    assert_eq!((calls[0].generation, calls[0].version), (1, version(&created)));
    assert_eq!(calls[1].generation, 2);
    assert!(
        calls[1].version > third_party_version,
        "acted on the state after our own write ({}), not on the stale one ({third_party_version})",
        calls[1].version
    );
    assert_eq!(calls[1].status["observedGeneration"], 1, "the state acted on includes our status write");
    assert!(
        calls[1].watch_was_at >= calls[1].version,
        "held until the watch delivered our write ({}); the watch was at {}",
        calls[1].version,
        calls[1].watch_was_at
    );

    // Let every delayed event arrive: our second status write too.
    let api = hub.api(CrKind::SyncSet);
    let observed = || async { api.get_status("s").await.expect("status").data["status"]["observedGeneration"] == 2 };
    poll(Duration::from_secs(5), "gen 2 in status", observed).await;
    let last = version(&api.get("s").await.expect("get"));
    eventually(Duration::from_secs(10), "every event delivered", || seen.events().last().is_some_and(|e| e.2 == last))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(recorder.calls().len(), 2, "no reconcile ran twice");
    assert_eq!(seen.versions_once(), (version(&created)..=last).collect::<Vec<_>>(), "no event skipped");
    assert!(seen.events().iter().all(|e| e.0 == Change::Applied));
}

#[tokio::test]
async fn when_our_version_never_arrives_processing_resumes_after_the_timeout() {
    let hub = Hub::start().await;
    let (recorder, seen) = Recorder::pair();
    let third_party = hub.clone();
    recorder.on_first(move || async move {
        // From now on the watch delivers nothing for a minute: our write's version
        // (and the third party's change) will not come in time.
        let stalled = fleetsync_k8s_sim::Faults { watch_delay_ms: Some(60_000), ..Default::default() };
        third_party.sim.set_faults("hub", stalled).expect("faults");
        third_party.apply_syncset("s", "someone-else", json!({}), &["x", "z"]).await;
    });
    let timeout = Duration::from_millis(400);
    let config = SourceConfig { own_write_timeout: timeout, ..SourceConfig::default() };
    let _stop = start(&hub, recorder.clone(), seen.clone(), config);

    hub.apply_syncset("s", "user", json!({}), &["x"]).await;
    eventually(Duration::from_secs(5), "gen 1 reconciled", || !recorder.calls().is_empty()).await;
    let start = tokio::time::Instant::now();
    eventually(Duration::from_secs(5), "gen 2 reconciled after the timeout", || recorder.calls().len() >= 2).await;
    let waited = start.elapsed();
    assert!(waited >= timeout / 2 && waited < Duration::from_secs(3), "resumed after the timeout: {waited:?}");
    assert_eq!(recorder.calls()[1].generation, 2, "on the newest known state: our write's answer");
    tokio::time::sleep(timeout * 2).await;
    assert_eq!(recorder.calls().len(), 2, "and only once");
    assert_eq!(seen.events().len(), 1, "handlers only see what the watch delivered");
}

#[tokio::test]
async fn the_store_reconciler_puts_custom_resources_into_the_store() {
    let hub = Hub::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("s.db"), Default::default()).expect("store");
    let store = Arc::new(store);
    let seen = Arc::new(Seen::default());
    let _stop = start(&hub, Arc::new(StoreReconciler::new(store.clone())), seen.clone(), SourceConfig::default());
    let wait = Duration::from_secs(10);

    hub.apply_cluster("c1").await;
    poll(wait, "the Cluster in the store", || async { store.cluster_get(TENANT, "c1").await.expect("get").is_some() })
        .await;
    hub.apply_syncset("s", "user", json!({"env": "prod"}), &["x", "y"]).await;
    let api = hub.api(CrKind::SyncSet);
    let status = || async { api.get_status("s").await.expect("status").data["status"].clone() };
    poll(wait, "status written", || async { status().await["observedGeneration"] == 1 }).await;
    let syncset = store.syncset_get(TENANT, "s").await.expect("get").expect("in the store");
    assert_eq!(syncset.spec.resources.len(), 2, "{syncset:?}");
    assert_eq!(syncset.metadata.labels.get("env").map(String::as_str), Some("prod"));
    let status = status().await;
    assert_eq!(
        (status["keys"][0]["cluster"].as_str(), status["keys"][0]["phase"].as_str()),
        (Some("c1"), Some("Pending"))
    );
    assert!(status["error"].is_null(), "{status}");

    api.delete("s", &DeleteParams::default()).await.expect("delete");
    poll(wait, "the SyncSet gone from the store", || async {
        store.syncset_get(TENANT, "s").await.expect("get").is_none()
    })
    .await;
}

#[tokio::test]
async fn an_invalid_custom_resource_gets_its_error_in_status() {
    let hub = Hub::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open(dir.path().join("s.db"), Default::default()).expect("store"));
    let _stop =
        start(&hub, Arc::new(StoreReconciler::new(store.clone())), Arc::new(Seen::default()), SourceConfig::default());
    let api: Api<DynamicObject> = Api::namespaced_with(hub.client(), TENANT, &api_resource(CrKind::Cluster));
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "fleetsync.io/v1", "kind": "Cluster", "metadata": {"name": "c1", "namespace": TENANT},
        "spec": {"endpoint": {"http": {"url": "ftp://nope"}}},
    }))
    .expect("object");
    api.patch("c1", &kube::api::PatchParams::apply("user"), &kube::api::Patch::Apply(&bad)).await.expect("apply");
    let error = || async { api.get_status("c1").await.expect("status").data["status"]["error"].clone() };
    poll(Duration::from_secs(10), "the error in status", || async { error().await.is_string() }).await;
    let message = error().await;
    assert!(message.as_str().is_some_and(|m| m.contains("spec.endpoint.http.url")), "{message}");
    assert!(store.cluster_get(TENANT, "c1").await.expect("get").is_none());
}

/// A GitRepository and an OCIRepository kept as custom resources are sources in the
/// store; an OCIRepository's status says it waits for its first fetch, then names the
/// revision the store holds once its key stores one.
#[tokio::test]
async fn sources_kept_as_custom_resources_are_stored_and_show_their_revision() {
    let hub = Hub::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(SqliteStore::open(dir.path().join("s.db"), Default::default()).expect("store"));
    let config = SourceConfig { status_interval: Duration::from_millis(100), ..SourceConfig::default() };
    let _stop = start(&hub, Arc::new(StoreReconciler::new(store.clone())), Arc::new(Seen::default()), config);
    let wait = Duration::from_secs(10);
    let pp = kube::api::PatchParams::apply("user").force();
    for (kind, name, spec) in [
        (CrKind::GitRepository, "git", json!({"url": "https://git.example/fleet.git", "ref": {"branch": "main"}})),
        (CrKind::OCIRepository, "oci", json!({"url": "oci://registry.example/fleet", "ref": {"tag": "prod"}})),
    ] {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fleetsync.io/v1", "kind": kind.kind(), "metadata": {"name": name, "namespace": TENANT},
            "spec": spec,
        }))
        .expect("object");
        hub.api(kind).patch(name, &pp, &kube::api::Patch::Apply(&object)).await.expect("apply");
    }
    poll(wait, "both sources in the store", || async {
        store.git_repository_get(TENANT, "git").await.expect("get").is_some()
            && store.oci_repository_get(TENANT, "oci").await.expect("get").is_some()
    })
    .await;
    let api = hub.api(CrKind::OCIRepository);
    let ready = || async { api.get_status("oci").await.expect("status").data["status"].clone() };
    poll(wait, "waiting for its first fetch", || async { ready().await["conditions"][1]["reason"] == "Fetching" })
        .await;

    // The source's key stores a revision, as a fetcher does.
    let claimed = store.work_claim(ClaimParams::new("w", 10, Duration::from_secs(30))).await.expect("claim");
    let item = claimed.into_iter().find(|i| i.key == WorkKey::source(TENANT, "oci")).expect("the source's key");
    let digest = format!("sha256:{}", "b".repeat(64));
    let artifact = Artifact { revision: digest.clone(), files: Default::default() };
    let own = OwnWrite { key: item.key.clone(), fence: item.fence };
    store.source_fetched(TENANT, "oci", &artifact, own).await.expect("stored");
    poll(wait, "the revision in status", || async { ready().await["revision"] == digest.as_str() }).await;
    let status = ready().await;
    assert_eq!(
        (status["conditions"][1]["type"].as_str(), status["conditions"][1]["status"].as_str()),
        (Some("Ready"), Some("True")),
        "{status}"
    );
}
