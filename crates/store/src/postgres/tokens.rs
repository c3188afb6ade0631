//! Hub-issued tokens on PostgreSQL (see [`crate::Tokens`]): records keyed by the
//! token's SHA-256, named once per tenant (the column `tenant`: the grant's, `''` for a
//! hub-wide token).

use super::{query, PgResult, PgStore};
use crate::stored::{corrupt, token_tenant};
use crate::{Result, Tokens};
use async_trait::async_trait;
use deadpool_postgres::GenericClient;
use fleetsync_model::{Grant, Timestamp, TokenRecord};
use tokio_postgres::Row;

const COLUMNS: &str = "name, grant_, created_at, expires_at, created_by";

#[async_trait]
impl Tokens for PgStore {
    /// A transaction that locks the table against other writers of tokens (issuing one
    /// is rare): a hub-wide token's name is checked against every tenant, which no
    /// unique index can say. A transaction whose COMMIT failed is never run again, so
    /// its own row cannot read as a taken name.
    async fn token_create(&self, record: &TokenRecord, hash: &[u8; 32]) -> Result<bool> {
        self.write("storing a token", |tx| {
            let (record, hash) = (record.clone(), *hash);
            Box::pin(async move { create(&tx.tx, &record, &hash).await })
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
            Box::pin(async move {
                query(c, &format!("SELECT {COLUMNS} FROM tokens ORDER BY name, tenant"), &[])
                    .await?
                    .iter()
                    .map(decode)
                    .collect()
            })
        })
        .await
    }

    /// A transaction, not a lone statement: one retried after its connection was lost
    /// may have deleted the row the first time, and would then answer "no such token"
    /// for a revocation that took effect. A transaction whose COMMIT failed is never
    /// run again.
    async fn token_revoke(&self, tenant: Option<&str>, name: &str) -> Result<bool> {
        self.write("revoking a token", |tx| {
            let (tenant, name) = (token_tenant(tenant).to_string(), name.to_string());
            Box::pin(async move {
                Ok(tx.execute("DELETE FROM tokens WHERE tenant = $1 AND name = $2", &[&tenant, &name]).await? == 1)
            })
        })
        .await
    }
}

/// Inserts the record unless its name is taken in its tenant, by a hub-wide token, or
/// (for a hub-wide token) by any token.
async fn create<C: GenericClient>(c: &C, r: &TokenRecord, hash: &[u8; 32]) -> PgResult<bool> {
    let (grant, expires) = (r.grant.to_string(), r.expires_at.map(Timestamp::millis));
    let tenant = token_tenant(r.grant.tenant());
    c.batch_execute("LOCK TABLE tokens IN SHARE ROW EXCLUSIVE MODE").await?;
    let inserted = query(
        c,
        "INSERT INTO tokens (hash, tenant, name, grant_, created_at, expires_at, created_by)
         SELECT $1, $2, $3, $4, $5, $6, $7
         WHERE NOT EXISTS (SELECT 1 FROM tokens WHERE name = $3 AND (tenant = $2 OR tenant = '' OR $2 = ''))
         ON CONFLICT DO NOTHING RETURNING 1",
        &[&&hash[..], &tenant, &r.name, &grant, &r.created_at.millis(), &expires, &r.created_by],
    )
    .await?;
    Ok(!inserted.is_empty())
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
