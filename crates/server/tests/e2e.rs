//! End to end through the HTTP API: documents go in by `POST /v1/apply`, the real
//! runtime applies them to the simulated fleet from a real SQLite store, and status
//! comes back by `GET /v1/status`. A change lands while keys are being applied; the
//! fleet must end at the latest generation everywhere, with no key ever running twice
//! at once and every run in order.

use axum::body::{to_bytes, Body};
use axum::http::{Request, StatusCode};
use axum::Router;
use fleetsync_applier::ByEndpoint;
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::Grant;
use fleetsync_model::{Document, Endpoint};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_server::access::tokens::{issue, TokenRequest};
use fleetsync_server::{router, AppState, QueueMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use fleetsync_testkit::{hive_fleet, hive_syncset, FleetShape};
use prometheus_client::registry::Registry;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

async fn call(app: &Router, method: &str, uri: &str, body: String) -> (StatusCode, Value) {
    let req = Request::builder().method(method).uri(uri).body(Body::from(body)).expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let status = resp.status();
    let bytes = to_bytes(resp.into_body(), usize::MAX).await.expect("body");
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// Documents as one multi-document text (JSON is YAML).
fn text(docs: &[Document]) -> String {
    docs.iter().map(|d| d.to_value().to_string()).collect::<Vec<_>>().join("\n---\n")
}

async fn apply(app: &Router, docs: &[Document]) {
    let (status, body) = call(app, "POST", "/v1/apply", text(docs)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

async fn status(app: &Router) -> Vec<Value> {
    let (code, body) = call(app, "GET", "/v1/status", String::new()).await;
    assert_eq!(code, StatusCode::OK, "{body}");
    body["items"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_during_apply_converges_to_latest_through_the_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open"));
    let mut registry = Registry::default();
    let metrics = RuntimeMetrics::register(&mut registry);
    let queue_metrics = QueueMetrics::register(&mut registry);
    let admin = TokenRequest { grant: Grant::Fleet, name: None, ttl: None, created_by: "test".into() };
    let (token, _) = issue(store.as_ref(), store.clock().as_ref(), admin).await.expect("a token");
    // Every request as the fleet-admin, its body (if any) as YAML.
    let app = router(AppState::new(store.clone(), Arc::new(registry), queue_metrics)).layer(
        axum::middleware::map_request(move |mut req: Request<Body>| {
            let bearer = format!("Bearer {token}").parse().expect("header value");
            async move {
                req.headers_mut().insert("authorization", bearer);
                req.headers_mut().insert("content-type", axum::http::HeaderValue::from_static("application/yaml"));
                req
            }
        }),
    );

    // ~25 ms per apply: a key of 5 resources runs for ~130 ms.
    let sim = SimFleet::new(SimFleetConfig { latency: LatencyModel::hive_fleet_scaled(0.1), fail_rate: 0.0 });
    let applier = Arc::new(ByEndpoint { simulator: Some(Arc::new(sim.clone())), ..ByEndpoint::default() });
    let config = RuntimeConfig { max_in_flight: 64, ..RuntimeConfig::default() };
    let shutdown = CancellationToken::new();
    let workers = tokio::spawn(Runtime::new(store.clone(), applier, config, metrics).run(shutdown.clone()));

    let shape = FleetShape { clusters: 10, syncsets: 4, resources: 5 };
    apply(&app, &hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await;

    // Change every SyncSet while keys are applying (64 in flight of 40 keys: all are).
    let start = Instant::now();
    while !status(&app).await.iter().any(|k| k["phase"] == "Applying") {
        assert!(start.elapsed() < Duration::from_secs(10), "nothing started applying");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let changed: Vec<Document> = (0..shape.syncsets).map(|i| hive_syncset(i, shape.resources, "r2")).collect();
    apply(&app, &changed).await;

    let start = Instant::now();
    let items = loop {
        let items = status(&app).await;
        if items.iter().all(|k| k["phase"] == "Applied") {
            break items;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "did not converge: {items:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(items.len(), shape.keys());
    for k in &items {
        assert_eq!((k["generation"].as_i64(), k["observedGeneration"].as_i64()), (Some(2), Some(2)), "{k}");
    }
    // What is on the clusters: generation 2 of every resource of every key.
    for c in 0..shape.clusters {
        for s in 0..shape.syncsets {
            let key = fleetsync_model::WorkKey::new(
                "default",
                fleetsync_testkit::cluster_name(c),
                fleetsync_testkit::syncset_name(s),
            );
            let Document::SyncSet(ss) = hive_syncset(s, shape.resources, "r2") else { unreachable!() };
            for m in &ss.spec.resources {
                assert_eq!(sim.generation_of(&key, &m.resource_ref().expect("ref")), Some(2), "{key}");
            }
        }
    }
    let t = sim.totals();
    assert_eq!((t.overlaps, t.order_violations, t.fenced), (0, 0, 0), "no key ran twice at once: {t:?}");
    assert!(t.applies > shape.applies() as u64, "the change re-ran keys that were mid-apply: {t:?}");

    // The cluster roll-up and metrics agree.
    let (code, body) = call(&app, "GET", "/v1/status/clusters/cluster-00003", String::new()).await;
    assert_eq!((code, body["condition"]["reason"].as_str()), (StatusCode::OK, Some("Converged")), "{body}");
    let req = Request::builder().uri("/metrics").body(Body::empty()).expect("request");
    let resp = app.clone().oneshot(req).await.expect("infallible");
    let metrics =
        String::from_utf8(to_bytes(resp.into_body(), usize::MAX).await.expect("body").to_vec()).expect("utf-8");
    assert!(metrics.contains("fleetsync_keys{phase=\"Applied\"} 40"), "{metrics}");
    assert!(metrics.contains("fleetsync_apply_concurrency_limit 64"), "{metrics}");

    shutdown.cancel();
    workers.await.expect("join").expect("runtime");
}
