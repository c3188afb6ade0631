//! Live state reported by agents (see [`crate::live`]): recorded by the shared workflow
//! ([`crate::write::live`]), ended with completions, and drift and readiness read back
//! for status.

use super::write::run;
use crate::live::{Issue, LiveRecord, LiveRecorded, LiveResource};
use crate::stored::{corrupt, decode, json};
use crate::{Result, StatusFilter};
use fleetsync_model::{LiveState, Timestamp, WorkKey};
use rusqlite::{params, Connection, Transaction};

/// Records a batch of reports: [`crate::write::live`]'s workflow. The store wakes
/// claimers itself when keys were enqueued again.
pub(super) fn record(
    tx: &Transaction<'_>,
    now: Timestamp,
    tenant: &str,
    cluster: &str,
    records: &[LiveRecord],
) -> Result<LiveRecorded> {
    let (out, _announce) = run(tx, now, async |w| crate::write::live::record(w, tenant, cluster, records).await)?;
    Ok(out)
}

/// Ends the live records of `key` whose resources are not among `kept` (stored
/// identities; see [`crate::live::kept_after`]).
pub(super) fn end_all_but(tx: &Transaction<'_>, key: &WorkKey, kept: &[String]) -> Result<()> {
    tx.prepare_cached(
        "DELETE FROM live_state WHERE tenant = ?1 AND cluster = ?2 AND syncset = ?3
             AND resource NOT IN (SELECT value FROM json_each(?4))",
    )?
    .execute(params![key.tenant, key.cluster, key.syncset, json("live_state", kept)?])?;
    Ok(())
}

pub(super) fn list(c: &Connection, tenant: &str, cluster: &str) -> Result<Vec<LiveResource>> {
    Ok(rows(c, tenant, cluster, None, None)?.into_iter().map(|(_, r)| r).collect())
}

/// A cluster's live state with each resource's stored identity, in its order: after
/// `after` (if given), at most `limit`.
pub(super) fn rows(
    c: &Connection,
    tenant: &str,
    cluster: &str,
    after: Option<&str>,
    limit: Option<usize>,
) -> Result<Vec<(String, LiveResource)>> {
    let mut stmt = c.prepare_cached(
        "SELECT resource, syncset, resource_version, state, drift, versions, updated_at FROM live_state
         WHERE tenant = ?1 AND cluster = ?2 AND (?3 IS NULL OR resource > ?3) ORDER BY resource LIMIT ?4",
    )?;
    let limit = limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
    let rows = stmt.query_map(params![tenant, cluster, after, limit], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, Option<String>>(4)?,
            r.get::<_, i64>(5)?,
            r.get::<_, i64>(6)?,
        ))
    })?;
    rows.map(|row| {
        let (resource, syncset, resource_version, state, drift, versions, at) = row?;
        let live = LiveResource {
            syncset,
            resource: decode("live_state", &resource)?,
            resource_version,
            state: LiveState::parse(&state).ok_or_else(|| corrupt("live_state", format!("state {state:?}")))?,
            drift,
            versions: u64::try_from(versions).unwrap_or(0),
            updated_at: Timestamp(at),
        };
        Ok((resource, live))
    })
    .collect()
}

/// The drifted resources of the keys a status query covers; `range`: only those of the
/// keys from the first to the last given (a page's).
pub(super) fn drifts(
    c: &Connection,
    f: &StatusFilter,
    range: Option<(&WorkKey, &WorkKey)>,
) -> Result<Vec<(WorkKey, Issue)>> {
    let mut stmt = c.prepare_cached(
        "SELECT tenant, cluster, syncset, resource, drift, resource_version, unready FROM live_state
         WHERE (drift IS NOT NULL OR unready IS NOT NULL) AND (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR cluster = ?2) AND (?3 IS NULL OR syncset = ?3)
             AND (?4 = 0 OR ((tenant, cluster, syncset) >= (?5, ?6, ?7) AND (tenant, cluster, syncset) <= (?8, ?9, ?10)))",
    )?;
    let (a, b) = range
        .map(|(a, b)| (a.clone(), b.clone()))
        .unwrap_or_else(|| (WorkKey::new("", "", ""), WorkKey::new("", "", "")));
    let ranged = range.is_some();
    let rows = stmt.query_map(
        params![f.tenant, f.cluster, f.syncset, ranged, a.tenant, a.cluster, a.syncset, b.tenant, b.cluster, b.syncset],
        |r| {
            Ok((
                WorkKey::new(r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?),
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, String>(5)?,
                r.get::<_, Option<String>>(6)?,
            ))
        },
    )?;
    let mut out = Vec::new();
    for row in rows {
        let (key, resource, drift, resource_version, unready) = row?;
        let issues = Issue::of_row(decode("live_state", &resource)?, drift, unready, resource_version);
        out.extend(issues.into_iter().map(|i| (key.clone(), i)));
    }
    Ok(out)
}
