//! State reconcilers: code that brings one key — `(tenant, cluster, syncset)` — to its
//! latest desired state, as opposed to an [`EventHandler`](crate::handlers::EventHandler),
//! which must see every event.
//!
//! The [`Runtime`](crate::Runtime) calls [`Reconciler::reconcile`] for a key when it
//! claims it: exclusively (a key is held by one worker at a time, under a lease with a
//! fencing token), with only the latest state (changes that land while the key waits
//! are coalesced; one that lands during a run makes the key run again afterwards), and
//! with a [`Context`] that reads the key's Cluster and SyncSet at the claimed
//! generation or newer. The reconciler returns an [`Action`], a value rather than a
//! side effect (after kube-runtime): [`Action::Done`], [`Action::Requeue`], or a full
//! [`Action::Report`] in the store's terms, which the SyncSet applier
//! ([`SyncSetReconciler`](crate::syncset::SyncSetReconciler)) uses. An `Err` is a failed
//! run: it is retried with backoff and parked after too many attempts, as any run.
//!
//! Writes a reconciler makes through [`Context::apply_own`] carry its fencing token:
//! they are refused once the lease is lost, reach event handlers like any change, but
//! do not make the reconciler's own key dirty — it does not run again because of its
//! own write (docs/concepts.md#guarantee-events-and-states).
//!
//! ```no_run
//! use fleetsync_model::Document;
//! use fleetsync_runtime::reconciler::{Action, Context, ReconcileError, Reconciler};
//! use fleetsync_runtime::{Runtime, RuntimeConfig, RuntimeMetrics};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! /// Labels each SyncSet `reviewed=yes`, then looks again in a minute.
//! struct Review;
//!
//! #[async_trait::async_trait]
//! impl Reconciler for Review {
//!     async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError> {
//!         let Some(syncset) = ctx.syncset().await? else { return Ok(Action::Done) };
//!         if !syncset.metadata.labels.contains_key("reviewed") {
//!             let mut reviewed = (*syncset).clone();
//!             reviewed.metadata.labels.insert("reviewed".into(), "yes".into());
//!             ctx.apply_own(vec![Document::SyncSet(reviewed)]).await?; // does not re-trigger this key
//!         }
//!         Ok(Action::Requeue(Duration::from_secs(60)))
//!     }
//! }
//!
//! # async fn run(store: Arc<dyn fleetsync_store::Store>) -> Result<(), fleetsync_runtime::RuntimeError> {
//! let shutdown = tokio_util::sync::CancellationToken::new();
//! Runtime::with_reconciler(store, Arc::new(Review), RuntimeConfig::default(), RuntimeMetrics::unregistered())
//!     .run(shutdown)
//!     .await
//! # }
//! ```

use crate::cache::ObjectCache;
use async_trait::async_trait;
use fleetsync_applier::{ApplyContext, Deadline, Moment};
use fleetsync_model::{Cluster, Document, Kind, ResourceRef, ResourceResult, SyncSet, WorkKey};
use fleetsync_store::{ApplyOutcome, ClaimedItem, Completion, Fence, OwnWrite, RunOutcome, Store, StoreError};
use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Brings one key to its latest desired state. See the module docs.
#[async_trait]
pub trait Reconciler: Send + Sync + 'static {
    async fn reconcile(&self, ctx: &Context) -> Result<Action, ReconcileError>;
}

/// What a reconcile asks the runtime to do with the key next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// The key is at its desired state (or, if it is no longer wanted, removed): wait
    /// for the next change.
    Done,
    /// Done for now, but run again after this long, or sooner if a change arrives.
    Requeue(Duration),
    /// The run's result in the store's terms, with per-resource results for status
    /// (the SyncSet applier reports this way). A `Failed` outcome is retried with backoff.
    Report { outcome: RunOutcome, resources: Vec<ResourceResult> },
}

/// Why a reconcile did not produce an [`Action`].
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The lease was lost or shutdown ran out of grace: nothing is committed, and the
    /// key runs again (here or elsewhere).
    #[error("cancelled: the lease was lost or shutdown ran out of grace")]
    Cancelled,
    /// The run failed: retried with backoff, parked after too many attempts.
    #[error("{0}")]
    Failed(String),
}

impl From<StoreError> for ReconcileError {
    /// An own write refused for a lost lease ends the run like any lost lease; any other
    /// store error fails it.
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::LeaseLost { .. } => ReconcileError::Cancelled,
            other => ReconcileError::Failed(other.to_string()),
        }
    }
}

/// What a reconcile sees of its key, and how it writes back.
pub struct Context {
    store: Arc<dyn Store>,
    item: ClaimedItem,
    claimed_at: Moment,
    cache: Arc<ObjectCache>,
    cancel: CancellationToken,
    /// No call to a target starts after this (the lease's end less a margin).
    deadline: Deadline,
    /// The key's SyncSet generation its own writes produced (0: none yet).
    own_generation: AtomicI64,
    /// What the target may hold because of this key: the claimed inventory, grown by
    /// [`record_inventory`](Self::record_inventory).
    inventory: Mutex<Vec<ResourceRef>>,
}

impl Context {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        item: ClaimedItem,
        claimed_at: Moment,
        cache: Arc<ObjectCache>,
        cancel: CancellationToken,
        deadline: Deadline,
    ) -> Self {
        let inventory = Mutex::new(item.inventory.clone());
        Self { store, item, claimed_at, cache, cancel, deadline, own_generation: AtomicI64::new(0), inventory }
    }

    pub fn key(&self) -> &WorkKey {
        &self.item.key
    }

    /// The claim: generation asked for, whether the key is still wanted (`desired`),
    /// apply mode, the inventory as claimed (see [`inventory`](Self::inventory)), this
    /// attempt's number.
    pub fn item(&self) -> &ClaimedItem {
        &self.item
    }

    /// When the claim of this run returned: every change that enqueued the key had
    /// committed by then. Pass it to appliers
    /// ([`ApplyContext::claimed_at`](fleetsync_applier::ApplyContext::claimed_at)), so
    /// that what they cached from before it (a cluster's kubeconfig) is checked again.
    pub fn claimed_at(&self) -> Moment {
        self.claimed_at
    }

    /// The fencing token of this run's lease; pass it to targets that can check it.
    pub fn fence(&self) -> Fence {
        self.item.fence
    }

    /// When the run must stop calling its target: its lease's end less a margin,
    /// moved by renewals. Pass it on in [`ApplyContext`](fleetsync_applier::ApplyContext).
    pub fn deadline(&self) -> &Deadline {
        &self.deadline
    }

    /// What an applier call of this run carries: the key, the fencing token, the claim's
    /// moment and the lease's deadline, with the generation and the resource's index.
    pub fn apply_context(&self, generation: i64, index: usize) -> ApplyContext {
        ApplyContext {
            key: self.item.key.clone(),
            fence: self.item.fence,
            generation,
            index,
            claimed_at: Some(self.claimed_at),
            deadline: self.deadline.clone(),
        }
    }

    /// The store, for reading anything else.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Fires when the run must stop: the lease was lost, or shutdown ran out of grace.
    pub fn cancelled(&self) -> &CancellationToken {
        &self.cancel
    }

    /// Awaits `f` unless the run is cancelled first ([`ReconcileError::Cancelled`]).
    /// Wrap every call to a target in it: it refuses to start `f` once the lease's safe
    /// deadline has passed — checked here, synchronously, not left to the watchdog
    /// task, which a paused or starved process may poll too late.
    pub async fn until_cancelled<F: Future>(&self, f: F) -> Result<F::Output, ReconcileError> {
        if self.deadline.passed() {
            return Err(ReconcileError::Cancelled);
        }
        tokio::select! {
            biased;
            () = self.cancel.cancelled() => Err(ReconcileError::Cancelled),
            out = f => Ok(out),
        }
    }

    /// What the target may hold because of this key: the inventory as claimed (what
    /// earlier runs, successful or not, may have applied) plus what this run recorded.
    pub fn inventory(&self) -> Vec<ResourceRef> {
        self.inventory.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Records in the store, before the run applies them, that the target may hold
    /// `planned` because of this key, so that a run that fails, is cancelled or dies
    /// midway leaves no object behind that Sync mode or a removal would not find. A
    /// no-op (no store write) when the inventory holds them already.
    pub async fn record_inventory(&self, planned: &[ResourceRef]) -> Result<(), ReconcileError> {
        let Some(grown) = with_planned(&self.inventory(), planned) else { return Ok(()) };
        self.until_cancelled(self.store.work_inventory_record(&self.item.key, self.item.fence, &grown)).await??;
        *self.inventory.lock().unwrap_or_else(PoisonError::into_inner) = grown;
        Ok(())
    }

    /// The key's cluster at the claimed generation or newer; `None` if it was deleted.
    pub async fn cluster(&self) -> Result<Option<Arc<Cluster>>, StoreError> {
        let k = &self.item.key;
        self.cache.cluster(&*self.store, &k.tenant, &k.cluster, self.item.cluster_generation).await
    }

    /// The key's SyncSet at the claimed generation (or the one this run's own write
    /// produced) or newer; `None` if it was deleted.
    pub async fn syncset(&self) -> Result<Option<Arc<SyncSet>>, StoreError> {
        let k = &self.item.key;
        self.cache.syncset(&*self.store, &k.tenant, &k.syncset, self.latest_generation()).await
    }

    /// The key's SyncSet at exactly the claimed generation: the revision this run
    /// applies, which a rollout may hold behind the latest (see
    /// [`Rollouts::revision_get`](fleetsync_store::Rollouts::revision_get)); `None` if
    /// the SyncSet was deleted. A revision no longer kept (the key was told a newer
    /// generation since, and older ones were dropped) fails the run rather than apply
    /// another revision: the key is dirty and runs again at the one it is told now.
    pub async fn revision(&self) -> Result<Option<Arc<SyncSet>>, ReconcileError> {
        let Some(latest) = self.syncset().await? else { return Ok(None) };
        let k = &self.item.key;
        // A SyncSet whose resources come from a source is stored without them: its
        // revision holds them.
        if latest.metadata.generation == self.item.generation && latest.spec.source_ref.is_none() {
            return Ok(Some(latest));
        }
        match self.cache.revision(&*self.store, &k.tenant, &k.syncset, self.item.generation).await? {
            Some(kept) => Ok(Some(kept)),
            None => Err(ReconcileError::Failed(format!(
                "generation {} of SyncSet {} is no longer kept",
                self.item.generation, k.syncset
            ))),
        }
    }

    /// Applies documents as this key's holder (see the module docs): logged and seen by
    /// event handlers, enqueues other keys as usual, but does not make this key dirty.
    /// [`StoreError::LeaseLost`] (which `?` turns into [`ReconcileError::Cancelled`])
    /// if the lease is gone; nothing is written then.
    pub async fn apply_own(&self, docs: Vec<Document>) -> Result<Vec<ApplyOutcome>, StoreError> {
        let own = OwnWrite { key: self.item.key.clone(), fence: self.item.fence };
        let out = self.store.objects_apply_own(docs, own).await?;
        let k = &self.item.key;
        for o in out.iter().filter(|o| o.kind == Kind::SyncSet && o.tenant == k.tenant && o.name == k.syncset) {
            self.own_generation.fetch_max(o.generation, Ordering::SeqCst);
        }
        Ok(out)
    }

    /// The newest SyncSet generation this run knows of: the claimed one, or the one its
    /// own write produced. `Done` records it as observed, since the own write is part of
    /// this run's work and not a change still to act on.
    pub fn latest_generation(&self) -> i64 {
        self.item.generation.max(self.own_generation.load(Ordering::SeqCst))
    }
}

/// Runs `reconciler` on the claimed key; the completion to commit, or `None` if the run
/// was cancelled (nothing to commit).
pub(crate) async fn run(reconciler: &dyn Reconciler, ctx: &Context) -> Option<Completion> {
    let (outcome, resources) = match reconciler.reconcile(ctx).await {
        Ok(action) => outcome_of(ctx, action),
        Err(ReconcileError::Cancelled) => return None,
        Err(ReconcileError::Failed(error)) => (RunOutcome::Failed { error }, Vec::new()),
    };
    Some(Completion { key: ctx.item.key.clone(), fence: ctx.item.fence, outcome, resources })
}

/// The inventory grown by what is `planned`: the stored one in its order, then what is
/// new in plan order; `None` when nothing is new.
fn with_planned(inventory: &[ResourceRef], planned: &[ResourceRef]) -> Option<Vec<ResourceRef>> {
    let mut grown = inventory.to_vec();
    for r in planned {
        if !grown.contains(r) {
            grown.push(r.clone());
        }
    }
    (grown.len() > inventory.len()).then_some(grown)
}

/// An action in the store's terms. `Done` on a key no longer wanted is its removal.
fn outcome_of(ctx: &Context, action: Action) -> (RunOutcome, Vec<ResourceResult>) {
    let (generation, inventory) = (ctx.latest_generation(), ctx.inventory());
    match action {
        Action::Done if !ctx.item.desired => (RunOutcome::Removed, Vec::new()),
        Action::Done => (RunOutcome::Applied { generation, inventory, rendered: None }, Vec::new()),
        Action::Requeue(after) => (RunOutcome::Requeue { generation, inventory, after }, Vec::new()),
        Action::Report { outcome, resources } => (outcome, resources),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> ResourceRef {
        ResourceRef {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("apps".into()),
            name: name.into(),
        }
    }

    #[test]
    fn planned_resources_join_the_inventory_once_in_plan_order() {
        let stored = [r("a"), r("b")];
        assert_eq!(with_planned(&stored, &[r("b"), r("a")]), None, "nothing new: no write");
        assert_eq!(
            with_planned(&stored, &[r("c"), r("a"), r("d"), r("c")]),
            Some(vec![r("a"), r("b"), r("c"), r("d")])
        );
        assert_eq!(with_planned(&[], &[r("x")]), Some(vec![r("x")]));
    }
}
