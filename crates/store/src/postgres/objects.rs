//! Clusters, SyncSets and Secrets on PostgreSQL: reads, and sealing Secrets again.
//! (Writes are the workflows of [`crate::write`], over `write.rs`'s operations.)

use super::{query, PgResult};
use crate::sealed::{self, decode_stored, Keyring};
use crate::stored::{table, WithGeneration};
use deadpool_postgres::GenericClient;
use fleetsync_model::Kind;
use serde::de::DeserializeOwned;

/// An object; a Secret opened with `keys` ([`decode_stored`]).
pub(super) async fn get<T, C>(
    c: &C,
    kind: Kind,
    tenant: String,
    name: String,
    keys: Option<&Keyring>,
) -> PgResult<Option<T>>
where
    T: DeserializeOwned + WithGeneration,
    C: GenericClient,
{
    let sql = format!("SELECT doc, generation FROM {} WHERE tenant = $1 AND name = $2", table(kind));
    let rows = query(c, &sql, &[&tenant, &name]).await?;
    let Some(row) = rows.first() else { return Ok(None) };
    Ok(Some(decode_stored(kind, keys, &tenant, &name, row.try_get(0)?, row.try_get(1)?)?))
}

/// The objects of a kind (of `tenant`, if given); Secrets opened with `keys`.
pub(super) async fn list<T, C>(c: &C, kind: Kind, tenant: Option<String>, keys: Option<&Keyring>) -> PgResult<Vec<T>>
where
    T: DeserializeOwned + WithGeneration,
    C: GenericClient,
{
    let sql = format!(
        "SELECT tenant, name, doc, generation FROM {} WHERE $1::text IS NULL OR tenant = $1 ORDER BY tenant, name",
        table(kind)
    );
    let rows = query(c, &sql, &[&tenant]).await?;
    rows.iter()
        .map(|row| Ok(decode_stored(kind, keys, row.try_get(0)?, row.try_get(1)?, row.try_get(2)?, row.try_get(3)?)?))
        .collect()
}

impl super::PgStore {
    /// Seals every Secret with the first of the config's keys where it is not yet (it
    /// is in clear, or sealed with another key), keeping its generation: run at start,
    /// this finishes a key rotation (see [`crate::sealed`]). Checks every Secret first
    /// and fails, changing nothing, if one does not open with the keys given (or is
    /// sealed and no keys were given). Each row is replaced only if it is still the
    /// one read (an apply in between sealed it with its own keys).
    pub async fn secrets_reseal(&self) -> crate::Result<sealed::Resealed> {
        let keys = self.inner.config.keys.clone();
        let rows: Vec<(String, String, String)> = self
            .read("reading secrets", |c, _| {
                Box::pin(async move {
                    let rows = query(c, "SELECT tenant, name, doc FROM secrets ORDER BY tenant, name", &[]).await?;
                    rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))).collect()
                })
            })
            .await?;
        let mut done = sealed::Resealed::default();
        let mut writes = Vec::new();
        for (tenant, name, stored) in rows {
            let what = sealed::reseal(keys.as_deref(), &tenant, &name, &stored)?;
            done.count(&stored, &what);
            if let sealed::Reseal::Write(doc) = what {
                writes.push((tenant, name, stored, doc));
            }
        }
        for (tenant, name, old, new) in writes {
            self.write_statement("sealing a secret again", |c, _| {
                let (tenant, name, old, new) = (tenant.clone(), name.clone(), old.clone(), new.clone());
                Box::pin(async move {
                    let sql = "UPDATE secrets SET doc = $3 WHERE tenant = $1 AND name = $2 AND doc = $4";
                    Ok(c.execute(sql, &[&tenant, &name, &new, &old]).await?)
                })
            })
            .await?;
        }
        Ok(done)
    }
}
