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

/// A lease's fencing token: each claim of any key gets one greater than every token
/// issued before it, so a target (or the store) can refuse a writer whose lease was
/// taken over. Carried from the store through the runtime to the appliers; stored and
/// sent (annotations, headers) as its number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fence(i64);

impl Fence {
    pub const fn new(token: i64) -> Self {
        Fence(token)
    }

    /// The token as a number (for storage and for the wire).
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
