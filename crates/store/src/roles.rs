//! The store's roles: one trait per responsibility, and [`Store`], the union every
//! backend implements.
//!
//! Each caller takes the narrowest role it needs: the lease renewer and the committer a
//! [`WorkQueue`], membership a [`Members`], event consumers an [`EventLog`], the agent
//! routes [`Objects`] and [`LiveState`]. A `Arc<dyn Store>` converts to any of them
//! (`let q: Arc<dyn WorkQueue> = store;`), and every method of every role can be called
//! on a `dyn Store` without importing the role.
//!
//! Every method keeps the guarantees of docs/concepts.md, `#guarantee-coalescing` through
//! `#guarantee-promptness`. Method names read `noun_verb` and take plain params structs,
//! after River's driver interface.

use crate::page::{ClusterFilter, LiveFilter, ObjectFilter, ObjectKey, Page, PageRequest};
use crate::rollout::{RolloutEvent, RolloutState};
use crate::{
    ApplyOutcome, ArtifactStored, ClaimParams, ClaimedItem, Commit, CompleteOutcome, Completion, Event, EventObject,
    EventRetention, EventsTrimmed, Fence, LiveRecord, LiveRecorded, LiveResource, Member, MemberBeat, OwnWrite,
    QueueStats, Quotas, RenewParams, Result, SourceFetched, SourceStored, StatusFilter,
};
use async_trait::async_trait;
use fleetsync_model::{
    Artifact, Clock, Cluster, ClusterConditions, Document, GitRepository, KeyStatus, Kind, Notifier, OCIRepository,
    ResourceRef, RolloutPhase, Secret, Source, StatusSummary, SyncSet, Timestamp, TokenRecord, WorkKey,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Clusters, SyncSets and Secrets: written all or nothing, each change enqueuing the keys
/// it affects.
#[async_trait]
pub trait Objects: Send + Sync + 'static {
    /// Applies documents in one transaction: all or nothing. A document whose content
    /// is unchanged keeps its generation (idempotent apply); a changed one gets the next
    /// generation, is appended to the event log with `actor` (who made the change), and
    /// enqueues every key it affects.
    ///
    /// Nothing is written if the result would exceed a tenant's limit in `quotas`
    /// ([`StoreError::QuotaExceeded`](crate::StoreError::QuotaExceeded); see
    /// [`crate::quota`]).
    ///
    /// With [`Commit::No`] (a dry run) all of it runs in the transaction, which is then
    /// rolled back: the outcomes (and refusals) are those the same apply would have now,
    /// and nothing is written, logged, enqueued or announced.
    async fn objects_apply_within(
        &self,
        docs: Vec<Document>,
        actor: Option<&str>,
        quotas: &Quotas,
        commit: Commit,
    ) -> Result<Vec<ApplyOutcome>>;

    /// [`objects_apply_within`](Objects::objects_apply_within) with no quotas, committed.
    async fn objects_apply_by(&self, docs: Vec<Document>, actor: Option<&str>) -> Result<Vec<ApplyOutcome>> {
        self.objects_apply_within(docs, actor, Quotas::NONE, Commit::Yes).await
    }

    /// [`objects_apply_by`](Objects::objects_apply_by) with no actor (a change made
    /// inside the hub).
    async fn objects_apply(&self, docs: Vec<Document>) -> Result<Vec<ApplyOutcome>> {
        self.objects_apply_by(docs, None).await
    }

    /// [`objects_apply`](Objects::objects_apply) by a reconciler that holds `own.key`
    /// with token `own.fence` (docs/concepts.md, `#guarantee-events-and-states`: a
    /// reconciler's own writes do not re-trigger it). The write is logged and enqueues every *other* key it affects as
    /// usual, but does not make `own.key` dirty, so the reconciler does not run again
    /// because of its own write. (A write that changes whether `own.key` is wanted at
    /// all — its SyncSet no longer selects the cluster — is a real change for it and
    /// makes it dirty as usual.) [`StoreError::LeaseLost`](crate::StoreError::LeaseLost)
    /// and nothing written if the token is not the key's current one.
    async fn objects_apply_own(&self, docs: Vec<Document>, own: OwnWrite) -> Result<Vec<ApplyOutcome>>;

    /// Deletes a Cluster (its keys go with it) or a SyncSet (its keys are enqueued for
    /// removal, so Sync mode deletes what it applied); the event names `actor`.
    /// `NotFound` if absent.
    async fn object_delete_by(&self, kind: Kind, tenant: &str, name: &str, actor: Option<&str>) -> Result<()>;

    /// [`object_delete_by`](Objects::object_delete_by) with no actor.
    async fn object_delete(&self, kind: Kind, tenant: &str, name: &str) -> Result<()> {
        self.object_delete_by(kind, tenant, name, None).await
    }

    async fn cluster_get(&self, tenant: &str, name: &str) -> Result<Option<Cluster>>;
    async fn cluster_list(&self, tenant: Option<&str>) -> Result<Vec<Cluster>>;
    async fn syncset_get(&self, tenant: &str, name: &str) -> Result<Option<SyncSet>>;
    async fn syncset_list(&self, tenant: Option<&str>) -> Result<Vec<SyncSet>>;
    /// A Secret with its values: for appliers only. Show [`Secret::redacted`].
    async fn secret_get(&self, tenant: &str, name: &str) -> Result<Option<Secret>>;
    /// Every Secret (of one tenant), values included: show [`Secret::redacted`].
    async fn secret_list(&self, tenant: Option<&str>) -> Result<Vec<Secret>>;
    /// A GitRepository, with its status (the revision its SyncSets read).
    async fn git_repository_get(&self, tenant: &str, name: &str) -> Result<Option<GitRepository>>;
    /// Every GitRepository (of one tenant).
    async fn git_repository_list(&self, tenant: Option<&str>) -> Result<Vec<GitRepository>>;
    /// An OCIRepository, with its status (the digest its SyncSets read).
    async fn oci_repository_get(&self, tenant: &str, name: &str) -> Result<Option<OCIRepository>>;
    /// Every OCIRepository (of one tenant).
    async fn oci_repository_list(&self, tenant: Option<&str>) -> Result<Vec<OCIRepository>>;
    /// A Notifier, as stored (show [`Notifier::redacted`]).
    async fn notifier_get(&self, tenant: &str, name: &str) -> Result<Option<Notifier>>;
    /// Every Notifier (of one tenant), as stored (show [`Notifier::redacted`]).
    async fn notifier_list(&self, tenant: Option<&str>) -> Result<Vec<Notifier>>;
    /// The source `tenant/name`, of whichever kind it is (sources of both kinds share
    /// one name space in a tenant).
    async fn source_get(&self, tenant: &str, name: &str) -> Result<Option<Source>> {
        if let Some(g) = self.git_repository_get(tenant, name).await? {
            return Ok(Some(Source::Git(g)));
        }
        Ok(self.oci_repository_get(tenant, name).await?.map(Source::Oci))
    }

    /// One page of Clusters in `(tenant, name)` order, those whose labels the filter
    /// selects (see [`crate::page`]: a page may end early, after the rows it examined).
    async fn cluster_page(
        &self,
        filter: &ClusterFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Cluster, ObjectKey>>;
    /// One page of SyncSets in `(tenant, name)` order.
    async fn syncset_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<SyncSet, ObjectKey>>;
    /// One page of Secrets in `(tenant, name)` order, values included: show
    /// [`Secret::redacted`].
    async fn secret_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Secret, ObjectKey>>;
    /// One page of GitRepositories in `(tenant, name)` order.
    async fn git_repository_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<GitRepository, ObjectKey>>;
    /// One page of OCIRepositories in `(tenant, name)` order.
    async fn oci_repository_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<OCIRepository, ObjectKey>>;
    /// One page of Notifiers in `(tenant, name)` order, as stored.
    async fn notifier_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Notifier, ObjectKey>>;
}

/// The coalescing keyed work queue: claims with leases and fencing tokens, renewals,
/// completions, and the wake-ups and clock its workers share.
#[async_trait]
pub trait WorkQueue: Send + Sync + 'static {
    /// Claims up to `limit` keys that are ready (or whose lease expired), each with a
    /// new lease and a fencing token greater than any issued before.
    async fn work_claim(&self, params: ClaimParams) -> Result<Vec<ClaimedItem>>;

    /// Extends the leases still held with these tokens; returns the keys whose lease
    /// was lost (taken over, deleted, or released).
    async fn lease_renew(&self, params: RenewParams) -> Result<Vec<WorkKey>>;

    /// Commits results in one transaction. Each item's result is written and its key
    /// released together, or (stale token) refused; the outcomes follow input order.
    /// If the backend cannot hold a value of one of them, nothing is written and the
    /// call fails with [`StoreError::Refused`](crate::StoreError::Refused).
    async fn work_complete(&self, completions: Vec<Completion>) -> Result<Vec<CompleteOutcome>>;

    /// Records, before a run applies anything, the inventory of a key it holds with
    /// token `fence`: everything the target may hold because of this key — what earlier
    /// runs left there and what this run is about to apply. A run that then fails, is
    /// cancelled or dies leaves it recorded, so Sync-mode deletion and removal find
    /// everything any run may have applied. A successful run's completion replaces it
    /// with exactly what that run applied.
    /// [`StoreError::LeaseLost`](crate::StoreError::LeaseLost) and nothing written if
    /// the token is not the key's current one.
    async fn work_inventory_record(&self, key: &WorkKey, fence: Fence, inventory: &[ResourceRef]) -> Result<()>;

    /// Gives a key back unfinished (graceful shutdown): it is ready at once and the
    /// attempt does not count. Ignored for a stale token.
    async fn work_release(&self, key: &WorkKey, fence: Fence) -> Result<()>;

    /// Runs a key again now, whatever its phase (explicit retry of a parked key), and
    /// logs it in the same transaction: a `Status` event `Retry` of the key naming
    /// `actor` (who asked). `NotFound`, and nothing logged, for an unknown key.
    async fn work_retry_by(&self, key: &WorkKey, actor: Option<&str>) -> Result<()>;

    /// [`work_retry_by`](WorkQueue::work_retry_by) with no actor.
    async fn work_retry(&self, key: &WorkKey) -> Result<()> {
        self.work_retry_by(key, None).await
    }

    /// Enqueues every key that is not already pending or running; returns how many.
    async fn work_resync(&self) -> Result<u64>;

    /// When the earliest scheduled (backed-off) key or expiring lease of these shards
    /// (`None`: all) becomes claimable, if any.
    async fn work_next_ready_at(&self, shards: Option<&[u16]>) -> Result<Option<Timestamp>>;

    /// The clock this store stamps and compares times with (leases, member TTLs, due
    /// times): [`StoreConfig::clock`](crate::StoreConfig::clock) if given, else the
    /// store's own. Whatever else compares times with the store's (a worker's runtime)
    /// reads this one.
    fn clock(&self) -> Arc<dyn Clock>;

    /// A receiver that changes whenever work may have become claimable: through this
    /// store, or (PostgreSQL, via LISTEN/NOTIFY) through any process on the same schema.
    /// Workers wait on it instead of polling; a slow poll stays as a safety net.
    fn subscribe(&self) -> watch::Receiver<u64>;
}

/// The worker processes sharing a store, and so its shards.
#[async_trait]
pub trait Members: Send + Sync + 'static {
    /// Records that a worker process is alive until `now + ttl`, forgets members whose
    /// time ran out, and returns the live members, by id.
    async fn member_heartbeat(&self, beat: MemberBeat) -> Result<Vec<Member>>;
    /// A worker process leaving gracefully: its shards move at once.
    async fn member_leave(&self, id: &str) -> Result<()>;
    /// The live members, by id.
    async fn member_list(&self) -> Result<Vec<Member>>;
}

/// What the keys' status is, for people and metrics.
#[async_trait]
pub trait StatusRead: Send + Sync + 'static {
    /// One key's status (a [`status_list`](StatusRead::status_list) narrowed to the key).
    async fn status_get(&self, key: &WorkKey) -> Result<Option<KeyStatus>> {
        let filter = StatusFilter {
            tenant: Some(key.tenant.clone()),
            cluster: Some(key.cluster.clone()),
            syncset: Some(key.syncset.clone()),
            ..StatusFilter::default()
        };
        Ok(self.status_list(&filter).await?.into_iter().next())
    }
    /// Statuses with each key's drift (see [`LiveState::live_record`]).
    async fn status_list(&self, filter: &StatusFilter) -> Result<Vec<KeyStatus>>;
    /// One page of [`status_list`](StatusRead::status_list), in `(tenant, cluster,
    /// syncset)` order; every filter is evaluated in SQL.
    async fn status_page(&self, filter: &StatusFilter, page: &PageRequest<WorkKey>)
        -> Result<Page<KeyStatus, WorkKey>>;
    async fn queue_stats(&self) -> Result<QueueStats>;
    /// Whether the store answers and holds the schema this build keeps (readiness), at a
    /// cost that does not grow with the fleet: one small read, never a scan of the keys.
    /// A schema behind this build's is a transient [`StoreError::Backend`](crate::StoreError::Backend)
    /// (a `fleetsync migrate` fixes it). A ready store tells which schema it holds.
    async fn store_ready(&self) -> Result<crate::Schema>;
    /// The summary of one SyncSet's keys on every cluster, or with no SyncSet named of
    /// every key of the tenant (see [`crate::summary`]): counts by phase and generation
    /// kept by the store (no key is read), the longest wait, and the first
    /// [`SUMMARY_FAILURES`](crate::summary::SUMMARY_FAILURES) failures by SyncSet and
    /// cluster. An unknown SyncSet or tenant sums to zero.
    async fn status_summary(&self, tenant: &str, syncset: Option<&str>) -> Result<StatusSummary>;
    /// The tenant's clusters that have keys, counted by condition from counts the store
    /// keeps per cluster in the transactions that change keys: one row per cluster is
    /// read, never a key. A cluster is stale when its newest successful run and its
    /// agent's newest report (or, lacking both, its first key) are older than
    /// `stale_after` before the store's now.
    async fn cluster_conditions(&self, tenant: &str, stale_after: Duration) -> Result<ClusterConditions>;
    /// Every Cluster of the tenant by name, each with its labels and the counts the
    /// store keeps of its keys (one row per cluster, no key or document read): what the
    /// clusters list and the heat map of [`fleetsync_model::cluster_list`] are made of.
    async fn cluster_rows(&self, tenant: &str) -> Result<Vec<fleetsync_model::cluster_list::ClusterRow>>;
}

/// The event log of every change, its retention, and its named consumers' cursors.
#[async_trait]
pub trait EventLog: Send + Sync + 'static {
    /// Events with a sequence number greater than `after`, oldest first, at most
    /// `limit`. [`StoreError::CursorExpired`](crate::StoreError::CursorExpired) if
    /// `after` is older than the log's horizon (some of those events were trimmed): the
    /// reader then knows to re-list instead of silently missing events. `after` equal
    /// to the horizon is fine.
    async fn events_read(&self, after: u64, limit: usize) -> Result<Vec<Event>>;

    /// The same for the events of `tenants` only: read per tenant (an index by tenant),
    /// so it costs the page, however many events other tenants have. The cursor is
    /// checked against those tenants' horizon (retention is per tenant), not the log's.
    async fn events_read_of(&self, tenants: &[String], after: u64, limit: usize) -> Result<Vec<Event>>;

    /// Up to `limit` of the newest events with a sequence number below `before` (none:
    /// the newest), newest first, of `tenants` (none: every tenant's). Costs the page.
    async fn events_newest(&self, tenants: Option<&[String]>, before: Option<u64>, limit: usize) -> Result<Vec<Event>>;

    /// The newest event's sequence number; the horizon if a trim left no event; 0 for a
    /// log that never had one.
    async fn events_head(&self) -> Result<u64>;

    /// Up to `limit` of one object's newest events with a sequence number below
    /// `before` (none: the newest), newest first. Served by an index on the object, so
    /// it costs the page, not the log. Trimmed events are simply gone.
    async fn events_of(&self, object: &EventObject, before: Option<u64>, limit: usize) -> Result<Vec<Event>>;

    /// Applies retention to each tenant's events on its own: deletes a tenant's oldest
    /// events beyond `keep` and raises its horizon and the whole log's (durably, in the
    /// same transaction) to the last deleted sequence number.
    /// The horizon is recorded, never inferred from the oldest event left, so a cursor
    /// that fell off the log is recognised even where sequence numbers have gaps or the
    /// log is empty. Deletes in chunks of bounded size; safe to run from several
    /// processes at once.
    async fn events_trim(&self, keep: EventRetention) -> Result<EventsTrimmed>;

    /// The cursor of the named event consumer: the last event sequence number it
    /// acknowledged, or `None` if it never did (it starts at 0).
    /// [`StoreError::InvalidConsumerName`](crate::StoreError::InvalidConsumerName) for a
    /// name [`check_consumer_name`](crate::check_consumer_name) refuses.
    async fn consumer_get(&self, name: &str) -> Result<Option<u64>>;

    /// Moves the named consumer's cursor forward to `seq`, durably; an acknowledgement
    /// never moves it back (an older `seq` leaves it where it is). Returns the cursor.
    async fn consumer_ack(&self, name: &str, seq: u64) -> Result<u64>;

    /// Forgets the named consumer's cursor (a consumer of that name starts again as one
    /// that never acknowledged). Nothing happens if there is none.
    async fn consumer_delete(&self, name: &str) -> Result<()>;

    /// A receiver that changes after every commit that appended events: object writes
    /// and deletes, and completions (status transitions); on PostgreSQL also commits by
    /// other processes on the same schema (LISTEN/NOTIFY). Event watchers wait on it.
    /// Separate from [`WorkQueue::subscribe`] so that status writes, which make no work
    /// claimable, do not wake claimers.
    fn events_subscribe(&self) -> watch::Receiver<u64>;
}

/// What agents report the targets hold.
#[async_trait]
pub trait LiveState: Send + Sync + 'static {
    /// Persists live state reported by the agent of `tenant/cluster`, in one
    /// transaction: each record is stored as its resource's latest state unless its
    /// `resourceVersion` is the one already stored (a resend: acknowledged, not stored
    /// or acted on twice) or older. Each stored record that drifted enqueues its key
    /// again (coalesced like any change), so the key re-applies what drifted.
    async fn live_record(&self, tenant: &str, cluster: &str, records: Vec<LiveRecord>) -> Result<LiveRecorded>;

    /// The latest live state stored for each resource of a cluster, by resource.
    async fn live_list(&self, tenant: &str, cluster: &str) -> Result<Vec<LiveResource>>;

    /// One page of [`live_list`](LiveState::live_list), in the order of the resources'
    /// stored identities (the key: an opaque string).
    async fn live_page(&self, filter: &LiveFilter, page: &PageRequest<String>) -> Result<Page<LiveResource, String>>;
}

/// The hub-issued bearer tokens: their records, found by the SHA-256 of the token (the
/// token itself is never stored).
#[async_trait]
pub trait Tokens: Send + Sync + 'static {
    /// Stores a new token's record under the SHA-256 of the token. `Ok(false)` and
    /// nothing written if the name is taken: a token's name is unique in its tenant
    /// (the tenant of its grant), and the name of a hub-wide token (`fleet-admin`, no
    /// tenant) is unique in the whole store (no tenant's token may take it, and it may
    /// take no name a tenant's token has), so that a tenant and a name always find one
    /// token.
    async fn token_create(&self, record: &TokenRecord, hash: &[u8; 32]) -> Result<bool>;
    /// The record of the token whose SHA-256 is `hash`, expired or not (the caller judges
    /// expiry with its clock): one lookup by primary key, whatever the number of tokens.
    async fn token_find(&self, hash: &[u8; 32]) -> Result<Option<TokenRecord>>;
    /// Every token's record, by name (and tenant, hub-wide first).
    async fn token_list(&self) -> Result<Vec<TokenRecord>>;
    /// Deletes the token named `name` of `tenant` (`None`: the hub-wide one); `Ok(false)`
    /// if there is none.
    async fn token_revoke(&self, tenant: Option<&str>, name: &str) -> Result<bool>;
}

/// Revisions of SyncSets and their rollouts ([`crate::rollout`]).
#[async_trait]
pub trait Rollouts: Send + Sync + 'static {
    /// The SyncSet as it was at `generation`, if that revision is kept: for as long as a
    /// key runs it or a rollout may return to it, and the last few besides.
    async fn revision_get(&self, tenant: &str, syncset: &str, generation: i64) -> Result<Option<SyncSet>>;

    /// The SyncSet's rollout, if its spec has one.
    async fn rollout_get(&self, tenant: &str, syncset: &str) -> Result<Option<RolloutState>>;

    /// Rollouts in `phase` (any: `None`), of one tenant or all, by tenant and name.
    async fn rollout_list(&self, tenant: Option<&str>, phase: Option<RolloutPhase>) -> Result<Vec<RolloutState>>;

    /// Writes `next` if the stored rollout is still the one it was decided from (the
    /// same revision, and `next.version` one more than the stored one): a
    /// compare-and-set, so that of several processes deciding the same step only one
    /// writes it; a move to `Completed` also needs every wanted key told the revision.
    /// In the same transaction, runs each `(cluster, generation)` key still
    /// wanted at that generation, and appends `event` (kind `Rollout`, named after the
    /// SyncSet, at the revision) to the event log. `false`: the rollout moved on;
    /// nothing was written.
    async fn rollout_write(
        &self,
        next: &RolloutState,
        enqueue: &[(String, i64)],
        event: Option<RolloutEvent>,
    ) -> Result<bool>;
}

/// Artifacts of sources: the files of each revision a source was fetched at, each
/// content kept once per tenant however many revisions and files hold it.
#[async_trait]
pub trait Artifacts: Send + Sync + 'static {
    /// Stores `artifact` as revision `artifact.revision` of `source` (its kind and name,
    /// e.g. `GitRepository/fleet`) in `tenant`, all or nothing; says what was new. A
    /// revision stored before is left as it is.
    async fn artifact_put(&self, tenant: &str, source: &str, artifact: &Artifact) -> Result<ArtifactStored>;
    /// The files of `source`'s `revision`, if stored.
    async fn artifact_get(&self, tenant: &str, source: &str, revision: &str) -> Result<Option<Artifact>>;

    /// The first step of a fetch of the source `tenant/name` by the holder of its key
    /// (`own`), in one transaction: stores `artifact` as its revision (its status says
    /// so from then on) once every SyncSet that reads it holds manifests at that
    /// revision that pass the rules. Refused with nothing written if the source is gone
    /// (`NotFound`), a SyncSet's manifests at the revision break a rule
    /// (`SourceInvalid`: the source keeps its last good revision), or the lease is
    /// lost (`LeaseLost`). Use [`Artifacts::source_fetched`], which goes on.
    async fn source_stored(&self, tenant: &str, name: &str, artifact: &Artifact, own: OwnWrite)
        -> Result<SourceStored>;

    /// Applies again the first SyncSet (in name order) that reads the source but not at
    /// its revision, in one transaction: it takes the revision as a new generation
    /// (staged by its rollout like any change). `None` when none is behind. Refused if
    /// the lease is lost.
    async fn source_catch_up_one(&self, tenant: &str, name: &str, own: OwnWrite) -> Result<Option<ApplyOutcome>>;

    /// A fetch: [`Artifacts::source_stored`], then every SyncSet that reads the source
    /// takes the revision, one transaction each, so that the first of them is claimable
    /// at once however many follow. A fetcher that dies in between leaves the rest to
    /// the next run of the source's key ([`Artifacts::source_catch_up`]).
    async fn source_fetched(
        &self,
        tenant: &str,
        name: &str,
        artifact: &Artifact,
        own: OwnWrite,
    ) -> Result<SourceFetched> {
        let stored = self.source_stored(tenant, name, artifact, own.clone()).await?;
        let syncsets = self.source_catch_up(tenant, name, own).await?;
        Ok(SourceFetched { artifact: stored.artifact, syncsets })
    }

    /// Applies every SyncSet that reads the source but not at its revision (one
    /// transaction each), as a run of its key that finds the remote unchanged does.
    async fn source_catch_up(&self, tenant: &str, name: &str, own: OwnWrite) -> Result<Vec<ApplyOutcome>> {
        let mut outcomes: Vec<ApplyOutcome> = Vec::new();
        while let Some(outcome) = self.source_catch_up_one(tenant, name, own.clone()).await? {
            if outcomes.last().is_some_and(|last| last.name == outcome.name) {
                let message = format!("SyncSet {tenant}/{} does not take the revision of its source", outcome.name);
                return Err(crate::StoreError::Corrupt { table: "syncsets", message });
            }
            outcomes.push(outcome);
        }
        Ok(outcomes)
    }
}

/// Every role: what a backend implements and what a hub that serves them all holds.
pub trait Store:
    Objects + WorkQueue + Members + StatusRead + EventLog + LiveState + Tokens + Rollouts + Artifacts
{
}

impl<T: Objects + WorkQueue + Members + StatusRead + EventLog + LiveState + Tokens + Rollouts + Artifacts> Store for T {}
