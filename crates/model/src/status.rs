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
    /// For a templated SyncSet, the hash of what its last good run applied to the
    /// cluster (the rendering at `observedGeneration`), as `fleetsync render` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendered_hash: Option<String>,
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
    /// Whether the cluster answers, by its keys' latest attempts ([`reachability`]);
    /// absent while none of its keys has told (none applied, none failed to reach it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reachability: Option<Reachability>,
    pub syncsets: Vec<KeyStatus>,
}

/// A cluster's reachability condition ([`reachability`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reachability {
    pub state: Reach,
    /// `Unreachable`: since when, at the latest — the earliest time among the failing
    /// keys' latest failed attempts (it may have started before: a key's first failure
    /// is not kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<Timestamp>,
    /// `Unreachable`: the cause, as the newest failing key's error says it from its
    /// `unreachable:` (or `timed out:`) on: the address tried and the innermost cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reach {
    Reachable,
    Unreachable,
}

/// Where a key's error says that its target could not be reached (the applier's
/// `unreachable:` and `timed out:` errors, at the start or after the resource they
/// stopped at); the error from there on.
pub fn unreachable_cause(error: &str) -> Option<&str> {
    const CLASSES: [&str; 2] = ["unreachable: ", "timed out: "];
    let is_class = |text: &str| CLASSES.iter().any(|c| text.starts_with(c));
    if is_class(error) {
        return Some(error);
    }
    // `RESOURCE: ERROR` or `deleting RESOURCE: ERROR`; a resource names no `: `.
    error.split_once(": ").map(|(_, rest)| rest).filter(|rest| is_class(rest))
}

/// A cluster's reachability from its keys' latest attempts; the one rule every view
/// uses. A key whose latest attempt failed (it has an error and is not `Applied`) with
/// an [`unreachable_cause`] says the cluster did not answer at its `updatedAt`; a key's
/// last success (`lastAppliedAt`) says it answered then. The newest word wins:
/// `Unreachable` if no key succeeded after the newest such failure, since the
/// earliest of the failures newer than the last success; `Reachable` if a key succeeded
/// after it, or none fails so and some key succeeded; `None` when no key has told.
pub fn reachability(keys: &[KeyStatus]) -> Option<Reachability> {
    let last_success = keys.iter().filter_map(|k| k.last_applied_at).max();
    let failing: Vec<(&KeyStatus, &str)> = keys
        .iter()
        .filter(|k| k.phase != Phase::Applied)
        .filter_map(|k| Some((k, unreachable_cause(k.last_error.as_deref()?)?)))
        .filter(|(k, _)| last_success.is_none_or(|s| k.updated_at > s))
        .collect();
    let Some((newest, cause)) = failing.iter().max_by_key(|(k, _)| k.updated_at) else {
        return last_success.map(|_| Reachability { state: Reach::Reachable, since: None, message: None });
    };
    let since = failing.iter().map(|(k, _)| k.updated_at).min().unwrap_or(newest.updated_at);
    Some(Reachability { state: Reach::Unreachable, since: Some(since), message: Some((*cause).to_string()) })
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
                message: format!(
                    "{failed} failed, {parked} parked of {} SyncSets{}",
                    syncsets.len(),
                    detail.unwrap_or_default()
                ),
            }
        } else if applied == syncsets.len() {
            ClusterCondition {
                ready: true,
                reason: "Converged".into(),
                message: format!("{applied} of {desired} SyncSets applied"),
            }
        } else {
            ClusterCondition {
                ready: false,
                reason: "Progressing".into(),
                message: format!("{applied} of {desired} SyncSets applied"),
            }
        };
        let reachability = reachability(&syncsets);
        Self { tenant: tenant.into(), cluster: cluster.into(), condition, reachability, syncsets }
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

/// A key's status for tests: generation 1 applied, no attempts, no error, nothing else.
#[cfg(test)]
pub(crate) fn key_status(key: WorkKey, phase: Phase) -> KeyStatus {
    KeyStatus {
        key,
        phase,
        desired: true,
        generation: 1,
        observed_generation: 1,
        attempts: 0,
        last_error: None,
        resources: vec![],
        next_attempt_at: None,
        last_applied_at: None,
        updated_at: Timestamp(0),
        rendered_hash: None,
        drift: vec![],
        unready: vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str, phase: Phase) -> KeyStatus {
        let mut key = key_status(WorkKey::new("t", "c", s), phase);
        key.last_error = (phase == Phase::Parked).then(|| "boom".to_string());
        key
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

    const REFUSED: &str =
        "unreachable: https://10.0.0.5:6443/api/v1: client error (Connect): tcp connect error: Connection refused";

    fn applied(s: &str, at: i64) -> KeyStatus {
        KeyStatus { last_applied_at: Some(Timestamp(at)), updated_at: Timestamp(at), ..key(s, Phase::Applied) }
    }

    fn failing(s: &str, phase: Phase, error: &str, at: i64, last_applied: Option<i64>) -> KeyStatus {
        KeyStatus {
            attempts: 2,
            last_error: Some(error.into()),
            updated_at: Timestamp(at),
            last_applied_at: last_applied.map(Timestamp),
            ..key(s, phase)
        }
    }

    fn unreachable(since: i64, message: &str) -> Option<Reachability> {
        Some(Reachability { state: Reach::Unreachable, since: Some(Timestamp(since)), message: Some(message.into()) })
    }

    const REACHABLE: Option<Reachability> = Some(Reachability { state: Reach::Reachable, since: None, message: None });

    #[test]
    fn the_class_of_an_error() {
        assert_eq!(unreachable_cause(&format!("v1/ConfigMap apps/a: {REFUSED}")), Some(REFUSED));
        assert_eq!(unreachable_cause(&format!("deleting v1/ConfigMap apps/a: {REFUSED}")), Some(REFUSED));
        assert_eq!(unreachable_cause(REFUSED), Some(REFUSED));
        let timeout = "timed out: http://127.0.0.1:5/api/v1: no answer within 300 ms";
        assert_eq!(unreachable_cause(&format!("v1/ConfigMap apps/a: {timeout}")), Some(timeout));
        for other in [
            "v1/ConfigMap apps/a: forbidden: egress to 127.0.0.1 is denied",
            "v1/ConfigMap apps/a: transient: 500",
            "boom",
        ] {
            assert_eq!(unreachable_cause(other), None, "{other}");
        }
    }

    #[test]
    fn reachability_by_the_newest_attempts() {
        assert_eq!(reachability(&[]), None, "no key has told");
        assert_eq!(reachability(&[key("a", Phase::Pending)]), None);
        assert_eq!(reachability(&[applied("a", 10), applied("b", 20)]), REACHABLE);

        // Failing since the oldest of the failing keys' latest attempts; the message is
        // the newest failure's cause.
        let timeout = "timed out: https://10.0.0.5:6443/api/v1: no answer within 30000 ms";
        let keys = [
            applied("a", 10),
            failing("b", Phase::Failed, &format!("v1/ConfigMap apps/b: {REFUSED}"), 30, Some(5)),
            failing("c", Phase::Parked, &format!("v1/ConfigMap apps/c: {timeout}"), 40, None),
        ];
        assert_eq!(reachability(&keys), unreachable(30, timeout));

        // A key that succeeded after the newest failure: reachable again.
        let back = [keys[1].clone(), keys[2].clone(), applied("a", 50)];
        assert_eq!(reachability(&back), REACHABLE);

        // A success between failures: failing only since the first failure after it.
        let again = [
            failing("b", Phase::Failed, REFUSED, 30, None),
            applied("a", 35),
            failing("c", Phase::Applying, &format!("x: {REFUSED}"), 40, Some(1)),
        ];
        assert_eq!(reachability(&again), unreachable(40, REFUSED));

        // Errors the target itself gave (or the hub's own refusal) say nothing against it.
        let other =
            [applied("a", 10), failing("b", Phase::Parked, "x: forbidden: egress to 10.0.0.5 is denied", 30, None)];
        assert_eq!(reachability(&other), REACHABLE);
        assert_eq!(reachability(&[failing("b", Phase::Failed, "x: invalid: 422", 30, None)]), None);
    }

    #[test]
    fn roll_up_fills_reachability_and_json_says_it_in_camel_case() {
        let c = ClusterStatus::roll_up(
            "t",
            "c",
            vec![failing("b", Phase::Failed, &format!("x: {REFUSED}"), 1_700_000_000_000, None)],
        );
        let json = serde_json::to_value(&c).expect("json");
        assert_eq!(json["reachability"]["state"], "Unreachable");
        assert_eq!(json["reachability"]["message"], REFUSED);
        assert!(json["reachability"]["since"].is_string(), "{json}");
        let ok = serde_json::to_value(ClusterStatus::roll_up("t", "c", vec![applied("a", 1)])).expect("json");
        assert_eq!(ok["reachability"], serde_json::json!({"state": "Reachable"}));
        let unknown =
            serde_json::to_value(ClusterStatus::roll_up("t", "c", vec![key("a", Phase::Pending)])).expect("json");
        assert!(unknown.get("reachability").is_none(), "{unknown}");
    }
}
