//! Hub-issued tokens (see [`crate::Tokens`]): records keyed by the token's SHA-256.

use crate::stored::corrupt;
use crate::Result;
use fleetsync_model::{Grant, Timestamp, TokenRecord};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};

const COLUMNS: &str = "name, grant_, created_at, expires_at, created_by";

pub(super) fn create(tx: &Transaction<'_>, record: &TokenRecord, hash: &[u8; 32]) -> Result<bool> {
    let inserted = tx
        .prepare_cached(
            "INSERT INTO tokens (hash, name, grant_, created_at, expires_at, created_by) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            &hash[..],
            record.name,
            record.grant.to_string(),
            record.created_at.millis(),
            record.expires_at.map(Timestamp::millis),
            record.created_by
        ])?;
    Ok(inserted == 1)
}

pub(super) fn find(c: &Connection, hash: &[u8; 32]) -> Result<Option<TokenRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM tokens WHERE hash = ?1");
    let raw = c.prepare_cached(&sql)?.query_row(params![&hash[..]], raw).optional()?;
    raw.map(decode).transpose()
}

pub(super) fn list(c: &Connection) -> Result<Vec<TokenRecord>> {
    let sql = format!("SELECT {COLUMNS} FROM tokens ORDER BY name");
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map([], raw)?.collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter().map(decode).collect()
}

pub(super) fn revoke(tx: &Transaction<'_>, name: &str) -> Result<bool> {
    Ok(tx.prepare_cached("DELETE FROM tokens WHERE name = ?1")?.execute(params![name])? == 1)
}

type Raw = (String, String, i64, Option<i64>, String);

fn raw(r: &Row<'_>) -> rusqlite::Result<Raw> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn decode((name, grant, created_at, expires_at, created_by): Raw) -> Result<TokenRecord> {
    let grant = Grant::parse(&grant).map_err(|e| corrupt("tokens", e))?;
    Ok(TokenRecord { name, grant, created_at: Timestamp(created_at), expires_at: expires_at.map(Timestamp), created_by })
}
