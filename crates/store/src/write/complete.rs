//! What a completion writes, decided once for every backend.
//!
//! A completion stays each backend's own batched SQL (one transaction for a call's
//! completions; on PostgreSQL set-based statements, pipelined at commit), because
//! writing it over the storage operations one at a time would add round trips to the
//! hottest path. Every decision in it is made here instead, from the row the backend
//! read and locked: [`crate::lifecycle::finish`] decides the completion, and
//! [`completed`] turns it into the columns to write, the live records to end, the
//! `Status` event and what the commit announces. The backend carries the value out.

use crate::lifecycle::{db_phase, finish, Finish, Held};
use crate::plan::Announce;
use crate::{CompleteOutcome, Completion, RetryPolicy};
use fleetsync_model::{Phase, ResourceRef, Timestamp};

/// What a completion does, as its backend writes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Completed<'a> {
    /// The key's row: updated or deleted. Every write also drops the lease.
    pub(crate) row: RowWrite<'a>,
    /// The key's live records to keep (stored identities); the others end. `None`:
    /// none ends.
    pub(crate) live_kept: Option<Vec<String>>,
    /// The action of the `Status` event appended (at the key's generation).
    pub(crate) event_action: &'static str,
    pub(crate) announce: Announce,
    pub(crate) outcome: CompleteOutcome,
}

/// A completion's write of its key's row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum RowWrite<'a> {
    Update(CompletedRow<'a>),
    /// The row goes.
    Delete,
}

/// The columns a completion sets; `None` keeps the row's value, except `last_error`,
/// which `None` clears. `resources` (what the run reported) are the completion's,
/// except after a wait (`keep_resources`), which applied nothing: the last run's stay.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CompletedRow<'a> {
    pub(crate) phase: Phase,
    pub(crate) run_at: Timestamp,
    pub(crate) observed_generation: Option<i64>,
    pub(crate) inventory: Option<&'a [ResourceRef]>,
    pub(crate) last_error: Option<&'a str>,
    pub(crate) last_applied_at: Option<Timestamp>,
    /// Attempts start over (a requeue is not a failure).
    pub(crate) reset_attempts: bool,
    /// The hash of the rendering applied (`Some(None)`: none, a SyncSet that is not
    /// templated); `None` keeps the row's.
    pub(crate) rendered: Option<Option<&'a str>>,
    /// Keep the per-resource results of the last run that applied (a wait reports none).
    pub(crate) keep_resources: bool,
}

impl CompletedRow<'_> {
    /// The stored phase ([`db_phase`]).
    pub(crate) fn db_phase(&self) -> &'static str {
        db_phase(self.phase)
    }
}

/// Decides what completion `c` does to the row `h` at `now`; `None` if its token is
/// stale (nothing is written).
pub(crate) fn decide<'a>(h: &Held, c: &'a Completion, now: Timestamp, retry: &RetryPolicy) -> Option<Completed<'a>> {
    finish(h, c, now, retry).map(|fin| completed(&fin, now))
}

/// What the decided completion `fin` writes at `now`.
pub(crate) fn completed<'a>(fin: &Finish<'a>, now: Timestamp) -> Completed<'a> {
    let update = |phase, run_at| CompletedRow {
        phase,
        run_at,
        observed_generation: None,
        inventory: None,
        last_error: None,
        last_applied_at: None,
        reset_attempts: false,
        rendered: None,
        keep_resources: false,
    };
    let row = match fin {
        Finish::Applied { phase, generation, inventory, rendered } => RowWrite::Update(CompletedRow {
            observed_generation: Some(*generation),
            inventory: Some(inventory),
            last_applied_at: Some(now),
            rendered: Some(*rendered),
            ..update(*phase, now)
        }),
        Finish::Requeue { generation, inventory, run_at } => RowWrite::Update(CompletedRow {
            observed_generation: Some(*generation),
            inventory: Some(inventory),
            last_applied_at: Some(now),
            rendered: Some(None),
            reset_attempts: true,
            ..update(Phase::Pending, *run_at)
        }),
        Finish::Restart => RowWrite::Update(CompletedRow {
            observed_generation: Some(0),
            inventory: Some(&[]),
            rendered: Some(None),
            ..update(Phase::Pending, now)
        }),
        Finish::Delete => RowWrite::Delete,
        Finish::Failed { phase, run_at, error } => {
            RowWrite::Update(CompletedRow { last_error: Some(error), ..update(*phase, *run_at) })
        }
        Finish::Waiting { run_at, reason } => RowWrite::Update(CompletedRow {
            last_error: Some(reason),
            reset_attempts: true,
            keep_resources: true,
            ..update(Phase::Pending, *run_at)
        }),
    };
    Completed {
        row,
        live_kept: crate::live::kept_after(fin),
        event_action: fin.event_action(),
        announce: Announce::completed(fin, now),
        outcome: fin.outcome(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Fence, RunOutcome};
    use fleetsync_model::WorkKey;

    fn held(dirty: bool) -> Held {
        Held { id: 1, fence: Fence::new(7), running: true, dirty, desired: true, attempts: 1, generation: 3 }
    }

    fn completion(outcome: RunOutcome) -> Completion {
        Completion { key: WorkKey::new("t", "c", "s"), fence: Fence::new(7), outcome, resources: vec![] }
    }

    #[test]
    fn an_applied_run_records_what_it_applied_and_when() {
        let (now, retry) = (Timestamp(1_000), RetryPolicy::default());
        let c = completion(RunOutcome::Applied { generation: 3, inventory: vec![], rendered: None });
        let done = decide(&held(false), &c, now, &retry).expect("held");
        let RowWrite::Update(row) = &done.row else { panic!("{done:?}") };
        assert_eq!(
            (row.db_phase(), row.run_at, row.observed_generation, row.last_applied_at, row.last_error),
            ("idle", now, Some(3), Some(now), None)
        );
        assert!(!row.reset_attempts && row.inventory == Some(&[][..]));
        assert_eq!((done.event_action, done.live_kept), ("Applied", Some(vec![])));
        let dirty = decide(&held(true), &c, now, &retry).expect("held");
        let RowWrite::Update(row) = &dirty.row else { panic!("{dirty:?}") };
        assert_eq!((row.db_phase(), dirty.announce.work_at), ("ready", Some(now)), "a change arrived: again at once");
    }

    #[test]
    fn a_failure_keeps_what_the_last_good_run_applied_and_its_live_records() {
        let (now, retry) = (Timestamp(1_000), RetryPolicy::default());
        let c = completion(RunOutcome::Failed { error: "boom".into() });
        let done = decide(&held(false), &c, now, &retry).expect("held");
        let RowWrite::Update(row) = &done.row else { panic!("{done:?}") };
        assert_eq!((row.observed_generation, row.inventory, row.last_applied_at), (None, None, None), "kept");
        assert_eq!((row.last_error, row.reset_attempts, done.live_kept), (Some("boom"), false, None));
        assert!(row.run_at > now, "a retry after its backoff");
    }

    #[test]
    fn a_removal_deletes_the_row_or_starts_over_when_wanted_again() {
        let (now, retry) = (Timestamp(1_000), RetryPolicy::default());
        let c = completion(RunOutcome::Removed);
        let unwanted = Held { desired: false, ..held(false) };
        let gone = decide(&unwanted, &c, now, &retry).expect("held");
        assert_eq!(
            (gone.row, gone.outcome, gone.event_action),
            (RowWrite::Delete, CompleteOutcome::Removed, "Removed")
        );
        let again = decide(&held(false), &c, now, &retry).expect("held");
        let RowWrite::Update(row) = &again.row else { panic!("{again:?}") };
        assert_eq!((row.db_phase(), row.observed_generation, row.inventory), ("ready", Some(0), Some(&[][..])));
        let requeue = completion(RunOutcome::Requeue {
            generation: 3,
            inventory: vec![],
            after: std::time::Duration::from_secs(5),
        });
        let later = decide(&held(false), &requeue, now, &retry).expect("held");
        let RowWrite::Update(row) = &later.row else { panic!("{later:?}") };
        assert_eq!((row.run_at, row.reset_attempts), (Timestamp(6_000), true));
        assert_eq!(decide(&Held { fence: Fence::new(6), ..held(false) }, &c, now, &retry), None, "a stale token");
    }
}
