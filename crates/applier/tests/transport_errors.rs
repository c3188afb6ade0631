//! What a key's error says when its target cannot be reached: the address of the
//! request and the innermost cause (connection refused, a TLS certificate problem, no
//! answer in time), against real sockets on loopback.

use fleetsync_applier::egress::EgressPolicy;
use fleetsync_applier::error::MAX_ERROR;
use fleetsync_applier::kubernetes::{KubeApplier, KubeConfig};
use fleetsync_applier::{Applier, ApplyContext, ApplyError};
use fleetsync_model::status::unreachable_cause;
use fleetsync_model::{Cluster, ClusterSpec, Endpoint, Fence, Manifest, ObjectMeta, WorkKey};
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

fn applier(timeout: Duration) -> KubeApplier {
    let egress = EgressPolicy::parse(&["127.0.0.1"], &[]).expect("rule");
    KubeApplier::new(KubeConfig { request_timeout: timeout, egress, ..KubeConfig::default() })
}

/// The error of applying a ConfigMap to the cluster at `url`.
async fn apply_error(k: &KubeApplier, url: &str) -> ApplyError {
    let c = Cluster { metadata: ObjectMeta::new("c1"), spec: ClusterSpec::new(Endpoint::Http { url: url.into() }) };
    let m = Manifest(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "apps"}}));
    let ctx = ApplyContext::new(WorkKey::new("default", "c1", "s1"), Fence::new(1), 1, 0);
    k.apply(&c, &m, &ctx).await.expect_err("the apply fails")
}

/// The same, for a target that cannot be reached: the cluster's reachability names it.
async fn apply(k: &KubeApplier, url: &str) -> ApplyError {
    let err = apply_error(k, url).await;
    // What the cluster's reachability condition reads from the key's error, as the
    // SyncSet applier writes it.
    let text = err.to_string();
    assert_eq!(unreachable_cause(&format!("v1/ConfigMap apps/a: {text}")), Some(text.as_str()));
    err
}

/// A port on 127.0.0.1 that nothing listens on (bound, then closed).
async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr")
}

#[tokio::test]
async fn a_closed_port_names_the_address_and_the_refusal() {
    let addr = closed_port().await;
    let err = apply(&applier(Duration::from_secs(5)), &format!("http://{addr}/clusters/c1")).await;
    let text = err.to_string();
    assert!(matches!(err, ApplyError::Unreachable(_)), "{err:?}");
    // Discovery of the kind is the first request.
    assert!(text.starts_with(&format!("unreachable: http://{addr}/clusters/c1/api/v1: ")), "{text}");
    assert!(text.to_lowercase().contains("connection refused"), "the innermost cause: {text}");
    assert!(text.len() <= "unreachable: ".len() + MAX_ERROR, "{}", text.len());
}

/// A TLS server on 127.0.0.1 with a self-signed certificate the applier does not trust.
async fn tls_with_unknown_ca() -> SocketAddr {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("certificate");
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.key_pair.serialize_der().into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(vec![cert.cert.der().clone()], key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let _ = acceptor.accept(socket).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_certificate_from_an_unknown_ca_is_named() {
    let addr = tls_with_unknown_ca().await;
    let err = apply(&applier(Duration::from_secs(5)), &format!("https://{addr}")).await;
    let text = err.to_string();
    assert!(matches!(err, ApplyError::Unreachable(_)), "{err:?}");
    assert!(text.starts_with(&format!("unreachable: https://{addr}/api/v1: ")), "{text}");
    assert!(text.contains("certificate") && text.contains("UnknownIssuer"), "the TLS problem: {text}");
}

/// A listener on 127.0.0.1 that accepts connections and never answers.
async fn silent() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    addr
}

#[tokio::test]
async fn no_answer_in_time_says_timed_out_and_where() {
    let addr = silent().await;
    let err = apply(&applier(Duration::from_millis(300)), &format!("http://{addr}/clusters/c1")).await;
    assert!(matches!(err, ApplyError::Timeout { ms: 300, .. }), "{err:?}");
    assert_eq!(err.to_string(), format!("timed out: http://{addr}/clusters/c1/api/v1: no answer within 300 ms"));
    assert!(err.is_retryable());
}

/// A cluster URL too long for the bound loses its middle: the address's start and the
/// innermost cause stay whole.
#[tokio::test]
async fn a_long_address_is_cut_in_the_middle_keeping_the_cause() {
    let addr = closed_port().await;
    let path = "p".repeat(2000);
    let err = apply(&applier(Duration::from_secs(5)), &format!("http://{addr}/{path}")).await;
    let ApplyError::Unreachable(text) = &err else { panic!("{err:?}") };
    assert!(text.len() <= MAX_ERROR, "{}", text.len());
    assert!(text.starts_with(&format!("http://{addr}/ppp")), "{text}");
    assert!(text.contains('…'), "{text}");
    assert!(text.ends_with("Connection refused (os error 111)"), "the cause stays whole: {text}");
}

/// A listener on 127.0.0.1 that answers every request `200` with a JSON body that
/// never ends, written `chunk` at a time with `pause` between chunks; it stops after
/// `cap` bytes per connection, so a hub that reads it all fails the test, not the machine.
async fn endless(chunk: usize, pause: Duration, cap: usize) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = [0u8; 4096];
                let _ = socket.read(&mut request).await;
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if socket.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let data = format!("{:x}\r\n{}\r\n", chunk, "[".repeat(chunk));
                let mut sent = 0;
                while sent < cap && socket.write_all(data.as_bytes()).await.is_ok() {
                    sent += chunk;
                    if !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                }
            });
        }
    });
    addr
}

/// An endless answer is read up to the limit and no further: the key fails naming the
/// address and the limit, and trying again may succeed (the target may be fixed).
#[tokio::test]
async fn an_endless_answer_is_cut_at_the_limit_and_named() {
    let addr = endless(64 << 10, Duration::ZERO, 1 << 30).await;
    let egress = EgressPolicy::parse(&["127.0.0.1"], &[]).expect("rule");
    let config = KubeConfig {
        request_timeout: Duration::from_secs(20),
        max_response_bytes: 1 << 20,
        egress,
        ..KubeConfig::default()
    };
    let started = std::time::Instant::now();
    let err = apply_error(&KubeApplier::new(config), &format!("http://{addr}/clusters/c1")).await;
    assert_eq!(
        err.to_string(),
        format!("transient: http://{addr}/clusters/c1/api/v1: the answer is longer than 1048576 bytes, the most the hub reads of one answer")
    );
    assert!(err.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "cut at the limit, not read to the end: {:?}",
        started.elapsed()
    );
}

/// An answer that trickles in forever ends at the request timeout, its body included.
#[tokio::test]
async fn an_answer_that_trickles_forever_times_out() {
    let addr = endless(16, Duration::from_millis(20), usize::MAX).await;
    let err = apply(&applier(Duration::from_millis(500)), &format!("http://{addr}/clusters/c1")).await;
    assert!(matches!(err, ApplyError::Timeout { ms: 500, .. }), "{err:?}");
}
