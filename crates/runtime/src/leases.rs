//! The leases this process holds. One task renews all of them in one store call;
//! a key whose lease was lost has its run cancelled at once.
//!
//! Each lease also has a local deadline: the start of the call that last set its
//! expiry (the claim, or a renewal) plus the TTL — the store's expiry is at least that
//! late, since it is stamped inside the call. A run stops a margin (a tenth of the
//! TTL, at least 100 ms) before it: its [`Deadline`]. The run's [`Context`]
//! checks that deadline synchronously before every call to a target, so a run whose
//! task was not scheduled for a while (a paused process, a starved runtime) makes no
//! call once it has passed, whatever else is polled first. A watchdog, independent of
//! the renewal call (which may hang for as long as the database does), also cancels
//! runs at their deadline, so a call in flight is abandoned there. The fencing tokens
//! still refuse any late write, as a further line.
//!
//! [`Context`]: crate::reconciler::Context

use crate::metrics::{ReasonLabel, RuntimeMetrics};
use fleetsync_applier::Deadline;
use fleetsync_model::WorkKey;
use fleetsync_store::{Fence, RenewParams, WorkQueue};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub struct Leases {
    held: Mutex<HashMap<WorkKey, Held>>,
    /// How long a lease lasts unrenewed.
    ttl: Duration,
    /// How long before a lease's end its run stops.
    margin: Duration,
    metrics: RuntimeMetrics,
}

struct Held {
    fence: Fence,
    token: CancellationToken,
    /// The lease's end by this process's clock, less the margin.
    deadline: Deadline,
    /// The run is over and its result is being committed: the store may already have
    /// released the key, so a renewal that finds it gone is no loss.
    completing: bool,
}

impl Leases {
    /// The leases of a process whose leases last `ttl`.
    pub fn new(ttl: Duration) -> Self {
        Self::with_metrics(ttl, RuntimeMetrics::unregistered())
    }

    /// [`Leases::new`], counting lost leases and failed renewals in `metrics`.
    pub fn with_metrics(ttl: Duration, metrics: RuntimeMetrics) -> Self {
        Self { held: Mutex::default(), ttl, margin: (ttl / 10).max(Duration::from_millis(100)), metrics }
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<WorkKey, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a held lease that ends no sooner than `valid_until` (the start of the
    /// claim call plus the TTL); `token` is cancelled if the lease is lost or about to
    /// end unrenewed. Returns the run's deadline, which renewals move.
    pub fn hold(&self, key: WorkKey, fence: Fence, token: CancellationToken, valid_until: Instant) -> Deadline {
        let deadline = Deadline::at(valid_until - self.margin);
        self.map().insert(key, Held { fence, token, deadline: deadline.clone(), completing: false });
        deadline
    }

    /// Moves the deadline of the leases a renewal extended.
    fn extend(&self, renewed: &[(WorkKey, Fence)], valid_until: Instant) {
        let map = self.map();
        for (k, fence) in renewed {
            if let Some(h) = map.get(k).filter(|h| h.fence == *fence) {
                h.deadline.extend_to(valid_until - self.margin);
            }
        }
    }

    /// The running leases whose deadline is at or before `by`.
    fn expiring(&self, by: Instant) -> Vec<(WorkKey, Fence)> {
        self.map()
            .iter()
            .filter(|(_, h)| !h.completing && h.deadline.instant().is_some_and(|at| at <= by))
            .map(|(k, h)| (k.clone(), h.fence))
            .collect()
    }

    /// Notes that the run has ended and its result is on its way to the store.
    pub fn completing(&self, key: &WorkKey, fence: Fence) {
        if let Some(h) = self.map().get_mut(key).filter(|h| h.fence == fence) {
            h.completing = true;
        }
    }

    /// Forgets a lease; returns whether it was still held (not lost meanwhile).
    pub fn release(&self, key: &WorkKey, fence: Fence) -> bool {
        let mut map = self.map();
        match map.get(key) {
            Some(h) if h.fence == fence => map.remove(key).is_some(),
            _ => false,
        }
    }

    pub fn len(&self) -> usize {
        self.map().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn snapshot(&self) -> Vec<(WorkKey, Fence)> {
        self.map().iter().map(|(k, h)| (k.clone(), h.fence)).collect()
    }

    /// Cancels the runs that still hold these leases; returns how many were running
    /// (not merely committing). A key claimed again since the snapshot, with a new
    /// token, is left alone: only the exact (key, token) that was refused is lost.
    fn lose(&self, lost: &[(WorkKey, Fence)]) -> usize {
        let mut map = self.map();
        let mut running = 0;
        for (k, fence) in lost {
            if map.get(k).is_some_and(|h| h.fence == *fence) {
                if let Some(h) = map.remove(k) {
                    running += usize::from(!h.completing);
                    h.token.cancel();
                }
            }
        }
        running
    }

    /// Renews every held lease each `every`, and cancels runs whose lease is about to
    /// end unrenewed, until `stop` fires.
    pub async fn renew_loop(self: Arc<Self>, store: Arc<dyn WorkQueue>, every: Duration, stop: CancellationToken) {
        tokio::join!(self.renewing(store, every, &stop), self.watchdog(&stop));
    }

    async fn renewing(&self, store: Arc<dyn WorkQueue>, every: Duration, stop: &CancellationToken) {
        let ttl = self.ttl;
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stop.cancelled() => return,
            }
            let leases = self.snapshot();
            if leases.is_empty() {
                continue;
            }
            let started = Instant::now();
            let renewal = self
                .metrics
                .store_call("renew", store.lease_renew(RenewParams { leases: leases.clone(), lease_ttl: ttl }));
            let result = tokio::select! {
                r = renewal => r,
                () = stop.cancelled() => return,
            };
            match result {
                Ok(lost) => {
                    let lost: HashSet<WorkKey> = lost.into_iter().collect();
                    let (lost, renewed): (Vec<_>, Vec<_>) = leases.into_iter().partition(|(k, _)| lost.contains(k));
                    self.extend(&renewed, started + ttl);
                    let cancelled = self.lose(&lost);
                    if cancelled > 0 {
                        self.metrics
                            .leases_lost
                            .get_or_create(&ReasonLabel { reason: "refused" })
                            .inc_by(cancelled as u64);
                        tracing::error!(cancelled, "leases lost; cancelling their runs");
                    }
                }
                Err(e) => {
                    self.metrics.lease_renewal_failures.inc();
                    tracing::error!(error = %e, "renewing leases failed; will try again (runs stop before their leases end)");
                }
            }
        }
    }

    /// Cancels runs at their deadline (a margin before their lease ends), checking
    /// twice per margin so that none is caught later than half a margin.
    async fn watchdog(&self, stop: &CancellationToken) {
        let tick = self.margin / 2;
        loop {
            tokio::select! {
                () = tokio::time::sleep(tick) => {}
                () = stop.cancelled() => return,
            }
            let expiring = self.expiring(Instant::now());
            if !expiring.is_empty() {
                let cancelled = self.lose(&expiring);
                self.metrics.leases_lost.get_or_create(&ReasonLabel { reason: "unrenewed" }).inc_by(cancelled as u64);
                tracing::error!(
                    cancelled,
                    "leases about to end unrenewed (is the store reachable?); cancelling their runs"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losing_an_old_token_spares_the_new_run() {
        let leases = Leases::new(Duration::from_secs(30));
        let key = WorkKey::new("t", "c", "s");
        let run = CancellationToken::new();
        leases.hold(key.clone(), Fence::new(5), run.clone(), Instant::now() + Duration::from_secs(30));
        assert_eq!(leases.lose(&[(key.clone(), Fence::new(4))]), 0);
        assert!(!run.is_cancelled(), "token 4 was an earlier run of the key");
        assert_eq!(leases.len(), 1);
        assert_eq!(leases.lose(&[(key.clone(), Fence::new(5))]), 1, "a running run was lost");
        assert!(run.is_cancelled());
        assert!(leases.is_empty());
        assert!(!leases.release(&key, Fence::new(5)), "already forgotten");
    }
}

#[cfg(test)]
mod completing_tests {
    use super::*;

    #[test]
    fn a_committing_run_is_not_counted_as_lost() {
        let leases = Leases::new(Duration::from_secs(30));
        let key = WorkKey::new("t", "c", "s");
        leases.hold(key.clone(), Fence::new(9), CancellationToken::new(), Instant::now() + Duration::from_secs(30));
        leases.completing(&key, Fence::new(9));
        assert_eq!(leases.lose(&[(key, Fence::new(9))]), 0);
    }
}

#[cfg(test)]
mod deadline_tests {
    use super::*;

    #[test]
    fn renewals_move_deadlines_and_expiring_runs_are_found() {
        let leases = Leases::new(Duration::from_secs(30));
        let (a, b) = (WorkKey::new("t", "c", "a"), WorkKey::new("t", "c", "b"));
        let now = Instant::now();
        let (ra, rb) = (CancellationToken::new(), CancellationToken::new());
        leases.hold(a.clone(), Fence::new(1), ra.clone(), now + Duration::from_secs(1));
        leases.hold(b.clone(), Fence::new(2), rb.clone(), now + Duration::from_secs(1));
        leases.extend(&[(a.clone(), Fence::new(1)), (b.clone(), Fence::new(7))], now + Duration::from_secs(10));
        assert_eq!(
            leases.expiring(now + Duration::from_secs(2)),
            vec![(b.clone(), Fence::new(2))],
            "b's renewal was for another token"
        );
        let b_deadline = now + Duration::from_secs(1) - Duration::from_secs(3);
        assert_eq!(
            leases.expiring(b_deadline),
            vec![(b.clone(), Fence::new(2))],
            "due a margin (a tenth of the TTL, 3 s) before its end"
        );
        assert!(leases.expiring(b_deadline - Duration::from_millis(1)).is_empty(), "and not before");
        leases.completing(&b, Fence::new(2));
        assert!(leases.expiring(now + Duration::from_secs(2)).is_empty(), "a committing run is left to its commit");
    }

    /// A renewal that hangs (a database that stopped answering) does not keep a run
    /// alive past its lease: the watchdog cancels it before the deadline.
    #[tokio::test(start_paused = true)]
    async fn a_hanging_store_cannot_stretch_a_lease() {
        let leases = Arc::new(Leases::new(Duration::from_secs(30)));
        let run = CancellationToken::new();
        let ttl = Duration::from_secs(30);
        let claimed = Instant::now();
        leases.hold(WorkKey::new("t", "c", "s"), Fence::new(1), run.clone(), claimed + ttl);
        let stop = CancellationToken::new();
        let watchdog = tokio::spawn({
            let (leases, stop) = (leases.clone(), stop.clone());
            async move { leases.watchdog(&stop).await }
        });
        tokio::time::timeout(ttl, run.cancelled()).await.expect("cancelled before the lease ended");
        assert!(claimed.elapsed() >= ttl - ttl / 10 - ttl / 20, "not cancelled early: {:?}", claimed.elapsed());
        stop.cancel();
        watchdog.await.expect("joins");
    }
}
