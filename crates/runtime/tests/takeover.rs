//! Take-over of a dead worker's key when its lease runs out between this worker's
//! claim and its look at what is due next: the key must be claimed at once, not after
//! the safety poll. (With a per-cluster limit, a due key the claim passed over is held
//! back and waits for a run to end; a key that only became due after the claim looked
//! is not held back.)

use async_trait::async_trait;
use fleetsync_applier::{Applier, ByEndpoint};
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_model::{
    Artifact, Cluster, Document, Endpoint, GitRepository, KeyStatus, Kind, ManualClock, Notifier, OCIRepository, Phase,
    ResourceRef, Secret, StatusSummary, SyncSet, Timestamp, TokenRecord, WorkKey,
};
use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::*;
use fleetsync_testkit::{hive_fleet, FleetShape};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

const DEAD_LEASE: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_ending_just_after_a_claim_is_taken_over_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
    let config = StoreConfig { clock: Some(clock.clone()), ..StoreConfig::default() };
    let inner = SqliteStore::open(dir.path().join("f.db"), config).expect("open");
    let shape = FleetShape { clusters: 1, syncsets: 1, resources: 1 };
    inner.objects_apply(hive_fleet(shape, |_| Endpoint::Simulator {}, "r1")).await.expect("apply");
    let dead = inner.work_claim(ClaimParams::new("dead", 1, DEAD_LEASE)).await.expect("claim");
    assert_eq!(dead.len(), 1, "the dead worker holds the only key");

    // The runtime's first claim finds the key leased; right after it, time moves past
    // the dead worker's lease.
    let store: Arc<dyn Store> =
        Arc::new(ExpireAfterClaim { inner, clock: clock.clone(), done: AtomicBool::new(false) });
    let sim = SimFleet::new(SimFleetConfig {
        latency: fleetsync_k8s_sim::LatencyModel::hive_fleet_scaled(0.0),
        fail_rate: 0.0,
    });
    let applier: Arc<dyn Applier> = Arc::new(ByEndpoint { simulator: Some(Arc::new(sim)), ..ByEndpoint::default() });
    // No clock of its own: the runtime reads the store's (the manual one).
    let config =
        RuntimeConfig { max_per_cluster: Some(4), poll_interval: Duration::from_secs(60), ..RuntimeConfig::default() };
    let shutdown = CancellationToken::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = RuntimeMetrics::register(&mut registry);
    let task = tokio::spawn(Runtime::new(store.clone(), applier, config, metrics).run(shutdown.clone()));

    let start = Instant::now();
    loop {
        let stats = store.queue_stats().await.expect("stats");
        if stats.by_phase.get(&Phase::Applied) == Some(&1) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the expired key waited for the safety poll: {:?}",
            stats.by_phase
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    task.await.expect("joins").expect("runs");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
    assert!(text.contains("\nfleetsync_lease_takeovers_total 1\n"), "the take-over is counted:\n{text}");
}

/// The SQLite store, except that the clock jumps past the dead worker's lease right
/// after the first claim made through it.
struct ExpireAfterClaim {
    inner: SqliteStore,
    clock: Arc<ManualClock>,
    done: AtomicBool,
}

#[async_trait]
impl Objects for ExpireAfterClaim {
    async fn objects_apply_within(
        &self,
        docs: Vec<Document>,
        actor: Option<&str>,
        quotas: &Quotas,
        commit: Commit,
    ) -> Result<Vec<ApplyOutcome>> {
        self.inner.objects_apply_within(docs, actor, quotas, commit).await
    }

    async fn objects_apply_own(&self, docs: Vec<Document>, own: OwnWrite) -> Result<Vec<ApplyOutcome>> {
        self.inner.objects_apply_own(docs, own).await
    }

    async fn object_delete_by(&self, kind: Kind, tenant: &str, name: &str, actor: Option<&str>) -> Result<()> {
        self.inner.object_delete_by(kind, tenant, name, actor).await
    }

    async fn cluster_get(&self, tenant: &str, name: &str) -> Result<Option<Cluster>> {
        self.inner.cluster_get(tenant, name).await
    }

    async fn cluster_list(&self, tenant: Option<&str>) -> Result<Vec<Cluster>> {
        self.inner.cluster_list(tenant).await
    }

    async fn syncset_get(&self, tenant: &str, name: &str) -> Result<Option<SyncSet>> {
        self.inner.syncset_get(tenant, name).await
    }

    async fn syncset_list(&self, tenant: Option<&str>) -> Result<Vec<SyncSet>> {
        self.inner.syncset_list(tenant).await
    }

    async fn secret_get(&self, tenant: &str, name: &str) -> Result<Option<Secret>> {
        self.inner.secret_get(tenant, name).await
    }

    async fn secret_list(&self, tenant: Option<&str>) -> Result<Vec<Secret>> {
        self.inner.secret_list(tenant).await
    }

    async fn git_repository_get(&self, tenant: &str, name: &str) -> Result<Option<GitRepository>> {
        self.inner.git_repository_get(tenant, name).await
    }

    async fn git_repository_list(&self, tenant: Option<&str>) -> Result<Vec<GitRepository>> {
        self.inner.git_repository_list(tenant).await
    }

    async fn oci_repository_get(&self, tenant: &str, name: &str) -> Result<Option<OCIRepository>> {
        self.inner.oci_repository_get(tenant, name).await
    }

    async fn oci_repository_list(&self, tenant: Option<&str>) -> Result<Vec<OCIRepository>> {
        self.inner.oci_repository_list(tenant).await
    }

    async fn notifier_get(&self, tenant: &str, name: &str) -> Result<Option<Notifier>> {
        self.inner.notifier_get(tenant, name).await
    }

    async fn notifier_list(&self, tenant: Option<&str>) -> Result<Vec<Notifier>> {
        self.inner.notifier_list(tenant).await
    }

    async fn cluster_page(
        &self,
        filter: &ClusterFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Cluster, ObjectKey>> {
        self.inner.cluster_page(filter, page).await
    }

    async fn syncset_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<SyncSet, ObjectKey>> {
        self.inner.syncset_page(filter, page).await
    }

    async fn secret_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Secret, ObjectKey>> {
        self.inner.secret_page(filter, page).await
    }

    async fn git_repository_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<GitRepository, ObjectKey>> {
        self.inner.git_repository_page(filter, page).await
    }

    async fn oci_repository_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<OCIRepository, ObjectKey>> {
        self.inner.oci_repository_page(filter, page).await
    }

    async fn notifier_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Notifier, ObjectKey>> {
        self.inner.notifier_page(filter, page).await
    }
}

#[async_trait]
impl WorkQueue for ExpireAfterClaim {
    async fn work_claim(&self, params: ClaimParams) -> Result<Vec<ClaimedItem>> {
        let claimed = self.inner.work_claim(params).await;
        if !self.done.swap(true, Ordering::SeqCst) {
            assert!(claimed.as_ref().is_ok_and(Vec::is_empty), "the first claim finds the key leased");
            self.clock.advance(2 * DEAD_LEASE);
        }
        claimed
    }

    async fn lease_renew(&self, params: RenewParams) -> Result<Vec<WorkKey>> {
        self.inner.lease_renew(params).await
    }

    async fn work_complete(&self, completions: Vec<Completion>) -> Result<Vec<CompleteOutcome>> {
        self.inner.work_complete(completions).await
    }

    async fn work_inventory_record(&self, key: &WorkKey, fence: Fence, inventory: &[ResourceRef]) -> Result<()> {
        self.inner.work_inventory_record(key, fence, inventory).await
    }

    async fn work_release(&self, key: &WorkKey, fence: Fence) -> Result<()> {
        self.inner.work_release(key, fence).await
    }

    async fn work_retry_by(&self, key: &WorkKey, actor: Option<&str>) -> Result<()> {
        self.inner.work_retry_by(key, actor).await
    }

    async fn work_resync(&self) -> Result<u64> {
        self.inner.work_resync().await
    }

    async fn work_next_ready_at(&self, shards: Option<&[u16]>) -> Result<Option<Timestamp>> {
        self.inner.work_next_ready_at(shards).await
    }

    fn clock(&self) -> Arc<dyn fleetsync_model::Clock> {
        self.inner.clock()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.subscribe()
    }
}

#[async_trait]
impl Members for ExpireAfterClaim {
    async fn member_heartbeat(&self, beat: MemberBeat) -> Result<Vec<Member>> {
        self.inner.member_heartbeat(beat).await
    }

    async fn member_leave(&self, id: &str) -> Result<()> {
        self.inner.member_leave(id).await
    }

    async fn member_list(&self) -> Result<Vec<Member>> {
        self.inner.member_list().await
    }
}

#[async_trait]
impl StatusRead for ExpireAfterClaim {
    async fn status_list(&self, filter: &StatusFilter) -> Result<Vec<KeyStatus>> {
        self.inner.status_list(filter).await
    }

    async fn status_page(
        &self,
        filter: &StatusFilter,
        page: &PageRequest<WorkKey>,
    ) -> Result<Page<KeyStatus, WorkKey>> {
        self.inner.status_page(filter, page).await
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        self.inner.queue_stats().await
    }

    async fn store_ready(&self) -> Result<fleetsync_store::Schema> {
        self.inner.store_ready().await
    }

    async fn status_summary(&self, tenant: &str, syncset: Option<&str>) -> Result<StatusSummary> {
        self.inner.status_summary(tenant, syncset).await
    }

    async fn cluster_conditions(
        &self,
        tenant: &str,
        stale_after: Duration,
    ) -> Result<fleetsync_model::ClusterConditions> {
        self.inner.cluster_conditions(tenant, stale_after).await
    }

    async fn cluster_rows(&self, tenant: &str) -> Result<Vec<fleetsync_model::cluster_list::ClusterRow>> {
        self.inner.cluster_rows(tenant).await
    }
}

#[async_trait]
impl EventLog for ExpireAfterClaim {
    async fn consumer_get(&self, name: &str) -> Result<Option<u64>> {
        self.inner.consumer_get(name).await
    }

    async fn consumer_ack(&self, name: &str, seq: u64) -> Result<u64> {
        self.inner.consumer_ack(name, seq).await
    }

    async fn consumer_delete(&self, name: &str) -> Result<()> {
        self.inner.consumer_delete(name).await
    }

    async fn events_read(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.inner.events_read(after, limit).await
    }

    async fn events_read_of(&self, tenants: &[String], after: u64, limit: usize) -> Result<Vec<Event>> {
        self.inner.events_read_of(tenants, after, limit).await
    }

    async fn events_newest(&self, tenants: Option<&[String]>, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        self.inner.events_newest(tenants, before, limit).await
    }

    async fn events_head(&self) -> Result<u64> {
        self.inner.events_head().await
    }

    async fn events_of(&self, object: &EventObject, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        self.inner.events_of(object, before, limit).await
    }

    async fn events_trim(&self, keep: EventRetention) -> Result<EventsTrimmed> {
        self.inner.events_trim(keep).await
    }

    fn events_subscribe(&self) -> watch::Receiver<u64> {
        self.inner.events_subscribe()
    }
}

#[async_trait]
impl Artifacts for ExpireAfterClaim {
    async fn artifact_put(&self, tenant: &str, source: &str, artifact: &Artifact) -> Result<ArtifactStored> {
        self.inner.artifact_put(tenant, source, artifact).await
    }

    async fn artifact_get(&self, tenant: &str, source: &str, revision: &str) -> Result<Option<Artifact>> {
        self.inner.artifact_get(tenant, source, revision).await
    }

    async fn source_stored(
        &self,
        tenant: &str,
        name: &str,
        artifact: &Artifact,
        own: OwnWrite,
    ) -> Result<fleetsync_store::SourceStored> {
        self.inner.source_stored(tenant, name, artifact, own).await
    }

    async fn source_catch_up_one(
        &self,
        tenant: &str,
        name: &str,
        own: OwnWrite,
    ) -> Result<Option<fleetsync_store::ApplyOutcome>> {
        self.inner.source_catch_up_one(tenant, name, own).await
    }
}

#[async_trait]
impl Tokens for ExpireAfterClaim {
    async fn token_create(&self, record: &TokenRecord, hash: &[u8; 32]) -> Result<bool> {
        self.inner.token_create(record, hash).await
    }

    async fn token_find(&self, hash: &[u8; 32]) -> Result<Option<TokenRecord>> {
        self.inner.token_find(hash).await
    }

    async fn token_list(&self) -> Result<Vec<TokenRecord>> {
        self.inner.token_list().await
    }

    async fn token_revoke(&self, tenant: Option<&str>, name: &str) -> Result<bool> {
        self.inner.token_revoke(tenant, name).await
    }
}

#[async_trait]
impl Rollouts for ExpireAfterClaim {
    async fn revision_get(
        &self,
        tenant: &str,
        syncset: &str,
        generation: i64,
    ) -> Result<Option<fleetsync_model::SyncSet>> {
        self.inner.revision_get(tenant, syncset, generation).await
    }

    async fn rollout_get(&self, tenant: &str, syncset: &str) -> Result<Option<fleetsync_store::rollout::RolloutState>> {
        self.inner.rollout_get(tenant, syncset).await
    }

    async fn rollout_list(
        &self,
        tenant: Option<&str>,
        phase: Option<fleetsync_model::RolloutPhase>,
    ) -> Result<Vec<fleetsync_store::rollout::RolloutState>> {
        self.inner.rollout_list(tenant, phase).await
    }

    async fn rollout_write(
        &self,
        next: &fleetsync_store::rollout::RolloutState,
        enqueue: &[(String, i64)],
        event: Option<fleetsync_store::rollout::RolloutEvent>,
    ) -> Result<bool> {
        self.inner.rollout_write(next, enqueue, event).await
    }
}

#[async_trait]
impl LiveState for ExpireAfterClaim {
    async fn live_record(
        &self,
        tenant: &str,
        cluster: &str,
        records: Vec<fleetsync_store::LiveRecord>,
    ) -> Result<fleetsync_store::LiveRecorded> {
        self.inner.live_record(tenant, cluster, records).await
    }

    async fn live_list(&self, tenant: &str, cluster: &str) -> Result<Vec<fleetsync_store::LiveResource>> {
        self.inner.live_list(tenant, cluster).await
    }

    async fn live_page(
        &self,
        filter: &LiveFilter,
        page: &PageRequest<String>,
    ) -> Result<Page<fleetsync_store::LiveResource, String>> {
        self.inner.live_page(filter, page).await
    }
}
