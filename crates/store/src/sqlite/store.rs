//! The store's roles for [`SqliteStore`]: each call as a write transaction or a read, by
//! the modules that write its SQL; the write workflows are [`crate::write`]'s, driven on
//! the writer thread over `write.rs`'s operations.

use super::write::run;
use super::{consumers, live, members, objects, pages, queue, rollouts, rows, schema, summary, tokens, SqliteStore};
use crate::page::{ClusterFilter, LiveFilter, ObjectFilter, ObjectKey, Page, PageRequest};
use crate::roles::{EventLog, LiveState, Members, Objects, Rollouts, StatusRead, Tokens, WorkQueue};
use crate::rollout::{RolloutEvent, RolloutState};
use crate::write::{apply, delete, queue as queued, rollout_write};
use crate::{
    check_consumer_name, ApplyOutcome, ClaimParams, ClaimedItem, Commit, CompleteOutcome, Completion, Event,
    EventObject, EventRetention, EventsTrimmed, Fence, LiveRecord, LiveRecorded, LiveResource, Member, MemberBeat,
    OwnWrite, QueueStats, Quotas, RenewParams, Result, StatusFilter,
};
use async_trait::async_trait;
use fleetsync_model::cluster_list::ClusterRow;
use fleetsync_model::{
    Clock, Cluster, ClusterConditions, Document, GitRepository, KeyStatus, Kind, Notifier, OCIRepository, ResourceRef,
    RolloutPhase, Secret, StatusSummary, SyncSet, Timestamp, TokenRecord, WorkKey,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

#[async_trait]
impl Objects for SqliteStore {
    async fn objects_apply_within(
        &self,
        docs: Vec<Document>,
        actor: Option<&str>,
        quotas: &Quotas,
        commit: Commit,
    ) -> Result<Vec<ApplyOutcome>> {
        let (actor, quotas) = (actor.map(str::to_string), quotas.clone());
        let (out, announce) = self
            .write_ending("applying documents", commit, move |tx, now, cfg| {
                run(tx, now, async |w| {
                    apply::apply_within(w, &docs, actor.as_deref(), &quotas, cfg.keys.as_deref()).await
                })
            })
            .await?;
        if commit == Commit::Yes {
            self.announce(announce);
        }
        Ok(out)
    }

    async fn objects_apply_own(&self, docs: Vec<Document>, own: OwnWrite) -> Result<Vec<ApplyOutcome>> {
        let (out, announce) = self
            .write("applying an own write", move |tx, now, cfg| {
                run(tx, now, async |w| apply::apply_own(w, &docs, &own, cfg.keys.as_deref()).await)
            })
            .await?;
        self.announce(announce);
        Ok(out)
    }

    async fn object_delete_by(&self, kind: Kind, tenant: &str, name: &str, actor: Option<&str>) -> Result<()> {
        let (tenant, name, actor) = (tenant.to_string(), name.to_string(), actor.map(str::to_string));
        let ((), announce) = self
            .write("deleting an object", move |tx, now, _| {
                run(tx, now, async |w| delete::delete(w, kind, &tenant, &name, actor.as_deref()).await)
            })
            .await?;
        self.announce(announce);
        Ok(())
    }

    async fn cluster_get(&self, tenant: &str, name: &str) -> Result<Option<Cluster>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.read("reading a cluster", move |c, _| objects::get(c, Kind::Cluster, &tenant, &name, None)).await
    }

    async fn cluster_list(&self, tenant: Option<&str>) -> Result<Vec<Cluster>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing clusters", move |c, _| objects::list(c, Kind::Cluster, tenant.as_deref(), None)).await
    }

    async fn syncset_get(&self, tenant: &str, name: &str) -> Result<Option<SyncSet>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.read("reading a syncset", move |c, _| objects::get(c, Kind::SyncSet, &tenant, &name, None)).await
    }

    async fn syncset_list(&self, tenant: Option<&str>) -> Result<Vec<SyncSet>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing syncsets", move |c, _| objects::list(c, Kind::SyncSet, tenant.as_deref(), None)).await
    }

    async fn secret_get(&self, tenant: &str, name: &str) -> Result<Option<Secret>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        let keys = self.inner.config.keys.clone();
        self.read("reading a secret", move |c, _| objects::get(c, Kind::Secret, &tenant, &name, keys.as_deref())).await
    }

    async fn secret_list(&self, tenant: Option<&str>) -> Result<Vec<Secret>> {
        let tenant = tenant.map(str::to_string);
        let keys = self.inner.config.keys.clone();
        self.read("listing secrets", move |c, _| objects::list(c, Kind::Secret, tenant.as_deref(), keys.as_deref()))
            .await
    }

    async fn git_repository_get(&self, tenant: &str, name: &str) -> Result<Option<GitRepository>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.read("reading a source", move |c, _| objects::get(c, Kind::GitRepository, &tenant, &name, None)).await
    }

    async fn git_repository_list(&self, tenant: Option<&str>) -> Result<Vec<GitRepository>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing sources", move |c, _| objects::list(c, Kind::GitRepository, tenant.as_deref(), None)).await
    }

    async fn oci_repository_get(&self, tenant: &str, name: &str) -> Result<Option<OCIRepository>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.read("reading a source", move |c, _| objects::get(c, Kind::OCIRepository, &tenant, &name, None)).await
    }

    async fn oci_repository_list(&self, tenant: Option<&str>) -> Result<Vec<OCIRepository>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing sources", move |c, _| objects::list(c, Kind::OCIRepository, tenant.as_deref(), None)).await
    }

    async fn notifier_get(&self, tenant: &str, name: &str) -> Result<Option<Notifier>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.read("reading a notifier", move |c, _| objects::get(c, Kind::Notifier, &tenant, &name, None)).await
    }

    async fn notifier_list(&self, tenant: Option<&str>) -> Result<Vec<Notifier>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing notifiers", move |c, _| objects::list(c, Kind::Notifier, tenant.as_deref(), None)).await
    }

    async fn cluster_page(
        &self,
        filter: &ClusterFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Cluster, ObjectKey>> {
        let (filter, page) = (filter.clone(), page.clone());
        self.read("listing clusters", move |c, _| {
            pages::objects(c, Kind::Cluster, filter.tenant.as_deref(), Some(&filter.labels), &page, None)
        })
        .await
    }

    async fn syncset_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<SyncSet, ObjectKey>> {
        let (tenant, page) = (filter.tenant.clone(), page.clone());
        self.read("listing syncsets", move |c, _| {
            pages::objects(c, Kind::SyncSet, tenant.as_deref(), None, &page, None)
        })
        .await
    }

    async fn secret_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Secret, ObjectKey>> {
        let (tenant, page) = (filter.tenant.clone(), page.clone());
        let keys = self.inner.config.keys.clone();
        self.read("listing secrets", move |c, _| {
            pages::objects(c, Kind::Secret, tenant.as_deref(), None, &page, keys.as_deref())
        })
        .await
    }

    async fn git_repository_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<GitRepository, ObjectKey>> {
        let (tenant, page) = (filter.tenant.clone(), page.clone());
        self.read("listing sources", move |c, _| {
            pages::objects(c, Kind::GitRepository, tenant.as_deref(), None, &page, None)
        })
        .await
    }

    async fn notifier_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Notifier, ObjectKey>> {
        let (tenant, page) = (filter.tenant.clone(), page.clone());
        self.read("listing notifiers", move |c, _| {
            pages::objects(c, Kind::Notifier, tenant.as_deref(), None, &page, None)
        })
        .await
    }

    async fn oci_repository_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<OCIRepository, ObjectKey>> {
        let (tenant, page) = (filter.tenant.clone(), page.clone());
        self.read("listing sources", move |c, _| {
            pages::objects(c, Kind::OCIRepository, tenant.as_deref(), None, &page, None)
        })
        .await
    }
}

#[async_trait]
impl WorkQueue for SqliteStore {
    async fn work_claim(&self, params: ClaimParams) -> Result<Vec<ClaimedItem>> {
        self.write("claiming work", move |tx, now, _| queue::claim(tx, now, &params)).await
    }

    async fn lease_renew(&self, params: RenewParams) -> Result<Vec<WorkKey>> {
        self.write("renewing leases", move |tx, now, _| queue::renew(tx, now, &params)).await
    }

    async fn work_complete(&self, completions: Vec<Completion>) -> Result<Vec<CompleteOutcome>> {
        let (out, announce) = self
            .write("completing work", move |tx, now, cfg| queue::complete(tx, now, &cfg.retry, &completions))
            .await?;
        self.announce(announce);
        Ok(out)
    }

    async fn work_inventory_record(&self, key: &WorkKey, fence: Fence, inventory: &[ResourceRef]) -> Result<()> {
        let (key, inventory) = (key.clone(), inventory.to_vec());
        self.write("recording an inventory", move |tx, now, _| {
            run(tx, now, async |w| queued::inventory_record(w, &key, fence, &inventory).await)
        })
        .await?;
        Ok(())
    }

    async fn work_release(&self, key: &WorkKey, fence: Fence) -> Result<()> {
        let key = key.clone();
        self.write("releasing a key", move |tx, now, _| queue::release(tx, now, &key, fence)).await?;
        self.wake();
        Ok(())
    }

    async fn work_retry_by(&self, key: &WorkKey, actor: Option<&str>) -> Result<()> {
        let (key, actor) = (key.clone(), actor.map(str::to_string));
        let ((), announce) = self
            .write("retrying a key", move |tx, now, _| {
                run(tx, now, async |w| queued::retry(w, &key, actor.as_deref()).await)
            })
            .await?;
        self.announce(announce);
        Ok(())
    }

    async fn work_resync(&self) -> Result<u64> {
        let (n, announce) =
            self.write("resyncing", move |tx, now, _| run(tx, now, async |w| queued::resync(w).await)).await?;
        self.announce(announce);
        Ok(n)
    }

    async fn work_next_ready_at(&self, shards: Option<&[u16]>) -> Result<Option<Timestamp>> {
        let shards = queue::shards_json(shards);
        self.read("reading the next ready time", move |c, _| queue::next_ready_at(c, shards.as_deref())).await
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.wake.subscribe()
    }
}

#[async_trait]
impl Members for SqliteStore {
    async fn member_heartbeat(&self, beat: MemberBeat) -> Result<Vec<Member>> {
        self.write("recording a heartbeat", move |tx, now, _| members::heartbeat(tx, now, &beat)).await
    }

    async fn member_leave(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.write("leaving the members", move |tx, _, _| members::leave(tx, &id)).await
    }

    async fn member_list(&self) -> Result<Vec<Member>> {
        self.read("listing members", members::list).await
    }
}

#[async_trait]
impl StatusRead for SqliteStore {
    async fn status_list(&self, filter: &StatusFilter) -> Result<Vec<KeyStatus>> {
        let filter = filter.clone();
        self.read("reading status", move |c, now| {
            let mut statuses = rows::status_list(c, now, &filter)?;
            crate::live::attach_drift(&mut statuses, live::drifts(c, &filter, None)?);
            Ok(statuses)
        })
        .await
    }

    async fn status_page(
        &self,
        filter: &StatusFilter,
        page: &PageRequest<WorkKey>,
    ) -> Result<Page<KeyStatus, WorkKey>> {
        let (filter, page) = (filter.clone(), page.clone());
        self.read("reading status", move |c, now| pages::status(c, now, &filter, &page)).await
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        self.read("reading queue stats", rows::queue_stats).await
    }

    async fn store_ready(&self) -> Result<crate::Schema> {
        const STEP: &str = "checking readiness";
        let found: usize =
            self.read(STEP, |c, _| Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?)).await?;
        crate::error::schema_ready(STEP, "sqlite", found, schema::latest())
    }

    async fn status_summary(&self, tenant: &str, syncset: Option<&str>) -> Result<StatusSummary> {
        let (tenant, syncset) = (tenant.to_string(), syncset.map(str::to_string));
        self.read("summing status", move |c, now| summary::status_summary(c, &tenant, syncset.as_deref(), now)).await
    }

    async fn cluster_conditions(&self, tenant: &str, stale_after: Duration) -> Result<ClusterConditions> {
        let tenant = tenant.to_string();
        self.read("counting clusters by condition", move |c, now| {
            summary::cluster_conditions(c, &tenant, now.minus(stale_after))
        })
        .await
    }

    async fn cluster_rows(&self, tenant: &str) -> Result<Vec<ClusterRow>> {
        let tenant = tenant.to_string();
        self.read("listing clusters with their counts", move |c, _| summary::cluster_rows(c, &tenant)).await
    }
}

#[async_trait]
impl EventLog for SqliteStore {
    async fn events_read(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.read("reading events", move |c, _| rows::events_read(c, after, limit)).await
    }

    async fn events_read_of(&self, tenants: &[String], after: u64, limit: usize) -> Result<Vec<Event>> {
        let tenants = tenants.to_vec();
        self.read("reading a tenant's events", move |c, _| rows::events_read_of(c, &tenants, after, limit)).await
    }

    async fn events_newest(&self, tenants: Option<&[String]>, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        let tenants = tenants.map(<[String]>::to_vec);
        self.read("reading the newest events", move |c, _| rows::events_newest(c, tenants.as_deref(), before, limit))
            .await
    }

    async fn events_head(&self) -> Result<u64> {
        self.read("reading the event log's head", |c, _| rows::events_head(c)).await
    }

    async fn events_of(&self, object: &EventObject, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        let object = object.clone();
        self.read("reading an object's events", move |c, _| rows::events_of(c, &object, before, limit)).await
    }

    async fn events_trim(&self, keep: EventRetention) -> Result<EventsTrimmed> {
        crate::event::trim_in_chunks(|| {
            self.write("trimming events", move |tx, now, _| rows::events_trim_chunk(tx, now, &keep))
        })
        .await
    }

    async fn consumer_get(&self, name: &str) -> Result<Option<u64>> {
        check_consumer_name(name)?;
        let name = name.to_string();
        self.read("reading a consumer cursor", move |c, _| consumers::get(c, &name)).await
    }

    async fn consumer_ack(&self, name: &str, seq: u64) -> Result<u64> {
        check_consumer_name(name)?;
        let name = name.to_string();
        self.write("acknowledging events", move |tx, now, _| consumers::ack(tx, now, &name, seq)).await
    }

    async fn consumer_delete(&self, name: &str) -> Result<()> {
        check_consumer_name(name)?;
        let name = name.to_string();
        self.write("forgetting a consumer cursor", move |tx, _, _| consumers::delete(tx, &name)).await
    }

    fn events_subscribe(&self) -> watch::Receiver<u64> {
        self.inner.events.subscribe()
    }
}

#[async_trait]
impl Tokens for SqliteStore {
    async fn token_create(&self, record: &TokenRecord, hash: &[u8; 32]) -> Result<bool> {
        let (record, hash) = (record.clone(), *hash);
        self.write("storing a token", move |tx, _, _| tokens::create(tx, &record, &hash)).await
    }

    async fn token_find(&self, hash: &[u8; 32]) -> Result<Option<TokenRecord>> {
        let hash = *hash;
        self.read("finding a token", move |c, _| tokens::find(c, &hash)).await
    }

    async fn token_list(&self) -> Result<Vec<TokenRecord>> {
        self.read("listing tokens", |c, _| tokens::list(c)).await
    }

    async fn token_revoke(&self, tenant: Option<&str>, name: &str) -> Result<bool> {
        let (tenant, name) = (tenant.map(str::to_string), name.to_string());
        self.write("revoking a token", move |tx, _, _| tokens::revoke(tx, tenant.as_deref(), &name)).await
    }
}

#[async_trait]
impl LiveState for SqliteStore {
    async fn live_record(&self, tenant: &str, cluster: &str, records: Vec<LiveRecord>) -> Result<LiveRecorded> {
        let (tenant, cluster) = (tenant.to_string(), cluster.to_string());
        let out = self
            .write("recording live state", move |tx, now, _| live::record(tx, now, &tenant, &cluster, &records))
            .await?;
        if !out.requeued.is_empty() {
            self.wake();
        }
        Ok(out)
    }

    async fn live_list(&self, tenant: &str, cluster: &str) -> Result<Vec<LiveResource>> {
        let (tenant, cluster) = (tenant.to_string(), cluster.to_string());
        self.read("listing live state", move |c, _| live::list(c, &tenant, &cluster)).await
    }

    async fn live_page(&self, filter: &LiveFilter, page: &PageRequest<String>) -> Result<Page<LiveResource, String>> {
        let (filter, page) = (filter.clone(), page.clone());
        self.read("listing live state", move |c, _| pages::live(c, &filter, &page)).await
    }
}

#[async_trait]
impl Rollouts for SqliteStore {
    async fn revision_get(&self, tenant: &str, syncset: &str, generation: i64) -> Result<Option<SyncSet>> {
        let (tenant, syncset) = (tenant.to_string(), syncset.to_string());
        self.read("reading a revision", move |c, _| rollouts::revision_get(c, &tenant, &syncset, generation)).await
    }

    async fn rollout_get(&self, tenant: &str, syncset: &str) -> Result<Option<RolloutState>> {
        let (tenant, syncset) = (tenant.to_string(), syncset.to_string());
        self.read("reading a rollout", move |c, _| rollouts::rollout_get(c, &tenant, &syncset)).await
    }

    async fn rollout_list(&self, tenant: Option<&str>, phase: Option<RolloutPhase>) -> Result<Vec<RolloutState>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing rollouts", move |c, _| rollouts::rollout_list(c, tenant.as_deref(), phase)).await
    }

    async fn rollout_write(
        &self,
        next: &RolloutState,
        enqueue: &[(String, i64)],
        event: Option<RolloutEvent>,
    ) -> Result<bool> {
        let (next, enqueue) = (next.clone(), enqueue.to_vec());
        let (written, announce) = self
            .write("writing a rollout", move |tx, now, _| {
                run(tx, now, async |w| rollout_write::rollout_write(w, &next, &enqueue, event.as_ref()).await)
            })
            .await?;
        self.announce(announce);
        Ok(written)
    }
}
