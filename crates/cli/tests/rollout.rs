//! Progressive rollouts end to end: a hub (`fleetsync serve`) staging a SyncSet's new
//! generation over simulated clusters, one of which refuses it. Judged from what the
//! clusters hold and from their own resource versions (which move on every write),
//! not from the hub's status.

mod common;

use common::{block_on, stderr, stdout, wait_for, Hub, SimChild};
use fleetsync_model::{Phase, RolloutPhase, RolloutStatus};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const CLUSTERS: [&str; 4] = ["c1", "c2", "c3", "c4"];

fn clusters_yaml(sim: &SimChild) -> String {
    CLUSTERS
        .iter()
        .map(|c| {
            let ring = if *c == "c1" { "canary" } else { "main" };
            format!(
                "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {c}, labels: {{env: prod, ring: {ring}}}}}\n\
                 spec: {{endpoint: {{http: {{url: 'http://{}/clusters/{c}'}}}}}}\n---\n",
                sim.addr
            )
        })
        .collect()
}

/// The SyncSet `app`: ConfigMaps `name=value` in namespace `apps`, staged by `steps`.
fn syncset_yaml(mode: &str, steps: &str, on_failure: &str, maps: &[(&str, &str)]) -> String {
    let mut y = format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterSelector: {{matchLabels: {{env: prod}}}}\n  \
         resourceApplyMode: {mode}\n  rollout:\n    steps: {steps}\n    maxFailures: 0\n    progressDeadline: 1m\n    onFailure: {on_failure}\n  resources:\n"
    );
    for (name, value) in maps {
        y.push_str(&format!("    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: {name}, namespace: apps}}, data: {{v: \"{value}\"}}}}\n"));
    }
    y
}

const CANARY_THEN_ALL: &str = "[{selector: {matchLabels: {ring: canary}}}, {percent: 50}, {percent: 100}]";

fn rollout(hub: &Hub, verb: &str) -> RolloutStatus {
    let out = hub.cli(&["rollout", verb, "app", "-o", "json"]);
    assert!(out.status.success(), "rollout {verb}: {}", stderr(&out));
    serde_json::from_str(&stdout(&out)).expect("rollout status JSON")
}

/// Every key of `app` applied at `generation`.
fn all_applied_at(hub: &Hub, generation: i64) -> bool {
    let items = common::status_items(hub);
    items.len() == CLUSTERS.len()
        && items.iter().all(|s| s.phase == Phase::Applied && s.observed_generation == generation)
}

/// The ConfigMaps a simulated cluster holds in `apps`, name → `data.v`, and the
/// cluster's resource version (moved by any write to any of its objects).
fn on_cluster(sim: &SimChild, cluster: &str) -> (BTreeMap<String, String>, u64) {
    block_on(async {
        let url = format!("http://{}/clusters/{cluster}/api/v1/namespaces/apps/configmaps", sim.addr);
        let list: Value = reqwest::get(url).await.expect("reach the sim").json().await.expect("a list");
        let version =
            list["metadata"]["resourceVersion"].as_str().and_then(|v| v.parse().ok()).expect("a resource version");
        let maps = list["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|o| {
                (
                    o["metadata"]["name"].as_str().expect("name").to_string(),
                    o["data"]["v"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        (maps, version)
    })
}

fn versions(sim: &SimChild) -> BTreeMap<&'static str, u64> {
    CLUSTERS.iter().map(|c| (*c, on_cluster(sim, c).1)).collect()
}

fn faults(sim: &SimChild, cluster: &str, faults: Value) {
    block_on(async {
        let url = format!("http://{}/_sim/clusters/{cluster}/faults", sim.addr);
        let resp = reqwest::Client::new().put(url).json(&faults).send().await.expect("reach the sim");
        assert!(resp.status().is_success(), "setting faults: {}", resp.status());
    })
}

fn maps(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

/// A hub with the fleet at generation 1 everywhere.
fn fleet_at_one(sim: &SimChild, mode: &str, steps: &str, on_failure: &str, first: &[(&str, &str)]) -> Hub {
    fleet_at_one_with(&["--backoff-base", "50ms", "--max-attempts", "2"], sim, mode, steps, on_failure, first)
}

/// [`fleet_at_one`], the hub started with these flags.
fn fleet_at_one_with(
    flags: &[&str],
    sim: &SimChild,
    mode: &str,
    steps: &str,
    on_failure: &str,
    first: &[(&str, &str)],
) -> Hub {
    let hub = Hub::start_flags(flags);
    hub.apply(&format!("{}{}", clusters_yaml(sim), syncset_yaml(mode, steps, on_failure, first)));
    wait_for("generation 1 everywhere", Duration::from_secs(30), || all_applied_at(&hub, 1));
    let status = rollout(&hub, "status");
    assert_eq!(
        (status.phase, status.revision, status.stable),
        (RolloutPhase::Completed, 1, 1),
        "a first generation goes out at once"
    );
    hub
}

/// The canary refuses part of generation 2: the rollout stops at its first step, rolls
/// the canary back to generation 1 (also what it had applied of 2), and no other
/// cluster is written to at all.
#[test]
fn a_failing_canary_is_rolled_back_and_no_later_cluster_is_touched() {
    let sim = SimChild::start(0.0);
    let hub = fleet_at_one(&sim, "Upsert", CANARY_THEN_ALL, "Rollback", &[("cm-a", "1"), ("cm-b", "1")]);
    let before = versions(&sim);
    faults(&sim, "c1", serde_json::json!({"refuse_applies": ["cm-b"]}));
    hub.apply(&syncset_yaml("Upsert", CANARY_THEN_ALL, "Rollback", &[("cm-a", "2"), ("cm-b", "2")]));

    wait_for("the rollout to roll back", Duration::from_secs(30), || {
        rollout(&hub, "status").phase == RolloutPhase::RolledBack
    });
    let status = rollout(&hub, "status");
    assert_eq!((status.step, status.revision, status.stable), (0, 2, 1), "{status:?}");
    let reason = status.reason.clone().unwrap_or_default();
    assert!(reason.contains("c1"), "the reason names the failed cluster: {reason}");
    wait_for("the canary back at generation 1", Duration::from_secs(30), || {
        on_cluster(&sim, "c1").0 == maps(&[("cm-a", "1"), ("cm-b", "1")])
    });
    // The canary still refuses cm-b, so its rollback run fails there too (after putting
    // cm-a back); once it is mended, a retry applies generation 1 whole.
    faults(&sim, "c1", serde_json::json!({}));
    assert!(hub.cli(&["retry", "c1", "app"]).status.success());
    wait_for("every key applied at 1", Duration::from_secs(30), || all_applied_at(&hub, 1));
    let after = versions(&sim);
    for c in ["c2", "c3", "c4"] {
        assert_eq!(after[c], before[c], "{c} of a later step was never written to");
        assert_eq!(on_cluster(&sim, c).0, maps(&[("cm-a", "1"), ("cm-b", "1")]));
    }
    assert!(after["c1"] > before["c1"], "the canary received generation 2 (cm-a), then generation 1 again");
}

/// With `onFailure: Pause` the rollout stops where it is (`Failed`) and waits: the
/// canary keeps what it applied, the others are untouched; `abort` then rolls back.
#[test]
fn a_failing_canary_with_pause_stays_and_waits_until_aborted() {
    let sim = SimChild::start(0.0);
    let hub = fleet_at_one(&sim, "Upsert", CANARY_THEN_ALL, "Pause", &[("cm-a", "1"), ("cm-b", "1")]);
    let before = versions(&sim);
    faults(&sim, "c1", serde_json::json!({"refuse_applies": ["cm-b"]}));
    hub.apply(&syncset_yaml("Upsert", CANARY_THEN_ALL, "Pause", &[("cm-a", "2"), ("cm-b", "2")]));

    wait_for("the rollout to stop", Duration::from_secs(30), || rollout(&hub, "status").phase == RolloutPhase::Failed);
    std::thread::sleep(Duration::from_secs(3));
    let status = rollout(&hub, "status");
    assert_eq!((status.phase, status.step, status.revision), (RolloutPhase::Failed, 0, 2), "it waits: {status:?}");
    assert_eq!(
        on_cluster(&sim, "c1").0,
        maps(&[("cm-a", "2"), ("cm-b", "1")]),
        "the canary stays as the failed run left it"
    );
    for c in ["c2", "c3", "c4"] {
        assert_eq!(on_cluster(&sim, c).1, before[c], "{c} untouched");
    }

    faults(&sim, "c1", serde_json::json!({}));
    assert_eq!(rollout(&hub, "abort").phase, RolloutPhase::RolledBack);
    wait_for("the canary back at generation 1", Duration::from_secs(30), || {
        on_cluster(&sim, "c1").0 == maps(&[("cm-a", "1"), ("cm-b", "1")])
    });
    let out = hub.cli(&["rollout", "resume", "app"]);
    assert!(
        !out.status.success() && stderr(&out).contains("RolledBack"),
        "a finished rollout takes no control: {}",
        stderr(&out)
    );
}

/// Sync mode: generation 2 changes cm-a, removes cm-b and adds cm-c and cm-d. The
/// canary takes all of it; the second step's cluster refuses cm-d; the rollback puts
/// both clusters back exactly at generation 1 (cm-b again, cm-c and cm-d gone).
#[test]
fn a_sync_mode_rollback_restores_exactly_what_the_bad_revision_changed() {
    let sim = SimChild::start(0.0);
    let steps = "[{selector: {matchLabels: {ring: canary}}}, {count: 2}, {percent: 100}]";
    let hub = fleet_at_one(&sim, "Sync", steps, "Rollback", &[("cm-a", "1"), ("cm-b", "1")]);
    let before = versions(&sim);
    faults(&sim, "c2", serde_json::json!({"refuse_applies": ["cm-d"]}));
    hub.apply(&syncset_yaml("Sync", steps, "Rollback", &[("cm-a", "2"), ("cm-c", "2"), ("cm-d", "2")]));

    wait_for("the canary at generation 2", Duration::from_secs(30), || {
        on_cluster(&sim, "c1").0 == maps(&[("cm-a", "2"), ("cm-c", "2"), ("cm-d", "2")])
    });
    wait_for("the rollout to roll back", Duration::from_secs(30), || {
        rollout(&hub, "status").phase == RolloutPhase::RolledBack
    });
    assert_eq!(rollout(&hub, "status").step, 1, "the second step failed");
    faults(&sim, "c2", serde_json::json!({}));
    for c in ["c1", "c2"] {
        wait_for("generation 1 exactly", Duration::from_secs(30), || {
            on_cluster(&sim, c).0 == maps(&[("cm-a", "1"), ("cm-b", "1")])
        });
    }
    wait_for("every key applied at 1", Duration::from_secs(30), || all_applied_at(&hub, 1));
    for c in ["c3", "c4"] {
        assert_eq!(on_cluster(&sim, c).1, before[c], "{c} untouched");
    }
}

/// A newer generation while the canary waits for a promote supersedes the rollout: it
/// starts again from the first step with the new revision, the stable one unchanged,
/// and the clusters past the canary never see the superseded generation.
#[test]
fn a_new_generation_mid_rollout_starts_again_from_the_first_step() {
    let sim = SimChild::start(0.0);
    let steps = "[{selector: {matchLabels: {ring: canary}}, manualPromote: true}, {percent: 100}]";
    let hub = fleet_at_one(&sim, "Upsert", steps, "Rollback", &[("cm-a", "1")]);
    let before = versions(&sim);
    hub.apply(&syncset_yaml("Upsert", steps, "Rollback", &[("cm-a", "2")]));
    wait_for("the canary at generation 2", Duration::from_secs(30), || {
        on_cluster(&sim, "c1").0 == maps(&[("cm-a", "2")])
    });
    wait_for("the step to pass", Duration::from_secs(30), || rollout(&hub, "status").healthy_since.is_some());
    std::thread::sleep(Duration::from_secs(2));
    let waiting = rollout(&hub, "status");
    assert_eq!((waiting.phase, waiting.step), (RolloutPhase::Progressing, 0), "it waits for a promote: {waiting:?}");

    hub.apply(&syncset_yaml("Upsert", steps, "Rollback", &[("cm-a", "3")]));
    wait_for("the canary at generation 3", Duration::from_secs(30), || {
        on_cluster(&sim, "c1").0 == maps(&[("cm-a", "3")])
    });
    let restarted = rollout(&hub, "status");
    assert_eq!((restarted.step, restarted.revision, restarted.stable), (0, 3, 1), "{restarted:?}");
    for c in ["c2", "c3", "c4"] {
        assert_eq!(on_cluster(&sim, c).1, before[c], "{c} never saw generation 2");
    }
    wait_for("the step to pass", Duration::from_secs(30), || rollout(&hub, "status").healthy_since.is_some());
    rollout(&hub, "promote");
    wait_for("the rollout to complete", Duration::from_secs(30), || {
        rollout(&hub, "status").phase == RolloutPhase::Completed
    });
    wait_for("every key applied at 3", Duration::from_secs(30), || all_applied_at(&hub, 3));
    for c in CLUSTERS {
        assert_eq!(on_cluster(&sim, c).0, maps(&[("cm-a", "3")]), "{c}");
    }
    assert_eq!(rollout(&hub, "status").stable, 3);
}

/// What the user reads during a staged change is what the clusters hold, at every
/// step: `apply` says the change is staged, `describe`, `get syncsets` and `wait` count
/// the canary at generation 2 and the others held at 1 by the rollout (waiting for a
/// promote); after an abort, `wait` fails at once naming the rollback; a later
/// generation promoted through is met only once every cluster holds it.
#[test]
fn a_staged_change_reads_as_the_clusters_hold_it() {
    let sim = SimChild::start(0.0);
    let steps = "[{selector: {matchLabels: {ring: canary}}, manualPromote: true}, {percent: 100}]";
    let hub = fleet_at_one(&sim, "Upsert", steps, "Rollback", &[("cm-a", "1")]);
    let holding = |value: &str| CLUSTERS.iter().filter(|c| on_cluster(&sim, c).0 == maps(&[("cm-a", value)])).count();

    let path = hub.dir.path().join("two.yaml");
    std::fs::write(&path, syncset_yaml("Upsert", steps, "Rollback", &[("cm-a", "2")])).expect("write");
    let out = hub.cli(&["apply", "-f", path.to_str().expect("utf-8")]);
    assert_eq!(
        stdout(&out),
        "syncset/app updated (generation 2, staged: rollout step 1 of 2 (1 cluster))\n",
        "{}",
        stderr(&out)
    );
    wait_for("the canary at generation 2, waiting", Duration::from_secs(30), || {
        on_cluster(&sim, "c1").0 == maps(&[("cm-a", "2")])
            && rollout(&hub, "status").waiting.as_deref() == Some("waiting for promote")
    });
    assert_eq!((holding("2"), holding("1")), (1, 3), "what the clusters hold");

    let describe = stdout(&hub.cli(&["describe", "syncset", "app"]));
    let want = "Condition:  Applied=false RollingOut (1 of 4 clusters at generation 2, 3 held at generation 1 by the rollout (step 1 of 2, waiting for promote))";
    assert!(describe.contains(want), "{describe}");
    assert!(
        describe.contains("Rollout:    Progressing at step 1 of 2, generation 2 (stable 1); waiting for promote"),
        "{describe}"
    );
    let table = stdout(&hub.cli(&["get", "syncsets"]));
    assert!(table.lines().nth(1).is_some_and(|l| l.ends_with("4         1/4      RollingOut")), "{table}");
    let out = hub.cli(&["wait", "--for=condition=Applied", "syncset/app", "--timeout=1s"]);
    assert!(
        !out.status.success() && stderr(&out).contains("3 held at generation 1 by the rollout"),
        "{}",
        stderr(&out)
    );
    let status = stdout(&hub.cli(&["rollout", "status", "app"]));
    assert!(status.contains("Waiting:   waiting for promote"), "{status}");

    assert_eq!(rollout(&hub, "abort").phase, RolloutPhase::RolledBack);
    wait_for("the canary back at generation 1", Duration::from_secs(30), || holding("1") == 4);
    let started = Instant::now();
    let out = hub.cli(&["wait", "--for=condition=Applied", "syncset/app", "--timeout=60s"]);
    assert!(!out.status.success(), "a rolled-back generation is never applied");
    assert!(
        stderr(&out).contains("the rollout of generation 2 rolled back (aborted); 4 clusters at generation 1"),
        "{}",
        stderr(&out)
    );
    assert!(started.elapsed() < Duration::from_secs(10), "at once, not at the timeout");
    let status = stdout(&hub.cli(&["rollout", "status", "app"]));
    let header = status.lines().find(|l| l.starts_with("STEP")).unwrap_or_default();
    assert!(header.ends_with("ROLLED BACK"), "{status}");
    assert!(
        status.lines().any(|l| l.starts_with("1*") && l.ends_with(" 1")),
        "the canary rolled back, nothing pending: {status}"
    );

    hub.apply(&syncset_yaml("Upsert", steps, "Rollback", &[("cm-a", "3")]));
    rollout(&hub, "promote");
    let out = hub.cli(&["wait", "--for=condition=Applied", "syncset/app", "--timeout=60s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "syncset/app condition met: 4 of 4 clusters at generation 3\n");
    assert_eq!(holding("3"), 4, "met only once every cluster holds generation 3");
}

/// With `maxFailures: 0`, a canary whose run fails once and whose retry applies does not
/// roll the rollout back (a transient failure is not a failure of the revision); a
/// canary that keeps failing until its key parks does. Judged from what the canary holds.
#[test]
fn a_failure_its_retry_fixes_does_not_roll_back_one_that_parks_does() {
    let sim = SimChild::start(0.0);
    let hub = fleet_at_one_with(
        &["--backoff-base", "1s", "--max-attempts", "3"],
        &sim,
        "Upsert",
        CANARY_THEN_ALL,
        "Rollback",
        &[("cm-a", "1")],
    );
    let canary =
        |hub: &Hub| common::status_items(hub).into_iter().find(|k| k.key.cluster == "c1").expect("the canary's key");

    faults(&sim, "c1", serde_json::json!({"refuse_applies": ["cm-a"]}));
    hub.apply(&syncset_yaml("Upsert", CANARY_THEN_ALL, "Rollback", &[("cm-a", "2")]));
    wait_for("the canary's first run to fail", Duration::from_secs(30), || canary(&hub).phase == Phase::Failed);
    faults(&sim, "c1", serde_json::json!({}));
    wait_for("the rollout past its first step", Duration::from_secs(30), || rollout(&hub, "status").step >= 1);
    let status = rollout(&hub, "status");
    assert_ne!(status.phase, RolloutPhase::RolledBack, "{status:?}");
    assert_eq!(on_cluster(&sim, "c1").0, maps(&[("cm-a", "2")]), "the canary holds generation 2");
    wait_for("the rollout to complete", Duration::from_secs(30), || {
        rollout(&hub, "status").phase == RolloutPhase::Completed
    });

    faults(&sim, "c1", serde_json::json!({"refuse_applies": ["cm-a"]}));
    let applied = Instant::now();
    hub.apply(&syncset_yaml("Upsert", CANARY_THEN_ALL, "Rollback", &[("cm-a", "3")]));
    wait_for("the rollout to roll back once the canary parks", Duration::from_secs(30), || {
        rollout(&hub, "status").phase == RolloutPhase::RolledBack
    });
    // Three attempts, 1s and 2s apart (less 20% jitter): not before the key parked.
    assert!(
        applied.elapsed() >= Duration::from_millis(2_400),
        "rolled back after {:?}, before the key parked",
        applied.elapsed()
    );
    assert!(rollout(&hub, "status")
        .reason
        .unwrap_or_default()
        .starts_with("step 1: 1 of 1 clusters failed (maxFailures 0); c1: "));
    for c in ["c2", "c3", "c4"] {
        assert_eq!(on_cluster(&sim, c).0, maps(&[("cm-a", "2")]), "{c} never saw generation 3");
    }
}
