use super::testing::{test_database_url, ScratchSchema};
use super::{claim, complete, conninfo, schema, PgStore};
use crate::roles::{Objects, WorkQueue};
use crate::{ClaimParams, CompleteOutcome, RenewParams, StoreConfig};
use fleetsync_model::WorkKey;
use std::time::Duration;

/// A fresh schema per test, dropped afterwards (best effort).
struct Harness {
    schema: ScratchSchema,
}

impl Harness {
    async fn new() -> Self {
        let schema = ScratchSchema::new();
        let (client, conn) = tokio_postgres::connect(&test_database_url(), tokio_postgres::NoTls)
            .await
            .expect("connect to the test database");
        tokio::spawn(conn);
        client.batch_execute(&format!("CREATE SCHEMA {}", schema.name)).await.expect("create schema");
        Harness { schema }
    }
}

async fn harness() -> Harness {
    Harness::new().await
}

/// An admin connection to the test database, with `schema` first on its path, that
/// writes as a process of this build (see `due.rs`).
async fn admin(schema: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&test_database_url(), tokio_postgres::NoTls)
        .await
        .expect("connect to the test database");
    tokio::spawn(conn);
    let setup = format!("SET search_path = {schema}; SET fleetsync.schema_version = {}", schema::latest());
    client.batch_execute(&setup).await.expect("search_path");
    client
}

/// Claims remember each lease's row id (the id the key's row really has); renewals
/// keep it, completions and releases forget it again.
#[tokio::test]
async fn leases_remember_their_rows() {
    use crate::conformance::{applied_completion, cluster, syncset};
    let h = harness().await;
    let store =
        PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("connect");
    let admin = admin(&h.schema.name).await;
    let docs = vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1"), syncset("s2", 1, "v1")];
    store.objects_apply(docs).await.expect("apply");
    let ttl = Duration::from_secs(30);
    let items = store.work_claim(ClaimParams::new("w", 10, ttl)).await.expect("claim");
    assert_eq!(items.len(), 2);
    let id = |key: &WorkKey| {
        let sql = "SELECT id FROM work WHERE tenant = $1 AND cluster = $2 AND syncset = $3";
        let (admin, key) = (&admin, key.clone());
        async move { admin.query_one(sql, &[&key.tenant, &key.cluster, &key.syncset]).await.expect("id").get::<_, i64>(0) }
    };
    let locations = &store.inner.locations;
    for item in &items {
        assert_eq!(locations.get(&item.key, item.fence), Some(id(&item.key).await), "claimed {}", item.key);
    }

    let (first, second) = (&items[0], &items[1]);
    let lost = store.lease_renew(RenewParams { leases: vec![(first.key.clone(), first.fence)], lease_ttl: ttl }).await;
    assert!(lost.expect("renew").is_empty());
    assert_eq!(locations.get(&first.key, first.fence), Some(id(&first.key).await), "renewed: still remembered");

    let out = store.work_complete(vec![applied_completion(first)]).await.expect("complete");
    assert_eq!(out, [CompleteOutcome::Committed(fleetsync_model::Phase::Applied)]);
    assert_eq!(locations.get(&first.key, first.fence), None, "completed: forgotten");
    store.work_release(&second.key, second.fence).await.expect("release");
    assert_eq!(locations.len(), 0, "released: forgotten");
}

/// A session set up as the store's are, on `h`'s migrated schema, with 20,000 keys of
/// 400 clusters in `work` (their rows in `due` too, when `phase` is `ready`), and the
/// generic plans a prepared statement switches to after five runs.
async fn filled(h: &Harness, phase: &str) -> tokio_postgres::Client {
    let _store = PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default())
        .await
        .expect("connect (migrates)");
    let info = conninfo::config(&test_database_url(), Some(&h.schema.name)).expect("settings");
    let (session, conn) = info.pg.connect(tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    let fill = format!(
        "INSERT INTO work (tenant, cluster, syncset, desired, apply_mode, generation, want_seq, claimed_seq, phase,
                           run_at, fence, attempts, observed_generation, updated_at, shard)
         SELECT 't', 'c' || (i / 50), 's' || (i % 50), true, 'Upsert', 1, 1, 0, '{phase}', 0, i, 0, 0, 0, (i / 50) % 256
         FROM generate_series(1, 20000) i;
         INSERT INTO due SELECT run_at, tenant, cluster, syncset, id, shard FROM work WHERE phase = 'ready';
         SET plan_cache_mode = force_generic_plan"
    );
    session.batch_execute(&fill).await.expect("fill");
    session
}

/// The completion's lock goes through the unique index on `id`, also in the generic
/// plan a prepared statement switches to after five runs: an index fetch prunes the
/// page, which leaves room for the completion's HOT update (a TID fetch does not).
#[tokio::test]
async fn the_completions_lock_goes_through_the_id_index() {
    let h = harness().await;
    let admin = filled(&h, "running").await;
    admin.batch_execute(&format!("PREPARE locked(bigint[]) AS {}", *complete::LOCK_BY_ID)).await.expect("prepare");
    let plan: Vec<String> = admin
        .query("EXPLAIN EXECUTE locked('{1,2,3}')", &[])
        .await
        .expect("explain")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let plan = plan.join("\n");
    assert!(plan.contains("Index Scan using work_id on work"), "{plan}");
}

/// The claim's generic plan (what a prepared statement switches to after five runs)
/// reads the window through `due`'s index in order and `work` by id: never a scan of
/// either table, nor a bitmap scan that reads every due key and sorts them, whether
/// the tables have statistics or not (right after a fleet-sized apply they may not).
#[tokio::test]
async fn the_claim_reads_only_its_window() {
    let h = harness().await;
    let admin = filled(&h, "ready").await;
    let types = "bigint, bigint, text, bigint, bigint, smallint[], bigint, text, text, text";
    admin.batch_execute(&format!("PREPARE plain({types}) AS {}", *claim::CLAIM)).await.expect("prepare");
    admin
        .batch_execute(&format!(
            "PREPARE limited({types}, bigint, text[], text[], bigint[]) AS {}",
            *claim::CLAIM_LIMITED
        ))
        .await
        .expect("prepare");
    let args = "1000, 512, 'w', 99999, 512, NULL, -9223372036854775808, '', '', ''";
    for stats in ["without statistics", "with statistics"] {
        if stats == "with statistics" {
            admin.batch_execute("ANALYZE work, due").await.expect("analyze");
        }
        for run in [format!("plain({args})"), format!("limited({args}, 256, '{{}}', '{{}}', '{{}}')")] {
            let explain = format!("EXPLAIN EXECUTE {run}");
            let plan: Vec<String> =
                admin.query(&explain, &[]).await.expect("explain").iter().map(|r| r.get(0)).collect();
            let plan = plan.join("\n");
            for bad in ["Seq Scan on work", "Seq Scan on due", "Bitmap"] {
                assert!(!plan.contains(bad), "{stats}, {run}: {bad} in\n{plan}");
            }
            assert!(plan.contains("Index Scan using due_pkey on due"), "{stats}, {run}:\n{plan}");
        }
    }
}

/// A schema from before shards (version 2) with ready and running keys, migrated to
/// this build's: every such key gets its row in `due`, at its `run_at`, with the
/// shard the backfill gives it (not the -1 of the rows written before shards), and a
/// claim of its shard takes it.
#[tokio::test]
async fn an_old_schema_migrates_with_its_pending_keys_claimable() {
    use fleetsync_model::shard::shard_of;
    let h = harness().await;
    let info = conninfo::config(&test_database_url(), Some(&h.schema.name)).expect("settings");
    let (mut old, conn) = info.pg.connect(tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    schema::migrate_to(&mut old, &h.schema.name, true, 2).await.map_err(|e| e.message()).expect("migrate to 2");
    old.batch_execute(
        "INSERT INTO clusters VALUES ('t', 'c1', 1, '{}', '{}');
         INSERT INTO work (tenant, cluster, syncset, desired, apply_mode, generation, want_seq, claimed_seq, phase,
                           run_at, fence, lease_owner, lease_expires_at, attempts, observed_generation, updated_at)
         VALUES ('t', 'c1', 'ready', true, 'Upsert', 1, 1, 0, 'ready', 5, 0, NULL, NULL, 0, 0, 0),
                ('t', 'c1', 'running', true, 'Upsert', 1, 1, 1, 'running', 7, 3, 'gone', 9, 1, 0, 0),
                ('t', 'c1', 'idle', true, 'Upsert', 1, 1, 1, 'idle', 8, 2, NULL, NULL, 0, 1, 0)",
    )
    .await
    .expect("rows of a build before shards");
    schema::migrate(&mut old, &h.schema.name, true).await.map_err(|e| e.message()).expect("migrate to the latest");
    let shard = shard_of("t", "c1") as i16;
    let due: Vec<(i64, String, i16)> = old
        .query("SELECT due_at, syncset, shard FROM due ORDER BY due_at", &[])
        .await
        .expect("due")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(due, [(5, "ready".to_string(), shard), (7, "running".to_string(), shard)]);

    let store =
        PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("open it");
    let claim = ClaimParams { shards: Some(vec![shard as u16]), ..ClaimParams::new("w", 10, Duration::from_secs(30)) };
    let got: Vec<String> = store.work_claim(claim).await.expect("claim").into_iter().map(|i| i.key.syncset).collect();
    assert_eq!(got, ["ready", "running"], "the ready key, and the lease that expired long ago");
}

/// The write runners run a call again only while it fails in a way that may pass: a
/// serialization failure or a deadlock up to the attempts allowed, then it fails as
/// transient; a syntax error, an integrity violation or an internal error once, and it
/// fails as permanent. The same for a transaction and for a one-statement write.
#[tokio::test]
async fn a_write_is_run_again_only_after_a_transient_failure() {
    use crate::retry::WRITE_ATTEMPTS;
    use std::sync::atomic::{AtomicU32, Ordering};
    let h = harness().await;
    let store =
        PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("connect");
    let raising = |code: &str| format!("DO $$ BEGIN RAISE EXCEPTION 'testing' USING ERRCODE = '{code}'; END $$");
    let cases = [
        (raising("40001"), WRITE_ATTEMPTS, true),
        (raising("40P01"), WRITE_ATTEMPTS, true),
        ("SELEC 1".to_string(), 1, false),
        (raising("23505"), 1, false),
        (raising("XX000"), 1, false),
    ];
    for (sql, attempts, transient) in cases {
        let tries = AtomicU32::new(0);
        let err = store
            .write("testing", |tx| {
                tries.fetch_add(1, Ordering::Relaxed);
                let sql = sql.clone();
                Box::pin(async move { Ok(tx.tx.batch_execute(&sql).await?) })
            })
            .await
            .expect_err(&sql);
        assert_eq!(
            (tries.load(Ordering::Relaxed), err.is_transient()),
            (attempts, transient),
            "in a transaction: {sql}: {err}"
        );
        assert!(err.to_string().starts_with("store backend error while testing: ERROR: "), "{err}");

        let tries = AtomicU32::new(0);
        let err = store
            .write_statement("testing", |c, _| {
                tries.fetch_add(1, Ordering::Relaxed);
                let sql = sql.clone();
                Box::pin(async move { Ok(c.batch_execute(&sql).await?) })
            })
            .await
            .expect_err(&sql);
        assert_eq!(
            (tries.load(Ordering::Relaxed), err.is_transient()),
            (attempts, transient),
            "one statement: {sql}: {err}"
        );
    }
}

/// A schema from before actors and tokens (version 9) with an event is migrated: the
/// event has no actor, and the store keeps tokens and names the actors of new changes.
#[tokio::test]
async fn a_schema_from_before_actors_and_tokens_is_upgraded() {
    use crate::roles::{EventLog, Tokens};
    let h = harness().await;
    let info = conninfo::config(&test_database_url(), Some(&h.schema.name)).expect("settings");
    let (mut old, conn) = info.pg.connect(tokio_postgres::NoTls).await.expect("connect");
    tokio::spawn(conn);
    schema::migrate_to(&mut old, &h.schema.name, true, 9).await.map_err(|e| e.message()).expect("migrate to 9");
    old.batch_execute(
        "INSERT INTO events (at, tenant, kind, name, action, generation) VALUES (1, 't', 'Cluster', 'c', 'Created', 1)",
    )
    .await
    .expect("an event of a build before actors");
    let store = PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default())
        .await
        .expect("connect (migrates)");
    store.objects_apply_by(vec![crate::conformance::cluster("c1", &[])], Some("alice")).await.expect("apply");
    let actors: Vec<_> = store.events_read(0, 10).await.expect("events").into_iter().map(|e| e.actor).collect();
    assert_eq!(actors, [None, Some("alice".to_string())]);
    let record = fleetsync_model::TokenRecord {
        name: "ci".into(),
        grant: fleetsync_model::Grant::Fleet,
        created_at: fleetsync_model::Timestamp(1),
        expires_at: None,
        created_by: "cli".into(),
    };
    assert!(store.token_create(&record, &[7; 32]).await.expect("create"));
    assert_eq!(store.token_find(&[7; 32]).await.expect("find"), Some(record));
}

/// The schema holds no hub-issued token, only its SHA-256: every row of every table,
/// as text, is searched for the token after it was stored and used.
#[tokio::test]
async fn the_schema_holds_the_tokens_hash_not_the_token() {
    use crate::roles::Tokens;
    use sha2::{Digest, Sha256};
    const TOKEN: &str = "fst_marker_5b0c2e8f1d7a4936a4c2";
    let h = harness().await;
    let store =
        PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("connect");
    let hash: [u8; 32] = Sha256::digest(TOKEN.as_bytes()).into();
    let record = fleetsync_model::TokenRecord {
        name: "ci".into(),
        grant: fleetsync_model::Grant::parse("team-a:agent:c1").expect("grant"),
        created_at: fleetsync_model::Timestamp(1),
        expires_at: Some(fleetsync_model::Timestamp(2)),
        created_by: "cli".into(),
    };
    assert!(store.token_create(&record, &hash).await.expect("create"));
    let found = store.token_find(&hash).await.expect("find").expect("found");
    store.objects_apply_by(vec![crate::conformance::cluster("c1", &[])], Some(&found.name)).await.expect("apply");

    let admin = admin(&h.schema.name).await;
    let tables = admin
        .query("SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1", &[&h.schema.name])
        .await
        .expect("tables");
    let tables: Vec<String> = tables.iter().map(|r| r.get(0)).collect();
    assert!(tables.iter().any(|t| t == "tokens") && tables.iter().any(|t| t == "events"), "{tables:?}");
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    let (mut with_hash, mut with_token) = (Vec::new(), Vec::new());
    for table in &tables {
        let rows = admin.query(&format!("SELECT t::text FROM \"{table}\" t"), &[]).await.expect("rows as text");
        for row in rows {
            let text: String = row.get(0);
            if text.contains(&hex) {
                with_hash.push(table.clone());
            }
            if text.contains(TOKEN) {
                with_token.push(table.clone());
            }
        }
    }
    assert_eq!(with_hash, ["tokens"], "the search sees the hash");
    assert_eq!(with_token, Vec::<String>::new(), "the token is nowhere");
}

/// Readiness reads the schema's version, not the keys: ready once migrated, not ready
/// (saying what to run) when the schema lacks this build's newest migration.
#[tokio::test]
async fn readiness_needs_the_schema_this_build_keeps() {
    use crate::roles::StatusRead;
    let h = harness().await;
    let store =
        PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("connect");
    let ready = store.store_ready().await.expect("a migrated schema is ready");
    let latest = usize::try_from(schema::latest()).expect("a count");
    assert_eq!(ready, crate::Schema { backend: "postgres", version: latest, latest });
    let admin = admin(&h.schema.name).await;
    admin
        .execute("DELETE FROM fleetsync_schema_migrations WHERE version = $1", &[&schema::latest()])
        .await
        .expect("forget the newest");
    let e = store.store_ready().await.expect_err("a schema behind the build is not ready");
    assert!(e.is_transient() && e.to_string().contains("run `fleetsync migrate`"), "{e}");
}

/// Revisions and rollouts behave on PostgreSQL as on SQLite: the same scenario, seen
/// through the store's roles, gives the same answers on both (rollouts held back and
/// moved by compare-and-set, keys kept at their revision, pruning, deletion).
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn revisions_and_rollouts_behave_as_on_sqlite() {
    let h = harness().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite_clock =
        std::sync::Arc::new(fleetsync_model::ManualClock::new(fleetsync_model::Timestamp(1_800_000_000_000)));
    let pg_clock =
        std::sync::Arc::new(fleetsync_model::ManualClock::new(fleetsync_model::Timestamp(1_800_000_000_000)));
    let sqlite = crate::sqlite::SqliteStore::open(
        dir.path().join("fleetsync.db"),
        StoreConfig { clock: Some(sqlite_clock.clone()), ..StoreConfig::default() },
    )
    .expect("open sqlite");
    let pg = PgStore::connect(
        &test_database_url(),
        Some(&h.schema.name),
        StoreConfig { clock: Some(pg_clock.clone()), ..StoreConfig::default() },
    )
    .await
    .expect("connect");
    let on_sqlite = rollout_scenario(&sqlite, &sqlite_clock).await;
    let on_pg = rollout_scenario(&pg, &pg_clock).await;
    assert_eq!(on_pg.len(), 16, "observations");
    for (i, (s, p)) in on_sqlite.iter().zip(&on_pg).enumerate() {
        assert_eq!(s, p, "observation {i} differs (SQLite, PostgreSQL)");
    }
    assert_eq!(on_sqlite.len(), on_pg.len());

    // Resources are stored once per tenant and dropped with the last revision holding them.
    let admin = admin(&h.schema.name).await;
    let count = |table: &'static str| {
        let admin = &admin;
        async move { admin.query_one(&format!("SELECT count(*) FROM {table}"), &[]).await.expect("count").get::<_, i64>(0) }
    };
    assert_eq!(
        (count("revisions").await, count("revision_parts").await, count("rollouts").await),
        (0, 0, 0),
        "all gone with the SyncSet"
    );
}

/// Runs revisions and rollouts through `store`; returns what it saw, step by step.
#[cfg(feature = "sqlite")]
async fn rollout_scenario<S: crate::Store>(store: &S, clock: &fleetsync_model::ManualClock) -> Vec<String> {
    use crate::conformance::{applied_completion, cluster, syncset};
    use crate::StatusFilter;
    use fleetsync_model::{Document, RolloutPhase};

    let with_rollout = |marker: &str, rollout: bool| {
        let Document::SyncSet(mut s) = syncset("s", 3, marker) else { unreachable!() };
        // Two resources unchanged across generations, one that changes.
        s.spec.resources[0].0["data"]["marker"] = serde_json::json!("same");
        s.spec.resources[1].0["data"]["marker"] = serde_json::json!("same");
        if rollout {
            s.spec.rollout = Some(
                serde_json::from_value(serde_json::json!({"steps": [{"count": 1}, {"percent": 100}]}))
                    .expect("rollout"),
            );
        }
        Document::SyncSet(s)
    };
    let mut seen = Vec::new();
    macro_rules! see {
        ($label:expr) => {{
            let keys = store.status_list(&StatusFilter::default()).await.expect("status");
            let keys: Vec<_> = keys
                .iter()
                .map(|k| (k.key.to_string(), k.phase, k.desired, k.generation, k.observed_generation))
                .collect();
            let rollout = store.rollout_get("default", "s").await.expect("rollout");
            let revisions: Vec<_> = {
                let mut v = Vec::new();
                for g in 0..=16 {
                    if let Some(r) = store.revision_get("default", "s", g).await.expect("revision") {
                        v.push((g, serde_json::to_string(&r).expect("json")));
                    }
                }
                v
            };
            seen.push(format!("{}: keys {keys:?}\n rollout {rollout:?}\n revisions {revisions:?}", $label));
        }};
    }
    async fn settle<S: crate::Store>(store: &S) {
        loop {
            let items = store.work_claim(ClaimParams::new("w", 100, Duration::from_secs(30))).await.expect("claim");
            if items.is_empty() {
                break;
            }
            for item in &items {
                store.work_complete(vec![applied_completion(item)]).await.expect("complete");
            }
        }
    }

    let docs = vec![
        cluster("a", &[("env", "prod")]),
        cluster("b", &[("env", "prod")]),
        cluster("c", &[("env", "prod")]),
        with_rollout("1", true),
    ];
    store.objects_apply(docs).await.expect("apply");
    see!("first generation: a completed rollout");
    settle(store).await;
    clock.advance(Duration::from_secs(1));
    store.objects_apply(vec![with_rollout("2", true)]).await.expect("apply 2");
    see!("second generation: held back at 1, nothing runs");
    store.objects_apply(vec![cluster("d", &[("env", "prod")])]).await.expect("apply d");
    see!("a new cluster gets the stable revision");
    store.objects_apply(vec![cluster("a", &[("env", "prod"), ("x", "y")])]).await.expect("relabel a");
    see!("a relabelled cluster runs again at its revision");
    settle(store).await;

    let state = store.rollout_get("default", "s").await.expect("get").expect("a rollout");
    assert_eq!((state.phase, state.revision, state.stable), (RolloutPhase::Progressing, 2, 1));
    clock.advance(Duration::from_secs(1));
    let next = crate::rollout::RolloutState {
        step: 1,
        version: state.version + 1,
        updated_at: fleetsync_model::Clock::now(clock),
        reason: Some("step 1".into()),
        ..state.clone()
    };
    let wrote =
        store.rollout_write(&next, &[("a".into(), 2), ("b".into(), 2), ("gone".into(), 2)], None).await.expect("write");
    seen.push(format!("first write: {wrote}"));
    let again = store.rollout_write(&next, &[("c".into(), 2)], None).await.expect("write again");
    seen.push(format!("second write from the same version: {again}"));
    let stale = crate::rollout::RolloutState { revision: 1, version: next.version + 1, ..next.clone() };
    seen.push(format!("write for another revision: {}", store.rollout_write(&stale, &[], None).await.expect("stale")));
    see!("a and b at 2");
    let missing = crate::rollout::RolloutState { version: next.version + 1, ..next.clone() };
    let e = store.rollout_write(&missing, &[("c".into(), 7)], None).await.expect_err("no revision 7");
    seen.push(format!("a generation not kept: {}", e.is_transient()));
    settle(store).await;

    for g in 3..=14 {
        clock.advance(Duration::from_secs(1));
        store.objects_apply(vec![with_rollout(&g.to_string(), true)]).await.expect("apply");
    }
    see!("superseded rollouts keep 1 (stable), the revisions keys run and the last 10");
    let listed = store.rollout_list(None, Some(RolloutPhase::Progressing)).await.expect("list");
    seen.push(format!("progressing: {listed:?}"));
    seen.push(format!(
        "completed: {:?}",
        store.rollout_list(Some("default"), Some(RolloutPhase::Completed)).await.expect("list")
    ));
    seen.push(format!("other tenant: {:?}", store.rollout_list(Some("other"), None).await.expect("list")));

    clock.advance(Duration::from_secs(1));
    store.objects_apply(vec![with_rollout("15", false)]).await.expect("apply without a rollout");
    see!("no rollout: every key runs 15");
    settle(store).await;
    store.objects_apply(vec![with_rollout("16", false)]).await.expect("apply 16");
    settle(store).await;
    see!("settled at 16: older revisions pruned");
    store.object_delete(fleetsync_model::Kind::SyncSet, "default", "s").await.expect("delete");
    see!("deleted");
    seen
}

/// Processes that decide the same step of a rollout at once: one writes it (and runs
/// its keys), the others are told the rollout moved on.
#[tokio::test]
async fn of_processes_writing_one_rollout_step_one_wins() {
    use crate::conformance::{cluster, syncset};
    use crate::roles::{Rollouts, StatusRead};
    use fleetsync_model::Document;
    let h = harness().await;
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(std::sync::Arc::new(
            PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default())
                .await
                .expect("connect"),
        ));
    }
    let generation = |marker: &str| {
        let Document::SyncSet(mut s) = syncset("s", 1, marker) else { unreachable!() };
        s.spec.rollout = Some(
            serde_json::from_value(serde_json::json!({"steps": [{"count": 1}, {"percent": 100}]})).expect("rollout"),
        );
        Document::SyncSet(s)
    };
    let first = &stores[0];
    first
        .objects_apply(vec![cluster("a", &[("env", "prod")]), cluster("b", &[("env", "prod")]), generation("1")])
        .await
        .expect("apply");
    first.objects_apply(vec![generation("2")]).await.expect("apply 2");
    let state = first.rollout_get("default", "s").await.expect("get").expect("a rollout");
    let next = crate::rollout::RolloutState { step: 1, version: state.version + 1, ..state };
    // A process that does not write learns of the keys made ready (NOTIFY), once the
    // wake-ups of the applies above have come in.
    let observer =
        PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("connect");
    let mut wakes = observer.subscribe();
    tokio::time::sleep(Duration::from_millis(300)).await;
    wakes.borrow_and_update();
    let writes = stores.iter().map(|s| {
        let (s, next) = (s.clone(), next.clone());
        tokio::spawn(async move { s.rollout_write(&next, &[("a".into(), 2)], None).await.expect("write") })
    });
    let wrote: Vec<bool> = futures_util::future::join_all(writes).await.into_iter().map(|r| r.expect("task")).collect();
    assert_eq!(wrote.iter().filter(|w| **w).count(), 1, "{wrote:?}");
    assert_eq!(first.rollout_get("default", "s").await.expect("get"), Some(next));
    let a = first
        .status_list(&crate::StatusFilter { cluster: Some("a".into()), ..Default::default() })
        .await
        .expect("status");
    assert_eq!(a.iter().map(|k| k.generation).collect::<Vec<_>>(), [2], "a runs the new generation");
    tokio::time::timeout(Duration::from_secs(5), wakes.changed()).await.expect("claimers woken").expect("open");
}
