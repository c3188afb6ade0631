//! A test harness: the router over a real SQLite store in a temporary directory,
//! called with `oneshot` (no port).

use axum::body::{to_bytes, Body, BodyDataStream};
use axum::http::{Request, StatusCode};
use axum::Router;
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_server::access::Access;
use fleetsync_server::{router, AppState, EventFeed, QueueMetrics, Watches};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{EventLog, Store, StoreConfig};
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
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
    /// A fleet-admin token, issued at the first request: what [`Api::call`] sends.
    admin: tokio::sync::OnceCell<String>,
    /// The store behind the router, for what the API does not do (claims, trims).
    pub store: Arc<dyn Store>,
    /// The router's watch settings; `close()` ends its watch streams.
    pub watches: Watches,
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

    /// The body read as one of the API's wire types, as `fleetsync_api::Client` reads it.
    pub fn typed<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not a {} ({e}): {}", std::any::type_name::<T>(), self.text))
    }

    /// The `error` message of a JSON error body.
    pub fn error(&self) -> String {
        self.json()["error"].as_str().unwrap_or_else(|| panic!("no error message: {}", self.text)).to_string()
    }
}

impl Api {
    pub fn new() -> Self {
        Self::with_watches(Watches::default())
    }

    pub fn with_watches(watches: Watches) -> Self {
        Self::with(watches, |_| {})
    }

    /// The API with access settings changed by `configure`.
    pub fn with_access(configure: impl FnOnce(&mut Access)) -> Self {
        Self::with(Watches::default(), |state| configure(&mut state.access))
    }

    /// The API with what each tenant may hold.
    pub fn with_quotas(quotas: fleetsync_store::Quotas) -> Self {
        Self::with(Watches::default(), |state| state.quotas = Arc::new(quotas))
    }

    /// The API counting a cluster stale after `stale_after` without a sign of life.
    pub fn with_stale_after(stale_after: Duration) -> Self {
        Self::with(Watches::default(), |state| state.stale_after = stale_after)
    }

    fn with(watches: Watches, configure: impl FnOnce(&mut AppState)) -> Self {
        Self::with_feed(watches, EventFeed::new, configure)
    }

    /// The API whose watches follow the event feed `feed` makes of the store.
    pub fn with_feed(
        watches: Watches,
        feed: impl FnOnce(Arc<dyn EventLog>) -> EventFeed,
        configure: impl FnOnce(&mut AppState),
    ) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open store"));
        let mut registry = Registry::default();
        let queue_metrics = QueueMetrics::register(&mut registry);
        let events = feed(store.clone());
        let mut state = AppState {
            watches: watches.clone(),
            events,
            ..AppState::new(store.clone(), Arc::new(registry), queue_metrics)
        };
        configure(&mut state);
        Api { router: router(state), store, watches, admin: tokio::sync::OnceCell::new(), _dir: dir }
    }

    /// Starts a GET whose body is read as it comes (a watch): status, content type,
    /// and the body's lines.
    pub async fn stream(&self, uri: &str) -> (StatusCode, String, Lines) {
        let token = self.admin_token().await;
        self.stream_as(Some(&token), uri).await
    }

    /// [`Api::stream`] with `token` (none: anonymous).
    pub async fn stream_as(&self, token: Option<&str>, uri: &str) -> (StatusCode, String, Lines) {
        let mut req = Request::builder().method("GET").uri(uri);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        let req = req.body(Body::empty()).expect("request");
        let resp = self.router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let content_type =
            resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        (status, content_type, Lines { body: resp.into_body().into_data_stream(), buf: Vec::new() })
    }

    /// A fleet-admin token of this API's store.
    pub async fn admin_token(&self) -> String {
        self.admin.get_or_init(|| self.issue("fleet-admin", None)).await.clone()
    }

    /// Issues a token granting `grant` (`team-a:editor`, `fleet-admin`, `a:agent:c1`),
    /// expiring after `ttl` if given.
    pub async fn issue(&self, grant: &str, ttl: Option<Duration>) -> String {
        let grant = fleetsync_model::Grant::parse(grant).expect("grant");
        let req = TokenRequest { grant, name: None, ttl, created_by: "test".into() };
        issue(self.store.as_ref(), self.store.clock().as_ref(), req).await.expect("issue a token").0
    }

    /// Issues a token named `name` granting `grant`.
    pub async fn issue_named(&self, grant: &str, name: &str) -> String {
        let grant = fleetsync_model::Grant::parse(grant).expect("grant");
        let req = TokenRequest { grant, name: Some(name.into()), ttl: None, created_by: "test".into() };
        issue(self.store.as_ref(), self.store.clock().as_ref(), req).await.expect("issue a token").0
    }

    /// A request as the fleet-admin; a POST body is sent as YAML to `/v1/apply` and as
    /// JSON elsewhere.
    pub async fn call(&self, method: &str, uri: &str, body: impl Into<Body>) -> Answer {
        let token = self.admin_token().await;
        let content_type = if method != "POST" {
            None
        } else if uri.starts_with("/v1/apply") {
            Some("application/yaml")
        } else {
            Some("application/json")
        };
        self.call_as(Some(&token), method, uri, content_type, body).await
    }

    /// A request with `token` (none: anonymous) and `content_type`.
    pub async fn call_as(
        &self,
        token: Option<&str>,
        method: &str,
        uri: &str,
        content_type: Option<&str>,
        body: impl Into<Body>,
    ) -> Answer {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        if let Some(c) = content_type {
            req = req.header("content-type", c);
        }
        self.send(req.body(body.into()).expect("request")).await
    }

    /// Sends a request as it is built.
    pub async fn send(&self, req: Request<Body>) -> Answer {
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
    router(AppState::new(store, Arc::new(registry), queue_metrics))
}

/// How long a test waits for a line before it fails (a bound on failure, not a delay:
/// lines normally come within milliseconds).
pub const PATIENCE: Duration = Duration::from_secs(20);

/// The lines of a streamed body (newline-delimited JSON).
pub struct Lines {
    body: BodyDataStream,
    buf: Vec<u8>,
}

impl Lines {
    /// The next chunk the server sent, as its lines; `None` when the stream ended.
    /// Panics if nothing comes within [`PATIENCE`].
    pub async fn chunk(&mut self) -> Option<Vec<Value>> {
        use futures_util::StreamExt;
        let next = tokio::time::timeout(PATIENCE, self.body.next()).await.expect("a chunk within the patience");
        let bytes = next?.expect("body chunk");
        self.buf.extend_from_slice(&bytes);
        assert_eq!(self.buf.last(), Some(&b'\n'), "a chunk ends with a whole line");
        let lines = std::mem::take(&mut self.buf);
        Some(
            lines
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| serde_json::from_slice(l).expect("a JSON line"))
                .collect(),
        )
    }

    /// The lines of the next chunk, which must be there.
    pub async fn expect_chunk(&mut self) -> Vec<Value> {
        self.chunk().await.expect("the stream goes on")
    }
}
