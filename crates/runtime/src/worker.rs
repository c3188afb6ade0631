//! The claim loop. It claims as many keys as there is room for (bounded by
//! `max_in_flight`), runs each on its own task, and when the queue is empty sleeps
//! until the store says work may be there (an in-process wake-up), the earliest
//! backed-off key is due, or the safety poll fires — whichever comes first.

use crate::cache::ObjectCache;
use crate::committer::Committer;
use crate::leases::Leases;
use crate::membership::{Membership, View};
use crate::metrics::RuntimeMetrics;
use crate::per_cluster::ClusterSlots;
use crate::reconciler::{self, Context, Reconciler};
use crate::resync::resync_loop;
use crate::rollouts::rollout_loop;
use crate::syncset::SyncSetReconciler;
use crate::{RuntimeConfig, RuntimeError};
use fleetsync_applier::error::is_egress_refusal;
use fleetsync_applier::{Applier, Moment};
use fleetsync_model::{Clock, Phase, Timestamp};
use fleetsync_store::{ClaimParams, ClaimedItem, CompleteOutcome, RunOutcome, StatusFilter, Store, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// A worker process's engine. Build it, then [`run`](Runtime::run) it until shutdown.
pub struct Runtime {
    store: Arc<dyn Store>,
    reconciler: Arc<dyn Reconciler>,
    config: RuntimeConfig,
    metrics: RuntimeMetrics,
    /// The config's clock, or the store's: the one the store's timestamps are on.
    clock: Arc<dyn Clock>,
}

/// What each key task shares.
struct Shared {
    store: Arc<dyn Store>,
    reconciler: Arc<dyn Reconciler>,
    /// Clusters and SyncSets by generation, shared by every run's [`Context`].
    cache: Arc<ObjectCache>,
    committer: Committer,
    leases: Arc<Leases>,
    metrics: RuntimeMetrics,
    /// Keys in flight per cluster, when there is a per-cluster limit.
    slots: ClusterSlots,
    /// Fires when shutdown's grace runs out: runs stop and give their keys back.
    abort: CancellationToken,
    /// The clock the store's timestamps are on (for change latency).
    clock: Arc<dyn Clock>,
}

impl Runtime {
    /// A runtime that applies SyncSets to clusters through `applier` (the
    /// [`SyncSetReconciler`]).
    pub fn new(
        store: Arc<dyn Store>,
        applier: Arc<dyn Applier>,
        config: RuntimeConfig,
        metrics: RuntimeMetrics,
    ) -> Self {
        let reconciler = Arc::new(SyncSetReconciler::new(applier, metrics.clone()));
        Self::with_reconciler(store, reconciler, config, metrics)
    }

    /// A runtime that runs `reconciler` on every key it claims, with the same leases,
    /// fencing, retries and group commit as the SyncSet applier.
    pub fn with_reconciler(
        store: Arc<dyn Store>,
        reconciler: Arc<dyn Reconciler>,
        config: RuntimeConfig,
        metrics: RuntimeMetrics,
    ) -> Self {
        let clock = config.clock.clone().unwrap_or_else(|| store.clock());
        Self { store, reconciler, config, metrics, clock }
    }

    /// Runs until `shutdown` fires, then stops claiming, lets runs in flight finish
    /// within the grace period, gives back the keys of those that do not, and returns.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), RuntimeError> {
        self.config.validate()?;
        let cfg = &self.config;
        self.metrics.concurrency_limit.set(i64::try_from(cfg.max_in_flight).unwrap_or(i64::MAX));
        let leases = Arc::new(Leases::with_metrics(cfg.lease_ttl, self.metrics.clone()));
        let (committer, commit_task) = Committer::spawn(self.store.clone(), self.metrics.clone());
        let background = CancellationToken::new();
        let renewer = tokio::spawn(leases.clone().renew_loop(self.store.clone(), cfg.renew_every, background.clone()));
        let resync =
            cfg.resync_every.map(|every| tokio::spawn(resync_loop(self.store.clone(), every, background.clone())));
        let rollouts =
            cfg.rollout_every.map(|every| tokio::spawn(rollout_loop(self.store.clone(), every, background.clone())));
        let refused = tokio::spawn(retry_refused(self.store.clone()));
        let membership =
            Membership::join(&*self.store, cfg.worker_id.clone(), cfg.member_ttl, cfg.max_in_flight, &self.metrics)
                .await;
        let view = membership.view();
        let leaving = CancellationToken::new();
        let member = tokio::spawn(membership.run(self.store.clone(), self.metrics.clone(), leaving.clone()));
        let shared = Arc::new(Shared {
            store: self.store.clone(),
            reconciler: self.reconciler.clone(),
            cache: Arc::new(ObjectCache::default()),
            committer,
            leases,
            metrics: self.metrics.clone(),
            slots: ClusterSlots::new(cfg.max_per_cluster),
            abort: CancellationToken::new(),
            clock: self.clock.clone(),
        });

        let mut tasks = JoinSet::new();
        self.claim_loop(&shared, &mut tasks, view, &shutdown).await;
        // No more claims: leave now so the others take this process's shards at once
        // (the runs still in flight keep their leases).
        leaving.cancel();
        let _ = member.await;

        tracing::info!(in_flight = tasks.len(), "shutting down: letting runs in flight finish");
        let drained = tokio::time::timeout(cfg.shutdown_grace, drain(&mut tasks)).await;
        if drained.is_err() {
            tracing::warn!(in_flight = tasks.len(), "grace period over: releasing unfinished keys");
            shared.abort.cancel();
            drain(&mut tasks).await;
        }
        drop(shared);
        let _ = commit_task.await;
        background.cancel();
        let _ = renewer.await;
        for task in [resync, rollouts, Some(refused)].into_iter().flatten() {
            let _ = task.await;
        }
        Ok(())
    }

    /// Claims while there is room. When saturated it waits for `refill` free slots
    /// before claiming again, so a busy process claims in batches (one transaction
    /// for many keys) rather than one key per freed slot; an idle one claims at once.
    /// Slots its own shards cannot fill go to keys stolen from others (see
    /// [`RuntimeConfig::steal_after`](crate::RuntimeConfig::steal_after)).
    async fn claim_loop(
        &self,
        shared: &Arc<Shared>,
        tasks: &mut JoinSet<()>,
        mut view: watch::Receiver<View>,
        shutdown: &CancellationToken,
    ) {
        let cfg = &self.config;
        let room = Arc::new(Semaphore::new(cfg.max_in_flight));
        let refill = (cfg.claim_batch.min(cfg.max_in_flight) / 8).max(1);
        let mut wake = self.store.subscribe();
        loop {
            let want = if tasks.is_empty() { 1 } else { refill };
            let mut slots = tokio::select! {
                permit = room.clone().acquire_many_owned(want as u32) => match permit { Ok(p) => p, Err(_) => return },
                () = shutdown.cancelled() => return,
            };
            while tasks.try_join_next().is_some() {}
            // Only this loop takes permits, so what is free now stays free.
            if let Ok(more) = room.clone().try_acquire_many_owned(room.available_permits() as u32) {
                slots.merge(more);
            }
            let asked = slots.num_permits().min(cfg.claim_batch);
            wake.borrow_and_update();
            let (shards, others) = {
                let v = view.borrow_and_update();
                (v.shards.clone(), v.others.clone())
            };
            // The store stamps the leases inside the claim: they end no sooner than
            // this, and what was due by `claimed_at` the claim saw.
            let claimed_at = self.clock.now();
            let got = match self.claim(shared, tasks, &mut slots, shards.clone(), asked).await {
                Ok(got) => got,
                Err(e) => {
                    tracing::error!(error = %e, "claiming failed; trying again shortly");
                    drop(slots);
                    sleep_or_stop(cfg.poll_interval.min(Duration::from_secs(1)), shutdown).await;
                    continue;
                }
            };
            let (stolen, steal_due) = match cfg.steal_after {
                Some(after) if got < asked && !others.is_empty() => {
                    self.steal(shared, tasks, &mut slots, others, asked - got, after).await
                }
                _ => (0, None),
            };
            drop(slots);
            if got + stolen < asked {
                self.wait_for_work(
                    &mut wake,
                    &mut view,
                    shards.as_deref(),
                    steal_due,
                    &shared.slots,
                    claimed_at,
                    shutdown,
                )
                .await;
            }
        }
    }

    /// Claims up to `asked` keys of `shards` and starts a run for each, each taking one
    /// of `slots`. `Err` when the store failed.
    async fn claim(
        &self,
        shared: &Arc<Shared>,
        tasks: &mut JoinSet<()>,
        slots: &mut OwnedSemaphorePermit,
        shards: Option<Vec<u16>>,
        asked: usize,
    ) -> Result<usize, StoreError> {
        let cfg = &self.config;
        let params = ClaimParams {
            cluster_limit: shared.slots.claim_limit(asked),
            shards,
            ..ClaimParams::new(cfg.worker_id.clone(), asked, cfg.lease_ttl)
        };
        let valid_until = tokio::time::Instant::now() + cfg.lease_ttl;
        let items = self.metrics.store_call("claim", self.store.work_claim(params)).await?;
        // Whatever enqueued these keys committed before this: appliers re-check what
        // they cached about a cluster (a kubeconfig Secret) if they checked it earlier.
        let claimed_at = Moment::now();
        let got = items.len();
        self.metrics.claimed.inc_by(got as u64);
        let taken_over = items.iter().filter(|i| i.taken_over).count();
        if taken_over > 0 {
            self.metrics.taken_over.inc_by(taken_over as u64);
            tracing::info!(keys = taken_over, "took over keys whose leases had expired");
        }
        for item in items {
            match slots.split(1) {
                Some(permit) => {
                    shared.slots.take(&item.key);
                    // One span per key run: what its logs (and a tracing exporter) carry.
                    let span = tracing::info_span!("run", key = %item.key, attempt = item.attempt, generation = item.generation);
                    tasks.spawn(run_key(shared.clone(), item, valid_until, claimed_at, permit).instrument(span));
                }
                None => {
                    // Cannot happen (we asked for at most as many keys as slots);
                    // give the key back rather than run it unbounded.
                    let _ = shared.store.work_release(&item.key, item.fence).await;
                }
            }
        }
        Ok(got)
    }

    /// Steals up to `asked` keys from the `others`' shards if one of them has been
    /// due for `after` or longer. Returns how many it took and, when the earliest due
    /// key there is not overdue yet, when it will be (so the wait ends then).
    async fn steal(
        &self,
        shared: &Arc<Shared>,
        tasks: &mut JoinSet<()>,
        slots: &mut OwnedSemaphorePermit,
        others: Vec<u16>,
        asked: usize,
        after: Duration,
    ) -> (usize, Option<Timestamp>) {
        let earliest = match self.store.work_next_ready_at(Some(&others)).await {
            Ok(Some(at)) => at,
            Ok(None) => return (0, None),
            Err(e) => {
                tracing::warn!(error = %e, "looking for keys to steal failed; not stealing this time");
                return (0, None);
            }
        };
        let overdue_from = earliest.plus(after);
        if overdue_from > self.clock.now() {
            return (0, Some(overdue_from));
        }
        let stolen = match self.claim(shared, tasks, slots, Some(others), asked).await {
            Ok(stolen) => stolen,
            Err(e) => {
                tracing::warn!(error = %e, "stealing failed; not stealing this time");
                0
            }
        };
        self.metrics.stolen.inc_by(stolen as u64);
        (stolen, None)
    }

    /// Sleeps until a wake-up, the next scheduled key of our shards, the safety poll, a
    /// change of the shards we own, a key of another's shards becoming overdue enough
    /// to steal (`steal_due`), or (with a per-cluster limit) the end of one of this
    /// process's runs. `claimed_at`: when the claim that came up short started.
    #[allow(clippy::too_many_arguments)]
    async fn wait_for_work(
        &self,
        wake: &mut watch::Receiver<u64>,
        view: &mut watch::Receiver<View>,
        shards: Option<&[u16]>,
        steal_due: Option<Timestamp>,
        slots: &ClusterSlots,
        claimed_at: Timestamp,
        shutdown: &CancellationToken,
    ) {
        let poll = self.config.poll_interval;
        let now = self.clock.now();
        let delay = match self.store.work_next_ready_at(shards).await {
            // With a limit, a key that was due when the claim looked but was not
            // claimed was held back: only a run ending (`freed`) makes room for it, so
            // do not spin on it. One that became due since (a lease that ran out just
            // after the claim) is not held back: claim it at once, below.
            Ok(Some(at)) if slots.is_limited() && at <= claimed_at => poll,
            Ok(Some(at)) => at.since(now).clamp(Duration::from_millis(5), poll),
            _ => poll,
        };
        let delay = steal_due.map_or(delay, |at| delay.min(at.since(now).max(Duration::from_millis(5))));
        tokio::select! {
            changed = wake.changed() => if changed.is_err() { sleep_or_stop(poll, shutdown).await },
            () = tokio::time::sleep(delay) => {}
            () = slots.freed() => {}
            changed = view.changed() => if changed.is_err() { sleep_or_stop(poll, shutdown).await },
            () = shutdown.cancelled() => {}
        }
    }
}

/// One key, from claim to commit. The permit is the key's slot in `max_in_flight`.
async fn run_key(
    shared: Arc<Shared>,
    item: ClaimedItem,
    valid_until: tokio::time::Instant,
    claimed_at: Moment,
    permit: OwnedSemaphorePermit,
) {
    let token = shared.abort.child_token();
    let deadline = shared.leases.hold(item.key.clone(), item.fence, token.clone(), valid_until);
    shared.metrics.applies_in_flight.inc();
    let started = std::time::Instant::now();
    let ctx = Context::new(shared.store.clone(), item, claimed_at, shared.cache.clone(), token, deadline);
    let item = ctx.item();
    match reconciler::run(&*shared.reconciler, &ctx).await {
        Some(completion) => {
            shared.leases.completing(&item.key, item.fence);
            let error = match &completion.outcome {
                RunOutcome::Failed { error } | RunOutcome::Parked { error } => Some(error.clone()),
                _ => None,
            };
            // A run that applied (or removed) what was asked ends its change's latency.
            let applied = matches!(completion.outcome, RunOutcome::Applied { .. } | RunOutcome::Removed);
            let waiting = matches!(completion.outcome, RunOutcome::Waiting { .. });
            match shared.committer.commit(completion).await {
                Ok(outcome) => {
                    shared.metrics.run_duration.observe(started.elapsed().as_secs_f64());
                    if let (true, false, Some(asked)) = (applied, outcome == CompleteOutcome::Stale, item.changed_at) {
                        let latency = shared.clock.now().millis().saturating_sub(asked.millis()).max(0);
                        shared.metrics.change_latency.observe(latency as f64 / 1000.0);
                    }
                    match waiting {
                        true => shared.metrics.run("waiting"),
                        false => record(&shared.metrics, item, error.as_deref(), outcome),
                    }
                }
                Err(e) => {
                    tracing::error!(key = %item.key, error = %e, "result not committed; the key runs again after its lease")
                }
            }
        }
        None if shared.leases.release(&item.key, item.fence) => {
            // Cancelled by shutdown, lease still ours: give the key back at once.
            if let Err(e) = shared.store.work_release(&item.key, item.fence).await {
                tracing::warn!(key = %item.key, error = %e, "release failed; the lease will expire");
            }
            shared.metrics.run("released");
        }
        None => shared.metrics.run("lost"),
    }
    shared.leases.release(&item.key, item.fence);
    shared.metrics.applies_in_flight.dec();
    drop(permit);
    shared.slots.give_back(&item.key);
}

/// Counts a committed run, and logs a failed one (a WARN per failed run and per parked
/// key, with the key, the attempt and the reason the run gave).
fn record(metrics: &RuntimeMetrics, item: &ClaimedItem, error: Option<&str>, outcome: CompleteOutcome) {
    let (key, attempt, error) = (&item.key, item.attempt, error.unwrap_or(""));
    match outcome {
        CompleteOutcome::Committed(Phase::Failed) => {
            tracing::warn!(%key, attempt, error, "run failed; the key runs again after its backoff");
            metrics.retries.inc();
            metrics.run("failed");
        }
        CompleteOutcome::Committed(Phase::Parked) => {
            tracing::warn!(%key, attempt, error, "run failed; the key is parked until a change, a resync or a retry");
            metrics.parked.inc();
            metrics.run("failed");
        }
        CompleteOutcome::Committed(_) => metrics.run("applied"),
        CompleteOutcome::Removed => metrics.run("removed"),
        CompleteOutcome::Stale => {
            tracing::warn!("completion refused: stale fencing token (lease was lost)");
            metrics.run("stale");
        }
    }
}

/// Runs again, once, every key an egress refusal parked. A refusal parks its key at
/// once (it is no use trying again under the same policy), but the policy is the
/// processes' flags, so a changed policy is a process that starts: it gives those keys
/// one more run. Reads the parked keys only.
async fn retry_refused(store: Arc<dyn Store>) {
    let parked = StatusFilter { phases: vec![Phase::Parked], ..StatusFilter::default() };
    let keys = match store.status_list(&parked).await {
        Ok(keys) => keys,
        Err(e) => {
            return tracing::warn!(error = %e, "could not read the parked keys to run those an egress refusal parked again")
        }
    };
    let mut again = 0;
    for k in keys.iter().filter(|k| k.last_error.as_deref().is_some_and(is_egress_refusal)) {
        match store.work_retry(&k.key).await {
            Ok(()) => again += 1,
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => tracing::warn!(key = %k.key, error = %e, "could not run a key an egress refusal parked again"),
        }
    }
    if again > 0 {
        tracing::info!(keys = again, "keys an egress refusal parked run again under this process's egress policy");
    }
}

async fn drain(tasks: &mut JoinSet<()>) {
    while tasks.join_next().await.is_some() {}
}

async fn sleep_or_stop(d: Duration, stop: &CancellationToken) {
    tokio::select! {
        () = tokio::time::sleep(d) => {}
        () = stop.cancelled() => {}
    }
}
