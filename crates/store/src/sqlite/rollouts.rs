//! Revisions ([`crate::revision`]) and rollouts ([`crate::rollout`]) in SQLite.

use crate::revision::{assemble, RevisionsDrop};
use crate::rollout::RolloutState;
use crate::stored::{corrupt, decode, json};
use crate::write::RevisionRow;
use crate::Result;
use fleetsync_model::{RolloutPhase, SyncSet, Timestamp};
use rusqlite::{params, Connection, OptionalExtension, Row};

/// Whether revision `generation` of the SyncSet is stored.
pub(super) fn revision_kept(tx: &Connection, tenant: &str, syncset: &str, generation: i64) -> Result<bool> {
    let sql = "SELECT 1 FROM revisions WHERE tenant = ?1 AND syncset = ?2 AND generation = ?3";
    Ok(tx.prepare_cached(sql)?.exists(params![tenant, syncset, generation])?)
}

/// Stores a revision unless it is stored already.
pub(super) fn revision_put(tx: &Connection, row: &RevisionRow<'_>) -> Result<()> {
    let (tenant, syncset, generation) = (row.tenant, row.syncset, row.generation);
    if revision_kept(tx, tenant, syncset, generation)? {
        return Ok(());
    }
    for (hash, body) in &row.split.parts {
        tx.prepare_cached(
            "INSERT INTO revision_parts (tenant, hash, body, refs) VALUES (?1, ?2, ?3, 1)
             ON CONFLICT (tenant, hash) DO UPDATE SET refs = refs + 1",
        )?
        .execute(params![tenant, hash, body])?;
    }
    tx.prepare_cached(
        "INSERT INTO revisions (tenant, syncset, generation, apply_mode, head, parts) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        tenant,
        syncset,
        generation,
        row.mode.as_str(),
        row.split.head,
        json("revisions", &row.split.hashes())?
    ])?;
    Ok(())
}

/// The SyncSet as it was at `generation`, if that revision is kept.
pub(super) fn revision_get(c: &Connection, tenant: &str, syncset: &str, generation: i64) -> Result<Option<SyncSet>> {
    let row: Option<(String, String)> = c
        .prepare_cached("SELECT head, parts FROM revisions WHERE tenant = ?1 AND syncset = ?2 AND generation = ?3")?
        .query_row(params![tenant, syncset, generation], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((head, parts)) = row else { return Ok(None) };
    let hashes: Vec<String> = decode("revisions", &parts)?;
    let mut body = c.prepare_cached("SELECT body FROM revision_parts WHERE tenant = ?1 AND hash = ?2")?;
    let bodies = hashes
        .iter()
        .map(|h| {
            body.query_row(params![tenant, h], |r| r.get(0))
                .optional()?
                .ok_or_else(|| corrupt("revision_parts", format!("missing {h}")))
        })
        .collect::<Result<Vec<String>>>()?;
    assemble(&head, generation, bodies).map(Some)
}

/// Deletes the SyncSet's revisions `drop` names, releasing their parts.
pub(super) fn revisions_drop(tx: &Connection, tenant: &str, syncset: &str, drop: &RevisionsDrop) -> Result<()> {
    let gone: Vec<String> = {
        let mut stmt = tx.prepare_cached(
            "DELETE FROM revisions WHERE tenant = ?1 AND syncset = ?2 AND generation < ?3
                 AND generation NOT IN (SELECT value FROM json_each(?4))
             RETURNING parts",
        )?;
        let rows =
            stmt.query_map(params![tenant, syncset, drop.below, json("revisions", &drop.keep)?], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for parts in gone {
        for hash in decode::<Vec<String>>("revisions", &parts)? {
            tx.prepare_cached("UPDATE revision_parts SET refs = refs - 1 WHERE tenant = ?1 AND hash = ?2")?
                .execute(params![tenant, hash])?;
        }
    }
    tx.prepare_cached("DELETE FROM revision_parts WHERE tenant = ?1 AND refs <= 0")?.execute(params![tenant])?;
    Ok(())
}

const COLUMNS: &str = "tenant, syncset, phase, step, revision, stable, reason, step_started_at, healthy_since, promoted, version, updated_at";

fn state_of(r: &Row<'_>) -> rusqlite::Result<(RolloutState, String)> {
    let phase: String = r.get(2)?;
    let state = RolloutState {
        tenant: r.get(0)?,
        syncset: r.get(1)?,
        phase: RolloutPhase::Progressing,
        step: r.get(3)?,
        revision: r.get(4)?,
        stable: r.get(5)?,
        reason: r.get(6)?,
        step_started_at: Timestamp(r.get(7)?),
        healthy_since: r.get::<_, Option<i64>>(8)?.map(Timestamp),
        promoted: r.get(9)?,
        version: r.get(10)?,
        updated_at: Timestamp(r.get(11)?),
    };
    Ok((state, phase))
}

fn with_phase((mut state, phase): (RolloutState, String)) -> Result<RolloutState> {
    state.phase = RolloutPhase::parse(&phase).ok_or_else(|| corrupt("rollouts", format!("phase {phase:?}")))?;
    Ok(state)
}

pub(super) fn rollout_get(c: &Connection, tenant: &str, syncset: &str) -> Result<Option<RolloutState>> {
    let sql = format!("SELECT {COLUMNS} FROM rollouts WHERE tenant = ?1 AND syncset = ?2");
    c.prepare_cached(&sql)?.query_row(params![tenant, syncset], state_of).optional()?.map(with_phase).transpose()
}

/// Rollouts in `phase` (every phase: `None`), of one tenant or all, by tenant and name.
pub(super) fn rollout_list(
    c: &Connection,
    tenant: Option<&str>,
    phase: Option<RolloutPhase>,
) -> Result<Vec<RolloutState>> {
    let sql = format!(
        "SELECT {COLUMNS} FROM rollouts WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR phase = ?2) ORDER BY tenant, syncset"
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![tenant, phase.map(RolloutPhase::as_str)], state_of)?;
    rows.map(|r| with_phase(r?)).collect()
}

pub(super) fn rollout_put(tx: &Connection, s: &RolloutState) -> Result<()> {
    let sql = format!(
        "INSERT OR REPLACE INTO rollouts ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"
    );
    tx.prepare_cached(&sql)?.execute(params![
        s.tenant,
        s.syncset,
        s.phase.as_str(),
        i64::try_from(s.step).unwrap_or(i64::MAX),
        s.revision,
        s.stable,
        s.reason,
        s.step_started_at.millis(),
        s.healthy_since.map(Timestamp::millis),
        s.promoted,
        s.version,
        s.updated_at.millis()
    ])?;
    Ok(())
}
