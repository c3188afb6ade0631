//! Clusters and SyncSets: apply (with the keys each change enqueues), delete, read.

use super::queue::enqueue;
use super::rollouts;
use super::rows::{event_append, NewEvent};
use crate::plan::{self, Announce, Deleted, Planned, Target};
use crate::quota::{self, Quota, Quotas, Usage};
use crate::sealed::{self, decode_stored, Keyring};
use crate::stored::{canonical, corrupt, decode, json, table, WithGeneration};
use crate::{ApplyOutcome, OwnWrite, Result, StoreError};
use fleetsync_model::{ApplyMode, Cluster, Document, Kind, Secret, SyncSet, Timestamp, WorkKey};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// Who writes: `own`, the key of an own write, which its enqueues leave clean
/// ([`Planned::dirties`]); `actor`, who the events name; `keys`, what Secrets are
/// sealed with ([`sealed`]).
#[derive(Clone, Copy)]
struct By<'a> {
    own: Option<&'a WorkKey>,
    actor: Option<&'a str>,
    keys: Option<&'a Keyring>,
}

/// Applies documents by `actor` within `quotas`, Secrets sealed with `keys`; returns
/// their outcomes and what the commit announces.
pub(super) fn apply(
    tx: &Transaction<'_>,
    now: Timestamp,
    docs: &[Document],
    actor: Option<&str>,
    quotas: &Quotas,
    keys: Option<&Keyring>,
) -> Result<(Vec<ApplyOutcome>, Announce)> {
    let tenants: BTreeSet<&str> = docs.iter().map(|d| d.metadata().tenant()).collect();
    let limited: Vec<(&str, Quota)> =
        tenants.into_iter().map(|t| (t, quotas.of(t))).filter(|(_, q)| !q.is_unlimited()).collect();
    let before = limited.iter().map(|(t, q)| usage(tx, t, q)).collect::<Result<Vec<_>>>()?;
    let applied = apply_as(tx, now, docs, By { own: None, actor, keys })?;
    for ((tenant, quota), before) in limited.iter().zip(&before) {
        quota::check(tenant, quota, before, &usage(tx, tenant, quota)?)?;
    }
    Ok(applied)
}

/// What `tenant` holds of what `quota` limits (the rest left 0).
fn usage(tx: &Transaction<'_>, tenant: &str, quota: &Quota) -> Result<Usage> {
    let count = |sql: &str| -> Result<u64> {
        Ok(tx.prepare_cached(sql)?.query_row(params![tenant], |r| r.get::<_, i64>(0))? as u64)
    };
    Ok(Usage {
        clusters: if quota.clusters.is_some() { count("SELECT count(*) FROM clusters WHERE tenant = ?1")? } else { 0 },
        syncsets: if quota.syncsets.is_some() { count("SELECT count(*) FROM syncsets WHERE tenant = ?1")? } else { 0 },
        keys: if quota.keys.is_some() {
            count("SELECT count(*) FROM work WHERE tenant = ?1 AND desired = 1")?
        } else {
            0
        },
        bytes: if quota.bytes.is_some() {
            count(
                "SELECT (SELECT coalesce(sum(length(doc)), 0) FROM clusters WHERE tenant = ?1)
                      + (SELECT coalesce(sum(length(doc)), 0) FROM syncsets WHERE tenant = ?1)
                      + (SELECT coalesce(sum(length(doc)), 0) FROM secrets WHERE tenant = ?1)",
            )?
        } else {
            0
        },
    })
}

fn apply_as(
    tx: &Transaction<'_>,
    now: Timestamp,
    docs: &[Document],
    by: By<'_>,
) -> Result<(Vec<ApplyOutcome>, Announce)> {
    let mut announce = Announce::default();
    let mut outcomes = Vec::with_capacity(docs.len());
    for doc in docs {
        let (outcome, said) = match doc {
            Document::Cluster(c) => apply_cluster(tx, now, c, by)?,
            Document::SyncSet(s) => apply_syncset(tx, now, s, by)?,
            Document::Secret(s) => apply_secret(tx, now, s, by)?,
        };
        outcomes.push(outcome);
        announce = announce.and(said);
    }
    Ok((outcomes, announce))
}

/// An own write (see [`crate::Objects::objects_apply_own`]): refused unless `own.key` is
/// running with `own.fence`; then applied with that key as the own write's.
pub(super) fn apply_own(
    tx: &Transaction<'_>,
    now: Timestamp,
    docs: &[Document],
    own: &OwnWrite,
    keys: Option<&Keyring>,
) -> Result<(Vec<ApplyOutcome>, Announce)> {
    let k = &own.key;
    let held = tx
        .prepare_cached(
            "SELECT 1 FROM work WHERE tenant = ?1 AND cluster = ?2 AND syncset = ?3 AND phase = 'running' AND fence = ?4",
        )?
        .exists(params![k.tenant, k.cluster, k.syncset, own.fence.get()])?;
    if !held {
        return Err(StoreError::LeaseLost { key: k.clone(), fence: own.fence });
    }
    apply_as(tx, now, docs, By { own: Some(k), actor: None, keys })
}

/// The generation and event action of writing a document row whose content is `doc`,
/// or None if unchanged.
fn upsert_generation(
    tx: &Transaction<'_>,
    table: &str,
    tenant: &str,
    name: &str,
    doc: &str,
) -> Result<Option<(i64, &'static str)>> {
    upsert_generation_by(tx, table, tenant, name, |old| Ok(old == doc))
}

/// [`upsert_generation`], the stored document compared by `same` (a sealed Secret's is
/// opened first: sealing the same content twice gives two different rows).
fn upsert_generation_by(
    tx: &Transaction<'_>,
    table: &str,
    tenant: &str,
    name: &str,
    same: impl FnOnce(&str) -> Result<bool>,
) -> Result<Option<(i64, &'static str)>> {
    let sql = format!("SELECT generation, doc FROM {table} WHERE tenant = ?1 AND name = ?2");
    let existing: Option<(i64, String)> =
        tx.prepare_cached(&sql)?.query_row(params![tenant, name], |r| Ok((r.get(0)?, r.get(1)?))).optional()?;
    Ok(match existing {
        Some((_, old)) if same(&old)? => None,
        Some((g, _)) => Some((g + 1, "Updated")),
        None => Some((1, "Created")),
    })
}

fn apply_cluster(tx: &Transaction<'_>, now: Timestamp, c: &Cluster, by: By<'_>) -> Result<(ApplyOutcome, Announce)> {
    let (tenant, name) = (c.metadata.tenant(), c.metadata.name.as_str());
    let doc = canonical(c)?;
    let Some((generation, action)) = upsert_generation(tx, "clusters", tenant, name, &doc)? else {
        return Ok((
            outcome(Kind::Cluster, tenant, name, generation_of(tx, "clusters", tenant, name)?, "unchanged", 0),
            Announce::default(),
        ));
    };
    let labels = json("clusters", &c.metadata.labels)?;
    tx.prepare_cached(
        "INSERT INTO clusters (tenant, name, generation, labels, doc) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (tenant, name) DO UPDATE SET generation = excluded.generation, labels = excluded.labels, doc = excluded.doc",
    )?
    .execute(params![tenant, name, generation, labels, doc])?;
    event_append(tx, now, NewEvent { tenant, kind: "Cluster", name, action, generation, actor: by.actor })?;
    let enqueued = enqueue_cluster(tx, now, c, by.own)?;
    let written = outcome(
        Kind::Cluster,
        tenant,
        name,
        generation,
        if action == "Created" { "created" } else { "updated" },
        enqueued,
    );
    Ok((written, Announce::objects(now, 1, enqueued)))
}

/// Enqueues a new or changed cluster's keys ([`plan::cluster_changed`]).
fn enqueue_cluster(tx: &Transaction<'_>, now: Timestamp, c: &Cluster, own: Option<&WorkKey>) -> Result<u64> {
    let (tenant, name) = (c.metadata.tenant(), c.metadata.name.as_str());
    let had: HashSet<String> =
        query_strings(tx, "SELECT syncset FROM work WHERE tenant = ?1 AND cluster = ?2 AND desired = 1", tenant, name)?;
    let plan = plan::cluster_changed(tenant, name, &c.metadata.labels, &syncset_targets(tx, tenant)?, &had, own);
    enqueue_all(tx, now, &plan)
}

/// Writes planned enqueues; returns how many.
fn enqueue_all(tx: &Transaction<'_>, now: Timestamp, plan: &[Planned]) -> Result<u64> {
    for p in plan {
        enqueue(tx, now, &p.key, p.enqueue, p.dirties)?;
    }
    Ok(plan.len() as u64)
}

/// Stores a Secret (sealed, given keys); a new or changed one re-applies the keys of
/// every cluster that reaches its target through it (new credentials, or ones that
/// were missing).
fn apply_secret(tx: &Transaction<'_>, now: Timestamp, s: &Secret, by: By<'_>) -> Result<(ApplyOutcome, Announce)> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    let doc = canonical(s)?;
    let same = |old: &str| Ok(sealed::open(by.keys, tenant, name, old)? == doc);
    let Some((generation, action)) = upsert_generation_by(tx, "secrets", tenant, name, same)? else {
        return Ok((
            outcome(Kind::Secret, tenant, name, generation_of(tx, "secrets", tenant, name)?, "unchanged", 0),
            Announce::default(),
        ));
    };
    let doc = sealed::seal(by.keys, tenant, name, doc)?;
    tx.prepare_cached(
        "INSERT INTO secrets (tenant, name, generation, doc) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (tenant, name) DO UPDATE SET generation = excluded.generation, doc = excluded.doc",
    )?
    .execute(params![tenant, name, generation, doc])?;
    event_append(tx, now, NewEvent { tenant, kind: "Secret", name, action, generation, actor: by.actor })?;
    let mut enqueued = 0;
    for c in plan::secret_users(name, &list::<Cluster>(tx, Kind::Cluster, Some(tenant), None)?) {
        enqueued += enqueue_cluster(tx, now, c, by.own)?;
    }
    let written = outcome(
        Kind::Secret,
        tenant,
        name,
        generation,
        if action == "Created" { "created" } else { "updated" },
        enqueued,
    );
    Ok((written, Announce::objects(now, 1, enqueued)))
}

fn apply_syncset(tx: &Transaction<'_>, now: Timestamp, s: &SyncSet, by: By<'_>) -> Result<(ApplyOutcome, Announce)> {
    let (tenant, name) = (s.metadata.tenant(), s.metadata.name.as_str());
    let doc = canonical(s)?;
    let Some((generation, action)) = upsert_generation(tx, "syncsets", tenant, name, &doc)? else {
        return Ok((
            outcome(Kind::SyncSet, tenant, name, generation_of(tx, "syncsets", tenant, name)?, "unchanged", 0),
            Announce::default(),
        ));
    };
    // The document this write replaces, read only when its revision is not stored (a
    // SyncSet last written before revisions were kept).
    let previous = match generation > 1 && !rollouts::revision_kept(tx, tenant, name, generation - 1)? {
        true => get::<SyncSet>(tx, Kind::SyncSet, tenant, name, None)?,
        false => None,
    };
    let mode = s.spec.resource_apply_mode;
    let selector = json("syncsets", &s.spec.targeting())?;
    tx.prepare_cached(
        "INSERT INTO syncsets (tenant, name, generation, apply_mode, selector, doc) VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (tenant, name) DO UPDATE SET generation = excluded.generation, apply_mode = excluded.apply_mode,
             selector = excluded.selector, doc = excluded.doc",
    )?
    .execute(params![tenant, name, generation, mode.as_str(), selector, doc])?;
    event_append(tx, now, NewEvent { tenant, kind: "SyncSet", name, action, generation, actor: by.actor })?;
    if let Some(previous) = &previous {
        rollouts::revision_put(tx, previous, generation - 1)?;
    }
    rollouts::revision_put(tx, s, generation)?;
    let (run_generation, run_mode, held_back) = rollouts::on_write(tx, now, s, generation)?;

    let had: HashSet<String> =
        query_strings(tx, "SELECT cluster FROM work WHERE tenant = ?1 AND syncset = ?2 AND desired = 1", tenant, name)?;
    let mut clusters = tx.prepare_cached("SELECT name, labels FROM clusters WHERE tenant = ?1 ORDER BY name")?;
    let clusters = clusters
        .query_map(params![tenant], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
        .map(|row| {
            let (cluster, labels) = row?;
            Ok((cluster, decode::<BTreeMap<String, String>>("clusters", &labels)?))
        })
        .collect::<Result<Vec<_>>>()?;
    let target = Target {
        name: name.into(),
        generation: run_generation,
        mode: run_mode,
        held_back,
        targeting: s.spec.targeting(),
    };
    let enqueued = enqueue_all(tx, now, &plan::syncset_changed(tenant, &target, &clusters, &had, by.own))?;
    rollouts::revisions_prune(tx, tenant, name, generation)?;
    let written = outcome(
        Kind::SyncSet,
        tenant,
        name,
        generation,
        if action == "Created" { "created" } else { "updated" },
        enqueued,
    );
    Ok((written, Announce::objects(now, 1, enqueued)))
}

/// Deletes an object; returns what the commit announces.
pub(super) fn delete(
    tx: &Transaction<'_>,
    now: Timestamp,
    kind: Kind,
    tenant: &str,
    name: &str,
    actor: Option<&str>,
) -> Result<Announce> {
    let table = table(kind);
    let generation = generation_of(tx, table, tenant, name)?;
    if generation == 0 {
        return Err(StoreError::not_found(kind, tenant, name));
    }
    tx.execute(&format!("DELETE FROM {table} WHERE tenant = ?1 AND name = ?2"), params![tenant, name])?;
    event_append(tx, now, NewEvent { tenant, kind: kind.as_str(), name, action: "Deleted", generation, actor })?;
    let keyed = match kind {
        Kind::SyncSet => {
            query_strings(tx, "SELECT cluster FROM work WHERE tenant = ?1 AND syncset = ?2", tenant, name)?
        }
        Kind::Cluster | Kind::Secret => HashSet::new(),
    };
    let enqueued = match plan::deleted(kind, tenant, name, keyed) {
        Deleted::ClusterKeysDropped => {
            tx.execute("DELETE FROM work WHERE tenant = ?1 AND cluster = ?2", params![tenant, name])?;
            tx.execute("DELETE FROM live_state WHERE tenant = ?1 AND cluster = ?2", params![tenant, name])?;
            0
        }
        Deleted::Removals(plan) => {
            rollouts::syncset_deleted(tx, tenant, name)?;
            enqueue_all(tx, now, &plan)?
        }
        Deleted::Nothing => 0,
    };
    Ok(Announce::objects(now, 1, enqueued))
}

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

/// Every SyncSet of a tenant with what is needed to match clusters.
fn syncset_targets(tx: &Transaction<'_>, tenant: &str) -> Result<Vec<Target>> {
    // A rollout that has not completed holds new and unreached clusters at its stable revision.
    let mut stmt = tx.prepare_cached(
        "SELECT s.name, COALESCE(v.generation, s.generation), COALESCE(v.apply_mode, s.apply_mode), s.selector, v.generation IS NOT NULL
         FROM syncsets s
         LEFT JOIN rollouts r ON r.tenant = s.tenant AND r.syncset = s.name AND r.phase <> 'Completed'
         LEFT JOIN revisions v ON v.tenant = s.tenant AND v.syncset = s.name AND v.generation = r.stable
         WHERE s.tenant = ?1 ORDER BY s.name",
    )?;
    let rows = stmt.query_map(params![tenant], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, bool>(4)?,
        ))
    })?;
    rows.map(|row| {
        let (name, generation, mode, selector, held_back) = row?;
        let mode = ApplyMode::parse(&mode).ok_or_else(|| corrupt("syncsets", format!("apply mode {mode:?}")))?;
        Ok(Target { name, generation, mode, held_back, targeting: decode("syncsets", &selector)? })
    })
    .collect()
}

fn generation_of(tx: &Connection, table: &str, tenant: &str, name: &str) -> Result<i64> {
    let sql = format!("SELECT generation FROM {table} WHERE tenant = ?1 AND name = ?2");
    Ok(tx.prepare_cached(&sql)?.query_row(params![tenant, name], |r| r.get(0)).optional()?.unwrap_or(0))
}

fn query_strings(tx: &Transaction<'_>, sql: &str, a: &str, b: &str) -> Result<HashSet<String>> {
    let mut stmt = tx.prepare_cached(sql)?;
    let rows = stmt.query_map(params![a, b], |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn outcome(kind: Kind, tenant: &str, name: &str, generation: i64, result: &'static str, enqueued: u64) -> ApplyOutcome {
    ApplyOutcome { kind, tenant: tenant.into(), name: name.into(), generation, result, enqueued }
}
