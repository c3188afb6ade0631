//! The leases this process holds. One task renews all of them in one store call;
//! a key whose lease was lost has its run cancelled at once, and if renewals keep
//! failing for a whole TTL every run is cancelled (their leases may have expired, and
//! another worker may hold the keys: the fencing tokens make sure our late writes
//! are refused anyway).

use fleetsync_model::WorkKey;
use fleetsync_store::{Fence, RenewParams, Store};
use std::collections::HashMap;
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

    /// Cancels and forgets the runs of these keys.
    fn lose(&self, keys: &[WorkKey]) {
        let mut map = self.map();
        for k in keys {
            if let Some((_, token)) = map.remove(k) {
                token.cancel();
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
            match store.lease_renew(RenewParams { leases, lease_ttl: ttl }).await {
                Ok(lost) => {
                    last_ok = Instant::now();
                    if !lost.is_empty() {
                        tracing::warn!(count = lost.len(), "leases lost; cancelling their runs");
                        self.lose(&lost);
                    }
                }
                Err(e) if last_ok.elapsed() >= ttl => {
                    tracing::error!(error = %e, "renewals failed for a whole lease TTL; cancelling every run");
                    let all: Vec<WorkKey> = self.snapshot().into_iter().map(|(k, _)| k).collect();
                    self.lose(&all);
                }
                Err(e) => tracing::warn!(error = %e, "renewing leases failed; will try again"),
            }
        }
    }
}
