//! fleetsync's custom resources and their `status` subresource: status writes move
//! the resource version but never the generation; spec changes move both.

use crate::harness::{cm, object_uri, syncset, Sim};
use axum::http::Method;
use serde_json::json;

const MERGE: &str = "application/merge-patch+json";

#[tokio::test]
async fn status_writes_leave_the_generation_and_spec_writes_move_it() {
    let sim = Sim::instant();
    let uri = object_uri("c1", &syncset("s", "x"));
    let created = sim.apply("c1", &syncset("s", "x")).await;
    assert_eq!((created.status.as_u16(), created.generation()), (201, 1), "{}", created.body);

    let status_uri = format!("{uri}/status");
    let patch = json!({"status": {"phase": "Applied", "observedGeneration": 1}});
    let patched = sim.call(Method::PATCH, &status_uri, &[("content-type", MERGE)], patch.to_string()).await;
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!((patched.generation(), patched.body["status"]["phase"].as_str()), (1, Some("Applied")));
    let version = |a: &crate::harness::Answer| a.resource_version().parse::<u64>().unwrap_or(0);
    assert!(version(&patched) > version(&created), "{} after {}", patched.body, created.body);
    let merged = json!({"status": {"phase": null, "message": "ok"}});
    let merged = sim.call(Method::PATCH, &status_uri, &[("content-type", MERGE)], merged.to_string()).await;
    assert_eq!(merged.body["status"], json!({"observedGeneration": 1, "message": "ok"}), "a merge patch");

    let mut with_status = syncset("s", "x");
    with_status["status"] = json!({"phase": "Forged"});
    let same = sim.apply("c1", &with_status).await;
    assert_eq!(same.resource_version(), merged.resource_version(), "status is not written through the resource");
    assert_eq!(same.body["status"]["message"], "ok");

    let changed = sim.apply("c1", &syncset("s", "y")).await;
    assert_eq!(changed.generation(), 2);
    assert_eq!(changed.body["status"]["message"], "ok", "status survives a spec change");
    assert_eq!(sim.get(&status_uri).await.generation(), 2);
}

#[tokio::test]
async fn a_status_put_with_a_stale_version_conflicts() {
    let sim = Sim::instant();
    let uri = format!("{}/status", object_uri("c1", &syncset("s", "x")));
    let created = sim.apply("c1", &syncset("s", "x")).await;
    let mut put = created.body.clone();
    put["status"] = json!({"phase": "Applied"});
    let json = [("content-type", "application/json")];
    let ok = sim.call(Method::PUT, &uri, &json, put.to_string()).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    let stale = sim.call(Method::PUT, &uri, &json, put.to_string()).await;
    stale.assert_status(409, "Conflict");
    assert!(stale.message().contains("the object has been modified"), "{}", stale.message());
}

#[tokio::test]
async fn status_is_only_served_where_it_exists() {
    let sim = Sim::instant();
    sim.apply("c1", &cm("a", "1")).await;
    let body = json!({"status": {}}).to_string();
    let cm_status = format!("{}/status", object_uri("c1", &cm("a", "1")));
    sim.call(Method::PATCH, &cm_status, &[("content-type", MERGE)], body.clone()).await.assert_status(404, "NotFound");
    let missing = format!("{}/status", object_uri("c1", &syncset("nope", "x")));
    sim.call(Method::PATCH, &missing, &[("content-type", MERGE)], body.clone()).await.assert_status(404, "NotFound");
    sim.apply("c1", &syncset("s", "x")).await;
    let status = format!("{}/status", object_uri("c1", &syncset("s", "x")));
    let json_patch = [("content-type", "application/json-patch+json")];
    sim.call(Method::PATCH, &status, &json_patch, "[]").await.assert_status(415, "UnsupportedMediaType");
    sim.call(Method::DELETE, &status, &[], "").await.assert_status(405, "MethodNotAllowed");
    let scale = format!("{}/scale", object_uri("c1", &syncset("s", "x")));
    sim.get(&scale).await.assert_status(404, "NotFound");
}
