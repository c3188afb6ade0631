//! Health without an agent (`spec.health`): the hub reads back the Deployment a run
//! applied and waits for it to be ready. A stand-in for the clusters' controllers marks
//! the Deployments of some clusters rolled out (through the status subresource, as a
//! controller does); one cluster's never is. Judged from what the clusters hold.

mod common;

use common::{block_on, stderr, stdout, wait_for, Hub, SimChild};
use fleetsync_model::{Phase, RolloutPhase, RolloutStatus};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

const CLUSTERS: [&str; 3] = ["c1", "c2", "c3"];

fn fleet(sim: &SimChild, image: &str) -> String {
    let mut yaml: String = CLUSTERS
        .iter()
        .map(|c| {
            let ring = if *c == "c1" { "canary" } else { "main" };
            format!(
                "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {c}, labels: {{env: prod, ring: {ring}}}}}\n\
                 spec: {{endpoint: {{http: {{url: 'http://{}/clusters/{c}'}}}}}}\n---\n",
                sim.addr
            )
        })
        .collect();
    yaml += &format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: web}}\nspec:\n  \
         clusterSelector: {{matchLabels: {{env: prod}}}}\n  health: {{timeout: 3s, interval: 200ms}}\n  \
         rollout:\n    steps: [{{selector: {{matchLabels: {{ring: canary}}}}}}, {{percent: 100}}]\n    maxFailures: 0\n    \
         progressDeadline: 5s\n    onFailure: Pause\n  resources:\n    - apiVersion: apps/v1\n      kind: Deployment\n      \
         metadata: {{name: web, namespace: apps}}\n      spec:\n        replicas: 2\n        \
         selector: {{matchLabels: {{app: web}}}}\n        template:\n          metadata: {{labels: {{app: web}}}}\n          \
         spec: {{containers: [{{name: web, image: \"{image}\"}}]}}\n"
    );
    yaml
}

fn deployment_url(sim: &str, cluster: &str) -> String {
    format!("http://{sim}/clusters/{cluster}/apis/apps/v1/namespaces/apps/deployments/web")
}

/// The Deployment on `cluster`, if it holds one.
async fn deployment(http: &reqwest::Client, sim: &str, cluster: &str) -> Option<Value> {
    let resp = http.get(deployment_url(sim, cluster)).send().await.expect("reach the sim");
    match resp.status().as_u16() {
        404 => None,
        200 => Some(resp.json().await.expect("JSON")),
        other => panic!("GET deployment on {cluster}: {other}"),
    }
}

/// The clusters' Deployment controller, for the clusters in `healthy`: every ~50 ms, a
/// Deployment whose spec it has not observed yet is reported rolled out.
fn controller(
    sim: &SimChild,
    healthy: Arc<Mutex<BTreeSet<String>>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    let sim = sim.addr.clone();
    std::thread::spawn(move || {
        block_on(async {
            let http = reqwest::Client::new();
            while !stop.load(Ordering::SeqCst) {
                let clusters: Vec<String> =
                    healthy.lock().unwrap_or_else(PoisonError::into_inner).iter().cloned().collect();
                for c in clusters {
                    let Some(d) = deployment(&http, &sim, &c).await else { continue };
                    let generation = d["metadata"]["generation"].as_i64().unwrap_or(0);
                    if d["status"]["observedGeneration"].as_i64() == Some(generation) {
                        continue;
                    }
                    let status = json!({"status": {"observedGeneration": generation, "replicas": 2,
                        "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2}});
                    let resp = http
                        .patch(format!("{}/status", deployment_url(&sim, &c)))
                        .header("content-type", "application/merge-patch+json")
                        .body(status.to_string())
                        .send()
                        .await
                        .expect("patch status");
                    assert!(resp.status().is_success(), "status of {c}: {}", resp.status());
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
    })
}

fn image_on(sim: &SimChild, cluster: &str) -> Option<String> {
    let d = block_on(async { deployment(&reqwest::Client::new(), &sim.addr, cluster).await })?;
    d["spec"]["template"]["spec"]["containers"][0]["image"].as_str().map(str::to_string)
}

#[test]
fn a_deployment_that_never_becomes_ready_fails_its_key_after_the_timeout_and_stops_the_rollout() {
    let sim = SimChild::start(0.0);
    let hub = Hub::start();
    let healthy = Arc::new(Mutex::new(CLUSTERS.iter().map(|c| c.to_string()).collect::<BTreeSet<_>>()));
    let stop = Arc::new(AtomicBool::new(false));
    let controller = controller(&sim, healthy.clone(), stop.clone());

    // Generation 1 (not staged): Applied on each cluster once its Deployment rolled
    // out, not before.
    hub.apply(&fleet(&sim, "web:1"));
    wait_for("every key Applied at generation 1", Duration::from_secs(30), || {
        let items = common::status_items(&hub);
        items.len() == 3 && items.iter().all(|s| s.phase == Phase::Applied && s.observed_generation == 1)
    });
    for c in CLUSTERS {
        let d = block_on(async { deployment(&reqwest::Client::new(), &sim.addr, c).await }).expect("a Deployment");
        assert_eq!(d["status"]["observedGeneration"], d["metadata"]["generation"], "{c} was rolled out: {d}");
    }

    // Generation 2 never rolls out on the canary: its key fails after the 3 s timeout
    // with the reason, and the rollout stops before the other clusters.
    healthy.lock().unwrap_or_else(PoisonError::into_inner).remove("c1");
    let started = Instant::now();
    hub.apply(&fleet(&sim, "web:2"));
    wait_for("the canary holding web:2", Duration::from_secs(30), || image_on(&sim, "c1").as_deref() == Some("web:2"));
    wait_for("the canary's key to fail", Duration::from_secs(30), || {
        common::status_items(&hub)
            .iter()
            .any(|s| s.key.cluster == "c1" && matches!(s.phase, Phase::Failed | Phase::Parked))
    });
    assert!(started.elapsed() >= Duration::from_secs(3), "not before the timeout: {:?}", started.elapsed());
    let c1 = common::status_items(&hub).into_iter().find(|s| s.key.cluster == "c1").expect("c1's key");
    let error = c1.last_error.unwrap_or_default();
    assert!(
        error.starts_with("not ready after 3s: apps/v1/Deployment apps/web: Deployment: observedGeneration"),
        "{error}"
    );
    assert_eq!(c1.observed_generation, 1, "generation 2 is not Applied there");
    let rollout = || {
        let out = hub.cli(&["rollout", "status", "web", "-o", "json"]);
        assert!(out.status.success(), "rollout status: {}", stderr(&out));
        serde_json::from_str::<RolloutStatus>(&stdout(&out)).expect("rollout status JSON")
    };
    wait_for("the rollout to stop", Duration::from_secs(30), || rollout().phase == RolloutPhase::Failed);
    let stopped = rollout();
    let reason = stopped.reason.unwrap_or_default();
    // Failed (retrying) or running again when the deadline came: either way the reason
    // is the health check's.
    let for_health = reason.contains("; c1: ") && reason.contains("not ready after 3s: apps/v1/Deployment apps/web");
    assert!(stopped.step == 0 && for_health, "the canary's step, for health: {reason}");
    std::thread::sleep(Duration::from_secs(1));
    for c in ["c2", "c3"] {
        assert_eq!(image_on(&sim, c).as_deref(), Some("web:1"), "{c} never got the revision that failed");
    }
    stop.store(true, Ordering::SeqCst);
    controller.join().expect("the controller");
}
