//! The agent over https on loopback: a real hub API served over TLS (SQLite store)
//! and a small Kubernetes-like target over TLS that wants a bearer token. A whole
//! agent run reports the target's object to the hub.

use super::*;
use axum::body::{Body, Bytes};
use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use fleetsync_api::Client;
use fleetsync_model::{Grant, SystemClock};
use fleetsync_server::access::tokens::{self, TokenRequest};
use fleetsync_server::{serve, serve_router, AppState, QueueMetrics, ServerTls, TlsConfig};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use fleetsync_testkit::tls::TestCa;
use serde_json::json;

const FLEET: &str = "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: c1}\n\
    spec: {endpoint: {http: {url: \"http://127.0.0.1:9/\"}}}\n---\n\
    apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: base}\nspec:\n  clusterNames: [c1]\n  resources:\n\
    \x20 - {apiVersion: v1, kind: ConfigMap, metadata: {name: cm-0, namespace: apps}, data: {k: v}}\n";

/// The target's API: discovery, a list of one ConfigMap, and watches that never end;
/// every request needs `Bearer target-token`.
async fn configmaps(headers: HeaderMap, Query(q): Query<HashMap<String, String>>) -> Response {
    if headers.get("authorization").and_then(|v| v.to_str().ok()) != Some("Bearer target-token") {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if q.get("watch").is_some_and(|w| w == "true") {
        let never = futures_util::stream::pending::<Result<Bytes, std::convert::Infallible>>();
        return Body::from_stream(never).into_response();
    }
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm-0", "namespace": "apps", "resourceVersion": "5"}, "data": {"k": "v"}});
    axum::Json(json!({"metadata": {"resourceVersion": "5"}, "items": [object]})).into_response()
}

async fn discovery(headers: HeaderMap) -> Response {
    if headers.get("authorization").is_none() {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    axum::Json(json!({"resources": [{"name": "configmaps", "kind": "ConfigMap"}]})).into_response()
}

async fn bind() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://127.0.0.1:{}", listener.local_addr().expect("addr").port());
    (listener, url)
}

fn trusting(ca: &Path) -> ClientTls {
    ClientTls { ca_file: Some(ca.to_path_buf()), ..ClientTls::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_reports_over_https_to_the_hub_from_a_target_that_wants_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("agent test CA").expect("CA");
    let ca_file = ca.write_cert(dir.path(), "ca").expect("write");
    let files = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let tls = || ServerTls::load(TlsConfig::new(&files.cert, &files.key)).expect("load");

    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("hub.db"), StoreConfig::default()).expect("open"));
    let mut registry = prometheus_client::registry::Registry::default();
    let queue_metrics = QueueMetrics::register(&mut registry);
    let (hub_listener, hub_url) = bind().await;
    let issue = |grant: &str| {
        let req = TokenRequest {
            grant: Grant::parse(grant).expect("grant"),
            name: None,
            ttl: None,
            created_by: "test".into(),
        };
        let store = store.clone();
        async move { tokens::issue(store.as_ref(), &SystemClock, req).await.expect("issue").0 }
    };
    let (admin_token, agent_token) = (issue("fleet-admin").await, issue("default:agent:c1").await);
    let state = AppState::new(store, Arc::new(registry), queue_metrics);
    let hub_server = tokio::spawn(serve(hub_listener, state, Some(tls()), std::future::pending()));
    let (target_listener, target_url) = bind().await;
    let target_app = Router::new().route("/api/v1", get(discovery)).route("/api/v1/configmaps", get(configmaps));
    let target_server = tokio::spawn(serve_router(target_listener, target_app, Some(tls()), std::future::pending()));

    let admin = Client::build(&hub_url, &trusting(&ca_file), None).expect("client").with_token(admin_token);
    admin.apply(FLEET.to_string()).await.expect("apply over https");

    // The agent's hub connection: trusted with the CA file, not without it.
    let timeout = Duration::from_secs(5);
    let agent_hub =
        Hub::new(&hub_url, &trusting(&ca_file), agent_token.clone(), "default", "c1", timeout).expect("hub");
    let watched = agent_hub.resources().await.expect("resources over https");
    assert_eq!(watched.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["cm-0"]);
    let untrusting =
        Hub::new(&hub_url, &ClientTls::default(), agent_token.clone(), "default", "c1", timeout).expect("hub");
    let e = untrusting.resources().await.expect_err("the test CA is not a system root");
    assert!(describe(&e).contains("UnknownIssuer"), "{}", describe(&e));

    std::fs::write(dir.path().join("agent-token"), format!("{agent_token}\n")).expect("write");
    std::fs::write(dir.path().join("target-token"), "target-token\n").expect("write");
    let config = Config {
        hub: hub_url.clone(),
        hub_tls: trusting(&ca_file),
        tenant: "default".into(),
        cluster: "c1".into(),
        token_file: dir.path().join("agent-token"),
        target: TargetSource::Url {
            url: target_url,
            tls: trusting(&ca_file),
            token_file: Some(dir.path().join("target-token")),
        },
        relist_interval: Duration::from_secs(60),
        resources_interval: Duration::from_secs(60),
        batch: 100,
        backoff_base: Duration::from_millis(20),
        backoff_cap: Duration::from_millis(200),
        request_timeout: timeout,
        metrics: crate::AgentMetrics::default(),
    };
    let agent = tokio::spawn(run(config));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let live = admin.live("default", "c1").await.expect("live");
        if live.iter().any(|l| l.resource.name == "cm-0" && l.resource_version == "5" && l.state == LiveState::Present)
        {
            break;
        }
        assert!(!agent.is_finished(), "the agent stopped: {:?}", agent.await);
        assert!(tokio::time::Instant::now() < deadline, "no live report of cm-0: {live:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    agent.abort();
    hub_server.abort();
    target_server.abort();
}

#[tokio::test]
async fn a_target_refuses_a_wrong_token_and_the_error_says_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("agent test CA").expect("CA");
    let ca_file = ca.write_cert(dir.path(), "ca").expect("write");
    let files = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let tls = ServerTls::load(TlsConfig::new(&files.cert, &files.key)).expect("load");
    let (listener, url) = bind().await;
    let app = Router::new().route("/api/v1", get(discovery)).route("/api/v1/configmaps", get(configmaps));
    let server = tokio::spawn(serve_router(listener, app, Some(tls), std::future::pending()));

    let token_path = dir.path().join("token");
    std::fs::write(&token_path, "wrong").expect("write");
    // The token file is read again once its token is a minute old: a new client here
    // reads the rotated one at once.
    let source = TargetSource::Url { url: url.clone(), tls: trusting(&ca_file), token_file: Some(token_path.clone()) };
    let target = || async {
        let bearer = crate::TokenFile::open(&token_path, crate::TokenFile::REFRESH).expect("token file");
        Target::new(source.config().await.expect("config"), Duration::from_secs(5), Some(std::sync::Arc::new(bearer)))
            .expect("target")
    };
    let mut wrong = target().await;
    let kind = ResourceRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: "cm-0".into(),
    };
    let e = wrong.list(&kind).await.expect_err("a wrong token");
    assert!(matches!(&e, TargetError::Refused { status, .. } if *status == StatusCode::UNAUTHORIZED), "{e:?}");
    assert!(e.to_string().starts_with(&format!("GET {url}/api/v1/configmaps: 401 Unauthorized")), "{e}");
    std::fs::write(&token_path, "target-token").expect("rotate");
    let listing = target().await.list(&kind).await.expect("the rotated token");
    assert_eq!(listing.resource_version, "5");
    server.abort();
}
