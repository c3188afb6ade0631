//! The per-cluster concurrency limit: how many of each cluster's keys this process has
//! in flight, so claims hold back a cluster that is full (see
//! [`ClusterLimit`](fleetsync_store::ClusterLimit)) and one slow cluster cannot take
//! every slot. When a run of a limited process ends, [`ClusterSlots::freed`] wakes the
//! claim loop: the keys held back for that cluster may be claimable now, and nothing
//! else would tell it (they were ready all along).

use fleetsync_model::WorkKey;
use fleetsync_store::ClusterLimit;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use tokio::sync::Notify;

#[derive(Debug, Default)]
pub struct ClusterSlots {
    max: Option<u32>,
    in_flight: Mutex<HashMap<(String, String), u32>>,
    freed: Notify,
}

impl ClusterSlots {
    /// `None`: no limit (nothing is counted).
    pub fn new(max: Option<u32>) -> Self {
        Self { max, ..Self::default() }
    }

    /// What a claim of at most `asked` keys passes to the store, if there is a limit.
    /// Only clusters that such a claim could fill are passed: one with `max - asked`
    /// or fewer in flight has room for the whole claim. A busy process claims a few
    /// dozen keys at a time, so this is usually a handful of clusters rather than a
    /// copy of every cluster's count on every claim.
    pub fn claim_limit(&self, asked: usize) -> Option<ClusterLimit> {
        let max = self.max?;
        let roomy = max.saturating_sub(u32::try_from(asked).unwrap_or(u32::MAX));
        let counts = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        let in_flight = counts.iter().filter(|(_, &n)| n > roomy).map(|(id, &n)| (id.clone(), n)).collect();
        Some(ClusterLimit { max, in_flight })
    }

    /// Counts a claimed key in flight.
    pub fn take(&self, key: &WorkKey) {
        if self.max.is_some() {
            let mut counts = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
            *counts.entry((key.tenant.clone(), key.cluster.clone())).or_default() += 1;
        }
    }

    /// Uncounts a key whose run ended, and wakes the claim loop.
    pub fn give_back(&self, key: &WorkKey) {
        if self.max.is_none() {
            return;
        }
        let mut counts = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        let id = (key.tenant.clone(), key.cluster.clone());
        if let Some(n) = counts.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                counts.remove(&id);
            }
        }
        drop(counts);
        self.freed.notify_one();
    }

    /// Resolves when a run of a limited process ended; never, without a limit.
    pub async fn freed(&self) {
        match self.max {
            Some(_) => self.freed.notified().await,
            None => std::future::pending().await,
        }
    }

    pub fn is_limited(&self) -> bool {
        self.max.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_cluster_only_when_limited() {
        let slots = ClusterSlots::new(Some(2));
        let (a1, a2, b) = (WorkKey::new("t", "a", "s1"), WorkKey::new("t", "a", "s2"), WorkKey::new("t", "b", "s1"));
        for k in [&a1, &a2, &b] {
            slots.take(k);
        }
        let limit = slots.claim_limit(2).expect("limited");
        assert_eq!((limit.room("t", "a"), limit.room("t", "b"), limit.room("t", "c")), (0, 1, 2));
        slots.give_back(&a1);
        assert_eq!(slots.claim_limit(2).expect("limited").room("t", "a"), 1);
        let unlimited = ClusterSlots::new(None);
        unlimited.take(&a1);
        assert!(unlimited.claim_limit(2).is_none());
    }

    #[test]
    fn passes_only_clusters_the_claim_could_fill() {
        let slots = ClusterSlots::new(Some(4));
        let (a, b) = (WorkKey::new("t", "a", "s1"), WorkKey::new("t", "b", "s1"));
        for _ in 0..3 {
            slots.take(&a);
        }
        slots.take(&b);
        // A claim of 2 cannot fill b (1 + 2 <= 4): only a is passed, and room agrees.
        let limit = slots.claim_limit(2).expect("limited");
        assert_eq!(limit.in_flight.len(), 1);
        assert_eq!((limit.room("t", "a"), limit.room("t", "b")), (1, 4));
        // A claim of 4 could fill either.
        assert_eq!(slots.claim_limit(4).expect("limited").in_flight.len(), 2);
    }
}
