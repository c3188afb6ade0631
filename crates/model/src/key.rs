//! The unit of work: one SyncSet applied to one cluster, in one tenant.

use serde::{Deserialize, Serialize};
use std::fmt;

/// `(tenant, cluster, syncset)`. A key is held by at most one worker at a time, and
/// at most one run of it is pending (see the store's queue).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkKey {
    pub tenant: String,
    pub cluster: String,
    pub syncset: String,
}

impl WorkKey {
    pub fn new(tenant: impl Into<String>, cluster: impl Into<String>, syncset: impl Into<String>) -> Self {
        Self { tenant: tenant.into(), cluster: cluster.into(), syncset: syncset.into() }
    }
}

impl fmt::Display for WorkKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.tenant, self.cluster, self.syncset)
    }
}
