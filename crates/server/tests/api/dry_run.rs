//! `POST /v1/apply?dryRun=All`: the apply, run whole and rolled back.

use crate::harness::{Api, FLEET};
use axum::http::StatusCode;
use fleetsync_api::ApplyResponse;
use serde_json::Value;

/// The base SyncSet changed and a third cluster added to FLEET.
fn changed() -> String {
    let c3 = "---\napiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: c3, labels: {env: prod}}\nspec: {endpoint: {simulator: {}}}\n";
    format!("{}{c3}", FLEET.replace("name: app", "name: app2"))
}

/// Everything a reader sees of the tenant: its objects, the event log and the keys.
async fn seen(api: &Api) -> [Value; 4] {
    let mut out = Vec::new();
    for uri in ["/v1/clusters", "/v1/syncsets", "/v1/events", "/v1/status"] {
        let a = api.get(uri).await;
        assert_eq!(a.status, StatusCode::OK, "{uri}: {}", a.text);
        out.push(a.json());
    }
    out.try_into().expect("four answers")
}

#[tokio::test]
async fn a_dry_run_answers_as_the_apply_and_changes_nothing() {
    let api = Api::new();
    assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
    let before = seen(&api).await;

    let dry = api.call("POST", "/v1/apply?dryRun=All", changed()).await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    let dry: ApplyResponse = dry.typed();
    assert!(dry.dry_run, "the answer says it was a dry run");
    let said: Vec<_> = dry.results.iter().map(|r| (r.name.as_str(), r.result.as_str(), r.generation)).collect();
    assert_eq!(said, [("c1", "unchanged", 1), ("c2", "unchanged", 1), ("base", "updated", 2), ("c3", "created", 1)]);
    assert_eq!(seen(&api).await, before, "objects, generations, events and keys are as they were");

    let real = api.apply(&changed()).await;
    assert!(real.json().get("dryRun").is_none(), "an apply carries no dryRun: {}", real.text);
    let real: ApplyResponse = real.typed();
    assert_eq!(real.results, dry.results, "the apply answers what its dry run said");
    assert_eq!(api.get("/v1/syncsets/base").await.json()["metadata"]["generation"], 2);
}

#[tokio::test]
async fn a_dry_run_is_refused_what_the_apply_is_refused() {
    let quotas = fleetsync_store::Quotas { default: "clusters=2".parse().expect("quota"), tenants: Default::default() };
    let api = Api::with_quotas(quotas);
    assert_eq!(api.apply(FLEET).await.status, StatusCode::OK);
    let before = seen(&api).await;

    let over = api.call("POST", "/v1/apply?dryRun=All", changed()).await;
    assert_eq!(over.status, StatusCode::FORBIDDEN, "{}", over.text);
    assert_eq!(over.error(), "exceeded quota of tenant default: clusters would be 3 (now 2); the limit is 2");

    let viewer = api.issue("default:viewer", None).await;
    let denied =
        api.call_as(Some(&viewer), "POST", "/v1/apply?dryRun=All", Some("application/yaml"), FLEET.to_string()).await;
    assert_eq!(denied.status, StatusCode::FORBIDDEN, "a viewer may not dry-run a write: {}", denied.text);
    assert!(denied.error().contains("Cluster default/c1"), "{}", denied.text);

    let invalid = api.call("POST", "/v1/apply?dryRun=All", FLEET.replace("name: c1", "name: C1")).await;
    assert_eq!(
        (invalid.status, invalid.json()["field"].as_str()),
        (StatusCode::BAD_REQUEST, Some("metadata.name")),
        "{}",
        invalid.text
    );
    assert_eq!(seen(&api).await, before);
}

#[tokio::test]
async fn only_dry_run_all_is_accepted() {
    let api = Api::new();
    for value in ["bogus", "all", "Server", ""] {
        let a = api.call("POST", &format!("/v1/apply?dryRun={value}"), FLEET.to_string()).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{value}: {}", a.text);
        assert!(a.error().starts_with("invalid query parameter `dryRun`"), "{value}: {}", a.text);
        assert!(a.error().contains("`All`"), "names the accepted value: {}", a.text);
    }
    assert_eq!(api.get("/v1/clusters").await.json()["items"], serde_json::json!([]), "nothing applied");
}
