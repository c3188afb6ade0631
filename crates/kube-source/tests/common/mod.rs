//! A hub cluster (`fleetsync sim` on loopback), kube-rs clients for it, and a
//! reconciler and a handler that record what they were given.

#![allow(dead_code)]

use async_trait::async_trait;
use fleetsync_k8s_sim::{LatencyModel, SimConfig, SimServer};
use fleetsync_kube_source::{
    api_resource, Change, CrKind, CrReconciler, ReconcileError, SourceEvent, SourceEventHandler,
};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Client, Config};
use serde_json::{json, Value};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;

pub const TENANT: &str = "team";

/// A simulated hub cluster served on loopback; clones share it, and it stops when
/// the last one is dropped.
#[derive(Clone)]
pub struct Hub {
    pub sim: SimServer,
    pub url: String,
    _stop: Arc<oneshot::Sender<()>>,
}

impl Hub {
    pub async fn start() -> Self {
        let sim = SimServer::new(SimConfig { latency: LatencyModel::zero(), ..SimConfig::default() });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/clusters/hub", listener.local_addr().expect("addr"));
        let (stop, stopped) = oneshot::channel::<()>();
        let server = sim.clone();
        tokio::spawn(async move { server.serve(listener, async move { drop(stopped.await) }).await });
        Self { sim, url, _stop: Arc::new(stop) }
    }

    pub fn client(&self) -> Client {
        Client::try_from(Config::new(self.url.parse().expect("url"))).expect("client")
    }

    pub fn api(&self, kind: CrKind) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), TENANT, &api_resource(kind))
    }

    /// Applies a SyncSet as field manager `manager` (forced); answers the object.
    pub async fn apply_syncset(&self, name: &str, manager: &str, labels: Value, resources: &[&str]) -> DynamicObject {
        let resources: Vec<Value> = resources
            .iter()
            .map(|r| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": r}}))
            .collect();
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fleetsync.io/v1", "kind": "SyncSet",
            "metadata": {"name": name, "namespace": TENANT, "labels": labels},
            "spec": {"clusterNames": ["c1"], "resources": resources},
        }))
        .expect("object");
        let pp = PatchParams::apply(manager).force();
        self.api(CrKind::SyncSet).patch(name, &pp, &Patch::Apply(&obj)).await.expect("apply")
    }

    pub async fn apply_cluster(&self, name: &str) -> DynamicObject {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "fleetsync.io/v1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"endpoint": {"simulator": {}}},
        }))
        .expect("object");
        let pp = PatchParams::apply("user").force();
        self.api(CrKind::Cluster).patch(name, &pp, &Patch::Apply(&obj)).await.expect("apply")
    }

    /// Someone else writes the status.
    pub async fn patch_status(&self, name: &str, status: Value) -> DynamicObject {
        let patch = Patch::Merge(json!({"status": status}));
        self.api(CrKind::SyncSet).patch_status(name, &PatchParams::default(), &patch).await.expect("status")
    }
}

pub fn version(o: &DynamicObject) -> u64 {
    o.metadata.resource_version.as_deref().and_then(|v| v.parse().ok()).unwrap_or(0)
}

/// One reconcile: the object's name, generation, version and status, and the
/// newest version the handlers had been given when it ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    pub generation: i64,
    pub version: u64,
    pub status: Value,
    pub watch_was_at: u64,
}

/// Something that happens during the first reconcile.
type Interference = Box<dyn FnOnce() -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

/// Records every reconcile; on the first one, optionally runs an interference
/// (a third party writing between our read and our status write).
pub struct Recorder {
    pub calls: Mutex<Vec<Call>>,
    on_first: Mutex<Option<Interference>>,
    /// The handler of the same source, to tell what the watch had delivered.
    seen: Arc<Seen>,
}

impl Recorder {
    /// A recorder, and the handler it reads the watch's progress from.
    pub fn pair() -> (Arc<Recorder>, Arc<Seen>) {
        let seen = Arc::new(Seen::default());
        let recorder = Recorder { calls: Mutex::default(), on_first: Mutex::default(), seen: seen.clone() };
        (Arc::new(recorder), seen)
    }

    /// Runs `f` during the first reconcile, before its status is written.
    pub fn on_first<F: Future<Output = ()> + Send + 'static>(&self, f: impl FnOnce() -> F + Send + 'static) {
        *self.on_first.lock().expect("lock") = Some(Box::new(move || Box::pin(f())));
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().expect("lock").clone()
    }
}

#[async_trait]
impl CrReconciler for Recorder {
    async fn reconcile(&self, _kind: CrKind, object: &DynamicObject) -> Result<Value, ReconcileError> {
        let call = Call {
            name: object.metadata.name.clone().unwrap_or_default(),
            generation: object.metadata.generation.unwrap_or(0),
            version: version(object),
            status: object.data.get("status").cloned().unwrap_or(Value::Null),
            watch_was_at: self.seen.events().last().map_or(0, |e| e.2),
        };
        self.calls.lock().expect("lock").push(call);
        let first = self.on_first.lock().expect("lock").take();
        if let Some(interfere) = first {
            interfere().await;
        }
        Ok(json!({"reconciled": true}))
    }
}

/// Records every event handed to handlers: (change, name, version).
#[derive(Default)]
pub struct Seen {
    pub events: Mutex<Vec<(Change, String, u64)>>,
}

impl Seen {
    pub fn events(&self) -> Vec<(Change, String, u64)> {
        self.events.lock().expect("lock").clone()
    }

    /// The versions seen, asserting that none came twice.
    pub fn versions_once(&self) -> Vec<u64> {
        let versions: Vec<u64> = self.events().iter().map(|e| e.2).collect();
        let mut sorted = versions.clone();
        sorted.dedup();
        assert_eq!(sorted, versions, "each version once, in order");
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "increasing: {versions:?}");
        versions
    }
}

#[async_trait]
impl SourceEventHandler for Seen {
    async fn handle(&self, event: &SourceEvent) {
        let name = event.object.metadata.name.clone().unwrap_or_default();
        self.events.lock().expect("lock").push((event.change, name, version(&event.object)));
    }
}

/// Waits until `check` holds (polling), or panics with `what` after `limit`.
pub async fn eventually(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    poll(limit, what, || std::future::ready(check())).await;
}

/// Polls an async check until it holds, or panics with `what` after `limit`.
pub async fn poll<F: Future<Output = bool>>(limit: Duration, what: &str, mut check: impl FnMut() -> F) {
    let start = tokio::time::Instant::now();
    while !check().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
