//! Clusters and SyncSets on PostgreSQL: apply (with the keys each change enqueues),
//! delete, read. Writes lock their tenants first (see the module docs of
//! [`super`]): matching clusters to SyncSets reads one table and writes the other, which
//! two processes must not do at once.

use super::due::position;
use super::queue::{enqueue, row_key, Enqueues};
use super::rollouts;
use super::{query, PgResult, Tx};
use crate::plan::{self, Announce, Deleted, Planned, Target};
use crate::quota::{self, Quota, Quotas, Usage};
use crate::sealed::{self, decode_stored, Keyring};
use crate::stored::{canonical, corrupt, decode, decode_doc, json, table, WithGeneration};
use crate::{ApplyOutcome, OwnWrite, StoreError};
use deadpool_postgres::GenericClient;
use fleetsync_model::{ApplyMode, Cluster, Document, Kind, Secret, SyncSet, WorkKey};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use tokio_postgres::types::ToSql;

/// Applies documents within `quotas`, Secrets sealed with `keys`. Their tenants are
/// locked first (in the order [`apply_as`] locks them, which takes the same locks
/// again), so no other write changes what is measured between the two readings.
pub(super) async fn apply(
    tx: &mut Tx<'_>,
    docs: &[Document],
    quotas: &Quotas,
    keys: Option<&Keyring>,
) -> PgResult<Vec<ApplyOutcome>> {
    let tenants: BTreeSet<&str> = docs.iter().map(tenant_of).collect();
    for tenant in &tenants {
        tx.lock_tenant(tenant).await?;
    }
    let limited: Vec<(&str, Quota)> =
        tenants.into_iter().map(|t| (t, quotas.of(t))).filter(|(_, q)| !q.is_unlimited()).collect();
    let mut before = Vec::with_capacity(limited.len());
    for (tenant, quota) in &limited {
        before.push(usage(tx, tenant, quota).await?);
    }
    let out = apply_as(tx, docs, None, keys).await?;
    for ((tenant, quota), before) in limited.iter().zip(&before) {
        quota::check(tenant, quota, before, &usage(tx, tenant, quota).await?).map_err(StoreError::from)?;
    }
    Ok(out)
}

/// What `tenant` holds of what `quota` limits (the rest left 0).
async fn usage(tx: &Tx<'_>, tenant: &str, quota: &Quota) -> PgResult<Usage> {
    async fn count(tx: &Tx<'_>, sql: &str, tenant: &str) -> PgResult<u64> {
        Ok(tx.query_opt(sql, &[&tenant]).await?.map_or(0, |r| r.get::<_, i64>(0)) as u64)
    }
    Ok(Usage {
        clusters: if quota.clusters.is_some() {
            count(tx, "SELECT count(*) FROM clusters WHERE tenant = $1", tenant).await?
        } else {
            0
        },
        syncsets: if quota.syncsets.is_some() {
            count(tx, "SELECT count(*) FROM syncsets WHERE tenant = $1", tenant).await?
        } else {
            0
        },
        keys: if quota.keys.is_some() {
            count(tx, "SELECT count(*) FROM work WHERE tenant = $1 AND desired", tenant).await?
        } else {
            0
        },
        bytes: if quota.bytes.is_some() {
            let sql = "SELECT ((SELECT coalesce(sum(octet_length(doc)), 0) FROM clusters WHERE tenant = $1)
                             + (SELECT coalesce(sum(octet_length(doc)), 0) FROM syncsets WHERE tenant = $1)
                             + (SELECT coalesce(sum(octet_length(doc)), 0) FROM secrets WHERE tenant = $1))::bigint";
            count(tx, sql, tenant).await?
        } else {
            0
        },
    })
}

/// Applies documents, their tenants locked first; `own`: the key of an own write, which
/// its enqueues leave clean ([`Planned::dirties`]); `keys`: what Secrets are sealed with.
async fn apply_as(
    tx: &mut Tx<'_>,
    docs: &[Document],
    own: Option<&WorkKey>,
    keys: Option<&Keyring>,
) -> PgResult<Vec<ApplyOutcome>> {
    let tenants: BTreeSet<&str> = docs.iter().map(tenant_of).collect();
    for tenant in tenants {
        tx.lock_tenant(tenant).await?;
    }
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        out.push(match doc {
            Document::Cluster(c) => apply_cluster(tx, c, own).await?,
            Document::SyncSet(s) => apply_syncset(tx, s, own).await?,
            Document::Secret(s) => apply_secret(tx, s, own, keys).await?,
        });
    }
    Ok(out)
}

/// An own write (see [`crate::Objects::objects_apply_own`]): applied with `own.key` as
/// the own write's key, then refused — rolled back — unless the key is still running
/// with `own.fence`. The check comes last and locks the row,
/// so a take-over cannot commit between the check and this commit; coming after the
/// enqueues, which lock rows in id order, it usually finds the row locked already.
pub(super) async fn apply_own(
    tx: &mut Tx<'_>,
    docs: &[Document],
    own: &OwnWrite,
    keys: Option<&Keyring>,
) -> PgResult<Vec<ApplyOutcome>> {
    let k = &own.key;
    let out = apply_as(tx, docs, Some(k), keys).await?;
    let held = tx
        .query_opt(
            "SELECT 1 FROM work WHERE tenant = $1 AND cluster = $2 AND syncset = $3 AND phase = 'running' AND fence = $4
             FOR UPDATE",
            &[&k.tenant, &k.cluster, &k.syncset, &own.fence.get()],
        )
        .await?;
    if held.is_none() {
        return Err(StoreError::LeaseLost { key: k.clone(), fence: own.fence }.into());
    }
    Ok(out)
}

fn tenant_of(doc: &Document) -> &str {
    doc.metadata().tenant()
}

/// The result of writing a document row: its generation and the event action, or
/// `None` if the content is unchanged.
fn written(row: Option<tokio_postgres::Row>) -> PgResult<Option<(i64, &'static str)>> {
    let Some(row) = row else { return Ok(None) };
    let generation: i64 = row.try_get(0)?;
    Ok(Some((generation, if generation == 1 { "Created" } else { "Updated" })))
}

async fn apply_cluster(tx: &mut Tx<'_>, c: &Cluster, own: Option<&WorkKey>) -> PgResult<ApplyOutcome> {
    let (tenant, name) = (c.metadata.tenant(), c.metadata.name.as_str());
    let doc = canonical(c)?;
    let labels = json("clusters", &c.metadata.labels)?;
    let row = tx
        .query_opt(
            "INSERT INTO clusters AS o (tenant, name, generation, labels, doc) VALUES ($1, $2, 1, $3, $4)
             ON CONFLICT (tenant, name) DO UPDATE SET generation = o.generation + 1, labels = EXCLUDED.labels, doc = EXCLUDED.doc
             WHERE o.doc <> EXCLUDED.doc
             RETURNING generation",
            &[&tenant, &name, &labels, &doc],
        )
        .await?;
    let Some((generation, action)) = written(row)? else {
        let generation = generation_of(tx.client(), Kind::Cluster, tenant, name).await?;
        return Ok(outcome(Kind::Cluster, tenant, name, generation, "unchanged", 0));
    };
    tx.event(tenant, "Cluster", name, action, generation);
    let enqueued = enqueue_cluster(tx, c, own).await?;
    Ok(outcome(Kind::Cluster, tenant, name, generation, result(action), enqueued))
}

/// Enqueues a new or changed cluster's keys ([`plan::cluster_changed`]).
async fn enqueue_cluster(tx: &mut Tx<'_>, c: &Cluster, own: Option<&WorkKey>) -> PgResult<u64> {
    let (tenant, name) = (c.metadata.tenant(), c.metadata.name.as_str());
    let (had, targets) = tokio::try_join!(
        strings(tx, "SELECT syncset FROM work WHERE tenant = $1 AND cluster = $2 AND desired", tenant, name),
        syncset_targets(tx, tenant),
    )?;
    enqueue_all(tx, plan::cluster_changed(tenant, name, &c.metadata.labels, &targets, &had, own)).await
}

/// Writes planned enqueues in one statement and announces them; returns how many.
async fn enqueue_all(tx: &mut Tx<'_>, plan: Vec<Planned>) -> PgResult<u64> {
    let mut batch = Enqueues::default();
    for p in plan {
        batch.push(p.key, p.enqueue, p.dirties);
    }
    let enqueued = enqueue(tx, &batch).await?;
    tx.announce(Announce::objects(tx.now, 1, enqueued));
    Ok(enqueued)
}

/// Stores a Secret (sealed, given keys); a new or changed one re-applies the keys of
/// every cluster that reaches its target through it (new credentials, or ones that
/// were missing). The stored document is read and compared opened (sealing the same
/// content twice gives two different rows); the tenant's lock keeps it as read.
async fn apply_secret(
    tx: &mut Tx<'_>,
    s: &Secret,
    own: Option<&WorkKey>,
    keys: Option<&Keyring>,
) -> PgResult<ApplyOutcome> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    let doc = canonical(s)?;
    let old =
        tx.query_opt("SELECT generation, doc FROM secrets WHERE tenant = $1 AND name = $2", &[&tenant, &name]).await?;
    if let Some(old) = old {
        if sealed::open(keys, tenant, name, old.try_get(1)?).map_err(StoreError::from)? == doc {
            return Ok(outcome(Kind::Secret, tenant, name, old.try_get(0)?, "unchanged", 0));
        }
    }
    let doc = sealed::seal(keys, tenant, name, doc).map_err(StoreError::from)?;
    let row = tx
        .query_opt(
            "INSERT INTO secrets AS o (tenant, name, generation, doc) VALUES ($1, $2, 1, $3)
             ON CONFLICT (tenant, name) DO UPDATE SET generation = o.generation + 1, doc = EXCLUDED.doc
             RETURNING generation",
            &[&tenant, &name, &doc],
        )
        .await?;
    let Some((generation, action)) = written(row)? else {
        return Err(corrupt("secrets", "the upsert returned no row").into());
    };
    tx.event(tenant, "Secret", name, action, generation);
    let clusters: Vec<Cluster> = list(tx.client(), Kind::Cluster, Some(tenant.to_string()), None).await?;
    let mut enqueued = 0;
    for c in plan::secret_users(name, &clusters) {
        enqueued += enqueue_cluster(tx, c, own).await?;
    }
    Ok(outcome(Kind::Secret, tenant, name, generation, result(action), enqueued))
}

async fn apply_syncset(tx: &mut Tx<'_>, s: &SyncSet, own: Option<&WorkKey>) -> PgResult<ApplyOutcome> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    let doc = canonical(s)?;
    let mode = s.spec.resource_apply_mode;
    let selector = json("syncsets", &s.spec.targeting())?;
    // Also returns the document it replaces, unless its revision is stored already
    // (only a SyncSet last written before revisions were kept lacks it): read in the
    // statement's snapshot, which is the row the upsert replaces, as the tenant's lock
    // keeps other writers out.
    let row = tx
        .query_opt(
            "WITH prior AS (
                 SELECT o.doc FROM syncsets o
                 WHERE o.tenant = $1 AND o.name = $2
                     AND NOT EXISTS (SELECT 1 FROM revisions v WHERE v.tenant = o.tenant AND v.syncset = o.name AND v.generation = o.generation))
             INSERT INTO syncsets AS o (tenant, name, generation, apply_mode, selector, doc) VALUES ($1, $2, 1, $3, $4, $5)
             ON CONFLICT (tenant, name) DO UPDATE SET generation = o.generation + 1, apply_mode = EXCLUDED.apply_mode,
                 selector = EXCLUDED.selector, doc = EXCLUDED.doc
             WHERE o.doc <> EXCLUDED.doc
             RETURNING generation, (SELECT doc FROM prior)",
            &[&tenant, &name, &mode.as_str(), &selector, &doc],
        )
        .await?;
    let previous: Option<String> = row.as_ref().map(|r| r.try_get(1)).transpose()?.flatten();
    let Some((generation, action)) = written(row)? else {
        let generation = generation_of(tx.client(), Kind::SyncSet, tenant, name).await?;
        return Ok(outcome(Kind::SyncSet, tenant, name, generation, "unchanged", 0));
    };
    tx.event(tenant, "SyncSet", name, action, generation);
    if let Some(previous) = previous.filter(|_| generation > 1) {
        let previous: SyncSet = decode_doc("syncsets", &previous, generation - 1)?;
        rollouts::revision_put(tx, &previous, generation - 1).await?;
    }
    rollouts::revision_put(tx, s, generation).await?;
    let (run_generation, run_mode, held_back) = rollouts::on_write(tx, s, generation).await?;

    let tenant_param: [&(dyn ToSql + Sync); 1] = [&tenant];
    let (had, clusters) = tokio::try_join!(
        strings(tx, "SELECT cluster FROM work WHERE tenant = $1 AND syncset = $2 AND desired", tenant, name),
        tx.query("SELECT name, labels FROM clusters WHERE tenant = $1 ORDER BY name", &tenant_param),
    )?;
    let clusters = clusters
        .iter()
        .map(|row| Ok((row.try_get::<_, String>(0)?, decode::<BTreeMap<String, String>>("clusters", row.try_get(1)?)?)))
        .collect::<PgResult<Vec<_>>>()?;
    let target = Target {
        name: name.into(),
        generation: run_generation,
        mode: run_mode,
        held_back,
        targeting: s.spec.targeting(),
    };
    let enqueued = enqueue_all(tx, plan::syncset_changed(tenant, &target, &clusters, &had, own)).await?;
    rollouts::revisions_prune(tx, tenant, name, generation).await?;
    Ok(outcome(Kind::SyncSet, tenant, name, generation, result(action), enqueued))
}

pub(super) async fn delete(tx: &mut Tx<'_>, kind: Kind, tenant: String, name: String) -> PgResult<()> {
    tx.lock_tenant(&tenant).await?;
    let sql = format!("DELETE FROM {} WHERE tenant = $1 AND name = $2 RETURNING generation", table(kind));
    let Some(row) = tx.query_opt(&sql, &[&tenant, &name]).await? else {
        return Err(StoreError::not_found(kind, &tenant, &name).into());
    };
    let generation: i64 = row.try_get(0)?;
    tx.event(&tenant, kind.as_str(), &name, "Deleted", generation);
    let keyed = match kind {
        Kind::SyncSet => {
            let rows =
                tx.query("SELECT cluster FROM work WHERE tenant = $1 AND syncset = $2", &[&tenant, &name]).await?;
            rows.iter().map(|row| row.try_get::<_, String>(0)).collect::<Result<Vec<_>, _>>()?
        }
        Kind::Cluster | Kind::Secret => Vec::new(),
    };
    match plan::deleted(kind, &tenant, &name, keyed) {
        Deleted::ClusterKeysDropped => {
            let gone = tx
                .query(
                    "WITH held AS (SELECT id FROM work WHERE tenant = $1 AND cluster = $2 ORDER BY id FOR UPDATE)
                     DELETE FROM work WHERE id = ANY(ARRAY(SELECT id FROM held))
                     RETURNING tenant, cluster, syncset, id, shard, phase, run_at",
                    &[&tenant, &name],
                )
                .await?;
            for r in &gone {
                let was = position(r.try_get(5)?, r.try_get(6)?);
                tx.due.record(row_key(r)?, r.try_get(3)?, r.try_get(4)?, was, None);
            }
            tx.execute("DELETE FROM live_state WHERE tenant = $1 AND cluster = $2", &[&tenant, &name]).await?;
        }
        Deleted::Removals(plan) => {
            rollouts::syncset_deleted(tx, &tenant, &name).await?;
            enqueue_all(tx, plan).await?;
        }
        Deleted::Nothing => {}
    }
    Ok(())
}

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

/// Every SyncSet of a tenant with what is needed to match clusters.
async fn syncset_targets(tx: &Tx<'_>, tenant: &str) -> PgResult<Vec<Target>> {
    // A rollout that has not completed holds new and unreached clusters at its stable revision.
    let rows = tx
        .query(
            "SELECT s.name, COALESCE(v.generation, s.generation), COALESCE(v.apply_mode, s.apply_mode), s.selector, v.generation IS NOT NULL
             FROM syncsets s
             LEFT JOIN rollouts r ON r.tenant = s.tenant AND r.syncset = s.name AND r.phase <> 'Completed'
             LEFT JOIN revisions v ON v.tenant = s.tenant AND v.syncset = s.name AND v.generation = r.stable
             WHERE s.tenant = $1 ORDER BY s.name",
            &[&tenant],
        )
        .await?;
    rows.iter()
        .map(|row| {
            let mode: &str = row.try_get(2)?;
            let mode = ApplyMode::parse(mode).ok_or_else(|| corrupt("syncsets", format!("apply mode {mode:?}")))?;
            Ok(Target {
                name: row.try_get(0)?,
                generation: row.try_get(1)?,
                mode,
                held_back: row.try_get(4)?,
                targeting: decode("syncsets", row.try_get(3)?)?,
            })
        })
        .collect()
}

async fn generation_of<C: GenericClient>(c: &C, kind: Kind, tenant: &str, name: &str) -> PgResult<i64> {
    let sql = format!("SELECT generation FROM {} WHERE tenant = $1 AND name = $2", table(kind));
    let rows = query(c, &sql, &[&tenant, &name]).await?;
    Ok(match rows.first() {
        Some(row) => row.try_get(0)?,
        None => 0,
    })
}

async fn strings(tx: &Tx<'_>, sql: &str, a: &str, b: &str) -> PgResult<HashSet<String>> {
    let rows = tx.query(sql, &[&a, &b]).await?;
    rows.iter().map(|r| Ok(r.try_get::<_, String>(0)?)).collect()
}

fn result(action: &str) -> &'static str {
    if action == "Created" {
        "created"
    } else {
        "updated"
    }
}

fn outcome(kind: Kind, tenant: &str, name: &str, generation: i64, result: &'static str, enqueued: u64) -> ApplyOutcome {
    ApplyOutcome { kind, tenant: tenant.into(), name: name.into(), generation, result, enqueued }
}
