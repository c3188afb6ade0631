//! What a progressive rollout does next, the same in every backend.
//!
//! A backend reads what a decision needs (the SyncSet's `spec.rollout`, the stored
//! [`RolloutState`], the clusters the SyncSet selects with their keys, the time and an
//! operator's control, if any), asks [`decide`], and writes the answer: the new state
//! and the keys to run at a generation, together, and only if the stored state's
//! version is still the one it read. Nothing here touches a database, so every rule is
//! unit-tested on its own, like the work queue's `lifecycle` and `plan`:
//!
//! - which step first reaches each cluster ([`step_of`]);
//! - how the clusters of each step stand ([`StepCounts`], in [`Decision::counts`]);
//! - what a control does (pause, resume, promote, abort), and which it refuses
//!   ([`ControlRefused`]);
//! - when a step passes, waits, advances, fails, and what a failure does (pause or roll
//!   back to the stable generation).
//!
//! Steps are numbered from 0 in [`RolloutState::step`] and in [`step_of`], but from 1 in
//! the reasons people read: "step 1" is the first step (index 0).

use fleetsync_model::{Phase, RolloutControl, RolloutPhase, RolloutSpec, StepCounts, Timestamp};
use std::collections::BTreeMap;

/// The longest reason a decision writes, in characters; a cluster's error is shortened
/// to fit.
const MAX_REASON: usize = 300;

/// A rollout as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutState {
    /// The tenant of the SyncSet.
    pub tenant: String,
    /// The SyncSet being rolled out.
    pub syncset: String,
    /// Where the rollout stands.
    pub phase: RolloutPhase,
    /// 0-based index of the current step.
    pub step: usize,
    /// The generation being rolled out.
    pub revision: i64,
    /// The last generation that completed: what clusters no step reached yet run, and
    /// what a rollback re-applies.
    pub stable: i64,
    /// Why the rollout failed, rolled back or stopped, if it did.
    pub reason: Option<String>,
    /// When the current step started; its `progressDeadline` counts from here.
    pub step_started_at: Timestamp,
    /// Since when every cluster of the current step has been healthy, if they are; its
    /// `minSuccessTime` counts from here.
    pub healthy_since: Option<Timestamp>,
    /// Whether promote was asked for the current step: it advances as soon as it passes.
    pub promoted: bool,
    /// Bumped by every write; a write commits only if the version is unchanged since
    /// the state was read (compare-and-set).
    pub version: i64,
    /// When the state was last written.
    pub updated_at: Timestamp,
}

/// One cluster the SyncSet selects, with its key of the SyncSet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    /// The cluster's name.
    pub name: String,
    /// The cluster's labels, which step selectors match.
    pub labels: BTreeMap<String, String>,
    /// `None`: the cluster has no wanted key of the SyncSet yet.
    pub key: Option<KeyView>,
}

/// Where a cluster's key of the SyncSet stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyView {
    /// The generation the key is told to run.
    pub generation: i64,
    /// The last generation applied successfully.
    pub observed_generation: i64,
    /// Where the key stands in the work queue; `Failed` and `Parked` count as failed.
    pub phase: Phase,
    /// Why the last run failed, if it did.
    pub last_error: Option<String>,
    /// The agent reports drift.
    pub drifted: bool,
    /// An applied object is not ready yet: why.
    pub unready: Option<String>,
}

/// What a rollout does next, for the store to write.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The state to write, with its version bumped and `updated_at` = now; `None`:
    /// nothing to write.
    pub state: Option<RolloutState>,
    /// `(cluster, generation)`: keys to run at that generation, written together with
    /// `state` (never without it).
    pub enqueue: Vec<(String, i64)>,
    /// Per step of the spec, how its clusters stand (always filled).
    pub counts: Vec<StepCounts>,
    /// When the rollout must be looked at again even if nothing changes (a
    /// `minSuccessTime` or `progressDeadline` ends); `None`: only when something changes.
    pub wake_at: Option<Timestamp>,
    /// What the current step waits for, in words, while the rollout progresses.
    pub waiting: Option<String>,
}

/// A control that does not apply in the rollout's current phase, e.g. promote on a
/// completed rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("cannot {} a rollout that is {phase}", verb(*.control))]
pub struct ControlRefused {
    /// The control asked for.
    pub control: RolloutControl,
    /// The phase the rollout is in.
    pub phase: RolloutPhase,
}

fn verb(c: RolloutControl) -> &'static str {
    match c {
        RolloutControl::Pause => "pause",
        RolloutControl::Resume => "resume",
        RolloutControl::Promote => "promote",
        RolloutControl::Abort => "abort",
    }
}

/// Which step first reaches each cluster: the index of the step for each of `clusters`
/// (same order), `None` if no step reaches it.
///
/// `clusters` must be sorted by name. Steps are cumulative: a step with a `selector`
/// reaches every cluster it matches that no earlier step reached; a step with `count: n`
/// or `percent: p` (n = p% of all clusters, rounded up) reaches further clusters in name
/// order until at least n are reached in all (none, if that many already are). Since the
/// last step of a valid rollout is `percent: 100`, every cluster is reached by some step.
pub fn step_of(spec: &RolloutSpec, clusters: &[ClusterView]) -> Vec<Option<usize>> {
    let mut first: Vec<Option<usize>> = vec![None; clusters.len()];
    let mut reached = 0_u64;
    let total = clusters.len() as u64;
    for (j, step) in spec.steps.iter().enumerate() {
        if let Some(selector) = &step.selector {
            for (slot, c) in first.iter_mut().zip(clusters) {
                if slot.is_none() && selector.matches(&c.labels) {
                    *slot = Some(j);
                    reached += 1;
                }
            }
            continue;
        }
        let want = match (step.count, step.percent) {
            (Some(n), _) => u64::from(n),
            (None, Some(p)) => (u64::from(p) * total).div_ceil(100),
            (None, None) => 0,
        };
        for slot in first.iter_mut() {
            if reached >= want {
                break;
            }
            if slot.is_none() {
                *slot = Some(j);
                reached += 1;
            }
        }
    }
    first
}

/// The event log entry of a rollout's move: `action` names it (`Step 2`, `Paused`,
/// `RolledBack`...), `actor` who asked (an operator's control; `None` for the workers
/// that drive rollouts).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutEvent {
    pub action: &'static str,
    pub actor: Option<String>,
}

/// Event actions of the steps, 1-based as people count them.
const STEP_ACTIONS: [&str; fleetsync_model::rollout::MAX_STEPS] = [
    "Step 1", "Step 2", "Step 3", "Step 4", "Step 5", "Step 6", "Step 7", "Step 8", "Step 9", "Step 10", "Step 11",
    "Step 12", "Step 13", "Step 14", "Step 15", "Step 16", "Step 17", "Step 18", "Step 19", "Step 20",
];

/// What the move from `before` to `next` logs: a new phase by its name, else a new step
/// (`Step N`), else a promote, else a step with `manualPromote` that became healthy and
/// now waits for a promote (`AwaitingPromote`); `None` for a move that only records
/// health or runs keys.
pub fn event_action(spec: &RolloutSpec, before: &RolloutState, next: &RolloutState) -> Option<&'static str> {
    if next.phase != before.phase {
        return Some(next.phase.as_str());
    }
    if next.step != before.step {
        return STEP_ACTIONS.get(next.step).copied();
    }
    if next.promoted && !before.promoted {
        return Some("Promoted");
    }
    let healthy_now = before.healthy_since.is_none() && next.healthy_since.is_some();
    (healthy_now && !next.promoted && spec.gate(next.step).manual_promote).then_some("AwaitingPromote")
}

mod decide;
#[cfg(test)]
mod tests;

pub use decide::decide;
