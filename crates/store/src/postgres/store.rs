//! The store's roles for [`PgStore`]: each call as a transaction or a read, by the modules
//! that write its SQL.

use super::{
    claim, complete, consumers, counts, live, members, objects, pages, queue, rollouts, rows, schema, summary, PgStore,
};
use crate::page::{ClusterFilter, LiveFilter, ObjectFilter, ObjectKey, Page, PageRequest};
use crate::roles::{EventLog, LiveState, Members, Objects, Rollouts, StatusRead, WorkQueue};
use crate::rollout::{RolloutEvent, RolloutState};
use crate::write::{apply, delete, queue as queued, rollout_write};
use crate::{
    check_consumer_name, ApplyOutcome, ClaimParams, ClaimedItem, ClusterLimit, Commit, CompleteOutcome, Completion,
    Event, EventObject, EventRetention, EventsTrimmed, Fence, LiveRecord, LiveRecorded, LiveResource, Member,
    MemberBeat, OwnWrite, QueueStats, Quotas, RenewParams, Result, StatusFilter,
};
use async_trait::async_trait;
use fleetsync_model::cluster_list::ClusterRow;
use fleetsync_model::{
    Clock, Cluster, ClusterConditions, Document, GitRepository, KeyStatus, Kind, Notifier, OCIRepository, ResourceRef,
    RolloutPhase, Secret, StatusSummary, SyncSet, Timestamp, WorkKey,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Windows of due keys one claim looks through at most (see `work_claim`).
const CLAIM_PASSES: usize = 8;

impl PgStore {
    /// One claim statement from the claimer's cursor, moving the cursor after it.
    async fn claim_once(&self, params: &ClaimParams, window: i64) -> Result<claim::Claimed> {
        let cursors = &self.inner.cursors;
        let from = cursors.begin(&params.owner, params.shards.as_deref(), self.inner.clock.now().millis());
        let mut claimed = self
            .write_statement("claiming work", |c, now| {
                Box::pin(claim::claim(c, now, params.clone(), from.clone(), window))
            })
            .await?;
        tracing::trace!(owner = params.owner, ?from, next = ?claimed.next, window, asked = params.limit, took = claimed.items.len(), cut = claimed.window_cut, "claimed");
        cursors.end(&params.owner, params.shards.as_deref(), claimed.next.clone(), claimed.leases.take());
        // Only now, after the commit: a retried attempt's locations would be wrong.
        self.inner.locations.claimed(std::mem::take(&mut claimed.located), params.lease_ttl);
        Ok(claimed)
    }
}

#[async_trait]
impl Objects for PgStore {
    async fn objects_apply_within(
        &self,
        docs: Vec<Document>,
        actor: Option<&str>,
        quotas: &Quotas,
        commit: Commit,
    ) -> Result<Vec<ApplyOutcome>> {
        let (docs, quotas, actor) = (Arc::new(docs), Arc::new(quotas.clone()), actor.map(Arc::<str>::from));
        self.write_ending("applying documents", commit, |tx| {
            let (docs, quotas, actor, keys) =
                (docs.clone(), quotas.clone(), actor.clone(), self.inner.config.keys.clone());
            Box::pin(async move { apply::apply_within(tx, &docs, actor.as_deref(), &quotas, keys.as_deref()).await })
        })
        .await
    }

    async fn objects_apply_own(&self, docs: Vec<Document>, own: OwnWrite) -> Result<Vec<ApplyOutcome>> {
        let (docs, own) = (Arc::new(docs), Arc::new(own));
        self.write("applying an own write", |tx| {
            let (docs, own, keys) = (docs.clone(), own.clone(), self.inner.config.keys.clone());
            Box::pin(async move { apply::apply_own(tx, &docs, &own, keys.as_deref()).await })
        })
        .await
    }

    async fn object_delete_by(&self, kind: Kind, tenant: &str, name: &str, actor: Option<&str>) -> Result<()> {
        self.write("deleting an object", |tx| {
            let (tenant, name, actor) = (tenant.to_string(), name.to_string(), actor.map(str::to_string));
            Box::pin(async move { delete::delete(tx, kind, &tenant, &name, actor.as_deref()).await })
        })
        .await
    }

    async fn cluster_get(&self, tenant: &str, name: &str) -> Result<Option<Cluster>> {
        self.read("reading a cluster", |c, _| {
            Box::pin(objects::get(c, Kind::Cluster, tenant.to_string(), name.to_string(), None))
        })
        .await
    }

    async fn cluster_list(&self, tenant: Option<&str>) -> Result<Vec<Cluster>> {
        self.read("listing clusters", |c, _| {
            Box::pin(objects::list(c, Kind::Cluster, tenant.map(str::to_string), None))
        })
        .await
    }

    async fn syncset_get(&self, tenant: &str, name: &str) -> Result<Option<SyncSet>> {
        self.read("reading a syncset", |c, _| {
            Box::pin(objects::get(c, Kind::SyncSet, tenant.to_string(), name.to_string(), None))
        })
        .await
    }

    async fn syncset_list(&self, tenant: Option<&str>) -> Result<Vec<SyncSet>> {
        self.read("listing syncsets", |c, _| {
            Box::pin(objects::list(c, Kind::SyncSet, tenant.map(str::to_string), None))
        })
        .await
    }

    async fn secret_get(&self, tenant: &str, name: &str) -> Result<Option<Secret>> {
        self.read("reading a secret", |c, _| {
            let (tenant, name, keys) = (tenant.to_string(), name.to_string(), self.inner.config.keys.clone());
            Box::pin(async move { objects::get(c, Kind::Secret, tenant, name, keys.as_deref()).await })
        })
        .await
    }

    async fn secret_list(&self, tenant: Option<&str>) -> Result<Vec<Secret>> {
        self.read("listing secrets", |c, _| {
            let (tenant, keys) = (tenant.map(str::to_string), self.inner.config.keys.clone());
            Box::pin(async move { objects::list(c, Kind::Secret, tenant, keys.as_deref()).await })
        })
        .await
    }

    async fn git_repository_get(&self, tenant: &str, name: &str) -> Result<Option<GitRepository>> {
        self.read("reading a source", |c, _| {
            Box::pin(objects::get(c, Kind::GitRepository, tenant.to_string(), name.to_string(), None))
        })
        .await
    }

    async fn git_repository_list(&self, tenant: Option<&str>) -> Result<Vec<GitRepository>> {
        self.read("listing sources", |c, _| {
            Box::pin(objects::list(c, Kind::GitRepository, tenant.map(str::to_string), None))
        })
        .await
    }

    async fn oci_repository_get(&self, tenant: &str, name: &str) -> Result<Option<OCIRepository>> {
        self.read("reading a source", |c, _| {
            Box::pin(objects::get(c, Kind::OCIRepository, tenant.to_string(), name.to_string(), None))
        })
        .await
    }

    async fn oci_repository_list(&self, tenant: Option<&str>) -> Result<Vec<OCIRepository>> {
        self.read("listing sources", |c, _| {
            Box::pin(objects::list(c, Kind::OCIRepository, tenant.map(str::to_string), None))
        })
        .await
    }

    async fn notifier_get(&self, tenant: &str, name: &str) -> Result<Option<Notifier>> {
        self.read("reading a notifier", |c, _| {
            Box::pin(objects::get(c, Kind::Notifier, tenant.to_string(), name.to_string(), None))
        })
        .await
    }

    async fn notifier_list(&self, tenant: Option<&str>) -> Result<Vec<Notifier>> {
        self.read("listing notifiers", |c, _| {
            Box::pin(objects::list(c, Kind::Notifier, tenant.map(str::to_string), None))
        })
        .await
    }

    async fn cluster_page(
        &self,
        filter: &ClusterFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Cluster, ObjectKey>> {
        self.read("listing clusters", |c, _| {
            let (f, p) = (filter.clone(), page.clone());
            Box::pin(
                async move { pages::objects(c, Kind::Cluster, f.tenant.as_deref(), Some(&f.labels), &p, None).await },
            )
        })
        .await
    }

    async fn syncset_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<SyncSet, ObjectKey>> {
        self.read("listing syncsets", |c, _| {
            let (f, p) = (filter.clone(), page.clone());
            Box::pin(async move { pages::objects(c, Kind::SyncSet, f.tenant.as_deref(), None, &p, None).await })
        })
        .await
    }

    async fn secret_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Secret, ObjectKey>> {
        self.read("listing secrets", |c, _| {
            let (f, p, keys) = (filter.clone(), page.clone(), self.inner.config.keys.clone());
            Box::pin(
                async move { pages::objects(c, Kind::Secret, f.tenant.as_deref(), None, &p, keys.as_deref()).await },
            )
        })
        .await
    }

    async fn git_repository_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<GitRepository, ObjectKey>> {
        self.read("listing sources", |c, _| {
            let (f, p) = (filter.clone(), page.clone());
            Box::pin(async move { pages::objects(c, Kind::GitRepository, f.tenant.as_deref(), None, &p, None).await })
        })
        .await
    }

    async fn notifier_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Notifier, ObjectKey>> {
        self.read("listing notifiers", |c, _| {
            let (f, p) = (filter.clone(), page.clone());
            Box::pin(async move { pages::objects(c, Kind::Notifier, f.tenant.as_deref(), None, &p, None).await })
        })
        .await
    }

    async fn oci_repository_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<OCIRepository, ObjectKey>> {
        self.read("listing sources", |c, _| {
            let (f, p) = (filter.clone(), page.clone());
            Box::pin(async move { pages::objects(c, Kind::OCIRepository, f.tenant.as_deref(), None, &p, None).await })
        })
        .await
    }
}

#[async_trait]
impl WorkQueue for PgStore {
    /// A claim looks through a narrow window of due keys first (as many as the batch).
    /// When that window filled up with keys it cannot take and did not fill the batch,
    /// it looks further at once, up to [`CLAIM_PASSES`] windows in all:
    ///
    /// - through the wide window, when keys held back by the per-cluster limit filled it
    ///   (counting what it took so far against the limit);
    /// - through the next window, when leases filled it (they stay in `due` while they
    ///   run): a cursor that starts before a process's live leases (a new claimer, one
    ///   that went back) passes them in one call, not one window per wake-up.
    async fn work_claim(&self, params: ClaimParams) -> Result<Vec<ClaimedItem>> {
        let mut items: Vec<ClaimedItem> = Vec::new();
        // The parameters of a further pass: made only when one is needed (the usual
        // claim is one pass, and the cluster limit's counts are a map worth not copying).
        let mut rest: Option<ClaimParams> = None;
        let mut wide = false;
        for _ in 0..CLAIM_PASSES {
            let pass = rest.as_ref().unwrap_or(&params);
            let limit = i64::try_from(pass.limit).unwrap_or(i64::MAX);
            let window = if wide { ClusterLimit::window(limit) } else { ClusterLimit::narrow_window(limit) };
            let claimed = self.claim_once(pass, window).await?;
            let before = items.len();
            items.extend(claimed.items);
            if items.len() >= params.limit || !(claimed.window_cut || claimed.more) {
                break;
            }
            wide |= claimed.window_cut;
            // What is left to claim, with what this pass took counted against the limit.
            let next = rest.get_or_insert_with(|| params.clone());
            next.limit = params.limit - items.len();
            if let Some(cluster_limit) = next.cluster_limit.as_mut() {
                cluster_limit.count(&items[before..]);
            }
        }
        Ok(items)
    }

    async fn lease_renew(&self, params: RenewParams) -> Result<Vec<WorkKey>> {
        let params = Arc::new(params);
        let lost = self
            .write("renewing leases", |tx| {
                let params = params.clone();
                Box::pin(async move { queue::renew(tx, &params).await })
            })
            .await?;
        let renewed = params.leases.iter().filter(|(k, _)| !lost.contains(k)).map(|(k, f)| (k, *f));
        self.inner.locations.renewed(renewed, params.lease_ttl);
        Ok(lost)
    }

    async fn work_complete(&self, completions: Vec<Completion>) -> Result<Vec<CompleteOutcome>> {
        let completions = Arc::new(completions);
        let retry = self.inner.config.retry;
        let outcomes = self
            .write("completing work", |tx| {
                let (completions, locations) = (completions.clone(), self.inner.locations.clone());
                Box::pin(async move { complete::run(tx, &retry, &locations, &completions).await })
            })
            .await?;
        // Committed: each lease is over (or was already lost, if stale).
        self.inner.locations.forget(completions.iter().map(|c| (&c.key, c.fence)));
        Ok(outcomes)
    }

    async fn work_inventory_record(&self, key: &WorkKey, fence: Fence, inventory: &[ResourceRef]) -> Result<()> {
        let inventory: Arc<[ResourceRef]> = inventory.into();
        self.write("recording an inventory", |tx| {
            let (key, inventory) = (key.clone(), inventory.clone());
            Box::pin(async move { queued::inventory_record(tx, &key, fence, &inventory).await })
        })
        .await
    }

    async fn work_release(&self, key: &WorkKey, fence: Fence) -> Result<()> {
        self.write("releasing a key", |tx| Box::pin(queue::release(tx, key.clone(), fence))).await?;
        self.inner.locations.forget([(key, fence)]);
        Ok(())
    }

    async fn work_retry_by(&self, key: &WorkKey, actor: Option<&str>) -> Result<()> {
        self.write("retrying a key", |tx| {
            let (key, actor) = (key.clone(), actor.map(str::to_string));
            Box::pin(async move { queued::retry(tx, &key, actor.as_deref()).await })
        })
        .await
    }

    async fn work_resync(&self) -> Result<u64> {
        self.write("resyncing", |tx| Box::pin(queued::resync(tx))).await
    }

    async fn work_next_ready_at(&self, shards: Option<&[u16]>) -> Result<Option<Timestamp>> {
        let (from, lease_ends) = self.inner.cursors.earliest(shards);
        let shards = claim::shard_array(shards);
        let next = self
            .read("reading the next ready time", |c, _| Box::pin(claim::next_due_at(c, shards.clone(), from.clone())))
            .await?;
        // The leases the claimers passed by are due when they expire.
        Ok(next.into_iter().chain(lease_ends.map(Timestamp)).min())
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.wake.subscribe()
    }
}

#[async_trait]
impl Members for PgStore {
    async fn member_heartbeat(&self, beat: MemberBeat) -> Result<Vec<Member>> {
        self.write("recording a heartbeat", |tx| Box::pin(members::heartbeat(tx, beat.clone()))).await
    }

    async fn member_leave(&self, id: &str) -> Result<()> {
        self.write("leaving the members", |tx| Box::pin(members::leave(tx, id.to_string()))).await
    }

    async fn member_list(&self) -> Result<Vec<Member>> {
        self.read("listing members", |c, now| Box::pin(members::list(c, now))).await
    }
}

#[async_trait]
impl StatusRead for PgStore {
    async fn status_list(&self, filter: &StatusFilter) -> Result<Vec<KeyStatus>> {
        self.read("reading status", |c, now| {
            let filter = filter.clone();
            Box::pin(async move {
                let mut statuses = rows::status_list(c, now, filter.clone()).await?;
                crate::live::attach_drift(&mut statuses, live::drifts(c, &filter, None).await?);
                Ok(statuses)
            })
        })
        .await
    }

    async fn status_page(
        &self,
        filter: &StatusFilter,
        page: &PageRequest<WorkKey>,
    ) -> Result<Page<KeyStatus, WorkKey>> {
        self.read("reading status", |c, now| {
            let (f, p) = (filter.clone(), page.clone());
            Box::pin(async move { pages::status(c, now, &f, &p).await })
        })
        .await
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        self.read("reading queue stats", |c, now| Box::pin(rows::queue_stats(c, now))).await
    }

    async fn store_ready(&self) -> Result<crate::Schema> {
        const STEP: &str = "checking readiness";
        let found = self.read(STEP, |c, _| Box::pin(rows::schema_version(c))).await?;
        crate::error::schema_ready(
            STEP,
            "postgres",
            usize::try_from(found).unwrap_or(0),
            usize::try_from(schema::latest()).unwrap_or(0),
        )
    }

    async fn status_summary(&self, tenant: &str, syncset: Option<&str>) -> Result<StatusSummary> {
        let (tenant, syncset) = (tenant.to_string(), syncset.map(str::to_string));
        self.read("summing status", move |c, now| {
            let (tenant, syncset) = (tenant.clone(), syncset.clone());
            Box::pin(async move { summary::status_summary(c, &tenant, syncset.as_deref(), now).await })
        })
        .await
    }

    async fn cluster_conditions(&self, tenant: &str, stale_after: Duration) -> Result<ClusterConditions> {
        let tenant = tenant.to_string();
        self.read("counting clusters by condition", move |c, now| {
            let tenant = tenant.clone();
            Box::pin(async move { counts::cluster_conditions(c, &tenant, now.minus(stale_after)).await })
        })
        .await
    }

    async fn cluster_rows(&self, tenant: &str) -> Result<Vec<ClusterRow>> {
        let tenant = tenant.to_string();
        self.read("listing clusters with their counts", move |c, _| {
            let tenant = tenant.clone();
            Box::pin(async move { counts::cluster_rows(c, &tenant).await })
        })
        .await
    }
}

#[async_trait]
impl EventLog for PgStore {
    async fn events_read(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.read("reading events", |c, _| Box::pin(rows::events_read(c, after, limit))).await
    }

    async fn events_of(&self, object: &EventObject, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        let object = object.clone();
        self.read("reading an object's events", move |c, _| {
            let object = object.clone();
            Box::pin(async move { rows::events_of(c, &object, before, limit).await })
        })
        .await
    }

    async fn events_read_of(&self, tenants: &[String], after: u64, limit: usize) -> Result<Vec<Event>> {
        let tenants = tenants.to_vec();
        self.read("reading a tenant's events", move |c, _| {
            let tenants = tenants.clone();
            Box::pin(async move { rows::events_read_of(c, &tenants, after, limit).await })
        })
        .await
    }

    async fn events_newest(&self, tenants: Option<&[String]>, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        let tenants = tenants.map(<[String]>::to_vec);
        self.read("reading the newest events", move |c, _| {
            let tenants = tenants.clone();
            Box::pin(async move { rows::events_newest(c, tenants.as_deref(), before, limit).await })
        })
        .await
    }

    async fn events_head(&self) -> Result<u64> {
        self.read("reading the event log's head", |c, _| Box::pin(rows::events_head(c))).await
    }

    async fn events_trim(&self, keep: EventRetention) -> Result<EventsTrimmed> {
        crate::event::trim_in_chunks(|| {
            self.write("trimming events", move |tx| Box::pin(rows::events_trim_chunk(tx, keep)))
        })
        .await
    }

    async fn consumer_get(&self, name: &str) -> Result<Option<u64>> {
        check_consumer_name(name)?;
        self.read("reading a consumer cursor", |c, _| Box::pin(consumers::get(c, name.to_string()))).await
    }

    async fn consumer_ack(&self, name: &str, seq: u64) -> Result<u64> {
        check_consumer_name(name)?;
        self.write("acknowledging events", |tx| Box::pin(consumers::ack(tx, name.to_string(), seq))).await
    }

    async fn consumer_delete(&self, name: &str) -> Result<()> {
        check_consumer_name(name)?;
        self.write("forgetting a consumer cursor", |tx| Box::pin(consumers::delete(tx, name.to_string()))).await
    }

    fn events_subscribe(&self) -> watch::Receiver<u64> {
        self.inner.events.subscribe()
    }
}

#[async_trait]
impl LiveState for PgStore {
    async fn live_record(&self, tenant: &str, cluster: &str, records: Vec<LiveRecord>) -> Result<LiveRecorded> {
        let records = Arc::new(records);
        self.write("recording live state", |tx| {
            let (records, tenant, cluster) = (records.clone(), tenant.to_string(), cluster.to_string());
            Box::pin(async move { live::record(tx, tenant, cluster, &records).await })
        })
        .await
    }

    async fn live_list(&self, tenant: &str, cluster: &str) -> Result<Vec<LiveResource>> {
        self.read("listing live state", |c, _| Box::pin(live::list(c, tenant.to_string(), cluster.to_string()))).await
    }

    async fn live_page(&self, filter: &LiveFilter, page: &PageRequest<String>) -> Result<Page<LiveResource, String>> {
        self.read("listing live state", |c, _| {
            let (f, p) = (filter.clone(), page.clone());
            Box::pin(async move { pages::live(c, &f, &p).await })
        })
        .await
    }
}

#[async_trait]
impl Rollouts for PgStore {
    async fn revision_get(&self, tenant: &str, syncset: &str, generation: i64) -> Result<Option<SyncSet>> {
        self.read("reading a revision", |c, _| {
            let (tenant, syncset) = (tenant.to_string(), syncset.to_string());
            Box::pin(async move { rollouts::revision_get(c, &tenant, &syncset, generation).await })
        })
        .await
    }

    async fn rollout_get(&self, tenant: &str, syncset: &str) -> Result<Option<RolloutState>> {
        self.read("reading a rollout", |c, _| {
            let (tenant, syncset) = (tenant.to_string(), syncset.to_string());
            Box::pin(async move { rollouts::rollout_get(c, &tenant, &syncset).await })
        })
        .await
    }

    async fn rollout_list(&self, tenant: Option<&str>, phase: Option<RolloutPhase>) -> Result<Vec<RolloutState>> {
        self.read("listing rollouts", |c, _| {
            let tenant = tenant.map(str::to_string);
            Box::pin(async move { rollouts::rollout_list(c, tenant.as_deref(), phase).await })
        })
        .await
    }

    /// Its enqueues wake claimers at commit, in every process (NOTIFY) and in this one,
    /// like an object write's (see `Tx::wake_at`).
    async fn rollout_write(
        &self,
        next: &RolloutState,
        enqueue: &[(String, i64)],
        event: Option<RolloutEvent>,
    ) -> Result<bool> {
        let (next, enqueue, event) = (Arc::new(next.clone()), Arc::new(enqueue.to_vec()), Arc::new(event));
        self.write("writing a rollout", |tx| {
            let (next, enqueue, event) = (next.clone(), enqueue.clone(), event.clone());
            Box::pin(async move { rollout_write::rollout_write(tx, &next, &enqueue, event.as_ref().as_ref()).await })
        })
        .await
    }
}
