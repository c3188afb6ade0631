//! Paged lists: `limit` and `continue`, tokens bound to their list, tenant and filters,
//! and the filters of status (phase, staleness) and clusters (label selectors).

use crate::harness::Api;
use axum::http::StatusCode;
use fleetsync_store::{ClaimParams, Completion, RunOutcome};
use serde_json::Value;
use std::time::Duration;

/// Clusters `c1`..`c5` with the given labels each, and a SyncSet selecting all five.
fn fleet(labels: &[&str]) -> String {
    let mut yaml = String::new();
    for (i, l) in labels.iter().enumerate() {
        yaml.push_str(&format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{}, labels: {{all: 'yes', {l}}}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n---\n",
            i + 1
        ));
    }
    yaml.push_str("apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: base}\nspec:\n  clusterSelector: {matchLabels: {all: 'yes'}}\n  resources:\n    - {apiVersion: v1, kind: Namespace, metadata: {name: app}}\n");
    yaml
}

const LABELS: [&str; 5] =
    ["env: prod, tier: a", "env: prod, tier: b, canary: 'yes'", "env: dev, tier: a", "env: prod, tier: c", "tier: b"];

async fn api_with_fleet() -> Api {
    let api = Api::new();
    assert_eq!(api.apply(&fleet(&LABELS)).await.status, StatusCode::OK);
    api
}

/// Follows `continue` from `uri` (which has `limit`); returns each page's items.
async fn walk(api: &Api, uri: &str) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut next = uri.to_string();
    loop {
        let page = api.get(&next).await;
        assert_eq!(page.status, StatusCode::OK, "{}", page.text);
        let body = page.json();
        pages.push(body["items"].as_array().expect("items").clone());
        match body.get("continue") {
            Some(token) => next = format!("{uri}&continue={}", token.as_str().expect("a string token")),
            None => return pages,
        }
        assert!(pages.len() < 20, "the walk must end");
    }
}

fn names(pages: &[Vec<Value>], field: &dyn Fn(&Value) -> String) -> Vec<String> {
    pages.iter().flatten().map(field).collect()
}

fn cluster_name(v: &Value) -> String {
    v["metadata"]["name"].as_str().expect("name").to_string()
}

fn key_cluster(v: &Value) -> String {
    v["cluster"].as_str().expect("cluster").to_string()
}

fn expect_400(answer: &crate::harness::Answer, needles: &[&str]) {
    assert_eq!(answer.status, StatusCode::BAD_REQUEST, "{}", answer.text);
    let error = answer.error();
    for n in needles {
        assert!(error.contains(n), "{error:?} lacks {n:?}");
    }
}

#[tokio::test]
async fn status_and_clusters_page_with_limit_and_continue() {
    let api = api_with_fleet().await;
    let all = ["c1", "c2", "c3", "c4", "c5"].map(String::from).to_vec();
    let pages = walk(&api, "/v1/status?limit=2").await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
    assert_eq!(names(&pages, &key_cluster), all);
    let pages = walk(&api, "/v1/clusters?limit=2").await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
    assert_eq!(names(&pages, &cluster_name), all);
    // A page ending exactly at the end has no token.
    let exact = walk(&api, "/v1/clusters?limit=5").await;
    assert_eq!(exact.len(), 1);
    // Without `limit`: the whole list, no token, as before paging.
    let whole = api.get("/v1/status").await.json();
    assert_eq!(whole["items"].as_array().map(Vec::len), Some(5));
    assert!(whole.get("continue").is_none(), "{whole}");
    assert_eq!(walk(&api, "/v1/syncsets?limit=1").await.len(), 1);
}

#[tokio::test]
async fn secrets_page_with_values_redacted() {
    let api = Api::new();
    let secret = |n: u32| {
        format!("apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: s{n}}}\nstringData: {{kubeconfig: hush-{n}}}\n")
    };
    let docs: Vec<String> = (1..=3).map(secret).collect();
    assert_eq!(api.apply(&docs.join("---\n")).await.status, StatusCode::OK);
    let pages = walk(&api, "/v1/secrets?limit=2").await;
    assert_eq!(names(&pages, &cluster_name), ["s1", "s2", "s3"]);
    let text = serde_json::to_string(&pages).expect("json");
    assert!(!text.contains("hush") && text.contains("redacted"), "{text}");
}

#[tokio::test]
async fn continue_tokens_are_bound_to_their_list_filter_and_tenant() {
    let api = api_with_fleet().await;
    let first = api.get("/v1/status?limit=1").await.json();
    let token = first["continue"].as_str().expect("a token").to_string();
    assert_eq!(api.get(&format!("/v1/status?limit=1&continue={token}")).await.status, StatusCode::OK);
    // `continue` without `limit` pages by 500.
    let rest = api.get(&format!("/v1/status?continue={token}")).await.json();
    assert_eq!(rest["items"].as_array().map(Vec::len), Some(4));
    for other in [
        format!("/v1/status?limit=1&phase=Pending&continue={token}"),
        format!("/v1/status?limit=1&stale=true&continue={token}"),
        format!("/v1/status?limit=1&tenant=other&continue={token}"),
        format!("/v1/status?limit=1&cluster=c2&continue={token}"),
        format!("/v1/clusters?limit=1&continue={token}"),
    ] {
        expect_400(&api.get(&other).await, &["`continue`", "another list, tenant or filter"]);
    }
    let cluster_token = api.get("/v1/clusters?limit=1").await.json()["continue"].as_str().expect("token").to_string();
    expect_400(&api.get(&format!("/v1/syncsets?limit=1&continue={cluster_token}")).await, &["`continue`"]);
    expect_400(
        &api.get(&format!("/v1/clusters?limit=1&labelSelector=env%3Dprod&continue={cluster_token}")).await,
        &["`continue`"],
    );
    for garbage in ["garbage", "eyJ2IjoxfQ", "%FF", &"A".repeat(5000)] {
        expect_400(&api.get(&format!("/v1/status?limit=1&continue={garbage}")).await, &["query parameter `continue`"]);
    }
}

#[tokio::test]
async fn limits_are_bounded() {
    let api = api_with_fleet().await;
    for uri in
        ["/v1/status?limit=0", "/v1/status?limit=5001", "/v1/clusters?limit=0", "/v1/live?cluster=c1&limit=100000"]
    {
        expect_400(&api.get(uri).await, &["query parameter `limit`", "5000"]);
    }
    expect_400(&api.get("/v1/clusters?limit=lots").await, &["`limit`"]);
    assert_eq!(api.get("/v1/status?limit=5000").await.status, StatusCode::OK);
}

#[tokio::test]
async fn status_filtered_by_phase_and_staleness() {
    let api = api_with_fleet().await;
    let claimed =
        api.store.work_claim(ClaimParams::new("w", 1, Duration::from_secs(30))).await.expect("claim").remove(0);
    let outcome = RunOutcome::Applied { generation: claimed.generation, inventory: vec![], rendered: None };
    api.store
        .work_complete(vec![Completion { key: claimed.key.clone(), fence: claimed.fence, outcome, resources: vec![] }])
        .await
        .expect("complete");
    let done = claimed.key.cluster.clone();
    let pending: Vec<String> =
        ["c1", "c2", "c3", "c4", "c5"].iter().filter(|c| **c != done).map(|c| c.to_string()).collect();

    assert_eq!(names(&walk(&api, "/v1/status?limit=2&phase=Applied").await, &key_cluster), [done]);
    assert_eq!(names(&walk(&api, "/v1/status?limit=2&phase=Pending").await, &key_cluster), pending);
    assert_eq!(names(&walk(&api, "/v1/status?limit=2&phase=Pending,Applied").await, &key_cluster).len(), 5);
    assert!(names(&walk(&api, "/v1/status?limit=2&phase=Failed,Parked").await, &key_cluster).is_empty());
    assert_eq!(names(&walk(&api, "/v1/status?limit=3&stale=true").await, &key_cluster), pending);
    // Without `limit`, the filters hold too.
    assert_eq!(api.get("/v1/status?phase=Applied").await.json()["items"].as_array().map(Vec::len), Some(1));
    expect_400(&api.get("/v1/status?phase=Broken").await, &["query parameter `phase`", "\"Broken\"", "Parked"]);
    expect_400(&api.get("/v1/status?limit=2&phase=Failed,").await, &["query parameter `phase`"]);
    expect_400(&api.get("/v1/status?stale=maybe").await, &["`stale`"]);
    // Unknown names are still a 404, paged or not.
    assert_eq!(api.get("/v1/status?cluster=nope&limit=2").await.status, StatusCode::NOT_FOUND);
    assert_eq!(api.get("/v1/status?syncset=nope&phase=Failed").await.status, StatusCode::NOT_FOUND);
    assert_eq!(api.get("/v1/status?cluster=c1&phase=Parked&limit=2").await.status, StatusCode::OK);
}

#[tokio::test]
async fn clusters_selected_by_labels() {
    let api = api_with_fleet().await;
    let select = async |selector: &str| {
        let uri = format!(
            "/v1/clusters?limit=1&labelSelector={}",
            selector.replace(' ', "%20").replace('=', "%3D").replace('!', "%21")
        );
        names(&walk(&api, &uri).await, &cluster_name)
    };
    assert_eq!(select("tier in (a,b)").await, ["c1", "c2", "c3", "c5"]);
    assert_eq!(select("env notin (dev)").await, ["c1", "c2", "c4", "c5"]);
    assert_eq!(select("env=prod,!canary").await, ["c1", "c4"]);
    assert_eq!(select("env!=prod,tier").await, ["c3", "c5"]);
    let whole = api.get("/v1/clusters?labelSelector=canary").await.json();
    assert_eq!(
        whole["items"].as_array().map(|i| i.iter().map(cluster_name).collect::<Vec<_>>()),
        Some(vec!["c2".to_string()])
    );
    expect_400(
        &api.get("/v1/clusters?labelSelector=tier%20in%20(a").await,
        &["query parameter `labelSelector`", "unbalanced"],
    );
}

#[tokio::test]
async fn every_kind_is_selected_by_labels_paged_or_whole() {
    let api = Api::new();
    let set = |name: &str, labels: &str| {
        format!("apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nspec: {{clusterNames: [c1]}}\n")
    };
    let docs = [set("s1", "team: a"), set("s2", "team: b, tier: web"), set("s3", "team: a, tier: db"), set("s4", "")];
    assert_eq!(api.apply(&docs.join("---\n")).await.status, StatusCode::OK);
    let name = |v: &Value| v["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let paged = |selector: &str| {
        format!(
            "/v1/syncsets?limit=2&labelSelector={}",
            selector.replace(' ', "%20").replace('=', "%3D").replace('!', "%21")
        )
    };
    assert_eq!(names(&walk(&api, &paged("team=a")).await, &name), ["s1", "s3"]);
    assert_eq!(names(&walk(&api, &paged("tier in (web,db),team!=b")).await, &name), ["s3"]);
    assert_eq!(names(&walk(&api, &paged("!tier")).await, &name), ["s1", "s4"]);
    let whole = api.get("/v1/syncsets?labelSelector=tier").await.json();
    assert_eq!(
        whole["items"].as_array().map(|i| i.iter().map(name).collect::<Vec<_>>()),
        Some(vec!["s2".into(), "s3".into()])
    );
    expect_400(&api.get("/v1/syncsets?labelSelector=a%20in").await, &["query parameter `labelSelector`"]);
}

#[tokio::test]
async fn paged_lists_keep_their_tenant_scoping() {
    let api = api_with_fleet().await;
    let viewer = api.issue("team-a:viewer", None).await;
    let other = api.call_as(Some(&viewer), "GET", "/v1/status?tenant=default&limit=1", None, "").await;
    assert_eq!(other.status, StatusCode::FORBIDDEN, "{}", other.text);
    let own = api.call_as(Some(&viewer), "GET", "/v1/clusters?tenant=team-a&limit=1", None, "").await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.text);
    assert_eq!(own.json()["items"].as_array().map(Vec::len), Some(0));
}
