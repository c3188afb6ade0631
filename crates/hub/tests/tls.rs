//! A hub serving its API over https ([`Hub::api_tls`]): a client trusting the test CA
//! reaches it; TLS files that do not load stop the hub before anything starts.

use fleetsync_api::{Client, ClientTls};
use fleetsync_applier::ByEndpoint;
use fleetsync_hub::{Hub, HubError};
use fleetsync_runtime::RuntimeConfig;
use fleetsync_server::TlsConfig;
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use fleetsync_testkit::tls::TestCa;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

async fn hub(dir: &std::path::Path) -> Hub {
    let (store, _) = SqliteStore::open_for_work(dir.join("hub.db"), StoreConfig::default()).await.expect("open");
    let store: Arc<dyn Store> = Arc::new(store);
    Hub::new(store, Arc::new(ByEndpoint::default()), RuntimeConfig::default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_serves_its_api_over_https() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = TestCa::new("hub test CA").expect("CA");
    let ca_file = ca.write_cert(dir.path(), "ca").expect("write");
    let files = ca.server_cert().expect("cert").write(dir.path(), "server").expect("write");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("https://localhost:{}", listener.local_addr().expect("addr").port());

    let shutdown = CancellationToken::new();
    let hub = hub(dir.path()).await.api(listener).api_tls(TlsConfig::new(&files.cert, &files.key));
    let running = tokio::spawn(hub.run(shutdown.clone()));

    let tls = ClientTls { ca_file: Some(ca_file), ..ClientTls::default() };
    let client = Client::build(&url, &tls, Some(Duration::from_secs(5))).expect("client");
    client.health().await.expect("healthy over https");

    shutdown.cancel();
    let ran = tokio::time::timeout(Duration::from_secs(20), running).await.expect("returns once cancelled");
    ran.expect("no panic").expect("a clean stop");
}

#[tokio::test]
async fn tls_files_that_do_not_load_stop_the_hub_at_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let missing = dir.path().join("missing.crt");
    let hub = hub(dir.path()).await.api(listener).api_tls(TlsConfig::new(&missing, dir.path().join("missing.key")));
    let e = hub.run(CancellationToken::new()).await.expect_err("no certificate");
    assert!(matches!(e, HubError::Tls(_)), "{e:?}");
    let text = fleetsync_api::describe(&e);
    assert!(text.contains(&format!("cannot read the certificate file {}", missing.display())), "{text}");
}
