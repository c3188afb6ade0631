//! Server-side apply, get, list and delete.

use crate::harness::{cm, object_uri, Sim, APPLY};
use axum::http::Method;
use serde_json::json;

#[tokio::test]
async fn create_update_and_no_op_reapply() {
    let sim = Sim::instant();
    let created = sim.apply("c1", &cm("a", "1")).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!((created.generation(), created.body["data"]["value"].as_str()), (1, Some("1")));
    let uid = created.body["metadata"]["uid"].clone();
    assert!(uid.as_str().is_some_and(|u| !u.is_empty()));
    assert!(created.body["metadata"]["creationTimestamp"].is_string());

    let same = sim.apply("c1", &cm("a", "1")).await;
    assert_eq!(same.status, 200);
    assert_eq!(
        (same.generation(), same.resource_version()),
        (1, created.resource_version()),
        "a no-op changes nothing"
    );

    let updated = sim.apply("c1", &cm("a", "2")).await;
    assert_eq!(updated.status, 200);
    assert_eq!(updated.generation(), 2);
    assert_ne!(updated.resource_version(), created.resource_version());
    assert_eq!(updated.body["metadata"]["uid"], uid, "the uid survives updates");
    assert_eq!(sim.server.totals().applies, 3);
}

#[tokio::test]
async fn get_list_and_delete() {
    let sim = Sim::instant();
    for name in ["b", "a"] {
        assert_eq!(sim.apply("c1", &cm(name, "1")).await.status, 201);
    }
    let uri = object_uri("c1", &cm("a", "1"));
    let got = sim.get(&uri).await;
    assert_eq!((got.status.as_u16(), got.body["metadata"]["name"].as_str()), (200, Some("a")));

    let list = sim.get("/clusters/c1/api/v1/namespaces/app/configmaps").await.body;
    assert_eq!((list["kind"].as_str(), list["apiVersion"].as_str()), (Some("ConfigMapList"), Some("v1")));
    assert!(list["metadata"]["resourceVersion"].is_string());
    let names: Vec<_> = list["items"].as_array().into_iter().flatten().map(|i| i["metadata"]["name"].clone()).collect();
    assert_eq!(names, [json!("a"), json!("b")], "sorted by name");
    let everywhere = sim.get("/clusters/c1/api/v1/configmaps").await.body;
    assert_eq!(everywhere["items"].as_array().map(Vec::len), Some(2));
    let elsewhere = sim.get("/clusters/c2/api/v1/namespaces/app/configmaps").await.body;
    assert_eq!(elsewhere["items"].as_array().map(Vec::len), Some(0), "clusters are separate");

    let deleted = sim.delete(&uri, None).await;
    assert_eq!((deleted.status.as_u16(), deleted.body["status"].as_str()), (200, Some("Success")));
    sim.get(&uri).await.assert_status(404, "NotFound");
    sim.delete(&uri, None).await.assert_status(404, "NotFound");
    assert_eq!((sim.server.totals().deletes, sim.server.object_count("c1")), (1, 1));
}

#[tokio::test]
async fn yaml_bodies_and_cluster_scoped_kinds() {
    let sim = Sim::instant();
    let yaml = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: app\n  labels: {team: a}\n";
    let uri = "/clusters/c1/api/v1/namespaces/app?fieldManager=test";
    let created = sim.call(Method::PATCH, uri, &[("content-type", APPLY)], yaml).await;
    assert_eq!(created.status, 201, "{}", created.body);
    assert_eq!(created.body["metadata"]["labels"]["team"], "a");
    assert!(created.body["metadata"].get("namespace").is_none());
    let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "app"}, "spec": {"replicas": 2}});
    let created = sim.apply("c1", &deploy).await;
    assert_eq!((created.status.as_u16(), created.body["spec"]["replicas"].as_i64()), (201, Some(2)));
}

#[tokio::test]
async fn unknown_plural_is_not_found() {
    let sim = Sim::instant();
    let uri = "/clusters/c1/apis/example.com/v1/namespaces/app/widgets/w?fieldManager=test";
    let body = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}).to_string();
    let answer = sim.call(Method::PATCH, uri, &[("content-type", APPLY)], body).await;
    answer.assert_status(404, "NotFound");
    sim.get("/clusters/c1/api/v1/namespaces/app/pods/p").await.assert_status(404, "NotFound");
    // A namespaced kind has no cluster-scoped object path.
    sim.get("/clusters/c1/api/v1/configmaps/a").await.assert_status(404, "NotFound");
}

#[tokio::test]
async fn objects_that_do_not_match_their_path_are_invalid() {
    let sim = Sim::instant();
    let uri = object_uri("c1", &cm("a", "1"));
    let uri = format!("{uri}?fieldManager=test");
    let sim = &sim;
    let patch = |body: serde_json::Value| {
        let uri = uri.clone();
        async move { sim.call(Method::PATCH, &uri, &[("content-type", APPLY)], body.to_string()).await }
    };
    let answer = patch(cm("other", "1")).await;
    answer.assert_status(422, "Invalid");
    assert!(answer.message().contains("metadata.name"), "{}", answer.message());
    let mut secret = cm("a", "1");
    secret["kind"] = "Secret".into();
    patch(secret).await.assert_status(422, "Invalid");
    assert_eq!(sim.server.object_count("c1"), 0);
}

#[tokio::test]
async fn apply_needs_a_field_manager_and_the_apply_content_type() {
    let sim = Sim::instant();
    let uri = object_uri("c1", &cm("a", "1"));
    let body = cm("a", "1").to_string();
    let no_manager = sim.call(Method::PATCH, &uri, &[("content-type", APPLY)], body.clone()).await;
    no_manager.assert_status(400, "BadRequest");
    assert!(no_manager.message().contains("fieldManager"));
    let merge = format!("{uri}?fieldManager=test");
    sim.call(Method::PATCH, &merge, &[("content-type", "application/merge-patch+json")], body.clone())
        .await
        .assert_status(415, "UnsupportedMediaType");
    sim.call(Method::POST, &merge, &[("content-type", "application/json")], body)
        .await
        .assert_status(405, "MethodNotAllowed");
}

#[tokio::test]
async fn another_field_manager_conflicts_unless_forced() {
    let sim = Sim::instant();
    assert_eq!(sim.apply("c1", &cm("a", "1")).await.status, 201);
    let uri = format!("{}?fieldManager=someone-else", object_uri("c1", &cm("a", "1")));
    let body = cm("a", "2").to_string();
    sim.call(Method::PATCH, &uri, &[("content-type", APPLY)], body.clone()).await.assert_status(409, "Conflict");
    let forced = sim.call(Method::PATCH, &format!("{uri}&force=true"), &[("content-type", APPLY)], body).await;
    assert_eq!(forced.status, 200);
}
