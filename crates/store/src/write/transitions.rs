//! What each queue operation does to a key's row in `work`, written once for both
//! backends: the lifecycle of [`crate::lifecycle`] as the SQL that carries it out.
//!
//! A queue operation touches many rows in one statement (a whole apply's keys, every
//! idle key at a resync), so its rule is a SET clause and a guard, not a function a
//! backend calls per row. Both backends build their statements from these, once, so a
//! change to the lifecycle is made here and nowhere else; what stays in a backend is
//! how the rows are found and locked and how parameters are passed.
//!
//! A rule's text names its inputs as placeholders, which [`Transition::sql`] fills:
//! `{row}` qualifies a column of the row as it was (`""`, or `"w."` where the statement
//! gives the table an alias), and the others are the backend's parameters (`?7`, `$1`)
//! or literals. A completion's row write is decided per row by [`crate::lifecycle::finish`]
//! instead (see [`super::complete`]).

/// One operation's effect on a key's row: the assignments, and the rows it applies to.
pub(crate) struct Transition {
    /// The SET clause.
    set: &'static str,
    /// Which rows it applies to (the guard): `TRUE` for every row the statement selects.
    when: &'static str,
}

impl Transition {
    /// The SET clause with its placeholders filled by `args` (`("now", "?7")`, …).
    pub(crate) fn sql(&self, args: &[(&str, &str)]) -> String {
        fill(self.set, args)
    }

    /// The guard with its placeholders filled by `args`.
    pub(crate) fn guard(&self, args: &[(&str, &str)]) -> String {
        fill(self.when, args)
    }
}

/// `text` (a rule's SQL) with its placeholders filled by `args`.
pub(crate) fn fill(text: &str, args: &[(&str, &str)]) -> String {
    let mut out = text.to_string();
    for (name, value) in args {
        out = out.replace(&format!("{{{name}}}"), value);
    }
    debug_assert!(!out.contains('{'), "a placeholder left unfilled in {out}");
    out
}

/// A change to the key (an apply, a removal, a run again). Coalesced: one row per key,
/// a newer change replacing the pending one. A running key stays running and becomes
/// dirty (`want_seq` passes `claimed_seq`), so its completion queues it again; any other
/// key is ready now. A change resets attempts (a fresh set of retries, which un-parks a
/// parked key) and starts the wait a change-to-apply latency measures. `{bump}` is 1 for
/// a change that dirties the key and 0 for a reconciler's own write, which takes the new
/// generation but leaves the key clean, with its attempts.
pub(crate) const CHANGE: Transition = Transition {
    set: "want_seq = {row}want_seq + {bump},
          attempts = CASE WHEN {bump} = 1 THEN 0 ELSE {row}attempts END,
          pending_since = CASE WHEN {bump} = 1 THEN COALESCE({row}pending_since, {now}) ELSE {row}pending_since END,
          run_at = CASE WHEN {row}phase = 'running' THEN {row}run_at ELSE {now} END,
          phase = CASE WHEN {row}phase = 'running' THEN 'running' ELSE 'ready' END,
          updated_at = {now}",
    when: "TRUE",
};

// Written once as macros, so that [`DUE`], [`EXPIRED`] and the guard of [`CLAIM`] are
// one text each, put together at compile time.
macro_rules! due {
    () => {
        "{row}phase = 'ready' AND {row}run_at <= {now}"
    };
}
macro_rules! expired {
    () => {
        "{row}phase = 'running' AND {row}lease_expires_at <= {now}"
    };
}

/// A claim may take a ready key whose time has come.
pub(crate) const DUE: &str = due!();
/// A claim may take a running key whose lease ran out (its worker is gone or late):
/// a take-over.
pub(crate) const EXPIRED: &str = expired!();

/// A claim: the key runs under a new lease with fence `{fence}`, held by `{owner}` until
/// `{expires}`; the run answers every change made so far (`claimed_seq`), and counts
/// as an attempt. A first attempt starts the run's latency at the change that made it
/// pending; a retry keeps the first attempt's start.
pub(crate) const CLAIM: Transition = Transition {
    set: "phase = 'running', fence = {fence}, lease_owner = {owner}, lease_expires_at = {expires},
          claimed_seq = {row}want_seq, attempts = {row}attempts + 1, updated_at = {now},
          running_since = CASE WHEN {row}attempts > 0 THEN {row}running_since ELSE {row}pending_since END,
          pending_since = NULL",
    when: concat!("(", due!(), ") OR (", expired!(), ")"),
};

/// A worker gives a leased key back (it shuts down, or will not run it): ready now, the
/// attempt not counted. Only under the lease's own fence: a stale token changes nothing.
pub(crate) const RELEASE: Transition = Transition {
    set: "phase = 'ready', run_at = {now}, attempts = CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END,
          lease_owner = NULL, lease_expires_at = NULL, updated_at = {now}",
    when: "phase = 'running' AND fence = {fence}",
};

/// A process that runs work on a store alone takes back every lease at start: the
/// keys its predecessor ran are ready now, their attempts as they were.
pub(crate) const TAKE_BACK: Transition = Transition {
    set: "phase = 'ready', run_at = {now}, lease_owner = NULL, lease_expires_at = NULL, updated_at = {now}",
    when: "phase = 'running'",
};

/// A resync: every idle or parked key runs again now, with a fresh set of retries. It
/// is not a change of desired state, so it starts no change-to-apply wait.
pub(crate) const RESYNC: Transition = Transition {
    set: "want_seq = want_seq + 1, phase = 'ready', run_at = {now}, attempts = 0, updated_at = {now}",
    when: "phase IN ('idle', 'parked')",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_by_name_and_a_row_qualifier_reaches_every_column_read() {
        let set = CHANGE.sql(&[("row", "w."), ("now", "$7"), ("bump", "EXCLUDED.want_seq")]);
        assert!(set.contains("want_seq = w.want_seq + EXCLUDED.want_seq"), "{set}");
        assert!(set.contains("COALESCE(w.pending_since, $7)"), "{set}");
        assert!(set.contains("phase = CASE WHEN w.phase = 'running' THEN 'running' ELSE 'ready' END"), "{set}");
        assert!(!set.contains('{'), "{set}");
        let unqualified = CHANGE.sql(&[("row", ""), ("now", "?7"), ("bump", "?9")]);
        assert!(unqualified.contains("attempts = CASE WHEN ?9 = 1 THEN 0 ELSE attempts END"), "{unqualified}");
    }

    #[test]
    fn a_release_counts_no_attempt_below_zero_and_only_under_its_fence() {
        assert!(RELEASE.sql(&[("now", "$1")]).contains("CASE WHEN attempts > 0 THEN attempts - 1 ELSE 0 END"));
        assert_eq!(RELEASE.guard(&[("fence", "$5")]), "phase = 'running' AND fence = $5");
    }
}
