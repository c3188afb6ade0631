//! How far a SyncSet is, the one way every view reads it: `describe`, `get syncsets`,
//! the SyncSet status route, the dashboard, `wait` and the Kubernetes source's
//! conditions all show this value, computed once by the store
//! (`fleetsync_store::progress`).
//!
//! Keys are counted by the generation each is *told* to run: during a staged rollout
//! some clusters are told the SyncSet's current generation and the others are held at
//! the stable one, and only the first count towards "applied at the current
//! generation".

use crate::rollout::RolloutPhase;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a SyncSet is or is not applied, as its condition's reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProgressReason {
    /// Every cluster it selects applied its current generation (its rollout, if any,
    /// completed).
    Applied,
    /// Some clusters have not applied the current generation yet; none failed.
    Progressing,
    /// A rollout holds some clusters at the stable generation while it goes step by step.
    RollingOut,
    /// A key failed or is parked.
    Degraded,
    /// It selects no cluster, so nothing is applied anywhere.
    NoClusters,
    /// The current generation's rollout rolled back: every cluster runs the stable one.
    RolledBack,
    /// The current generation's rollout failed a gate and stopped (`onFailure: Pause`).
    RolloutFailed,
    /// The current generation's rollout was paused by an operator.
    RolloutPaused,
}

impl ProgressReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Applied => "Applied",
            Self::Progressing => "Progressing",
            Self::RollingOut => "RollingOut",
            Self::Degraded => "Degraded",
            Self::NoClusters => "NoClusters",
            Self::RolledBack => "RolledBack",
            Self::RolloutFailed => "RolloutFailed",
            Self::RolloutPaused => "RolloutPaused",
        }
    }

    /// Whether waiting longer cannot make the SyncSet applied without someone acting
    /// (a rollback, a failed rollout): `wait` stops at once.
    pub fn is_final(self) -> bool {
        matches!(self, Self::RolledBack | Self::RolloutFailed)
    }
}

impl fmt::Display for ProgressReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The rollout of the current generation, in short, while it holds clusters back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutBrief {
    pub phase: RolloutPhase,
    /// 0-based index of the current step.
    pub step: usize,
    /// How many steps the rollout has.
    pub steps: usize,
    /// The generation being rolled out.
    pub revision: i64,
    /// The generation held clusters run.
    pub stable: i64,
    /// What the current step waits for (`waiting for promote`...), while progressing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// Why it failed, rolled back or stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How far a SyncSet is: its keys counted by the generation each is told to run, and
/// the condition that follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncSetProgress {
    /// The SyncSet's current generation.
    pub generation: i64,
    /// Clusters it selects now (each has a key).
    pub clusters: u64,
    /// Names in `clusterNames` with no such cluster in the tenant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_clusters: Vec<String>,
    /// Keys told to run the current generation.
    pub current: u64,
    /// Of those, the ones that applied it (phase `Applied`, observed generation = current).
    pub applied: u64,
    /// Keys a rollout holds at another generation (`held_at`).
    pub held: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_at: Option<i64>,
    /// Keys whose last run failed (retrying) or that are parked.
    pub failed: u64,
    /// `true` only when every selected cluster applied the current generation.
    pub done: bool,
    pub reason: ProgressReason,
    /// The condition in words, e.g. `2 of 6 clusters at generation 2, 4 held at
    /// generation 1 by the rollout (step 1 of 3, waiting for promote)`.
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutBrief>,
}
