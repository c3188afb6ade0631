//! The row of each lease this process holds: the `id` of the key's `work` row, which a
//! claim reads, so that the completion can lock the row through the unique index on
//! `id` (a bigint) instead of the one on `(tenant, cluster, syncset)`. A key's row keeps
//! its id for as long as the key exists; a key deleted and created again has a new one,
//! and the lease of the old one is stale anyway.
//!
//! Nothing here has to be exact, only cheap and bounded: a lease not remembered is
//! completed by key (`complete::lock_rows`).
//!
//! - One entry per key, for the lease (fence) this process was last given: a new claim
//!   of the key replaces the entry of the lease it superseded, so the map never holds
//!   more entries than keys this process has claimed.
//! - An entry lives as long as the lease it describes, unless renewed ([`LEASE_CAP`] at
//!   most). A lease this process lost without completing it (the worker gave up, its
//!   renewals failed and another process took the key) is swept away once it has
//!   expired; sweeps run at most every [`SWEEP_EVERY`], on a claim (the only call that
//!   adds entries).
//! - At most [`MAX_ENTRIES`] entries: a claim that finds the map full after a sweep is
//!   not remembered, and its completion goes by key. In-flight keys per process are far
//!   fewer; the cap only stops a pathological pattern from using unbounded memory.

use crate::Fence;
use fleetsync_model::WorkKey;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Most keys remembered at once.
pub(super) const MAX_ENTRIES: usize = 65_536;
/// How often a claim sweeps out the entries of expired leases, at most.
pub(super) const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// An entry is kept at most this long after its claim or renewal, whatever the lease's
/// TTL (which also keeps `Instant + ttl` from overflowing on an absurd TTL).
pub(super) const LEASE_CAP: Duration = Duration::from_secs(3600);

/// A lease a claim took, and its key's row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Located {
    pub key: WorkKey,
    pub fence: Fence,
    /// The `id` of the key's row in `work`.
    pub id: i64,
}

struct Entry {
    fence: Fence,
    id: i64,
    /// When the lease expires, as far as this process knows (its own clock).
    until: Instant,
}

struct Map {
    entries: HashMap<WorkKey, Entry>,
    swept_at: Instant,
}

/// The rows of the leases this process holds.
pub(super) struct Locations {
    map: Mutex<Map>,
}

impl Default for Locations {
    fn default() -> Self {
        Self { map: Mutex::new(Map { entries: HashMap::new(), swept_at: Instant::now() }) }
    }
}

impl Locations {
    /// Remembers the leases a claim with a lease of `ttl` took (after it committed).
    pub fn claimed(&self, claimed: impl IntoIterator<Item = Located>, ttl: Duration) {
        let now = Instant::now();
        let until = now + ttl.min(LEASE_CAP);
        let mut map = self.lock();
        if now.duration_since(map.swept_at) >= SWEEP_EVERY {
            map.entries.retain(|_, e| e.until > now);
            map.swept_at = now;
        }
        for Located { key, fence, id } in claimed {
            if map.entries.len() >= MAX_ENTRIES && !map.entries.contains_key(&key) {
                continue;
            }
            map.entries.insert(key, Entry { fence, id, until });
        }
    }

    /// Keeps the leases a renewal (with `ttl`) extended as long as they now last. A lease
    /// not remembered (completed meanwhile, or never claimed here) stays so.
    pub fn renewed<'a>(&self, renewed: impl IntoIterator<Item = (&'a WorkKey, Fence)>, ttl: Duration) {
        let until = Instant::now() + ttl.min(LEASE_CAP);
        let mut map = self.lock();
        for (key, fence) in renewed {
            if let Some(e) = map.entries.get_mut(key).filter(|e| e.fence == fence) {
                e.until = until;
            }
        }
    }

    /// The row ids of the leases, in the given order; `None` unless every lease is
    /// remembered (the completion then locks all of them by key, in one statement).
    pub fn ids<'a>(&self, leases: impl IntoIterator<Item = (&'a WorkKey, Fence)>) -> Option<Vec<i64>> {
        let map = self.lock();
        leases.into_iter().map(|(key, fence)| map.entries.get(key).filter(|e| e.fence == fence).map(|e| e.id)).collect()
    }

    /// Forgets these leases (completed or released): a newer lease of the same key stays.
    pub fn forget<'a>(&self, leases: impl IntoIterator<Item = (&'a WorkKey, Fence)>) {
        let mut map = self.lock();
        for (key, fence) in leases {
            if map.entries.get(key).is_some_and(|e| e.fence == fence) {
                map.entries.remove(key);
            }
        }
    }

    /// How many leases are remembered.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    /// The row id of the lease on `key` with `fence`, if remembered.
    #[cfg(test)]
    pub fn get(&self, key: &WorkKey, fence: Fence) -> Option<i64> {
        self.ids([(key, fence)]).and_then(|mut h| h.pop())
    }

    fn lock(&self) -> MutexGuard<'_, Map> {
        // Every change leaves the map consistent; a panic elsewhere cannot break it.
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> WorkKey {
        WorkKey::new("t", "c", s)
    }

    fn at(s: &str, fence: i64, id: i64) -> Located {
        Located { key: key(s), fence: Fence::new(fence), id }
    }

    fn f(token: i64) -> Fence {
        Fence::new(token)
    }

    const TTL: Duration = Duration::from_secs(30);

    #[test]
    fn ids_are_given_only_when_every_lease_is_remembered() {
        let l = Locations::default();
        l.claimed([at("a", 1, 11), at("b", 2, 12)], TTL);
        let (a, b, c) = (key("a"), key("b"), key("c"));
        assert_eq!(l.ids([(&b, f(2)), (&a, f(1))]), Some(vec![12, 11]));
        assert_eq!(l.ids([(&a, f(1)), (&c, f(3))]), None, "c was never claimed here");
        assert_eq!(l.ids([(&a, f(7))]), None, "another lease of a");
        assert_eq!(l.ids([]), Some(vec![]));
    }

    #[test]
    fn a_new_claim_replaces_the_lease_it_superseded() {
        let l = Locations::default();
        l.claimed([at("a", 1, 11)], TTL);
        l.claimed([at("a", 5, 11)], TTL);
        assert_eq!(l.len(), 1);
        assert_eq!(l.get(&key("a"), f(1)), None);
        assert_eq!(l.get(&key("a"), f(5)), Some(11));
        l.forget([(&key("a"), f(1))]);
        assert_eq!(l.get(&key("a"), f(5)), Some(11), "forgetting the old lease keeps the new one");
        l.forget([(&key("a"), f(5))]);
        assert_eq!(l.len(), 0);
    }

    #[test]
    fn renewals_keep_remembered_leases_only() {
        let l = Locations::default();
        l.claimed([at("a", 1, 11)], Duration::ZERO);
        l.renewed([(&key("a"), f(1)), (&key("b"), f(2)), (&key("a"), f(0))], TTL);
        assert_eq!(l.len(), 1, "a renewal remembers nothing new (b may have been completed meanwhile)");
        let mut map = l.lock();
        map.swept_at = map.swept_at.checked_sub(SWEEP_EVERY).expect("an instant 10 s ago");
        drop(map);
        l.claimed([at("c", 3, 13)], TTL);
        assert_eq!(l.get(&key("a"), f(1)), Some(11), "renewed: not swept although claimed with no time to live");
    }

    #[test]
    fn expired_leases_are_swept_by_a_later_claim() {
        let l = Locations::default();
        l.claimed([at("a", 1, 11)], Duration::ZERO);
        let mut map = l.lock();
        map.swept_at = map.swept_at.checked_sub(SWEEP_EVERY).expect("an instant 10 s ago");
        drop(map);
        l.claimed([at("b", 2, 12)], TTL);
        assert_eq!(l.get(&key("a"), f(1)), None, "a's lease expired");
        assert_eq!(l.len(), 1);
    }

    #[test]
    fn a_full_map_remembers_no_new_keys() {
        let l = Locations::default();
        l.claimed((0..MAX_ENTRIES).map(|i| at(&format!("s{i}"), 1, i as i64)), TTL);
        l.claimed([at("new", 1, -1), at("s0", 2, 0)], TTL);
        assert_eq!(l.len(), MAX_ENTRIES);
        assert_eq!(l.get(&key("new"), f(1)), None);
        assert_eq!(l.get(&key("s0"), f(2)), Some(0), "a key already remembered is still updated");
    }
}
