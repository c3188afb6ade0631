//! Durable cursors of named event consumers (see [`crate::consumer`]).

use crate::Result;
use fleetsync_model::Timestamp;
use rusqlite::{params, Connection, OptionalExtension, Transaction};

pub(super) fn get(c: &Connection, name: &str) -> Result<Option<u64>> {
    let seq: Option<i64> = c
        .prepare_cached("SELECT acked_seq FROM consumers WHERE name = ?1")?
        .query_row(params![name], |r| r.get(0))
        .optional()?;
    Ok(seq.map(|s| u64::try_from(s).unwrap_or(0)))
}

/// Forgets the cursor.
pub(super) fn delete(tx: &Transaction<'_>, name: &str) -> Result<()> {
    tx.prepare_cached("DELETE FROM consumers WHERE name = ?1")?.execute(params![name])?;
    Ok(())
}

/// Moves the cursor forward to `seq` (never back); returns where it is now.
pub(super) fn ack(tx: &Transaction<'_>, now: Timestamp, name: &str, seq: u64) -> Result<u64> {
    let seq = i64::try_from(seq).unwrap_or(i64::MAX);
    let at: i64 = tx
        .prepare_cached(
            "INSERT INTO consumers (name, acked_seq, updated_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (name) DO UPDATE SET acked_seq = MAX(acked_seq, excluded.acked_seq), updated_at = excluded.updated_at
             RETURNING acked_seq",
        )?
        .query_row(params![name, seq, now.millis()], |r| r.get(0))?;
    Ok(u64::try_from(at).unwrap_or(0))
}
