//! The agents' routes: credentials per cluster, reports persisted once per version,
//! drift in status and a re-enqueued key, and bad batches named by field.

use crate::harness::{Answer, Api};
use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tower::ServiceExt;

/// Two clusters, and a SyncSet with one ConfigMap on both.
const FLEET: &str = r#"
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
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: cfg, namespace: app}, data: {k: v}}
"#;

async fn post(api: &Api, token: Option<&str>, body: &Value) -> Answer {
    let mut req = Request::builder().method("POST").uri("/v1/agent/reports");
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let req = req.header("content-type", "application/json");
    let resp =
        api.router.clone().oneshot(req.body(Body::from(body.to_string())).expect("request")).await.expect("infallible");
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
    Answer { status, content_type: String::new(), text: String::from_utf8_lossy(&bytes).into_owned() }
}

fn cfg(rv: &str, data: &str) -> Value {
    json!({
        "resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "app", "name": "cfg"},
        "resourceVersion": rv, "state": "present",
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "app", "resourceVersion": rv}, "data": {"k": data}},
    })
}

fn batch(cluster: &str, reports: Vec<Value>) -> Value {
    json!({"cluster": cluster, "reports": reports})
}

fn results(a: &Answer) -> Vec<String> {
    a.json()["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["result"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The agent credentials of c1 and c2.
async fn agents(api: &Api) -> (String, String) {
    (api.issue("default:agent:c1", None).await, api.issue("default:agent:c2", None).await)
}

#[tokio::test]
async fn credentials_report_for_their_own_cluster_only() {
    let api = Api::new();
    assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
    let (c1, c2) = agents(&api).await;
    let body = batch("c2", vec![cfg("1", "v")]);
    let none = post(&api, None, &body).await;
    assert_eq!(none.status, StatusCode::UNAUTHORIZED, "{}", none.text);
    assert!(none.error().contains("Authorization: Bearer"), "{}", none.text);
    let wrong = post(&api, Some("fst_nobody-has-this"), &body).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{}", wrong.text);
    let other = post(&api, Some(&c1), &body).await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.text);
    assert!(other.error().contains("is not the agent of cluster default/c2"), "{}", other.text);
    assert!(!other.text.contains(&c1), "tokens are never echoed: {}", other.text);
    let admin = api.admin_token().await;
    assert_eq!(post(&api, Some(&admin), &body).await.status, StatusCode::FORBIDDEN, "only the agent reports");
    assert_eq!(post(&api, Some(&c2), &body).await.status, StatusCode::OK);
    let resources = api.router.clone().oneshot(
        Request::get("/v1/agent/resources?cluster=c1")
            .header("authorization", format!("Bearer {c2}"))
            .body(Body::empty())
            .expect("req"),
    );
    assert_eq!(resources.await.expect("infallible").status(), StatusCode::FORBIDDEN);
}

#[tokio::test]
async fn reports_are_stored_once_and_drift_requeues() {
    let api = Api::new();
    api.apply(FLEET).await;
    let (c1, _) = agents(&api).await;
    let first = post(&api, Some(&c1), &batch("c1", vec![cfg("5", "v")])).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text);
    assert_eq!(results(&first), ["stored"]);
    let resent = post(&api, Some(&c1), &batch("c1", vec![cfg("5", "v")])).await;
    assert_eq!(results(&resent), ["duplicate"], "a resend is acknowledged, not stored again");

    let drifted = post(&api, Some(&c1), &batch("c1", vec![cfg("6", "changed")])).await;
    let d = drifted.json();
    assert_eq!(
        (d["items"][0]["result"].as_str(), d["items"][0]["drift"].as_str()),
        (Some("stored"), Some("data.k")),
        "{d}"
    );
    assert_eq!(d["requeued"], json!(["base"]));
    let status = api.get("/v1/status?cluster=c1").await.json();
    assert_eq!(status["items"][0]["drift"][0]["reason"], "data.k", "{status}");
    assert_eq!(status["items"][0]["drift"][0]["resource"]["name"], "cfg", "{status}");

    let foreign = json!({"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "app", "name": "theirs"},
        "resourceVersion": "1", "state": "deleted"});
    let deleted = json!({"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "app", "name": "cfg"},
        "resourceVersion": "9", "state": "deleted"});
    let mixed = post(&api, Some(&c1), &batch("c1", vec![foreign, cfg("4", "v"), deleted])).await;
    assert_eq!(results(&mixed), ["unmanaged", "stale", "stored"]);
    let live = api.get("/v1/live?cluster=c1").await.json();
    assert_eq!(live["items"].as_array().map(Vec::len), Some(1), "unmanaged resources are not stored: {live}");
    let item = &live["items"][0];
    assert_eq!(
        (item["state"].as_str(), item["resourceVersion"].as_str(), item["versions"].as_u64()),
        (Some("deleted"), Some("9"), Some(3))
    );
    assert_eq!(item["drift"], "deleted");
}

/// A templated SyncSet is judged against what it renders for the reporting cluster.
#[tokio::test]
async fn drift_of_a_templated_syncset_is_judged_against_its_rendering_for_the_cluster() {
    let api = Api::new();
    let templated = FLEET
        .replace("spec:\n  clusterSelector", "spec:\n  templated: true\n  clusterSelector")
        .replace("data: {k: v}", "data: {k: \"{{ cluster.name }}\"}");
    assert_eq!(api.apply(&templated).await.status, StatusCode::OK);
    let (c1, c2) = agents(&api).await;
    let held = post(&api, Some(&c1), &batch("c1", vec![cfg("5", "c1")])).await;
    assert_eq!(held.json()["items"][0].get("drift"), None, "c1 holds its own rendering: {}", held.text);
    let other = post(&api, Some(&c2), &batch("c2", vec![cfg("5", "c1")])).await;
    assert_eq!(other.json()["items"][0]["drift"], "data.k", "c2 holds c1's: {}", other.text);
}

#[tokio::test]
async fn bad_batches_name_the_field() {
    let api = Api::new();
    api.apply(FLEET).await;
    let (c1, _) = agents(&api).await;
    let cases = [
        (
            json!({"cluster": "c1", "reports": [{"resource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}, "resourceVersion": "1", "state": "gone"}]}),
            "reports[0].state",
        ),
        (
            json!({"cluster": "c1", "reports": [{"resource": {"apiVersion": "v1", "kind": "ConfigMap", "name": "x"}, "resourceVersion": "1", "state": "present"}]}),
            "reports[0].object",
        ),
        (json!({"cluster": "C_1", "reports": []}), "cluster"),
        (json!({"reports": []}), "body"),
    ];
    for (body, field) in cases {
        let a = post(&api, Some(&c1), &body).await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {}", a.text);
        assert_eq!(a.json()["field"], field, "{body}: {}", a.text);
    }
    let deleted = |name: &str| {
        json!({"resource": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "app", "name": name},
        "resourceVersion": "1", "state": "deleted"})
    };
    for name in ["x\u{0}y", "../../admin/x?confirm=yes#", "Cfg"] {
        let a = post(&api, Some(&c1), &batch("c1", vec![cfg("1", "v"), deleted(name)])).await;
        assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{name:?}: {}", a.text);
        assert_eq!(a.json()["field"], "reports[1].resource.name", "{name:?}: {}", a.text);
    }
    let garbage = api.call("POST", "/v1/agent/reports", "{not json").await;
    assert_eq!(garbage.status, StatusCode::BAD_REQUEST, "{}", garbage.text);
    let unknown = post(&api, Some(&c1), &batch("nope", vec![])).await;
    assert_eq!(unknown.status, StatusCode::FORBIDDEN, "{}", unknown.text);
}
