//! A simulator behind its router, and helpers to build the requests an applier sends.

use axum::body::{to_bytes, Body, BodyDataStream};
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use fleetsync_k8s_sim::{LatencyModel, SimConfig, SimServer};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::VecDeque;
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

    /// Opens a watch (`uri` carries the query); answers its status and its events.
    pub async fn watch(&self, uri: &str) -> Watch {
        let req = Request::builder().uri(uri).body(Body::empty()).expect("request");
        let resp = self.router.clone().oneshot(req).await.expect("infallible");
        Watch {
            status: resp.status(),
            body: resp.into_body().into_data_stream(),
            buffer: Vec::new(),
            lines: VecDeque::new(),
        }
    }

    /// Sets a cluster's faults through the control endpoint.
    pub async fn set_faults(&self, cluster: &str, faults: Value) {
        let uri = format!("/_sim/clusters/{cluster}/faults");
        let set = self.call(Method::PUT, &uri, &[], faults.to_string()).await;
        assert_eq!(set.status, 200, "{}", set.body);
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
        "SyncSet" => format!("/clusters/{cluster}/apis/fleetsync.io/v1/namespaces/{ns}/syncsets/{name}"),
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

/// An open watch: its newline-delimited events, one at a time.
pub struct Watch {
    pub status: StatusCode,
    body: BodyDataStream,
    buffer: Vec<u8>,
    lines: VecDeque<Value>,
}

impl Watch {
    /// The next event; `None` when the stream ended.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(v) = self.lines.pop_front() {
                return Some(v);
            }
            let chunk = self.body.next().await?.expect("watch body");
            self.buffer.extend_from_slice(&chunk);
            while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                self.lines.push_back(serde_json::from_slice(&line).expect("one JSON event per line"));
            }
        }
    }

    /// The next event's type, the name of its object and its resource version.
    pub async fn next_brief(&mut self) -> (String, String, u64) {
        let e = self.next().await.expect("an event");
        let meta = &e["object"]["metadata"];
        let rv = meta["resourceVersion"].as_str().and_then(|v| v.parse().ok()).unwrap_or(0);
        (e["type"].as_str().unwrap_or("").into(), meta["name"].as_str().unwrap_or("").into(), rv)
    }
}

pub fn syncset(name: &str, value: &str) -> Value {
    json!({
        "apiVersion": "fleetsync.io/v1",
        "kind": "SyncSet",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {"clusterNames": ["c1"], "resources": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": value}}]},
    })
}
