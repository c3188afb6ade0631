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

/// What the `syncset` of a source's key starts with.
const SOURCE: &str = "source:";
/// What the `syncset` of a notifier's key starts with.
const NOTIFIER: &str = "notifier:";

impl WorkKey {
    pub fn new(tenant: impl Into<String>, cluster: impl Into<String>, syncset: impl Into<String>) -> Self {
        Self { tenant: tenant.into(), cluster: cluster.into(), syncset: syncset.into() }
    }

    /// The key of fetching the `GitRepository` `name`: `source:<name>` as both its
    /// cluster and its SyncSet. No Cluster or SyncSet name holds a `:`, so no planning,
    /// selector or view of theirs ever takes it for theirs, and shards spread sources
    /// by name.
    pub fn source(tenant: impl Into<String>, name: &str) -> Self {
        let id = format!("{SOURCE}{name}");
        Self { tenant: tenant.into(), cluster: id.clone(), syncset: id }
    }

    /// The source this key fetches, if it is a [source's key](Self::source).
    pub fn source_name(&self) -> Option<&str> {
        source_part(&self.syncset).filter(|_| self.cluster == self.syncset)
    }

    /// The key of delivering the events of the `Notifier` `name`: `notifier:<name>` as
    /// both its cluster and its SyncSet, as a [source's key](Self::source) is named.
    pub fn notifier(tenant: impl Into<String>, name: &str) -> Self {
        let id = format!("{NOTIFIER}{name}");
        Self { tenant: tenant.into(), cluster: id.clone(), syncset: id }
    }

    /// The notifier this key delivers for, if it is a [notifier's key](Self::notifier).
    pub fn notifier_name(&self) -> Option<&str> {
        notifier_part(&self.syncset).filter(|_| self.cluster == self.syncset)
    }
}

/// The notifier a key's cluster or SyncSet part names, if it is a notifier's
/// (`notifier:NAME`, see [`WorkKey::notifier`]).
pub fn notifier_part(part: &str) -> Option<&str> {
    part.strip_prefix(NOTIFIER)
}

/// The source a key's cluster or SyncSet part names, if it is a source's
/// (`source:NAME`, see [`WorkKey::source`]).
pub fn source_part(part: &str) -> Option<&str> {
    part.strip_prefix(SOURCE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sources_key_is_told_apart_from_every_syncsets() {
        let key = WorkKey::source("t", "fleet");
        assert_eq!(key.source_name(), Some("fleet"));
        assert_eq!(WorkKey::new("t", "c1", "fleet").source_name(), None);
        // A SyncSet key whose names could not be a Cluster's and a SyncSet's at once.
        assert_eq!(WorkKey::new("t", "c1", "source:fleet").source_name(), None);
        let key = WorkKey::notifier("t", "ops");
        assert_eq!((key.notifier_name(), key.source_name()), (Some("ops"), None));
        assert_eq!(WorkKey::source("t", "ops").notifier_name(), None);
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
