//! `dependsOn` across processes on PostgreSQL, judged from what each cluster's own API
//! saw (a watch on its ConfigMaps opened before anything was applied): three workers,
//! one killed with SIGKILL while keys wait and run.

use crate::fixture::{block_on, serial, Fixture, Sim, Worker};
use fleetsync_model::{parse_documents, Document, Phase, WorkKey};
use fleetsync_store::{Objects, StatusFilter, StatusRead, WorkQueue};
use fleetsync_testkit::cluster_name;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

const CLUSTERS: usize = 20;
const DB: [&str; 3] = ["db-0", "db-1", "db-2"];

/// Every fourth cluster (from the fourth) does not carry `db: "yes"`: `db` does not
/// select it, so it must not hold `app` back there.
fn has_db(i: usize) -> bool {
    i % 4 != 3
}

/// Where `db` is refused at first (its second ConfigMap), so that `app` must wait.
fn refused_at_first(i: usize) -> bool {
    i.is_multiple_of(4)
}

fn fleet(sim: &Sim) -> Vec<Document> {
    let mut yaml = String::new();
    for i in 0..CLUSTERS {
        let db = if has_db(i) { ", db: \"yes\"" } else { "" };
        yaml += &format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {}, labels: {{env: prod{db}}}}}\n\
             spec: {{endpoint: {{http: {{url: '{}/clusters/{}'}}}}}}\n---\n",
            cluster_name(i),
            sim.url,
            cluster_name(i)
        );
    }
    // The dependent first, in the same apply: the order of writing does not matter.
    yaml += "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: app}\nspec:\n  \
             clusterSelector: {matchLabels: {env: prod}}\n  dependsOn: [{name: db}]\n  resources:\n";
    for m in ["app-0", "app-1"] {
        yaml += &format!(
            "    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: {m}, namespace: apps}}, data: {{v: a}}}}\n"
        );
    }
    yaml += "---\napiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: db}\nspec:\n  \
             clusterSelector: {matchLabels: {db: \"yes\"}}\n  resources:\n";
    for m in DB {
        yaml += &format!(
            "    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: {m}, namespace: apps}}, data: {{v: d}}}}\n"
        );
    }
    parse_documents(&yaml).expect("the fleet's YAML")
}

/// The names of the ConfigMaps a cluster's API reported written, in its order.
type WriteLog = Arc<Mutex<Vec<String>>>;

/// Opens a watch on cluster `i`'s ConfigMaps and records every write it reports.
async fn watch(sim: &Sim, i: usize) -> (WriteLog, tokio::task::JoinHandle<()>) {
    let url = format!("{}/clusters/{}/api/v1/configmaps?watch=true&timeoutSeconds=600", sim.url, cluster_name(i));
    let resp = sim.http.get(url).send().await.expect("watch");
    assert!(resp.status().is_success(), "watch: {}", resp.status());
    let log: WriteLog = Arc::default();
    let into = log.clone();
    let task = tokio::spawn(async move {
        let (mut resp, mut buf) = (resp, Vec::new());
        while let Ok(Some(chunk)) = resp.chunk().await {
            buf.extend_from_slice(&chunk);
            while let Some(end) = buf.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buf.drain(..=end).collect();
                let event: Value = serde_json::from_slice(&line).expect("a watch event");
                if matches!(event["type"].as_str(), Some("ADDED" | "MODIFIED")) {
                    let name = event["object"]["metadata"]["name"].as_str().unwrap_or_default().to_string();
                    into.lock().unwrap_or_else(PoisonError::into_inner).push(name);
                }
            }
        }
    });
    (log, task)
}

/// Where in `log` the dependent's first write is, and where every resource of `db`
/// had been written by: the dependent must come after.
fn first_app_and_db_complete(log: &[String]) -> (Option<usize>, Option<usize>) {
    let first_app = log.iter().position(|n| n.starts_with("app-"));
    let mut seen = BTreeSet::new();
    let db_complete = log.iter().position(|n| {
        if DB.contains(&n.as_str()) {
            seen.insert(n.clone());
        }
        seen.len() == DB.len()
    });
    (first_app, db_complete)
}

async fn set_faults(sim: &Sim, i: usize, faults: Value) {
    let url = format!("{}/_sim/clusters/{}/faults", sim.url, cluster_name(i));
    let resp = sim.http.put(url).json(&faults).send().await.expect("faults");
    assert!(resp.status().is_success(), "faults: {}", resp.status());
}

#[test]
fn a_dependent_syncset_never_writes_before_its_dependency_is_applied_despite_a_kill_9() {
    let _one_at_a_time = serial();
    block_on(depends_on_with_a_kill());
}

async fn depends_on_with_a_kill() {
    let sim = Sim::start(0.2);
    let fx = Fixture::new("scale_depends").await;
    let mut logs = Vec::new();
    for i in 0..CLUSTERS {
        if refused_at_first(i) {
            set_faults(&sim, i, serde_json::json!({"refuseApplies": ["db-1"]})).await;
        } else if i % 4 == 1 {
            set_faults(&sim, i, serde_json::json!({"delayMs": 300})).await;
        }
        logs.push(watch(&sim, i).await);
    }
    fx.store.objects_apply(fleet(&sim)).await.expect("apply the fleet");
    let knobs = ["--lease-ttl", "2s", "--renew-every", "500ms", "--member-ttl", "1s", "--max-in-flight", "8"];
    let mut workers: Vec<Worker> =
        ["dep-01", "dep-02", "dep-03"].iter().map(|id| Worker::start(&fx, id, &knobs)).collect();

    // While db is refused, app waits there and says for what; elsewhere both converge.
    let waiting_key = WorkKey::new("default", cluster_name(0), "app");
    let deadline = Instant::now() + Duration::from_secs(60);
    let reason = loop {
        let st = fx.store.status_get(&waiting_key).await.expect("status").expect("app's key on the first cluster");
        if let (Phase::Pending, Some(e)) = (st.phase, &st.last_error) {
            if e.starts_with("waiting for SyncSet db") {
                break e.clone();
            }
        }
        assert!(Instant::now() < deadline, "app never said it waits: {st:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(reason.contains("not applied yet"), "{reason}");
    // Where db does not go, app is not held back: it is Applied while db is refused.
    let free_key = WorkKey::new("default", cluster_name(3), "app");
    loop {
        let st = fx.store.status_get(&free_key).await.expect("status").expect("app's key on the fourth cluster");
        if st.phase == Phase::Applied {
            break;
        }
        assert!(Instant::now() < deadline, "app was held back where db does not go: {st:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let still = fx.store.status_get(&waiting_key).await.expect("status").expect("app's key on the first cluster");
    assert_eq!(still.phase, Phase::Pending, "still waiting where db is refused: {still:?}");
    workers[0].kill9();
    workers.push(Worker::start(&fx, "dep-04", &knobs));
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in (0..CLUSTERS).filter(|i| refused_at_first(*i)) {
        set_faults(&sim, i, serde_json::json!({})).await;
    }

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let statuses = fx.store.status_list(&StatusFilter::default()).await.expect("status");
        for s in statuses.iter().filter(|s| s.phase == Phase::Parked) {
            fx.store.work_retry(&s.key).await.expect("retry a parked key");
        }
        let wanted = CLUSTERS + (0..CLUSTERS).filter(|i| has_db(*i)).count();
        let done = statuses.iter().filter(|s| s.phase == Phase::Applied && s.observed_generation == 1).count();
        if statuses.len() == wanted && done == wanted {
            break;
        }
        assert!(Instant::now() < deadline, "the fleet did not converge: {statuses:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await; // the last watch events
    for (i, (log, task)) in logs.into_iter().enumerate() {
        task.abort();
        let log = log.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let (first_app, db_complete) = first_app_and_db_complete(&log);
        let first_app = first_app.unwrap_or_else(|| panic!("{} never got app: {log:?}", cluster_name(i)));
        match has_db(i) {
            true => {
                let complete = db_complete.unwrap_or_else(|| panic!("{} never got db: {log:?}", cluster_name(i)));
                assert!(first_app > complete, "{}: app written before db was: {log:?}", cluster_name(i));
            }
            false => assert!(db_complete.is_none(), "{}: db does not select it: {log:?}", cluster_name(i)),
        }
    }
    let report = sim.get("/_sim/report").await;
    assert_eq!(report["totals"]["overlaps"], 0, "no two runs of a key at once: {report}");
}
