//! Discovery documents in the shapes kube-rs `Discovery` parses.

use crate::harness::Sim;
use fleetsync_k8s_sim::SimConfig;
use serde_json::Value;
use std::time::Duration;

fn resource<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["resources"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {list}"))
}

#[tokio::test]
async fn core_versions_and_resources() {
    let sim = Sim::instant();
    let versions = sim.get("/clusters/c1/api").await;
    assert_eq!(versions.status, 200);
    assert_eq!(versions.body["kind"], "APIVersions");
    assert_eq!(versions.body["versions"], serde_json::json!(["v1"]));

    let core = sim.get("/clusters/c1/api/v1").await.body;
    assert_eq!((core["kind"].as_str(), core["groupVersion"].as_str()), (Some("APIResourceList"), Some("v1")));
    let ns = resource(&core, "namespaces");
    assert_eq!(
        (ns["namespaced"].as_bool(), ns["kind"].as_str(), ns["singularName"].as_str()),
        (Some(false), Some("Namespace"), Some("namespace"))
    );
    for (name, kind) in [
        ("configmaps", "ConfigMap"),
        ("secrets", "Secret"),
        ("services", "Service"),
        ("serviceaccounts", "ServiceAccount"),
    ] {
        let r = resource(&core, name);
        assert_eq!((r["namespaced"].as_bool(), r["kind"].as_str()), (Some(true), Some(kind)));
        let verbs: Vec<&str> = r["verbs"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
        for v in ["get", "list", "patch", "delete"] {
            assert!(verbs.contains(&v), "{name} lacks {v}");
        }
    }
}

#[tokio::test]
async fn groups_and_their_resources() {
    let sim = Sim::instant();
    let groups = sim.get("/clusters/c1/apis").await.body;
    assert_eq!(groups["kind"], "APIGroupList");
    let apps = groups["groups"].as_array().into_iter().flatten().find(|g| g["name"] == "apps").expect("apps");
    assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
    assert_eq!(apps["versions"][0]["version"], "v1");

    let apps = sim.get("/clusters/c1/apis/apps/v1").await.body;
    assert_eq!(apps["groupVersion"], "apps/v1");
    assert_eq!(resource(&apps, "deployments")["kind"], "Deployment");
    let rbac = sim.get("/clusters/c1/apis/rbac.authorization.k8s.io/v1").await.body;
    assert_eq!(resource(&rbac, "clusterroles")["namespaced"], false);
    assert_eq!(resource(&rbac, "rolebindings")["namespaced"], true);
    let fleet = sim.get("/clusters/c1/apis/fleetsync.io/v1").await.body;
    assert_eq!(resource(&fleet, "syncsets")["kind"], "SyncSet");
    assert_eq!(resource(&fleet, "clusters")["namespaced"], true);
}

#[tokio::test]
async fn unknown_paths_and_cluster_names_are_not_found() {
    let sim = Sim::instant();
    sim.get("/clusters/c1/apis/batch/v1").await.assert_status(404, "NotFound");
    sim.get("/clusters/c1/nothing/here").await.assert_status(404, "NotFound");
    sim.get("/clusters/Not_A_Label/api").await.assert_status(404, "NotFound");
    sim.get("/elsewhere").await.assert_status(404, "NotFound");
    assert_eq!(sim.get("/healthz").await.status, 200);
}

#[tokio::test(start_paused = true)]
async fn discovery_is_answered_without_latency() {
    let sim = Sim::new(SimConfig::default());
    let start = tokio::time::Instant::now();
    for path in ["/api", "/api/v1", "/apis", "/apis/apps/v1", "/version"] {
        assert_eq!(sim.get(&format!("/clusters/c1{path}")).await.status, 200, "{path}");
    }
    assert_eq!(start.elapsed(), Duration::ZERO);
}
