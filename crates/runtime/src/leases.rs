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
    held: Mutex<HashMap<WorkKey, (Fence, CancellationToken)>>,
}

impl Leases {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<WorkKey, (Fence, CancellationToken)>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records a held lease; `token` is cancelled if the lease is lost.
    pub fn hold(&self, key: WorkKey, fence: Fence, token: CancellationToken) {
        self.map().insert(key, (fence, token));
    }

    /// Forgets a lease; returns whether it was still held (not lost meanwhile).
    pub fn release(&self, key: &WorkKey, fence: Fence) -> bool {
        let mut map = self.map();
        match map.get(key) {
            Some((f, _)) if *f == fence => map.remove(key).is_some(),
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
        self.map().iter().map(|(k, (f, _))| (k.clone(), *f)).collect()
    }

    /// Cancels and forgets the runs that still hold these leases. A key whose run
    /// finished (or that was claimed again, with a new token) after the renewal's
    /// snapshot is left alone: only the exact (key, token) that was refused is lost.
    fn lose(&self, lost: &[(WorkKey, Fence)]) {
        let mut map = self.map();
        for (k, fence) in lost {
            if map.get(k).is_some_and(|(f, _)| f == fence) {
                if let Some((_, token)) = map.remove(k) {
                    token.cancel();
                }
            }
        }
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
                    let before = self.len();
                    self.lose(&lost);
                    let cancelled = before - self.len();
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
        leases.lose(&[(key.clone(), 4)]);
        assert!(!run.is_cancelled(), "token 4 was an earlier run of the key");
        assert_eq!(leases.len(), 1);
        leases.lose(&[(key.clone(), 5)]);
        assert!(run.is_cancelled());
        assert!(leases.is_empty());
        assert!(!leases.release(&key, 5), "already forgotten");
    }
}
