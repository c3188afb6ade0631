//! kube-rs, the client the applier uses, against the simulator over loopback:
//! discovery, server-side apply, get, list, delete, and typed errors.

use crate::harness::{cm, fenced};
use fleetsync_k8s_sim::{LatencyModel, SimConfig, SimServer};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};
use kube::{Client, Config};
use serde_json::json;
use tokio::net::TcpListener;

async fn client_for(cluster: &str) -> (Client, SimServer, tokio::sync::oneshot::Sender<()>) {
    let sim = SimServer::new(SimConfig { latency: LatencyModel::zero(), ..SimConfig::default() });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/clusters/{cluster}", listener.local_addr().expect("addr"));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = sim.clone();
    tokio::spawn(async move { server.serve(listener, async move { drop(stopped.await) }).await });
    let client = Client::try_from(Config::new(url.parse().expect("url"))).expect("client");
    (client, sim, stop)
}

fn kube_status(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn kube_rs_discovers_applies_reads_and_deletes() {
    let (client, sim, _stop) = client_for("c1").await;
    let discovery = Discovery::new(client.clone()).run().await.expect("discovery");
    let (deploy, caps) = discovery.resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment")).expect("Deployment");
    assert_eq!((deploy.plural.as_str(), caps.scope), ("deployments", Scope::Namespaced));
    let (ns, caps) = discovery.resolve_gvk(&GroupVersionKind::gvk("", "v1", "Namespace")).expect("Namespace");
    assert_eq!(caps.scope, Scope::Cluster);
    assert!(discovery.resolve_gvk(&GroupVersionKind::gvk("fleetsync.io", "v1", "SyncSet")).is_some());
    let (cms, _) = discovery.resolve_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")).expect("ConfigMap");

    let apply = PatchParams::apply("fleetsync").force();
    let namespaces: Api<DynamicObject> = Api::all_with(client.clone(), &ns);
    let app: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "app"}}))
            .expect("ns");
    namespaces.patch("app", &apply, &Patch::Apply(&app)).await.expect("namespace");

    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "app", &cms);
    let obj: DynamicObject = serde_json::from_value(fenced(cm("a", "1"), "t/c1/s", 2, 5, 0)).expect("object");
    let applied = api.patch("a", &apply, &Patch::Apply(&obj)).await.expect("apply");
    assert_eq!((applied.metadata.generation, applied.data["data"]["value"].as_str()), (Some(1), Some("1")));
    assert!(applied.metadata.uid.is_some() && applied.metadata.creation_timestamp.is_some());
    assert_eq!(api.get("a").await.expect("get").metadata.resource_version, applied.metadata.resource_version);
    assert_eq!(api.list(&ListParams::default()).await.expect("list").items.len(), 1);

    let stale: DynamicObject = serde_json::from_value(fenced(cm("a", "0"), "t/c1/s", 1, 4, 0)).expect("object");
    let (code, reason, message) = kube_status(api.patch("a", &apply, &Patch::Apply(&stale)).await.expect_err("stale"));
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(message.contains("stale fencing token"), "{message}");

    api.delete("a", &DeleteParams::default()).await.expect("delete");
    let (code, reason, _) = kube_status(api.get("a").await.expect_err("gone"));
    assert_eq!((code, reason.as_str()), (404, "NotFound"));
    assert_eq!(sim.totals().fenced, 1);
}
