//! The hub under test: a loopback server over a SQLite store, with the runtime
//! applying to the simulated fleet.

use crate::browser::wait_until;
use crate::{PATIENCE, SHAPE};
use fleetsync_applier::egress::EgressPolicy;
use fleetsync_applier::kubernetes::{KubeApplier, KubeConfig};
use fleetsync_applier::ByEndpoint;
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::{Document, Grant};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_server::{serve, AppState, QueueMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A hub on a loopback port over a SQLite store, with the runtime applying to the
/// simulated fleet.
pub(crate) struct Hub {
    pub(crate) base: String,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) admin: String,
    pub(crate) http: reqwest::Client,
    pub(crate) shutdown: CancellationToken,
    pub(crate) tasks: Vec<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Hub {
    pub(crate) async fn start() -> Hub {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open"));
        let mut registry = Registry::default();
        let metrics = RuntimeMetrics::register(&mut registry);
        let queue_metrics = QueueMetrics::register(&mut registry);
        let state = AppState::new(store.clone(), Arc::new(registry), queue_metrics);
        let sim = SimFleet::new(SimFleetConfig { latency: LatencyModel::hive_fleet_scaled(0.02), fail_rate: 0.0 });
        // The cluster at 127.0.0.1:9 is reached through the Kubernetes applier (nothing
        // listens there: it is unreachable, with the cause).
        let egress = EgressPolicy::parse(&["127.0.0.1"], &[]).expect("rule");
        let kube =
            KubeApplier::new(KubeConfig { request_timeout: Duration::from_secs(5), egress, ..KubeConfig::default() });
        let applier = Arc::new(ByEndpoint {
            simulator: Some(Arc::new(sim)),
            http: Some(Arc::new(kube)),
            ..ByEndpoint::default()
        });
        let shutdown = CancellationToken::new();
        let runtime = Runtime::new(store.clone(), applier, RuntimeConfig::default(), metrics);
        let workers = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                runtime.run(shutdown).await.expect("the runtime");
            })
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let base = format!("http://127.0.0.1:{}", listener.local_addr().expect("address").port());
        let server = {
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                serve(listener, state, None, async move { shutdown.cancelled().await }).await.expect("serve");
            })
        };
        let admin = TokenRequest { grant: Grant::Fleet, name: None, ttl: None, created_by: "test".into() };
        let (admin, _) = issue(store.as_ref(), store.clock().as_ref(), admin).await.expect("a token");
        Hub { base, store, admin, http: reqwest::Client::new(), shutdown, tasks: vec![workers, server], _dir: dir }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn token(&self, grant: Grant) -> String {
        let req = TokenRequest { grant, name: None, ttl: None, created_by: "test".into() };
        issue(self.store.as_ref(), self.store.clock().as_ref(), req).await.expect("a token").0
    }

    pub(crate) async fn apply(&self, yaml: &str) {
        let resp = self
            .http
            .post(self.url("/v1/apply"))
            .bearer_auth(&self.admin)
            .header("content-type", "application/yaml")
            .body(yaml.to_string())
            .send()
            .await
            .expect("apply");
        let status = resp.status();
        assert!(status.is_success(), "apply: {status}: {}", resp.text().await.unwrap_or_default());
    }

    pub(crate) async fn get(&self, path: &str) -> Value {
        let resp = self.http.get(self.url(path)).bearer_auth(&self.admin).send().await.expect("GET");
        assert!(resp.status().is_success(), "GET {path}: {}", resp.status());
        resp.json().await.expect("JSON")
    }

    pub(crate) async fn post(&self, path: &str) -> Value {
        let resp = self.http.post(self.url(path)).bearer_auth(&self.admin).send().await.expect("POST");
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        assert!(status.is_success(), "POST {path}: {status}: {body}");
        serde_json::from_str(&body).expect("JSON")
    }

    /// The sums of every SyncSet's summary in `tenant`, as the page shows them.
    pub(crate) async fn totals(&self, tenant: &str) -> Value {
        let mut total = (0, 0);
        let mut phases = serde_json::Map::new();
        let sets = self.get(&format!("/v1/syncsets?tenant={tenant}&limit=100")).await;
        for set in sets["items"].as_array().expect("items") {
            let name = set["metadata"]["name"].as_str().expect("name");
            let s = self.get(&format!("/v1/status/syncsets/{name}?tenant={tenant}&limit=1")).await;
            total.0 += s["summary"]["total"].as_u64().expect("total");
            total.1 += s["summary"]["atGeneration"].as_u64().expect("atGeneration");
            for (phase, n) in s["summary"]["phases"].as_object().expect("phases") {
                let sum = phases.get(phase).and_then(Value::as_u64).unwrap_or(0) + n.as_u64().unwrap_or(0);
                phases.insert(phase.clone(), json!(sum));
            }
        }
        // Clusters by condition, rolled up the long way from every key.
        let mut by_cluster: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for k in self.get(&format!("/v1/status?tenant={tenant}")).await["items"].as_array().expect("items") {
            by_cluster
                .entry(k["cluster"].as_str().unwrap_or("").into())
                .or_default()
                .push(k["phase"].as_str().unwrap_or("").into());
        }
        let mut clusters = json!({"ready": 0, "progressing": 0, "degraded": 0});
        for phases in by_cluster.values() {
            let condition = if phases.iter().any(|p| p == "Failed" || p == "Parked") {
                "degraded"
            } else if phases.iter().all(|p| p == "Applied") {
                "ready"
            } else {
                "progressing"
            };
            clusters[condition] = json!(clusters[condition].as_u64().unwrap_or(0) + 1);
        }
        // Staleness is a matter of time the keys do not show: the API's own count.
        clusters["stale"] = self.get(&format!("/v1/status/summary?tenant={tenant}")).await["clusters"]["stale"].clone();
        json!({"total": total.0, "atGeneration": total.1, "phases": phases, "clusters": clusters})
    }

    /// Waits until every reachable key has applied (the unreachable one keeps failing).
    pub(crate) async fn settle(&self) {
        let want = SHAPE.keys() + 1;
        let settled = wait_until(PATIENCE, || async {
            let all = self.get("/v1/status?tenant=default").await;
            let items = all["items"].as_array().cloned().unwrap_or_default();
            let applied = items.iter().filter(|k| k["phase"] == "Applied").count();
            let b = self.get("/v1/status?tenant=b").await;
            items.len() == want && applied == want - 1 && b["items"][0]["phase"] == "Applied"
        })
        .await;
        assert!(settled, "the fleet did not settle: {}", self.get("/v1/status?tenant=default").await);
    }

    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            task.await.expect("join");
        }
    }
}

/// Documents as one multi-document text (JSON is YAML).
pub(crate) fn text(docs: &[Document]) -> String {
    docs.iter().map(|d| d.to_value().to_string()).collect::<Vec<_>>().join("\n---\n")
}
