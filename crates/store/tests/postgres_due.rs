//! The `due` table against a real PostgreSQL: it holds exactly the keys that are ready
//! or running, each at its `run_at`, after every kind of write (the invariant every
//! claim relies on to find keys, see `src/postgres/due.rs`); and a session that does not
//! say it keeps `due` in step (a process of an older build) may not write to `work`.
//!
//! Database: `FLEETSYNC_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`.

use fleetsync_model::{Kind, ManualClock, Timestamp, WorkKey};
use fleetsync_store::conformance::{applied_completion, cluster, syncset};
use fleetsync_store::postgres::testing::{test_database_url, ScratchSchema};
use fleetsync_store::postgres::PgStore;
use fleetsync_store::{
    ClaimParams, ClaimedItem, CompleteOutcome, Completion, RenewParams, RetryPolicy, RunOutcome, StoreConfig,
};
use fleetsync_store::{Objects, StatusRead, WorkQueue};
use std::sync::Arc;
use std::time::Duration;
use tokio_postgres::NoTls;

/// A schema of the test's own, and an admin connection to it as a session of no
/// fleetsync build.
async fn scratch() -> (ScratchSchema, tokio_postgres::Client) {
    let scratch = ScratchSchema::new();
    let (admin, conn) =
        tokio_postgres::connect(&test_database_url(), NoTls).await.expect("connect to the test database");
    tokio::spawn(conn);
    (scratch, admin)
}

/// Puts the admin session on the scratch schema (once the store created it).
async fn enter(admin: &tokio_postgres::Client, scratch: &ScratchSchema) {
    admin.batch_execute(&format!("SET search_path = {}", scratch.name)).await.expect("search_path");
}

/// Rows of `work` that should be in `due` but are not, and rows of `due` that should
/// not be there; both empty when the invariant holds.
async fn out_of_step(admin: &tokio_postgres::Client) -> (Vec<String>, Vec<String>) {
    let should = "SELECT run_at, tenant COLLATE \"C\", cluster COLLATE \"C\", syncset COLLATE \"C\", id, shard
                  FROM work WHERE phase IN ('ready', 'running')";
    let is = "SELECT due_at, tenant, cluster, syncset, id, shard FROM due";
    let rows = |sql: String| async move {
        let rows = admin.query(&sql, &[]).await.expect("compare work and due");
        let show = |r: &tokio_postgres::Row| {
            let (at, id, shard) = (r.get::<_, i64>(0), r.get::<_, i64>(4), r.get::<_, i16>(5));
            format!(
                "{at}@{}/{}/{} id {id} shard {shard}",
                r.get::<_, &str>(1),
                r.get::<_, &str>(2),
                r.get::<_, &str>(3)
            )
        };
        rows.iter().map(show).collect()
    };
    (rows(format!("{should} EXCEPT ALL {is}")).await, rows(format!("{is} EXCEPT ALL {should}")).await)
}

async fn assert_in_step(admin: &tokio_postgres::Client, after: &str) {
    let (missing, extra) = out_of_step(admin).await;
    assert!(
        missing.is_empty() && extra.is_empty(),
        "after {after}: missing from due {missing:?}, extra in due {extra:?}"
    );
}

async fn due_count(admin: &tokio_postgres::Client) -> i64 {
    admin.query_one("SELECT count(*) FROM due", &[]).await.expect("count").get(0)
}

fn completion(item: &ClaimedItem, outcome: RunOutcome) -> Completion {
    Completion { key: item.key.clone(), fence: item.fence, outcome, resources: vec![] }
}

fn find<'a>(items: &'a [ClaimedItem], cluster: &str, syncset: &str) -> &'a ClaimedItem {
    items.iter().find(|i| i.key.cluster == cluster && i.key.syncset == syncset).expect("claimed")
}

#[tokio::test]
async fn due_holds_exactly_the_ready_and_running_keys_after_every_kind_of_write() {
    let (scratch, admin) = scratch().await;
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
    let retry = RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(8), max_attempts: 3, jitter: 0.0 };
    let config = StoreConfig { clock: Some(clock.clone()), retry, keys: None };
    let store = PgStore::connect(&test_database_url(), Some(&scratch.name), config).await.expect("connect");
    enter(&admin, &scratch).await;
    let ttl = Duration::from_secs(30);
    let claim = |n| store.work_claim(ClaimParams::new("w", n, ttl));

    let docs = vec![
        cluster("c1", &[("env", "prod")]),
        cluster("c2", &[("env", "prod")]),
        syncset("s1", 1, "v1"),
        syncset("s2", 1, "v1"),
        syncset("s3", 1, "v1"),
    ];
    store.objects_apply(docs).await.expect("apply");
    assert_in_step(&admin, "the first apply").await;
    assert_eq!(due_count(&admin).await, 6, "six keys ready");

    clock.advance(Duration::from_secs(1));
    let items = claim(5).await.expect("claim");
    assert_eq!(items.len(), 5);
    assert_in_step(&admin, "a claim").await;
    assert_eq!(due_count(&admin).await, 6, "leased keys keep their rows");

    let renewed =
        store.lease_renew(RenewParams { leases: vec![(items[0].key.clone(), items[0].fence)], lease_ttl: ttl }).await;
    assert!(renewed.expect("renew").is_empty());
    assert_in_step(&admin, "a renewal").await;

    // A change lands on s1 while c1/s1 and c2/s1 run: they complete dirty, ready again.
    store.objects_apply(vec![syncset("s1", 1, "v2")]).await.expect("a change while running");
    assert_in_step(&admin, "a change to running and ready keys").await;
    let (s1, s2, s3) = (find(&items, "c1", "s1"), find(&items, "c1", "s2"), find(&items, "c1", "s3"));
    let c2s2 = find(&items, "c2", "s2");
    let requeue = RunOutcome::Requeue { generation: s3.generation, inventory: vec![], after: Duration::from_secs(5) };
    let done = vec![
        applied_completion(s1),
        applied_completion(s2),
        completion(s3, requeue),
        completion(c2s2, RunOutcome::Failed { error: "boom".into() }),
    ];
    let out = store.work_complete(done).await.expect("complete");
    use fleetsync_model::Phase;
    let expected = [Phase::Pending, Phase::Applied, Phase::Pending, Phase::Failed].map(CompleteOutcome::Committed);
    assert_eq!(out, expected, "dirty, applied, requeued, failed");
    assert_in_step(&admin, "completions of every kind").await;

    let held = items.iter().find(|i| i.key == WorkKey::new("default", "c2", "s1")).expect("c2/s1 claimed");
    store.work_release(&held.key, held.fence).await.expect("release");
    assert_in_step(&admin, "a release").await;

    store.work_retry(&s2.key).await.expect("retry an applied key");
    assert_in_step(&admin, "a retry").await;

    // Run everything that is due to completion, then resync the idle keys.
    clock.advance(Duration::from_secs(10));
    let all = claim(10).await.expect("claim all");
    let done: Vec<Completion> = all.iter().map(applied_completion).collect();
    store.work_complete(done).await.expect("complete all");
    assert_in_step(&admin, "completing everything due").await;
    assert_eq!(store.work_resync().await.expect("resync"), 6);
    assert_in_step(&admin, "a resync").await;

    store.object_delete(Kind::SyncSet, "default", "s3").await.expect("delete s3");
    assert_in_step(&admin, "a SyncSet's deletion (its keys enqueued for removal)").await;
    // Two leases their holder abandons: taken over below once they expire.
    let _abandoned = claim(2).await.expect("claim two");
    store.object_delete(Kind::Cluster, "default", "c2").await.expect("delete c2");
    assert_in_step(&admin, "a cluster's deletion (its keys and their rows go)").await;

    // Drain: removals delete their keys; everything else ends idle, with no row in due.
    clock.advance(ttl + Duration::from_secs(1));
    for _ in 0..5 {
        let items = claim(10).await.expect("claim");
        let removed: Vec<Completion> = items
            .iter()
            .map(|i| if i.desired { applied_completion(i) } else { completion(i, RunOutcome::Removed) })
            .collect();
        store.work_complete(removed).await.expect("complete");
        assert_in_step(&admin, "draining").await;
    }
    assert_eq!(due_count(&admin).await, 0, "nothing pending, nothing leased");
}

/// A process of a build before schema 9 does not keep `due` in step: the keys it made
/// ready would never be claimed here. Its writes to `work` are refused, saying so.
#[tokio::test]
async fn writers_that_do_not_keep_due_are_refused() {
    let (scratch, admin) = scratch().await;
    let store =
        PgStore::connect(&test_database_url(), Some(&scratch.name), StoreConfig::default()).await.expect("connect");
    store.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply");
    enter(&admin, &scratch).await;

    let err = admin.execute("UPDATE work SET run_at = 0", &[]).await.expect_err("an old writer must be refused");
    let db = err.as_db_error().expect("a database error");
    assert_eq!(db.code(), &tokio_postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
    assert!(db.message().contains("older than schema version 9"), "{}", db.message());
    assert!(db.hint().is_some_and(|h| h.contains("stop the processes of older builds")), "{:?}", db.hint());
    let err = admin.execute("DELETE FROM work", &[]).await.expect_err("deletes too");
    assert!(err.as_db_error().is_some_and(|d| d.message().contains("older than schema version 9")));

    admin.batch_execute("SET fleetsync.schema_version = 9").await.expect("say it");
    assert_eq!(admin.execute("UPDATE work SET updated_at = updated_at", &[]).await.expect("a writer of this build"), 1);
}

/// A write that waited for a key's row lock while another transaction changed the row
/// applies to the row as that transaction left it (it does not skip it): a retry, a
/// release and a cluster's deletion each wait for a holder that updates the row, then
/// commits. The `due` invariant holds after each.
#[tokio::test]
async fn writes_that_waited_for_a_row_apply_to_its_latest_version() {
    use fleetsync_model::Phase;
    let (scratch, admin) = scratch().await;
    let url = format!("{}?options=-c%20idle_in_transaction_session_timeout%3D20s", test_database_url());
    let store = PgStore::connect(&url, Some(&scratch.name), StoreConfig::default()).await.expect("connect");
    enter(&admin, &scratch).await;
    let docs = vec![
        cluster("c1", &[("env", "prod")]),
        cluster("c2", &[("env", "prod")]),
        syncset("s1", 1, "v1"),
        syncset("s2", 1, "v1"),
    ];
    store.objects_apply(docs).await.expect("apply");
    let items = store.work_claim(ClaimParams::new("w", 10, Duration::from_secs(30))).await.expect("claim");
    let item =
        |c: &str, s: &str| items.iter().find(|i| i.key.cluster == c && i.key.syncset == s).cloned().expect("claimed");
    // c1/s1 done, so a retry has something to enqueue; c1/s2 stays leased, to release.
    store.work_complete(vec![applied_completion(&item("c1", "s1"))]).await.expect("complete");

    // A holder (as a writer of this build) updates the row, then commits after the store waited.
    let (holder, conn) = tokio_postgres::connect(&test_database_url(), NoTls).await.expect("connect");
    tokio::spawn(conn);
    let hold = |syncset_or_cluster: &'static str| {
        let (holder, schema) = (&holder, scratch.name.clone());
        async move {
            let sql = format!(
                "BEGIN; SET LOCAL idle_in_transaction_session_timeout = '20s'; SET LOCAL fleetsync.schema_version = 9;
                 UPDATE {schema}.work SET updated_at = updated_at + 1 WHERE {syncset_or_cluster}"
            );
            holder.batch_execute(&sql).await.expect("hold");
        }
    };
    let after_a_wait = |done: tokio::task::JoinHandle<_>| {
        let holder = &holder;
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!done.is_finished(), "the write must wait for the held row");
            holder.batch_execute("COMMIT").await.expect("let go");
            done.await.expect("join")
        }
    };

    hold("cluster = 'c1' AND syncset = 's1'").await;
    let retry = tokio::spawn({
        let (store, key) = (store.clone(), item("c1", "s1").key);
        async move { store.work_retry(&key).await }
    });
    after_a_wait(retry).await.expect("the retry found the row");
    let st = store.status_get(&item("c1", "s1").key).await.expect("status").expect("exists");
    assert_eq!(st.phase, Phase::Pending, "retried");
    assert_in_step(&admin, "a retry that waited").await;

    hold("cluster = 'c1' AND syncset = 's2'").await;
    let release = tokio::spawn({
        let (store, leased) = (store.clone(), item("c1", "s2"));
        async move { store.work_release(&leased.key, leased.fence).await }
    });
    after_a_wait(release).await.expect("release");
    let st = store.status_get(&item("c1", "s2").key).await.expect("status").expect("exists");
    assert_eq!(st.phase, Phase::Pending, "released");
    assert_in_step(&admin, "a release that waited").await;

    hold("cluster = 'c2' AND syncset = 's1'").await;
    let delete = tokio::spawn({
        let store = store.clone();
        async move { store.object_delete(Kind::Cluster, "default", "c2").await }
    });
    after_a_wait(delete).await.expect("delete");
    let left: i64 = admin.query_one("SELECT count(*) FROM work WHERE cluster = 'c2'", &[]).await.expect("count").get(0);
    assert_eq!(left, 0, "every key of the deleted cluster went");
    assert_in_step(&admin, "a cluster's deletion that waited").await;
}

/// A claimer whose cursor starts before many live leases (a new claimer, or one whose
/// cursor went back) walks past them in one claim: an expired lease behind more than
/// three windows of live ones is taken over by the next claim, not one window per
/// wake-up of the worker later.
#[tokio::test]
async fn a_claim_walks_past_live_leases_to_an_expired_one() {
    let (scratch, _admin) = scratch().await;
    let clock = Arc::new(ManualClock::new(Timestamp(1_000_000)));
    let store = PgStore::connect(
        &test_database_url(),
        Some(&scratch.name),
        StoreConfig { clock: Some(clock.clone()), ..StoreConfig::default() },
    )
    .await
    .expect("connect");
    let mut docs: Vec<_> = (0..5).map(|c| cluster(&format!("c{c}"), &[("env", "prod")])).collect();
    docs.extend((0..40).map(|s| syncset(&format!("s{s:02}"), 1, "v1")));
    store.objects_apply(docs).await.expect("apply 200 keys");
    let live = store.work_claim(ClaimParams::new("a", 199, Duration::from_secs(3600))).await.expect("claim 199");
    assert_eq!(live.len(), 199);
    let short = store.work_claim(ClaimParams::new("b", 10, Duration::from_secs(1))).await.expect("claim the last");
    assert_eq!(short.len(), 1, "the last key in claim order");
    clock.advance(Duration::from_secs(2));
    let taken = store.work_claim(ClaimParams::new("c", 10, Duration::from_secs(30))).await.expect("claim");
    assert_eq!(
        taken.iter().map(|i| &i.key).collect::<Vec<_>>(),
        [&short[0].key],
        "the expired lease, found past 199 live ones"
    );
    assert!(taken[0].fence > short[0].fence);
}
