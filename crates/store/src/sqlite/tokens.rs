//! Hub-issued tokens (see [`crate::Tokens`]): records keyed by the token's SHA-256,
//! named once per tenant (the column `tenant`: the grant's, `''` for a hub-wide token).

use crate::stored::{corrupt, token_tenant};
use crate::Result;
use fleetsync_model::{Grant, Timestamp, TokenRecord};
use rusqlite::{params, Connection, OptionalExtension, Row, Transaction};

const COLUMNS: &str = "name, grant_, created_at, expires_at, created_by";

/// Inserts the record unless its name is taken in its tenant, by a hub-wide token, or
/// (for a hub-wide token) by any token. One writer at a time: the check and the insert
/// see the same rows.
pub(super) fn create(tx: &Transaction<'_>, record: &TokenRecord, hash: &[u8; 32]) -> Result<bool> {
    let inserted = tx
        .prepare_cached(
            "INSERT INTO tokens (hash, tenant, name, grant_, created_at, expires_at, created_by)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7
             WHERE NOT EXISTS (SELECT 1 FROM tokens WHERE name = ?3 AND (tenant = ?2 OR tenant = '' OR ?2 = ''))
             ON CONFLICT DO NOTHING",
        )?
        .execute(params![
            &hash[..],
            token_tenant(record.grant.tenant()),
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
    let sql = format!("SELECT {COLUMNS} FROM tokens ORDER BY name, tenant");
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map([], raw)?.collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter().map(decode).collect()
}

pub(super) fn revoke(tx: &Transaction<'_>, tenant: Option<&str>, name: &str) -> Result<bool> {
    let deleted = tx
        .prepare_cached("DELETE FROM tokens WHERE tenant = ?1 AND name = ?2")?
        .execute(params![token_tenant(tenant), name])?;
    Ok(deleted == 1)
}

type Raw = (String, String, i64, Option<i64>, String);

fn raw(r: &Row<'_>) -> rusqlite::Result<Raw> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
}

fn decode((name, grant, created_at, expires_at, created_by): Raw) -> Result<TokenRecord> {
    let grant = Grant::parse(&grant).map_err(|e| corrupt("tokens", e))?;
    Ok(TokenRecord {
        name,
        grant,
        created_at: Timestamp(created_at),
        expires_at: expires_at.map(Timestamp),
        created_by,
    })
}
