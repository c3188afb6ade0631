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

use fleetsync_model::rollout::{FailureBudget, OnFailure};
use fleetsync_model::{Phase, RolloutControl, RolloutPhase, RolloutSpec, StepCounts, Timestamp};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

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

/// How one cluster stands against the revision being rolled out.
#[derive(Debug, Clone, Copy)]
struct Standing {
    updated: bool,
    healthy: bool,
    failed: bool,
}

impl Standing {
    /// `overdue`: the current step's `progressDeadline` has passed. A key that failed
    /// and is being retried has failed the revision only then (a transient failure its
    /// retry fixes is not a failure of the revision); a parked key has failed at once.
    fn of(c: &ClusterView, revision: i64, overdue: bool) -> Self {
        let Some(k) = &c.key else { return Standing { updated: false, healthy: false, failed: false } };
        let updated = k.generation == revision;
        Standing {
            updated,
            failed: updated && (k.phase == Phase::Parked || (k.phase == Phase::Failed && overdue)),
            healthy: updated
                && k.phase == Phase::Applied
                && k.observed_generation == revision
                && !k.drifted
                && k.unready.is_none(),
        }
    }

    /// Reached, but neither healthy nor failed yet.
    fn pending(self) -> bool {
        !self.healthy && !self.failed
    }
}

/// The clusters step `step` has reached (it or an earlier step), with their standing.
fn reached<'a>(
    clusters: &'a [ClusterView],
    steps: &'a [Option<usize>],
    step: usize,
    revision: i64,
    overdue: bool,
) -> impl Iterator<Item = (&'a ClusterView, Standing)> + 'a {
    clusters
        .iter()
        .zip(steps)
        .filter(move |(_, s)| s.is_some_and(|s| s <= step))
        .map(move |(c, _)| (c, Standing::of(c, revision, overdue)))
}

/// Whether the current step's `progressDeadline` has passed at `now`.
fn overdue(spec: &RolloutSpec, state: &RolloutState, now: Timestamp) -> bool {
    now >= state.step_started_at.plus(spec.gate(state.step).progress_deadline)
}

/// Rule a: every reached cluster with a key not told to run the revision yet is
/// enqueued at it (a step's clusters get the new revision; a cluster joining a reached
/// step catches up); every cluster not reached that runs neither the revision nor the
/// stable one (a superseded rollout's, which never proved itself) goes back to stable.
fn catch_up(
    clusters: &[ClusterView],
    steps: &[Option<usize>],
    step: usize,
    state: &RolloutState,
) -> Vec<(String, i64)> {
    clusters
        .iter()
        .zip(steps)
        .filter_map(|(c, s)| {
            let told = c.key.as_ref()?.generation;
            let reached = s.is_some_and(|s| s <= step);
            match reached {
                true if told != state.revision => Some((c.name.clone(), state.revision)),
                false if told != state.revision && told != state.stable => Some((c.name.clone(), state.stable)),
                _ => None,
            }
        })
        .collect()
}

/// Per step, how its clusters stand. `pending` counts reached clusters only, and none
/// once the rollout rolled back (nothing is left to do): `rolled_back` then counts the
/// reached clusters told the stable revision again. The other counts say what the keys
/// say, reached or not.
fn count(
    spec: &RolloutSpec,
    state: &RolloutState,
    clusters: &[ClusterView],
    steps: &[Option<usize>],
    now: Timestamp,
) -> Vec<StepCounts> {
    let mut counts = vec![StepCounts::default(); spec.steps.len()];
    let overdue = overdue(spec, state, now);
    let rolled_back = state.phase == RolloutPhase::RolledBack;
    for (c, s) in clusters.iter().zip(steps) {
        let Some(j) = *s else { continue };
        let Some(n) = counts.get_mut(j) else { continue };
        let st = Standing::of(c, state.revision, overdue);
        let reached = j <= state.step;
        n.clusters += 1;
        n.updated += u64::from(st.updated);
        n.healthy += u64::from(st.healthy);
        n.failed += u64::from(st.failed);
        n.pending += u64::from(reached && !rolled_back && st.pending());
        n.rolled_back +=
            u64::from(reached && rolled_back && c.key.as_ref().is_some_and(|k| k.generation == state.stable));
    }
    counts
}

/// What the current step of a progressing rollout waits for, in words; `None` when it
/// is not progressing. The first that holds: clusters still applying (or retrying),
/// clusters applied but not ready (or drifted), a manual promote, `minSuccessTime`.
fn waiting(
    spec: &RolloutSpec,
    state: &RolloutState,
    clusters: &[ClusterView],
    steps: &[Option<usize>],
    now: Timestamp,
) -> Option<String> {
    if state.phase != RolloutPhase::Progressing {
        return None;
    }
    let plural = |n: usize| if n == 1 { "cluster" } else { "clusters" };
    let pending: Vec<&ClusterView> = reached(clusters, steps, state.step, state.revision, overdue(spec, state, now))
        .filter(|(_, s)| s.pending())
        .map(|(c, _)| c)
        .collect();
    let applying = pending
        .iter()
        .filter(|c| {
            c.key.as_ref().is_none_or(|k| {
                k.generation != state.revision || k.phase != Phase::Applied || k.observed_generation != state.revision
            })
        })
        .count();
    if applying > 0 {
        return Some(format!("waiting for {applying} {} to apply revision {}", plural(applying), state.revision));
    }
    if !pending.is_empty() {
        let first = why_pending(pending[0], state.revision);
        return Some(format!(
            "waiting for {} {} to become ready ({}: {first})",
            pending.len(),
            plural(pending.len()),
            pending[0].name
        ));
    }
    let gate = spec.gate(state.step);
    if gate.manual_promote && !state.promoted {
        return Some("waiting for promote".into());
    }
    let baked = state.healthy_since.map(|since| since.plus(gate.min_success_time));
    match baked {
        Some(t) if now < t => {
            Some(format!("waiting for minSuccessTime {} (until {})", Human(gate.min_success_time), t.to_rfc3339()))
        }
        _ => None,
    }
}

/// Decides what the rollout `state` of `spec` does next, at `now`, given the clusters
/// the SyncSet selects (sorted by name) and an operator's `control`, if any.
///
/// - `Completed` and `RolledBack` rollouts do nothing and refuse every control.
/// - `Paused` and `Failed` rollouts do nothing until resumed (the current step starts
///   afresh: its deadline from now, its gate judged again) or aborted (rolled back).
/// - A `Progressing` rollout may be paused, promoted (its current step advances as soon
///   as it passes, without waiting for `minSuccessTime` or a manual promote) or
///   aborted. Each time, it enqueues every cluster reached so far whose key is not told
///   to run the revision yet. More failed clusters than `maxFailures` tolerates, or a
///   cluster not healthy within `progressDeadline`, fail it: it rolls back (every
///   cluster is enqueued at the stable generation) or, with `onFailure: Pause`, stops as
///   `Failed`. A step whose clusters are all healthy (or failed within the budget)
///   advances after `minSuccessTime` (or on promote, with `manualPromote`), enqueueing
///   the next step's clusters; the last step completes the rollout, whose revision
///   becomes the stable one.
///
/// Reasons number steps from 1 ("step 1" is the first step, index 0).
pub fn decide(
    spec: &RolloutSpec,
    state: &RolloutState,
    clusters: &[ClusterView],
    now: Timestamp,
    control: Option<RolloutControl>,
) -> Result<Decision, ControlRefused> {
    use RolloutPhase::{Completed, Failed, Paused, Progressing, RolledBack};
    let steps = step_of(spec, clusters);
    let mut next = state.clone();
    let (enqueue, wake_at) = match (state.phase, control) {
        (Completed | RolledBack | Paused | Failed, None) => (Vec::new(), None),
        (Progressing, None) => evaluate(spec, &mut next, clusters, &steps, now),
        (Progressing, Some(RolloutControl::Pause)) => {
            next.phase = Paused;
            (Vec::new(), None)
        }
        (Paused | Failed, Some(RolloutControl::Resume)) => {
            next.phase = Progressing;
            next.step_started_at = now;
            next.healthy_since = None;
            next.promoted = false;
            next.reason = None;
            evaluate(spec, &mut next, clusters, &steps, now)
        }
        (Progressing, Some(RolloutControl::Promote)) => {
            next.promoted = true;
            evaluate(spec, &mut next, clusters, &steps, now)
        }
        (Progressing | Paused | Failed, Some(RolloutControl::Abort)) => {
            (roll_back(&mut next, "aborted".into(), clusters), None)
        }
        (phase, Some(control)) => return Err(ControlRefused { control, phase }),
    };
    let write = (next != *state || !enqueue.is_empty()).then(|| RolloutState {
        version: state.version + 1,
        updated_at: now,
        ..next
    });
    let shown = write.as_ref().unwrap_or(state);
    let counts = count(spec, shown, clusters, &steps, now);
    let waiting = waiting(spec, shown, clusters, &steps, now);
    Ok(Decision { state: write, enqueue, counts, wake_at, waiting })
}

/// Rule 5: a progressing rollout's current step, judged at `now`. Updates `next` and
/// returns what to enqueue and when to look again.
fn evaluate(
    spec: &RolloutSpec,
    next: &mut RolloutState,
    clusters: &[ClusterView],
    steps: &[Option<usize>],
    now: Timestamp,
) -> (Vec<(String, i64)>, Option<Timestamp>) {
    let step = next.step;
    let gate = spec.gate(step);
    let enqueue = catch_up(clusters, steps, step, next);
    let here: Vec<_> = reached(clusters, steps, step, next.revision, overdue(spec, next, now)).collect();
    let failed: Vec<&ClusterView> = here.iter().filter(|(_, s)| s.failed).map(|(c, _)| *c).collect();
    let pending: Vec<&ClusterView> = here.iter().filter(|(_, s)| s.pending()).map(|(c, _)| *c).collect();

    let allowed = gate.max_failures.allowed(here.len() as u64);
    let deadline = next.step_started_at.plus(gate.progress_deadline);
    let failure = if failed.len() as u64 > allowed {
        let first = failed[0];
        let head = format!(
            "step {}: {} of {} clusters failed (maxFailures {}); {}: ",
            step + 1,
            failed.len(),
            here.len(),
            Budget(gate.max_failures),
            first.name
        );
        let why =
            first.key.as_ref().and_then(|k| k.last_error.clone()).unwrap_or_else(|| "failed without an error".into());
        Some(with_detail(head, &why))
    } else if !pending.is_empty() && now >= deadline {
        let n = pending.len();
        let head = format!(
            "step {}: {n} {} not healthy within progressDeadline {}; {}: ",
            step + 1,
            if n == 1 { "cluster" } else { "clusters" },
            Human(gate.progress_deadline),
            pending[0].name
        );
        Some(with_detail(head, &why_pending(pending[0], next.revision)))
    } else {
        None
    };

    if let Some(reason) = failure {
        return match spec.on_failure {
            OnFailure::Rollback => (roll_back(next, reason, clusters), None),
            OnFailure::Pause => {
                next.phase = RolloutPhase::Failed;
                next.reason = Some(reason);
                next.healthy_since = None;
                next.promoted = false;
                (enqueue, None)
            }
        };
    }

    if !pending.is_empty() {
        next.healthy_since = None;
        return (enqueue, Some(deadline));
    }

    let since = *next.healthy_since.get_or_insert(now);
    let baked = since.plus(gate.min_success_time);
    if !next.promoted && (gate.manual_promote || now < baked) {
        return (enqueue, (!gate.manual_promote).then_some(baked));
    }
    if step + 1 >= spec.steps.len() {
        next.phase = RolloutPhase::Completed;
        next.stable = next.revision;
        next.reason = None;
        next.promoted = false;
        return (enqueue, None);
    }
    next.step = step + 1;
    next.step_started_at = now;
    next.healthy_since = None;
    next.promoted = false;
    let enqueue = catch_up(clusters, steps, next.step, next);
    // Look again at the new step's deadline, or at once if it has nothing to wait for
    // (its clusters are already healthy, or it added none).
    let waits = reached(clusters, steps, next.step, next.revision, false).any(|(_, s)| s.pending());
    let wake = if waits { now.plus(spec.gate(next.step).progress_deadline) } else { now };
    (enqueue, Some(wake))
}

/// Rule 6: rolled back with `reason`; every cluster whose key is not told to run the
/// stable generation (the revision, or one it superseded) is enqueued at it.
fn roll_back(next: &mut RolloutState, reason: String, clusters: &[ClusterView]) -> Vec<(String, i64)> {
    next.phase = RolloutPhase::RolledBack;
    next.reason = Some(reason);
    next.healthy_since = None;
    next.promoted = false;
    let stable = next.stable;
    clusters
        .iter()
        .filter(|c| c.key.as_ref().is_some_and(|k| k.generation != stable))
        .map(|c| (c.name.clone(), stable))
        .collect()
}

/// Why a reached cluster is not healthy yet, for a reason.
fn why_pending(c: &ClusterView, revision: i64) -> String {
    let Some(k) = &c.key else { return "no key of the SyncSet yet".into() };
    if k.generation != revision {
        format!("still at generation {}", k.generation)
    } else if k.phase == Phase::Failed {
        format!("failed, retrying: {}", k.last_error.as_deref().unwrap_or("no error recorded"))
    } else if k.phase != Phase::Applied || k.observed_generation != revision {
        k.phase.as_str().to_string()
    } else if k.drifted {
        "drifted".into()
    } else {
        format!("not ready: {}", k.unready.as_deref().unwrap_or_default())
    }
}

/// `head` followed by `detail` on one line, shortened to [`MAX_REASON`] characters.
fn with_detail(head: String, detail: &str) -> String {
    let detail = detail.split_whitespace().collect::<Vec<_>>().join(" ");
    let room = MAX_REASON.saturating_sub(head.chars().count());
    if detail.chars().count() <= room {
        return head + &detail;
    }
    head + &detail.chars().take(room.saturating_sub(1)).collect::<String>() + "…"
}

/// A failure budget as written: `2` or `10%`.
struct Budget(FailureBudget);

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            FailureBudget::Count(n) => write!(f, "{n}"),
            FailureBudget::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// A duration as written in a spec: `5m`, `1h 30m`, `1d 2h`, `500ms`.
struct Human(Duration);

impl fmt::Display for Human {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.as_secs();
        let parts = [
            (secs / 86_400, "d"),
            (secs / 3_600 % 24, "h"),
            (secs / 60 % 60, "m"),
            (secs % 60, "s"),
            (u64::from(self.0.subsec_millis()), "ms"),
        ];
        let mut wrote = false;
        for (n, unit) in parts.into_iter().filter(|(n, _)| *n > 0) {
            if wrote {
                f.write_str(" ")?;
            }
            write!(f, "{n}{unit}")?;
            wrote = true;
        }
        if !wrote {
            f.write_str("0s")?;
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const STABLE: i64 = 1;
    const REV: i64 = 2;
    const T0: Timestamp = Timestamp(1_000_000);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    fn at(s: u64) -> Timestamp {
        T0.plus(secs(s))
    }

    fn spec(v: serde_json::Value) -> RolloutSpec {
        let s: RolloutSpec = serde_json::from_value(v).expect("a rollout spec");
        assert_eq!(s.validate(), Ok(()), "fixture specs are valid");
        s
    }

    /// Canaries (ring=canary), then half, then all.
    fn canary_spec(extra: serde_json::Value) -> RolloutSpec {
        let mut v =
            json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}}, {"percent": 50}, {"percent": 100}]});
        if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
            v.extend(extra.clone());
        }
        spec(v)
    }

    /// A cluster whose key runs `generation`, applied and healthy.
    fn cluster(name: &str, labels: &[(&str, &str)], generation: i64) -> ClusterView {
        ClusterView {
            name: name.into(),
            labels: labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            key: Some(KeyView {
                generation,
                observed_generation: generation,
                phase: Phase::Applied,
                last_error: None,
                drifted: false,
                unready: None,
            }),
        }
    }

    /// a..f at the stable generation; c and e are canaries.
    fn fleet() -> Vec<ClusterView> {
        ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|n| cluster(n, if matches!(*n, "c" | "e") { &[("ring", "canary")] } else { &[] }, STABLE))
            .collect()
    }

    fn names(clusters: &[ClusterView]) -> Vec<&str> {
        clusters.iter().map(|c| c.name.as_str()).collect()
    }

    fn key<'a>(clusters: &'a mut [ClusterView], name: &str) -> &'a mut KeyView {
        clusters.iter_mut().find(|c| c.name == name).and_then(|c| c.key.as_mut()).expect("a keyed cluster")
    }

    /// What the queue does with an enqueue: the key is told to run the generation.
    fn enqueued(clusters: &mut [ClusterView], enqueue: &[(String, i64)]) {
        for (name, generation) in enqueue {
            let k = key(clusters, name);
            k.generation = *generation;
            k.phase = Phase::Pending;
        }
    }

    /// The agent applies what each named key is told to run.
    fn apply(clusters: &mut [ClusterView], which: &[&str]) {
        for name in which {
            let k = key(clusters, name);
            k.observed_generation = k.generation;
            k.phase = Phase::Applied;
            k.last_error = None;
        }
    }

    /// The key failed for good: parked.
    fn fail(clusters: &mut [ClusterView], name: &str, error: &str) {
        retrying(clusters, name, error);
        key(clusters, name).phase = Phase::Parked;
    }

    /// The key's last run failed; it is being retried.
    fn retrying(clusters: &mut [ClusterView], name: &str, error: &str) {
        let k = key(clusters, name);
        k.phase = Phase::Failed;
        k.last_error = Some(error.into());
    }

    fn progressing(step: usize) -> RolloutState {
        RolloutState {
            tenant: "t".into(),
            syncset: "web".into(),
            phase: RolloutPhase::Progressing,
            step,
            revision: REV,
            stable: STABLE,
            reason: None,
            step_started_at: T0,
            healthy_since: None,
            promoted: false,
            version: 7,
            updated_at: T0,
        }
    }

    fn in_phase(phase: RolloutPhase) -> RolloutState {
        RolloutState { phase, ..progressing(0) }
    }

    fn run(
        spec: &RolloutSpec,
        state: &RolloutState,
        clusters: &[ClusterView],
        now: Timestamp,
        control: Option<RolloutControl>,
    ) -> Decision {
        decide(spec, state, clusters, now, control).expect("accepted")
    }

    /// The decision's state, which must be written.
    fn written(d: &Decision) -> &RolloutState {
        d.state.as_ref().expect("a state to write")
    }

    /// Enqueues the canaries at the revision and lets them apply: step 0 is healthy.
    fn canaries_applied(spec: &RolloutSpec) -> (RolloutState, Vec<ClusterView>) {
        let mut clusters = fleet();
        let d = run(spec, &progressing(0), &clusters, T0, None);
        enqueued(&mut clusters, &d.enqueue);
        apply(&mut clusters, &["c", "e"]);
        (written(&d).clone(), clusters)
    }

    fn pairs(v: &[(&str, i64)]) -> Vec<(String, i64)> {
        v.iter().map(|(n, g)| (n.to_string(), *g)).collect()
    }

    #[test]
    fn steps_reach_selected_then_counted_clusters_in_name_order() {
        let s = spec(
            json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}}, {"percent": 50}, {"count": 4}, {"percent": 100}]}),
        );
        let clusters = fleet();
        // Canaries c, e; 50% of 6 = 3 in all: a; 4 in all: b; the rest: d, f.
        assert_eq!(step_of(&s, &clusters), vec![Some(1), Some(2), Some(0), Some(3), Some(0), Some(3)]);
    }

    #[test]
    fn percent_rounds_up_and_counts_clusters_earlier_steps_reached() {
        let three: Vec<_> = ["a", "b", "c"].iter().map(|n| cluster(n, &[], STABLE)).collect();
        let s = spec(json!({"steps": [{"percent": 34}, {"percent": 100}]}));
        assert_eq!(step_of(&s, &three), vec![Some(0), Some(0), Some(1)], "34% of 3 is 1.02: 2 clusters");

        // Two canaries of four: 50% is already reached, so that step adds none.
        let four: Vec<_> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| cluster(n, if *n >= "c" { &[("ring", "canary")] } else { &[] }, STABLE))
            .collect();
        assert_eq!(step_of(&canary_spec(json!({})), &four), vec![Some(2), Some(2), Some(0), Some(0)]);
        let s = spec(json!({"steps": [{"count": 1}, {"count": 1}, {"count": 3}, {"percent": 100}]}));
        assert_eq!(step_of(&s, &four), vec![Some(0), Some(2), Some(2), Some(3)], "a count already reached adds none");
    }

    #[test]
    fn the_first_tick_enqueues_the_canaries_only() {
        let s = canary_spec(json!({"progressDeadline": "5m"}));
        let clusters = fleet();
        let d = run(&s, &progressing(0), &clusters, T0, None);
        assert_eq!(d.enqueue, pairs(&[("c", REV), ("e", REV)]));
        let st = written(&d);
        assert_eq!((st.version, st.updated_at, st.phase, st.step), (8, T0, RolloutPhase::Progressing, 0));
        assert_eq!(d.wake_at, Some(at(300)), "the step's deadline");
        assert_eq!(d.counts.len(), 3);
        assert_eq!(
            d.counts[0],
            StepCounts { clusters: 2, updated: 0, healthy: 0, failed: 0, pending: 2, rolled_back: 0 }
        );
        assert_eq!(
            d.counts[1],
            StepCounts { clusters: 1, updated: 0, healthy: 0, failed: 0, pending: 0, rolled_back: 0 },
            "not reached: not pending"
        );
        assert_eq!(d.counts[2].clusters, 3);

        // Once enqueued nothing changes until the keys do.
        let mut after = clusters.clone();
        enqueued(&mut after, &d.enqueue);
        let again = run(&s, st, &after, at(10), None);
        assert_eq!((again.state, again.enqueue, again.wake_at), (None, vec![], Some(at(300))));
        assert_eq!(
            again.counts[0],
            StepCounts { clusters: 2, updated: 2, healthy: 0, failed: 0, pending: 2, rolled_back: 0 }
        );
    }

    #[test]
    fn a_failing_canary_rolls_back_naming_the_cluster() {
        let s = canary_spec(json!({}));
        let mut clusters = fleet();
        let mut state = progressing(0);
        let mut at_revision = Vec::new();
        for tick in 0..3 {
            let d = run(&s, &state, &clusters, at(tick), None);
            at_revision.extend(d.enqueue.iter().filter(|(_, g)| *g == REV).map(|(n, _)| n.clone()));
            enqueued(&mut clusters, &d.enqueue);
            if let Some(st) = d.state {
                state = st;
            }
            if tick == 0 {
                apply(&mut clusters, &["e"]);
                fail(&mut clusters, "c", "admission webhook denied the Deployment");
            }
        }
        assert_eq!(state.phase, RolloutPhase::RolledBack);
        assert_eq!(
            state.reason.as_deref(),
            Some("step 1: 1 of 2 clusters failed (maxFailures 0); c: admission webhook denied the Deployment")
        );
        assert_eq!(at_revision, ["c", "e"], "no cluster of a later step is ever enqueued at the revision");
        for c in &clusters {
            assert_eq!(
                c.key.as_ref().map(|k| k.generation),
                Some(STABLE),
                "{} runs the stable generation again",
                c.name
            );
        }
    }

    #[test]
    fn rollback_enqueues_the_reached_clusters_at_stable_in_one_decision() {
        let s = canary_spec(json!({}));
        let (state, mut clusters) = canaries_applied(&s);
        fail(&mut clusters, "c", "boom");
        let d = run(&s, &state, &clusters, at(5), None);
        assert_eq!(d.enqueue, pairs(&[("c", STABLE), ("e", STABLE)]));
        let st = written(&d);
        assert_eq!((st.phase, st.healthy_since, d.wake_at), (RolloutPhase::RolledBack, None, None));
        assert_eq!(d.counts[0].failed, 1);
    }

    #[test]
    fn rollback_also_undoes_a_superseded_generation() {
        let s = canary_spec(json!({}));
        let mut clusters = fleet();
        key(&mut clusters, "a").generation = 3; // ran a revision since superseded
        let state = RolloutState { revision: 4, ..progressing(0) };
        let d = run(&s, &state, &clusters, T0, Some(RolloutControl::Abort));
        assert_eq!(d.enqueue, pairs(&[("a", STABLE)]));
    }

    #[test]
    fn with_on_failure_pause_a_failing_canary_stops_without_rolling_back() {
        let s = canary_spec(json!({"onFailure": "Pause"}));
        let (state, mut clusters) = canaries_applied(&s);
        fail(&mut clusters, "e", "quota exceeded");
        let d = run(&s, &state, &clusters, at(5), None);
        let st = written(&d);
        assert_eq!(st.phase, RolloutPhase::Failed);
        assert_eq!(st.reason.as_deref(), Some("step 1: 1 of 2 clusters failed (maxFailures 0); e: quota exceeded"));
        assert_eq!((d.enqueue.clone(), d.wake_at), (vec![], None), "nothing re-applied at stable");

        // Stopped: nothing happens without a control, even after the deadline.
        let still = run(&s, st, &clusters, at(3600), None);
        assert_eq!((still.state, still.enqueue), (None, vec![]));
    }

    #[test]
    fn max_failures_as_a_percentage_tolerates_some_failed_clusters() {
        let s = spec(json!({"steps": [{"percent": 100}], "maxFailures": "34%"}));
        let mut clusters = fleet();
        for c in &mut clusters {
            let k = c.key.as_mut().expect("keyed");
            k.generation = REV;
            k.observed_generation = REV;
        }
        fail(&mut clusters, "a", "boom");
        fail(&mut clusters, "b", "boom");
        // 34% of 6 rounds down to 2: tolerated, and the others are healthy.
        let d = run(&s, &progressing(0), &clusters, T0, None);
        assert_eq!(written(&d).phase, RolloutPhase::Completed);

        fail(&mut clusters, "c", "boom");
        let d = run(&s, &progressing(0), &clusters, T0, None);
        let st = written(&d);
        assert_eq!(st.phase, RolloutPhase::RolledBack);
        assert_eq!(st.reason.as_deref(), Some("step 1: 3 of 6 clusters failed (maxFailures 34%); a: boom"));
    }

    #[test]
    fn a_passing_step_waits_min_success_time_then_enqueues_the_next() {
        let s = canary_spec(json!({"minSuccessTime": "1m", "progressDeadline": "5m"}));
        let (state, mut clusters) = canaries_applied(&s);

        let d = run(&s, &state, &clusters, at(10), None);
        let st = written(&d).clone();
        assert_eq!((st.step, st.healthy_since), (0, Some(at(10))));
        assert_eq!((d.enqueue.clone(), d.wake_at), (vec![], Some(at(70))));
        assert_eq!(
            d.counts[0],
            StepCounts { clusters: 2, updated: 2, healthy: 2, failed: 0, pending: 0, rolled_back: 0 }
        );

        let d = run(&s, &st, &clusters, at(69), None);
        assert_eq!((d.state, d.enqueue, d.wake_at), (None, vec![], Some(at(70))), "still baking");

        let d = run(&s, &st, &clusters, at(70), None);
        let next = written(&d);
        assert_eq!(
            (next.step, next.step_started_at, next.healthy_since, next.phase),
            (1, at(70), None, RolloutPhase::Progressing)
        );
        assert_eq!(d.enqueue, pairs(&[("a", REV)]), "50% of 6 is 3: the canaries and a");
        assert_eq!(d.wake_at, Some(at(370)), "the new step's deadline");
        enqueued(&mut clusters, &d.enqueue);
        assert_eq!(key(&mut clusters, "b").generation, STABLE);
    }

    #[test]
    fn a_step_that_adds_no_clusters_is_looked_at_again_at_once() {
        let s =
            spec(json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}}, {"count": 2}, {"percent": 100}]}));
        let (state, clusters) = canaries_applied(&s);
        let d = run(&s, &state, &clusters, at(10), None);
        assert_eq!((written(&d).step, d.enqueue.clone(), d.wake_at), (1, vec![], Some(at(10))));
    }

    #[test]
    fn manual_promote_waits_for_promote() {
        let s = spec(
            json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}, "manualPromote": true}, {"percent": 100}]}),
        );
        let (state, clusters) = canaries_applied(&s);
        let d = run(&s, &state, &clusters, at(10), None);
        let st = written(&d).clone();
        assert_eq!((st.step, st.healthy_since, d.wake_at), (0, Some(at(10)), None), "no time ends the wait");

        let d = run(&s, &st, &clusters, at(86_400), None);
        assert_eq!((d.state, d.enqueue), (None, vec![]));

        let d = run(&s, &st, &clusters, at(86_400), Some(RolloutControl::Promote));
        let next = written(&d);
        assert_eq!((next.step, next.promoted), (1, false));
        assert_eq!(d.enqueue, pairs(&[("a", REV), ("b", REV), ("d", REV), ("f", REV)]));
    }

    #[test]
    fn promote_skips_min_success_time_and_waits_for_health_if_needed() {
        let s = canary_spec(json!({"minSuccessTime": "1h"}));
        let (state, mut clusters) = canaries_applied(&s);
        let d = run(&s, &state, &clusters, at(1), Some(RolloutControl::Promote));
        assert_eq!(written(&d).step, 1, "healthy: advances at once");

        // Promoted before it is healthy: remembered, and it advances once healthy.
        key(&mut clusters, "e").unready = Some("Deployment web: 0/3 ready".into());
        let d = run(&s, &state, &clusters, at(1), Some(RolloutControl::Promote));
        let st = written(&d).clone();
        assert_eq!((st.step, st.promoted), (0, true));
        key(&mut clusters, "e").unready = None;
        let d = run(&s, &st, &clusters, at(2), None);
        assert_eq!((written(&d).step, written(&d).promoted), (1, false));
    }

    #[test]
    fn the_deadline_fails_a_step_with_a_pending_cluster() {
        let s = canary_spec(json!({"progressDeadline": "5m"}));
        let (state, mut clusters) = canaries_applied(&s);
        key(&mut clusters, "e").phase = Phase::Applying;
        let d = run(&s, &state, &clusters, at(299), None);
        assert_eq!((d.state, d.wake_at), (None, Some(at(300))));

        let d = run(&s, &state, &clusters, at(300), None);
        let st = written(&d);
        assert_eq!(st.phase, RolloutPhase::RolledBack);
        assert_eq!(st.reason.as_deref(), Some("step 1: 1 cluster not healthy within progressDeadline 5m; e: Applying"));
        assert_eq!(d.enqueue, pairs(&[("c", STABLE), ("e", STABLE)]));
    }

    #[test]
    fn a_cluster_that_loses_health_resets_healthy_since() {
        let s = canary_spec(json!({"minSuccessTime": "10m", "progressDeadline": "30m"}));
        let (state, mut clusters) = canaries_applied(&s);
        let st = written(&run(&s, &state, &clusters, at(10), None)).clone();
        assert_eq!(st.healthy_since, Some(at(10)));

        key(&mut clusters, "c").drifted = true;
        let d = run(&s, &st, &clusters, at(300), None);
        let lost = written(&d).clone();
        assert_eq!((lost.healthy_since, lost.step, d.wake_at), (None, 0, Some(at(1800))));

        key(&mut clusters, "c").drifted = false;
        let d = run(&s, &lost, &clusters, at(400), None);
        assert_eq!((written(&d).healthy_since, d.wake_at), (Some(at(400)), Some(at(1000))), "the wait starts again");
    }

    #[test]
    fn drift_unready_or_an_old_observed_generation_keep_a_cluster_pending() {
        let s = canary_spec(json!({}));
        let (state, clusters) = canaries_applied(&s);
        type Spoil = fn(&mut KeyView);
        let cases: [(&str, Spoil); 4] = [
            ("drifted", |k| k.drifted = true),
            ("unready", |k| k.unready = Some("Service web: no endpoints".into())),
            ("observed behind", |k| k.observed_generation = STABLE),
            ("applying", |k| k.phase = Phase::Applying),
        ];
        for (what, spoil) in cases {
            let mut clusters = clusters.clone();
            spoil(key(&mut clusters, "c"));
            let d = run(&s, &state, &clusters, at(10), None);
            assert_eq!(d.state, None, "{what}: the step does not pass");
            assert_eq!(
                d.counts[0],
                StepCounts { clusters: 2, updated: 2, healthy: 1, failed: 0, pending: 1, rolled_back: 0 },
                "{what}"
            );
        }
        let d = run(&s, &state, &clusters, at(10), None);
        assert_eq!(written(&d).step, 1, "unspoiled, the step passes");
    }

    #[test]
    fn a_cluster_joining_a_reached_step_catches_up() {
        let s = canary_spec(json!({}));
        let (state, mut clusters) = canaries_applied(&s);
        clusters.insert(0, cluster("b0", &[("ring", "canary")], STABLE));
        clusters.sort_by(|a, b| a.name.cmp(&b.name));
        let mut keyless = cluster("d0", &[("ring", "canary")], STABLE);
        keyless.key = None;
        clusters.push(keyless);
        clusters.sort_by(|a, b| a.name.cmp(&b.name));
        let d = run(&s, &state, &clusters, at(10), None);
        assert_eq!(d.enqueue, pairs(&[("b0", REV)]), "a keyless cluster cannot be enqueued");
        assert_eq!(d.counts[0].pending, 2, "both newcomers are pending");
        assert_eq!(written(&d).step, 0);
    }

    #[test]
    fn the_last_step_completes_with_the_revision_stable() {
        let s = canary_spec(json!({}));
        let mut clusters = fleet();
        let mut state = progressing(0);
        let mut ticks = 0;
        while state.phase == RolloutPhase::Progressing {
            ticks += 1;
            assert!(ticks < 20, "completes: {state:?}");
            let d = run(&s, &state, &clusters, at(ticks), None);
            enqueued(&mut clusters, &d.enqueue);
            let everyone: Vec<String> = names(&clusters).iter().map(|s| s.to_string()).collect();
            apply(&mut clusters, &everyone.iter().map(String::as_str).collect::<Vec<_>>());
            if let Some(st) = d.state {
                state = st;
            }
        }
        assert_eq!(
            (state.phase, state.step, state.stable, state.reason.clone()),
            (RolloutPhase::Completed, 2, REV, None)
        );
        assert!(clusters.iter().all(|c| c.key.as_ref().is_some_and(|k| k.generation == REV)));
        let d = run(&s, &state, &clusters, at(100), None);
        assert_eq!((d.state, d.wake_at), (None, None));
        assert_eq!(d.counts.iter().map(|c| c.healthy).sum::<u64>(), 6);
    }

    #[test]
    fn pause_stops_and_resume_judges_the_step_afresh() {
        let s = canary_spec(json!({"progressDeadline": "5m"}));
        let clusters = fleet();
        let d = run(&s, &progressing(0), &clusters, T0, Some(RolloutControl::Pause));
        let paused = written(&d).clone();
        assert_eq!(
            (paused.phase, d.enqueue.clone(), d.wake_at),
            (RolloutPhase::Paused, vec![], None),
            "paused before enqueueing anything"
        );

        let d = run(&s, &paused, &clusters, at(3600), None);
        assert_eq!((d.state, d.enqueue), (None, vec![]), "paused: nothing, not even the deadline");

        let d = run(&s, &paused, &clusters, at(3600), Some(RolloutControl::Resume));
        let resumed = written(&d);
        assert_eq!(
            (resumed.phase, resumed.step_started_at, resumed.reason.clone()),
            (RolloutPhase::Progressing, at(3600), None)
        );
        assert_eq!(d.enqueue, pairs(&[("c", REV), ("e", REV)]));
        assert_eq!(d.wake_at, Some(at(3900)));
    }

    #[test]
    fn resume_after_a_failure_fails_again_unless_fixed() {
        let s = canary_spec(json!({"onFailure": "Pause"}));
        let (state, mut clusters) = canaries_applied(&s);
        fail(&mut clusters, "c", "boom");
        let failed = written(&run(&s, &state, &clusters, at(5), None)).clone();
        assert_eq!(failed.phase, RolloutPhase::Failed);

        let d = run(&s, &failed, &clusters, at(60), Some(RolloutControl::Resume));
        assert_eq!(written(&d).phase, RolloutPhase::Failed, "still failed");

        apply(&mut clusters, &["c"]);
        let d = run(&s, &failed, &clusters, at(60), Some(RolloutControl::Resume));
        let st = written(&d);
        assert_eq!((st.phase, st.step, st.reason.clone()), (RolloutPhase::Progressing, 1, None));
    }

    #[test]
    fn abort_rolls_back_from_any_running_phase() {
        let s = canary_spec(json!({}));
        let (state, clusters) = canaries_applied(&s);
        for phase in [RolloutPhase::Progressing, RolloutPhase::Paused, RolloutPhase::Failed] {
            let d = run(&s, &RolloutState { phase, ..state.clone() }, &clusters, at(5), Some(RolloutControl::Abort));
            let st = written(&d);
            assert_eq!((st.phase, st.reason.as_deref()), (RolloutPhase::RolledBack, Some("aborted")), "from {phase}");
            assert_eq!(d.enqueue, pairs(&[("c", STABLE), ("e", STABLE)]), "from {phase}");
        }
    }

    #[test]
    fn controls_that_do_not_apply_are_refused() {
        use RolloutControl::{Abort, Pause, Promote, Resume};
        use RolloutPhase::{Completed, Failed, Paused, Progressing, RolledBack};
        let s = canary_spec(json!({}));
        let clusters = fleet();
        let refused = [
            (Completed, Promote),
            (Completed, Pause),
            (Completed, Resume),
            (Completed, Abort),
            (RolledBack, Resume),
            (RolledBack, Abort),
            (Progressing, Resume),
            (Paused, Pause),
            (Paused, Promote),
            (Failed, Pause),
            (Failed, Promote),
        ];
        for (phase, control) in refused {
            assert_eq!(
                decide(&s, &in_phase(phase), &clusters, T0, Some(control)),
                Err(ControlRefused { control, phase })
            );
        }
        let e = ControlRefused { control: Promote, phase: Completed };
        assert_eq!(e.to_string(), "cannot promote a rollout that is Completed");

        for phase in [Completed, RolledBack] {
            let d = run(&s, &in_phase(phase), &clusters, T0, None);
            assert_eq!(
                (d.state, d.enqueue, d.wake_at, d.counts.len()),
                (None, vec![], None, 3),
                "{phase}: nothing to do"
            );
        }
    }

    #[test]
    fn a_long_error_is_shortened_in_the_reason() {
        let s = canary_spec(json!({}));
        let (state, mut clusters) = canaries_applied(&s);
        fail(&mut clusters, "c", &format!("first line\n{}", "é".repeat(1000)));
        let d = run(&s, &state, &clusters, at(5), None);
        let reason = written(&d).reason.clone().expect("a reason");
        assert!(reason.chars().count() <= MAX_REASON, "{} chars", reason.chars().count());
        assert!(reason.starts_with("step 1: 1 of 2 clusters failed (maxFailures 0); c: first line éé"), "{reason}");
        assert!(reason.ends_with('…'));
    }

    #[test]
    fn durations_read_as_written() {
        assert_eq!(Human(secs(300)).to_string(), "5m");
        assert_eq!(Human(secs(5400)).to_string(), "1h 30m");
        assert_eq!(Human(secs(90_061)).to_string(), "1d 1h 1m 1s");
        assert_eq!(Human(Duration::from_millis(1500)).to_string(), "1s 500ms");
        assert_eq!(Human(Duration::ZERO).to_string(), "0s");
    }

    #[test]
    fn a_new_phase_step_or_promote_is_logged_and_nothing_else() {
        let s = canary_spec(json!({}));
        let before = progressing(0);
        let healthy = RolloutState { healthy_since: Some(at(5)), version: before.version + 1, ..before.clone() };
        assert_eq!(event_action(&s, &before, &healthy), None, "health alone is no event");
        assert_eq!(event_action(&s, &before, &RolloutState { step: 1, ..before.clone() }), Some("Step 2"), "1-based");
        assert_eq!(event_action(&s, &before, &RolloutState { promoted: true, ..before.clone() }), Some("Promoted"));
        let rolled_back = RolloutState { phase: RolloutPhase::RolledBack, step: 1, ..before.clone() };
        assert_eq!(
            event_action(&s, &before, &rolled_back),
            Some("RolledBack"),
            "the phase names a move that changes both"
        );
        let manual = spec(json!({"steps": [{"count": 1, "manualPromote": true}, {"percent": 100}]}));
        assert_eq!(
            event_action(&manual, &before, &healthy),
            Some("AwaitingPromote"),
            "a healthy step that waits for a promote says so"
        );
    }

    #[test]
    fn clusters_a_superseded_rollout_reached_go_back_to_stable_until_their_step() {
        let spec = canary_spec(serde_json::json!({}));
        let mut clusters = fleet();
        // Stable 1; generation 2 reached every cluster, then 3 superseded it.
        let state = RolloutState { revision: 3, ..progressing(0) };
        for name in names(&clusters.clone()) {
            key(&mut clusters, name).generation = 2;
        }
        let d = run(&spec, &state, &clusters, at(1), None);
        let steps = step_of(&spec, &clusters);
        for (c, s) in clusters.iter().zip(&steps) {
            let want = if *s == Some(0) { 3 } else { STABLE };
            assert!(
                d.enqueue.contains(&(c.name.clone(), want)),
                "{} (step {s:?}) goes to {want}: {:?}",
                c.name,
                d.enqueue
            );
        }
    }

    #[test]
    fn a_failure_that_its_retry_fixes_does_not_fail_the_step() {
        let s = canary_spec(json!({"progressDeadline": "5m"}));
        let (state, mut clusters) = canaries_applied(&s);
        retrying(&mut clusters, "c", "connection reset");
        let d = run(&s, &state, &clusters, at(5), None);
        let st = d.state.clone().unwrap_or_else(|| state.clone());
        assert_eq!(st.phase, RolloutPhase::Progressing, "a key being retried has not failed the revision");
        assert_eq!((d.counts[0].failed, d.counts[0].pending), (0, 1));
        assert_eq!(d.waiting.as_deref(), Some("waiting for 1 cluster to apply revision 2"));
        assert_eq!(d.wake_at, Some(at(300)), "looked at again at the deadline");

        // The retry succeeds: the step passes as if nothing happened.
        apply(&mut clusters, &["c"]);
        let d = run(&s, &st, &clusters, at(10), None);
        assert_eq!(written(&d).step, 1);
    }

    #[test]
    fn a_failure_still_failing_at_the_deadline_fails_the_step() {
        let s = canary_spec(json!({"progressDeadline": "5m"}));
        let (state, mut clusters) = canaries_applied(&s);
        retrying(&mut clusters, "c", "connection reset");
        let d = run(&s, &state, &clusters, at(300), None);
        let st = written(&d);
        assert_eq!(st.phase, RolloutPhase::RolledBack);
        assert_eq!(st.reason.as_deref(), Some("step 1: 1 of 2 clusters failed (maxFailures 0); c: connection reset"));
    }

    #[test]
    fn a_rolled_back_rollout_counts_what_it_rolled_back_not_pending_work() {
        let s = canary_spec(json!({}));
        let (state, mut clusters) = canaries_applied(&s);
        fail(&mut clusters, "c", "boom");
        let d = run(&s, &state, &clusters, at(5), None);
        enqueued(&mut clusters, &d.enqueue);
        let later = run(&s, written(&d), &clusters, at(6), None);
        assert_eq!(
            later.counts[0],
            StepCounts { clusters: 2, updated: 0, healthy: 0, failed: 0, pending: 0, rolled_back: 2 }
        );
        assert_eq!(later.counts[1].pending + later.counts[2].pending, 0);
        assert_eq!(later.waiting, None);
    }

    #[test]
    fn a_step_says_what_it_waits_for() {
        let s = spec(
            json!({"steps": [{"selector": {"matchLabels": {"ring": "canary"}}, "manualPromote": true}, {"percent": 100, "minSuccessTime": "1m"}]}),
        );
        let mut clusters = fleet();
        let mut state = progressing(0);
        let tick = |state: &mut RolloutState, clusters: &[ClusterView], t: u64, control: Option<RolloutControl>| {
            let d = run(&s, state, clusters, at(t), control);
            if let Some(next) = &d.state {
                *state = next.clone();
            }
            d
        };
        let d = tick(&mut state, &clusters, 0, None);
        assert_eq!(d.waiting.as_deref(), Some("waiting for 2 clusters to apply revision 2"));
        enqueued(&mut clusters, &d.enqueue);
        apply(&mut clusters, &["c", "e"]);
        key(&mut clusters, "e").unready = Some("Deployment/web: 0 of 1 replicas available".into());
        let d = tick(&mut state, &clusters, 1, None);
        assert_eq!(
            d.waiting.as_deref(),
            Some("waiting for 1 cluster to become ready (e: not ready: Deployment/web: 0 of 1 replicas available)")
        );
        key(&mut clusters, "e").unready = None;
        let d = tick(&mut state, &clusters, 2, None);
        assert_eq!(d.waiting.as_deref(), Some("waiting for promote"));
        tick(&mut state, &clusters, 3, Some(RolloutControl::Promote));
        assert_eq!(state.step, 1);
        let d = tick(&mut state, &clusters, 4, None);
        enqueued(&mut clusters, &d.enqueue);
        apply(&mut clusters, &["a", "b", "d", "f"]);
        let d = tick(&mut state, &clusters, 5, None);
        assert_eq!(d.waiting, Some(format!("waiting for minSuccessTime 1m (until {})", at(65).to_rfc3339())));
    }
}
