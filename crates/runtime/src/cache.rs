//! Clusters and SyncSets by generation. A claim says which generation it needs; a run
//! reads the object from the store only when the cached one is older.
//!
//! Single flight per object: a claim hands out many keys of one cluster at once (its
//! SyncSets), and their runs all start together. Without it, every one of them missed
//! the cold cache and read the cluster itself (measured on the PostgreSQL drain: 86,000
//! reads of 2,000 clusters for 100,000 keys, one round trip each). Now the first run
//! reads it while the others of that object wait for that read; other objects are read
//! in parallel.
//!
//! Bounded: at most [`CACHED`] objects of each kind, the least recently used dropped
//! first (never one a run is reading), so a hub of 100,000 clusters holds the clusters
//! it is working on, not every cluster it ever reached, and a deleted one goes too.

use fleetsync_model::{Cluster, SyncSet};
use fleetsync_store::{Objects, Result, Rollouts};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

/// An object's cached version, behind the lock its readers take in turn.
type Slot<T> = Arc<tokio::sync::Mutex<Option<Arc<T>>>>;

/// Objects of each kind the cache keeps.
pub const CACHED: usize = 10_000;

#[derive(Default)]
pub struct ObjectCache {
    clusters: Slots<Cluster>,
    syncsets: Slots<SyncSet>,
    /// Kept revisions, by name and generation (they never change).
    revisions: Slots<SyncSet>,
}

impl ObjectCache {
    /// The cluster at `generation` or newer; `None` if it no longer exists.
    pub async fn cluster(
        &self,
        store: &dyn Objects,
        tenant: &str,
        name: &str,
        generation: i64,
    ) -> Result<Option<Arc<Cluster>>> {
        let fetch = || store.cluster_get(tenant, name);
        self.clusters.get(tenant, name, generation, |c| c.metadata.generation, fetch).await
    }

    /// The SyncSet at `generation` or newer; `None` if it no longer exists.
    pub async fn syncset(
        &self,
        store: &dyn Objects,
        tenant: &str,
        name: &str,
        generation: i64,
    ) -> Result<Option<Arc<SyncSet>>> {
        let fetch = || store.syncset_get(tenant, name);
        self.syncsets.get(tenant, name, generation, |s| s.metadata.generation, fetch).await
    }

    /// The SyncSet's kept revision at exactly `generation`; `None` if it is not kept.
    pub async fn revision(
        &self,
        store: &dyn Rollouts,
        tenant: &str,
        name: &str,
        generation: i64,
    ) -> Result<Option<Arc<SyncSet>>> {
        let fetch = || store.revision_get(tenant, name, generation);
        let at = format!("{name}@{generation}");
        self.revisions.get(tenant, &at, generation, |s| s.metadata.generation, fetch).await
    }
}

/// One slot per object, by tenant and name (looked up by `&str`: a run finds its
/// objects without allocating). The async lock of a slot is held across the read from
/// the store, so concurrent callers for one object wait for a single read.
struct Slots<T> {
    by_name: Mutex<ByName<T>>,
    cap: usize,
}

struct ByName<T> {
    slots: HashMap<String, HashMap<String, Entry<T>>>,
    len: usize,
    /// Counts lookups: an entry's `used` is the count at its last one.
    tick: u64,
}

struct Entry<T> {
    slot: Slot<T>,
    used: u64,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Self::with_cap(CACHED)
    }
}

impl<T> ByName<T> {
    /// Drops the least recently used entries no run holds until at most `keep` are
    /// left (or only held ones).
    fn evict_to(&mut self, keep: usize) {
        let mut idle: Vec<(u64, String, String)> = self
            .slots
            .iter()
            .flat_map(|(tenant, names)| names.iter().map(move |(name, e)| (tenant, name, e)))
            .filter(|(_, _, e)| Arc::strong_count(&e.slot) == 1)
            .map(|(tenant, name, e)| (e.used, tenant.clone(), name.clone()))
            .collect();
        idle.sort_unstable();
        for (_, tenant, name) in idle.into_iter().take(self.len.saturating_sub(keep)) {
            if let Some(names) = self.slots.get_mut(&tenant) {
                self.len -= usize::from(names.remove(&name).is_some());
                if names.is_empty() {
                    self.slots.remove(&tenant);
                }
            }
        }
    }
}

impl<T> Slots<T> {
    /// The cached object if it is at `generation` or newer; otherwise what `fetch`
    /// returns, which is cached unless the cached one is newer still (an object's
    /// generation never goes back). `None` if the object no longer exists.
    async fn get<F, Fut>(
        &self,
        tenant: &str,
        name: &str,
        generation: i64,
        gen_of: impl Fn(&T) -> i64,
        fetch: F,
    ) -> Result<Option<Arc<T>>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Option<T>>>,
    {
        let slot = self.slot(tenant, name);
        let mut cached = slot.lock().await;
        if let Some(v) = cached.as_ref().filter(|v| gen_of(v) >= generation) {
            return Ok(Some(v.clone()));
        }
        let Some(fetched) = fetch().await? else { return Ok(None) };
        let v = match cached.take() {
            Some(old) if gen_of(&old) > gen_of(&fetched) => old,
            _ => Arc::new(fetched),
        };
        *cached = Some(v.clone());
        Ok(Some(v))
    }

    fn with_cap(cap: usize) -> Self {
        Self { by_name: Mutex::new(ByName { slots: HashMap::new(), len: 0, tick: 0 }), cap: cap.max(1) }
    }

    fn slot(&self, tenant: &str, name: &str) -> Slot<T> {
        let mut by_name = self.by_name.lock().unwrap_or_else(PoisonError::into_inner);
        by_name.tick += 1;
        let tick = by_name.tick;
        if let Some(e) = by_name.slots.get_mut(tenant).and_then(|names| names.get_mut(name)) {
            e.used = tick;
            return e.slot.clone();
        }
        if by_name.len >= self.cap {
            // Down to a tenth below the cap: one sort per tenth of the cap of new objects.
            by_name.evict_to(self.cap - self.cap.div_ceil(10));
        }
        by_name.len += 1;
        let entry = Entry { slot: Slot::default(), used: tick };
        by_name.slots.entry(tenant.to_string()).or_default().entry(name.to_string()).or_insert(entry).slot.clone()
    }

    /// How many objects are cached.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.by_name.lock().unwrap_or_else(PoisonError::into_inner).len
    }
}

#[cfg(test)]
mod tests {
    use super::Slots;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// An object that is just its generation.
    fn generation(v: &i64) -> i64 {
        *v
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_misses_of_one_object_read_it_once() {
        let slots = Arc::new(Slots::<i64>::default());
        let reads = Arc::new(AtomicUsize::new(0));
        let runs = (0..50).map(|_| {
            let (slots, reads) = (slots.clone(), reads.clone());
            tokio::spawn(async move {
                let fetch = || async {
                    reads.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok(Some(3))
                };
                slots.get("t", "c1", 3, generation, fetch).await
            })
        });
        for run in runs.collect::<Vec<_>>() {
            assert_eq!(run.await.expect("run").expect("get").as_deref(), Some(&3));
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1, "50 runs of one cold cluster read it once");
    }

    #[tokio::test]
    async fn a_newer_generation_is_read_again_and_an_older_fetch_never_replaces_a_newer_one() {
        let slots = Slots::<i64>::default();
        assert_eq!(
            slots.get("t", "c", 1, generation, || async { Ok(Some(1)) }).await.expect("get").as_deref(),
            Some(&1)
        );
        // Fresh enough: not read.
        let unread = || async { panic!("a fresh object must not be read again") };
        assert_eq!(slots.get("t", "c", 1, generation, unread).await.expect("get").as_deref(), Some(&1));
        // Needs 2: read; the store has 2.
        assert_eq!(
            slots.get("t", "c", 2, generation, || async { Ok(Some(2)) }).await.expect("get").as_deref(),
            Some(&2)
        );
        // Needs 5, the read comes back older than what is cached: the cached one stays.
        assert_eq!(
            slots.get("t", "c", 5, generation, || async { Ok(Some(1)) }).await.expect("get").as_deref(),
            Some(&2)
        );
        // Other names are other objects.
        assert_eq!(
            slots.get("t", "d", 1, generation, || async { Ok(Some(7)) }).await.expect("get").as_deref(),
            Some(&7)
        );
    }

    #[tokio::test]
    async fn at_most_the_cap_is_kept_and_the_least_recently_used_goes_first() {
        let slots = Slots::<i64>::with_cap(10);
        let fetches = AtomicUsize::new(0);
        let get = |name: String| {
            let (slots, fetches) = (&slots, &fetches);
            async move {
                let fetch = || async {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    Ok(Some(1))
                };
                slots.get("t", &name, 1, generation, fetch).await.expect("get");
            }
        };
        for i in 0..100 {
            get(format!("c{i}")).await;
            // c0 is used all along: never the least recently used.
            get("c0".into()).await;
            assert!(slots.len() <= 10, "{} cached after {i}", slots.len());
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 100, "c0 was read once, each other object once");
        get("c1".into()).await;
        assert_eq!(fetches.load(Ordering::SeqCst), 101, "c1, long unused, was dropped and is read again");
    }

    #[tokio::test]
    async fn an_object_being_read_is_not_dropped() {
        let slots = Arc::new(Slots::<i64>::with_cap(2));
        let (started, release) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
        let reading = {
            let (slots, started, release) = (slots.clone(), started.clone(), release.clone());
            tokio::spawn(async move {
                let fetch = || async move {
                    started.notify_one();
                    release.notified().await;
                    Ok(Some(1))
                };
                slots.get("t", "held", 1, generation, fetch).await.expect("get")
            })
        };
        started.notified().await;
        for i in 0..10 {
            slots.get("t", &format!("c{i}"), 1, generation, || async { Ok(Some(1)) }).await.expect("get");
        }
        release.notify_one();
        assert_eq!(reading.await.expect("run").as_deref(), Some(&1));
        let unread = || async { panic!("the object read while others came and went must still be cached") };
        assert_eq!(slots.get("t", "held", 1, generation, unread).await.expect("get").as_deref(), Some(&1));
    }

    #[tokio::test]
    async fn a_deleted_object_is_none() {
        let slots = Slots::<i64>::default();
        assert!(slots.get("t", "gone", 1, generation, || async { Ok(None) }).await.expect("get").is_none());
    }
}
