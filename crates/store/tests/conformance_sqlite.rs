//! The conformance suite on SQLite: each check on a fresh database file.

use async_trait::async_trait;
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use std::sync::Arc;

struct Harness {
    dir: tempfile::TempDir,
}

#[async_trait]
impl fleetsync_store::conformance::Harness for Harness {
    async fn open(&self, config: StoreConfig) -> Arc<dyn Store> {
        Arc::new(SqliteStore::open(self.dir.path().join("fleetsync.db"), config).expect("open sqlite"))
    }
}

async fn harness() -> Harness {
    Harness { dir: tempfile::tempdir().expect("tempdir") }
}

fleetsync_store::conformance_tests!(harness());
