//! Clusters, SyncSets and Secrets: reads, and sealing Secrets again. (Writes are the
//! workflows of [`crate::write`], over `write.rs`'s operations.)

use crate::sealed::{self, decode_stored, Keyring};
use crate::stored::{table, WithGeneration};
use crate::Result;
use fleetsync_model::Kind;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::de::DeserializeOwned;

/// An object; a Secret opened with `keys` ([`decode_stored`]).
pub(super) fn get<T: DeserializeOwned + WithGeneration>(
    c: &Connection,
    kind: Kind,
    tenant: &str,
    name: &str,
    keys: Option<&Keyring>,
) -> Result<Option<T>> {
    let sql = format!("SELECT doc, generation FROM {} WHERE tenant = ?1 AND name = ?2", table(kind));
    let row: Option<(String, i64)> =
        c.prepare_cached(&sql)?.query_row(params![tenant, name], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
    row.map(|(doc, g)| decode_stored(kind, keys, tenant, name, &doc, g)).transpose()
}

/// The objects of a kind (of `tenant`, if given); Secrets opened with `keys`.
pub(super) fn list<T: DeserializeOwned + WithGeneration>(
    c: &Connection,
    kind: Kind,
    tenant: Option<&str>,
    keys: Option<&Keyring>,
) -> Result<Vec<T>> {
    let sql = format!(
        "SELECT tenant, name, doc, generation FROM {} WHERE ?1 IS NULL OR tenant = ?1 ORDER BY tenant, name",
        table(kind)
    );
    let mut stmt = c.prepare_cached(&sql)?;
    let rows = stmt.query_map(params![tenant], |r| {
        Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, i64>(3)?))
    })?;
    rows.map(|row| {
        let (tenant, name, doc, g) = row?;
        decode_stored(kind, keys, &tenant, &name, &doc, g)
    })
    .collect()
}

/// Every Secret's stored document sealed again with the first of `keys` where it is
/// not (in clear, or sealed with another key), without a new generation or an event:
/// the content is the same. Fails, writing nothing, if one does not open.
pub(super) fn secrets_reseal(tx: &Transaction<'_>, keys: Option<&Keyring>) -> Result<sealed::Resealed> {
    let rows = {
        let mut stmt = tx.prepare_cached("SELECT tenant, name, doc FROM secrets ORDER BY tenant, name")?;
        let rows =
            stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?)))?;
        rows.collect::<rusqlite::Result<Vec<_>>>()?
    };
    let mut done = sealed::Resealed::default();
    for (tenant, name, stored) in rows {
        let what = sealed::reseal(keys, &tenant, &name, &stored)?;
        done.count(&stored, &what);
        if let sealed::Reseal::Write(doc) = what {
            tx.prepare_cached("UPDATE secrets SET doc = ?3 WHERE tenant = ?1 AND name = ?2")?
                .execute(params![tenant, name, doc])?;
        }
    }
    Ok(done)
}
