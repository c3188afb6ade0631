//! The storage operations of the write workflows ([`crate::write`]) on SQLite: SQL and
//! row mapping only. None suspends, so the writer thread drives a workflow to its end
//! ([`crate::write::drive`]); there is one writer, so a tenant needs no lock; events are
//! appended at once (the one writer's order is commit order), and what the commit
//! announces is gathered for the store to tell once it committed.

use super::{objects, queue, rollouts, rows};
use crate::plan::{Announce, Planned, RolloutFacts, SyncSetFacts};
use crate::quota::{Quota, Usage};
use crate::revision::RevisionsDrop;
use crate::rollout::RolloutState;
use crate::stored::{corrupt, decode, json, table};
use crate::write::{
    ClusterPlanning, ClusterRow, DocRow, LiveRow, NewEvent, RevisionRow, Stored, SyncSetPlanning, SyncSetRow, WriteTx,
};
use crate::{Fence, Result, StoreError};
use fleetsync_model::{ApplyMode, Artifact, Cluster, Kind, RolloutPhase, Timestamp, WorkKey};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// A write transaction's operations, and what its commit announces.
pub(super) struct SqliteTx<'a> {
    tx: &'a Connection,
    now: Timestamp,
    pub(super) announce: Announce,
}

impl<'a> SqliteTx<'a> {
    pub(super) fn new(tx: &'a Connection, now: Timestamp) -> Self {
        SqliteTx { tx, now, announce: Announce::default() }
    }
}

/// Runs a workflow on an SQLite write transaction to its end; returns its output and
/// what the commit is to announce.
pub(super) fn run<'a, T, F>(tx: &'a Connection, now: Timestamp, workflow: F) -> Result<(T, Announce)>
where
    F: AsyncFnOnce(&mut SqliteTx<'a>) -> Result<T>,
{
    let mut w = SqliteTx::new(tx, now);
    let out = crate::write::drive(workflow(&mut w))??;
    Ok((out, w.announce))
}

impl WriteTx for SqliteTx<'_> {
    type Error = StoreError;

    fn now(&self) -> Timestamp {
        self.now
    }

    async fn tenant_lock(&mut self, _tenant: &str) -> Result<()> {
        Ok(())
    }

    async fn event_append(&mut self, e: NewEvent<'_>) -> Result<()> {
        rows::event_append(self.tx, self.now, e)?;
        self.announce.events = true;
        Ok(())
    }

    fn work_announce(&mut self, announce: Announce) {
        self.announce = self.announce.and(announce);
    }

    async fn object_stored(&mut self, kind: Kind, tenant: &str, name: &str) -> Result<Option<Stored>> {
        let sql = format!("SELECT generation, doc FROM {} WHERE tenant = ?1 AND name = ?2", table(kind));
        let row = self
            .tx
            .prepare_cached(&sql)?
            .query_row(params![tenant, name], |r| Ok(Stored { generation: r.get(0)?, doc: r.get(1)? }));
        Ok(row.optional()?)
    }

    async fn cluster_put(&mut self, c: ClusterRow<'_>) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO clusters (tenant, name, generation, labels, doc) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (tenant, name) DO UPDATE SET generation = excluded.generation, labels = excluded.labels,
                     doc = excluded.doc",
            )?
            .execute(params![c.tenant, c.name, c.generation, c.labels, c.doc])?;
        Ok(())
    }

    async fn syncset_put(&mut self, s: SyncSetRow<'_>) -> Result<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO syncsets (tenant, name, generation, apply_mode, selector, doc, source)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (tenant, name) DO UPDATE SET generation = excluded.generation, apply_mode = excluded.apply_mode,
                     selector = excluded.selector, doc = excluded.doc, source = excluded.source",
            )?
            .execute(params![s.tenant, s.name, s.generation, s.mode.as_str(), s.selector, s.doc, s.source])?;
        Ok(())
    }

    async fn doc_put(&mut self, kind: Kind, s: DocRow<'_>) -> Result<()> {
        let sql = format!(
            "INSERT INTO {} (tenant, name, generation, doc) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (tenant, name) DO UPDATE SET generation = excluded.generation, doc = excluded.doc",
            table(kind)
        );
        self.tx.prepare_cached(&sql)?.execute(params![s.tenant, s.name, s.generation, s.doc])?;
        Ok(())
    }

    async fn syncsets_reading(&mut self, tenant: &str, source: &str) -> Result<Vec<Stored>> {
        let mut stmt = self
            .tx
            .prepare_cached("SELECT generation, doc FROM syncsets WHERE tenant = ?1 AND source = ?2 ORDER BY name")?;
        let rows = stmt.query_map(params![tenant, source], |r| Ok(Stored { generation: r.get(0)?, doc: r.get(1)? }))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn object_delete(&mut self, kind: Kind, tenant: &str, name: &str) -> Result<Option<i64>> {
        let sql = format!("DELETE FROM {} WHERE tenant = ?1 AND name = ?2 RETURNING generation", table(kind));
        Ok(self.tx.prepare_cached(&sql)?.query_row(params![tenant, name], |r| r.get(0)).optional()?)
    }

    async fn cluster_list(&mut self, tenant: &str) -> Result<Vec<Cluster>> {
        objects::list(self.tx, Kind::Cluster, Some(tenant), None)
    }

    async fn tenant_usage(&mut self, tenant: &str, quota: &Quota) -> Result<Usage> {
        let count = |sql: &str| -> Result<u64> {
            Ok(self.tx.prepare_cached(sql)?.query_row(params![tenant], |r| r.get::<_, i64>(0))? as u64)
        };
        Ok(Usage {
            clusters: if quota.clusters.is_some() {
                count("SELECT count(*) FROM clusters WHERE tenant = ?1")?
            } else {
                0
            },
            syncsets: if quota.syncsets.is_some() {
                count("SELECT count(*) FROM syncsets WHERE tenant = ?1")?
            } else {
                0
            },
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

    async fn cluster_planning(&mut self, tenant: &str, cluster: &str) -> Result<ClusterPlanning> {
        let had = strings(
            self.tx,
            "SELECT syncset FROM work WHERE tenant = ?1 AND cluster = ?2 AND desired = 1",
            params![tenant, cluster],
        )?;
        let mut stmt = self.tx.prepare_cached(
            "SELECT s.name, s.generation, s.apply_mode, s.selector, r.phase, r.stable, v.apply_mode
             FROM syncsets s
             LEFT JOIN rollouts r ON r.tenant = s.tenant AND r.syncset = s.name
             LEFT JOIN revisions v ON v.tenant = s.tenant AND v.syncset = s.name AND v.generation = r.stable
             WHERE s.tenant = ?1 ORDER BY s.name",
        )?;
        let rows = stmt.query_map(params![tenant], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, Option<i64>>(5)?,
                r.get::<_, Option<String>>(6)?,
            ))
        })?;
        let syncsets = rows
            .map(|row| {
                let (name, generation, mode, selector, phase, stable, stable_mode) = row?;
                let rollout = match (phase, stable) {
                    (Some(phase), Some(stable)) => Some(RolloutFacts {
                        phase: RolloutPhase::parse(&phase)
                            .ok_or_else(|| corrupt("rollouts", format!("phase {phase:?}")))?,
                        stable,
                        stable_mode: stable_mode.as_deref().map(|m| apply_mode("revisions", m)).transpose()?,
                    }),
                    _ => None,
                };
                let (mode, targeting) = (apply_mode("syncsets", &mode)?, decode("syncsets", &selector)?);
                Ok(SyncSetFacts { name, generation, mode, targeting, rollout })
            })
            .collect::<Result<_>>()?;
        Ok(ClusterPlanning { had, syncsets })
    }

    async fn syncset_planning(&mut self, tenant: &str, syncset: &str) -> Result<SyncSetPlanning> {
        let had = strings(
            self.tx,
            "SELECT cluster FROM work WHERE tenant = ?1 AND syncset = ?2 AND desired = 1",
            params![tenant, syncset],
        )?;
        let mut stmt = self.tx.prepare_cached("SELECT name, labels FROM clusters WHERE tenant = ?1 ORDER BY name")?;
        let rows = stmt.query_map(params![tenant], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let clusters = rows
            .map(|row| {
                let (cluster, labels) = row?;
                Ok((cluster, decode::<BTreeMap<String, String>>("clusters", &labels)?))
            })
            .collect::<Result<_>>()?;
        Ok(SyncSetPlanning { had, clusters })
    }

    async fn work_clusters_of(&mut self, tenant: &str, syncset: &str) -> Result<Vec<String>> {
        strings(self.tx, "SELECT cluster FROM work WHERE tenant = ?1 AND syncset = ?2", params![tenant, syncset])
    }

    async fn work_wanted_among(&mut self, tenant: &str, syncset: &str, clusters: &[&str]) -> Result<HashSet<String>> {
        strings(
            self.tx,
            "SELECT cluster FROM work WHERE tenant = ?1 AND syncset = ?2 AND desired = 1
                 AND cluster IN (SELECT value FROM json_each(?3))",
            params![tenant, syncset, json("work", clusters)?],
        )
    }

    async fn work_wanted_generations(&mut self, tenant: &str, syncset: &str) -> Result<BTreeSet<i64>> {
        let mut stmt = self.tx.prepare_cached(
            "SELECT DISTINCT generation FROM work WHERE tenant = ?1 AND syncset = ?2 AND desired = 1",
        )?;
        let rows = stmt.query_map(params![tenant, syncset], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn work_enqueue(&mut self, plan: &[Planned]) -> Result<u64> {
        for p in plan {
            queue::enqueue(self.tx, self.now, &p.key, p.enqueue, p.dirties)?;
        }
        Ok(plan.len() as u64)
    }

    async fn cluster_keys_drop(&mut self, tenant: &str, cluster: &str) -> Result<()> {
        self.tx.execute("DELETE FROM work WHERE tenant = ?1 AND cluster = ?2", params![tenant, cluster])?;
        self.tx.execute("DELETE FROM live_state WHERE tenant = ?1 AND cluster = ?2", params![tenant, cluster])?;
        Ok(())
    }

    async fn work_lease_held(&mut self, key: &WorkKey, fence: Fence) -> Result<bool> {
        let sql = "SELECT 1 FROM work WHERE tenant = ?1 AND cluster = ?2 AND syncset = ?3 AND phase = 'running' AND fence = ?4";
        Ok(self.tx.prepare_cached(sql)?.exists(params![key.tenant, key.cluster, key.syncset, fence.get()])?)
    }

    async fn work_again(&mut self, key: &WorkKey) -> Result<Option<i64>> {
        queue::again(self.tx, self.now, key)
    }

    async fn work_resync_all(&mut self) -> Result<u64> {
        queue::resync(self.tx, self.now)
    }

    async fn work_inventory_set(&mut self, key: &WorkKey, fence: Fence, inventory: &str) -> Result<bool> {
        queue::inventory_set(self.tx, self.now, key, fence, inventory)
    }

    async fn revision_kept(&mut self, tenant: &str, syncset: &str, generation: i64) -> Result<bool> {
        rollouts::revision_kept(self.tx, tenant, syncset, generation)
    }

    async fn revision_put(&mut self, row: RevisionRow<'_>) -> Result<()> {
        rollouts::revision_put(self.tx, &row)
    }

    async fn revision_modes(
        &mut self,
        tenant: &str,
        syncset: &str,
        generations: &[i64],
    ) -> Result<HashMap<i64, ApplyMode>> {
        let mut stmt = self.tx.prepare_cached(
            "SELECT generation, apply_mode FROM revisions WHERE tenant = ?1 AND syncset = ?2
                 AND generation IN (SELECT value FROM json_each(?3))",
        )?;
        let rows = stmt.query_map(params![tenant, syncset, json("revisions", generations)?], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        rows.map(|row| {
            let (generation, mode) = row?;
            Ok((generation, apply_mode("revisions", &mode)?))
        })
        .collect()
    }

    async fn revisions_drop(&mut self, tenant: &str, syncset: &str, drop: &RevisionsDrop) -> Result<()> {
        rollouts::revisions_drop(self.tx, tenant, syncset, drop)
    }

    async fn rollout_get(&mut self, tenant: &str, syncset: &str) -> Result<Option<RolloutState>> {
        rollouts::rollout_get(self.tx, tenant, syncset)
    }

    async fn rollout_put(&mut self, state: &RolloutState) -> Result<()> {
        rollouts::rollout_put(self.tx, state)
    }

    async fn rollout_delete(&mut self, tenant: &str, syncset: &str) -> Result<()> {
        self.tx
            .prepare_cached("DELETE FROM rollouts WHERE tenant = ?1 AND syncset = ?2")?
            .execute(params![tenant, syncset])?;
        Ok(())
    }

    async fn live_lock(&mut self, _tenant: &str, _cluster: &str) -> Result<()> {
        Ok(())
    }

    async fn cluster_seen_set(&mut self, tenant: &str, cluster: &str) -> Result<()> {
        self.tx
            .prepare_cached(
                "UPDATE cluster_counts SET seen = MAX(IFNULL(seen, ?3), ?3) WHERE tenant = ?1 AND cluster = ?2",
            )?
            .execute(params![tenant, cluster, self.now.millis()])?;
        Ok(())
    }

    async fn live_versions(
        &mut self,
        tenant: &str,
        cluster: &str,
        resources: &[String],
    ) -> Result<HashMap<String, String>> {
        let mut stmt = self.tx.prepare_cached(
            "SELECT resource, resource_version FROM live_state WHERE tenant = ?1 AND cluster = ?2
                 AND resource IN (SELECT value FROM json_each(?3))",
        )?;
        let rows = stmt.query_map(params![tenant, cluster, json("live_state", resources)?], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    async fn live_put(&mut self, tenant: &str, cluster: &str, rows: &[LiveRow<'_>]) -> Result<()> {
        let mut stmt = self.tx.prepare_cached(
            "INSERT INTO live_state (tenant, cluster, resource, syncset, resource_version, state, object, drift, versions, updated_at, unready)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (tenant, cluster, resource) DO UPDATE SET syncset = excluded.syncset,
                 resource_version = excluded.resource_version, state = excluded.state, object = excluded.object,
                 drift = excluded.drift, versions = versions + excluded.versions, updated_at = excluded.updated_at,
                 unready = excluded.unready",
        )?;
        for r in rows {
            stmt.execute(params![
                tenant,
                cluster,
                r.resource,
                r.syncset,
                r.resource_version,
                r.state.as_str(),
                r.object,
                r.drift,
                r.versions,
                self.now.millis(),
                r.unready
            ])?;
        }
        Ok(())
    }

    async fn content_put(&mut self, tenant: &str, digest: &str, content: &[u8]) -> Result<bool> {
        let n = self
            .tx
            .prepare_cached(
                "INSERT INTO contents (tenant, digest, content) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING",
            )?
            .execute(params![tenant, digest, content])?;
        Ok(n > 0)
    }

    async fn artifact_get(&mut self, tenant: &str, source: &str, revision: &str) -> Result<Option<Artifact>> {
        super::artifacts::get(self.tx, tenant, source, revision)
    }

    async fn artifact_insert(&mut self, tenant: &str, source: &str, revision: &str, files: &str) -> Result<bool> {
        let n = self
            .tx
            .prepare_cached(
                "INSERT INTO artifacts (tenant, source, revision, files, created_at) VALUES (?1, ?2, ?3, ?4, ?5)
                 ON CONFLICT DO NOTHING",
            )?
            .execute(params![tenant, source, revision, files, self.now.millis()])?;
        Ok(n > 0)
    }
}

/// An apply mode read from `table`.
fn apply_mode(table: &'static str, mode: &str) -> Result<ApplyMode> {
    ApplyMode::parse(mode).ok_or_else(|| corrupt(table, format!("apply mode {mode:?}")))
}

/// The first column of a query's rows, as strings.
fn strings<C: FromIterator<String>>(tx: &Connection, sql: &str, params: impl rusqlite::Params) -> Result<C> {
    let mut stmt = tx.prepare_cached(sql)?;
    let rows = stmt.query_map(params, |r| r.get::<_, String>(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}
