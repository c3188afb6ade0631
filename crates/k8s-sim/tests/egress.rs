//! The Kubernetes applier's egress policy and what of a target's answers reaches an
//! error, against `fleetsync sim` and raw HTTP servers on loopback.

use async_trait::async_trait;
use fleetsync_applier::egress::EgressPolicy;
use fleetsync_applier::kubeconfig::{CredentialsError, SecretSource};
use fleetsync_applier::kubernetes::{KubeApplier, KubeConfig, MAX_MESSAGE};
use fleetsync_applier::{Applier, ApplyContext, ApplyError};
use fleetsync_k8s_sim::{LatencyModel, SimConfig, SimServer};
use fleetsync_model::{Cluster, ClusterSpec, Endpoint, Fence, Manifest, ObjectMeta, Secret, SecretValue, WorkKey};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `fleetsync sim` on a loopback port; stops when the sender drops.
async fn sim() -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = SimServer::new(SimConfig { latency: LatencyModel::zero(), fail_rate: 0.0, fail_status: 500 });
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server
            .serve(listener, async move {
                let _ = stopped.await;
            })
            .await;
    });
    (addr, stop)
}

/// A server on loopback that answers every request with `status` and `body`.
async fn answering(status: &'static str, content_type: &'static str, body: String) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let body = body.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let head = format!("HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
                let _ = socket.write_all(head.as_bytes()).await;
                let _ = socket.write_all(body.as_bytes()).await;
            });
        }
    });
    addr
}

fn applier(allow: &[&str], deny: &[&str]) -> KubeApplier {
    let egress = EgressPolicy::parse(allow, deny).expect("rules");
    KubeApplier::new(KubeConfig { request_timeout: Duration::from_secs(5), egress, ..KubeConfig::default() })
}

fn cluster(url: String) -> Cluster {
    Cluster { metadata: ObjectMeta::new("c1"), spec: ClusterSpec::new(Endpoint::Http { url }) }
}

fn cm() -> Manifest {
    Manifest(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "apps"}, "data": {"v": "1"}}),
    )
}

fn ctx() -> ApplyContext {
    ApplyContext::new(WorkKey::new("default", "c1", "s1"), Fence::new(1), 1, 0)
}

async fn apply(k: &KubeApplier, url: String) -> Result<(), ApplyError> {
    k.apply(&cluster(url), &cm(), &ctx()).await
}

/// A refusal is permanent and says which rule refused it.
fn assert_denied(result: Result<(), ApplyError>, expect: &str) {
    let err = result.expect_err(expect);
    assert!(matches!(&err, ApplyError::Egress(m) if m.contains(expect)), "{err}");
    assert!(err.to_string().starts_with("forbidden: egress to "), "{err}");
    assert!(err.parks_at_once(), "{err}");
    assert!(fleetsync_applier::error::is_egress_refusal(&format!("v1/ConfigMap apps/a: {err}")), "{err}");
    assert!(!err.is_retryable(), "{err}");
}

#[tokio::test]
async fn a_loopback_target_is_refused_unless_allowed() {
    let (addr, _stop) = sim().await;
    let url = format!("http://{addr}/clusters/c1");
    assert_denied(
        apply(&applier(&[], &[]), url.clone()).await,
        "egress to 127.0.0.1 is denied (loopback; allow it with --egress-allow)",
    );
    apply(&applier(&["127.0.0.1"], &[]), url.clone()).await.expect("allowed by address");
    apply(&applier(&["127.0.0.0/8"], &[]), url).await.expect("allowed by CIDR");
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused_when_connecting() {
    let (addr, _stop) = sim().await;
    let url = format!("http://localhost:{}/clusters/c1", addr.port());
    assert_denied(apply(&applier(&[], &[]), url.clone()).await, "egress to localhost (");
    apply(&applier(&["localhost"], &[]), url).await.expect("allowed by name");
}

#[tokio::test]
async fn cloud_metadata_and_unspecified_addresses_are_refused() {
    let k = applier(&["10.0.0.0/8"], &[]);
    assert_denied(
        apply(&k, "http://169.254.169.254/latest".into()).await,
        "egress to 169.254.169.254 is denied (cloud metadata",
    );
    assert_denied(apply(&k, "http://[fd00:ec2::254]/".into()).await, "cloud metadata");
    assert_denied(
        apply(&k, "http://metadata.google.internal/".into()).await,
        "egress to metadata.google.internal is denied (cloud metadata",
    );
    assert_denied(apply(&k, "http://0.0.0.0:80/".into()).await, "unspecified");
    assert_denied(apply(&k, "http://[::ffff:127.0.0.1]:80/".into()).await, "loopback");
}

#[tokio::test]
async fn the_operator_deny_list_wins_over_the_allow_list() {
    let (addr, _stop) = sim().await;
    let url = format!("http://{addr}/clusters/c1");
    assert_denied(
        apply(&applier(&["127.0.0.0/8"], &["127.0.0.1"]), url.clone()).await,
        "the hub's deny list: --egress-deny 127.0.0.1/32",
    );
    let by_name = format!("http://localhost:{}/clusters/c1", addr.port());
    assert_denied(apply(&applier(&["localhost"], &["127.0.0.0/8", "::1"]), by_name).await, "--egress-deny");
    // Private ranges stay allowed by default; the deny list can close them.
    assert_denied(
        apply(&applier(&[], &["10.0.0.0/8"]), "http://10.1.2.3:6443/".into()).await,
        "--egress-deny 10.0.0.0/8",
    );
}

struct OneSecret(Secret);

#[async_trait]
impl SecretSource for OneSecret {
    async fn secret(&self, _: &str, _: &str) -> Result<Option<Secret>, CredentialsError> {
        Ok(Some(self.0.clone()))
    }
}

#[tokio::test]
async fn a_kubeconfig_server_is_held_to_the_same_policy() {
    let (addr, _stop) = sim().await;
    let kubeconfig = format!("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: 'http://{addr}/clusters/c1'}}}}]\nusers: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n");
    let mut secret = Secret { metadata: ObjectMeta::new("kc"), string_data: Default::default() };
    secret.string_data.insert("kubeconfig".into(), SecretValue::new(kubeconfig));
    let by_secret = Cluster {
        metadata: ObjectMeta::new("c1"),
        spec: ClusterSpec::new(Endpoint::Kubeconfig { secret_ref: "kc".into() }),
    };
    let refused = applier(&[], &[]).with_credentials(Arc::new(OneSecret(secret.clone())));
    let err = refused.apply(&by_secret, &cm(), &ctx()).await.expect_err("loopback");
    assert!(matches!(&err, ApplyError::Egress(m) if m.contains("egress to 127.0.0.1 is denied (loopback")), "{err}");
    let allowed = applier(&["127.0.0.1"], &[]).with_credentials(Arc::new(OneSecret(secret)));
    allowed.apply(&by_secret, &cm(), &ctx()).await.expect("allowed");
}

#[tokio::test]
async fn a_raw_error_body_never_reaches_the_error() {
    let k = applier(&["127.0.0.1"], &[]);
    let text = answering("500 Internal Server Error", "text/plain", "db_password=MARKER-hunter2".into()).await;
    let json = answering(
        "503 Service Unavailable",
        "application/json",
        r#"{"message": "MARKER-hunter2", "reason": "MARKER-r"}"#.into(),
    )
    .await;
    for (addr, expect) in
        [(text, "500 Internal Server Error"), (json, "an error response that is not a Kubernetes Status")]
    {
        let err = apply(&k, format!("http://{addr}/")).await.expect_err("5xx");
        assert!(matches!(&err, ApplyError::Transient(m) if m == expect), "{err}");
        assert!(!err.to_string().contains("MARKER"), "{err}");
    }
    let forbidden = answering("403 Forbidden", "text/html", "<html>MARKER-hunter2</html>".into()).await;
    let err = apply(&k, format!("http://{forbidden}/")).await.expect_err("403");
    assert_eq!(err, ApplyError::Forbidden("403 Forbidden".into()));
}

#[tokio::test]
async fn a_status_body_keeps_its_reason_and_message_bounded() {
    let k = applier(&["127.0.0.1"], &[]);
    let status = |code: u16, reason: &str, message: &str| {
        json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}).to_string()
    };
    let short =
        answering("500 Internal Server Error", "application/json", status(500, "InternalError", "etcd is slow")).await;
    let err = apply(&k, format!("http://{short}/")).await.expect_err("500");
    assert_eq!(err, ApplyError::Transient("500 InternalError: etcd is slow".into()));

    let long =
        answering("500 Internal Server Error", "application/json", status(500, "InternalError", &"ü".repeat(5000)))
            .await;
    let err = apply(&k, format!("http://{long}/")).await.expect_err("500");
    let ApplyError::Transient(m) = &err else { panic!("{err}") };
    assert!(m.starts_with("500 InternalError: üü"), "{m}");
    assert!(m.len() <= MAX_MESSAGE + 64, "{}", m.len());
}
