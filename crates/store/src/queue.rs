//! The params and results of the work queue's operations.

use fleetsync_model::{ApplyMode, Kind, Phase, ResourceRef, Timestamp, WorkKey};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// A fencing token: issued with each lease, strictly increasing per key (the backends
/// draw them from one store-wide sequence, so they keep increasing even when a key is
/// deleted and created again).
pub use fleetsync_model::Fence;

/// What happened to one applied document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApplyOutcome {
    pub kind: Kind,
    pub tenant: String,
    pub name: String,
    pub generation: i64,
    /// `created`, `updated` or `unchanged`.
    pub result: &'static str,
    /// How many keys this change enqueued.
    pub enqueued: u64,
}

#[derive(Debug, Clone)]
pub struct ClaimParams {
    /// Who claims (a worker id); recorded on the lease.
    pub owner: String,
    /// At most this many keys.
    pub limit: usize,
    /// How long the lease lasts unless renewed.
    pub lease_ttl: Duration,
    /// Holds back ready keys of clusters that already have this many in flight.
    pub cluster_limit: Option<ClusterLimit>,
    /// Only keys of these shards (see `fleetsync_model::shard`); `None`: every shard.
    pub shards: Option<Vec<u16>>,
}

impl ClaimParams {
    /// A claim with no per-cluster limit.
    pub fn new(owner: impl Into<String>, limit: usize, lease_ttl: Duration) -> Self {
        Self { owner: owner.into(), limit, lease_ttl, cluster_limit: None, shards: None }
    }
}

/// A worker process's heartbeat: it is alive until `now + ttl`.
#[derive(Debug, Clone)]
pub struct MemberBeat {
    pub id: String,
    pub ttl: Duration,
    /// Keys it has in flight, for `get members`.
    pub in_flight: u64,
    /// The most it may have in flight, so that readers see how full it is.
    pub max_in_flight: u64,
}

pub use fleetsync_model::Member;

/// A per-cluster concurrency limit, so that one cluster (a slow one, or one with many
/// SyncSets) cannot take every slot of a claimer. Ready keys of a cluster beyond the
/// limit stay ready, in order, for a later claim; keys whose lease expired are taken
/// over regardless (they have waited longest).
#[derive(Debug, Clone, Default)]
pub struct ClusterLimit {
    /// At most this many keys of one cluster in flight at the claimer.
    pub max: u32,
    /// The claimer's keys in flight now, by (tenant, cluster); absent means none.
    pub in_flight: HashMap<(String, String), u32>,
}

impl ClusterLimit {
    /// How many of a cluster's keys this claim may still take.
    pub fn room(&self, tenant: &str, cluster: &str) -> u32 {
        let busy = self.in_flight.get(&(tenant.to_string(), cluster.to_string())).copied().unwrap_or(0);
        self.max.saturating_sub(busy)
    }

    /// How many ready keys a claim of `limit` looks at, at most, to find keys of
    /// clusters with room: enough to pass a few crowded clusters, bounded so a claim
    /// stays cheap.
    pub fn window(limit: i64) -> i64 {
        limit.saturating_mul(16).max(1024)
    }

    /// A first, narrow look: as many keys as the batch (64 at least), enough when none
    /// is held back, which is the usual case. A backend may try this first and look
    /// through [`window`](Self::window) only when the narrow window filled up with
    /// held-back keys.
    pub fn narrow_window(limit: i64) -> i64 {
        limit.max(64)
    }

    /// Counts `claimed` keys as in flight too, for a second claim in the same call.
    pub fn count(&mut self, claimed: &[ClaimedItem]) {
        for item in claimed {
            *self.in_flight.entry((item.key.tenant.clone(), item.key.cluster.clone())).or_default() += 1;
        }
    }
}

/// A key handed to a worker.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedItem {
    pub key: WorkKey,
    pub fence: Fence,
    /// Apply the SyncSet (true) or remove what it applied (false).
    pub desired: bool,
    /// The SyncSet generation the latest change asked for.
    pub generation: i64,
    /// The cluster's current generation (0 if it is gone), for caching it safely.
    pub cluster_generation: i64,
    pub apply_mode: ApplyMode,
    /// Resources applied by the last successful run, for Sync-mode deletion.
    pub inventory: Vec<ResourceRef>,
    /// This attempt's number for the current generation (1 = first).
    pub attempt: u32,
    /// Whether the key was claimed from a lease that had expired (its holder died, or
    /// stalled past its lease): a take-over, rather than a claim of a ready key.
    pub taken_over: bool,
    /// When the oldest change this run applies was asked for, on the store's clock: the
    /// start of its change latency. Kept with the key by one rule in both backends:
    /// - a change that makes the key dirty (an apply, a delete, a retry) records its
    ///   time as `pending_since` unless an earlier unclaimed change did;
    /// - a claim moves `pending_since` into `running_since`, except a claim that runs the
    ///   same change again (after a failed attempt, or taking over an expired lease:
    ///   attempts above 0), which keeps `running_since`;
    /// - a resync records no change: its runs carry none.
    ///
    /// `None` when the run applies no change (a resync, a key claimed before the store
    /// kept these times).
    pub changed_at: Option<Timestamp>,
}

#[derive(Debug, Clone)]
pub struct RenewParams {
    pub leases: Vec<(WorkKey, Fence)>,
    pub lease_ttl: Duration,
}

/// How a write's transaction ends: `Yes` commits it; `No` runs it whole — every check,
/// every decision, the outcomes — and then rolls it back, so nothing it wrote, logged or
/// enqueued remains and no one is woken (a server-side dry run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Commit {
    Yes,
    No,
}

/// Who makes an own write ([`Store::objects_apply_own`](crate::Store::objects_apply_own)):
/// the key a reconciler holds and the fencing token of its lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnWrite {
    pub key: WorkKey,
    pub fence: Fence,
}

pub use fleetsync_policy::completion::{CompleteOutcome, Completion, RunOutcome};

/// Which keys a status query returns; `None` matches all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusFilter {
    pub tenant: Option<String>,
    pub cluster: Option<String>,
    pub syncset: Option<String>,
    /// Keys in one of these phases (empty: any phase).
    pub phases: Vec<Phase>,
    /// Only keys that have not applied the generation their SyncSet asks for
    /// (`observedGeneration != generation`).
    pub stale: bool,
}

/// Saturation and lag of the queue, for metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QueueStats {
    /// Number of keys in each phase.
    pub by_phase: BTreeMap<Phase, u64>,
    /// The same per `(tenant, syncset)`: every SyncSet with keys, each phase present.
    pub by_syncset: BTreeMap<(String, String), BTreeMap<Phase, u64>>,
    /// How long the oldest claimable key has been waiting (zero if none waits).
    pub oldest_ready_age: Duration,
    /// The newest event's sequence number.
    pub last_event_seq: u64,
}

impl QueueStats {
    /// Keys still to be worked on: pending, applying, or failed and waiting to retry
    /// (not applied, not parked).
    pub fn unsettled(&self) -> u64 {
        [Phase::Pending, Phase::Applying, Phase::Failed]
            .iter()
            .map(|p| self.by_phase.get(p).copied().unwrap_or(0))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsettled_keys_are_pending_applying_or_failed() {
        let by_phase =
            [(Phase::Pending, 1), (Phase::Applying, 2), (Phase::Applied, 40), (Phase::Failed, 3), (Phase::Parked, 5)];
        let stats = QueueStats { by_phase: by_phase.into(), ..QueueStats::default() };
        assert_eq!(stats.unsettled(), 6, "applied and parked keys are settled");
        assert_eq!(QueueStats::default().unsettled(), 0);
    }
}
