//! The PostgreSQL schema, versioned in `fleetsync_schema_migrations`. Migrations run in
//! one transaction under `pg_advisory_xact_lock`, so processes starting together apply
//! each exactly once and the others wait and then see it applied.
//!
//! Choices, for a queue that is updated all day by many processes (as of migration 9;
//! migration 11 adds an index of keys with an error, see below):
//!
//! - `work` indexes only columns that claims, renewals and completions never change:
//!   the key (unique, for upserts), `(tenant, syncset)`, and `id` (unique, for claims and
//!   completions, which find rows by id). So those updates are HOT: no new index
//!   entries, the new version on the same page, dead versions reclaimed by page pruning
//!   without VACUUM. Its pages are filled to a third (`fillfactor = 33`), which leaves a
//!   row room for a run's two versions. Autovacuum starts early on it (2% of rows dead).
//! - Which keys are claimable, and in what order, is the `due` table's business
//!   (`due.rs`): one narrow row per pending or leased key, at its `run_at`, in one index
//!   that is the claim order. (Until migration 9 `work` had partial indexes on `phase`,
//!   `run_at` and the lease's expiry: every claim and completion then wrote an entry into
//!   every index of `work`.)
//! - Claims scan `due` from a per-claimer cursor, not from the start, so dead entries
//!   vacuum could not remove yet are passed once, not on every claim (`cursor.rs`).
//! - Writes to `work` from sessions of builds before schema 9 are refused (a trigger;
//!   they would make keys ready without a row in `due`).
//! - Fencing tokens come from the `work_fence` SEQUENCE: strictly increasing store-wide,
//!   never rolled back, and no hot counter row to bloat.
//! - Times are epoch milliseconds (`bigint`) from the store's clock, like SQLite's, so
//!   a test clock works and no database clock is involved. JSON is kept as `text`: the
//!   canonical form is compared byte for byte (idempotent apply), which `jsonb` would
//!   normalise away.

use super::{Failure, PgResult};
use tokio_postgres::Client;

/// Each migration: (version description, SQL). Append only; never edit a released one.
const MIGRATIONS: &[(&str, &str)] = &[
    (
        "objects, the work queue (one row per key, carrying its status), the event log",
        r#"
    CREATE TABLE clusters (
        tenant text NOT NULL, name text NOT NULL, generation bigint NOT NULL,
        labels text NOT NULL, doc text NOT NULL,
        PRIMARY KEY (tenant, name));
    CREATE TABLE syncsets (
        tenant text NOT NULL, name text NOT NULL, generation bigint NOT NULL,
        apply_mode text NOT NULL, selector text NOT NULL, doc text NOT NULL,
        PRIMARY KEY (tenant, name));
    CREATE SEQUENCE work_fence AS bigint;
    CREATE TABLE work (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        tenant text NOT NULL, cluster text NOT NULL, syncset text NOT NULL,
        desired boolean NOT NULL, apply_mode text NOT NULL, generation bigint NOT NULL,
        want_seq bigint NOT NULL, claimed_seq bigint NOT NULL,
        phase text NOT NULL CHECK (phase IN ('idle', 'ready', 'running', 'parked')),
        run_at bigint NOT NULL,
        fence bigint NOT NULL, lease_owner text, lease_expires_at bigint,
        attempts integer NOT NULL, last_error text,
        observed_generation bigint NOT NULL,
        resources text NOT NULL DEFAULT '[]', inventory text NOT NULL DEFAULT '[]',
        updated_at bigint NOT NULL, last_applied_at bigint,
        UNIQUE (tenant, cluster, syncset))
        WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.05);
    CREATE INDEX work_ready ON work (run_at, tenant, cluster, syncset) WHERE phase = 'ready';
    CREATE INDEX work_running ON work (id) WHERE phase = 'running';
    CREATE INDEX work_syncset ON work (tenant, syncset);
    CREATE TABLE events (
        seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, at bigint NOT NULL,
        tenant text NOT NULL, kind text NOT NULL, name text NOT NULL,
        action text NOT NULL, generation bigint NOT NULL);
    "#,
    ),
    (
        "Secrets (kubeconfigs of clusters)",
        r#"
    CREATE TABLE secrets (
        tenant text NOT NULL, name text NOT NULL, generation bigint NOT NULL, doc text NOT NULL,
        PRIMARY KEY (tenant, name));
    "#,
    ),
    (
        "worker processes, and each key's shard",
        r#"
    CREATE TABLE members (
        id text PRIMARY KEY, started_at bigint NOT NULL, heartbeat_at bigint NOT NULL,
        expires_at bigint NOT NULL, in_flight bigint NOT NULL);
    ALTER TABLE work ADD COLUMN shard smallint NOT NULL DEFAULT -1;
    CREATE INDEX work_shard_ready ON work (shard, run_at) WHERE phase = 'ready';
    "#,
    ),
    (
        "the event log's horizon (retention)",
        r#"
    -- Every event with seq <= horizon was trimmed; raised in the transaction that deletes
    -- them. Recorded rather than inferred from min(seq): identity values have gaps (a
    -- rolled-back insert still uses its number), and a trim may empty the table.
    CREATE TABLE events_horizon (
        one boolean PRIMARY KEY DEFAULT true CHECK (one),
        horizon bigint NOT NULL);
    INSERT INTO events_horizon (horizon) VALUES (0);
    "#,
    ),
    (
        "live state reported by agents",
        r#"
    -- The latest version of each resource fleetsync applied, its drift from the desired
    -- manifest, and how many versions were stored (each once: deduplicated by version).
    CREATE TABLE live_state (
        tenant text NOT NULL, cluster text NOT NULL, resource text NOT NULL,
        syncset text NOT NULL, resource_version text NOT NULL, state text NOT NULL,
        object text, drift text, versions bigint NOT NULL, updated_at bigint NOT NULL,
        PRIMARY KEY (tenant, cluster, resource));
    CREATE INDEX live_state_drift ON live_state (tenant, cluster, syncset) WHERE drift IS NOT NULL;
    "#,
    ),
    (
        "durable cursors of named event consumers",
        r#"
    -- The last event each named consumer acknowledged; only ever raised.
    CREATE TABLE consumers (
        name text PRIMARY KEY, acked_seq bigint NOT NULL, updated_at bigint NOT NULL);
    "#,
    ),
    (
        "expired leases found by their expiry",
        r#"
    -- Claims look for expired leases from where they last looked (a cursor on
    -- lease_expires_at), which needs them in that order.
    CREATE INDEX work_expiry ON work (lease_expires_at) WHERE phase = 'running';
    DROP INDEX work_running;
    "#,
    ),
    (
        "no index on the work rows' surrogate id",
        r#"
    -- No claim or completion is a HOT update, so each writes an entry into every index
    -- of `work`, and into a unique one only after visiting the key's other versions.
    -- The key is the row's identity already (its unique index); the id's was one more.
    -- The column stays (unused since) so that processes of the build before this one,
    -- still running during an upgrade, keep working.
    ALTER TABLE work DROP CONSTRAINT work_pkey;
    "#,
    ),
    (
        "claimable keys found in the due table, so that every work update can be HOT",
        r#"
    -- Every pending or leased key, at its run_at: when it became claimable (see
    -- `due.rs`); idle and parked keys have no row. Its one index is the claim order.
    -- Byte order ("C") is Rust's order of the claim cursor's keys, and the cheapest to
    -- compare.
    CREATE TABLE due (
        due_at bigint NOT NULL,
        tenant text COLLATE "C" NOT NULL, cluster text COLLATE "C" NOT NULL, syncset text COLLATE "C" NOT NULL,
        id bigint NOT NULL, shard smallint NOT NULL,
        PRIMARY KEY (due_at, tenant, cluster, syncset));
    INSERT INTO due (due_at, tenant, cluster, syncset, id, shard)
        SELECT run_at, tenant, cluster, syncset, id, shard FROM work WHERE phase IN ('ready', 'running');
    -- `work` now indexes only columns no claim, completion or renewal changes, so those
    -- updates are HOT when the row's page has room for the new version. A run writes two
    -- (the claim, the completion; a completed row is wider, with its results): pages a
    -- third full leave a fresh row room for both. Claims and completions find rows
    -- through an index, which prunes a page's dead versions first.
    DROP INDEX work_ready;
    DROP INDEX work_shard_ready;
    DROP INDEX work_expiry;
    -- Claims find work rows by id. Unique, so the planner knows one id is one row even
    -- without statistics (else it would scan `work` for a list of ids).
    CREATE UNIQUE INDEX work_id ON work (id);
    ALTER TABLE work SET (fillfactor = 33);
    -- A process of an older build would make keys ready without a row in `due`, where no
    -- claim of this build looks: refuse its writes. Processes of this build and later
    -- say which schema they keep with the `fleetsync.schema_version` setting.
    CREATE FUNCTION refuse_writers_without_due() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
        RAISE EXCEPTION 'a process of a fleetsync build older than schema version 9 tried to change table %.work',
            TG_TABLE_SCHEMA
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'stop the processes of older builds and run this build (it keeps the table due in step)';
    END $fn$;
    CREATE TRIGGER work_writers_keep_due BEFORE INSERT OR UPDATE OR DELETE ON work FOR EACH STATEMENT
        WHEN (COALESCE(NULLIF(current_setting('fleetsync.schema_version', true), ''), '0')::int < 9)
        EXECUTE FUNCTION refuse_writers_without_due();
    "#,
    ),
    (
        "who made each change, and hub-issued tokens (kept as their SHA-256)",
        r#"
    ALTER TABLE events ADD COLUMN actor text;
    CREATE TABLE tokens (
        hash bytea PRIMARY KEY, name text NOT NULL UNIQUE, grant_ text NOT NULL,
        created_at bigint NOT NULL, expires_at bigint, created_by text NOT NULL);
    "#,
    ),
    (
        "the keys counted by SyncSet and group, and failed keys found by an index",
        r#"
    -- See `counts.rs`. Every statement that writes `work` records how it moved keys
    -- between groups as rows of `key_count_deltas` (insert only: no row two writers
    -- update, so no lock they wait for), in its transaction; heartbeats fold the
    -- deltas into `key_counts`. A count is `key_counts` plus its deltas.
    CREATE TABLE key_counts (
        tenant text NOT NULL, syncset text NOT NULL, phase text NOT NULL,
        failed boolean NOT NULL, at_generation boolean NOT NULL, n bigint NOT NULL,
        PRIMARY KEY (tenant, syncset, phase, failed, at_generation));
    CREATE TABLE key_count_deltas (
        tenant text NOT NULL, syncset text NOT NULL, phase text NOT NULL,
        failed boolean NOT NULL, at_generation boolean NOT NULL, n bigint NOT NULL);
    CREATE INDEX key_count_deltas_syncset ON key_count_deltas (tenant, syncset);
    CREATE FUNCTION key_counts_moved() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO key_count_deltas
                SELECT tenant, syncset, phase, attempts > 0 AND last_error IS NOT NULL, observed_generation = generation, COUNT(*)
                FROM new_rows GROUP BY 1, 2, 3, 4, 5;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO key_count_deltas
                SELECT tenant, syncset, phase, attempts > 0 AND last_error IS NOT NULL, observed_generation = generation, -COUNT(*)
                FROM old_rows GROUP BY 1, 2, 3, 4, 5;
        ELSE
            INSERT INTO key_count_deltas
                SELECT tenant, syncset, phase, failed, at_generation, SUM(n) FROM (
                    SELECT tenant, syncset, phase, attempts > 0 AND last_error IS NOT NULL AS failed,
                        observed_generation = generation AS at_generation, -1 AS n FROM old_rows
                    UNION ALL
                    SELECT tenant, syncset, phase, attempts > 0 AND last_error IS NOT NULL,
                        observed_generation = generation, 1 FROM new_rows) moved
                GROUP BY 1, 2, 3, 4, 5 HAVING SUM(n) <> 0;
        END IF;
        RETURN NULL;
    END $fn$;
    CREATE TRIGGER key_counts_insert AFTER INSERT ON work REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION key_counts_moved();
    CREATE TRIGGER key_counts_update AFTER UPDATE ON work REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION key_counts_moved();
    CREATE TRIGGER key_counts_delete AFTER DELETE ON work REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION key_counts_moved();
    -- After the triggers: their lock keeps writers out until this transaction commits,
    -- so no change falls between the count and the triggers.
    INSERT INTO key_counts
        SELECT tenant, syncset, phase, attempts > 0 AND last_error IS NOT NULL, observed_generation = generation, COUNT(*)
        FROM work GROUP BY 1, 2, 3, 4, 5;
    -- A summary's first failures. Only updates that set or clear an error stop being
    -- HOT for it (claims, renewals and clean completions change no indexed column).
    CREATE INDEX work_failed ON work (tenant, syncset, cluster) WHERE last_error IS NOT NULL;
    "#,
    ),
    (
        "when the change a run applies was asked for",
        r#"
    -- See `crate::queue`'s change latency. Nullable, with no default: adding them
    -- rewrites no row.
    ALTER TABLE work ADD COLUMN pending_since bigint, ADD COLUMN running_since bigint;
    "#,
    ),
    (
        "an object's recent events without reading the log",
        r#"
    CREATE INDEX events_by_object ON events (tenant, kind, name, seq);
    "#,
    ),
    (
        "each cluster's keys counted (all, failed or parked, applied and wanted)",
        r#"
    -- See `counts.rs`: as `key_counts`, per cluster, with insert-only deltas that
    -- heartbeats fold. A cluster's counts are its `cluster_counts` row plus its deltas.
    CREATE TABLE cluster_counts (
        tenant text NOT NULL, cluster text NOT NULL, n bigint NOT NULL, bad bigint NOT NULL, done bigint NOT NULL,
        PRIMARY KEY (tenant, cluster));
    CREATE TABLE cluster_count_deltas (
        tenant text NOT NULL, cluster text NOT NULL, n bigint NOT NULL, bad bigint NOT NULL, done bigint NOT NULL);
    CREATE INDEX cluster_count_deltas_cluster ON cluster_count_deltas (tenant, cluster);
    CREATE FUNCTION cluster_counts_moved() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO cluster_count_deltas
                SELECT tenant, cluster, COUNT(*),
                    COUNT(*) FILTER (WHERE phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL)),
                    COUNT(*) FILTER (WHERE phase = 'idle' AND desired)
                FROM new_rows GROUP BY 1, 2;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO cluster_count_deltas
                SELECT tenant, cluster, -COUNT(*),
                    -COUNT(*) FILTER (WHERE phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL)),
                    -COUNT(*) FILTER (WHERE phase = 'idle' AND desired)
                FROM old_rows GROUP BY 1, 2;
        ELSE
            INSERT INTO cluster_count_deltas
                SELECT tenant, cluster, SUM(n), SUM(bad), SUM(done) FROM (
                    SELECT tenant, cluster, -1 AS n,
                        -(phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL))::int AS bad,
                        -(phase = 'idle' AND desired)::int AS done FROM old_rows
                    UNION ALL
                    SELECT tenant, cluster, 1,
                        (phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL))::int,
                        (phase = 'idle' AND desired)::int FROM new_rows) moved
                GROUP BY 1, 2 HAVING SUM(n) <> 0 OR SUM(bad) <> 0 OR SUM(done) <> 0;
        END IF;
        RETURN NULL;
    END $fn$;
    CREATE TRIGGER cluster_counts_insert AFTER INSERT ON work REFERENCING NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION cluster_counts_moved();
    CREATE TRIGGER cluster_counts_update AFTER UPDATE ON work REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
        FOR EACH STATEMENT EXECUTE FUNCTION cluster_counts_moved();
    CREATE TRIGGER cluster_counts_delete AFTER DELETE ON work REFERENCING OLD TABLE AS old_rows
        FOR EACH STATEMENT EXECUTE FUNCTION cluster_counts_moved();
    -- After the triggers, as for `key_counts`.
    INSERT INTO cluster_counts
        SELECT tenant, cluster, COUNT(*),
            COUNT(*) FILTER (WHERE phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL)),
            COUNT(*) FILTER (WHERE phase = 'idle' AND desired)
        FROM work GROUP BY 1, 2;
    "#,
    ),
    (
        "keys with an error in page order",
        r#"
    -- A page of Failed or Parked keys reads these only (`crate::page::phase_condition`).
    -- Like `work_failed`, only updates that set or clear an error write it.
    CREATE INDEX work_errors_by_key ON work (tenant, cluster, syncset) WHERE last_error IS NOT NULL;
    "#,
    ),
    (
        "each cluster's signs of life",
        r#"
    -- For stale clusters (`crate::summary::cluster_conditions_sql`): `since`, when the
    -- cluster got its first key (the least of its rows'); `seen`, its newest successful
    -- run or agent report (the greatest). Only a successful run moves `last_applied_at`
    -- forward, and an update's delta carries `seen` only when it does.
    ALTER TABLE cluster_counts ADD COLUMN since bigint, ADD COLUMN seen bigint;
    ALTER TABLE cluster_count_deltas ADD COLUMN since bigint, ADD COLUMN seen bigint;
    CREATE OR REPLACE FUNCTION cluster_counts_moved() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $fn$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO cluster_count_deltas (tenant, cluster, n, bad, done, since, seen)
                SELECT tenant, cluster, COUNT(*),
                    COUNT(*) FILTER (WHERE phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL)),
                    COUNT(*) FILTER (WHERE phase = 'idle' AND desired),
                    MIN(updated_at), MAX(last_applied_at)
                FROM new_rows GROUP BY 1, 2;
        ELSIF TG_OP = 'DELETE' THEN
            INSERT INTO cluster_count_deltas (tenant, cluster, n, bad, done)
                SELECT tenant, cluster, -COUNT(*),
                    -COUNT(*) FILTER (WHERE phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL)),
                    -COUNT(*) FILTER (WHERE phase = 'idle' AND desired)
                FROM old_rows GROUP BY 1, 2;
        ELSE
            INSERT INTO cluster_count_deltas (tenant, cluster, n, bad, done, seen)
                SELECT tenant, cluster, SUM(n), SUM(bad), SUM(done), MAX(applied) FILTER (WHERE n > 0) FROM (
                    SELECT tenant, cluster, -1 AS n,
                        -(phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL))::int AS bad,
                        -(phase = 'idle' AND desired)::int AS done, last_applied_at AS applied FROM old_rows
                    UNION ALL
                    SELECT tenant, cluster, 1,
                        (phase = 'parked' OR (phase = 'ready' AND attempts > 0 AND last_error IS NOT NULL))::int,
                        (phase = 'idle' AND desired)::int, last_applied_at FROM new_rows) moved
                GROUP BY 1, 2
                HAVING SUM(n) <> 0 OR SUM(bad) <> 0 OR SUM(done) <> 0
                    OR MAX(applied) FILTER (WHERE n > 0) > COALESCE(MAX(applied) FILTER (WHERE n < 0), -1);
        END IF;
        RETURN NULL;
    END $fn$;
    -- The ALTERs lock the deltas, so writers of keys wait until this commits: no change
    -- falls between the new function and the counts it starts from. Deltas not folded
    -- yet get them too (a least and a greatest are not moved by a repeat). Keys written
    -- before keep no creation time: their oldest change stands in for it.
    -- One statement, so every key is read once for both tables.
    WITH signs AS (
        SELECT tenant, cluster, MIN(since) AS since, MAX(seen) AS seen FROM (
            SELECT tenant, cluster, updated_at AS since, last_applied_at AS seen FROM work
            UNION ALL SELECT tenant, cluster, NULL, updated_at FROM live_state) s
        GROUP BY 1, 2),
    counted AS (
        UPDATE cluster_counts c SET since = w.since, seen = w.seen FROM signs w
        WHERE w.tenant = c.tenant AND w.cluster = c.cluster)
    UPDATE cluster_count_deltas c SET since = w.since, seen = w.seen FROM signs w
    WHERE w.tenant = c.tenant AND w.cluster = c.cluster;
    "#,
    ),
    (
        "each member's limit beside its keys in flight",
        r#"
    -- 0: not told (a process of an older version).
    ALTER TABLE members ADD COLUMN max_in_flight bigint NOT NULL DEFAULT 0;
    "#,
    ),
    (
        "revisions of SyncSets and rollouts",
        r#"
    -- See `crate::revision`: each kept generation of a SyncSet as its head (the document
    -- without its resources) and the content addresses of its resources, each resource
    -- stored once per tenant and counted by the revisions holding it (`refs`); and each
    -- SyncSet's rollout (`crate::rollout`), written by compare-and-set on `version`.
    CREATE TABLE revisions (
        tenant text NOT NULL, syncset text NOT NULL, generation bigint NOT NULL,
        apply_mode text NOT NULL, head text NOT NULL, parts text NOT NULL,
        PRIMARY KEY (tenant, syncset, generation));
    CREATE TABLE revision_parts (
        tenant text NOT NULL, hash text NOT NULL, body text NOT NULL, refs bigint NOT NULL,
        PRIMARY KEY (tenant, hash));
    CREATE TABLE rollouts (
        tenant text NOT NULL, syncset text NOT NULL, phase text NOT NULL, step bigint NOT NULL,
        revision bigint NOT NULL, stable bigint NOT NULL, reason text,
        step_started_at bigint NOT NULL, healthy_since bigint, promoted boolean NOT NULL,
        version bigint NOT NULL, updated_at bigint NOT NULL,
        PRIMARY KEY (tenant, syncset));
    -- Why a live object is not ready yet (`fleetsync_model::readiness`); NULL: ready.
    ALTER TABLE live_state ADD COLUMN unready text;
    DROP INDEX live_state_drift;
    CREATE INDEX live_state_issues ON live_state (tenant, cluster, syncset) WHERE drift IS NOT NULL OR unready IS NOT NULL;
    "#,
    ),
    (
        "a token's name is unique in its tenant, not in the whole store",
        r#"
    -- The tenant of a token's grant; '' for a hub-wide (fleet-admin) token. No default:
    -- a process of an older build, which writes no tenant, cannot issue tokens here.
    ALTER TABLE tokens ADD COLUMN tenant text;
    UPDATE tokens SET tenant = CASE WHEN strpos(grant_, ':') > 0 THEN split_part(grant_, ':', 1) ELSE '' END;
    ALTER TABLE tokens ALTER COLUMN tenant SET NOT NULL;
    ALTER TABLE tokens DROP CONSTRAINT tokens_name_key;
    ALTER TABLE tokens ADD CONSTRAINT tokens_tenant_name_key UNIQUE (tenant, name);
    "#,
    ),
    (
        "the event log by tenant: pages and retention per tenant",
        r#"
    -- A tenant's page reads its own events only; retention is kept per tenant, each with
    -- its own horizon. Tenant '*' holds the horizon every tenant had before.
    CREATE INDEX events_by_tenant ON events (tenant, seq);
    CREATE TABLE events_tenant_horizon (tenant text PRIMARY KEY, horizon bigint NOT NULL);
    INSERT INTO events_tenant_horizon (tenant, horizon) SELECT '*', horizon FROM events_horizon;
    "#,
    ),
    (
        "artifacts of sources",
        r#"
    -- Each content once per tenant, and each revision as the list of its files' paths
    -- and content digests.
    CREATE TABLE contents (
        tenant text NOT NULL, digest text NOT NULL, content bytea NOT NULL,
        PRIMARY KEY (tenant, digest));
    CREATE TABLE artifacts (
        tenant text NOT NULL, source text NOT NULL, revision text NOT NULL, files text NOT NULL,
        created_at bigint NOT NULL,
        PRIMARY KEY (tenant, source, revision));
    "#,
    ),
    (
        "GitRepositories, and the source each SyncSet reads",
        r#"
    -- A GitRepository's status (the revision its SyncSets read) is in its document.
    CREATE TABLE git_repositories (
        tenant text NOT NULL, name text NOT NULL, generation bigint NOT NULL, doc text NOT NULL,
        PRIMARY KEY (tenant, name));
    ALTER TABLE syncsets ADD COLUMN source text;
    CREATE INDEX syncsets_source ON syncsets (tenant, source) WHERE source IS NOT NULL;
    "#,
    ),
    (
        "OCIRepositories",
        r#"
    CREATE TABLE oci_repositories (
        tenant text NOT NULL, name text NOT NULL, generation bigint NOT NULL, doc text NOT NULL,
        PRIMARY KEY (tenant, name));
    "#,
    ),
    (
        "the hash of what a templated SyncSet's last good run applied, per key",
        r#"
    ALTER TABLE work ADD COLUMN rendered text;
    "#,
    ),
    (
        "Notifiers, as GitRepositories (their cursors are consumers')",
        r#"
    CREATE TABLE notifiers (
        tenant text NOT NULL, name text NOT NULL, generation bigint NOT NULL, doc text NOT NULL,
        PRIMARY KEY (tenant, name));
    "#,
    ),
];

/// The schema version this build expects.
pub(super) fn latest() -> i32 {
    i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX)
}

/// Creates `schema` if it is given and missing, then applies the migrations it lacks;
/// returns the version it ends at.
pub(super) async fn migrate(client: &mut Client, schema: &str, create_schema: bool) -> PgResult<i32> {
    migrate_to(client, schema, create_schema, latest()).await
}

/// [`migrate`], but only up to version `target` (tests start old schemas with it).
pub(super) async fn migrate_to(client: &mut Client, schema: &str, create_schema: bool, target: i32) -> PgResult<i32> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&format!("fleetsync migrate {schema}")])
        .await?;
    if create_schema {
        // The name was checked to be a plain identifier (conninfo::check_schema_name).
        tx.batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}; SET LOCAL search_path = {schema}")).await?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS fleetsync_schema_migrations (
             version integer PRIMARY KEY, description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .await?;
    let current: i32 =
        tx.query_one("SELECT COALESCE(max(version), 0) FROM fleetsync_schema_migrations", &[]).await?.try_get(0)?;
    let todo =
        (1i32..).zip(MIGRATIONS.iter()).skip(usize::try_from(current).unwrap_or(0)).take_while(|(v, _)| *v <= target);
    for (version, (description, sql)) in todo {
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO fleetsync_schema_migrations (version, description) VALUES ($1, $2)",
            &[&version, description],
        )
        .await?;
        tracing::info!(schema, version, description, "applied a schema migration");
    }
    if target >= SHARDS_SINCE {
        backfill_shards(&tx, target >= DUE_SINCE).await?;
    }
    tx.commit().await.map_err(Failure::Commit)?;
    Ok(current.max(target))
}

/// The migration that gave keys a shard, and the one that made `due`.
const SHARDS_SINCE: i32 = 3;
const DUE_SINCE: i32 = 9;

/// Gives keys written before shards existed their shard (computed in Rust: the hash
/// is `fleetsync_model::shard`'s, the same in every process), in `work` and, once it
/// exists, in `due` (migration 9 copied the shards `work` had then).
async fn backfill_shards(tx: &tokio_postgres::Transaction<'_>, due: bool) -> PgResult<()> {
    for row in tx.query("SELECT DISTINCT tenant, cluster FROM work WHERE shard < 0", &[]).await? {
        let (tenant, cluster): (String, String) = (row.try_get(0)?, row.try_get(1)?);
        let shard = fleetsync_model::shard::shard_of(&tenant, &cluster) as i16;
        tx.execute("UPDATE work SET shard = $1 WHERE tenant = $2 AND cluster = $3", &[&shard, &tenant, &cluster])
            .await?;
        if due {
            tx.execute("UPDATE due SET shard = $1 WHERE tenant = $2 AND cluster = $3", &[&shard, &tenant, &cluster])
                .await?;
        }
    }
    Ok(())
}

/// The schema's version, without changing anything (0 if fleetsync never migrated it).
pub(super) async fn version(client: &Client) -> PgResult<i32> {
    let exists: bool =
        client.query_one("SELECT to_regclass('fleetsync_schema_migrations') IS NOT NULL", &[]).await?.try_get(0)?;
    if !exists {
        return Ok(0);
    }
    Ok(client.query_one("SELECT COALESCE(max(version), 0) FROM fleetsync_schema_migrations", &[]).await?.try_get(0)?)
}
