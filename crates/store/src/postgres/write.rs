//! The storage operations of the write workflows ([`crate::write`]) on PostgreSQL's
//! transaction ([`Tx`]): SQL and row mapping only. A tenant's writers serialize on its
//! advisory lock ([`Tx::lock_tenant`]), a cluster's live reports on theirs; events are appended at commit, in commit order;
//! keys made ready move in `due` and wake claimers at commit (`Tx::commit`).

use super::due::position;
use super::queue::{self, row_key, Enqueues};
use super::{objects, rollouts, Failure, PgResult, Tx};
use crate::plan::{Announce, Planned, RolloutFacts, SyncSetFacts};
use crate::quota::{Quota, Usage};
use crate::revision::RevisionsDrop;
use crate::rollout::RolloutState;
use crate::stored::{corrupt, decode, table};
use crate::write::{
    ClusterPlanning, ClusterRow, DocRow, LiveRow, NewEvent, RevisionRow, Stored, SyncSetPlanning, SyncSetRow, WriteTx,
};
use crate::Fence;
use fleetsync_model::{ApplyMode, Artifact, Cluster, Kind, RolloutPhase, Timestamp, WorkKey};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use tokio_postgres::types::ToSql;

impl WriteTx for Tx<'_> {
    type Error = Failure;

    fn now(&self) -> Timestamp {
        self.now
    }

    async fn tenant_lock(&mut self, tenant: &str) -> PgResult<()> {
        self.lock_tenant(tenant).await
    }

    async fn event_append(&mut self, e: NewEvent<'_>) -> PgResult<()> {
        self.event(e);
        Ok(())
    }

    fn work_announce(&mut self, announce: Announce) {
        self.announce(announce);
    }

    async fn object_stored(&mut self, kind: Kind, tenant: &str, name: &str) -> PgResult<Option<Stored>> {
        let sql = format!("SELECT generation, doc FROM {} WHERE tenant = $1 AND name = $2", table(kind));
        let Some(row) = self.query_opt(&sql, &[&tenant, &name]).await? else { return Ok(None) };
        Ok(Some(Stored { generation: row.try_get(0)?, doc: row.try_get(1)? }))
    }

    async fn cluster_put(&mut self, c: ClusterRow<'_>) -> PgResult<()> {
        self.execute(
            "INSERT INTO clusters (tenant, name, generation, labels, doc) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (tenant, name) DO UPDATE SET generation = EXCLUDED.generation, labels = EXCLUDED.labels,
                 doc = EXCLUDED.doc",
            &[&c.tenant, &c.name, &c.generation, &c.labels, &c.doc],
        )
        .await?;
        Ok(())
    }

    async fn syncset_put(&mut self, s: SyncSetRow<'_>) -> PgResult<()> {
        self.execute(
            "INSERT INTO syncsets (tenant, name, generation, apply_mode, selector, doc, source)
             VALUES ($1, $2, $3, $4, $5, $6, $7)
             ON CONFLICT (tenant, name) DO UPDATE SET generation = EXCLUDED.generation, apply_mode = EXCLUDED.apply_mode,
                 selector = EXCLUDED.selector, doc = EXCLUDED.doc, source = EXCLUDED.source",
            &[&s.tenant, &s.name, &s.generation, &s.mode.as_str(), &s.selector, &s.doc, &s.source],
        )
        .await?;
        Ok(())
    }

    async fn doc_put(&mut self, kind: Kind, s: DocRow<'_>) -> PgResult<()> {
        let sql = format!(
            "INSERT INTO {} (tenant, name, generation, doc) VALUES ($1, $2, $3, $4)
             ON CONFLICT (tenant, name) DO UPDATE SET generation = EXCLUDED.generation, doc = EXCLUDED.doc",
            table(kind)
        );
        self.execute(&sql, &[&s.tenant, &s.name, &s.generation, &s.doc]).await?;
        Ok(())
    }

    async fn syncsets_reading(&mut self, tenant: &str, source: &str) -> PgResult<Vec<Stored>> {
        let rows = self
            .query(
                "SELECT generation, doc FROM syncsets WHERE tenant = $1 AND source = $2 ORDER BY name",
                &[&tenant, &source],
            )
            .await?;
        rows.iter().map(|r| Ok(Stored { generation: r.try_get(0)?, doc: r.try_get(1)? })).collect()
    }

    async fn object_delete(&mut self, kind: Kind, tenant: &str, name: &str) -> PgResult<Option<i64>> {
        let sql = format!("DELETE FROM {} WHERE tenant = $1 AND name = $2 RETURNING generation", table(kind));
        Ok(self.query_opt(&sql, &[&tenant, &name]).await?.map(|r| r.try_get(0)).transpose()?)
    }

    async fn cluster_list(&mut self, tenant: &str) -> PgResult<Vec<Cluster>> {
        objects::list(self.client(), Kind::Cluster, Some(tenant.to_string()), None).await
    }

    async fn tenant_usage(&mut self, tenant: &str, quota: &Quota) -> PgResult<Usage> {
        async fn count(tx: &Tx<'_>, sql: &str, tenant: &str) -> PgResult<u64> {
            Ok(tx.query_opt(sql, &[&tenant]).await?.map_or(0, |r| r.get::<_, i64>(0)) as u64)
        }
        let tx = &*self;
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

    /// Both reads go out at once.
    async fn cluster_planning(&mut self, tenant: &str, cluster: &str) -> PgResult<ClusterPlanning> {
        let tx = &*self;
        let tenant_param: [&(dyn ToSql + Sync); 1] = [&tenant];
        let (had, rows) = tokio::try_join!(
            strings(tx, "SELECT syncset FROM work WHERE tenant = $1 AND cluster = $2 AND desired", tenant, cluster),
            tx.query(
                "SELECT s.name, s.generation, s.apply_mode, s.selector, r.phase, r.stable, v.apply_mode
                 FROM syncsets s
                 LEFT JOIN rollouts r ON r.tenant = s.tenant AND r.syncset = s.name
                 LEFT JOIN revisions v ON v.tenant = s.tenant AND v.syncset = s.name AND v.generation = r.stable
                 WHERE s.tenant = $1 ORDER BY s.name",
                &tenant_param,
            ),
        )?;
        let syncsets = rows
            .iter()
            .map(|row| {
                let phase: Option<&str> = row.try_get(4)?;
                let stable: Option<i64> = row.try_get(5)?;
                let rollout = match (phase, stable) {
                    (Some(phase), Some(stable)) => Some(RolloutFacts {
                        phase: RolloutPhase::parse(phase)
                            .ok_or_else(|| corrupt("rollouts", format!("phase {phase:?}")))?,
                        stable,
                        stable_mode: row
                            .try_get::<_, Option<&str>>(6)?
                            .map(|m| apply_mode("revisions", m))
                            .transpose()?,
                    }),
                    _ => None,
                };
                Ok(SyncSetFacts {
                    name: row.try_get(0)?,
                    generation: row.try_get(1)?,
                    mode: apply_mode("syncsets", row.try_get(2)?)?,
                    targeting: decode("syncsets", row.try_get(3)?)?,
                    rollout,
                })
            })
            .collect::<PgResult<_>>()?;
        Ok(ClusterPlanning { had, syncsets })
    }

    /// Both reads go out at once.
    async fn syncset_planning(&mut self, tenant: &str, syncset: &str) -> PgResult<SyncSetPlanning> {
        let tx = &*self;
        let tenant_param: [&(dyn ToSql + Sync); 1] = [&tenant];
        let (had, rows) = tokio::try_join!(
            strings(tx, "SELECT cluster FROM work WHERE tenant = $1 AND syncset = $2 AND desired", tenant, syncset),
            tx.query("SELECT name, labels FROM clusters WHERE tenant = $1 ORDER BY name", &tenant_param),
        )?;
        let clusters = rows
            .iter()
            .map(|row| {
                Ok((row.try_get::<_, String>(0)?, decode::<BTreeMap<String, String>>("clusters", row.try_get(1)?)?))
            })
            .collect::<PgResult<_>>()?;
        Ok(SyncSetPlanning { had, clusters })
    }

    async fn work_clusters_of(&mut self, tenant: &str, syncset: &str) -> PgResult<Vec<String>> {
        strings(self, "SELECT cluster FROM work WHERE tenant = $1 AND syncset = $2", tenant, syncset).await
    }

    async fn work_wanted_among(&mut self, tenant: &str, syncset: &str, clusters: &[&str]) -> PgResult<HashSet<String>> {
        let rows = self
            .query(
                "SELECT cluster FROM work WHERE tenant = $1 AND syncset = $2 AND desired AND cluster = ANY($3)",
                &[&tenant, &syncset, &clusters],
            )
            .await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    async fn work_wanted_generations(&mut self, tenant: &str, syncset: &str) -> PgResult<BTreeSet<i64>> {
        let rows = self
            .query(
                "SELECT DISTINCT generation FROM work WHERE tenant = $1 AND syncset = $2 AND desired",
                &[&tenant, &syncset],
            )
            .await?;
        rows.iter().map(|r| Ok(r.try_get(0)?)).collect()
    }

    /// One statement for the whole plan.
    async fn work_enqueue(&mut self, plan: &[Planned]) -> PgResult<u64> {
        let mut batch = Enqueues::default();
        for p in plan {
            batch.push(p.key.clone(), p.enqueue, p.dirties);
        }
        queue::enqueue(self, &batch).await
    }

    /// The keys' rows are locked in id order, and leave `due` with them.
    async fn cluster_keys_drop(&mut self, tenant: &str, cluster: &str) -> PgResult<()> {
        let gone = self
            .query(
                "WITH held AS (SELECT id FROM work WHERE tenant = $1 AND cluster = $2 ORDER BY id FOR UPDATE)
                 DELETE FROM work WHERE id = ANY(ARRAY(SELECT id FROM held))
                 RETURNING tenant, cluster, syncset, id, shard, phase, run_at",
                &[&tenant, &cluster],
            )
            .await?;
        for r in &gone {
            let was = position(r.try_get(5)?, r.try_get(6)?);
            self.due.record(row_key(r)?, r.try_get(3)?, r.try_get(4)?, was, None);
        }
        self.execute("DELETE FROM live_state WHERE tenant = $1 AND cluster = $2", &[&tenant, &cluster]).await?;
        Ok(())
    }

    /// The row stays locked until commit (FOR UPDATE).
    async fn work_lease_held(&mut self, key: &WorkKey, fence: Fence) -> PgResult<bool> {
        let held = self
            .query_opt(
                "SELECT 1 FROM work WHERE tenant = $1 AND cluster = $2 AND syncset = $3 AND phase = 'running' AND fence = $4
                 FOR UPDATE",
                &[&key.tenant, &key.cluster, &key.syncset, &fence.get()],
            )
            .await?;
        Ok(held.is_some())
    }

    async fn work_again(&mut self, key: &WorkKey) -> PgResult<Option<i64>> {
        queue::again(self, key.clone()).await
    }

    async fn work_resync_all(&mut self) -> PgResult<u64> {
        queue::resync(self).await
    }

    async fn work_inventory_set(&mut self, key: &WorkKey, fence: Fence, inventory: &str) -> PgResult<bool> {
        queue::inventory_set(self, key, fence, inventory).await
    }

    async fn revision_kept(&mut self, tenant: &str, syncset: &str, generation: i64) -> PgResult<bool> {
        let sql = "SELECT 1 FROM revisions WHERE tenant = $1 AND syncset = $2 AND generation = $3";
        Ok(self.query_opt(sql, &[&tenant, &syncset, &generation]).await?.is_some())
    }

    async fn revision_put(&mut self, row: RevisionRow<'_>) -> PgResult<()> {
        rollouts::revision_put(self, &row).await
    }

    async fn revision_modes(
        &mut self,
        tenant: &str,
        syncset: &str,
        generations: &[i64],
    ) -> PgResult<HashMap<i64, ApplyMode>> {
        let rows = self
            .query(
                "SELECT generation, apply_mode FROM revisions WHERE tenant = $1 AND syncset = $2 AND generation = ANY($3)",
                &[&tenant, &syncset, &generations],
            )
            .await?;
        rows.iter().map(|r| Ok((r.try_get(0)?, apply_mode("revisions", r.try_get(1)?)?))).collect()
    }

    async fn revisions_drop(&mut self, tenant: &str, syncset: &str, drop: &RevisionsDrop) -> PgResult<()> {
        rollouts::revisions_drop(self, tenant, syncset, drop).await
    }

    async fn rollout_get(&mut self, tenant: &str, syncset: &str) -> PgResult<Option<RolloutState>> {
        rollouts::rollout_get(self.client(), tenant, syncset).await
    }

    async fn rollout_put(&mut self, state: &RolloutState) -> PgResult<()> {
        rollouts::rollout_put(self, state).await
    }

    async fn rollout_delete(&mut self, tenant: &str, syncset: &str) -> PgResult<()> {
        self.execute("DELETE FROM rollouts WHERE tenant = $1 AND syncset = $2", &[&tenant, &syncset]).await?;
        Ok(())
    }

    /// An advisory lock of the cluster's reports, across processes.
    async fn live_lock(&mut self, tenant: &str, cluster: &str) -> PgResult<()> {
        let lock = format!("fleetsync live {} {tenant}/{cluster}", self.schema);
        self.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&lock]).await?;
        Ok(())
    }

    /// Kept as a delta like every change of the cluster's counts (`counts.rs`).
    async fn cluster_seen_set(&mut self, tenant: &str, cluster: &str) -> PgResult<()> {
        self.execute(
            "INSERT INTO cluster_count_deltas (tenant, cluster, n, bad, done, seen) VALUES ($1, $2, 0, 0, 0, $3)",
            &[&tenant, &cluster, &self.now.millis()],
        )
        .await?;
        Ok(())
    }

    async fn live_versions(
        &mut self,
        tenant: &str,
        cluster: &str,
        resources: &[String],
    ) -> PgResult<HashMap<String, String>> {
        let rows = self
            .query(
                "SELECT resource, resource_version FROM live_state WHERE tenant = $1 AND cluster = $2 AND resource = ANY($3)",
                &[&tenant, &cluster, &resources],
            )
            .await?;
        rows.iter().map(|r| Ok((r.try_get(0)?, r.try_get(1)?))).collect()
    }

    /// One statement for the whole batch.
    async fn live_put(&mut self, tenant: &str, cluster: &str, rows: &[LiveRow<'_>]) -> PgResult<()> {
        let resources: Vec<&str> = rows.iter().map(|r| r.resource).collect();
        let syncsets: Vec<&str> = rows.iter().map(|r| r.syncset).collect();
        let versions: Vec<&str> = rows.iter().map(|r| r.resource_version).collect();
        let states: Vec<&str> = rows.iter().map(|r| r.state.as_str()).collect();
        let objects: Vec<Option<&str>> = rows.iter().map(|r| r.object.as_deref()).collect();
        let drifts: Vec<Option<&str>> = rows.iter().map(|r| r.drift).collect();
        let unready: Vec<Option<&str>> = rows.iter().map(|r| r.unready).collect();
        let bumps: Vec<i64> = rows.iter().map(|r| r.versions).collect();
        self.execute(
            "INSERT INTO live_state AS l (tenant, cluster, resource, syncset, resource_version, state, object, drift, versions, updated_at, unready)
             SELECT $1, $2, u.resource, u.syncset, u.rv, u.state, u.object, u.drift, u.bump, $3, u.unready
             FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[])
                  AS u(resource, syncset, rv, state, object, drift, bump, unready)
             ON CONFLICT (tenant, cluster, resource) DO UPDATE SET syncset = excluded.syncset,
                 resource_version = excluded.resource_version, state = excluded.state, object = excluded.object,
                 drift = excluded.drift, versions = l.versions + excluded.versions, updated_at = excluded.updated_at,
                 unready = excluded.unready",
            &[&tenant, &cluster, &self.now.millis(), &resources, &syncsets, &versions, &states, &objects, &drifts, &bumps, &unready],
        )
        .await?;
        Ok(())
    }

    async fn content_put(&mut self, tenant: &str, digest: &str, content: &[u8]) -> PgResult<bool> {
        let n = self
            .execute(
                "INSERT INTO contents (tenant, digest, content) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[&tenant, &digest, &content],
            )
            .await?;
        Ok(n > 0)
    }

    async fn artifact_get(&mut self, tenant: &str, source: &str, revision: &str) -> PgResult<Option<Artifact>> {
        super::artifacts::get(self.client(), tenant, source, revision).await
    }

    async fn artifact_insert(&mut self, tenant: &str, source: &str, revision: &str, files: &str) -> PgResult<bool> {
        let n = self
            .execute(
                "INSERT INTO artifacts (tenant, source, revision, files, created_at) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT DO NOTHING",
                &[&tenant, &source, &revision, &files, &self.now.millis()],
            )
            .await?;
        Ok(n > 0)
    }
}

/// An apply mode read from `table`.
fn apply_mode(table: &'static str, mode: &str) -> crate::Result<ApplyMode> {
    ApplyMode::parse(mode).ok_or_else(|| corrupt(table, format!("apply mode {mode:?}")))
}

/// The first column of a query's rows with parameters `a` and `b`, as strings.
async fn strings<C: FromIterator<String>>(tx: &Tx<'_>, sql: &str, a: &str, b: &str) -> PgResult<C> {
    let rows = tx.query(sql, &[&a, &b]).await?;
    rows.iter().map(|r| Ok(r.try_get::<_, String>(0)?)).collect()
}
