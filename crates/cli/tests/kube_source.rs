//! `fleetsync serve --kube-source-url`: SyncSets and Clusters kept as custom resources
//! in a hub cluster (here a `fleetsync sim` cluster) reach the store, the hub applies
//! them, and their status comes back into the custom resource. Bad flags say what to
//! fix. (The source's own-write and stale-watch behaviour is tested against the sim in
//! `crates/kube-source/tests`.)

mod common;

use common::{run, stderr, Hub, SimChild};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Server-side applies `object` to the custom resource collection `plural` of
/// namespace `default` on the hub cluster at `base`.
fn apply(rt: &tokio::runtime::Runtime, base: &str, plural: &str, object: &Value) {
    let name = object["metadata"]["name"].as_str().expect("name");
    let url = format!("{base}/apis/fleetsync.io/v1/namespaces/default/{plural}/{name}?fieldManager=test&force=true");
    let response = rt.block_on(async {
        reqwest::Client::new()
            .patch(&url)
            .header("content-type", "application/apply-patch+yaml")
            .body(object.to_string())
            .send()
            .await
            .expect("reach the sim")
    });
    assert!(response.status().is_success(), "apply {name}: {}", response.status());
}

fn get(rt: &tokio::runtime::Runtime, url: &str) -> Value {
    rt.block_on(async { reqwest::get(url).await.expect("reach").json::<Value>().await.expect("json") })
}

fn eventually(what: &str, ok: impl Fn() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(30), "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn custom_resources_in_a_hub_cluster_are_applied_and_get_status() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let sim = SimChild::start(0.0);
    let hub_cluster = format!("http://{}/clusters/hub", sim.addr);
    let hub = Hub::start_flags(&["--kube-source-url", &hub_cluster, "--kube-source-own-write-timeout", "2s"]);

    let target = format!("http://{}/clusters/edge-1", sim.addr);
    let cluster = json!({"apiVersion": "fleetsync.io/v1", "kind": "Cluster",
        "metadata": {"name": "edge-1", "namespace": "default", "labels": {"env": "prod"}},
        "spec": {"endpoint": {"http": {"url": target}}}});
    let syncset = json!({"apiVersion": "fleetsync.io/v1", "kind": "SyncSet",
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"clusterSelector": {"matchLabels": {"env": "prod"}},
                 "resources": [{"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"name": "web-config", "namespace": "apps"}, "data": {"v": "1"}}]}});
    apply(&rt, &hub_cluster, "clusters", &cluster);
    apply(&rt, &hub_cluster, "syncsets", &syncset);

    // The hub stored both and applied the SyncSet to the target cluster.
    eventually("the SyncSet applied on edge-1", || {
        let items = rt.block_on(hub.client().status(&Default::default())).expect("status");
        items.iter().any(|k| k.phase == fleetsync_model::Phase::Applied)
    });
    let applied = get(&rt, &format!("{target}/api/v1/namespaces/apps/configmaps/web-config"));
    assert_eq!(applied["data"]["v"], "1", "{applied}");

    // A spec change in the hub cluster is a new generation in the store.
    let mut changed = syncset.clone();
    changed["spec"]["resources"][0]["data"]["v"] = json!("2");
    apply(&rt, &hub_cluster, "syncsets", &changed);
    eventually("generation 2 applied on edge-1", || {
        get(&rt, &format!("{target}/api/v1/namespaces/apps/configmaps/web-config"))["data"]["v"] == "2"
    });

    // The status subresource carries what the store said, and becomes Ready once
    // generation 2 is applied: a change of status, not of spec.
    eventually("status written back", || {
        let cr = get(&rt, &format!("{hub_cluster}/apis/fleetsync.io/v1/namespaces/default/syncsets/web"));
        cr["status"]["storeGeneration"] == 2
    });
    eventually("Ready once generation 2 is applied", || {
        let cr = get(&rt, &format!("{hub_cluster}/apis/fleetsync.io/v1/namespaces/default/syncsets/web"));
        let conditions = cr["status"]["conditions"].as_array().cloned().unwrap_or_default();
        conditions.iter().any(|c| {
            c["type"] == "Ready" && c["status"] == "True" && c["reason"] == "Applied" && c["observedGeneration"] == 2
        })
    });
}

#[test]
fn a_bad_kube_source_url_says_what_to_fix() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("hub.db");
    let out =
        run(&["serve", "--db", db.to_str().expect("utf-8"), "--listen", "127.0.0.1:0", "--kube-source-url", "ftp://x"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("--kube-source-url") && err.contains("scheme must be http or https"), "{err}");
}

#[test]
fn a_kubeconfig_context_that_does_not_exist_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("hub.db");
    let db = db.to_str().expect("utf-8");
    let out = run(&["serve", "--db", db, "--listen", "127.0.0.1:0", "--kube-source-context", "no-such-context"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("--kube-source") && err.contains("\"no-such-context\""), "{err}");

    let out = run(&["serve", "--db", db, "--kube-source", "--kube-source-url", "http://127.0.0.1:1"]);
    assert!(!out.status.success(), "a URL and inferred credentials are one or the other");
}
