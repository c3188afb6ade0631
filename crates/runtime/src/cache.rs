//! Clusters and SyncSets by generation. A claim says which generation it needs; a run
//! reads the object from the store only when the cached one is older.

use fleetsync_model::{Cluster, SyncSet};
use fleetsync_store::{Result, Store};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

type Name = (String, String);

#[derive(Default)]
pub struct ObjectCache {
    clusters: Mutex<HashMap<Name, Arc<Cluster>>>,
    syncsets: Mutex<HashMap<Name, Arc<SyncSet>>>,
}

impl ObjectCache {
    /// The cluster at `generation` or newer; `None` if it no longer exists.
    pub async fn cluster(&self, store: &dyn Store, tenant: &str, name: &str, generation: i64) -> Result<Option<Arc<Cluster>>> {
        let key = (tenant.to_string(), name.to_string());
        if let Some(c) = fresh(&self.clusters, &key, generation, |c| c.metadata.generation) {
            return Ok(Some(c));
        }
        let Some(c) = store.cluster_get(tenant, name).await? else { return Ok(None) };
        Ok(Some(remember(&self.clusters, key, c, |c| c.metadata.generation)))
    }

    /// The SyncSet at `generation` or newer; `None` if it no longer exists.
    pub async fn syncset(&self, store: &dyn Store, tenant: &str, name: &str, generation: i64) -> Result<Option<Arc<SyncSet>>> {
        let key = (tenant.to_string(), name.to_string());
        if let Some(s) = fresh(&self.syncsets, &key, generation, |s| s.metadata.generation) {
            return Ok(Some(s));
        }
        let Some(s) = store.syncset_get(tenant, name).await? else { return Ok(None) };
        Ok(Some(remember(&self.syncsets, key, s, |s| s.metadata.generation)))
    }
}

fn fresh<T>(map: &Mutex<HashMap<Name, Arc<T>>>, key: &Name, generation: i64, gen_of: impl Fn(&T) -> i64) -> Option<Arc<T>> {
    let map = map.lock().unwrap_or_else(PoisonError::into_inner);
    map.get(key).filter(|v| gen_of(v) >= generation).cloned()
}

/// Keeps the newer of the cached and the fetched object (a slower fetch may return an
/// older one than a concurrent faster one).
fn remember<T>(map: &Mutex<HashMap<Name, Arc<T>>>, key: Name, v: T, gen_of: impl Fn(&T) -> i64) -> Arc<T> {
    let mut map = map.lock().unwrap_or_else(PoisonError::into_inner);
    let v = Arc::new(v);
    match map.get(&key) {
        Some(old) if gen_of(old) > gen_of(&v) => old.clone(),
        _ => {
            map.insert(key, v.clone());
            v
        }
    }
}
