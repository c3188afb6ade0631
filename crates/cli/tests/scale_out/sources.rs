//! Four workers on PostgreSQL read a SyncSet's manifests from an OCI registry
//! (`docker-registry` on loopback): each new digest is pulled once, as the registry's
//! own access log shows, also when the busiest worker is killed with SIGKILL in the
//! middle of the rollout the new digest started, and every cluster ends holding it.

use crate::fixture::{block_on, serial, Fixture, Sim, Worker};
use fleetsync_model::{parse_documents, Document, WorkKey};
use fleetsync_store::{Objects, WorkQueue};
use fleetsync_testkit::cluster_name;
use fleetsync_testkit::registry::Registry;
use serde_json::Value;
use std::time::{Duration, Instant};

const CLUSTERS: usize = 40;

#[test]
fn four_workers_pull_each_digest_once_also_when_one_is_killed_mid_rollout() {
    let _one_at_a_time = serial();
    block_on(pulls_with_a_kill());
}

fn config_map(name: &str, value: &str) -> Vec<u8> {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: apps}}\ndata: {{v: \"{value}\"}}\n")
        .into_bytes()
}

/// The clusters on the sim, the OCIRepository `fleet` (tag `prod`, polled every 10s),
/// and the SyncSet `app` reading its `apps/`, staged by 25 %, 50 % and 100 %.
fn fleet(sim: &Sim, registry: &Registry) -> Vec<Document> {
    let mut yaml = String::new();
    for i in 0..CLUSTERS {
        let name = cluster_name(i);
        yaml += &format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{env: prod}}}}\n\
             spec: {{endpoint: {{http: {{url: '{}/clusters/{name}'}}}}}}\n---\n",
            sim.url
        );
    }
    yaml += &format!(
        "apiVersion: fleetsync.io/v1\nkind: OCIRepository\nmetadata: {{name: fleet}}\n\
         spec: {{url: '{}', ref: {{tag: prod}}, insecure: true, interval: 10s}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterSelector: {{matchLabels: {{env: prod}}}}\n  \
         resourceApplyMode: Upsert\n  sourceRef: {{kind: OCIRepository, name: fleet, path: apps}}\n  \
         rollout:\n    steps: [{{percent: 25}}, {{percent: 50}}, {{percent: 100}}]\n    minSuccessTime: 1s\n",
        registry.url("fleet")
    );
    parse_documents(&yaml).expect("the fleet's YAML")
}

/// The generation each cluster's `app` resources are at on the sim (the lowest of
/// them; 0 if it holds none).
async fn generations(sim: &Sim) -> Vec<i64> {
    let keys = sim.get("/_sim/keys").await;
    (0..CLUSTERS)
        .map(|i| {
            let key = WorkKey::new("default", cluster_name(i), "app").to_string();
            let held: Vec<i64> =
                keys[&key].as_object().map(|r| r.values().filter_map(Value::as_i64).collect()).unwrap_or_default();
            if held.len() == 2 {
                held.into_iter().min().unwrap_or(0)
            } else {
                0
            }
        })
        .collect()
}

async fn wait_all_at(fx: &Fixture, sim: &Sim, generation: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let at = generations(sim).await;
        if at.iter().all(|g| *g == generation) {
            return;
        }
        assert!(Instant::now() < deadline, "not every cluster reached {generation}: {at:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn pulls_with_a_kill() {
    let registry = Registry::start();
    registry
        .push("fleet", "prod", &[("apps/a.yaml", &config_map("a", "1")), ("apps/b.yaml", &config_map("b", "1"))])
        .await;
    let sim = Sim::start(0.2);
    let fx = Fixture::new("scale_sources").await;
    fx.store.objects_apply(fleet(&sim, &registry)).await.expect("apply the fleet");
    fx.analyze().await;
    let knobs = [
        "--lease-ttl",
        "2s",
        "--renew-every",
        "500ms",
        "--member-ttl",
        "1s",
        "--max-in-flight",
        "16",
        "--egress-allow",
        "127.0.0.0/8",
    ];
    let mut workers: Vec<Worker> = (1..=4).map(|i| Worker::start(&fx, &format!("src-{i:02}"), &knobs)).collect();

    // The first digest: generation 2 of the SyncSet (it waited for the source at 1).
    wait_all_at(&fx, &sim, 2, Duration::from_secs(60)).await;
    assert_eq!(registry.blob_pulls("fleet"), 1, "{:?}", registry.requests());

    // The tag moves; the source is asked at once, and the new digest rolls out.
    registry
        .push("fleet", "prod", &[("apps/a.yaml", &config_map("a", "2")), ("apps/b.yaml", &config_map("b", "2"))])
        .await;
    fx.store.work_retry_by(&WorkKey::source("default", "fleet"), None).await.expect("fetch now");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let at = generations(&sim).await;
        let moved = at.iter().filter(|g| **g == 3).count();
        if moved > 0 && moved < CLUSTERS {
            break;
        }
        assert!(moved < CLUSTERS, "the rollout ended before a worker could be killed in it: {at:?}");
        assert!(Instant::now() < deadline, "the new digest never started rolling out: {at:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Mid-rollout: the busiest worker dies without a word, and a new one starts.
    let leases = fx.lease_counts().await;
    let victim =
        (0..workers.len()).max_by_key(|&i| leases.get(&workers[i].id).copied().unwrap_or(0)).expect("a worker");
    workers[victim].kill9();
    workers.push(Worker::start(&fx, "src-05", &knobs));

    wait_all_at(&fx, &sim, 3, Duration::from_secs(90)).await;
    assert_eq!(registry.blob_pulls("fleet"), 2, "one pull per digest: {:?}", registry.requests());

    // Polls at the interval ask for the tag's digest and pull nothing.
    let asked = |r: &Registry| r.requests().iter().filter(|q| q.starts_with("HEAD /v2/fleet/manifests/prod")).count();
    let before = asked(&registry);
    let deadline = Instant::now() + Duration::from_secs(30);
    while asked(&registry) == before {
        assert!(Instant::now() < deadline, "the source was not polled: {:?}", registry.requests());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(registry.blob_pulls("fleet"), 2, "{:?}", registry.requests());
    assert_eq!(generations(&sim).await, vec![3; CLUSTERS]);
}
