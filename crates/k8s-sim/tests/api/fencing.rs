//! Stale tokens are refused, and every request is recorded for the verdict.

use crate::harness::{cm, fenced, object_uri, Sim};
use fleetsync_k8s_sim::{LatencyModel, SimConfig};
use std::time::Duration;

const KEY: &str = "t1/c1/s1";

#[tokio::test]
async fn a_stale_fence_is_refused_and_counted() {
    let sim = Sim::instant();
    assert_eq!(sim.apply("c1", &fenced(cm("a", "new"), KEY, 5, 2, 0)).await.status, 201);
    let stale = sim.apply("c1", &fenced(cm("a", "old"), KEY, 4, 1, 0)).await;
    stale.assert_status(409, "Conflict");
    assert!(stale.message().contains("stale fencing token"), "{}", stale.message());
    let uri = object_uri("c1", &cm("a", ""));
    assert_eq!(sim.get(&uri).await.body["data"]["value"], "new", "the stale apply did not land");
    sim.delete(&uri, Some((KEY, 3))).await.assert_status(409, "Conflict");
    assert_eq!(sim.get(&uri).await.status, 200, "the stale delete did not land");
    assert_eq!(sim.server.totals().fenced, 2);
    // Unfenced objects, and other keys, are not affected.
    assert_eq!(sim.apply("c1", &cm("b", "1")).await.status, 201);
    assert_eq!(sim.apply("c1", &fenced(cm("c", "1"), "t1/c1/s2", 1, 1, 0)).await.status, 201);
    assert_eq!(sim.delete(&uri, Some((KEY, 6))).await.status, 200);
}

#[tokio::test(start_paused = true)]
async fn overlapping_requests_of_one_key_are_counted() {
    let sim = Sim::new(SimConfig::default());
    let (a, b) = (fenced(cm("a", "1"), KEY, 1, 1, 0), fenced(cm("b", "1"), KEY, 1, 1, 1));
    let (ra, rb) = tokio::join!(sim.apply("c1", &a), sim.apply("c1", &b));
    assert_eq!((ra.status.as_u16(), rb.status.as_u16()), (201, 201));
    assert_eq!(sim.server.totals().overlaps, 1);
    // Two keys of one cluster may run together.
    let other = fenced(cm("c", "1"), "t1/c1/s2", 1, 1, 0);
    let next = fenced(cm("a", "2"), KEY, 2, 2, 0);
    tokio::join!(sim.apply("c1", &next), sim.apply("c1", &other));
    assert_eq!(sim.server.totals().overlaps, 1);
}

#[tokio::test]
async fn order_within_a_run_is_checked() {
    let sim = Sim::instant();
    for (name, index) in [("a", 0), ("b", 2), ("c", 3)] {
        sim.apply("c1", &fenced(cm(name, "1"), KEY, 1, 1, index)).await;
    }
    assert_eq!(sim.server.totals().order_violations, 1);
    // A new token starts a new run at index 0.
    sim.apply("c1", &fenced(cm("a", "2"), KEY, 2, 2, 0)).await;
    sim.apply("c1", &fenced(cm("b", "2"), KEY, 2, 2, 1)).await;
    assert_eq!(sim.server.totals().order_violations, 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_overtaken_in_flight_does_not_land() {
    let sim = Sim::new(SimConfig { latency: LatencyModel::zero(), ..SimConfig::default() });
    sim.server
        .set_faults("c1", fleetsync_k8s_sim::Faults { delay_ms: Some(1000), ..Default::default() })
        .expect("faults");
    let old = fenced(cm("a", "old"), KEY, 1, 1, 0);
    let new = fenced(cm("a", "new"), KEY, 2, 2, 0);
    let (r_old, r_new) = tokio::join!(sim.apply("c1", &old), async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        sim.apply("c1", &new).await
    });
    r_old.assert_status(409, "Conflict");
    assert_eq!(r_new.status, 201);
    let t = sim.server.totals();
    assert_eq!((t.overlaps, t.fenced, t.applies), (1, 1, 1));
}

#[tokio::test(start_paused = true)]
async fn keys_generations_and_timings_are_reported() {
    let sim = Sim::new(SimConfig::default());
    for index in 0..3 {
        let obj = fenced(cm(&format!("r{index}"), "1"), KEY, 1, 7, index);
        assert_eq!(sim.apply("c1", &obj).await.status, 201);
    }
    sim.delete(&object_uri("c1", &cm("r2", "")), Some((KEY, 1))).await;
    let keys = sim.get("/_sim/keys").await.body;
    assert_eq!(keys, serde_json::json!({KEY: {"v1/ConfigMap/app/r0": 7, "v1/ConfigMap/app/r1": 7}}));
    assert_eq!(serde_json::to_value(sim.server.key_generations()).expect("json"), keys);

    let report = sim.get("/_sim/report").await.body;
    assert_eq!(
        report["totals"],
        serde_json::json!({
            "applies": 3, "failures": 0, "deletes": 1, "fenced": 0, "overlaps": 0, "order_violations": 0,
            "stale_writes": 0, "repeated_applies": 0
        })
    );
    let c1 = &report["clusters"]["c1"];
    assert_eq!(c1["applies"], 3);
    let (makespan, path) = (c1["makespan_ms"].as_f64().expect("ms"), c1["critical_path_ms"].as_f64().expect("ms"));
    assert!(path >= 4.0 * 200.0, "four requests of at least 200 ms: {path}");
    // Timers tick in whole milliseconds: each of the four sleeps may end up to 1 ms late.
    assert!((makespan - path).abs() <= 4.0, "one key in sequence: make-span is its path ({makespan} vs {path})");
    let t = sim.server.cluster_timings()["c1"];
    // The report went through JSON: equal up to float formatting.
    assert!((t.critical_path.as_secs_f64() * 1e3 - path).abs() < 1e-6, "{t:?} vs {path}");
}

/// `obj` applied by a caller with no lease: one token (0) for every run, runs told
/// apart by `fleetsync.io/run`.
fn unfenced(obj: serde_json::Value, generation: i64, index: usize, run: i64) -> serde_json::Value {
    let mut obj = fenced(obj, KEY, 0, generation, index);
    obj["metadata"]["annotations"]["fleetsync.io/run"] = run.to_string().into();
    obj
}

/// A queue consumer's runs: never refused, each a run of its own; a redelivery of a
/// completed run is work done twice, an older generation over a newer one a stale
/// write, and the summary counts keys' resources by generation.
#[tokio::test]
async fn runs_without_a_lease_are_judged_too() {
    let sim = Sim::instant();
    let run = |generation: i64, run: i64| {
        let sim = &sim;
        async move {
            for (index, name) in ["a", "b"].into_iter().enumerate() {
                let obj = unfenced(cm(name, &generation.to_string()), generation, index, run);
                assert_eq!(sim.apply("c1", &obj).await.status.as_u16() / 100, 2);
            }
        }
    };
    run(1, 1).await;
    run(1, 2).await; // redelivered after it completed: done twice
    run(2, 3).await;
    run(1, 4).await; // a stale retry lands after the newer generation
    let t = sim.server.totals();
    assert_eq!((t.applies, t.fenced, t.order_violations, t.repeated_applies, t.stale_writes), (8, 0, 0, 2, 2), "{t:?}");
    let summary = sim.get("/_sim/keys/summary?prefix=t1/").await.body;
    assert_eq!(summary, serde_json::json!({"keys": 1, "by_generation": {"1": 2}}));
    let none = sim.get("/_sim/keys/summary?prefix=t2/").await.body;
    assert_eq!(none, serde_json::json!({"keys": 0, "by_generation": {}}));
}
