//! What the API shows and refuses of the resources inside SyncSets and of Secrets:
//! names by Kubernetes' rules, Secret manifests redacted on read (and refused when
//! applied back redacted), and errors about Secrets that never quote a value.

use crate::harness::Api;
use axum::http::StatusCode;
use fleetsync_model::secret::REDACTED;

const SET: &str = r#"
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: creds}
spec:
  clusterNames: [c1]
  resources:
    - {apiVersion: v1, kind: Namespace, metadata: {name: app}}
    - {apiVersion: v1, kind: Secret, metadata: {name: db, namespace: app}, stringData: {password: MARKER-p4ss}}
"#;

#[tokio::test]
async fn secret_manifests_are_redacted_on_read_but_stored_whole() {
    let api = Api::new();
    let applied = api.apply(SET).await;
    assert_eq!(applied.status, StatusCode::OK, "{}", applied.text);
    for uri in ["/v1/syncsets/creds", "/v1/syncsets"] {
        let shown = api.get(uri).await;
        assert_eq!(shown.status, StatusCode::OK, "{}", shown.text);
        assert!(!shown.text.contains("MARKER"), "{uri}: {}", shown.text);
        assert!(shown.text.contains(r#""password":"<redacted>""#), "{uri}: {}", shown.text);
    }
    let stored = api.store.syncset_get("default", "creds").await.expect("read").expect("stored");
    assert_eq!(stored.spec.resources[1].0["stringData"]["password"], "MARKER-p4ss", "the applier reads the value");

    let back = api.get("/v1/syncsets/creds").await.text;
    assert!(back.contains(REDACTED));
    let refused = api.apply(&back).await;
    assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{}", refused.text);
    assert_eq!(refused.json()["field"], "spec.resources[1].stringData.password", "{}", refused.text);
    let still = api.store.syncset_get("default", "creds").await.expect("read").expect("stored");
    assert_eq!(still.spec.resources[1].0["stringData"]["password"], "MARKER-p4ss", "nothing was overwritten");
}

#[tokio::test]
async fn manifest_names_breaking_kubernetes_rules_are_400_naming_the_field() {
    let api = Api::new();
    for (name, field) in [
        ("\"x\\0y\"", "spec.resources[0].metadata.name"),
        ("\"../../../../admin/x?confirm=yes#\"", "spec.resources[0].metadata.name"),
        ("My.App", "spec.resources[0].metadata.name"),
    ] {
        let a = api.apply(&SET.replace("name: app}}", &format!("name: {name}}}}}"))).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{name}: {}", a.text);
        assert_eq!(a.json()["field"], field, "{name}: {}", a.text);
    }
}

#[tokio::test]
async fn secret_type_errors_never_echo_the_value() {
    let api = Api::new();
    let head = "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {name: kc}\n";
    for body in [
        "stringData: |\n  apiVersion: v1\n  users: [{user: {token: MARKER-kc}}]\n",
        "stringData: {token: !!int MARKER-kc}\n",
        "stringData: {token: !!bool MARKER-kc}\n",
        "stringData: {token: {nested: MARKER-kc}}\n",
    ] {
        let a = api.apply(&format!("{head}{body}")).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{body}: {}", a.text);
        assert!(!a.text.contains("MARKER"), "{body}: {}", a.text);
    }
}
