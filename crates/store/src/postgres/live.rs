//! Live state reported by agents on PostgreSQL (see [`crate::live`]). A batch is
//! recorded by the shared workflow ([`crate::write::live`]) over `write.rs`'s
//! operations (one set-based upsert; reports of one cluster serialized by an advisory
//! lock, so two hub processes receiving the same resend cannot both store it).
//! Completions end the records of what their keys no longer apply ([`Ends`]).

use super::{query, PgResult, Tx};
use crate::live::{Issue, LiveRecord, LiveRecorded, LiveResource};
use crate::stored::{corrupt, decode, json};
use crate::StatusFilter;
use deadpool_postgres::GenericClient;
use fleetsync_model::{LiveState, Timestamp, WorkKey};
use tokio_postgres::types::ToSql;

/// Records a batch of reports: [`crate::write::live`]'s workflow.
pub(super) async fn record(
    tx: &mut Tx<'_>,
    tenant: String,
    cluster: String,
    records: &[LiveRecord],
) -> PgResult<LiveRecorded> {
    crate::write::live::record(tx, &tenant, &cluster, records).await
}

/// The live records that end with a batch of completions: per key, every one whose
/// resource is not among those kept (see [`crate::live::kept_after`]).
#[derive(Default)]
pub(super) struct Ends {
    tenants: Vec<String>,
    clusters: Vec<String>,
    syncsets: Vec<String>,
    /// The stored identities kept, per key, as a JSON array.
    kept: Vec<String>,
}

impl Ends {
    pub(super) fn push(&mut self, key: &WorkKey, kept: &[String]) -> PgResult<()> {
        self.kept.push(json("live_state", kept)?);
        self.tenants.push(key.tenant.clone());
        self.clusters.push(key.cluster.clone());
        self.syncsets.push(key.syncset.clone());
        Ok(())
    }

    /// Deletes the records that end, in one statement.
    pub(super) async fn write(&self, tx: &Tx<'_>) -> PgResult<()> {
        if self.kept.is_empty() {
            return Ok(());
        }
        tx.execute(
            "DELETE FROM live_state l
             USING unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS k(tenant, cluster, syncset, kept)
             WHERE l.tenant = k.tenant AND l.cluster = k.cluster AND l.syncset = k.syncset AND NOT (k.kept::jsonb ? l.resource)",
            &[&self.tenants, &self.clusters, &self.syncsets, &self.kept],
        )
        .await?;
        Ok(())
    }
}

pub(super) async fn list<C: GenericClient>(c: &C, tenant: String, cluster: String) -> PgResult<Vec<LiveResource>> {
    Ok(rows(c, &tenant, &cluster, None, None).await?.into_iter().map(|(_, r)| r).collect())
}

/// A cluster's live state with each resource's stored identity, in its order: after
/// `after` (if given), at most `limit`.
pub(super) async fn rows<C: GenericClient>(
    c: &C,
    tenant: &str,
    cluster: &str,
    after: Option<&str>,
    limit: Option<usize>,
) -> PgResult<Vec<(String, LiveResource)>> {
    let limit = limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX));
    let sql = if after.is_some() {
        "SELECT resource, syncset, resource_version, state, drift, versions, updated_at FROM live_state
         WHERE tenant = $1 AND cluster = $2 AND resource > $4 ORDER BY resource LIMIT $3"
    } else {
        "SELECT resource, syncset, resource_version, state, drift, versions, updated_at FROM live_state
         WHERE tenant = $1 AND cluster = $2 ORDER BY resource LIMIT $3"
    };
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&tenant, &cluster, &limit];
    if let Some(a) = &after {
        params.push(a);
    }
    let rows = query(c, sql, &params).await?;
    rows.iter()
        .map(|r| {
            let state: &str = r.try_get(3)?;
            let id: String = r.try_get(0)?;
            let live = LiveResource {
                resource: decode("live_state", &id)?,
                syncset: r.try_get(1)?,
                resource_version: r.try_get(2)?,
                state: LiveState::parse(state).ok_or_else(|| corrupt("live_state", format!("state {state:?}")))?,
                drift: r.try_get(4)?,
                versions: u64::try_from(r.try_get::<_, i64>(5)?).unwrap_or(0),
                updated_at: Timestamp(r.try_get(6)?),
            };
            Ok((id, live))
        })
        .collect()
}

/// The drifted and unready resources of the keys a status query covers.
/// `range`: only those of the keys from the first to the last given (a page's).
pub(super) async fn drifts<C: GenericClient>(
    c: &C,
    f: &StatusFilter,
    range: Option<(&WorkKey, &WorkKey)>,
) -> PgResult<Vec<(WorkKey, Issue)>> {
    let mut sql = String::from(
        "SELECT tenant, cluster, syncset, resource, drift, resource_version, unready FROM live_state
         WHERE (drift IS NOT NULL OR unready IS NOT NULL) AND ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR cluster = $2)
             AND ($3::text IS NULL OR syncset = $3)",
    );
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&f.tenant, &f.cluster, &f.syncset];
    if let Some((a, b)) = range {
        sql.push_str(" AND (tenant, cluster, syncset) >= ($4, $5, $6) AND (tenant, cluster, syncset) <= ($7, $8, $9)");
        params.extend([&a.tenant as &(dyn ToSql + Sync), &a.cluster, &a.syncset, &b.tenant, &b.cluster, &b.syncset]);
    }
    let rows = query(c, &sql, &params).await?;
    let mut out = Vec::new();
    for r in &rows {
        let key = WorkKey::new(r.try_get::<_, String>(0)?, r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?);
        let issues = Issue::of_row(decode("live_state", r.try_get(3)?)?, r.try_get(4)?, r.try_get(6)?, r.try_get(5)?);
        out.extend(issues.into_iter().map(|i| (key.clone(), i)));
    }
    Ok(out)
}
