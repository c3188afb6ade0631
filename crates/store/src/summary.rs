//! A SyncSet's status summed up: the pure part both backends share. Each backend reads
//! its keys grouped by stored phase, failure and generation (one grouped query over the
//! SyncSet's index range: no key is decoded or sent) and the first few failures; this
//! turns those rows into a [`StatusSummary`].

use crate::lifecycle::status_phase;
use fleetsync_model::{KeyFailure, Phase, StatusSummary, Timestamp};

/// How many failures a summary names.
pub const SUMMARY_FAILURES: usize = 5;

/// One group of a SyncSet's keys, as the grouped query returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    /// The stored phase (`idle`, `ready`, `running`, `parked`).
    pub db_phase: String,
    /// Attempts made and an error recorded (a `ready` key is then Failed).
    pub failed: bool,
    /// Observed generation equals the generation asked for.
    pub at_generation: bool,
    pub count: u64,
    /// The earliest last change of the group's keys.
    pub oldest_change: Option<Timestamp>,
}

/// A failed or parked key, as the failures query returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FailureRow {
    pub cluster: String,
    pub db_phase: String,
    pub attempts: u32,
    pub last_error: Option<String>,
}

/// The SyncSet's keys grouped (`$1`: tenant, `$2`: SyncSet), served by the index on
/// `(tenant, syncset)`: phase, failed, at generation, count, earliest last change.
pub(crate) const GROUPS_SQL: &str = "SELECT phase, attempts > 0 AND last_error IS NOT NULL, observed_generation = generation,
        COUNT(*), MIN(updated_at)
     FROM work WHERE tenant = $1 AND syncset = $2 GROUP BY 1, 2, 3";

/// The SyncSet's first failed or parked keys by cluster (`$1`: tenant, `$2`: SyncSet):
/// cluster, phase, attempts, last error.
pub(crate) fn failures_sql() -> String {
    let failed = crate::page::phase_condition(&[Phase::Failed, Phase::Parked]).unwrap_or_default();
    format!(
        "SELECT cluster, phase, attempts, last_error FROM work WHERE tenant = $1 AND syncset = $2 AND {failed}
         ORDER BY cluster LIMIT {SUMMARY_FAILURES}"
    )
}

/// The summary of these groups and failures.
pub(crate) fn summarize(groups: impl IntoIterator<Item = Group>, failures: Vec<FailureRow>) -> StatusSummary {
    let mut summary = StatusSummary { phases: Phase::ALL.iter().map(|p| (*p, 0)).collect(), ..StatusSummary::default() };
    for g in groups {
        let phase = status_phase(&g.db_phase, u32::from(g.failed), g.failed);
        summary.total += g.count;
        *summary.phases.entry(phase).or_default() += g.count;
        if g.at_generation {
            summary.at_generation += g.count;
        }
        if matches!(phase, Phase::Pending | Phase::Failed | Phase::Applying) {
            summary.oldest_pending_since = match (summary.oldest_pending_since, g.oldest_change) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
    }
    summary.failures = failures
        .into_iter()
        .take(SUMMARY_FAILURES)
        .map(|f| KeyFailure {
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

    fn group(db_phase: &str, failed: bool, at_generation: bool, count: u64, oldest: i64) -> Group {
        Group { db_phase: db_phase.into(), failed, at_generation, count, oldest_change: Some(Timestamp(oldest)) }
    }

    #[test]
    fn groups_sum_by_phase_and_generation_and_the_oldest_wait_ignores_settled_keys() {
        let s = summarize(
            [
                group("idle", false, true, 7, 1),
                group("ready", false, false, 2, 50),
                group("ready", true, false, 3, 40),
                group("running", false, false, 1, 60),
                group("parked", true, false, 4, 5),
            ],
            vec![],
        );
        assert_eq!(s.total, 17);
        assert_eq!(s.at_generation, 7);
        let phases: Vec<u64> = Phase::ALL.iter().map(|p| s.phases[p]).collect();
        assert_eq!(phases, [2, 1, 7, 3, 4], "Pending, Applying, Applied, Failed, Parked");
        // Applied (1) and Parked (5) keys do not wait to be applied.
        assert_eq!(s.oldest_pending_since, Some(Timestamp(40)));
    }

    #[test]
    fn an_empty_syncset_has_every_phase_at_zero_and_no_wait() {
        let s = summarize([], vec![]);
        assert_eq!((s.total, s.at_generation, s.oldest_pending_since), (0, 0, None));
        assert_eq!(s.phases.len(), Phase::ALL.len());
        assert!(s.phases.values().all(|n| *n == 0));
    }

    #[test]
    fn failures_are_named_with_their_phase_and_capped() {
        let row = |c: &str, db: &str| FailureRow { cluster: c.into(), db_phase: db.into(), attempts: 3, last_error: Some("boom".into()) };
        let rows = (0..8).map(|i| row(&format!("c{i}"), if i % 2 == 0 { "parked" } else { "ready" })).collect();
        let s = summarize([], rows);
        assert_eq!(s.failures.len(), SUMMARY_FAILURES);
        assert_eq!((s.failures[0].phase, s.failures[1].phase), (Phase::Parked, Phase::Failed));
        assert_eq!(s.failures[1].last_error.as_deref(), Some("boom"));
    }
}
