//! Sync mode leaves nothing behind: whatever any run of a key may have applied — also
//! a run that failed midway or whose hub was killed — is deleted once the SyncSet no
//! longer lists it, or once the key is no longer wanted. Judged from what the target
//! holds (a `fleetsync sim` child asked over its Kubernetes API), not from status.

mod common;

use common::{block_on, stderr, wait_for, Hub, SimChild};
use fleetsync_model::{KeyStatus, Phase};
use serde_json::Value;
use std::time::{Duration, Instant};

/// The seven resources of the SyncSet, as (name, API path under the cluster).
const RESOURCES: [(&str, &str); 7] = [
    ("ns", "/api/v1/namespaces/apps"),
    ("sa", "/api/v1/namespaces/apps/serviceaccounts/sa"),
    ("cm-a", "/api/v1/namespaces/apps/configmaps/cm-a"),
    ("cm-b", "/api/v1/namespaces/apps/configmaps/cm-b"),
    ("sec", "/api/v1/namespaces/apps/secrets/sec"),
    ("role", "/apis/rbac.authorization.k8s.io/v1/namespaces/apps/roles/role"),
    ("dep", "/apis/apps/v1/namespaces/apps/deployments/dep"),
];

fn manifest(name: &str) -> &'static str {
    match name {
        "ns" => "    - {apiVersion: v1, kind: Namespace, metadata: {name: apps}}\n",
        "sa" => "    - {apiVersion: v1, kind: ServiceAccount, metadata: {name: sa, namespace: apps}}\n",
        "cm-a" => "    - {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-a, namespace: apps}, data: {k: a}}\n",
        "cm-b" => "    - {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-b, namespace: apps}, data: {k: b}}\n",
        "sec" => "    - {apiVersion: v1, kind: Secret, metadata: {name: sec, namespace: apps}, stringData: {k: s}}\n",
        "role" => "    - {apiVersion: rbac.authorization.k8s.io/v1, kind: Role, metadata: {name: role, namespace: apps}, rules: []}\n",
        "dep" => concat!(
            "    - {apiVersion: apps/v1, kind: Deployment, metadata: {name: dep, namespace: apps}, spec: {replicas: 1, ",
            "selector: {matchLabels: {app: dep}}, template: {metadata: {labels: {app: dep}}, ",
            "spec: {containers: [{name: c, image: nginx}]}}}}\n"
        ),
        other => panic!("no resource {other}"),
    }
}

fn cluster_yaml(sim: &SimChild, env: &str) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c1, labels: {{env: {env}}}}}\n\
         spec: {{endpoint: {{http: {{url: 'http://{}/clusters/c1'}}}}}}\n",
        sim.addr
    )
}

fn syncset_yaml(resources: &[&str]) -> String {
    let mut y = String::from(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: app}\n\
         spec:\n  clusterSelector: {matchLabels: {env: prod}}\n  resourceApplyMode: Sync\n  resources:\n",
    );
    for r in resources {
        y.push_str(manifest(r));
    }
    y
}

/// The resources the simulated cluster holds now, asked one by one over its API.
fn on_cluster(sim: &SimChild) -> Vec<&'static str> {
    block_on(async {
        let http = reqwest::Client::new();
        let mut held = Vec::new();
        for (name, path) in RESOURCES {
            let url = format!("http://{}/clusters/c1{path}", sim.addr);
            let status = http.get(url).send().await.expect("reach the sim").status().as_u16();
            assert!(status == 200 || status == 404, "GET {path}: {status}");
            if status == 200 {
                held.push(name);
            }
        }
        held
    })
}

/// The names of the objects the simulator records as applied by a key; read from its
/// report, which injected delays do not slow down (unlike [`on_cluster`]).
fn recorded(sim: &SimChild) -> Vec<String> {
    block_on(async {
        let url = format!("http://{}/_sim/keys", sim.addr);
        let keys: Value = reqwest::get(url).await.expect("reach the sim").json().await.expect("JSON");
        let resources =
            keys.as_object().into_iter().flat_map(|k| k.values()).filter_map(Value::as_object).flat_map(|r| r.keys());
        resources.filter_map(|r| r.rsplit('/').next().map(str::to_string)).collect()
    })
}

/// Sets the simulated cluster's injected faults (`{}` for none).
fn faults(sim: &SimChild, faults: Value) {
    block_on(async {
        let url = format!("http://{}/_sim/clusters/c1/faults", sim.addr);
        let resp = reqwest::Client::new().put(url).json(&faults).send().await.expect("reach the sim");
        assert!(resp.status().is_success(), "setting faults: {}", resp.status());
    })
}

/// The key's status item, if it exists.
fn key_status(hub: &Hub) -> Option<KeyStatus> {
    common::status_items(hub).into_iter().find(|s| s.key.syncset == "app")
}

fn phase_is(hub: &Hub, phase: Phase, generation: i64) -> bool {
    key_status(hub).is_some_and(|s| s.phase == phase && s.observed_generation >= generation)
}

const ALL: [&str; 7] = ["ns", "sa", "cm-a", "cm-b", "sec", "role", "dep"];

/// The target refuses `sec`: the first run stops after `cm-b` and the key parks.
fn parked_after_cm_b() -> (SimChild, Hub) {
    let sim = SimChild::start(0.0);
    faults(&sim, serde_json::json!({"refuse_applies": ["sec"]}));
    let hub = Hub::start_flags(&["--backoff-base", "50ms", "--max-attempts", "2"]);
    hub.apply(&format!("{}---\n{}", cluster_yaml(&sim, "prod"), syncset_yaml(&ALL)));
    wait_for("the key to park", Duration::from_secs(30), || key_status(&hub).is_some_and(|s| s.phase == Phase::Parked));
    assert_eq!(on_cluster(&sim), ["ns", "sa", "cm-a", "cm-b"], "the run stopped at the refused Secret");
    (sim, hub)
}

#[test]
fn a_failed_run_s_objects_are_deleted_when_the_syncset_drops_them() {
    let (sim, hub) = parked_after_cm_b();
    hub.apply(&syncset_yaml(&["ns", "sa", "cm-a", "role", "dep"]));
    wait_for("generation 2 to apply", Duration::from_secs(30), || phase_is(&hub, Phase::Applied, 2));
    assert_eq!(on_cluster(&sim), ["ns", "sa", "cm-a", "role", "dep"], "cm-b, applied by the failed run, is gone");
}

#[test]
fn a_failed_run_s_objects_are_deleted_when_the_cluster_is_no_longer_selected() {
    let (sim, hub) = parked_after_cm_b();
    hub.apply(&cluster_yaml(&sim, "dev"));
    wait_for("the key's removal", Duration::from_secs(30), || key_status(&hub).is_none());
    assert_eq!(on_cluster(&sim), Vec::<&str>::new(), "everything the failed run applied is gone");
}

/// kill -9 of the hub in the middle of a key's first run: the restarted hub runs the
/// key again at once (not after the lease's 30 s), and what the killed run applied is
/// deleted when the SyncSet drops it, though no run of the key has succeeded since.
#[test]
fn a_killed_run_s_objects_are_deleted_and_the_restarted_hub_resumes_at_once() {
    let sim = SimChild::start(0.0);
    faults(&sim, serde_json::json!({"delay_ms": 300}));
    let mut hub = Hub::start_flags(&["--lease-ttl", "30s", "--backoff-base", "50ms", "--max-attempts", "2"]);
    hub.apply(&format!("{}---\n{}", cluster_yaml(&sim, "prod"), syncset_yaml(&ALL)));
    wait_for("the first run to apply cm-a", Duration::from_secs(30), || recorded(&sim).iter().any(|r| r == "cm-a"));
    assert!(!recorded(&sim).iter().any(|r| r == "role"), "the run is still going (role is two applies after cm-a)");
    // The restarted hub's run stops at `dep`, so no run of the key succeeds.
    faults(&sim, serde_json::json!({"refuse_applies": ["dep"]}));
    let killed = Instant::now();
    hub.restart(false);
    wait_for("the interrupted key to run again", Duration::from_secs(10), || on_cluster(&sim).contains(&"role"));
    println!("the interrupted key ran again {:?} after kill -9 (restart included)", killed.elapsed());
    wait_for("the resumed run to fail at dep", Duration::from_secs(30), || {
        key_status(&hub).is_some_and(|s| s.phase == Phase::Parked)
    });

    hub.apply(&syncset_yaml(&["ns", "sa", "cm-b", "sec", "role"]));
    wait_for("generation 2 to apply", Duration::from_secs(30), || phase_is(&hub, Phase::Applied, 2));
    assert_eq!(on_cluster(&sim), ["ns", "sa", "cm-b", "sec", "role"], "cm-a, applied by the killed run, is gone");
}

/// The take-back at start is safe because one process runs work on a SQLite file: a
/// second `serve` on the same file is refused, and says why.
#[test]
fn a_second_hub_on_the_same_sqlite_file_is_refused() {
    let hub = Hub::start();
    let db = hub.dir.path().join("hub.db");
    let out = common::run(&["serve", "--listen", "127.0.0.1:0", "--db", db.to_str().expect("utf-8")]);
    assert!(!out.status.success(), "a second hub must not start");
    assert!(stderr(&out).contains("another fleetsync process runs work on"), "{}", stderr(&out));
    assert!(hub.cli(&["get", "clusters"]).status.success(), "the first hub goes on");
}
