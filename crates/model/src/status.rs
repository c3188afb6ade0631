//! Status as users see it: per key (one SyncSet on one cluster) and rolled up per
//! cluster. Status is written by the runtime and never bumps a generation.

use crate::key::WorkKey;
use crate::manifest::ResourceRef;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};

/// Where a key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Phase {
    /// Waiting to be claimed.
    Pending,
    /// Held by a worker that is applying it.
    Applying,
    /// The latest run succeeded and nothing newer is pending.
    Applied,
    /// The last run failed; a retry is scheduled (`nextAttemptAt`).
    Failed,
    /// Failed `maxAttempts` times; waits for a change, a resync or an explicit retry.
    Parked,
}

impl Phase {
    pub const ALL: [Phase; 5] = [Phase::Pending, Phase::Applying, Phase::Applied, Phase::Failed, Phase::Parked];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Applying => "Applying",
            Phase::Applied => "Applied",
            Phase::Failed => "Failed",
            Phase::Parked => "Parked",
        }
    }

    /// The phase named `s` (as [`as_str`](Phase::as_str) writes it).
    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == s)
    }
}

/// What happened to one resource in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResourceOutcome {
    Applied,
    Failed,
    /// Not attempted because an earlier resource failed.
    Skipped,
    /// Deleted from the target (Sync mode, removed from the SyncSet).
    Deleted,
}

/// One resource's result in a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceResult {
    pub resource: ResourceRef,
    pub outcome: ResourceOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// How long the apply took, in milliseconds.
    pub duration_ms: u32,
}

/// Status of one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyStatus {
    #[serde(flatten)]
    pub key: WorkKey,
    pub phase: Phase,
    /// Whether the SyncSet should be on the cluster (false while its resources are
    /// being removed because the SyncSet was deleted or no longer selects the cluster).
    pub desired: bool,
    /// The SyncSet generation the key is to run: the latest, or the one a rollout holds
    /// it at (its stable revision, until the rollout reaches the cluster).
    pub generation: i64,
    /// The SyncSet generation last applied successfully (0 = never).
    pub observed_generation: i64,
    /// Attempts of the current generation (reset by a change).
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Per-resource results of the last run.
    #[serde(default)]
    pub resources: Vec<ResourceResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_applied_at: Option<Timestamp>,
    pub updated_at: Timestamp,
    /// Resources whose live state (as the cluster's agent last reported it) differs
    /// from what this key applies. A drift enqueues the key again (self-healing).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drift: Vec<Drift>,
    /// Applied objects that the cluster's agent reports as not ready yet (a Deployment
    /// not rolled out, a Job not succeeded): a rollout's health gate waits for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unready: Vec<Unready>,
}

/// An applied object that is not ready yet, by the built-in readiness rules
/// ([`crate::readiness`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Unready {
    pub resource: ResourceRef,
    /// What is missing, e.g. `Deployment: 1 of 3 replicas updated`.
    pub reason: String,
}

/// One resource that drifted from what its key applies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Drift {
    pub resource: ResourceRef,
    /// `deleted`, or the first field that differs (e.g. `data.k`).
    pub reason: String,
    /// The live version that showed the drift.
    pub resource_version: String,
}

/// The roll-up condition of a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterCondition {
    /// `Ready` is true when every SyncSet is applied at its latest generation.
    pub ready: bool,
    /// `Converged`, `Progressing` or `Degraded`.
    pub reason: String,
    pub message: String,
}

/// Status of a cluster: its condition and the status of each SyncSet on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    pub tenant: String,
    pub cluster: String,
    pub condition: ClusterCondition,
    pub syncsets: Vec<KeyStatus>,
}

impl ClusterStatus {
    /// Rolls the keys of one cluster up into a condition.
    pub fn roll_up(tenant: &str, cluster: &str, syncsets: Vec<KeyStatus>) -> Self {
        let count = |p: Phase| syncsets.iter().filter(|k| k.phase == p).count();
        let (failed, parked) = (count(Phase::Failed), count(Phase::Parked));
        let applied = syncsets.iter().filter(|k| k.phase == Phase::Applied && k.desired).count();
        let desired = syncsets.iter().filter(|k| k.desired).count();
        let condition = if failed + parked > 0 {
            let first = syncsets.iter().find(|k| matches!(k.phase, Phase::Failed | Phase::Parked));
            let detail = first.map(|k| format!("; {}: {}", k.key.syncset, k.last_error.as_deref().unwrap_or("failed")));
            ClusterCondition {
                ready: false,
                reason: "Degraded".into(),
                message: format!("{failed} failed, {parked} parked of {} SyncSets{}", syncsets.len(), detail.unwrap_or_default()),
            }
        } else if applied == syncsets.len() {
            ClusterCondition { ready: true, reason: "Converged".into(), message: format!("{applied} of {desired} SyncSets applied") }
        } else {
            ClusterCondition {
                ready: false,
                reason: "Progressing".into(),
                message: format!("{applied} of {desired} SyncSets applied"),
            }
        };
        Self { tenant: tenant.into(), cluster: cluster.into(), condition, syncsets }
    }
}

/// A tenant's clusters counted by their roll-up condition ([`ClusterStatus::roll_up`]),
/// from counts the store keeps per cluster: clusters with at least one key, each in
/// exactly one of the three; and, across them, the stale ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterConditions {
    /// Every key applied, none being removed (`Converged`).
    pub ready: u64,
    /// No key failed or parked, some not applied yet (`Progressing`).
    pub progressing: u64,
    /// Some key failed or parked (`Degraded`).
    pub degraded: u64,
    /// Clusters with no sign of life for the stale-after window: neither a successful
    /// run nor a report from their agent in it (or since their first key, when none
    /// ever came). Each is also counted in one of the three above.
    #[serde(default)]
    pub stale: u64,
}

/// What a group of keys (a SyncSet's, on every cluster) sums to: counts by phase, how
/// many applied the current generation, the oldest wait, and the first failures. Read
/// from the store in one grouped query, without listing the keys.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusSummary {
    pub total: u64,
    /// Every phase, with 0 where no key is in it.
    pub phases: std::collections::BTreeMap<Phase, u64>,
    /// Keys whose observed generation is the one their SyncSet asks for now.
    pub at_generation: u64,
    /// Since when the longest-waiting key not yet applied (Pending, Failed or Applying)
    /// has waited (its last change); absent when none waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oldest_pending_since: Option<Timestamp>,
    /// The first failed or parked keys (by cluster), with their reasons.
    #[serde(default)]
    pub failures: Vec<KeyFailure>,
}

/// A failed or parked key, as a summary shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyFailure {
    /// The key's SyncSet, in a tenant's summary (a SyncSet's names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syncset: Option<String>,
    pub cluster: String,
    pub phase: Phase,
    pub attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str, phase: Phase) -> KeyStatus {
        KeyStatus {
            key: WorkKey::new("t", "c", s),
            phase,
            desired: true,
            generation: 1,
            observed_generation: 1,
            attempts: 0,
            last_error: (phase == Phase::Parked).then(|| "boom".to_string()),
            resources: vec![],
            next_attempt_at: None,
            last_applied_at: None,
            updated_at: Timestamp(0),
            drift: vec![],
            unready: vec![],
        }
    }

    #[test]
    fn roll_up_reasons() {
        let ok = ClusterStatus::roll_up("t", "c", vec![key("a", Phase::Applied), key("b", Phase::Applied)]);
        assert!(ok.condition.ready);
        assert_eq!(ok.condition.reason, "Converged");
        let busy = ClusterStatus::roll_up("t", "c", vec![key("a", Phase::Applied), key("b", Phase::Applying)]);
        assert_eq!(busy.condition.reason, "Progressing");
        let bad = ClusterStatus::roll_up("t", "c", vec![key("a", Phase::Parked), key("b", Phase::Applying)]);
        assert_eq!(bad.condition.reason, "Degraded");
        assert!(bad.condition.message.contains("a: boom"), "{}", bad.condition.message);
    }
}
