//! Hub-issued tokens on PostgreSQL (see [`crate::Tokens`]): records keyed by the
//! token's SHA-256.

use super::{query, PgResult, PgStore};
use crate::stored::corrupt;
use crate::{Result, Tokens};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use fleetsync_model::{Grant, Timestamp, TokenRecord};
use tokio_postgres::Row;

const COLUMNS: &str = "name, grant_, created_at, expires_at, created_by";

#[async_trait]
impl Tokens for PgStore {
    async fn token_create(&self, record: &TokenRecord, hash: &[u8; 32]) -> Result<bool> {
        self.write_statement("storing a token", |c, _| {
            let (record, hash) = (record.clone(), *hash);
            Box::pin(async move { create(c, &record, &hash).await })
        })
        .await
    }

    async fn token_find(&self, hash: &[u8; 32]) -> Result<Option<TokenRecord>> {
        let hash = *hash;
        self.read("finding a token", move |c, _| {
            Box::pin(async move {
                let sql = format!("SELECT {COLUMNS} FROM tokens WHERE hash = $1");
                query(c, &sql, &[&&hash[..]]).await?.first().map(decode).transpose()
            })
        })
        .await
    }

    async fn token_list(&self) -> Result<Vec<TokenRecord>> {
        self.read("listing tokens", |c, _| {
            Box::pin(async move { query(c, &format!("SELECT {COLUMNS} FROM tokens ORDER BY name"), &[]).await?.iter().map(decode).collect() })
        })
        .await
    }

    /// A transaction, not a lone statement: one retried after its connection was lost
    /// may have deleted the row the first time, and would then answer "no such token"
    /// for a revocation that took effect. A transaction whose COMMIT failed is never
    /// run again.
    async fn token_revoke(&self, name: &str) -> Result<bool> {
        self.write("revoking a token", |tx| {
            let name = name.to_string();
            Box::pin(async move { Ok(tx.execute("DELETE FROM tokens WHERE name = $1", &[&name]).await? == 1) })
        })
        .await
    }
}

/// Inserts the record unless its name is taken. Run again after a lost connection, it
/// finds its own row by the hash (random: no other token has it) and says so.
async fn create<C: GenericClient>(c: &C, r: &TokenRecord, hash: &[u8; 32]) -> PgResult<bool> {
    let (grant, expires) = (r.grant.to_string(), r.expires_at.map(Timestamp::millis));
    let hash = &hash[..];
    let inserted = query(
        c,
        "INSERT INTO tokens (hash, name, grant_, created_at, expires_at, created_by) VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT DO NOTHING RETURNING 1",
        &[&hash, &r.name, &grant, &r.created_at.millis(), &expires, &r.created_by],
    )
    .await?;
    if !inserted.is_empty() {
        return Ok(true);
    }
    Ok(!query(c, "SELECT 1 FROM tokens WHERE hash = $1", &[&hash]).await?.is_empty())
}

fn decode(r: &Row) -> PgResult<TokenRecord> {
    let grant: String = r.try_get(1)?;
    let grant = Grant::parse(&grant).map_err(|e| corrupt("tokens", e))?;
    Ok(TokenRecord {
        name: r.try_get(0)?,
        grant,
        created_at: Timestamp(r.try_get(2)?),
        expires_at: r.try_get::<_, Option<i64>>(3)?.map(Timestamp),
        created_by: r.try_get(4)?,
    })
}
