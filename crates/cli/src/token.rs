//! `fleetsync token create|list|revoke`: on the store itself with `--db` or
//! `--database-url` (the hub's operator, e.g. the first token of a PostgreSQL hub), or
//! through the hub's API as the caller (an admin of a tenant) with neither.

use crate::args::{TokenCreateArgs, TokenListArgs, TokenRevokeArgs, TokenStoreArgs};
use crate::context::connect;
use crate::output::{structured, table, text_of};
use anyhow::{anyhow, bail, Context, Result};
use fleetsync::outln;
use fleetsync_api::{Client, Items, TokenCreate};
use fleetsync_model::{FieldError, Grant, Role, SystemClock, TokenRecord};
use fleetsync_server::access::tokens::{issue, pick, TokenRequest};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{StoreConfig, Tokens};
use std::sync::Arc;

/// Where a token command acts.
enum Target {
    Store(Arc<dyn Tokens>),
    Hub(Client),
}

async fn target(a: &TokenStoreArgs) -> Result<Target> {
    if let Some(url) = &a.pg.database_url {
        return Ok(Target::Store(Arc::new(crate::stores::connect(url, &a.pg, StoreConfig::default()).await?)));
    }
    if let Some(db) = &a.db {
        if !db.exists() {
            bail!("no store at {}: start `fleetsync serve --db {}` once to create it", db.display(), db.display());
        }
        let store = SqliteStore::open(db, StoreConfig::default())
            .with_context(|| format!("cannot open the store {}", db.display()))?;
        return Ok(Target::Store(Arc::new(store)));
    }
    Ok(Target::Hub(connect(&a.conn)?.client))
}

pub async fn create(a: TokenCreateArgs) -> Result<()> {
    let role: Role = match (&a.role, a.agent) {
        (Some(r), false) => r.parse().map_err(|e: FieldError| anyhow!("--role: {e}"))?,
        (None, true) => Role::Agent,
        (Some(r), true) if r == "agent" => Role::Agent,
        _ => bail!("give --role, or --agent for an agent credential (not both)"),
    };
    let grant = Grant::new(&a.tenant, role, a.cluster.as_deref()).map_err(|e| anyhow!(e))?;
    let (token, record) = match target(&a.store).await? {
        Target::Store(store) => {
            let req = TokenRequest { grant, name: a.name, ttl: a.ttl, created_by: "cli".into() };
            issue(store.as_ref(), &SystemClock, req).await?
        }
        Target::Hub(hub) => {
            let req = TokenCreate { grant, name: a.name, ttl_seconds: a.ttl.map(|d| d.as_secs().max(1)) };
            let issued = hub.token_create(&req).await.map_err(crate::client::explain)?;
            (issued.token, issued.record)
        }
    };
    let expires = record.expires_at.map_or("never".to_string(), |t| t.to_rfc3339());
    eprintln!("token {} grants {} (expires: {expires})", record.name, record.grant);
    outln!("{token}")?;
    Ok(())
}

pub async fn list(a: TokenListArgs) -> Result<()> {
    let items = match target(&a.store).await? {
        Target::Store(store) => store.token_list().await?,
        Target::Hub(hub) => hub.token_list().await.map_err(crate::client::explain)?,
    };
    let items = Items::all(items);
    if !structured(a.output, &items)? {
        table(&["NAME", "GRANT", "EXPIRES", "CREATED", "BY"], &items.items.iter().map(row).collect::<Vec<_>>())?;
    }
    Ok(())
}

fn row(t: &TokenRecord) -> Vec<String> {
    let expires = t.expires_at.map_or("never".to_string(), |at| text_of(&at));
    vec![t.name.clone(), t.grant.to_string(), expires, text_of(&t.created_at), t.created_by.clone()]
}

pub async fn revoke(a: TokenRevokeArgs) -> Result<()> {
    match target(&a.store).await? {
        Target::Store(store) => {
            let records = store.token_list().await?;
            let record = pick(&records, &a.name, a.tenant.as_deref())?;
            if !store.token_revoke(record.grant.tenant(), &a.name).await? {
                bail!("no token named {:?}", a.name);
            }
        }
        Target::Hub(hub) => {
            hub.token_revoke(&a.name, a.tenant.as_deref()).await.map_err(crate::client::explain)?;
        }
    }
    outln!("token/{} revoked", a.name)?;
    Ok(())
}
