//! A rough measure of the handler's cost per apply (no HTTP, no latency). Run with
//! `cargo test -p fleetsync-k8s-sim --release --test api -- --ignored --nocapture`.

use crate::harness::{fenced, object_uri, Sim};
use serde_json::json;
use std::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn applies_per_second_through_the_router() {
    let sim = Sim::instant();
    let filler = "x".repeat(900);
    let (clusters, keys, resources) = (100, 20, 10);
    let start = Instant::now();
    let mut handles = Vec::new();
    let sim = std::sync::Arc::new(sim);
    for c in 0..clusters {
        let (sim, filler) = (sim.clone(), filler.clone());
        handles.push(tokio::spawn(async move {
            let cluster = format!("cluster-{c:04}");
            for k in 0..keys {
                for r in 0..resources {
                    let obj = json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": format!("syncset-{k:03}-{r:03}"), "namespace": "fleet-apps"},
                        "data": {"revision": "r1", "payload": filler},
                    });
                    let obj = fenced(obj, &format!("default/{cluster}/syncset-{k:03}"), 1, 1, r);
                    let answer = sim.apply(&cluster, &obj).await;
                    assert_eq!(answer.status, 201, "{}", object_uri(&cluster, &obj));
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("join");
    }
    let n = clusters * keys * resources;
    let took = start.elapsed();
    println!(
        "{n} applies in {took:?}: {:.0}/s, {:.1} µs each",
        n as f64 / took.as_secs_f64(),
        took.as_micros() as f64 / n as f64
    );
}
