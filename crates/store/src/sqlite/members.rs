//! Worker processes and their heartbeats.

use super::ms;
use crate::{Member, MemberBeat, Result};
use fleetsync_model::Timestamp;
use rusqlite::{params, Connection, Transaction};

pub(super) fn heartbeat(tx: &Transaction<'_>, now: Timestamp, beat: &MemberBeat) -> Result<Vec<Member>> {
    let expires = now.millis().saturating_add(ms(beat.ttl));
    let in_flight = i64::try_from(beat.in_flight).unwrap_or(i64::MAX);
    let max_in_flight = i64::try_from(beat.max_in_flight).unwrap_or(i64::MAX);
    tx.prepare_cached(
        "INSERT INTO members (id, started_at, heartbeat_at, expires_at, in_flight, max_in_flight) VALUES (?1, ?2, ?2, ?3, ?4, ?5)
         ON CONFLICT (id) DO UPDATE SET heartbeat_at = ?2, expires_at = ?3, in_flight = ?4, max_in_flight = ?5",
    )?
    .execute(params![beat.id, now.millis(), expires, in_flight, max_in_flight])?;
    tx.prepare_cached("DELETE FROM members WHERE expires_at <= ?1")?.execute(params![now.millis()])?;
    list(tx, now)
}

pub(super) fn leave(tx: &Transaction<'_>, id: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM members WHERE id = ?1")?.execute(params![id])?;
    Ok(())
}

pub(super) fn list(c: &Connection, now: Timestamp) -> Result<Vec<Member>> {
    let mut stmt = c.prepare_cached(
        "SELECT id, started_at, heartbeat_at, expires_at, in_flight, max_in_flight FROM members WHERE expires_at > ?1 ORDER BY id",
    )?;
    let rows = stmt.query_map(params![now.millis()], |r| {
        Ok(Member {
            id: r.get(0)?,
            started_at: Timestamp(r.get(1)?),
            heartbeat_at: Timestamp(r.get(2)?),
            expires_at: Timestamp(r.get(3)?),
            in_flight: u64::try_from(r.get::<_, i64>(4)?).unwrap_or(0),
            max_in_flight: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
