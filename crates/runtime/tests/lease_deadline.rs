//! A run whose lease's safe deadline passes while its task is not scheduled makes no
//! further call to its target. Here the first apply blocks the runtime's only thread
//! past the lease (as a paused process or a starved runtime would): when the thread
//! runs again, the run goes on before the lease watchdog is polled, so only the run's
//! own check before each call can stop it.

use async_trait::async_trait;
use fleetsync_applier::{Applier, ApplyContext, ApplyError};
use fleetsync_model::{Cluster, Endpoint, Manifest, ResourceRef};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Store, StoreConfig};
use fleetsync_testkit::{hive_fleet, FleetShape};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_millis(600);

/// Records every call as (fence, index); the very first apply blocks the thread
/// for longer than the lease.
#[derive(Default)]
struct StallOnce {
    calls: Mutex<Vec<(i64, usize)>>,
    stalled: AtomicBool,
}

#[async_trait]
impl Applier for StallOnce {
    async fn apply(&self, _: &Cluster, _: &Manifest, ctx: &ApplyContext) -> Result<(), ApplyError> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner).push((ctx.fence.get(), ctx.index));
        if !self.stalled.swap(true, Ordering::SeqCst) {
            std::thread::sleep(TTL * 2);
        }
        Ok(())
    }

    async fn delete(&self, _: &Cluster, _: &ResourceRef, _: &ApplyContext) -> Result<(), ApplyError> {
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_run_past_its_deadline_makes_no_further_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open"));
    let shape = FleetShape { clusters: 1, syncsets: 1, resources: 5 };
    store.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    let applier = Arc::new(StallOnce::default());
    let config = RuntimeConfig {
        lease_ttl: TTL,
        renew_every: Duration::from_millis(200),
        member_ttl: Duration::from_millis(300),
        ..RuntimeConfig::default()
    };
    let shutdown = CancellationToken::new();
    let routed = Arc::new(fleetsync_applier::ByEndpoint { simulator: Some(applier.clone()), ..Default::default() });
    let runtime =
        tokio::spawn(Runtime::new(store.clone(), routed, config, RuntimeMetrics::unregistered()).run(shutdown.clone()));

    // Wait until the stalled run went on (the failure) or the key was claimed again
    // with a new token and applied in full (the lease was lost, as it should be).
    let start = std::time::Instant::now();
    loop {
        let calls = applier.calls.lock().unwrap_or_else(PoisonError::into_inner).clone();
        let (stalled, others): (Vec<&(i64, usize)>, Vec<_>) = calls.iter().partition(|(f, _)| *f == calls[0].0);
        if stalled.len() > 1 || others.len() >= shape.resources {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "neither: {calls:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    runtime.await.expect("joins").expect("runs");

    let calls = applier.calls.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let stalled_fence = calls[0].0;
    let late: Vec<_> = calls.iter().filter(|(f, _)| *f == stalled_fence).skip(1).collect();
    assert!(late.is_empty(), "calls made with token {stalled_fence} after its deadline: {late:?}");
}
