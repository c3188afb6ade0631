//! The leases this process holds. One task renews all of them in one store call;
//! a key whose lease was lost has its run cancelled at once, and if renewals keep
//! failing for a whole TTL every run is cancelled (their leases may have expired, and
//! another worker may hold the keys: the fencing tokens make sure our late writes
//! are refused anyway).

use fleetsync_model::WorkKey;
use fleetsync_store::{Fence, RenewParams, Store};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct Leases {
    held: Mutex<HashMap<WorkKey, Held>>,
}

struct Held {
    fence: Fence,
    token: CancellationToken,
    /// The run is over and its result is being committed: the store may already have
    /// released the key, so a renewal that finds it gone is no loss.
    completing: bool,
}

impl Leases {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<WorkKey, Held>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a held lease; `token` is cancelled if the lease is lost.
    pub fn hold(&self, key: WorkKey, fence: Fence, token: CancellationToken) {
        self.map().insert(key, Held { fence, token, completing: false });
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

    /// Renews every held lease each `every` until `stop` fires.
    pub async fn renew_loop(self: Arc<Self>, store: Arc<dyn Store>, ttl: Duration, every: Duration, stop: CancellationToken) {
        let mut last_ok = Instant::now();
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stop.cancelled() => return,
            }
            let leases = self.snapshot();
            if leases.is_empty() {
                last_ok = Instant::now();
                continue;
            }
            match store.lease_renew(RenewParams { leases: leases.clone(), lease_ttl: ttl }).await {
                Ok(lost) if !lost.is_empty() => {
                    last_ok = Instant::now();
                    let lost: HashSet<WorkKey> = lost.into_iter().collect();
                    let lost: Vec<(WorkKey, Fence)> = leases.into_iter().filter(|(k, _)| lost.contains(k)).collect();
                    let cancelled = self.lose(&lost);
                    if cancelled > 0 {
                        tracing::warn!(cancelled, "leases lost; cancelling their runs");
                    }
                }
                Ok(_) => last_ok = Instant::now(),
                Err(e) if last_ok.elapsed() >= ttl => {
                    tracing::error!(error = %e, "renewals failed for a whole lease TTL; cancelling every run");
                    self.lose(&self.snapshot());
                }
                Err(e) => tracing::warn!(error = %e, "renewing leases failed; will try again"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn losing_an_old_token_spares_the_new_run() {
        let leases = Leases::default();
        let key = WorkKey::new("t", "c", "s");
        let run = CancellationToken::new();
        leases.hold(key.clone(), 5, run.clone());
        assert_eq!(leases.lose(&[(key.clone(), 4)]), 0);
        assert!(!run.is_cancelled(), "token 4 was an earlier run of the key");
        assert_eq!(leases.len(), 1);
        assert_eq!(leases.lose(&[(key.clone(), 5)]), 1, "a running run was lost");
        assert!(run.is_cancelled());
        assert!(leases.is_empty());
        assert!(!leases.release(&key, 5), "already forgotten");
    }
}

#[cfg(test)]
mod completing_tests {
    use super::*;

    #[test]
    fn a_committing_run_is_not_counted_as_lost() {
        let leases = Leases::default();
        let key = WorkKey::new("t", "c", "s");
        leases.hold(key.clone(), 9, CancellationToken::new());
        leases.completing(&key, 9);
        assert_eq!(leases.lose(&[(key, 9)]), 0);
    }
}
