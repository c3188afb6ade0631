//! The store's write workflows, written once for every backend.
//!
//! Below: [`WriteTx`], a narrow set of backend-neutral storage operations on one write
//! transaction (`noun_verb`, params structs where there are more than a few arguments),
//! which each backend implements as SQL and row mapping only. Above: the workflows,
//! one file each, which decide nothing themselves either: they read the facts a rule
//! needs through the operations, ask the pure rule ([`crate::plan`],
//! [`crate::revision`], [`crate::lifecycle`], [`crate::quota`]) and write what it
//! decided.
//!
//! - [`apply`]: applying documents (within quotas, or as a reconciler's own write);
//! - [`delete`]: deleting an object;
//! - [`rollout_write`]: a rollout's compare-and-set step;
//! - [`queue`]: an explicit retry, a resync, recording a run's inventory;
//! - [`live`]: recording the live state an agent reports;
//! - [`complete`]: what a completion writes (carried out by each backend's batched SQL,
//!   so that a completion stays one round trip where it is one);
//! - [`artifact`]: a source's artifact, each content once per tenant;
//! - [`source`]: a GitRepository written, a SyncSet's resources read from its source,
//!   and a fetched revision stored and taken up by the SyncSets that read it;
//! - [`transitions`]: what an enqueue, a claim, a release, a take-back and a resync do
//!   to a key's row, as the SQL both backends build their set-based statements from.
//!
//! What differs by backend stays behind the trait as an operation, not a rule: how a
//! tenant's writes are serialized ([`WriteTx::tenant_lock`]: an advisory lock on
//! PostgreSQL, nothing on SQLite, which has one writer), how events are appended
//! ([`WriteTx::event_append`]: at commit in commit order on PostgreSQL, at once on
//! SQLite), how wake-ups are recorded ([`WriteTx::work_announce`]) and how a cluster's
//! reports are serialized ([`WriteTx::live_lock`], like `tenant_lock`).
//!
//! PostgreSQL awaits a workflow on its transaction; SQLite's operations never suspend,
//! and its writer thread drives the same workflow to completion with [`drive`].

pub(crate) mod apply;
pub(crate) mod artifact;
pub(crate) mod complete;
pub(crate) mod delete;
mod dependency;
pub(crate) mod live;
mod notifier;
pub(crate) mod queue;
pub(crate) mod rollout_write;
pub(crate) mod source;
pub(crate) mod transitions;

use crate::plan::{Announce, Planned, SyncSetFacts};
use crate::quota::{Quota, Usage};
use crate::revision::{RevisionsDrop, Split};
use crate::rollout::RolloutState;
use crate::{Fence, StoreError};
use fleetsync_model::{ApplyMode, Artifact, Cluster, Kind, LiveState, Timestamp, WorkKey};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::task::{Context, Poll, Waker};

/// One write transaction's storage operations. Each is SQL and row mapping only; the
/// rules live above them (see the module docs).
#[allow(async_fn_in_trait)] // crate-private: each backend's workflows are awaited on its own transaction type
pub(crate) trait WriteTx {
    /// The backend's error; a store's own answers ([`StoreError`]) convert into it.
    type Error: From<StoreError>;

    /// The time of this transaction, stamped on everything it writes.
    fn now(&self) -> Timestamp;

    /// Serializes this transaction's writes of `tenant`'s objects, revisions and rollouts
    /// with every other writer's until commit (nothing where there is one writer).
    async fn tenant_lock(&mut self, tenant: &str) -> Result<(), Self::Error>;

    /// Appends an event to the log (on commit, or at once: the log's order is commit
    /// order either way).
    async fn event_append(&mut self, event: NewEvent<'_>) -> Result<(), Self::Error>;

    /// Records what the commit is to tell waiters about work ([`Announce::work_at`]);
    /// events announce themselves when appended.
    fn work_announce(&mut self, announce: Announce);

    /// An object's stored row: its generation and stored document (a Secret's sealed).
    async fn object_stored(&mut self, kind: Kind, tenant: &str, name: &str) -> Result<Option<Stored>, Self::Error>;

    /// Writes a Cluster's row (inserted or replaced).
    async fn cluster_put(&mut self, row: ClusterRow<'_>) -> Result<(), Self::Error>;

    /// Writes a SyncSet's row (inserted or replaced).
    async fn syncset_put(&mut self, row: SyncSetRow<'_>) -> Result<(), Self::Error>;

    /// Writes the row of a Secret (its document as given: sealed) or a GitRepository,
    /// inserted or replaced: the kinds stored as their document alone.
    async fn doc_put(&mut self, kind: Kind, row: DocRow<'_>) -> Result<(), Self::Error>;

    /// The stored SyncSets of `tenant` that read their resources from `source`
    /// ([`source_id`](crate::stored::source_id)), in name order.
    async fn syncsets_reading(&mut self, tenant: &str, source: &str) -> Result<Vec<Stored>, Self::Error>;

    /// Deletes an object's row; its generation, or `None` if there was none.
    async fn object_delete(&mut self, kind: Kind, tenant: &str, name: &str) -> Result<Option<i64>, Self::Error>;

    /// The tenant's Clusters.
    async fn cluster_list(&mut self, tenant: &str) -> Result<Vec<Cluster>, Self::Error>;

    /// What `tenant` holds of what `quota` limits (the rest left 0).
    async fn tenant_usage(&mut self, tenant: &str, quota: &Quota) -> Result<Usage, Self::Error>;

    /// What planning a changed cluster reads: the SyncSets its wanted keys are of, and
    /// every SyncSet of the tenant with its rollout's facts.
    async fn cluster_planning(&mut self, tenant: &str, cluster: &str) -> Result<ClusterPlanning, Self::Error>;

    /// What planning a changed SyncSet reads: the clusters its wanted keys are on, and
    /// every cluster of the tenant with its labels.
    async fn syncset_planning(&mut self, tenant: &str, syncset: &str) -> Result<SyncSetPlanning, Self::Error>;

    /// The clusters the SyncSet has a key on, wanted or not.
    async fn work_clusters_of(&mut self, tenant: &str, syncset: &str) -> Result<Vec<String>, Self::Error>;

    /// Among `clusters`, those the SyncSet has a wanted key on.
    async fn work_wanted_among(
        &mut self,
        tenant: &str,
        syncset: &str,
        clusters: &[&str],
    ) -> Result<HashSet<String>, Self::Error>;

    /// The generations the SyncSet's wanted keys are told to run.
    async fn work_wanted_generations(&mut self, tenant: &str, syncset: &str) -> Result<BTreeSet<i64>, Self::Error>;

    /// Enqueues each planned key as [`crate::lifecycle`] says (coalesced, a running key
    /// made dirty unless [`Planned::dirties`] is false); returns how many.
    async fn work_enqueue(&mut self, plan: &[Planned]) -> Result<u64, Self::Error>;

    /// Drops a cluster's keys and its live state.
    async fn cluster_keys_drop(&mut self, tenant: &str, cluster: &str) -> Result<(), Self::Error>;

    /// Whether `key` is running with token `fence`; the row stays locked until commit
    /// where rows lock.
    async fn work_lease_held(&mut self, key: &WorkKey, fence: Fence) -> Result<bool, Self::Error>;

    /// Makes a key run again now as it is (an enqueue that changes only its schedule);
    /// the generation it runs, or `None` for an unknown key.
    async fn work_again(&mut self, key: &WorkKey) -> Result<Option<i64>, Self::Error>;

    /// Makes every idle or parked key ready now; returns how many.
    async fn work_resync_all(&mut self) -> Result<u64, Self::Error>;

    /// Sets the inventory (JSON) of `key` if it is running with token `fence`; whether it was.
    async fn work_inventory_set(&mut self, key: &WorkKey, fence: Fence, inventory: &str) -> Result<bool, Self::Error>;

    /// Whether revision `generation` of the SyncSet is stored.
    async fn revision_kept(&mut self, tenant: &str, syncset: &str, generation: i64) -> Result<bool, Self::Error>;

    /// Stores a revision unless it is stored already (its parts counted once more for
    /// each time it holds them).
    async fn revision_put(&mut self, row: RevisionRow<'_>) -> Result<(), Self::Error>;

    /// The apply modes of the SyncSet's stored revisions among `generations`.
    async fn revision_modes(
        &mut self,
        tenant: &str,
        syncset: &str,
        generations: &[i64],
    ) -> Result<HashMap<i64, ApplyMode>, Self::Error>;

    /// Deletes the SyncSet's revisions `drop` names, releasing their parts (and deleting
    /// the parts no revision holds any more).
    async fn revisions_drop(&mut self, tenant: &str, syncset: &str, drop: &RevisionsDrop) -> Result<(), Self::Error>;

    /// The SyncSet's rollout row.
    async fn rollout_get(&mut self, tenant: &str, syncset: &str) -> Result<Option<RolloutState>, Self::Error>;

    /// Writes a rollout row (inserted or replaced).
    async fn rollout_put(&mut self, state: &RolloutState) -> Result<(), Self::Error>;

    /// Deletes the SyncSet's rollout row, if any.
    async fn rollout_delete(&mut self, tenant: &str, syncset: &str) -> Result<(), Self::Error>;

    /// Serializes this transaction's recording of `tenant/cluster`'s live state with
    /// every other writer's until commit (nothing where there is one writer).
    async fn live_lock(&mut self, tenant: &str, cluster: &str) -> Result<(), Self::Error>;

    /// Marks the cluster seen now (a report is a sign of life; see
    /// `crate::summary::cluster_conditions_sql`).
    async fn cluster_seen_set(&mut self, tenant: &str, cluster: &str) -> Result<(), Self::Error>;

    /// The stored `resourceVersion` of each of `resources` (stored identities) the
    /// cluster's live state holds.
    async fn live_versions(
        &mut self,
        tenant: &str,
        cluster: &str,
        resources: &[String],
    ) -> Result<HashMap<String, String>, Self::Error>;

    /// Writes the cluster's live rows (inserted, or replaced with their version counts
    /// grown by [`LiveRow::versions`]).
    async fn live_put(&mut self, tenant: &str, cluster: &str, rows: &[LiveRow<'_>]) -> Result<(), Self::Error>;

    /// Keeps `content` as the tenant's content `digest`, unless it is kept already;
    /// whether it was new.
    async fn content_put(&mut self, tenant: &str, digest: &str, content: &[u8]) -> Result<bool, Self::Error>;

    /// `source`'s `revision`, if it is stored.
    async fn artifact_get(
        &mut self,
        tenant: &str,
        source: &str,
        revision: &str,
    ) -> Result<Option<Artifact>, Self::Error>;

    /// Records `source`'s `revision` as the list of its files (JSON `[[path, digest]]`),
    /// unless recorded already; whether it was new.
    async fn artifact_insert(
        &mut self,
        tenant: &str,
        source: &str,
        revision: &str,
        files: &str,
    ) -> Result<bool, Self::Error>;
}

/// One entry of the event log, as a writer appends it (the log numbers it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewEvent<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) kind: &'static str,
    pub(crate) name: &'a str,
    pub(crate) action: &'static str,
    pub(crate) generation: i64,
    /// Who made the change (see [`crate::Event::actor`]).
    pub(crate) actor: Option<&'a str>,
}

/// The name a key's `Status` events carry: `cluster/syncset`.
pub(crate) fn status_name(key: &WorkKey) -> String {
    format!("{}/{}", key.cluster, key.syncset)
}

/// An object's stored row.
#[derive(Debug, Clone)]
pub(crate) struct Stored {
    pub(crate) generation: i64,
    pub(crate) doc: String,
}

/// A Cluster's row: `labels` and `doc` as JSON.
pub(crate) struct ClusterRow<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) name: &'a str,
    pub(crate) generation: i64,
    pub(crate) labels: &'a str,
    pub(crate) doc: &'a str,
}

/// A SyncSet's row: `selector` (its targeting) and `doc` as JSON.
pub(crate) struct SyncSetRow<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) name: &'a str,
    pub(crate) generation: i64,
    pub(crate) mode: ApplyMode,
    pub(crate) selector: &'a str,
    pub(crate) doc: &'a str,
    /// The source it reads its resources from ([`source_id`](crate::stored::source_id)), if any.
    pub(crate) source: Option<&'a str>,
}

/// The row of a kind stored as its document alone: `doc` as stored (a Secret's sealed,
/// given keys).
pub(crate) struct DocRow<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) name: &'a str,
    pub(crate) generation: i64,
    pub(crate) doc: &'a str,
}

/// A revision's row and its parts ([`crate::revision::split`]).
pub(crate) struct RevisionRow<'a> {
    pub(crate) tenant: &'a str,
    pub(crate) syncset: &'a str,
    pub(crate) generation: i64,
    pub(crate) mode: ApplyMode,
    pub(crate) split: &'a Split,
}

/// A resource's live row, as a batch of reports writes it.
pub(crate) struct LiveRow<'a> {
    /// The resource's stored identity ([`crate::live::resource_id`]).
    pub(crate) resource: &'a str,
    pub(crate) syncset: &'a str,
    pub(crate) resource_version: &'a str,
    pub(crate) state: LiveState,
    /// The live object, as JSON.
    pub(crate) object: Option<String>,
    pub(crate) drift: Option<&'a str>,
    pub(crate) unready: Option<&'a str>,
    /// How many versions of the resource the batch stored.
    pub(crate) versions: i64,
}

/// What planning a changed cluster reads (see [`WriteTx::cluster_planning`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct ClusterPlanning {
    /// The SyncSets whose key on the cluster is wanted now.
    pub(crate) had: HashSet<String>,
    /// Every SyncSet of the tenant, by name.
    pub(crate) syncsets: Vec<SyncSetFacts>,
}

/// What planning a changed SyncSet reads (see [`WriteTx::syncset_planning`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct SyncSetPlanning {
    /// The clusters whose key of the SyncSet is wanted now.
    pub(crate) had: HashSet<String>,
    /// Every cluster of the tenant with its labels, by name.
    pub(crate) clusters: Vec<(String, BTreeMap<String, String>)>,
}

/// Runs a workflow whose operations never suspend (SQLite's) to completion on this
/// thread. A workflow that suspends anyway would be a bug in such a backend: it fails
/// the write (rolled back), it does not panic.
pub(crate) fn drive<F: Future>(workflow: F) -> crate::Result<F::Output> {
    let mut workflow = std::pin::pin!(workflow);
    match workflow.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(out) => Ok(out),
        Poll::Pending => Err(StoreError::backend(
            "driving a write",
            false,
            "a storage operation suspended on a backend whose operations never do",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workflow_that_never_suspends_runs_to_its_end_and_one_that_does_fails() {
        assert_eq!(drive(async { 7 }).expect("ready"), 7);
        let suspends = async {
            let mut yielded = false;
            std::future::poll_fn(move |_| match std::mem::replace(&mut yielded, true) {
                true => Poll::Ready(()),
                false => Poll::Pending,
            })
            .await
        };
        let e = drive(suspends).expect_err("it suspended");
        assert!(!e.is_transient() && e.to_string().contains("suspended"), "{e}");
    }
}
