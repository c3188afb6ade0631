//! A test harness: the router over a real SQLite store in a temporary directory,
//! called with `oneshot` (no port).

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use fleetsync_server::{router, AppState, QueueMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::sync::Arc;
use tower::ServiceExt;

/// Two clusters labelled `env=prod` and one SyncSet selecting them: 2 keys.
pub const FLEET: &str = r#"
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: c1, labels: {env: prod}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: c2, labels: {env: prod}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: base}
spec:
  clusterSelector: {matchLabels: {env: prod}}
  resources:
    - {apiVersion: v1, kind: Namespace, metadata: {name: app}}
"#;

pub struct Api {
    pub router: Router,
    _dir: tempfile::TempDir,
}

pub struct Answer {
    pub status: StatusCode,
    pub content_type: String,
    pub text: String,
}

impl Answer {
    /// The body as JSON; every answer of the API is JSON except `/metrics`.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text))
    }

    /// The `error` message of a JSON error body.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_else(|| panic!("no error message: {}", self.text)).to_string()
    }
}

impl Api {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open store");
        Api { router: over(Arc::new(store)), _dir: dir }
    }

    pub async fn call(&self, method: &str, uri: &str, body: impl Into<Body>) -> Answer {
        let req = Request::builder().method(method).uri(uri).body(body.into()).expect("request");
        let resp = self.router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let content_type =
            resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        let bytes = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
        Answer { status, content_type, text: String::from_utf8_lossy(&bytes).into_owned() }
    }

    pub async fn get(&self, uri: &str) -> Answer {
        self.call("GET", uri, Body::empty()).await
    }

    pub async fn apply(&self, yaml: &str) -> Answer {
        self.call("POST", "/v1/apply", yaml.to_string()).await
    }
}

/// The router over any store, with a fresh registry.
pub fn over(store: Arc<dyn Store>) -> Router {
    let mut registry = Registry::default();
    let queue_metrics = QueueMetrics::register(&mut registry);
    router(AppState { store, registry: Arc::new(registry), queue_metrics })
}
