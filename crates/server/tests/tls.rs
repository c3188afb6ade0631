//! The API over https on loopback, with certificates from test CAs: the typed client
//! with the right CA, with a wrong one, without verification; a certificate rotated
//! on disk and served without a restart; client certificates (mTLS) reaching handlers
//! as a `ClientIdentity`; files that do not load.

use axum::routing::get;
use axum::{Extension, Json, Router};
use fleetsync_api::{describe, Client, ClientError, ClientTls};
use fleetsync_server::{serve, serve_router, AppState, ClientIdentity, QueueMetrics, ServerTls, TlsConfig, TlsError};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use fleetsync_testkit::tls::{PemFiles, TestCa};
use prometheus_client::registry::Registry;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

const RELOAD: Duration = Duration::from_millis(100);

/// A server running until `stop` is sent (or dropped).
struct Running {
    base: String,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Running {
    async fn shut_down(self) {
        let _ = self.stop.send(());
        let served = tokio::time::timeout(Duration::from_secs(5), self.task).await.expect("stops promptly");
        served.expect("no panic").expect("served");
    }
}

fn tls_config(files: &PemFiles, client_ca: Option<PathBuf>) -> TlsConfig {
    TlsConfig { client_ca_file: client_ca, reload_every: RELOAD, ..TlsConfig::new(&files.cert, &files.key) }
}

/// The hub's API on a fresh SQLite store, over https.
async fn hub_api(dir: &Path, tls: TlsConfig) -> Running {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.join("hub.db"), StoreConfig::default()).expect("open"));
    let mut registry = Registry::default();
    let queue_metrics = QueueMetrics::register(&mut registry);
    let state = AppState::new(store, Arc::new(registry), queue_metrics);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let base = format!("https://127.0.0.1:{}", listener.local_addr().expect("addr").port());
    let tls = ServerTls::load(tls).expect("the test files load");
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(serve(listener, state, Some(tls), async {
        let _ = stopped.await;
    }));
    Running { base, stop, task }
}

/// The client every test talks to the API with (add credentials here once routes
/// need them).
fn hub_client(base: &str, tls: &ClientTls) -> Client {
    Client::build(base, tls, Some(Duration::from_secs(5))).expect("client")
}

fn trusting(ca_file: &Path) -> ClientTls {
    ClientTls { ca_file: Some(ca_file.to_path_buf()), ..ClientTls::default() }
}

/// `GET /healthz`, and `GET /v1/clusters` answered (401: no credential is sent here,
/// which this test is not about; an answer is what proves the https round trip).
async fn reachable(base: &str, tls: &ClientTls) -> Result<(), ClientError> {
    let hub = hub_client(base, tls);
    hub.health().await?;
    match hub.list(fleetsync_model::Kind::Cluster, "default").await {
        Ok(_) => Ok(()),
        Err(ClientError::Refused { status, .. }) if status.as_u16() == 401 => Ok(()),
        Err(e) => Err(e),
    }
}

#[tokio::test]
async fn a_client_trusting_the_ca_reaches_the_api_over_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("fleetsync test CA").expect("CA");
    let ca_file = ca.write_cert(dir.path(), "ca").expect("write");
    let server = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let hub = hub_api(dir.path(), tls_config(&server, None)).await;

    reachable(&hub.base, &trusting(&ca_file)).await.expect("trusted");
    let plain = hub.base.replace("https://", "http://");
    let e = reachable(&plain, &ClientTls::default()).await.expect_err("plain http to an https port");
    assert!(matches!(e, ClientError::Unreachable { .. }), "{e:?}");
    hub.shut_down().await;
}

#[tokio::test]
async fn a_client_that_does_not_trust_the_ca_is_told_so_unless_it_skips_verification() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("fleetsync test CA").expect("CA");
    let other_file = TestCa::new("another CA").expect("CA").write_cert(dir.path(), "other").expect("write");
    let server = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let hub = hub_api(dir.path(), tls_config(&server, None)).await;

    let e = reachable(&hub.base, &trusting(&other_file)).await.expect_err("not trusted");
    let text = describe(&e);
    assert!(text.starts_with(&format!("cannot reach the hub at {}", hub.base)), "{text}");
    assert!(text.contains("invalid peer certificate: UnknownIssuer"), "says why: {text}");
    let e = reachable(&hub.base, &ClientTls::default()).await.expect_err("not among the system's roots");
    assert!(describe(&e).contains("UnknownIssuer"), "{}", describe(&e));

    let insecure = ClientTls { insecure_skip_verify: true, ..ClientTls::default() };
    reachable(&hub.base, &insecure).await.expect("verification skipped");
    hub.shut_down().await;
}

#[tokio::test]
async fn a_rotated_certificate_is_served_to_new_connections_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (ca1, ca2) = (TestCa::new("CA one").expect("CA"), TestCa::new("CA two").expect("CA"));
    let (ca1_file, ca2_file) =
        (ca1.write_cert(dir.path(), "ca1").expect("w"), ca2.write_cert(dir.path(), "ca2").expect("w"));
    let files = ca1.server_cert().expect("cert A").write(dir.path(), "server").expect("write");
    let hub = hub_api(dir.path(), tls_config(&files, None)).await;
    reachable(&hub.base, &trusting(&ca1_file)).await.expect("cert A from CA one");
    reachable(&hub.base, &trusting(&ca2_file)).await.expect_err("not yet cert B");

    // A broken key is logged and the previous certificate kept.
    std::fs::write(&files.key, "-----BEGIN PRIVATE KEY-----\nnot base64 at all\n-----END PRIVATE KEY-----\n")
        .expect("w");
    tokio::time::sleep(RELOAD * 4).await;
    reachable(&hub.base, &trusting(&ca1_file)).await.expect("still cert A");

    ca2.server_cert().expect("cert B").write(dir.path(), "server").expect("rotate");
    tokio::time::sleep(RELOAD * 4).await;
    reachable(&hub.base, &trusting(&ca2_file)).await.expect("cert B from CA two, same server");
    let e = reachable(&hub.base, &trusting(&ca1_file)).await.expect_err("cert A is gone");
    assert!(describe(&e).contains("UnknownIssuer"), "{}", describe(&e));
    hub.shut_down().await;
}

/// What the mTLS test's handler saw.
async fn whoami(identity: Option<Extension<ClientIdentity>>) -> Json<Option<(String, Vec<String>)>> {
    Json(identity.map(|Extension(id)| (id.common_name, id.organizations)))
}

#[tokio::test]
async fn a_client_certificate_reaches_handlers_as_its_subject() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("fleetsync test CA").expect("CA");
    let ca_file = ca.write_cert(dir.path(), "ca").expect("write");
    let server = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let alice = ca
        .client_cert("alice", &["team-a:editor", "fleet-admin"])
        .expect("client")
        .write(dir.path(), "alice")
        .expect("w");
    let other = TestCa::new("another CA").expect("CA");
    let mallory =
        other.client_cert("mallory", &["fleet-admin"]).expect("client").write(dir.path(), "mallory").expect("w");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://127.0.0.1:{}/whoami", listener.local_addr().expect("addr").port());
    let tls = ServerTls::load(tls_config(&server, Some(ca_file.clone()))).expect("load");
    let (stop, stopped) = oneshot::channel::<()>();
    let app = Router::new().route("/whoami", get(whoami));
    let task = tokio::spawn(serve_router(listener, app, Some(tls), async {
        let _ = stopped.await;
    }));

    let ask = |client_cert: Option<&PemFiles>| {
        let tls = ClientTls { client_cert: client_cert.map(|f| (f.cert.clone(), f.key.clone())), ..trusting(&ca_file) };
        let http = tls.builder().expect("builder").build().expect("client");
        let url = url.clone();
        async move { http.get(&url).send().await?.error_for_status()?.json::<Option<(String, Vec<String>)>>().await }
    };
    let seen = ask(Some(&alice)).await.expect("a certificate from the client CA");
    assert_eq!(seen, Some(("alice".to_string(), vec!["team-a:editor".to_string(), "fleet-admin".to_string()])));
    assert_eq!(ask(None).await.expect("no certificate still connects"), None);
    let e = ask(Some(&mallory)).await.expect_err("a certificate from another CA is refused");
    assert!(describe(&e).contains("received fatal alert: UnknownCA"), "refused at the handshake: {}", describe(&e));

    let _ = stop.send(());
    task.await.expect("no panic").expect("served");
}

/// Through the real API: a verified client certificate is a credential — its CN the
/// subject, each organization that reads as a grant a grant — and a client without a
/// certificate or token gets 401.
#[tokio::test]
async fn a_client_certificate_is_a_credential_of_the_api() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("fleetsync test CA").expect("CA");
    let ca_file = ca.write_cert(dir.path(), "ca").expect("write");
    let server = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    // `O=team-a:fleet-admin` is no grant: a team that names its own organizations is not
    // thereby admin of every tenant.
    let bob = ca
        .client_cert("bob", &["team-a:viewer", "team-a:fleet-admin"])
        .expect("client")
        .write(dir.path(), "bob")
        .expect("w");
    let api = hub_api(dir.path(), tls_config(&server, Some(ca_file.clone()))).await;
    let as_bob = ClientTls { client_cert: Some((bob.cert.clone(), bob.key.clone())), ..trusting(&ca_file) };

    let me = hub_client(&api.base, &as_bob).whoami().await.expect("whoami with a certificate");
    assert_eq!(me.subject, "cert:bob");
    assert_eq!(me.grants, vec![fleetsync_model::Grant::parse("team-a:viewer").expect("grant")]);
    hub_client(&api.base, &as_bob).list(fleetsync_model::Kind::Cluster, "team-a").await.expect("bob reads team-a");
    let other =
        hub_client(&api.base, &as_bob).list(fleetsync_model::Kind::Cluster, "team-b").await.expect_err("not team-b");
    assert_eq!(other.status().map(|s| s.as_u16()), Some(403));
    let members = hub_client(&api.base, &as_bob).members().await.expect_err("no fleet-admin");
    assert_eq!(members.status().map(|s| s.as_u16()), Some(403));
    let anonymous = hub_client(&api.base, &trusting(&ca_file)).whoami().await.expect_err("no credential");
    assert_eq!(anonymous.status().map(|s| s.as_u16()), Some(401));
    api.shut_down().await;
}

#[test]
fn files_that_do_not_load_are_named_and_key_material_is_never_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("fleetsync test CA").expect("CA");
    let good = ca.server_cert().expect("cert").write(dir.path(), "good").expect("write");
    let load = |cert: &Path, key: &Path| ServerTls::load(TlsConfig::new(cert, key)).expect_err("does not load");

    let missing = dir.path().join("missing.crt");
    let e = load(&missing, &good.key);
    assert!(matches!(e, TlsError::Unreadable { .. }), "{e:?}");
    assert!(
        describe(&e).starts_with(&format!("cannot read the certificate file {}: ", missing.display())),
        "{}",
        describe(&e)
    );

    let e = load(&good.key, &good.key);
    assert_eq!(e.to_string(), format!("the certificate file {} holds no PEM certificate", good.key.display()));

    let secret = "c2VjcmV0LWtleS1tYXRlcmlhbA";
    let bad_key = dir.path().join("bad.key");
    std::fs::write(&bad_key, format!("-----BEGIN PRIVATE KEY-----\n{secret}!\n-----END PRIVATE KEY-----\n"))
        .expect("write");
    let e = load(&good.cert, &bad_key);
    assert!(matches!(e, TlsError::NoKey { .. }), "{e:?}");
    assert!(!describe(&e).contains(secret) && !format!("{e:?}").contains(secret), "{e:?}");

    let other = ca.server_cert().expect("cert").write(dir.path(), "other").expect("write");
    let e = load(&good.cert, &other.key);
    assert!(matches!(e, TlsError::Refused { .. }), "a key that is not the certificate's: {e:?}");
}

#[tokio::test]
async fn shutdown_over_https_lets_a_request_in_flight_finish_and_accepts_no_more() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("fleetsync test CA").expect("CA");
    let ca_file = ca.write_cert(dir.path(), "ca").expect("write");
    let server = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://127.0.0.1:{}/slow", listener.local_addr().expect("addr").port());
    let slow = || async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        "done"
    };
    let app = Router::new().route("/slow", get(slow));
    let tls = ServerTls::load(tls_config(&server, None)).expect("load");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_router(listener, app, Some(tls), async {
        let _ = stopped.await;
    }));

    let http = trusting(&ca_file).builder().expect("builder").build().expect("client");
    let in_flight = tokio::spawn({
        let (http, url) = (http.clone(), url.clone());
        async move { http.get(&url).send().await?.text().await }
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    let _ = stop.send(());
    assert_eq!(in_flight.await.expect("no panic").expect("finished during the grace"), "done");
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("stops").expect("no panic").expect("served");
    let fresh = trusting(&ca_file).builder().expect("builder").build().expect("client");
    fresh.get(&url).send().await.expect_err("no longer accepting");
}

/// Over https the dashboard's session cookie is `Secure`, and a sign-in from a page
/// served over plain http (the same host and port) is refused.
#[tokio::test]
async fn the_dashboard_session_cookie_is_secure_over_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("fleetsync test CA").expect("CA");
    let server = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("hub.db"), StoreConfig::default()).expect("open"));
    let grant = fleetsync_model::Grant::parse("team-a:viewer").expect("grant");
    let request =
        fleetsync_server::access::tokens::TokenRequest { grant, name: None, ttl: None, created_by: "test".into() };
    let (token, _) =
        fleetsync_server::access::tokens::issue(store.as_ref(), store.clock().as_ref(), request).await.expect("token");
    let mut registry = Registry::default();
    let queue_metrics = QueueMetrics::register(&mut registry);
    let state = AppState::new(store, Arc::new(registry), queue_metrics);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let host = format!("127.0.0.1:{}", listener.local_addr().expect("addr").port());
    let tls = ServerTls::load(tls_config(&server, None)).expect("the test files load");
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(serve(listener, state, Some(tls), async {
        let _ = stopped.await;
    }));
    let ca_pem = reqwest::Certificate::from_pem(ca.cert_pem().as_bytes()).expect("CA");
    let http = reqwest::Client::builder().add_root_certificate(ca_pem).build().expect("client");
    let sign_in = |origin: String| {
        http.post(format!("https://{host}/ui/session"))
            .header("origin", origin)
            .header("content-type", "application/json")
            .body(serde_json::json!({ "token": token }).to_string())
            .send()
    };

    let resp = sign_in(format!("https://{host}")).await.expect("sign in");
    assert_eq!(resp.status().as_u16(), 200);
    let cookie = resp.headers().get("set-cookie").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    assert!(
        cookie.ends_with("; Secure") && cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let session = cookie.split(';').next().unwrap_or_default().to_string();
    let me = http.get(format!("https://{host}/v1/whoami")).header("cookie", session).send().await.expect("whoami");
    assert_eq!(me.status().as_u16(), 200);

    let resp = sign_in(format!("http://{host}")).await.expect("sign in from http");
    assert_eq!(resp.status().as_u16(), 403, "a page over http may not sign in to an https hub");
    Running { base: host, stop, task }.shut_down().await;
}
