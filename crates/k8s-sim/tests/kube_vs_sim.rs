//! The Kubernetes applier against `fleetsync sim` over loopback HTTP: real kube-rs
//! clients, real discovery, real server-side apply requests.

use fleetsync_applier::egress::EgressPolicy;
use fleetsync_applier::kubeconfig::SecretSource;
use fleetsync_applier::kubernetes::{KubeApplier, KubeConfig};
use fleetsync_applier::{Applier, ApplyContext, ApplyError, Moment};
use fleetsync_k8s_sim::{LatencyModel, SimConfig, SimServer};
use fleetsync_model::{Cluster, ClusterSpec, Endpoint, Fence, Manifest, ObjectMeta, ResourceRef, WorkKey};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

struct Sim {
    server: SimServer,
    base: String,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn sim(config: SimConfig) -> Sim {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let server = SimServer::new(config);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let s = server.clone();
    tokio::spawn(async move {
        let _ = s
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await;
    });
    Sim { server, base, _stop: stop }
}

fn quiet() -> SimConfig {
    SimConfig { latency: LatencyModel::zero(), fail_rate: 0.0, fail_status: 500 }
}

fn cluster(s: &Sim, name: &str) -> Cluster {
    let url = format!("{}/clusters/{name}", s.base);
    Cluster { metadata: ObjectMeta::new(name), spec: ClusterSpec::new(Endpoint::Http { url }) }
}

fn cm(name: &str, value: &str) -> Manifest {
    Manifest(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "apps"}, "data": {"v": value}}),
    )
}

fn ctx(fence: i64, generation: i64, index: usize) -> ApplyContext {
    ApplyContext::new(WorkKey::new("default", "c1", "s1"), Fence::new(fence), generation, index)
}

fn applier() -> KubeApplier {
    KubeApplier::new(KubeConfig {
        request_timeout: Duration::from_secs(2),
        egress: loopback(),
        ..KubeConfig::default()
    })
}

/// The simulator listens on loopback, which the egress policy refuses unless allowed.
fn loopback() -> EgressPolicy {
    EgressPolicy::parse(&["127.0.0.1"], &[]).expect("rule")
}

fn generation_of(s: &Sim, r: &ResourceRef) -> Option<i64> {
    let keys = s.server.key_generations();
    let id = format!("{}/{}/{}/{}", r.api_version, r.kind, r.namespace.as_deref().unwrap_or(""), r.name);
    keys.get("default/c1/s1").and_then(|k| k.get(&id)).copied()
}

#[tokio::test]
async fn create_update_reapply_and_delete() {
    let s = sim(quiet()).await;
    let (k, c) = (applier(), cluster(&s, "c1"));
    k.apply(&c, &cm("a", "1"), &ctx(1, 1, 0)).await.expect("create");
    k.apply(&c, &cm("a", "2"), &ctx(2, 2, 0)).await.expect("update");
    k.apply(&c, &cm("a", "2"), &ctx(3, 2, 0)).await.expect("no-op re-apply");
    let r = cm("a", "2").resource_ref().expect("ref");
    assert_eq!(generation_of(&s, &r), Some(2));
    let ns = Manifest(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}}));
    k.apply(&c, &ns, &ctx(3, 2, 1)).await.expect("cluster-scoped kind");
    k.delete(&c, &r, &ctx(3, 2, 0)).await.expect("delete");
    assert_eq!(generation_of(&s, &r), None, "deleted from the cluster");
    k.delete(&c, &r, &ctx(3, 2, 0)).await.expect("deleting what is gone succeeds");
    assert_eq!(k.open_clients(), 1, "one client per cluster, reused");
    let t = s.server.totals();
    assert_eq!((t.overlaps, t.order_violations, t.fenced), (0, 0, 0), "{t:?}");
}

#[tokio::test]
async fn unknown_kind_is_not_found() {
    let s = sim(quiet()).await;
    let m = Manifest(json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}));
    let err = applier().apply(&cluster(&s, "c1"), &m, &ctx(1, 1, 0)).await.expect_err("unknown kind");
    assert!(matches!(&err, ApplyError::NotFound(m) if m.contains("Widget")), "{err:?}");
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn stale_fence_is_refused_by_the_target() {
    let s = sim(quiet()).await;
    let (k, c) = (applier(), cluster(&s, "c1"));
    k.apply(&c, &cm("a", "new"), &ctx(7, 1, 0)).await.expect("current holder");
    let err = k.apply(&c, &cm("a", "old"), &ctx(6, 1, 0)).await.expect_err("a worker that lost its lease");
    assert!(matches!(&err, ApplyError::Conflict(m) if m.contains("stale fencing token")), "{err:?}");
    assert_eq!(s.server.totals().fenced, 1);
    let r = cm("a", "x").resource_ref().expect("ref");
    assert!(k.delete(&c, &r, &ctx(6, 1, 0)).await.is_err(), "a stale delete is refused too");
}

/// Each injected status maps to its typed error and retry decision.
#[tokio::test]
async fn status_codes_map_to_typed_errors() {
    let s = sim(quiet()).await;
    let http = reqwest::Client::new();
    type IsExpected = fn(&ApplyError) -> bool;
    let cases: [(u16, IsExpected, bool); 4] = [
        (409, |e| matches!(e, ApplyError::Conflict(_)), true),
        (403, |e| matches!(e, ApplyError::Forbidden(_)), false),
        (422, |e| matches!(e, ApplyError::Invalid(_)), false),
        (500, |e| matches!(e, ApplyError::Transient(_)), true),
    ];
    for (i, (code, is, retryable)) in cases.into_iter().enumerate() {
        let name = format!("faulty-{i}");
        let url = format!("{}/_sim/clusters/{name}/faults", s.base);
        let resp = http.put(url).json(&json!({"status": code, "delay_ms": null})).send().await.expect("set fault");
        assert!(resp.status().is_success(), "{}", resp.status());
        let err = applier().apply(&cluster(&s, &name), &cm("a", "1"), &ctx(1, 1, 0)).await.expect_err("injected");
        assert!(is(&err), "{code} mapped to {err:?}");
        assert_eq!(err.is_retryable(), retryable, "{code}: {err:?}");
    }
}

#[tokio::test]
async fn slow_target_times_out_and_unreachable_is_typed() {
    let s = sim(quiet()).await;
    let url = format!("{}/_sim/clusters/slow/faults", s.base);
    reqwest::Client::new().put(url).json(&json!({"status": null, "delay_ms": 5000})).send().await.expect("set fault");
    let k = KubeApplier::new(KubeConfig {
        request_timeout: Duration::from_millis(300),
        egress: loopback(),
        ..KubeConfig::default()
    });
    let err = k.apply(&cluster(&s, "slow"), &cm("a", "1"), &ctx(1, 1, 0)).await.expect_err("slow");
    assert!(matches!(err, ApplyError::Timeout { .. }), "{err:?}");
    assert!(err.is_retryable());

    let dead = Cluster {
        metadata: ObjectMeta::new("dead"),
        spec: ClusterSpec::new(Endpoint::Http { url: "http://127.0.0.1:9/clusters/dead".into() }),
    };
    let err = k.apply(&dead, &cm("a", "1"), &ctx(1, 1, 0)).await.expect_err("nothing listens on port 9");
    assert!(matches!(err, ApplyError::Unreachable(_)), "{err:?}");
    assert!(err.is_retryable());
}

/// The Secret a `kubeconfig` cluster names, which the test rotates (clones share it).
#[derive(Clone, Default)]
struct OneSecret(Arc<std::sync::Mutex<Option<fleetsync_model::Secret>>>);

impl OneSecret {
    fn point_at(&self, server: &str) {
        let kubeconfig = format!("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: '{server}'}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n");
        let mut held = self.0.lock().expect("lock");
        let mut secret = fleetsync_model::Secret { metadata: ObjectMeta::new("kc"), string_data: Default::default() };
        secret.metadata.generation = held.as_ref().map_or(1, |s| s.metadata.generation + 1);
        secret.string_data.insert("kubeconfig".into(), fleetsync_model::SecretValue::new(kubeconfig));
        *held = Some(secret);
    }
}

#[async_trait::async_trait]
impl SecretSource for OneSecret {
    async fn secret(
        &self,
        _: &str,
        _: &str,
    ) -> Result<Option<fleetsync_model::Secret>, fleetsync_applier::kubeconfig::CredentialsError> {
        Ok(self.0.lock().expect("lock").clone())
    }
}

/// A Secret rotated right after the old client was last used: the runs claimed after
/// the change write to the new server only, though the old one still answers.
#[tokio::test]
async fn a_rotated_secret_is_used_by_the_next_claimed_run() {
    let (old, new) = (sim(quiet()).await, sim(quiet()).await);
    let secret = OneSecret::default();
    secret.point_at(&format!("{}/clusters/c1", old.base));
    let k = applier().with_credentials(Arc::new(secret.clone()));
    let c = Cluster {
        metadata: ObjectMeta::new("c1"),
        spec: ClusterSpec::new(Endpoint::Kubeconfig { secret_ref: "kc".into() }),
    };
    let run = |fence: i64| ApplyContext { claimed_at: Some(Moment::now()), ..ctx(fence, 1, 0) };

    let first = run(1);
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        k.apply(&c, &cm(name, "1"), &ApplyContext { index: i, ..first.clone() })
            .await
            .expect("apply to the old server");
    }
    assert_eq!(old.server.totals().applies, 3, "one run, one client, three writes");

    secret.point_at(&format!("{}/clusters/c1", new.base));
    for fence in [2, 3] {
        let again = run(fence);
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            k.apply(&c, &cm(name, "1"), &ApplyContext { index: i, ..again.clone() })
                .await
                .expect("apply to the new server");
        }
    }
    assert_eq!(old.server.totals().applies, 3, "nothing written to the old server after the rotation");
    assert_eq!(new.server.totals().applies, 6, "every write after the rotation went to the new server");
    assert_eq!(new.server.key_generations()["default/c1/s1"].len(), 3);
}

/// Client sockets of this process connected to `port` on 127.0.0.1, from
/// `/proc/net/tcp` (state 01: established).
fn open_connections_to(port: u16) -> usize {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    let remote = format!("0100007F:{port:04X}");
    table
        .lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.get(2) == Some(&remote.as_str()) && cols.get(3) == Some(&"01")
        })
        .count()
}

/// A cluster's idle connections are closed after `connection_idle` while its client
/// lives on (a burst of SyncSets opens many; a fleet of clusters that each keep theirs
/// until the client is dropped runs out of file descriptors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_after_connection_idle() {
    let s = sim(SimConfig { latency: LatencyModel::hive_fleet_scaled(0.2), ..quiet() }).await;
    let port: u16 = s.base.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the sim's port");
    let k = Arc::new(KubeApplier::new(KubeConfig {
        request_timeout: Duration::from_secs(5),
        egress: loopback(),
        connection_idle: Duration::from_millis(300),
        ..KubeConfig::default()
    }));
    let c = cluster(&s, "c1");
    // Several writes at once: several connections.
    let writes = (0..6).map(|i| {
        let (k, c) = (k.clone(), c.clone());
        tokio::spawn(async move { k.apply(&c, &cm(&format!("m{i}"), "1"), &ctx(1, 1, i)).await })
    });
    for w in writes.collect::<Vec<_>>() {
        w.await.expect("join").expect("apply");
    }
    assert!(open_connections_to(port) > 1, "a burst keeps several connections for reuse");
    // Within the same 1.5 s as ever, but no longer than the connections take to close.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(1_500);
    while open_connections_to(port) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(open_connections_to(port), 0, "idle connections closed after connection_idle");
    assert_eq!(k.open_clients(), 1, "the client itself is kept");
}
