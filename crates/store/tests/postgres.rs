//! The PostgreSQL store against a real server, beyond the conformance suite (which runs
//! in `src/postgres/tests.rs`): wake-ups across processes (two stores on one schema stand
//! for two processes), the listener's reconnect and lifetime, migrations, errors for
//! bad connection settings, and the store's clock. Claims and completions against a
//! real server are in `postgres_complete.rs`.
//!
//! Database: `FLEETSYNC_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`.
//! Each test works in a schema of its own, dropped at the end.

use fleetsync_store::conformance::{applied_completion, cluster, syncset};
use fleetsync_store::postgres::testing::test_database_url;
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::{ClaimParams, EventRetention, EventsTrimmed, StoreConfig, StoreError};
use fleetsync_store::{EventLog, Objects, StatusRead, WorkQueue};
use std::time::{Duration, Instant};

mod support;

use support::{woken_since, woken_within, Scratch};

#[tokio::test]
async fn a_change_in_another_process_wakes_waiters_here() {
    let scratch = Scratch::new().await;
    let here = scratch.store().await;
    let there = scratch.store().await;
    let mut rx = here.subscribe();
    rx.borrow_and_update();

    let start = Instant::now();
    there.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply there");
    let took = woken_since(&mut rx, start, Duration::from_secs(1))
        .await
        .expect("woken by the other store's NOTIFY within 1 s");
    eprintln!("cross-process wake-up {took:?} after the apply started");

    // A change that enqueues nothing does not notify.
    rx.borrow_and_update();
    there.objects_apply(vec![syncset("s1", 1, "v1")]).await.expect("unchanged apply");
    assert!(woken_within(&mut rx, Duration::from_millis(300)).await.is_none(), "unchanged content woke waiters");
}

/// Events appended by one process wake event watchers in another (LISTEN/NOTIFY on
/// a channel of their own), for object writes and for completions.
#[tokio::test]
async fn events_appended_in_another_process_wake_watchers_here() {
    let scratch = Scratch::new().await;
    let here = scratch.store().await;
    let there = scratch.store().await;
    let mut rx = here.events_subscribe();
    rx.borrow_and_update();
    there.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply there");
    woken_within(&mut rx, Duration::from_secs(5)).await.expect("woken by an object write there");

    let item = there.work_claim(ClaimParams::new("w", 1, Duration::from_secs(30))).await.expect("claim").remove(0);
    rx.borrow_and_update();
    there.work_complete(vec![applied_completion(&item)]).await.expect("complete");
    let took = woken_within(&mut rx, Duration::from_secs(5)).await.expect("woken by a status transition there");
    eprintln!("cross-process event wake-up {took:?} after the completion returned");
}

/// Identity values have gaps (a rolled-back insert keeps its number). The horizon is
/// recorded, not inferred from the oldest event left: a cursor inside a gap after the
/// horizon reads on (it missed nothing), one before the horizon is refused.
#[tokio::test]
async fn the_horizon_is_exact_across_sequence_gaps() {
    let scratch = Scratch::new().await;
    let s = scratch.store().await;
    for v in 0..5 {
        s.objects_apply(vec![syncset("s1", 1, &format!("v{v}"))]).await.expect("apply");
    }
    let burn = format!(
        "SELECT nextval(pg_get_serial_sequence('{}.events', 'seq')) FROM generate_series(1, 4)",
        scratch.schema.name
    );
    scratch.admin.batch_execute(&burn).await.expect("burn sequence numbers");
    for v in 5..8 {
        s.objects_apply(vec![syncset("s1", 1, &format!("v{v}"))]).await.expect("apply");
    }
    let seqs = |after: u64| {
        let s = s.clone();
        async move { s.events_read(after, 100).await.map(|es| es.iter().map(|e| e.seq).collect::<Vec<_>>()) }
    };
    assert_eq!(seqs(0).await.expect("read"), vec![1, 2, 3, 4, 5, 10, 11, 12]);

    let t = s.events_trim(EventRetention { max_events: Some(3), max_age: None }).await.expect("trim");
    assert_eq!(
        t,
        EventsTrimmed { deleted: 5, horizon: 5 },
        "the newest 3 events are 10..=12; the one before them is 5"
    );
    for cursor in [5, 7, 9] {
        assert_eq!(seqs(cursor).await.expect("read"), vec![10, 11, 12], "cursor {cursor}");
    }
    match seqs(4).await {
        Err(StoreError::CursorExpired { cursor: 4, horizon: 5 }) => {}
        other => panic!("expected CursorExpired, got {other:?}"),
    }
}

#[tokio::test]
async fn stores_on_other_schemas_are_not_woken() {
    let a = Scratch::new().await;
    let b = Scratch::new().await;
    let here = a.store().await;
    let elsewhere = b.store().await;
    let mut rx = here.subscribe();
    rx.borrow_and_update();
    elsewhere.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply");
    assert!(woken_within(&mut rx, Duration::from_millis(300)).await.is_none(), "woken by another schema's change");
}

#[tokio::test]
async fn the_listener_reconnects_and_stops_with_the_store() {
    let scratch = Scratch::new().await;
    let app = format!("fs_listen_{:08x}", rand::random::<u32>());
    let options = PgOptions { schema: Some(scratch.schema.name.clone()), ..PgOptions::default() };
    let here = PgStore::connect_with(&scratch.url_named(&app), options, StoreConfig::default()).await.expect("connect");
    let there = scratch.store().await;
    let mut rx = here.subscribe();
    rx.borrow_and_update();
    let mut events = here.events_subscribe();
    events.borrow_and_update();

    // Kill the LISTEN connection, as a server restart or a network cut would.
    let killed = scratch
        .admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
            &[&app],
        )
        .await
        .expect("terminate");
    assert_eq!(killed.len(), 1, "one listener connection");
    woken_within(&mut rx, Duration::from_secs(5))
        .await
        .expect("bumped once after reconnecting (a wake-up may have been missed)");
    woken_within(&mut events, Duration::from_secs(5)).await.expect("event watchers too");
    rx.borrow_and_update();

    // Listening again: a change elsewhere still wakes us.
    there.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply");
    woken_within(&mut rx, Duration::from_secs(1)).await.expect("woken after the reconnect");

    // Dropping the last clone closes every connection, the listener's too.
    let clone = here.clone();
    drop(here);
    drop(clone);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n: i64 = scratch
            .admin
            .query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1", &[&app])
            .await
            .expect("count")
            .get(0);
        if n == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{n} connections of the dropped store are still open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Connections killed under the store (as by a server restart) are replaced: the next
/// calls succeed without the caller doing anything.
#[tokio::test]
async fn killed_connections_are_replaced() {
    let scratch = Scratch::new().await;
    let app = format!("fs_kill_{:08x}", rand::random::<u32>());
    let options = PgOptions { schema: Some(scratch.schema.name.clone()), pool_size: 4, ..PgOptions::default() };
    let store =
        PgStore::connect_with(&scratch.url_named(&app), options, StoreConfig::default()).await.expect("connect");
    store.objects_apply(vec![cluster("c1", &[("env", "prod")])]).await.expect("apply");
    for _ in 0..3 {
        let killed = scratch
            .admin
            .query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", &[&app])
            .await
            .expect("terminate");
        assert!(!killed.is_empty());
        store
            .objects_apply(vec![syncset("s1", 1, &format!("v{}", rand::random::<u32>()))])
            .await
            .expect("write after the kill");
        assert_eq!(store.status_list(&Default::default()).await.expect("read after the kill").len(), 1);
    }

    // Killed in the middle of a transaction: it is run again on a new connection. To
    // catch it mid-way, hold the tenant's object lock (named as in `Tx::lock_tenant`),
    // so the apply waits inside its transaction.
    let lock = format!("fleetsync objects {} default", scratch.schema.name);
    scratch.admin.execute("SELECT pg_advisory_lock(hashtextextended($1, 0))", &[&lock]).await.expect("lock");
    let writer = {
        let store = store.clone();
        tokio::spawn(async move { store.objects_apply(vec![syncset("s1", 1, "mid-transaction")]).await })
    };
    let waiting = "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'";
    let deadline = Instant::now() + Duration::from_secs(5);
    while scratch.admin.query(waiting, &[&app]).await.expect("poll").is_empty() {
        assert!(Instant::now() < deadline, "the apply never waited for the lock");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let kill = format!("SELECT pg_terminate_backend(pid) FROM ({waiting}) w");
    scratch.admin.query(&kill, &[&app]).await.expect("terminate the waiting transaction");
    scratch.admin.execute("SELECT pg_advisory_unlock(hashtextextended($1, 0))", &[&lock]).await.expect("unlock");
    let out = writer.await.expect("join").expect("the apply is retried on a new connection");
    assert_eq!(out[0].result, "updated");
}

#[tokio::test]
async fn processes_starting_together_migrate_once() {
    let scratch = Scratch::new().await;
    let url = test_database_url();
    let opens = (0..4).map(|_| {
        let (url, schema) = (url.clone(), scratch.schema.name.clone());
        tokio::spawn(async move { PgStore::connect(&url, Some(&schema), StoreConfig::default()).await })
    });
    for open in opens {
        open.await.expect("join").expect("every process connects");
    }
    let versions: Vec<i32> = scratch
        .admin
        .query(
            &format!("SELECT version FROM {}.fleetsync_schema_migrations ORDER BY version", scratch.schema.name),
            &[],
        )
        .await
        .expect("versions")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let latest = i32::try_from(versions.len()).expect("few migrations");
    assert_eq!(versions, (1..=latest).collect::<Vec<_>>(), "each migration applied once, in order");

    // With migrations off, an unmigrated schema is refused with what to do about it.
    let fresh = Scratch::new().await;
    let options = PgOptions { schema: Some(fresh.schema.name.clone()), migrate: false, ..PgOptions::default() };
    fresh.admin.batch_execute(&format!("CREATE SCHEMA {}", fresh.schema.name)).await.expect("create schema");
    let err = PgStore::connect_with(&url, options.clone(), StoreConfig::default()).await.expect_err("not migrated");
    assert!(err.to_string().contains("fleetsync migrate"), "{err}");
    assert_eq!(PgStore::migrate(&url, Some(&fresh.schema.name)).await.expect("migrate"), latest);
    PgStore::connect_with(&url, options, StoreConfig::default()).await.expect("migrated: connects without migrating");
}

/// A reader following the log by cursor while several processes write never skips an
/// event: sequence numbers become visible in commit order. (Completions append events
/// and, unlike object writes, do not serialize on a tenant.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_reader_sees_every_event_while_processes_write() {
    let scratch = Scratch::new().await;
    let reader = scratch.store().await;
    let mut docs: Vec<_> = (0..40).map(|i| cluster(&format!("c{i}"), &[("env", "prod")])).collect();
    docs.extend((0..5).map(|i| syncset(&format!("s{i}"), 1, "v1")));
    reader.objects_apply(docs).await.expect("seed 200 keys");
    let mut workers = Vec::new();
    for w in 0..4 {
        let store = scratch.store().await;
        workers.push(tokio::spawn(async move {
            loop {
                let params = ClaimParams::new(format!("w{w}"), 3, Duration::from_secs(30));
                let items = store.work_claim(params).await.expect("claim");
                if items.is_empty() {
                    return;
                }
                let done = items.iter().map(applied_completion).collect();
                store.work_complete(done).await.expect("complete");
            }
        }));
    }
    let mut seen = Vec::new();
    let mut cursor = 0;
    loop {
        let finished = workers.iter().all(|w| w.is_finished());
        for e in reader.events_read(cursor, 1_000).await.expect("read") {
            cursor = e.seq;
            seen.push(e.seq);
        }
        if finished {
            break;
        }
    }
    for w in workers {
        w.await.expect("worker");
    }
    let all: Vec<u64> = reader.events_read(0, 10_000).await.expect("read all").iter().map(|e| e.seq).collect();
    assert_eq!(all.len(), 45 + 200, "one event per object and per completion");
    assert_eq!(seen, all, "the cursor reader skipped events");
}

/// A cluster and a SyncSet that selects it, applied at the same time by two processes:
/// whichever commits second sees the other, so their key is always enqueued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_cluster_and_syncset_writes_meet() {
    let scratch = Scratch::new().await;
    let (a, b) = (scratch.store().await, scratch.store().await);
    for i in 0..30 {
        let (a, b) = (a.clone(), b.clone());
        let c = tokio::spawn(async move { a.objects_apply(vec![cluster(&format!("c{i}"), &[("env", "prod")])]).await });
        let s = tokio::spawn(async move { b.objects_apply(vec![syncset(&format!("s{i}"), 1, "v1")]).await });
        c.await.expect("join").expect("apply cluster");
        s.await.expect("join").expect("apply syncset");
    }
    for i in 0..30 {
        let key = fleetsync_model::WorkKey::new("default", format!("c{i}"), format!("s{i}"));
        assert!(a.status_get(&key).await.expect("status").is_some(), "key {key:?} was never enqueued");
    }
}

#[tokio::test]
async fn without_a_schema_the_search_path_decides() {
    let scratch = Scratch::new().await;
    scratch.admin.batch_execute(&format!("CREATE SCHEMA {}", scratch.schema.name)).await.expect("create schema");
    let url = scratch.url_named(&format!("fleetsync&options=-c%20search_path%3D{}", scratch.schema.name));
    let store = PgStore::connect(&url, None, StoreConfig::default()).await.expect("connect");
    assert_eq!(store.schema(), scratch.schema.name);
    store.objects_apply(vec![cluster("c1", &[])]).await.expect("apply");
    let n: i64 = scratch
        .admin
        .query_one(&format!("SELECT count(*) FROM {}.clusters", scratch.schema.name), &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(n, 1);
}

#[tokio::test]
async fn bad_connection_settings_name_the_problem() {
    let cfg = StoreConfig::default;
    let err = |r: fleetsync_store::Result<PgStore>| {
        let e = r.expect_err("must fail").to_string();
        eprintln!("{e}");
        e
    };

    let e = err(PgStore::connect("postgres://postgres@127.0.0.1:notaport/test", None, cfg()).await);
    assert!(e.contains("database URL") && e.contains("port"), "{e}");

    let e = err(PgStore::connect("postgres://postgres@127.0.0.1:1/test", None, cfg()).await);
    assert!(e.contains("connecting to PostgreSQL") && e.contains("127.0.0.1 port 1"), "{e}");
    assert!(e.to_lowercase().contains("refused"), "{e}");

    let url = "postgres://postgres:secret-pw@127.0.0.1:5432/fleetsync_no_such_db";
    let e = err(PgStore::connect(url, None, cfg()).await);
    assert!(e.contains("fleetsync_no_such_db") && e.contains("does not exist"), "{e}");
    assert!(!e.contains("secret-pw"), "the password must not be shown: {e}");

    let e = err(PgStore::connect(&test_database_url(), Some("Not A Schema"), cfg()).await);
    assert!(e.contains("invalid schema name"), "{e}");
}

/// The server's clock, in milliseconds since the epoch.
async fn server_now(admin: &tokio_postgres::Client) -> i64 {
    let row = admin
        .query_one("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::int8", &[])
        .await
        .expect("clock_timestamp");
    row.get(0)
}

/// With no clock given, the store's clock — what it stamps leases with, and what it
/// hands the runtime — is the database server's; one given (tests) is used instead.
#[tokio::test]
async fn the_stores_clock_is_the_databases_unless_one_is_given() {
    let scratch = Scratch::new().await;
    let store = scratch.store().await;
    let clock = store.clock();
    for _ in 0..3 {
        let before = server_now(&scratch.admin).await;
        let now = clock.now().millis();
        let after = server_now(&scratch.admin).await;
        assert!((before - 2..=after + 2).contains(&now), "{now} not within the server's [{before}, {after}]");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    store.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply");
    let ttl = Duration::from_secs(30);
    let before = server_now(&scratch.admin).await;
    store.work_claim(ClaimParams::new("w", 1, ttl)).await.expect("claim");
    let after = server_now(&scratch.admin).await;
    let sql = format!("SELECT lease_expires_at FROM {}.work", scratch.schema.name);
    let expires: i64 = scratch.admin.query_one(&sql, &[]).await.expect("lease").get(0);
    let stamped = expires - 30_000;
    assert!(
        (before - 2..=after + 2).contains(&stamped),
        "leased at {stamped}, not within the server's [{before}, {after}]"
    );

    let manual = std::sync::Arc::new(fleetsync_model::ManualClock::new(fleetsync_model::Timestamp(1_000)));
    let config = StoreConfig { clock: Some(manual), ..StoreConfig::default() };
    let fixed = PgStore::connect(&test_database_url(), Some(&scratch.schema.name), config).await.expect("connect");
    assert_eq!(fixed.clock().now(), fleetsync_model::Timestamp(1_000));
}
