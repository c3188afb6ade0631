//! A SyncSet's status summed up: the pure part every backend shares. No backend reads
//! the SyncSet's keys. Each keeps its keys counted by group (stored phase, failed, at
//! the generation asked for) in the transactions that change them (`key_counts`, kept
//! by triggers: SQLite's per row, PostgreSQL's per statement as deltas, see the store's
//! `postgres/counts.rs`), finds when the longest-waiting key became due from its claim
//! order, and the first few failures from an index of keys with an error. This turns
//! those rows into a [`StatusSummary`]; the SQL the backends share to read them is the
//! store's (`fleetsync_store::summary`).

use crate::lifecycle::status_phase;
use fleetsync_model::{KeyFailure, Phase, StatusSummary, Timestamp};
use std::collections::BTreeMap;

/// How many failures a summary names.
pub const SUMMARY_FAILURES: usize = 5;

/// One group of a SyncSet's keys, as the counts return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    /// The stored phase (`idle`, `ready`, `running`, `parked`).
    pub db_phase: String,
    /// Attempts made and an error recorded (a `ready` key is then Failed).
    pub failed: bool,
    /// Observed generation equals the generation asked for.
    pub at_generation: bool,
    pub count: u64,
}

/// A failed or parked key, as the failures query returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailureRow {
    /// Its SyncSet, when the summary is a tenant's.
    pub syncset: Option<String>,
    pub cluster: String,
    pub db_phase: String,
    pub attempts: u32,
    pub last_error: Option<String>,
}

/// The keys of these groups counted by phase, every phase named (0 where none is): a
/// summary's `phases`, and the store-wide counts behind `/metrics`.
pub fn phases<'a>(groups: impl IntoIterator<Item = &'a Group>) -> BTreeMap<Phase, u64> {
    let mut phases: BTreeMap<Phase, u64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
    for g in groups {
        *phases.entry(status_phase(&g.db_phase, u32::from(g.failed), g.failed)).or_default() += g.count;
    }
    phases
}

/// Keys by phase for each `(tenant, syncset)` of these groups that counts any (each
/// phase present, 0 where none is), and summed over all of them.
#[allow(clippy::type_complexity)]
pub fn phases_by_syncset(
    groups: impl IntoIterator<Item = ((String, String), Group)>,
) -> (BTreeMap<(String, String), BTreeMap<Phase, u64>>, BTreeMap<Phase, u64>) {
    let mut grouped: BTreeMap<(String, String), Vec<Group>> = BTreeMap::new();
    for (at, g) in groups {
        grouped.entry(at).or_default().push(g);
    }
    // A SyncSet whose counts sum to nothing (rows left at 0) has no keys.
    let by_syncset: BTreeMap<_, _> = grouped
        .into_iter()
        .filter(|(_, gs)| gs.iter().any(|g| g.count > 0))
        .map(|(at, gs)| (at, phases(&gs)))
        .collect();
    let mut total: BTreeMap<Phase, u64> = Phase::ALL.iter().map(|p| (*p, 0)).collect();
    for counts in by_syncset.values() {
        for (p, n) in counts {
            *total.entry(*p).or_default() += n;
        }
    }
    (by_syncset, total)
}

/// The summary of these groups, the time the longest-waiting key became due, and
/// these failures.
pub fn summarize(
    groups: impl IntoIterator<Item = Group>,
    oldest_due: Option<Timestamp>,
    failures: Vec<FailureRow>,
) -> StatusSummary {
    let groups: Vec<Group> = groups.into_iter().filter(|g| g.count > 0).collect();
    let mut summary = StatusSummary {
        total: groups.iter().map(|g| g.count).sum(),
        phases: phases(&groups),
        at_generation: groups.iter().filter(|g| g.at_generation).map(|g| g.count).sum(),
        oldest_pending_since: oldest_due,
        failures: vec![],
    };
    summary.failures = failures
        .into_iter()
        .take(SUMMARY_FAILURES)
        .map(|f| KeyFailure {
            syncset: f.syncset,
            phase: status_phase(&f.db_phase, f.attempts, f.last_error.is_some()),
            cluster: f.cluster,
            attempts: f.attempts,
            last_error: f.last_error,
        })
        .collect();
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(db_phase: &str, failed: bool, at_generation: bool, count: u64) -> Group {
        Group { db_phase: db_phase.into(), failed, at_generation, count }
    }

    #[test]
    fn keys_are_counted_per_syncset_and_in_all() {
        let at = |t: &str, s: &str| (t.to_string(), s.to_string());
        let (by, total) = phases_by_syncset([
            (at("a", "web"), group("idle", false, true, 3)),
            (at("a", "web"), group("ready", true, false, 2)),
            (at("b", "db"), group("ready", false, false, 1)),
            (at("b", "gone"), group("idle", false, true, 0)),
        ]);
        assert!(!by.contains_key(&at("b", "gone")), "a SyncSet without keys is not listed");
        assert_eq!((by[&at("a", "web")][&Phase::Applied], by[&at("a", "web")][&Phase::Failed]), (3, 2));
        assert_eq!((by[&at("b", "db")][&Phase::Pending], by[&at("b", "db")][&Phase::Parked]), (1, 0));
        assert_eq!((total[&Phase::Applied], total[&Phase::Failed], total[&Phase::Pending]), (3, 2, 1));
    }

    #[test]
    fn groups_sum_by_phase_and_generation() {
        let s = summarize(
            [
                group("idle", false, true, 7),
                group("ready", false, false, 2),
                group("ready", true, false, 3),
                group("running", false, false, 1),
                group("parked", true, false, 4),
                group("idle", false, false, 0),
            ],
            Some(Timestamp(40)),
            vec![],
        );
        assert_eq!(s.total, 17);
        assert_eq!(s.at_generation, 7);
        let phases: Vec<u64> = Phase::ALL.iter().map(|p| s.phases[p]).collect();
        assert_eq!(phases, [2, 1, 7, 3, 4], "Pending, Applying, Applied, Failed, Parked");
        assert_eq!(s.oldest_pending_since, Some(Timestamp(40)));
    }

    #[test]
    fn an_empty_syncset_has_every_phase_at_zero_and_no_wait() {
        let s = summarize([], None, vec![]);
        assert_eq!((s.total, s.at_generation, s.oldest_pending_since), (0, 0, None));
        assert_eq!(s.phases.len(), Phase::ALL.len());
        assert!(s.phases.values().all(|n| *n == 0));
    }

    #[test]
    fn failures_are_named_with_their_phase_and_capped() {
        let row = |c: &str, db: &str| FailureRow {
            syncset: None,
            cluster: c.into(),
            db_phase: db.into(),
            attempts: 3,
            last_error: Some("boom".into()),
        };
        let rows = (0..8).map(|i| row(&format!("c{i}"), if i % 2 == 0 { "parked" } else { "ready" })).collect();
        let s = summarize([], None, rows);
        assert_eq!(s.failures.len(), SUMMARY_FAILURES);
        assert_eq!((s.failures[0].phase, s.failures[1].phase), (Phase::Parked, Phase::Failed));
        assert_eq!(s.failures[1].last_error.as_deref(), Some("boom"));
    }
}
