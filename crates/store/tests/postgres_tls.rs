//! TLS to PostgreSQL against the real test server, which has `ssl=on` with Debian's
//! self-signed "snakeoil" certificate (CN and DNS name `localhost`): which `sslmode`
//! encrypts every connection of a store (pool and LISTEN), which certificate checks
//! pass and which fail with a message saying what to fix, and a store at work over TLS.
//!
//! Database: `FLEETSYNC_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`.
//! The certificate checks connect by name to the default server ([`BY_NAME`]) and trust
//! `FLEETSYNC_TEST_SERVER_CERT`, default `/etc/ssl/certs/ssl-cert-snakeoil.pem` (the
//! server's own certificate, its own CA). Each test works in a schema of its own.

use fleetsync_store::conformance::{applied_completion, cluster, syncset};
use fleetsync_store::postgres::testing::{test_database_url, ScratchSchema};
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::{ClaimParams, StoreConfig};
use fleetsync_store::{EventLog, Objects, StatusRead, WorkQueue};
use std::time::Duration;
use tokio_postgres::NoTls;

/// The test server by the name its certificate is for, at the address it listens on.
const BY_NAME: &str = "host=localhost hostaddr=127.0.0.1 port=5432 user=postgres dbname=test";
/// The same server by a name its certificate is not for.
const BY_WRONG_NAME: &str = "host=fleetsync.invalid hostaddr=127.0.0.1 port=5432 user=postgres dbname=test";

/// A self-signed CA certificate (its key was thrown away): valid, and it signed nothing.
const UNRELATED_CA: &str = include_str!("data/unrelated-ca.pem");

fn server_cert() -> String {
    std::env::var("FLEETSYNC_TEST_SERVER_CERT").unwrap_or_else(|_| "/etc/ssl/certs/ssl-cert-snakeoil.pem".into())
}

/// A fresh schema, an application name to find this test's sessions by, and a plain
/// admin connection; the schema is dropped when this goes, even if the test failed.
struct Scratch {
    schema: ScratchSchema,
    app: String,
    admin: tokio_postgres::Client,
    _dir: tempfile::TempDir,
    unrelated_ca: String,
}

impl Scratch {
    async fn new() -> Self {
        let (admin, conn) =
            tokio_postgres::connect(&test_database_url(), NoTls).await.expect("connect to the test database");
        tokio::spawn(conn);
        let dir = tempfile::tempdir().expect("tempdir");
        let unrelated = dir.path().join("unrelated-ca.pem");
        std::fs::write(&unrelated, UNRELATED_CA).expect("write the unrelated CA");
        let unrelated_ca = unrelated.to_str().expect("UTF-8 temp path").to_string();
        let schema = ScratchSchema::new();
        let app = format!("fs_tls_{}", schema.name);
        Scratch { schema, app, admin, _dir: dir, unrelated_ca }
    }

    /// The test URL with `params` (and this test's application name) added.
    fn url(&self, params: &str) -> String {
        let url = test_database_url();
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}application_name={}{}{params}", self.app, if params.is_empty() { "" } else { "&" })
    }

    /// A key=value string: `base`, `params` and this test's application name.
    fn conninfo(&self, base: &str, params: &str) -> String {
        format!("{base} application_name={} {params}", self.app)
    }

    async fn open(&self, url: &str) -> fleetsync_store::Result<PgStore> {
        let options = PgOptions { schema: Some(self.schema.name.clone()), pool_size: 4, ..PgOptions::default() };
        PgStore::connect_with(url, options, StoreConfig::default()).await
    }

    /// (encrypted, all) sessions of this test's stores, as the server sees them.
    async fn sessions(&self) -> (i64, i64) {
        let row = self
            .admin
            .query_one(
                "SELECT count(*) FILTER (WHERE s.ssl), count(*)
                 FROM pg_stat_activity a JOIN pg_stat_ssl s ON s.pid = a.pid
                 WHERE a.application_name = $1",
                &[&self.app],
            )
            .await
            .expect("pg_stat_ssl");
        (row.get(0), row.get(1))
    }
}

/// Opens a store, writes through it (so the pool is used) and returns the server's view
/// of its sessions: the pooled one(s) and the LISTEN connection.
async fn sessions_of_a_store(scratch: &Scratch, url: &str) -> (i64, i64) {
    let store = scratch.open(url).await.expect("connect");
    store.objects_apply(vec![cluster("c1", &[])]).await.expect("apply");
    let seen = scratch.sessions().await;
    assert!(seen.1 >= 2, "a pooled connection and the listener, got {seen:?}");
    seen
}

fn must_fail(result: fleetsync_store::Result<PgStore>) -> String {
    let e = result.expect_err("the connection must be refused").to_string();
    eprintln!("{e}");
    e
}

#[tokio::test]
async fn require_encrypts_every_connection_of_the_store() {
    let scratch = Scratch::new().await;
    let (encrypted, all) = sessions_of_a_store(&scratch, &scratch.url("sslmode=require")).await;
    assert_eq!(encrypted, all, "every session encrypted");
}

#[tokio::test]
async fn disable_connects_in_plain_text() {
    let scratch = Scratch::new().await;
    let (encrypted, _) = sessions_of_a_store(&scratch, &scratch.url("sslmode=disable")).await;
    assert_eq!(encrypted, 0, "no session encrypted");
}

/// The default, `prefer`, encrypts when the server offers TLS and does not check the
/// certificate (the test server's is self-signed), as libpq without a root file.
#[tokio::test]
async fn prefer_the_default_encrypts_without_checking_the_certificate() {
    let scratch = Scratch::new().await;
    let (encrypted, all) = sessions_of_a_store(&scratch, &scratch.url("")).await;
    assert_eq!(encrypted, all, "every session encrypted");
}

#[tokio::test]
async fn verify_full_passes_with_the_servers_ca_and_name() {
    let scratch = Scratch::new().await;
    let url = scratch.conninfo(BY_NAME, &format!("sslmode=verify-full sslrootcert={}", server_cert()));
    let (encrypted, all) = sessions_of_a_store(&scratch, &url).await;
    assert_eq!(encrypted, all, "every session encrypted");
}

#[tokio::test]
async fn verify_full_refuses_an_unrelated_root_and_a_wrong_name() {
    let scratch = Scratch::new().await;
    let wrong_root = scratch.conninfo(BY_NAME, &format!("sslmode=verify-full sslrootcert={}", scratch.unrelated_ca));
    let e = must_fail(scratch.open(&wrong_root).await);
    assert!(e.contains("connecting to PostgreSQL") && e.contains("invalid peer certificate"), "{e}");
    assert!(
        e.contains(&format!(
            "refused the server's certificate: check that sslrootcert {} holds the CA",
            scratch.unrelated_ca
        )),
        "{e}"
    );

    let wrong_name = scratch.conninfo(BY_WRONG_NAME, &format!("sslmode=verify-full sslrootcert={}", server_cert()));
    let e = must_fail(scratch.open(&wrong_name).await);
    assert!(e.contains("invalid peer certificate") && e.contains("fleetsync.invalid"), "{e}");
    assert!(e.contains("connect by a host name the certificate is for"), "{e}");

    // `fleetsync migrate` connects with the same settings.
    let e = PgStore::migrate(&wrong_root, Some(&scratch.schema.name))
        .await
        .expect_err("migrate must be refused")
        .to_string();
    assert!(e.contains("invalid peer certificate") && e.contains("holds the CA that signed it"), "{e}");
    assert_eq!(scratch.sessions().await, (0, 0), "no connection got through");
}

/// verify-ca checks the chain only; require with a root file does the same (libpq's
/// compatibility rule).
#[tokio::test]
async fn verify_ca_and_require_with_a_root_file_check_the_chain_not_the_name() {
    let scratch = Scratch::new().await;
    for mode in ["verify-ca", "require"] {
        let by_wrong_name = scratch.conninfo(BY_WRONG_NAME, &format!("sslmode={mode} sslrootcert={}", server_cert()));
        let store = scratch.open(&by_wrong_name).await.unwrap_or_else(|e| panic!("{mode}, right CA, wrong name: {e}"));
        drop(store);

        let wrong_root = scratch.conninfo(BY_NAME, &format!("sslmode={mode} sslrootcert={}", scratch.unrelated_ca));
        let e = must_fail(scratch.open(&wrong_root).await);
        assert!(e.contains("invalid peer certificate") && e.contains(&format!("sslmode={mode} refused")), "{e}");
    }
}

/// Stores whose every connection is encrypted work as ever: migrate, enqueue, a wake-up
/// through the LISTEN connection, claim, complete.
#[tokio::test]
async fn a_store_over_tls_enqueues_claims_and_completes() {
    let scratch = Scratch::new().await;
    let url = scratch.url("sslmode=require");
    let version = PgStore::migrate(&url, Some(&scratch.schema.name)).await.expect("migrate over TLS");
    assert!(version > 0);
    let store = scratch.open(&url).await.expect("connect");
    let other = scratch.open(&url).await.expect("a second store, as another process");
    let mut events = store.events_subscribe();
    events.borrow_and_update();

    other.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("enqueue");
    tokio::time::timeout(Duration::from_secs(5), events.changed())
        .await
        .expect("the other store's write woke this one through its LISTEN connection")
        .expect("watch open");
    let item = store.work_claim(ClaimParams::new("w", 10, Duration::from_secs(30))).await.expect("claim").remove(0);
    store.work_complete(vec![applied_completion(&item)]).await.expect("complete");
    let status = other.status_get(&item.key).await.expect("status").expect("the key");
    assert_eq!(status.observed_generation, item.generation);
    let (encrypted, all) = scratch.sessions().await;
    assert_eq!(encrypted, all, "every session encrypted");
}
