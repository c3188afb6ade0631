//! A key's life in the work queue, the same in every SQL backend.
//!
//! One row per key. A key is stored `idle` (nothing to do), `ready` (pending,
//! claimable from `run_at`), `running` (leased to a worker; `fence` is its token) or
//! `parked`. Every change bumps `want_seq`; a claim records it in `claimed_seq`. A
//! change that lands while the key runs therefore leaves `want_seq > claimed_seq` — the
//! key is *dirty* — and the completion puts it back to `ready` instead of `idle`: it
//! runs again afterwards, never beside the current run.
//!
//! The status phase users see is derived from the stored one ([`status_phase`]); what a
//! completion does to a row is decided here ([`finish`]) and written by each backend
//! (`fleetsync-store`'s).

use crate::{CompleteOutcome, Completion, RetryPolicy, RunOutcome};
use fleetsync_model::{ApplyMode, Fence, Phase, ResourceRef, Timestamp};

/// What an enqueue asks for; `None` fields keep the row's current value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Enqueue {
    pub desired: Option<bool>,
    pub generation: Option<i64>,
    pub mode: Option<ApplyMode>,
}

impl Enqueue {
    /// Apply this generation of the SyncSet.
    pub fn apply(generation: i64, mode: ApplyMode) -> Self {
        Self { desired: Some(true), generation: Some(generation), mode: Some(mode) }
    }

    /// Run again, still wanted, at the generation and mode the key has (a rollout
    /// decides when it moves).
    pub fn keep_revision() -> Self {
        Self { desired: Some(true), generation: None, mode: None }
    }

    /// Remove what the SyncSet applied.
    pub fn remove() -> Self {
        Self { desired: Some(false), generation: None, mode: None }
    }

    /// Run again as it is. (PostgreSQL runs a key again with one UPDATE instead.)
    pub fn again() -> Self {
        Self { desired: None, generation: None, mode: None }
    }
}

/// The queue state a status phase is stored as.
pub fn db_phase(p: Phase) -> &'static str {
    match p {
        Phase::Pending | Phase::Failed => "ready",
        Phase::Applying => "running",
        Phase::Applied => "idle",
        Phase::Parked => "parked",
    }
}

/// The status phase of a stored row. A `ready` row that has failed in this generation
/// is `Failed` (waiting for its retry); otherwise it is `Pending`.
pub fn status_phase(db: &str, attempts: u32, has_error: bool) -> Phase {
    match db {
        "running" => Phase::Applying,
        "parked" => Phase::Parked,
        "idle" => Phase::Applied,
        _ if attempts > 0 && has_error => Phase::Failed,
        _ => Phase::Pending,
    }
}

/// The parts of a key's row that decide what a completion does.
#[derive(Debug, Clone)]
pub struct Held {
    /// The row's id (SQLite's rowid, PostgreSQL's `work.id`).
    pub id: i64,
    pub fence: Fence,
    pub running: bool,
    pub dirty: bool,
    pub desired: bool,
    pub attempts: u32,
    pub generation: i64,
}

/// What a completion writes to its key's row. Every variant also drops the lease.
#[derive(Debug, Clone, PartialEq)]
pub enum Finish<'a> {
    /// `phase` is `Applied`, or `Pending` if the key became dirty meanwhile. `run_at`,
    /// `last_applied_at` = now; `observed_generation`, `inventory` and the rendering's
    /// hash as given; no error.
    Applied { phase: Phase, generation: i64, inventory: &'a [ResourceRef], rendered: Option<&'a str> },
    /// Like `Applied`, but `ready` again at `run_at` (now, if the key became dirty
    /// meanwhile), with attempts reset to 0: a requeue is not a failure.
    Requeue { generation: i64, inventory: &'a [ResourceRef], run_at: Timestamp },
    /// Removed, but wanted again meanwhile (SyncSet re-created): ready now, starting
    /// from nothing (`observed_generation` 0, empty inventory, no error).
    Restart,
    /// Removed: the row goes.
    Delete,
    /// `Failed` (retry at `run_at`), `Parked`, or `Pending` if dirty; the error is kept.
    Failed { phase: Phase, run_at: Timestamp, error: &'a str },
    /// `Pending` again at `run_at` (now, if the key became dirty meanwhile) with
    /// `reason` as its message and attempts reset; what was applied is kept.
    Waiting { run_at: Timestamp, reason: &'a str },
}

impl Finish<'_> {
    pub fn outcome(&self) -> CompleteOutcome {
        match self {
            Finish::Applied { phase, .. } | Finish::Failed { phase, .. } => CompleteOutcome::Committed(*phase),
            Finish::Restart | Finish::Requeue { .. } | Finish::Waiting { .. } => {
                CompleteOutcome::Committed(Phase::Pending)
            }
            Finish::Delete => CompleteOutcome::Removed,
        }
    }

    /// When the key is claimable again after this completion, if it is: a requeue or a
    /// retry at its `run_at`; a key that became dirty meanwhile, or restarts, now. An
    /// applied, parked or deleted key is not.
    pub fn ready_at(&self, now: Timestamp) -> Option<Timestamp> {
        match (self, self.outcome()) {
            (
                Finish::Requeue { run_at, .. } | Finish::Failed { run_at, .. } | Finish::Waiting { run_at, .. },
                CompleteOutcome::Committed(Phase::Pending | Phase::Failed),
            ) => Some(*run_at),
            (_, CompleteOutcome::Committed(Phase::Pending)) => Some(now),
            _ => None,
        }
    }

    /// The action of the `Status` event the completion appends.
    pub fn event_action(&self) -> &'static str {
        match self.outcome() {
            CompleteOutcome::Committed(p) => p.as_str(),
            _ => "Removed",
        }
    }
}

/// Decides what completion `c` does to the row `h`; `None` if its token is stale.
pub fn finish<'a>(h: &Held, c: &'a Completion, now: Timestamp, retry: &RetryPolicy) -> Option<Finish<'a>> {
    if !h.running || h.fence != c.fence {
        return None;
    }
    Some(match &c.outcome {
        RunOutcome::Applied { generation, inventory, rendered } => {
            let phase = if h.dirty { Phase::Pending } else { Phase::Applied };
            Finish::Applied { phase, generation: *generation, inventory, rendered: rendered.as_deref() }
        }
        RunOutcome::Requeue { generation, inventory, after } => {
            let run_at = if h.dirty { now } else { now.plus(*after) };
            Finish::Requeue { generation: *generation, inventory, run_at }
        }
        RunOutcome::Waiting { reason, after } => {
            let run_at = if h.dirty { now } else { now.plus(*after) };
            Finish::Waiting { run_at, reason }
        }
        RunOutcome::Removed if h.desired => Finish::Restart,
        RunOutcome::Removed => Finish::Delete,
        RunOutcome::Failed { error } => {
            let (phase, run_at) = if h.dirty {
                (Phase::Pending, now)
            } else if retry.should_park(h.attempts) && c.key.notifier_name().is_none() {
                // A notifier's failed sends never park it: a receiver that is down is
                // what it must outlast, retrying at the backoff's cap until it is back.
                (Phase::Parked, now)
            } else {
                (Phase::Failed, now.plus(retry.next_delay(h.attempts)))
            };
            Finish::Failed { phase, run_at, error }
        }
        // A change that arrived meanwhile may be the fix: run it again at once.
        RunOutcome::Parked { error } => {
            let phase = if h.dirty { Phase::Pending } else { Phase::Parked };
            Finish::Failed { phase, run_at: now, error }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::WorkKey;
    use std::time::Duration;

    fn held(dirty: bool, attempts: u32) -> Held {
        Held { id: 1, fence: Fence::new(7), running: true, dirty, desired: true, attempts, generation: 3 }
    }

    fn completion(fence: i64, outcome: RunOutcome) -> Completion {
        Completion { key: WorkKey::new("t", "c", "s"), fence: Fence::new(fence), outcome, resources: vec![] }
    }

    #[test]
    fn stale_tokens_and_released_keys_finish_nothing() {
        let retry = RetryPolicy::default();
        let c = completion(6, RunOutcome::Removed);
        assert_eq!(finish(&held(false, 1), &c, Timestamp(0), &retry), None);
        let idle = Held { running: false, ..held(false, 1) };
        assert_eq!(finish(&idle, &completion(7, RunOutcome::Removed), Timestamp(0), &retry), None);
    }

    #[test]
    fn failures_back_off_then_park_unless_dirty() {
        let retry =
            RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(8), max_attempts: 3, jitter: 0.0 };
        let c = completion(7, RunOutcome::Failed { error: "boom".into() });
        let f = |h: &Held| finish(h, &c, Timestamp(1_000), &retry).map(|f| f.outcome());
        assert_eq!(f(&held(false, 1)), Some(CompleteOutcome::Committed(Phase::Failed)));
        assert_eq!(f(&held(false, 3)), Some(CompleteOutcome::Committed(Phase::Parked)));
        assert_eq!(f(&held(true, 3)), Some(CompleteOutcome::Committed(Phase::Pending)));
        let Some(Finish::Failed { run_at, .. }) = finish(&held(false, 2), &c, Timestamp(1_000), &retry) else {
            panic!()
        };
        assert_eq!(run_at, Timestamp(3_000));
    }

    #[test]
    fn a_notifiers_failures_back_off_at_the_cap_and_never_park() {
        let retry =
            RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(8), max_attempts: 3, jitter: 0.0 };
        let c = Completion {
            key: WorkKey::notifier("t", "ops"),
            ..completion(7, RunOutcome::Failed { error: "503".into() })
        };
        let Some(Finish::Failed { phase, run_at, .. }) = finish(&held(false, 30), &c, Timestamp(1_000), &retry) else {
            panic!("failed")
        };
        assert_eq!((phase, run_at), (Phase::Failed, Timestamp(9_000)));
        let parked = Completion { outcome: RunOutcome::Parked { error: "egress".into() }, ..c };
        assert_eq!(
            finish(&held(false, 1), &parked, Timestamp(0), &retry).map(|f| f.outcome()),
            Some(CompleteOutcome::Committed(Phase::Parked))
        );
    }

    #[test]
    fn a_refusal_parks_at_once_unless_dirty() {
        let retry = RetryPolicy::default();
        let c = completion(7, RunOutcome::Parked { error: "forbidden: egress to 127.0.0.1 is denied".into() });
        let f = |h: &Held| finish(h, &c, Timestamp(1_000), &retry);
        let Some(Finish::Failed { phase: Phase::Parked, run_at, error }) = f(&held(false, 1)) else {
            panic!("{:?}", f(&held(false, 1)))
        };
        assert_eq!(
            (run_at, error),
            (Timestamp(1_000), "forbidden: egress to 127.0.0.1 is denied"),
            "the first attempt, no backoff"
        );
        assert_eq!(
            f(&held(true, 1)).map(|f| f.outcome()),
            Some(CompleteOutcome::Committed(Phase::Pending)),
            "a change arrived meanwhile"
        );
    }

    #[test]
    fn requeue_waits_unless_a_change_arrived() {
        let retry = RetryPolicy::default();
        let after = Duration::from_secs(5);
        let c = completion(7, RunOutcome::Requeue { generation: 3, inventory: vec![], after });
        let run_at = |dirty| match finish(&held(dirty, 1), &c, Timestamp(1_000), &retry) {
            Some(Finish::Requeue { run_at, generation: 3, .. }) => run_at,
            other => panic!("{other:?}"),
        };
        assert_eq!(run_at(false), Timestamp(6_000));
        assert_eq!(run_at(true), Timestamp(1_000), "a newer change runs it at once");
    }

    #[test]
    fn a_waiting_key_is_pending_with_its_reason_and_polls_unless_a_change_arrived() {
        let retry = RetryPolicy::default();
        let after = Duration::from_secs(2);
        let c = completion(7, RunOutcome::Waiting { reason: "waiting for SyncSet db".into(), after });
        let waited = |dirty| finish(&held(dirty, 4), &c, Timestamp(1_000), &retry).expect("held");
        let calm = waited(false);
        assert_eq!(calm, Finish::Waiting { run_at: Timestamp(3_000), reason: "waiting for SyncSet db" });
        assert_eq!(calm.outcome(), CompleteOutcome::Committed(Phase::Pending), "not a failure, however often");
        assert_eq!(calm.ready_at(Timestamp(1_000)), Some(Timestamp(3_000)));
        assert_eq!(waited(true).ready_at(Timestamp(1_000)), Some(Timestamp(1_000)), "a change: at once");
    }

    #[test]
    fn status_phase_round_trips_db_phase() {
        for p in Phase::ALL {
            let failed = p == Phase::Failed;
            assert_eq!(status_phase(db_phase(p), u32::from(failed), failed), p);
        }
    }
}
