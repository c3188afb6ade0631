//! The conformance suite on PostgreSQL: each check in a fresh scratch schema of the test
//! database, dropped afterwards.

use async_trait::async_trait;
use fleetsync_store::postgres::testing::{test_database_url, ScratchSchema};
use fleetsync_store::postgres::PgStore;
use fleetsync_store::{Store, StoreConfig};
use std::sync::Arc;

struct Harness {
    schema: ScratchSchema,
}

#[async_trait]
impl fleetsync_store::conformance::Harness for Harness {
    async fn open(&self, config: StoreConfig) -> Arc<dyn Store> {
        Arc::new(PgStore::connect(&test_database_url(), Some(&self.schema.name), config).await.expect("connect"))
    }
}

/// The store creates the schema when it first connects.
async fn harness() -> Harness {
    Harness { schema: ScratchSchema::new() }
}

fleetsync_store::conformance_tests!(harness());
