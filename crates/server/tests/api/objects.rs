//! Applying documents, reading them back, deleting them.

use crate::harness::{Api, FLEET};
use axum::http::StatusCode;

#[tokio::test]
async fn apply_then_get_back_with_generation() {
    let api = Api::new();
    let a = api.apply(FLEET).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    let results = a.json()["results"].as_array().cloned().expect("results");
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r["result"] == "created" && r["generation"] == 1), "{results:?}");
    assert_eq!(results[2]["enqueued"], 2);

    let list = api.get("/v1/clusters").await;
    assert_eq!(list.status, StatusCode::OK);
    let items = list.json()["items"].as_array().cloned().expect("items");
    assert_eq!(items.len(), 2);
    assert_eq!(items[0]["apiVersion"], "fleetsync.io/v1");
    assert_eq!(items[0]["kind"], "Cluster");
    assert_eq!(items[0]["metadata"]["generation"], 1);

    let set = api.get("/v1/syncsets/base").await;
    assert_eq!(set.status, StatusCode::OK, "{}", set.text);
    let set = set.json();
    assert_eq!(set["kind"], "SyncSet");
    assert_eq!(set["metadata"]["name"], "base");
    assert_eq!(set["metadata"]["generation"], 1);
    assert_eq!(api.get("/v1/syncsets").await.json()["items"].as_array().map(Vec::len), Some(1));
    // Another tenant sees nothing.
    assert_eq!(api.get("/v1/clusters?tenant=other").await.json()["items"], serde_json::json!([]));
}

#[tokio::test]
async fn reapply_unchanged_then_changed() {
    let api = Api::new();
    api.apply(FLEET).await;
    let again = api.apply(FLEET).await.json();
    assert!(again["results"].as_array().expect("results").iter().all(|r| r["result"] == "unchanged"), "{again}");

    let changed = FLEET.replace("name: app", "name: app2");
    let r = api.apply(&changed).await.json();
    assert_eq!(r["results"][2]["result"], "updated", "{r}");
    assert_eq!(r["results"][2]["generation"], 2);
    assert_eq!(api.get("/v1/syncsets/base").await.json()["metadata"]["generation"], 2);
}

#[tokio::test]
async fn json_body_is_accepted() {
    let api = Api::new();
    let doc = r#"{"apiVersion":"fleetsync.io/v1","kind":"Cluster","metadata":{"name":"j"},"spec":{"endpoint":{"simulator":{}}}}"#;
    let a = api.apply(doc).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.text);
    assert_eq!(api.get("/v1/clusters/j").await.status, StatusCode::OK);
}

#[tokio::test]
async fn malformed_yaml_names_the_document() {
    let api = Api::new();
    let a = api.apply(&format!("{FLEET}---\nfoo: [unclosed\n")).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.content_type.starts_with("application/json"), "{}", a.content_type);
    assert!(a.error().contains("document 4"), "{}", a.text);
    assert_eq!(a.json()["document"], "document 4");
    // All or nothing: the valid documents before it were not applied.
    assert_eq!(api.get("/v1/clusters").await.json()["items"], serde_json::json!([]));
}

/// A `dependsOn` that closes a cycle is a 422 naming the cycle; nothing is written.
#[tokio::test]
async fn a_dependency_cycle_is_refused_naming_it() {
    let api = Api::new();
    let set = |name: &str, on: &str| {
        format!(
            "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: {name}}}\n\
             spec: {{clusterNames: [c1], dependsOn: [{{name: {on}}}], resources: []}}\n"
        )
    };
    assert_eq!(api.apply(&set("app", "db")).await.status, StatusCode::OK);
    let a = api.apply(&format!("{}---\n{}", set("net", "app"), set("db", "net"))).await;
    assert_eq!(a.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", a.text);
    assert!(a.error().contains("spec.dependsOn makes a cycle: db → net → app → db"), "{}", a.text);
    assert_eq!(api.get("/v1/syncsets/net").await.status, StatusCode::NOT_FOUND, "nothing of the apply is written");
    let itself = api.apply(&set("solo", "solo")).await;
    assert_eq!(itself.status, StatusCode::BAD_REQUEST, "{}", itself.text);
    assert_eq!(itself.json()["field"], "spec.dependsOn[0].name");
}

#[tokio::test]
async fn unknown_kind_names_the_field() {
    let a = Api::new().apply("apiVersion: fleetsync.io/v1\nkind: Deployment\nmetadata: {name: x}\n").await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    let body = a.json();
    assert_eq!(body["field"], "kind");
    assert!(body["rule"].as_str().is_some_and(|r| r.contains("Deployment")), "{body}");
    assert_eq!(body["document"], "document 1 (Deployment default/x)");
}

#[tokio::test]
async fn invalid_name_in_a_document_names_metadata_name() {
    let doc =
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: Bad_Name}\nspec: {endpoint: {simulator: {}}}\n";
    let a = Api::new().apply(doc).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["field"], "metadata.name");
    assert!(a.error().contains("metadata.name"), "{}", a.text);
}

#[tokio::test]
async fn oversized_resource_is_400() {
    let big = "x".repeat(1024 * 1024 + 1);
    let doc = format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: s}}\nspec:\n  clusterNames: [a]\n  resources:\n  - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: big}}, data: {{k: {big}}}}}\n"
    );
    let a = Api::new().apply(&doc).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert_eq!(a.json()["field"], "spec.resources[0]");
    assert!(a.error().contains("1 MiB"), "{}", a.error());
}

#[tokio::test]
async fn body_over_64_mib_is_413() {
    let body = vec![b'#'; 64 * 1024 * 1024 + 1];
    let a = Api::new().call("POST", "/v1/apply", body).await;
    assert_eq!(a.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert!(a.error().contains("larger than the limit"), "{}", a.text);
}

#[tokio::test]
async fn bad_bodies_are_400() {
    let api = Api::new();
    let a = api.call("POST", "/v1/apply", vec![0xff, 0xfe, 0x00]).await;
    assert_eq!(a.status, StatusCode::BAD_REQUEST);
    assert!(a.error().contains("request body"), "{}", a.text);
    let empty = api.apply("").await;
    assert_eq!(empty.status, StatusCode::BAD_REQUEST);
    assert!(empty.error().contains("no documents"), "{}", empty.text);
    let tenant = api.call("POST", "/v1/apply?tenant=a", FLEET.to_string()).await;
    assert_eq!(tenant.status, StatusCode::BAD_REQUEST);
    assert!(tenant.error().contains("tenant"), "{}", tenant.text);
}

#[tokio::test]
async fn delete_then_404() {
    let api = Api::new();
    api.apply(FLEET).await;
    let d = api.call("DELETE", "/v1/clusters/c1", "").await;
    assert_eq!(d.status, StatusCode::OK, "{}", d.text);
    assert_eq!(d.json(), serde_json::json!({"deleted": {"kind": "Cluster", "tenant": "default", "name": "c1"}}));
    let gone = api.get("/v1/clusters/c1").await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert_eq!(gone.error(), "Cluster default/c1 not found");
    assert_eq!(api.call("DELETE", "/v1/clusters/c1", "").await.status, StatusCode::NOT_FOUND);

    assert_eq!(api.call("DELETE", "/v1/syncsets/base", "").await.status, StatusCode::OK);
    assert_eq!(api.get("/v1/syncsets/base").await.status, StatusCode::NOT_FOUND);
    assert_eq!(api.call("DELETE", "/v1/syncsets/base?tenant=x", "").await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn invalid_names_in_urls_are_400() {
    let api = Api::new();
    for uri in [
        "/v1/clusters/Bad_Name",
        "/v1/syncsets/a%2Fb",
        "/v1/clusters/x?tenant=UPPER",
        "/v1/clusters?tenant=",
        "/v1/status/clusters/-x",
        "/v1/status/syncsets/x.y",
        "/v1/status?cluster=A",
    ] {
        let a = api.get(uri).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{uri}: {}", a.text);
        assert!(a.error().starts_with("invalid "), "{uri}: {}", a.text);
    }
    let long = format!("/v1/clusters/{}", "a".repeat(64));
    assert!(api.get(&long).await.error().contains("63"));
}

/// One small apply that would fan out to 40,000 keys (200 clusters, 200 SyncSets each
/// selecting every cluster) is refused whole under a keys quota, with a 403 naming the
/// quota and the numbers; within the quota the same tenant still applies.
#[tokio::test]
async fn an_apply_past_a_quota_is_refused_whole_with_the_numbers() {
    let quotas = fleetsync_store::Quotas { default: "keys=10000".parse().expect("quota"), tenants: Default::default() };
    let api = Api::with_quotas(quotas);
    let mut fleet = String::new();
    for i in 0..200 {
        fleet.push_str(&format!("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n---\n"));
    }
    assert_eq!(api.apply(&fleet).await.status, StatusCode::OK);
    let mut syncsets = String::new();
    for i in 0..200 {
        syncsets.push_str(&format!(
            "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: s{i}}}\nspec: {{clusterSelector: {{}}, resources: [{{apiVersion: v1, kind: Namespace, metadata: {{name: n{i}}}}}]}}\n---\n"
        ));
    }
    assert!(syncsets.len() < 64 * 1024, "a small body: {} bytes", syncsets.len());
    let refused = api.apply(&syncsets).await;
    assert_eq!(refused.status, StatusCode::FORBIDDEN, "{}", refused.text);
    assert_eq!(refused.error(), "exceeded quota of tenant default: keys would be 40000 (now 0); the limit is 10000");
    assert_eq!(api.get("/v1/syncsets").await.json()["items"], serde_json::json!([]), "nothing written");
    assert_eq!(api.get("/v1/status").await.json()["items"], serde_json::json!([]), "no key");

    let fifty: String = syncsets.split("---\n").take(50).collect::<Vec<_>>().join("---\n");
    let a = api.apply(&fifty).await;
    assert_eq!(a.status, StatusCode::OK, "10,000 keys are within the quota: {}", a.text);
}
