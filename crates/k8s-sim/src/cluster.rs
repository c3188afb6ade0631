//! The simulated clusters: each with its own lock, created on first use.
//!
//! State is per cluster (objects, fencing record, faults behind one `Mutex`), so
//! requests to different clusters never wait for each other, and no lock is held
//! across the simulated latency: a request locks to begin, sleeps unlocked, and locks
//! again to commit.

use crate::faults::Faults;
use crate::objects::ObjectStore;
use crate::record::{Record, RunId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;
use tokio::time::Instant;

/// What one cluster holds.
#[derive(Debug, Default)]
pub struct ClusterState {
    pub objects: ObjectStore,
    pub record: Record,
    pub faults: Faults,
}

/// One simulated cluster.
#[derive(Debug, Default)]
pub struct Cluster {
    state: Mutex<ClusterState>,
}

impl Cluster {
    pub fn lock(&self) -> MutexGuard<'_, ClusterState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every cluster that has been used, by name.
#[derive(Debug, Default)]
pub struct Clusters {
    by_name: RwLock<HashMap<Box<str>, Arc<Cluster>>>,
}

impl Clusters {
    /// The cluster `name`, created if new (the caller checked the name).
    pub fn get_or_create(&self, name: &str) -> Arc<Cluster> {
        if let Some(c) = self.by_name.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            return c.clone();
        }
        let mut map = self.by_name.write().unwrap_or_else(PoisonError::into_inner);
        map.entry(name.into()).or_default().clone()
    }

    /// The cluster `name`, if it has been used.
    pub fn get(&self, name: &str) -> Option<Arc<Cluster>> {
        self.by_name.read().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
    }

    /// Every cluster, by name (a snapshot; reports walk it without the map lock).
    pub fn all(&self) -> Vec<(String, Arc<Cluster>)> {
        let map = self.by_name.read().unwrap_or_else(PoisonError::into_inner);
        map.iter().map(|(n, c)| (n.to_string(), c.clone())).collect()
    }
}

/// Whether `name` is a DNS-1123 label, as cluster names must be.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    let inner_ok = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-';
    let edge_ok = |c: Option<&u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    b.len() <= 63 && b.iter().all(inner_ok) && edge_ok(b.first()) && edge_ok(b.last())
}

/// A fenced request in flight. Closing it records its end; if the request is
/// dropped first (the client went away, or timed out), dropping the guard records
/// it, so an abandoned request never stays "in flight" and fakes later overlaps.
#[derive(Debug)]
pub struct Flight {
    cluster: Arc<Cluster>,
    key: String,
    run: RunId,
    latency: Duration,
    open: bool,
}

impl Flight {
    pub fn new(cluster: Arc<Cluster>, key: String, run: RunId, latency: Duration) -> Self {
        Self { cluster, key, run, latency, open: true }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn fence(&self) -> i64 {
        self.run.fence
    }

    /// Records the end in `state` (the caller holds the cluster's lock); returns
    /// the newest token seen for the key.
    pub fn close(mut self, state: &mut ClusterState) -> i64 {
        self.open = false;
        state.record.end(&self.key, self.run, self.latency, Instant::now())
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if self.open {
            let now = Instant::now();
            self.cluster.lock().record.end(&self.key, self.run, self.latency, now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_labels() {
        for ok in ["c1", "cluster-0001", "a"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"a".repeat(64)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }

    #[test]
    fn clusters_are_created_once() {
        let cs = Clusters::default();
        let a = cs.get_or_create("c1");
        assert!(Arc::ptr_eq(&a, &cs.get_or_create("c1")));
        assert_eq!(cs.all().len(), 1);
    }
}
