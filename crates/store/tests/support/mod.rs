//! What the PostgreSQL test files share: a scratch schema with an admin connection, and
//! waiting for a wake-up. (Each test binary uses part of it.)
#![allow(dead_code)]

use fleetsync_store::postgres::testing::{test_database_url, ScratchSchema};
use fleetsync_store::postgres::PgStore;
use fleetsync_store::StoreConfig;
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

/// A fresh schema name (created by the store) and an admin connection; the schema is
/// dropped when this goes, even if the test failed.
pub struct Scratch {
    pub schema: ScratchSchema,
    pub admin: tokio_postgres::Client,
}

impl Scratch {
    pub async fn new() -> Self {
        let schema = ScratchSchema::new();
        let (admin, conn) =
            tokio_postgres::connect(&test_database_url(), NoTls).await.expect("connect to the test database");
        tokio::spawn(conn);
        Scratch { schema, admin }
    }

    pub async fn store(&self) -> PgStore {
        PgStore::connect(&test_database_url(), Some(&self.schema.name), StoreConfig::default()).await.expect("connect")
    }

    /// A URL whose connections carry `application_name`, to find them in pg_stat_activity.
    pub fn url_named(&self, app: &str) -> String {
        let url = test_database_url();
        let sep = if url.contains('?') { '&' } else { '?' };
        format!("{url}{sep}application_name={app}")
    }
}

/// Whether `rx` changes within `limit`; how long after the start that was.
pub async fn woken_within(rx: &mut tokio::sync::watch::Receiver<u64>, limit: Duration) -> Option<Duration> {
    woken_since(rx, Instant::now(), limit).await
}

pub async fn woken_since(
    rx: &mut tokio::sync::watch::Receiver<u64>,
    start: Instant,
    limit: Duration,
) -> Option<Duration> {
    tokio::time::timeout(limit, rx.changed()).await.ok()?.ok()?;
    Some(start.elapsed())
}
