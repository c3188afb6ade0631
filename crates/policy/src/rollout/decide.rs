//! [`decide`] and the rules it applies, one function each (the module docs of
//! [`rollout`](super) list them).

use super::{step_of, ClusterView, ControlRefused, Decision, RolloutState, MAX_REASON};
use fleetsync_model::rollout::{FailureBudget, OnFailure};
use fleetsync_model::{Phase, RolloutControl, RolloutPhase, RolloutSpec, StepCounts, Timestamp};
use std::fmt;
use std::time::Duration;

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
        // Running again (or waiting to) after a run that did not apply it (failed, or
        // waited for a dependency): what that run said.
        match &k.last_error {
            Some(e) => format!("{} (last run: {e})", k.phase.as_str()),
            None => k.phase.as_str().to_string(),
        }
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
pub(super) struct Human(pub(super) Duration);

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
