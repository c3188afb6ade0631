//! The names of RBAC objects inside SyncSets: Kubernetes' path segment rule, held to
//! what a URL path carries unescaped, so that a Role the hub accepts is one it can
//! name in a real cluster's URL.

use crate::harness::Api;
use axum::http::StatusCode;

fn set(kind: &str, name: &str) -> String {
    format!(
        r#"
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {{name: rbac}}
spec:
  clusterNames: [c1]
  resources:
    - {{apiVersion: rbac.authorization.k8s.io/v1, kind: {kind}, metadata: {{name: {name}, namespace: app}}}}
"#
    )
}

#[tokio::test]
async fn role_names_with_spaces_or_markup_are_refused_naming_the_rule() {
    let api = Api::new();
    for name in [r#""admin role""#, r#""<b>admin</b>""#, r#""it's""#, r#""a&b""#, r#""rôle""#] {
        for kind in ["Role", "ClusterRoleBinding"] {
            let refused = api.apply(&set(kind, name)).await;
            assert_eq!(refused.status, StatusCode::BAD_REQUEST, "{kind} {name}: {}", refused.text);
            assert_eq!(refused.json()["field"], "spec.resources[0].metadata.name", "{}", refused.text);
            assert!(refused.error().contains("path segment name is ASCII letters, digits"), "{}", refused.error());
        }
    }
    assert!(api.store.syncset_get("default", "rbac").await.expect("read").is_none(), "nothing stored");
    for name in ["system:controller:job-controller", "edit", "user@example.com", "AdminRole"] {
        let applied = api.apply(&set("ClusterRole", name)).await;
        assert_eq!(applied.status, StatusCode::OK, "{name}: {}", applied.text);
    }
}
