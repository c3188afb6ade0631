//! The SQLite schema, versioned. Each migration runs once, in order, in a transaction.

use rusqlite::Connection;

const MIGRATIONS: &[&str] = &[
    // 1: objects, the work queue (one row per key, carrying its status), the event log.
    r#"
    CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO meta (k, v) VALUES ('fence', 0);
    CREATE TABLE clusters (
        tenant TEXT NOT NULL, name TEXT NOT NULL, generation INTEGER NOT NULL,
        labels TEXT NOT NULL, doc TEXT NOT NULL,
        PRIMARY KEY (tenant, name)) WITHOUT ROWID;
    CREATE TABLE syncsets (
        tenant TEXT NOT NULL, name TEXT NOT NULL, generation INTEGER NOT NULL,
        apply_mode TEXT NOT NULL, selector TEXT NOT NULL, doc TEXT NOT NULL,
        PRIMARY KEY (tenant, name)) WITHOUT ROWID;
    CREATE TABLE work (
        id INTEGER PRIMARY KEY,
        tenant TEXT NOT NULL, cluster TEXT NOT NULL, syncset TEXT NOT NULL,
        desired INTEGER NOT NULL, apply_mode TEXT NOT NULL, generation INTEGER NOT NULL,
        want_seq INTEGER NOT NULL, claimed_seq INTEGER NOT NULL,
        phase TEXT NOT NULL CHECK (phase IN ('idle', 'ready', 'running', 'parked')),
        run_at INTEGER NOT NULL,
        fence INTEGER NOT NULL, lease_owner TEXT, lease_expires_at INTEGER,
        attempts INTEGER NOT NULL, last_error TEXT,
        observed_generation INTEGER NOT NULL,
        resources TEXT NOT NULL DEFAULT '[]', inventory TEXT NOT NULL DEFAULT '[]',
        updated_at INTEGER NOT NULL, last_applied_at INTEGER,
        UNIQUE (tenant, cluster, syncset));
    CREATE INDEX work_ready ON work (run_at, tenant, cluster, syncset) WHERE phase = 'ready';
    CREATE INDEX work_running ON work (lease_expires_at) WHERE phase = 'running';
    CREATE INDEX work_syncset ON work (tenant, syncset);
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, at INTEGER NOT NULL,
        tenant TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,
        action TEXT NOT NULL, generation INTEGER NOT NULL);
    "#,
    // 2: Secrets (kubeconfigs of clusters).
    r#"
    CREATE TABLE secrets (
        tenant TEXT NOT NULL, name TEXT NOT NULL, generation INTEGER NOT NULL, doc TEXT NOT NULL,
        PRIMARY KEY (tenant, name)) WITHOUT ROWID;
    "#,
    // 3: worker processes, and each key's shard (filled in by `backfill_shards`).
    r#"
    CREATE TABLE members (
        id TEXT PRIMARY KEY, started_at INTEGER NOT NULL, heartbeat_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL, in_flight INTEGER NOT NULL) WITHOUT ROWID;
    ALTER TABLE work ADD COLUMN shard INTEGER NOT NULL DEFAULT -1;
    CREATE INDEX work_shard_ready ON work (shard, run_at) WHERE phase = 'ready';
    "#,
    // 4: the event log's horizon (retention): every event with seq <= it was trimmed.
    // `events.seq` is AUTOINCREMENT, so a trimmed number is never handed out again,
    // even when a trim empties the table.
    r#"
    INSERT INTO meta (k, v) VALUES ('events_horizon', 0);
    "#,
    // 5: live state reported by agents: the latest version of each resource fleetsync
    // applied, its drift from the desired manifest, and how many versions were stored.
    r#"
    CREATE TABLE live_state (
        tenant TEXT NOT NULL, cluster TEXT NOT NULL, resource TEXT NOT NULL,
        syncset TEXT NOT NULL, resource_version TEXT NOT NULL, state TEXT NOT NULL,
        object TEXT, drift TEXT, versions INTEGER NOT NULL, updated_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, cluster, resource)) WITHOUT ROWID;
    CREATE INDEX live_state_drift ON live_state (tenant, cluster, syncset) WHERE drift IS NOT NULL;
    "#,
    // 6: durable cursors of named event consumers (the last event each acknowledged).
    r#"
    CREATE TABLE consumers (
        name TEXT PRIMARY KEY, acked_seq INTEGER NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID;
    "#,
    // 7: who made each change (the event's actor), and hub-issued tokens, kept as the
    // SHA-256 of the token: the token itself is never stored.
    r#"
    ALTER TABLE events ADD COLUMN actor TEXT;
    CREATE TABLE tokens (
        hash BLOB PRIMARY KEY, name TEXT NOT NULL UNIQUE, grant_ TEXT NOT NULL,
        created_at INTEGER NOT NULL, expires_at INTEGER, created_by TEXT NOT NULL) WITHOUT ROWID;
    "#,
    // 8: the keys counted by SyncSet and group (see `crate::summary`), kept by triggers
    // in the transaction that changes a key, so that a summary or a scrape reads a few
    // rows instead of every key; failed keys found by an index.
    r#"
    CREATE TABLE key_counts (
        tenant TEXT NOT NULL, syncset TEXT NOT NULL, phase TEXT NOT NULL,
        failed INTEGER NOT NULL, at_generation INTEGER NOT NULL, n INTEGER NOT NULL,
        PRIMARY KEY (tenant, syncset, phase, failed, at_generation)) WITHOUT ROWID;
    INSERT INTO key_counts
        SELECT tenant, syncset, phase, attempts > 0 AND last_error IS NOT NULL, observed_generation = generation, COUNT(*)
        FROM work GROUP BY 1, 2, 3, 4, 5;
    CREATE TRIGGER key_counts_insert AFTER INSERT ON work BEGIN
        INSERT INTO key_counts VALUES (NEW.tenant, NEW.syncset, NEW.phase,
            NEW.attempts > 0 AND NEW.last_error IS NOT NULL, NEW.observed_generation = NEW.generation, 1)
        ON CONFLICT (tenant, syncset, phase, failed, at_generation) DO UPDATE SET n = n + 1;
    END;
    CREATE TRIGGER key_counts_delete AFTER DELETE ON work BEGIN
        UPDATE key_counts SET n = n - 1 WHERE tenant = OLD.tenant AND syncset = OLD.syncset AND phase = OLD.phase
            AND failed = (OLD.attempts > 0 AND OLD.last_error IS NOT NULL) AND at_generation = (OLD.observed_generation = OLD.generation);
        DELETE FROM key_counts WHERE tenant = OLD.tenant AND syncset = OLD.syncset AND n = 0;
    END;
    CREATE TRIGGER key_counts_update AFTER UPDATE OF tenant, syncset, phase, attempts, last_error, generation, observed_generation ON work
    WHEN OLD.tenant IS NOT NEW.tenant OR OLD.syncset IS NOT NEW.syncset OR OLD.phase IS NOT NEW.phase
        OR (OLD.attempts > 0 AND OLD.last_error IS NOT NULL) IS NOT (NEW.attempts > 0 AND NEW.last_error IS NOT NULL)
        OR (OLD.observed_generation = OLD.generation) IS NOT (NEW.observed_generation = NEW.generation)
    BEGIN
        UPDATE key_counts SET n = n - 1 WHERE tenant = OLD.tenant AND syncset = OLD.syncset AND phase = OLD.phase
            AND failed = (OLD.attempts > 0 AND OLD.last_error IS NOT NULL) AND at_generation = (OLD.observed_generation = OLD.generation);
        INSERT INTO key_counts VALUES (NEW.tenant, NEW.syncset, NEW.phase,
            NEW.attempts > 0 AND NEW.last_error IS NOT NULL, NEW.observed_generation = NEW.generation, 1)
        ON CONFLICT (tenant, syncset, phase, failed, at_generation) DO UPDATE SET n = n + 1;
    END;
    CREATE INDEX work_failed ON work (tenant, syncset, cluster) WHERE last_error IS NOT NULL;
    "#,
    // 9: when the change a run applies was asked for (`crate::queue` `change_latency`).
    r#"
    ALTER TABLE work ADD COLUMN pending_since INTEGER;
    ALTER TABLE work ADD COLUMN running_since INTEGER;
    "#,
    // 10: an object's recent events without reading the log (`EventLog::events_of`).
    r#"
    CREATE INDEX events_by_object ON events (tenant, kind, name, seq);
    "#,
    // 11: each cluster's keys counted (all, failed or parked, applied and wanted), kept
    // by triggers in the transaction that changes a key, so that the fleet's clusters
    // are counted by condition from one row each (see `crate::summary::ClusterCounts`).
    r#"
    CREATE TABLE cluster_counts (
        tenant TEXT NOT NULL, cluster TEXT NOT NULL,
        n INTEGER NOT NULL, bad INTEGER NOT NULL, done INTEGER NOT NULL,
        PRIMARY KEY (tenant, cluster)) WITHOUT ROWID;
    INSERT INTO cluster_counts
        SELECT tenant, cluster, COUNT(*),
            SUM(phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL)),
            SUM(phase = 'idle' AND desired)
        FROM work GROUP BY 1, 2;
    CREATE TRIGGER cluster_counts_insert AFTER INSERT ON work BEGIN
        INSERT INTO cluster_counts VALUES (NEW.tenant, NEW.cluster, 1,
            NEW.phase = 'parked' OR (NEW.phase = 'ready' AND NEW.attempts > 0 AND NEW.last_error IS NOT NULL),
            NEW.phase = 'idle' AND NEW.desired)
        ON CONFLICT (tenant, cluster) DO UPDATE SET n = n + 1, bad = bad + excluded.bad, done = done + excluded.done;
    END;
    CREATE TRIGGER cluster_counts_delete AFTER DELETE ON work BEGIN
        UPDATE cluster_counts SET n = n - 1,
            bad = bad - (OLD.phase = 'parked' OR (OLD.phase = 'ready' AND OLD.attempts > 0 AND OLD.last_error IS NOT NULL)),
            done = done - (OLD.phase = 'idle' AND OLD.desired)
        WHERE tenant = OLD.tenant AND cluster = OLD.cluster;
        DELETE FROM cluster_counts WHERE tenant = OLD.tenant AND cluster = OLD.cluster AND n = 0;
    END;
    CREATE TRIGGER cluster_counts_update AFTER UPDATE OF tenant, cluster, phase, attempts, last_error, desired ON work
    WHEN OLD.tenant IS NOT NEW.tenant OR OLD.cluster IS NOT NEW.cluster
        OR (OLD.phase = 'parked' OR (OLD.phase = 'ready' AND OLD.attempts > 0 AND OLD.last_error IS NOT NULL))
            IS NOT (NEW.phase = 'parked' OR (NEW.phase = 'ready' AND NEW.attempts > 0 AND NEW.last_error IS NOT NULL))
        OR (OLD.phase = 'idle' AND OLD.desired) IS NOT (NEW.phase = 'idle' AND NEW.desired)
    BEGIN
        UPDATE cluster_counts SET n = n - 1,
            bad = bad - (OLD.phase = 'parked' OR (OLD.phase = 'ready' AND OLD.attempts > 0 AND OLD.last_error IS NOT NULL)),
            done = done - (OLD.phase = 'idle' AND OLD.desired)
        WHERE tenant = OLD.tenant AND cluster = OLD.cluster;
        INSERT INTO cluster_counts VALUES (NEW.tenant, NEW.cluster, 1,
            NEW.phase = 'parked' OR (NEW.phase = 'ready' AND NEW.attempts > 0 AND NEW.last_error IS NOT NULL),
            NEW.phase = 'idle' AND NEW.desired)
        ON CONFLICT (tenant, cluster) DO UPDATE SET n = n + 1, bad = bad + excluded.bad, done = done + excluded.done;
    END;
    "#,
    // 12: keys with an error in page order, so that a page of Failed or Parked keys reads
    // those keys only (`crate::page::phase_condition`).
    r#"
    CREATE INDEX work_errors_by_key ON work (tenant, cluster, syncset) WHERE last_error IS NOT NULL;
    "#,
    // 13: each cluster's signs of life, for stale clusters (`crate::summary::cluster_conditions_sql`):
    // `since`, when it got its first key; `seen`, its newest successful run or agent
    // report. Only a successful run moves `last_applied_at` forward. Keys written before
    // keep no creation time: their oldest change stands in for it.
    r#"
    ALTER TABLE cluster_counts ADD COLUMN since INTEGER;
    ALTER TABLE cluster_counts ADD COLUMN seen INTEGER;
    UPDATE cluster_counts SET since = w.since, seen = w.seen
    FROM (SELECT tenant, cluster, MIN(since) AS since, MAX(seen) AS seen FROM (
            SELECT tenant, cluster, updated_at AS since, last_applied_at AS seen FROM work
            UNION ALL SELECT tenant, cluster, NULL, updated_at FROM live_state) GROUP BY 1, 2) w
    WHERE w.tenant = cluster_counts.tenant AND w.cluster = cluster_counts.cluster;
    DROP TRIGGER cluster_counts_insert;
    DROP TRIGGER cluster_counts_update;
    CREATE TRIGGER cluster_counts_insert AFTER INSERT ON work BEGIN
        INSERT INTO cluster_counts VALUES (NEW.tenant, NEW.cluster, 1,
            NEW.phase = 'parked' OR (NEW.phase = 'ready' AND NEW.attempts > 0 AND NEW.last_error IS NOT NULL),
            NEW.phase = 'idle' AND NEW.desired, NEW.updated_at, NEW.last_applied_at)
        ON CONFLICT (tenant, cluster) DO UPDATE SET n = n + 1, bad = bad + excluded.bad, done = done + excluded.done,
            seen = COALESCE(MAX(seen, excluded.seen), seen, excluded.seen);
    END;
    CREATE TRIGGER cluster_counts_update AFTER UPDATE OF tenant, cluster, phase, attempts, last_error, desired, last_applied_at ON work
    WHEN OLD.tenant IS NOT NEW.tenant OR OLD.cluster IS NOT NEW.cluster
        OR (OLD.phase = 'parked' OR (OLD.phase = 'ready' AND OLD.attempts > 0 AND OLD.last_error IS NOT NULL))
            IS NOT (NEW.phase = 'parked' OR (NEW.phase = 'ready' AND NEW.attempts > 0 AND NEW.last_error IS NOT NULL))
        OR (OLD.phase = 'idle' AND OLD.desired) IS NOT (NEW.phase = 'idle' AND NEW.desired)
        OR NEW.last_applied_at > IFNULL(OLD.last_applied_at, -1)
    BEGIN
        UPDATE cluster_counts SET n = n - 1,
            bad = bad - (OLD.phase = 'parked' OR (OLD.phase = 'ready' AND OLD.attempts > 0 AND OLD.last_error IS NOT NULL)),
            done = done - (OLD.phase = 'idle' AND OLD.desired)
        WHERE tenant = OLD.tenant AND cluster = OLD.cluster;
        INSERT INTO cluster_counts VALUES (NEW.tenant, NEW.cluster, 1,
            NEW.phase = 'parked' OR (NEW.phase = 'ready' AND NEW.attempts > 0 AND NEW.last_error IS NOT NULL),
            NEW.phase = 'idle' AND NEW.desired, NEW.updated_at, NEW.last_applied_at)
        ON CONFLICT (tenant, cluster) DO UPDATE SET n = n + 1, bad = bad + excluded.bad, done = done + excluded.done,
            seen = COALESCE(MAX(seen, excluded.seen), seen, excluded.seen);
    END;
    "#,
    // 14: each member's limit beside its keys in flight (0: not told).
    r#"
    ALTER TABLE members ADD COLUMN max_in_flight INTEGER NOT NULL DEFAULT 0;
    "#,
    // 15: revisions of SyncSets (a head and content-addressed resources, each stored once
    // per tenant and counted by the revisions holding it), rollouts, and whether each
    // live object is ready.
    r#"
    CREATE TABLE revisions (
        tenant TEXT NOT NULL, syncset TEXT NOT NULL, generation INTEGER NOT NULL,
        apply_mode TEXT NOT NULL, head TEXT NOT NULL, parts TEXT NOT NULL,
        PRIMARY KEY (tenant, syncset, generation)) WITHOUT ROWID;
    CREATE TABLE revision_parts (
        tenant TEXT NOT NULL, hash TEXT NOT NULL, body TEXT NOT NULL, refs INTEGER NOT NULL,
        PRIMARY KEY (tenant, hash)) WITHOUT ROWID;
    CREATE TABLE rollouts (
        tenant TEXT NOT NULL, syncset TEXT NOT NULL, phase TEXT NOT NULL, step INTEGER NOT NULL,
        revision INTEGER NOT NULL, stable INTEGER NOT NULL, reason TEXT,
        step_started_at INTEGER NOT NULL, healthy_since INTEGER, promoted INTEGER NOT NULL,
        version INTEGER NOT NULL, updated_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, syncset)) WITHOUT ROWID;
    ALTER TABLE live_state ADD COLUMN unready TEXT;
    DROP INDEX live_state_drift;
    CREATE INDEX live_state_issues ON live_state (tenant, cluster, syncset) WHERE drift IS NOT NULL OR unready IS NOT NULL;
    "#,
    // 16: a token's name is unique in its tenant (the tenant of its grant; '' for a
    // hub-wide fleet-admin token), not in the whole store: the table is made again
    // without the UNIQUE on name (SQLite cannot drop a constraint).
    r#"
    CREATE TABLE tokens_by_tenant (
        hash BLOB PRIMARY KEY, tenant TEXT NOT NULL, name TEXT NOT NULL, grant_ TEXT NOT NULL,
        created_at INTEGER NOT NULL, expires_at INTEGER, created_by TEXT NOT NULL,
        UNIQUE (tenant, name)) WITHOUT ROWID;
    INSERT INTO tokens_by_tenant (hash, tenant, name, grant_, created_at, expires_at, created_by)
        SELECT hash, CASE WHEN instr(grant_, ':') > 0 THEN substr(grant_, 1, instr(grant_, ':') - 1) ELSE '' END,
            name, grant_, created_at, expires_at, created_by FROM tokens;
    DROP TABLE tokens;
    ALTER TABLE tokens_by_tenant RENAME TO tokens;
    "#,
    // 17: the event log by tenant: a tenant's page reads its own events only (the
    // index), and retention is kept per tenant, each with its own horizon. The row of
    // tenant '*' is the horizon every tenant had before (the whole log's).
    r#"
    CREATE INDEX events_by_tenant ON events (tenant, seq);
    CREATE TABLE events_tenant_horizon (tenant TEXT PRIMARY KEY, horizon INTEGER NOT NULL) WITHOUT ROWID;
    INSERT INTO events_tenant_horizon (tenant, horizon) SELECT '*', v FROM meta WHERE k = 'events_horizon';
    "#,
    // 18: artifacts of sources: each content once per tenant, and each revision as the
    // list of its files' paths and content digests.
    r#"
    CREATE TABLE contents (
        tenant TEXT NOT NULL, digest TEXT NOT NULL, content BLOB NOT NULL,
        PRIMARY KEY (tenant, digest)) WITHOUT ROWID;
    CREATE TABLE artifacts (
        tenant TEXT NOT NULL, source TEXT NOT NULL, revision TEXT NOT NULL, files TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, source, revision)) WITHOUT ROWID;
    "#,
    // 19: GitRepositories (their status in their document), and the source each
    // SyncSet reads its resources from.
    r#"
    CREATE TABLE git_repositories (
        tenant TEXT NOT NULL, name TEXT NOT NULL, generation INTEGER NOT NULL, doc TEXT NOT NULL,
        PRIMARY KEY (tenant, name)) WITHOUT ROWID;
    ALTER TABLE syncsets ADD COLUMN source TEXT;
    CREATE INDEX syncsets_source ON syncsets (tenant, source) WHERE source IS NOT NULL;
    "#,
    // 20: OCIRepositories, as GitRepositories.
    r#"
    CREATE TABLE oci_repositories (
        tenant TEXT NOT NULL, name TEXT NOT NULL, generation INTEGER NOT NULL, doc TEXT NOT NULL,
        PRIMARY KEY (tenant, name)) WITHOUT ROWID;
    "#,
    // 21: the hash of what a templated SyncSet's last good run applied, per key.
    r#"
    ALTER TABLE work ADD COLUMN rendered TEXT;
    "#,
    // 22: Notifiers, as GitRepositories (their cursors are consumers').
    r#"
    CREATE TABLE notifiers (
        tenant TEXT NOT NULL, name TEXT NOT NULL, generation INTEGER NOT NULL, doc TEXT NOT NULL,
        PRIMARY KEY (tenant, name)) WITHOUT ROWID;
    "#,
];

/// The version [`migrate`] brings a database to.
pub(super) fn latest() -> usize {
    MIGRATIONS.len()
}

/// Brings the schema up to date; returns the version it ends at.
pub fn migrate(conn: &mut Connection) -> rusqlite::Result<usize> {
    let current: usize = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(current) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", i + 1)?;
        tx.commit()?;
    }
    backfill_shards(conn)?;
    Ok(MIGRATIONS.len())
}

/// Gives keys written before shards existed their shard (computed in Rust: the hash
/// is `fleetsync_model::shard`'s, the same in every process).
fn backfill_shards(conn: &mut Connection) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    let clusters: Vec<(String, String)> = {
        let mut stmt = tx.prepare("SELECT DISTINCT tenant, cluster FROM work WHERE shard < 0")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (tenant, cluster) in clusters {
        let shard = fleetsync_model::shard::shard_of(&tenant, &cluster);
        tx.execute(
            "UPDATE work SET shard = ?1 WHERE tenant = ?2 AND cluster = ?3",
            rusqlite::params![shard, tenant, cluster],
        )?;
    }
    tx.commit()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::{EventLog, Tokens};
    use crate::StoreConfig;
    use fleetsync_model::{Grant, Timestamp, TokenRecord};

    /// A file of the schema before actors and tokens (version 6), with an event, is
    /// brought up to date when the store opens it: its event has no actor, and the
    /// store keeps tokens.
    #[tokio::test]
    async fn a_file_from_before_actors_and_tokens_is_upgraded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f.db");
        {
            let conn = Connection::open(&path).expect("open");
            for (i, sql) in MIGRATIONS.iter().enumerate().take(6) {
                conn.execute_batch(sql).expect("old migration");
                conn.pragma_update(None, "user_version", i + 1).expect("version");
            }
            let old_event = "INSERT INTO events (at, tenant, kind, name, action, generation) VALUES (1, 't', 'Cluster', 'c', 'Created', 1)";
            conn.execute(old_event, []).expect("an event of a build before actors");
        }
        let store = super::super::SqliteStore::open(&path, StoreConfig::default()).expect("open migrates");
        let events = store.events_read(0, 10).await.expect("events");
        assert_eq!(events.iter().map(|e| (e.name.as_str(), e.actor.as_deref())).collect::<Vec<_>>(), [("c", None)]);
        let record = TokenRecord {
            name: "ci".into(),
            grant: Grant::Fleet,
            created_at: Timestamp(1),
            expires_at: None,
            created_by: "cli".into(),
        };
        assert!(store.token_create(&record, &[7; 32]).await.expect("create"));
        assert_eq!(store.token_find(&[7; 32]).await.expect("find"), Some(record));
    }
}
