//! A simulator behind its router, and helpers to build the requests an applier sends.

use axum::body::{to_bytes, Body};
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use fleetsync_k8s_sim::{LatencyModel, SimConfig, SimServer};
use serde_json::{json, Value};
use tower::ServiceExt;

pub const APPLY: &str = "application/apply-patch+yaml";

pub struct Sim {
    pub server: SimServer,
    router: Router,
}

#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
}

impl Answer {
    /// Asserts a Kubernetes `Status` failure with this code and reason.
    pub fn assert_status(&self, code: u16, reason: &str) {
        assert_eq!(self.status.as_u16(), code, "{}", self.body);
        assert_eq!(self.body["kind"], "Status", "{}", self.body);
        assert_eq!(self.body["status"], "Failure", "{}", self.body);
        assert_eq!(self.body["code"], code, "{}", self.body);
        assert_eq!(self.body["reason"], reason, "{}", self.body);
    }

    pub fn message(&self) -> &str {
        self.body["message"].as_str().unwrap_or_default()
    }

    pub fn resource_version(&self) -> &str {
        self.body["metadata"]["resourceVersion"].as_str().unwrap_or_default()
    }

    pub fn generation(&self) -> i64 {
        self.body["metadata"]["generation"].as_i64().unwrap_or(-1)
    }
}

impl Sim {
    pub fn new(config: SimConfig) -> Self {
        let server = SimServer::new(config);
        let router = server.router();
        Self { server, router }
    }

    /// No latency, no failures.
    pub fn instant() -> Self {
        Self::new(SimConfig { latency: LatencyModel::zero(), ..SimConfig::default() })
    }

    pub async fn call(&self, method: Method, uri: &str, headers: &[(&str, &str)], body: impl Into<Body>) -> Answer {
        let mut req = Request::builder().method(method).uri(uri);
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let req = req.body(body.into()).expect("request");
        let resp = self.router.clone().oneshot(req).await.expect("infallible");
        let status = resp.status();
        let bytes = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
        };
        Answer { status, body }
    }

    pub async fn get(&self, uri: &str) -> Answer {
        self.call(Method::GET, uri, &[], Body::empty()).await
    }

    /// Server-side apply of `obj` to cluster `cluster`, as field manager `test`, forced.
    pub async fn apply(&self, cluster: &str, obj: &Value) -> Answer {
        let uri = format!("{}?fieldManager=test&force=true", object_uri(cluster, obj));
        self.call(Method::PATCH, &uri, &[("content-type", APPLY)], obj.to_string()).await
    }

    pub async fn delete(&self, uri: &str, fence: Option<(&str, i64)>) -> Answer {
        let fence_text = fence.map(|(_, f)| f.to_string()).unwrap_or_default();
        let headers: Vec<(&str, &str)> = match fence {
            Some((key, _)) => vec![("x-fleetsync-key", key), ("x-fleetsync-fence", &fence_text)],
            None => vec![],
        };
        self.call(Method::DELETE, uri, &headers, Body::empty()).await
    }
}

/// The URL of the object `obj` (a ConfigMap, Namespace or Deployment) on `cluster`.
pub fn object_uri(cluster: &str, obj: &Value) -> String {
    let name = obj["metadata"]["name"].as_str().expect("name");
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or("default");
    match obj["kind"].as_str().expect("kind") {
        "Namespace" => format!("/clusters/{cluster}/api/v1/namespaces/{name}"),
        "ConfigMap" => format!("/clusters/{cluster}/api/v1/namespaces/{ns}/configmaps/{name}"),
        "Deployment" => format!("/clusters/{cluster}/apis/apps/v1/namespaces/{ns}/deployments/{name}"),
        other => panic!("no path for {other}"),
    }
}

pub fn cm(name: &str, value: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "app"},
        "data": {"value": value},
    })
}

/// `obj` with the fleetsync annotations an applier adds.
pub fn fenced(mut obj: Value, key: &str, fence: i64, generation: i64, index: usize) -> Value {
    obj["metadata"]["annotations"] = json!({
        "fleetsync.io/key": key,
        "fleetsync.io/fence": fence.to_string(),
        "fleetsync.io/generation": generation.to_string(),
        "fleetsync.io/index": index.to_string(),
    });
    obj
}
