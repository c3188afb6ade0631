//! Injected failures and delays, fleet-wide and per cluster.

use crate::harness::{cm, fenced, object_uri, Sim};
use axum::http::Method;
use fleetsync_k8s_sim::{LatencyModel, SimConfig};
use std::time::Duration;
use tokio::time::Instant;

#[tokio::test]
async fn every_write_fails_at_rate_one() {
    let sim = Sim::new(SimConfig { latency: LatencyModel::zero(), fail_rate: 1.0, fail_status: 503 });
    sim.apply("c1", &cm("a", "1")).await.assert_status(503, "ServiceUnavailable");
    sim.delete(&object_uri("c1", &cm("a", "1")), None).await.assert_status(503, "ServiceUnavailable");
    let list = sim.get("/clusters/c1/api/v1/namespaces/app/configmaps").await;
    assert_eq!(list.status, 200, "reads do not fail by the rate");
    let t = sim.server.totals();
    assert_eq!((t.failures, t.applies), (2, 0));
    assert_eq!(sim.server.object_count("c1"), 0);
}

#[tokio::test]
async fn one_cluster_can_be_made_to_refuse_everything() {
    let sim = Sim::instant();
    let faults = |status: &str| format!(r#"{{"status": {status}, "delay_ms": null}}"#);
    let set = sim.call(Method::PUT, "/_sim/clusters/c1/faults", &[], faults("403")).await;
    assert_eq!(set.status, 200, "{}", set.body);
    assert_eq!(sim.get("/_sim/clusters/c1/faults").await.body["status"], 403);
    sim.apply("c1", &cm("a", "1")).await.assert_status(403, "Forbidden");
    sim.get(&object_uri("c1", &cm("a", "1"))).await.assert_status(403, "Forbidden");
    assert_eq!(sim.get("/clusters/c1/api/v1").await.status, 200, "discovery still answers");
    assert_eq!(sim.apply("c2", &cm("a", "1")).await.status, 201, "other clusters are fine");

    sim.call(Method::PUT, "/_sim/clusters/c1/faults", &[], faults("null")).await;
    assert_eq!(sim.apply("c1", &cm("a", "1")).await.status, 201);
    sim.call(Method::PUT, "/_sim/clusters/c1/faults", &[], faults("200")).await.assert_status(400, "BadRequest");
    sim.call(Method::PUT, "/_sim/clusters/c1/faults", &[], "not json").await.assert_status(400, "BadRequest");
}

#[tokio::test(start_paused = true)]
async fn a_hang_outlasts_the_client_and_leaves_no_request_in_flight() {
    let sim = Sim::instant();
    let hang = r#"{"delay_ms": 60000}"#;
    assert_eq!(sim.call(Method::PUT, "/_sim/clusters/c1/faults", &[], hang).await.status, 200);
    let obj = fenced(cm("a", "1"), "t/c1/s", 1, 1, 0);
    let start = Instant::now();
    let timed_out = tokio::time::timeout(Duration::from_secs(5), sim.apply("c1", &obj)).await;
    assert!(timed_out.is_err(), "the client gave up");
    assert_eq!(start.elapsed(), Duration::from_secs(5));

    sim.call(Method::PUT, "/_sim/clusters/c1/faults", &[], "{}").await;
    assert_eq!(sim.apply("c1", &fenced(cm("a", "1"), "t/c1/s", 2, 1, 0)).await.status, 201);
    assert_eq!(sim.server.totals().overlaps, 0, "the abandoned request ended when it was dropped");
}

#[tokio::test(start_paused = true)]
async fn requests_wait_the_latency_model() {
    let sim = Sim::new(SimConfig::default());
    let start = Instant::now();
    assert_eq!(sim.apply("c1", &cm("a", "1")).await.status, 201);
    let took = start.elapsed();
    assert!((Duration::from_millis(200)..=Duration::from_millis(1600)).contains(&took), "{took:?}");

    let scaled = Sim::new(SimConfig { latency: LatencyModel::hive_fleet_scaled(0.01), ..SimConfig::default() });
    let start = Instant::now();
    assert_eq!(scaled.get(&object_uri("c1", &cm("a", "1"))).await.status, 404);
    let took = start.elapsed();
    assert!((Duration::from_millis(2)..=Duration::from_millis(16)).contains(&took), "{took:?}");
}

/// A cluster of its own speed (a hub's API server beside the fleet's).
#[tokio::test(start_paused = true)]
async fn a_cluster_latency_replaces_the_model() {
    let sim = Sim::new(SimConfig::default());
    let set = sim.call(Method::PUT, "/_sim/clusters/hub/faults", &[], r#"{"latency_ms": 10}"#).await;
    assert_eq!(set.status, 200, "{}", set.body);
    let t0 = Instant::now();
    assert_eq!(sim.apply("hub", &cm("a", "1")).await.status, 201);
    assert_eq!(t0.elapsed(), Duration::from_millis(10));
    let t1 = Instant::now();
    sim.apply("c1", &cm("a", "1")).await;
    assert!(t1.elapsed() >= Duration::from_millis(200), "the model's latency elsewhere");
}
