//! A hub started through the library for a test: a SQLite store in a temporary
//! directory, the simulated fleet as its only target, the API on a loopback port, and
//! a fleet-admin token.

#![allow(dead_code)] // each test binary uses its own part

use fleetsync_applier::ByEndpoint;
use fleetsync_hub::Hub;
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::{Document, Endpoint, Grant, WorkKey};
use fleetsync_runtime::RuntimeConfig;
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use fleetsync_testkit::{cluster_name, hive_fleet, hive_syncset, syncset_name, FleetShape};
use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// promtool, from Debian's `prometheus` package (installed as root if missing).
pub fn promtool() -> PathBuf {
    fleetsync_testkit::tools::installed("promtool", &["prometheus"])
}

/// What promtool answered, as text, with whether it passed.
pub fn report(out: &Output) -> (bool, String) {
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

pub struct TestHub {
    pub url: String,
    pub token: String,
    pub sim: SimFleet,
    pub http: reqwest::Client,
    shutdown: CancellationToken,
    running: JoinHandle<Result<(), fleetsync_hub::HubError>>,
    _dir: tempfile::TempDir,
}

impl TestHub {
    /// A hub whose simulated applies take the fleet workload's latency × `latency_scale`.
    pub async fn start(config: RuntimeConfig, latency_scale: f64) -> TestHub {
        TestHub::start_with(config, latency_scale, |hub| hub).await
    }

    /// [`TestHub::start`], with `more` setting up the hub further before it runs.
    pub async fn start_with(config: RuntimeConfig, latency_scale: f64, more: impl FnOnce(Hub) -> Hub) -> TestHub {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, _) =
            SqliteStore::open_for_work(dir.path().join("hub.db"), StoreConfig::default()).await.expect("open");
        let store: Arc<dyn Store> = Arc::new(store);
        let sim =
            SimFleet::new(SimFleetConfig { latency: LatencyModel::hive_fleet_scaled(latency_scale), fail_rate: 0.0 });
        let applier = Arc::new(ByEndpoint { simulator: Some(Arc::new(sim.clone())), ..ByEndpoint::default() });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let admin = TokenRequest { grant: Grant::Fleet, name: None, ttl: None, created_by: "test".into() };
        let (token, _) = issue(store.as_ref(), store.clock().as_ref(), admin).await.expect("a token");
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(more(Hub::new(store, applier, config).api(listener)).run(shutdown.clone()));
        TestHub { url, token, sim, http: reqwest::Client::new(), shutdown, running, _dir: dir }
    }

    /// Applies the hive fleet of `shape` (revision `r1`) through the API.
    pub async fn apply_fleet(&self, shape: FleetShape) {
        let docs = hive_fleet(shape, |_| Endpoint::Simulator {}, "r1");
        let body = docs.iter().map(Document::to_value).map(|v| v.to_string()).collect::<Vec<_>>().join("\n---\n");
        let req = self
            .http
            .post(format!("{}/v1/apply", self.url))
            .bearer_auth(&self.token)
            .header("content-type", "application/yaml");
        let resp = req.body(body).send().await.expect("reach the hub");
        assert!(resp.status().is_success(), "{}", resp.text().await.unwrap_or_default());
    }

    /// How many keys of `shape` the target holds in full at generation 1, as the target
    /// recorded its writes.
    pub fn on_target(&self, shape: FleetShape) -> usize {
        let mut done = 0;
        for c in 0..shape.clusters {
            for s in 0..shape.syncsets {
                let key = WorkKey::new("default", cluster_name(c), syncset_name(s));
                let Document::SyncSet(set) = hive_syncset(s, shape.resources, "r1") else { unreachable!("a SyncSet") };
                let all = set
                    .spec
                    .resources
                    .iter()
                    .all(|m| self.sim.generation_of(&key, &m.resource_ref().expect("ref")) == Some(1));
                done += usize::from(all);
            }
        }
        done
    }

    /// Applies YAML documents through the API.
    pub async fn apply(&self, yaml: &str) {
        let req = self.post("/v1/apply").header("content-type", "application/yaml");
        let resp = req.body(yaml.to_string()).send().await.expect("reach the hub");
        assert!(resp.status().is_success(), "{}", resp.text().await.unwrap_or_default());
    }

    /// `POST path` with the admin token.
    pub fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.post(format!("{}{path}", self.url)).bearer_auth(&self.token)
    }

    /// `GET path` with the admin token.
    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.http.get(format!("{}{path}", self.url)).bearer_auth(&self.token)
    }

    /// Cancels the hub and waits for `run` to return cleanly.
    pub async fn stop(self) {
        self.shutdown.cancel();
        let ended =
            tokio::time::timeout(Duration::from_secs(30), self.running).await.expect("run returned after the cancel");
        ended.expect("no panic").expect("a clean stop");
    }
}
