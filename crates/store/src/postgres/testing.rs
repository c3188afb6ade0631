//! Test support (the `conformance` feature, off by default): the test database and
//! scratch schemas for the PostgreSQL tests of this crate and of others.

/// Test support: the database the PostgreSQL tests use, `FLEETSYNC_TEST_DATABASE_URL`
/// or the local default.
pub fn test_database_url() -> String {
    std::env::var("FLEETSYNC_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Test support: a schema name of a test's own (the stores it opens create the schema),
/// dropped when this goes, also when the test failed.
#[derive(Debug)]
pub struct ScratchSchema {
    pub name: String,
}

impl ScratchSchema {
    pub fn new() -> Self {
        Self { name: format!("fs_{:016x}", rand::random::<u64>()) }
    }
}

impl Default for ScratchSchema {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for ScratchSchema {
    fn drop(&mut self) {
        drop_schema_blocking(&test_database_url(), &self.name);
    }
}

/// Test support: drops `schema` (best effort) on a runtime of its own, so a test
/// harness can clean up from `Drop` while its own runtime may be shutting down.
pub fn drop_schema_blocking(url: &str, schema: &str) {
    let (url, sql) = (url.to_string(), format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            if let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                tokio::spawn(conn);
                let _ = client.batch_execute(&sql).await;
            }
        });
    })
    .join();
}
