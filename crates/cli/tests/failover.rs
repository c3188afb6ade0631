//! The store's primary fails over to its synchronous standby under a running hub.
//!
//! Two throwaway PostgreSQL servers: a primary whose `synchronous_standby_names` names
//! the other, a hot standby streaming from it. A `fleetsync serve` on the multi-host
//! URL `postgres://…@primary,standby/…?target_session_attrs=read-write` applies a
//! SyncSet to simulated clusters. While a client applies a new generation of it every
//! 50 ms, the primary crashes (`pg_ctl stop -m immediate`: no checkpoint, no goodbye to
//! clients) and the standby is promoted. Judged from what the clusters hold: the last
//! generation the hub acknowledged reaches every cluster, so nothing acknowledged was
//! lost and the hub recovered without a restart; and during the switch the API
//! answered `503` with `Retry-After`, never `500`.

mod common;

use common::{Hub, SimChild};
use fleetsync_model::WorkKey;
use fleetsync_testkit::pg::{StopMode, ThrowawayPg};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const CLUSTERS: usize = 10;
/// How long the client applies before the primary crashes, and at least after the
/// standby is promoted.
const BEFORE: Duration = Duration::from_secs(2);
const AFTER: Duration = Duration::from_secs(3);

/// The SyncSet `app`: one ConfigMap carrying `value`, on every cluster.
fn syncset(value: usize) -> String {
    let names: Vec<String> = (0..CLUSTERS).map(|c| format!("c{c}")).collect();
    format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterNames: [{}]\n  resources:\n\
         \x20   - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: app, namespace: apps}}, data: {{value: \"{value}\"}}}}\n",
        names.join(", ")
    )
}

fn clusters(sim: &str) -> String {
    (0..CLUSTERS)
        .map(|c| {
            format!(
                "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{c}}}\n\
                 spec: {{endpoint: {{http: {{url: \"http://{sim}/clusters/c{c}\"}}}}}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// What one apply was answered.
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: Option<String>,
    /// The SyncSet's generation, on a 200.
    generation: Option<i64>,
    body: String,
}

async fn apply(http: &reqwest::Client, hub: &Hub, yaml: String) -> Answer {
    let sent = http
        .post(format!("{}/v1/apply", hub.url))
        .bearer_auth(&hub.token)
        .header("content-type", "application/yaml")
        .body(yaml)
        .timeout(Duration::from_secs(30))
        .send()
        .await;
    let resp = match sent {
        Ok(resp) => resp,
        Err(e) => return Answer { status: 0, retry_after: None, generation: None, body: e.to_string() },
    };
    let status = resp.status().as_u16();
    let retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).map(String::from);
    let body = resp.text().await.unwrap_or_default();
    let generation = serde_json::from_str::<Value>(&body).ok().and_then(|v| {
        v["results"].as_array()?.iter().find(|r| r["name"] == "app").and_then(|r| r["generation"].as_i64())
    });
    Answer { status, retry_after, generation, body }
}

/// Cluster → the SyncSet generation of `app` on it, as the simulated cluster recorded.
async fn on_clusters(http: &reqwest::Client, sim: &str) -> BTreeMap<String, Option<i64>> {
    let keys: Value = match http.get(format!("http://{sim}/_sim/keys")).send().await {
        Ok(resp) => resp.json().await.unwrap_or_default(),
        Err(_) => Value::Null,
    };
    (0..CLUSTERS)
        .map(|c| {
            let key = WorkKey::new("default", format!("c{c}"), "app").to_string();
            let generation = keys[&key].as_object().and_then(|r| r.values().filter_map(Value::as_i64).max());
            (format!("c{c}"), generation)
        })
        .collect()
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_that_fails_over_to_its_synchronous_standby_loses_nothing_acknowledged() {
    let primary = blocking(ThrowawayPg::start).expect("start the primary");
    let standby = blocking(|| ThrowawayPg::standby_of(&primary, "standby")).expect("start the standby");
    blocking(|| primary.set("synchronous_standby_names", "standby")).expect("make the standby synchronous");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = blocking(|| primary.psql("SELECT sync_state FROM pg_stat_replication")).expect("replication");
        if state.trim() == "sync" {
            break;
        }
        assert!(Instant::now() < deadline, "the standby is not synchronous: {state:?}\n{}", standby.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let sim = SimChild::start(0.02);
    let url = format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let hub = blocking(|| Hub::start_with(dir, &["--database-url", &url]));
    let http = reqwest::Client::new();
    let first = apply(&http, &hub, format!("{}---\n{}", clusters(&sim.addr), syncset(0))).await;
    assert_eq!(first.status, 200, "{first:?}");

    // The client applies a new value every 50 ms throughout; the primary crashes
    // after BEFORE, the standby is promoted, and the client goes on for AFTER.
    let mut answers = Vec::new();
    let mut value = 0;
    let mut crashed = None;
    let mut promoted: Option<Instant> = None;
    let start = Instant::now();
    while promoted.is_none_or(|at| at.elapsed() < AFTER) {
        value += 1;
        answers.push((value, apply(&http, &hub, syncset(value)).await));
        if crashed.is_none() && start.elapsed() > BEFORE {
            blocking(|| primary.stop(StopMode::Immediate)).expect("crash the primary");
            crashed = Some(answers.len());
        } else if crashed.is_some() && promoted.is_none() {
            // One apply at least meets the primary gone, before the promotion.
            blocking(|| standby.promote()).expect("promote the standby");
            promoted = Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // No 500, and no answer but 200 or 503-with-Retry-After.
    for (value, a) in &answers {
        let fine = a.status == 200 || (a.status == 503 && a.retry_after.as_deref() == Some("1"));
        assert!(fine, "apply of value {value} during the switch answered {a:?}");
        assert!(!a.body.contains("127.0.0.1"), "an answer names the store's address: {a:?}");
    }
    let refused = answers.iter().filter(|(_, a)| a.status == 503).count();
    assert!(refused > 0, "no apply met the switch; answers: {answers:?}");
    let acked: Vec<i64> = answers.iter().filter_map(|(_, a)| a.generation).collect();
    let last = *acked.last().expect("an apply was acknowledged");
    assert!(
        answers.last().is_some_and(|(_, a)| a.status == 200),
        "the hub does not answer again after the switch: {:?}",
        answers.last()
    );

    // Every cluster ends at the last acknowledged generation.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held = on_clusters(&http, &sim.addr).await;
        if held.values().all(|g| *g == Some(last)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the clusters do not all hold generation {last}, the last acknowledged: {held:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{} applies, {} acknowledged, {refused} answered 503 during the switch; every cluster at generation {last}",
        answers.len(),
        acked.len()
    );
}
