//! Revisions ([`crate::revision`]) and rollouts ([`crate::rollout`]) on PostgreSQL: the
//! same rows as SQLite's (`sqlite/rollouts.rs`), set-based.
//!
//! Revisions and rollouts are written by object writes (applying or deleting a
//! SyncSet), which hold their tenant's advisory lock (see [`super`]), and by rollout
//! writes ([`crate::write::rollout_write`]), which take the same lock: so no two
//! writers of a tenant's revisions, parts or rollouts ever wait for each other's rows,
//! and a cluster or SyncSet applied while a rollout moves sees the rollout either
//! before or after.

use super::{query, PgResult, Tx};
use crate::revision::{assemble, RevisionsDrop};
use crate::rollout::RolloutState;
use crate::stored::{corrupt, decode, json};
use crate::write::RevisionRow;
use deadpool_postgres::GenericClient;
use fleetsync_model::{RolloutPhase, SyncSet, Timestamp};
use std::collections::{BTreeMap, HashMap};
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// Stores a revision unless it is stored already: the revision row, and each of its
/// resources once per tenant (counted once more for each time this revision holds it).
pub(super) async fn revision_put(tx: &Tx<'_>, row: &RevisionRow<'_>) -> PgResult<()> {
    let (tenant, syncset, split) = (row.tenant, row.syncset, row.split);
    let parts = json("revisions", &split.hashes())?;
    let inserted = tx
        .query_opt(
            "INSERT INTO revisions (tenant, syncset, generation, apply_mode, head, parts) VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT (tenant, syncset, generation) DO NOTHING
             RETURNING 1",
            &[&tenant, &syncset, &row.generation, &row.mode.as_str(), &split.head, &parts],
        )
        .await?;
    if inserted.is_none() || split.parts.is_empty() {
        return Ok(());
    }
    // One row per distinct resource (a statement may not upsert a row twice), in hash
    // order.
    let mut counted: BTreeMap<&str, (&str, i64)> = BTreeMap::new();
    for (hash, body) in &split.parts {
        counted.entry(hash.as_str()).or_insert((body.as_str(), 0)).1 += 1;
    }
    let hashes: Vec<&str> = counted.keys().copied().collect();
    let bodies: Vec<&str> = counted.values().map(|(body, _)| *body).collect();
    let refs: Vec<i64> = counted.values().map(|(_, n)| *n).collect();
    tx.execute(
        "INSERT INTO revision_parts AS p (tenant, hash, body, refs)
         SELECT $1, u.hash, u.body, u.refs FROM unnest($2::text[], $3::text[], $4::bigint[]) AS u(hash, body, refs)
         ORDER BY u.hash
         ON CONFLICT (tenant, hash) DO UPDATE SET refs = p.refs + EXCLUDED.refs",
        &[&tenant, &hashes, &bodies, &refs],
    )
    .await?;
    Ok(())
}

/// The SyncSet as it was at `generation`, if that revision is kept.
pub(super) async fn revision_get<C: GenericClient>(
    c: &C,
    tenant: &str,
    syncset: &str,
    generation: i64,
) -> PgResult<Option<SyncSet>> {
    let rows = query(
        c,
        "SELECT head, parts FROM revisions WHERE tenant = $1 AND syncset = $2 AND generation = $3",
        &[&tenant, &syncset, &generation],
    )
    .await?;
    let Some(row) = rows.first() else { return Ok(None) };
    let head: &str = row.try_get(0)?;
    let hashes: Vec<String> = decode("revisions", row.try_get(1)?)?;
    let mut bodies: HashMap<String, String> = HashMap::with_capacity(hashes.len());
    if !hashes.is_empty() {
        let parts =
            query(c, "SELECT hash, body FROM revision_parts WHERE tenant = $1 AND hash = ANY($2)", &[&tenant, &hashes])
                .await?;
        for p in &parts {
            bodies.insert(p.try_get(0)?, p.try_get(1)?);
        }
    }
    let bodies = hashes
        .iter()
        .map(|h| bodies.get(h).cloned().ok_or_else(|| corrupt("revision_parts", format!("missing {h}"))))
        .collect::<crate::Result<Vec<String>>>()?;
    Ok(Some(assemble(head, generation, bodies)?))
}

/// Deletes the SyncSet's revisions `drop` names, releasing their resources.
pub(super) async fn revisions_drop(tx: &Tx<'_>, tenant: &str, syncset: &str, drop: &RevisionsDrop) -> PgResult<()> {
    let gone = tx
        .query(
            "DELETE FROM revisions WHERE tenant = $1 AND syncset = $2 AND generation < $3 AND generation <> ALL($4)
             RETURNING parts",
            &[&tenant, &syncset, &drop.below, &drop.keep],
        )
        .await?;
    let mut released: BTreeMap<String, i64> = BTreeMap::new();
    for r in &gone {
        for hash in decode::<Vec<String>>("revisions", r.try_get(0)?)? {
            *released.entry(hash).or_insert(0) += 1;
        }
    }
    if released.is_empty() {
        return Ok(());
    }
    let hashes: Vec<&str> = released.keys().map(String::as_str).collect();
    let counts: Vec<i64> = released.values().copied().collect();
    let release: [&(dyn ToSql + Sync); 3] = [&tenant, &hashes, &counts];
    let unheld: [&(dyn ToSql + Sync); 2] = [&tenant, &hashes];
    // The DELETE needs nothing from the UPDATE's answer (only its effect, which it
    // sees: it runs after it, in this transaction): one round trip.
    tx.pipeline(&[
        (
            "UPDATE revision_parts p SET refs = p.refs - u.n FROM unnest($2::text[], $3::bigint[]) AS u(hash, n)
             WHERE p.tenant = $1 AND p.hash = u.hash",
            &release,
        ),
        ("DELETE FROM revision_parts WHERE tenant = $1 AND hash = ANY($2) AND refs <= 0", &unheld),
    ])
    .await?;
    Ok(())
}

const COLUMNS: &str = "tenant, syncset, phase, step, revision, stable, reason, step_started_at, healthy_since, promoted, version, updated_at";

fn state_of(r: &Row) -> PgResult<RolloutState> {
    let phase: &str = r.try_get(2)?;
    Ok(RolloutState {
        tenant: r.try_get(0)?,
        syncset: r.try_get(1)?,
        phase: RolloutPhase::parse(phase).ok_or_else(|| corrupt("rollouts", format!("phase {phase:?}")))?,
        step: usize::try_from(r.try_get::<_, i64>(3)?).map_err(|e| corrupt("rollouts", format!("step: {e}")))?,
        revision: r.try_get(4)?,
        stable: r.try_get(5)?,
        reason: r.try_get(6)?,
        step_started_at: Timestamp(r.try_get(7)?),
        healthy_since: r.try_get::<_, Option<i64>>(8)?.map(Timestamp),
        promoted: r.try_get(9)?,
        version: r.try_get(10)?,
        updated_at: Timestamp(r.try_get(11)?),
    })
}

pub(super) async fn rollout_get<C: GenericClient>(
    c: &C,
    tenant: &str,
    syncset: &str,
) -> PgResult<Option<RolloutState>> {
    let sql = format!("SELECT {COLUMNS} FROM rollouts WHERE tenant = $1 AND syncset = $2");
    query(c, &sql, &[&tenant, &syncset]).await?.first().map(state_of).transpose()
}

/// Rollouts in `phase` (every phase: `None`), of one tenant or all, by tenant and name
/// (in byte order, as SQLite sorts them).
pub(super) async fn rollout_list<C: GenericClient>(
    c: &C,
    tenant: Option<&str>,
    phase: Option<RolloutPhase>,
) -> PgResult<Vec<RolloutState>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM rollouts WHERE ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR phase = $2)
         ORDER BY tenant COLLATE \"C\", syncset COLLATE \"C\""
    );
    let phase = phase.map(RolloutPhase::as_str);
    query(c, &sql, &[&tenant, &phase]).await?.iter().map(state_of).collect()
}

/// The columns of a rollout row stored in another type than Rust's.
struct Values {
    phase: &'static str,
    step: i64,
    step_started_at: i64,
    healthy_since: Option<i64>,
    updated_at: i64,
}

impl Values {
    fn of(s: &RolloutState) -> Self {
        Values {
            phase: s.phase.as_str(),
            step: i64::try_from(s.step).unwrap_or(i64::MAX),
            step_started_at: s.step_started_at.millis(),
            healthy_since: s.healthy_since.map(Timestamp::millis),
            updated_at: s.updated_at.millis(),
        }
    }

    /// The row of `s` as parameters `$1`..`$12`, in [`COLUMNS`] order.
    fn params<'a>(&'a self, s: &'a RolloutState) -> [&'a (dyn ToSql + Sync); 12] {
        [
            &s.tenant,
            &s.syncset,
            &self.phase,
            &self.step,
            &s.revision,
            &s.stable,
            &s.reason,
            &self.step_started_at,
            &self.healthy_since,
            &s.promoted,
            &s.version,
            &self.updated_at,
        ]
    }
}

pub(super) async fn rollout_put(tx: &Tx<'_>, s: &RolloutState) -> PgResult<()> {
    let values = Values::of(s);
    let sql = format!(
        "INSERT INTO rollouts ({COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (tenant, syncset) DO UPDATE SET phase = EXCLUDED.phase, step = EXCLUDED.step,
             revision = EXCLUDED.revision, stable = EXCLUDED.stable, reason = EXCLUDED.reason,
             step_started_at = EXCLUDED.step_started_at, healthy_since = EXCLUDED.healthy_since,
             promoted = EXCLUDED.promoted, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at"
    );
    tx.execute(&sql, &values.params(s)).await?;
    Ok(())
}
