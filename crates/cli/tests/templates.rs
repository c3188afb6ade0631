//! One templated SyncSet, many clusters: each cluster holds what its labels, annotations
//! and values render, judged from what the simulated clusters hold (asked over their
//! Kubernetes API) and from the simulator's count of writes, not from status.

mod common;

use common::{block_on, stderr, stdout, Hub, SimChild};
use fleetsync_model::Phase;
use serde_json::Value;
use std::time::{Duration, Instant};

const CLUSTERS: usize = 1000;
const REGIONS: [&str; 3] = ["eu", "us", "ap"];

fn cluster(sim: &SimChild, i: usize, region: &str, extra_label: &str) -> String {
    format!(
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i}, labels: {{region: {region}{extra_label}}}}}\n\
         spec: {{endpoint: {{http: {{url: 'http://{}/clusters/c{i}'}}}}}}\n",
        sim.addr
    )
}

const SYNCSET: &str = r#"apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: app}
spec:
  clusterSelector: {matchExpressions: [{key: region, operator: Exists}]}
  templated: true
  values: {replicas: 1, tier: standard}
  targetCustomizations:
    - clusterSelector: {matchLabels: {region: eu}}
      values: {replicas: 3}
  resources:
    - {apiVersion: v1, kind: Namespace, metadata: {name: apps}}
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: app, namespace: apps}
      data:
        region: "{{ cluster.labels.region }}"
        replicas: "{{ values.replicas | string }}"
        owner: "{{ cluster.name }}-{{ values.tier }}"
"#;

/// The ConfigMap's data on cluster `i`, if it holds it.
async fn data(http: &reqwest::Client, sim: &SimChild, i: usize) -> Option<Value> {
    let url = format!("http://{}/clusters/c{i}/api/v1/namespaces/apps/configmaps/app", sim.addr);
    let resp = http.get(url).send().await.expect("reach the sim");
    match resp.status().as_u16() {
        404 => None,
        200 => Some(resp.json::<Value>().await.expect("JSON")["data"].clone()),
        other => panic!("GET configmap on c{i}: {other}"),
    }
}

/// The writes the simulator took (applies that took effect), all clusters together.
async fn applies(http: &reqwest::Client, sim: &SimChild) -> u64 {
    let report: Value =
        http.get(format!("http://{}/_sim/report", sim.addr)).send().await.expect("sim").json().await.expect("JSON");
    report["totals"]["applies"].as_u64().expect("totals.applies")
}

fn expected(i: usize, region: &str) -> Value {
    let replicas = if region == "eu" { "3" } else { "1" };
    serde_json::json!({"region": region, "replicas": replicas, "owner": format!("c{i}-standard")})
}

/// Waits until every cluster `i` in `which` holds `want(i)`.
async fn wait_held(sim: &SimChild, which: &[usize], want: impl Fn(usize) -> Value, within: Duration) {
    let http = reqwest::Client::new();
    let start = Instant::now();
    let mut pending: Vec<usize> = which.to_vec();
    while !pending.is_empty() {
        let mut still = Vec::new();
        for &i in &pending {
            if data(&http, sim, i).await.as_ref() != Some(&want(i)) {
                still.push(i);
            }
        }
        pending = still;
        if let Some(&i) = pending.first() {
            let held = data(&http, sim, i).await;
            assert!(
                start.elapsed() < within,
                "{} clusters do not hold their rendering, e.g. c{i}: {held:?}",
                pending.len()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

#[test]
fn clusters_in_three_regions_hold_their_own_values_and_a_relabel_rewrites_only_the_relabelled() {
    let sim = SimChild::start(0.0);
    let hub = Hub::start();
    let region = |i: usize| REGIONS[i % 3];
    let mut docs: Vec<String> = (0..CLUSTERS).map(|i| cluster(&sim, i, region(i), "")).collect();
    docs.push(SYNCSET.to_string());
    hub.apply(&docs.join("---\n"));
    let all: Vec<usize> = (0..CLUSTERS).collect();
    block_on(wait_held(&sim, &all, |i| expected(i, region(i)), Duration::from_secs(120)));

    let http = reqwest::Client::new();
    let before = block_on(applies(&http, &sim));
    assert_eq!(before, 2 * CLUSTERS as u64, "one write per resource per cluster so far");

    // Ten clusters move region (their rendering changes); ten others get a label no
    // template reads (theirs does not).
    let moved: Vec<usize> = (0..10).map(|n| n * 3).collect(); // all eu → us
    let touched: Vec<usize> = (0..10).map(|n| n * 3 + 1).collect();
    let mut relabel: Vec<String> = moved.iter().map(|&i| cluster(&sim, i, "us", "")).collect();
    relabel.extend(touched.iter().map(|&i| cluster(&sim, i, region(i), ", team: blue")));
    hub.apply(&relabel.join("---\n"));
    block_on(wait_held(&sim, &moved, |i| expected(i, "us"), Duration::from_secs(60)));
    // Anything else the relabel set off would land within this settle time.
    std::thread::sleep(Duration::from_secs(2));
    let after = block_on(applies(&http, &sim));
    assert_eq!(after - before, 2 * moved.len() as u64, "exactly the moved clusters were written to (both resources)");
    let rest: Vec<usize> = all.iter().copied().filter(|i| !moved.contains(i)).collect();
    block_on(wait_held(&sim, &rest, |i| expected(i, region(i)), Duration::from_secs(5)));

    // What a cluster gets, as the hub renders it.
    let out = hub.cli(&["render", "syncset/app", "--cluster", "c3"]);
    assert!(out.status.success(), "render: {}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("region: us") && text.contains("replicas: \"1\"") && text.contains("rendered hash "),
        "{text}"
    );
    // The key's status names the rendering it applied: the one `render` shows.
    let hash = text.split("rendered hash ").nth(1).and_then(|r| r.lines().next()).expect("a hash").trim();
    let c3 = common::status_items(&hub).into_iter().find(|s| s.key.cluster == "c3").expect("c3's key");
    assert_eq!(c3.rendered_hash.as_deref(), Some(hash), "status shows what c3 was applied");
}

#[test]
fn a_template_that_fails_on_one_cluster_parks_that_key_with_the_reason_and_no_other() {
    let sim = SimChild::start(0.0);
    let hub = Hub::start();
    let mut docs: Vec<String> = (0..3).map(|i| cluster(&sim, i, "eu", "")).collect();
    docs[0] = docs[0].replace("spec: {", "spec: {values: {zone: eu-1a}, ");
    docs[1] = docs[1].replace("spec: {", "spec: {values: {zone: eu-1b}, ");
    docs.push(
        SYNCSET.replace("owner: \"{{ cluster.name }}-{{ values.tier }}\"", "zone: \"{{ cluster.values.zone }}\""),
    );
    hub.apply(&docs.join("---\n"));
    let zone = |z: &str| serde_json::json!({"region": "eu", "replicas": "3", "zone": z});
    block_on(wait_held(&sim, &[0, 1], |i| zone(if i == 0 { "eu-1a" } else { "eu-1b" }), Duration::from_secs(30)));
    hub.wait_until(Duration::from_secs(30), |hub| {
        common::status_items(hub).iter().any(|s| s.key.cluster == "c2" && s.phase == Phase::Parked)
    });
    let parked = common::status_items(&hub).into_iter().find(|s| s.key.cluster == "c2").expect("c2's key");
    let error = parked.last_error.unwrap_or_default();
    assert_eq!(
        error, "template v1/ConfigMap apps/app data.zone line 1: undefined value cluster.values.zone",
        "the key says which template, field, line and value"
    );
    assert_eq!(block_on(data(&reqwest::Client::new(), &sim, 2)), None, "nothing of the failed rendering was written");

    // The same reason from `render`, as a 4xx.
    let out = hub.cli(&["render", "syncset/app", "--cluster", "c2"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("undefined value cluster.values.zone"), "{}", stderr(&out));

    // Giving the cluster the value runs its key again, and it lands.
    hub.apply(&docs[2].replace("spec: {", "spec: {values: {zone: eu-1c}, "));
    block_on(wait_held(&sim, &[2], |_| zone("eu-1c"), Duration::from_secs(30)));
}

#[test]
fn diff_per_cluster_shows_what_one_cluster_would_get() {
    let sim = SimChild::start(0.0);
    let hub = Hub::start();
    let docs = [cluster(&sim, 0, "eu", ""), cluster(&sim, 1, "us", ""), SYNCSET.to_string()];
    hub.apply(&docs.join("---\n"));
    let diff = |yaml: &str, cluster: &str| {
        let path = hub.dir.path().join("diff.yaml");
        std::fs::write(&path, yaml).expect("write YAML");
        hub.cli(&["diff", "-f", path.to_str().expect("utf-8"), "--cluster", cluster])
    };
    let same = diff(SYNCSET, "c0");
    assert_eq!(same.status.code(), Some(0), "nothing changes: {}{}", stdout(&same), stderr(&same));

    // Five replicas in eu: c0's rendering changes, c1's does not.
    let five = SYNCSET.replace("values: {replicas: 3}", "values: {replicas: 5}");
    let out = diff(&five, "c0");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("syncset/default/app on cluster c0 (live)"), "{text}");
    assert!(text.contains("-  replicas: '3'") || text.contains("-  replicas: \"3\""), "{text}");
    assert!(text.contains("+  replicas: '5'") || text.contains("+  replicas: \"5\""), "{text}");
    assert_eq!(diff(&five, "c1").status.code(), Some(0), "c1 is in us");

    // A relabel in the same file: c1 moves to eu and gets the eu values.
    let moved = format!("{}---\n{five}", cluster(&sim, 1, "eu", ""));
    let out = diff(&moved, "c1");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(stdout(&out).contains("+  region: eu"), "{}", stdout(&out));
    let missing = diff(SYNCSET, "c9");
    assert_eq!(missing.status.code(), Some(2));
    assert!(stderr(&missing).contains("no cluster c9 in tenant default"), "{}", stderr(&missing));
}
