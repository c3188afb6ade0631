//! The clusters list (search by name, label selector, condition, staleness; sorted and
//! paged), the heat map by label, and failures grouped by cause with their retries,
//! over HTTP against keys completed through the store as a worker completes them.

use crate::harness::Api;
use axum::http::StatusCode;
use fleetsync_store::{ClaimParams, Completion, RunOutcome};
use serde_json::Value;

fn encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC).to_string()
}
use std::time::Duration;

/// Six clusters in two regions (one without a region, one selected by no SyncSet) and
/// a SyncSet on every cluster labelled `fleet: 'yes'`.
const FLEET: &str = r#"
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: eu-1, labels: {region: eu, fleet: 'yes'}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: eu-2, labels: {region: eu, fleet: 'yes'}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: us-1, labels: {region: us, fleet: 'yes'}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: us-2, labels: {region: us, fleet: 'yes'}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: lab, labels: {fleet: 'yes'}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: spare, labels: {region: us}}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: base}
spec:
  clusterSelector: {matchLabels: {fleet: 'yes'}}
  resources:
    - {apiVersion: v1, kind: Namespace, metadata: {name: app}}
"#;

/// The fleet with `eu-1` and `us-1` failed (one cause: the cluster's address refused),
/// `eu-2` applied, `us-2` and `lab` still pending.
async fn api_with_fleet() -> Api {
    let api = Api::new();
    assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
    let claimed = api.store.work_claim(ClaimParams::new("w", 10, Duration::from_secs(30))).await.expect("claim");
    let mut done = Vec::new();
    for item in claimed.into_iter().filter(|i| ["eu-1", "us-1", "eu-2"].contains(&i.key.cluster.as_str())) {
        let n = done.len() + 1;
        let outcome = match item.key.cluster.as_str() {
            "eu-2" => RunOutcome::Applied { generation: item.generation, inventory: vec![], rendered: None },
            c => RunOutcome::Failed {
                error: format!("unreachable: https://{c}.example:6443 (10.0.0.{n}): connection refused"),
            },
        };
        done.push(Completion { key: item.key, fence: item.fence, outcome, resources: vec![] });
    }
    assert_eq!(done.len(), 3);
    api.store.work_complete(done).await.expect("complete");
    api
}

fn names(list: &Value) -> Vec<&str> {
    list["items"].as_array().expect("items").iter().map(|c| c["name"].as_str().expect("name")).collect()
}

async fn get_ok(api: &Api, uri: &str) -> Value {
    let answer = api.get(uri).await;
    assert_eq!(answer.status, StatusCode::OK, "{uri}: {}", answer.text);
    answer.json()
}

#[tokio::test]
async fn clusters_are_found_by_name_label_and_condition() {
    let api = api_with_fleet().await;
    let all = get_ok(&api, "/v1/status/clusters").await;
    assert_eq!(names(&all), ["eu-1", "eu-2", "lab", "spare", "us-1", "us-2"]);
    assert_eq!(all["total"], 6);
    let eu1 = &all["items"][0];
    assert_eq!(
        (eu1["condition"].as_str(), eu1["keys"].as_u64(), eu1["failing"].as_u64()),
        (Some("Degraded"), Some(1), Some(1))
    );
    assert_eq!(eu1["labels"]["region"], "eu");

    let cases: [(&str, &[&str]); 8] = [
        ("name=US", &["us-1", "us-2"]),
        ("labelSelector=region%3Deu", &["eu-1", "eu-2"]),
        ("labelSelector=region+notin+(eu),fleet", &["lab", "us-1", "us-2"]),
        ("condition=degraded", &["eu-1", "us-1"]),
        ("condition=Ready", &["eu-2"]),
        ("condition=Progressing", &["lab", "us-2"]),
        ("condition=NoKeys", &["spare"]),
        ("stale=true", &[]),
    ];
    for (query, want) in cases {
        let found = get_ok(&api, &format!("/v1/status/clusters?{query}")).await;
        assert_eq!(names(&found), want, "{query}");
        assert_eq!(found["total"].as_u64(), Some(want.len() as u64), "{query}");
    }
    // eu-1 and us-1 failed with "unreachable: …": they did not answer, the others did
    // or have not run.
    let unreachable = get_ok(&api, "/v1/status/clusters?reachability=Unreachable").await;
    assert_eq!(names(&unreachable), ["eu-1", "us-1"]);
    let reachable = get_ok(&api, "/v1/status/clusters?reachability=reachable&labelSelector=region%3Deu").await;
    assert_eq!(names(&reachable), ["eu-2"]);
    let worst = get_ok(&api, "/v1/status/clusters?sort=condition&limit=3").await;
    assert_eq!((names(&worst), worst["total"].as_u64()), (vec!["eu-1", "us-1", "lab"], Some(6)));
    let next = get_ok(&api, "/v1/status/clusters?sort=condition&limit=3&offset=3").await;
    assert_eq!(names(&next), ["us-2", "eu-2", "spare"]);

    for (query, param) in [
        ("condition=Sad", "condition"),
        ("sort=age", "sort"),
        ("reachability=maybe", "reachability"),
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("labelSelector=a%3D%3D%3Db", "labelSelector"),
        ("colour=red", "colour"),
    ] {
        let answer = api.get(&format!("/v1/status/clusters?{query}")).await;
        assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{query}: {}", answer.text);
        assert!(answer.error().contains(param), "{query}: {}", answer.error());
    }
}

#[tokio::test]
async fn the_heat_map_counts_clusters_by_condition_per_label_value() {
    let api = api_with_fleet().await;
    let heat = get_ok(&api, "/v1/status/heatmap?groupBy=region").await;
    assert_eq!((heat["label"].as_str(), heat["clusters"].as_u64()), (Some("region"), Some(6)));
    let rows: Vec<(Value, Value)> = heat["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| (g["value"].clone(), g["byCondition"].clone()))
        .collect();
    assert_eq!(
        rows,
        [
            (Value::from("eu"), serde_json::json!({"Degraded": 1, "Ready": 1})),
            (Value::from("us"), serde_json::json!({"Degraded": 1, "Progressing": 1, "NoKeys": 1})),
            (Value::Null, serde_json::json!({"Progressing": 1})),
        ]
    );
    let answer = api.get("/v1/status/heatmap").await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
    assert!(answer.error().contains("groupBy"), "{}", answer.error());
}

#[tokio::test]
async fn failures_are_grouped_by_cause_and_retried_by_group_or_cluster() {
    let api = api_with_fleet().await;
    let failures = get_ok(&api, "/v1/status/failures").await;
    assert_eq!((failures["keys"].as_u64(), failures["truncated"].as_bool()), (Some(2), Some(false)), "{failures}");
    let groups = failures["groups"].as_array().expect("groups");
    assert_eq!(groups.len(), 1, "one cause: {failures}");
    let cause = groups[0]["cause"].as_str().expect("cause");
    assert_eq!(cause, "unreachable: https://<cluster>.example:# (#.#.#.#): connection refused");
    assert_eq!(groups[0]["clusters"], serde_json::json!(["eu-1", "us-1"]));
    assert_eq!(groups[0]["syncsets"], serde_json::json!(["base"]));

    // A cluster's failing keys, then the rest of the group: a retried key is pending,
    // no longer failing, so it is retried once.
    let by_cluster = post(&api, "/v1/status/clusters/eu-1/retry").await;
    assert_eq!(by_cluster.json()["retried"].as_u64(), Some(1), "{}", by_cluster.text);
    let other = post(&api, &format!("/v1/status/failures/retry?cause={}", encode("no such cause"))).await;
    assert_eq!((other.status, other.json()["retried"].as_u64()), (StatusCode::ACCEPTED, Some(0)), "{}", other.text);
    let retried = post(&api, &format!("/v1/status/failures/retry?cause={}", encode(cause))).await;
    assert_eq!(
        (retried.status, retried.json()["retried"].as_u64()),
        (StatusCode::ACCEPTED, Some(1)),
        "{}",
        retried.text
    );
    assert_eq!(get_ok(&api, "/v1/status/failures").await["keys"], 0);
    let events = get_ok(&api, "/v1/events").await;
    let retries: Vec<&str> = events["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["action"] == "Retry")
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(retries, ["eu-1/base", "us-1/base"]);

    let answer = post(&api, "/v1/status/clusters/nowhere/retry").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
    let answer = post(&api, &format!("/v1/status/failures/retry?cause={}", "x".repeat(301))).await;
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
    assert!(answer.error().contains("`cause`") && answer.error().contains("300"), "{}", answer.error());
    let answer = api.get("/v1/status/failures?syncset=nothing").await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND, "{}", answer.text);
}

async fn post(api: &Api, uri: &str) -> crate::harness::Answer {
    api.call("POST", uri, axum::body::Body::empty()).await
}

#[tokio::test]
async fn applies_and_failures_are_counted_per_minute() {
    let api = api_with_fleet().await;
    let activity = get_ok(&api, "/v1/status/activity").await;
    let minutes = activity["minutes"].as_array().expect("minutes");
    assert_eq!(minutes.len(), 60);
    let sum = |f: &str| minutes.iter().map(|m| m[f].as_u64().unwrap_or(0)).sum::<u64>();
    assert_eq!((sum("applied"), sum("failed")), (1, 2), "{activity}");
    let last = &minutes[59];
    assert_eq!(
        (last["applied"].as_u64(), last["failed"].as_u64()),
        (Some(1), Some(2)),
        "the current minute: {activity}"
    );
    assert!(activity.get("countedFrom").is_none(), "{activity}");
    // Another tenant's activity is its own.
    let other = get_ok(&api, "/v1/status/activity?tenant=nobody").await;
    let counted: u64 =
        other["minutes"].as_array().expect("minutes").iter().map(|m| m["applied"].as_u64().unwrap_or(0)).sum();
    assert_eq!(counted, 0);
}
