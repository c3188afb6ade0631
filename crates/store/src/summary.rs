//! A SyncSet's status summed up: the SQL both backends share to read the counted groups
//! and the first failures, beside the pure part ([`fleetsync_policy::summary`], re-exported
//! here) that turns those rows into a [`StatusSummary`](fleetsync_model::StatusSummary).

pub use fleetsync_policy::summary::*;

use fleetsync_model::Phase;

/// The keys a summary counts: a tenant's (`$1`), or one SyncSet's of it (`$2`), as a
/// condition on the columns of `alias` (`""`, or a table alias and a dot).
pub(crate) fn scope(alias: &str, syncset: bool) -> String {
    match syncset {
        true => format!("{alias}tenant = $1 AND {alias}syncset = $2"),
        false => format!("{alias}tenant = $1"),
    }
}

/// The first failed or parked keys in the scope (see [`scope`]) by SyncSet and cluster:
/// cluster, phase, attempts, last error, SyncSet. Served by the index of keys with an
/// error (`work_failed`), in its order.
pub(crate) fn failures_sql(syncset: bool) -> String {
    let failed = crate::page::phase_condition(&[Phase::Failed, Phase::Parked]).unwrap_or_default();
    let scope = scope("", syncset);
    format!(
        "SELECT cluster, phase, attempts, last_error, syncset FROM work
         WHERE {scope} AND last_error IS NOT NULL AND {failed}
         ORDER BY tenant, syncset, cluster LIMIT {SUMMARY_FAILURES}"
    )
}

/// A tenant's clusters counted by condition, from per-cluster counts: `source` yields
/// `n` (keys), `bad` (failed or parked), `done` (applied and wanted), `since` (when the
/// cluster got its first key) and `seen` (its newest successful run or agent report,
/// if any) per cluster, one row each; `cutoff` is the parameter holding the time before
/// which a cluster is stale. The rule is
/// [`ClusterStatus::roll_up`](fleetsync_model::ClusterStatus::roll_up)'s: degraded if a
/// key failed or parked, else ready if every key is done, else progressing; stale, across
/// the three, when the later of its newest sign of life and its first key is older than
/// the cutoff (a report from before its first key does not make a new cluster stale).
pub(crate) fn cluster_conditions_sql(source: &str, cutoff: &str) -> String {
    format!(
        "SELECT COUNT(*) FILTER (WHERE bad = 0 AND done = n), COUNT(*) FILTER (WHERE bad = 0 AND done < n),
                COUNT(*) FILTER (WHERE bad > 0), COUNT(*) FILTER (WHERE COALESCE(CASE WHEN seen > since THEN seen ELSE since END, seen) < {cutoff})
         FROM ({source}) c WHERE n > 0"
    )
}
