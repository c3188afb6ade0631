//! What fleetsync's tests and benchmarks share: the `hive-fleet` workload (re-exported
//! from the simulator's crate, `fleetsync_k8s_sim::hive`, where the demo takes it), a
//! way to wait for a fleet to settle, and a
//! throwaway PostgreSQL server for tests that restart or crash the database ([`pg`]),
//! test certificate authorities (`tls`, with the feature `tls`), a mutation fuzzer
//! (`fuzz`, with the feature `fuzz`), the programs tests run (`tools`, with the
//! feature `tools`), an OCI registry on loopback (`registry`, with the feature
//! `registry`), and Git repositories and a Git server on loopback (`git`, with the
//! feature `git`).

#[cfg(feature = "fuzz")]
pub mod fuzz;
#[cfg(feature = "git")]
pub mod git;
pub mod pg;
#[cfg(feature = "registry")]
pub mod registry;
#[cfg(feature = "tls")]
pub mod tls;
#[cfg(feature = "tools")]
pub mod tools;

pub use fleetsync_k8s_sim::hive::{cluster_name, hive_cluster, hive_fleet, hive_syncset, syncset_name, FleetShape};

use fleetsync_store::{QueueStats, Store, StoreError};
use std::time::Duration;

/// Polls every 20 ms until no key is unsettled (every key Applied or Parked) or
/// `timeout` passes; returns the last stats and whether it settled.
pub async fn wait_settled(store: &dyn Store, timeout: Duration) -> Result<(QueueStats, bool), StoreError> {
    wait_settled_with(store, timeout, Duration::from_millis(20), |_| {}).await
}

/// [`wait_settled`], polling every `every` and showing each poll's stats to
/// `on_poll` (the demo's progress bar).
pub async fn wait_settled_with(
    store: &dyn Store,
    timeout: Duration,
    every: Duration,
    mut on_poll: impl FnMut(&QueueStats),
) -> Result<(QueueStats, bool), StoreError> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let stats = store.queue_stats().await?;
        on_poll(&stats);
        if stats.unsettled() == 0 {
            return Ok((stats, true));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok((stats, false));
        }
        tokio::time::sleep(every).await;
    }
}
