//! Credentials found the way kubectl finds them: a kubeconfig file and its
//! contexts, pointing at a `fleetsync sim` hub cluster on loopback.

mod common;

use common::{Hub, TENANT};
use fleetsync_kube_source::{api_resource, client_inferred, ConnectError, CrKind, Credentials};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::json;
use std::path::Path;

/// A kubeconfig with two contexts: `sim` (the simulator, with a bearer token) and
/// `nowhere` (a closed port), the current one.
fn kubeconfig(dir: &Path, hub: &Hub) -> std::path::PathBuf {
    let file = format!(
        "apiVersion: v1
kind: Config
current-context: nowhere
clusters:
- name: sim
  cluster:
    server: {}
- name: nowhere
  cluster:
    server: http://127.0.0.1:1
users:
- name: someone
  user:
    token: not-checked-by-the-simulator
contexts:
- name: sim
  context: {{cluster: sim, user: someone, namespace: {TENANT}}}
- name: nowhere
  context: {{cluster: nowhere, user: someone}}
",
        hub.url
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, file).expect("write kubeconfig");
    path
}

async fn list(client: kube::Client) -> Result<Vec<String>, kube::Error> {
    let api: Api<DynamicObject> = Api::namespaced_with(client, TENANT, &api_resource(CrKind::SyncSet));
    let list = api.list(&ListParams::default()).await?;
    Ok(list.items.into_iter().filter_map(|o| o.metadata.name).collect())
}

#[tokio::test]
async fn a_kubeconfig_context_reaches_its_cluster() {
    let hub = Hub::start().await;
    hub.apply_syncset("s", "user", json!({}), &["x"]).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = kubeconfig(dir.path(), &hub);

    let sim = Credentials { kubeconfig: Some(path.clone()), context: Some("sim".into()) };
    let client = client_inferred(&sim).await.expect("a client from the kubeconfig");
    assert_eq!(list(client).await.expect("listed through the context"), ["s"]);

    let current = Credentials { kubeconfig: Some(path.clone()), context: None };
    let client = client_inferred(&current).await.expect("a client from the current context");
    assert!(list(client).await.is_err(), "the current context (a closed port) is used when none is named");
}

#[tokio::test]
async fn a_context_that_does_not_exist_is_named_in_the_error() {
    let hub = Hub::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let path = kubeconfig(dir.path(), &hub);
    let missing = Credentials { kubeconfig: Some(path), context: Some("prod".into()) };
    let Err(err) = client_inferred(&missing).await else { panic!("no such context") };
    assert!(matches!(err, ConnectError::Kubeconfig { .. }), "{err:?}");
    assert!(err.to_string().contains("\"prod\""), "{err}");
    let unreadable = Credentials { kubeconfig: Some(dir.path().join("absent")), context: None };
    let Err(err) = client_inferred(&unreadable).await else { panic!("no file") };
    assert!(std::error::Error::source(&err).is_some(), "the cause is kept: {err:?}");
}
