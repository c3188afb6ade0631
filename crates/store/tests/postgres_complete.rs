//! The PostgreSQL store's claims and completions against a real server, beyond the
//! conformance suite: keys made ready behind a claimer's cursor or held back by the
//! cluster limit, completions of rows that moved since their claim (and the lock order
//! they keep), and a completion the server refuses as data.
//!
//! Database: `FLEETSYNC_TEST_DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/test`.
//! Each test works in a schema of its own, dropped at the end.

use fleetsync_store::conformance::{applied_completion, cluster, syncset};
use fleetsync_store::postgres::testing::test_database_url;
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::{ClaimParams, StoreConfig, StoreError};
use fleetsync_store::{Objects, StatusRead, WorkQueue};
use std::time::{Duration, Instant};
use tokio_postgres::NoTls;

mod support;

use support::{woken_within, Scratch};

/// ready in another process with an older clock reading than this claimer's cursor — a
/// transaction that read its clock before this claim and committed after it — is
/// announced with the NOTIFY and still claimed at once, not at the next full scan.
#[tokio::test]
async fn a_key_ready_behind_the_cursor_is_announced_and_claimed() {
    use fleetsync_model::ManualClock;
    use std::sync::Arc;
    let scratch = Scratch::new().await;
    let t0 = fleetsync_model::Timestamp(1_000_000);
    let (clock_here, clock_there) = (Arc::new(ManualClock::new(t0)), Arc::new(ManualClock::new(t0)));
    let url = test_database_url();
    let open = |clock: Arc<ManualClock>| {
        let config = StoreConfig { clock: Some(clock), ..StoreConfig::default() };
        PgStore::connect(&url, Some(&scratch.schema.name), config)
    };
    let here = open(clock_here.clone()).await.expect("connect here");
    let there = open(clock_there.clone()).await.expect("connect there");
    let claim = |s: PgStore| async move { s.work_claim(ClaimParams::new("w", 10, Duration::from_secs(30))).await };

    there.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply");
    clock_here.advance(Duration::from_secs(60));
    let first = claim(here.clone()).await.expect("claim");
    assert_eq!(first.len(), 1);
    assert!(
        claim(here.clone()).await.expect("claim").is_empty(),
        "nothing else: the cursor is now a minute ahead of `there`"
    );

    // `there` still reads the old time: its new key is due a minute before the cursor.
    let mut rx = here.subscribe();
    rx.borrow_and_update();
    there.objects_apply(vec![syncset("s2", 1, "v1")]).await.expect("apply s2");
    woken_within(&mut rx, Duration::from_secs(2)).await.expect("the NOTIFY arrives");
    let got = claim(here.clone()).await.expect("claim");
    assert_eq!(got.iter().map(|i| i.key.syncset.as_str()).collect::<Vec<_>>(), ["s2"], "claimed behind the cursor");
}

/// The claim's cursor moves past what it claimed but never past a key it held back: a
/// cluster at its limit keeps its ready keys claimable once a run ends.
#[tokio::test]
async fn keys_held_back_by_the_cluster_limit_stay_ahead_of_the_cursor() {
    use fleetsync_store::ClusterLimit;
    let scratch = Scratch::new().await;
    let store = scratch.store().await;
    let mut docs = vec![cluster("c1", &[("env", "prod")])];
    docs.extend((0..6).map(|i| syncset(&format!("s{i}"), 1, "v1")));
    store.objects_apply(docs).await.expect("apply");
    let limited = |in_flight: u32| ClaimParams {
        cluster_limit: Some(ClusterLimit {
            max: 2,
            in_flight: [(("default".to_string(), "c1".to_string()), in_flight)].into(),
        }),
        ..ClaimParams::new("w", 10, Duration::from_secs(30))
    };
    let first = store.work_claim(limited(0)).await.expect("claim");
    assert_eq!(first.len(), 2, "two at most in flight");
    assert!(store.work_claim(limited(2)).await.expect("claim").is_empty(), "the cluster is full");
    let applied = |items: &[fleetsync_store::ClaimedItem]| items.iter().map(applied_completion).collect::<Vec<_>>();
    store.work_complete(applied(&first)).await.expect("complete");
    let mut claimed: Vec<String> = first.iter().map(|i| i.key.syncset.clone()).collect();
    while claimed.len() < 6 {
        let got = store.work_claim(limited(0)).await.expect("claim");
        assert_eq!(got.len(), 2, "the held-back keys are claimable again (have {claimed:?})");
        store.work_complete(applied(&got)).await.expect("complete");
        claimed.extend(got.into_iter().map(|i| i.key.syncset));
    }
    claimed.sort();
    assert_eq!(claimed, ["s0", "s1", "s2", "s3", "s4", "s5"]);
}

/// A completion locks its rows by the ids the claim remembered, and must see their
/// versions as they are now: here one key was marked dirty by a new SyncSet revision and
/// another's lease was renewed through another store since the claim. The dirty key goes
/// back to pending and runs again, the others are applied.
#[tokio::test]
async fn a_completion_finds_rows_that_moved_since_the_claim() {
    use fleetsync_model::Phase;
    use fleetsync_store::{CompleteOutcome, RenewParams};
    let scratch = Scratch::new().await;
    let (here, there) = (scratch.store().await, scratch.store().await);
    let mut docs = vec![cluster("c1", &[("env", "prod")])];
    docs.extend(["s1", "s2", "s3"].map(|s| syncset(s, 1, "v1")));
    here.objects_apply(docs).await.expect("apply");
    let ttl = Duration::from_secs(30);
    let items = here.work_claim(ClaimParams::new("w", 10, ttl)).await.expect("claim");
    let claimed = |s: &str| items.iter().find(|i| i.key.syncset == s).cloned().expect("claimed");
    let (s1, s2, s3) = (claimed("s1"), claimed("s2"), claimed("s3"));

    here.objects_apply(vec![syncset("s1", 1, "v2")]).await.expect("a new revision while s1 runs");
    let renewal = RenewParams { leases: vec![(s3.key.clone(), s3.fence)], lease_ttl: ttl };
    assert!(there.lease_renew(renewal).await.expect("renew there").is_empty());

    let done = vec![applied_completion(&s3), applied_completion(&s1), applied_completion(&s2)];
    let out = here.work_complete(done).await.expect("complete");
    use CompleteOutcome::Committed;
    assert_eq!(out, [Committed(Phase::Applied), Committed(Phase::Pending), Committed(Phase::Applied)]);
    for (item, phase, generation) in [(&s1, Phase::Pending, 2), (&s2, Phase::Applied, 1), (&s3, Phase::Applied, 1)] {
        let st = here.status_get(&item.key).await.expect("status").expect("exists");
        assert_eq!((st.phase, st.generation, st.observed_generation), (phase, generation, 1), "{}", item.key);
    }

    let again = here.work_claim(ClaimParams::new("w", 10, ttl)).await.expect("claim again");
    assert_eq!(again.iter().map(|i| (i.key.syncset.as_str(), i.generation)).collect::<Vec<_>>(), [("s1", 2)]);
    assert_eq!(here.work_complete(vec![applied_completion(&s1)]).await.expect("complete"), [CompleteOutcome::Stale]);
    let out = here.work_complete(vec![applied_completion(&again[0])]).await.expect("complete");
    assert_eq!(out, [Committed(Phase::Applied)]);
}

/// A lease taken over by another process leaves this one's fence stale: its completion
/// is refused, and the new holder's goes through.
#[tokio::test]
async fn a_completion_of_a_lease_taken_over_elsewhere_is_stale() {
    use fleetsync_model::{ManualClock, Phase, Timestamp};
    use fleetsync_store::CompleteOutcome;
    use std::sync::Arc;
    let scratch = Scratch::new().await;
    let t0 = Timestamp(1_000_000);
    let (clock_here, clock_there) = (Arc::new(ManualClock::new(t0)), Arc::new(ManualClock::new(t0)));
    let url = test_database_url();
    let open = |clock: Arc<ManualClock>| {
        let config = StoreConfig { clock: Some(clock), ..StoreConfig::default() };
        PgStore::connect(&url, Some(&scratch.schema.name), config)
    };
    let here = open(clock_here).await.expect("connect here");
    let there = open(clock_there.clone()).await.expect("connect there");
    here.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")]).await.expect("apply");
    let ttl = Duration::from_secs(30);
    let mine = here.work_claim(ClaimParams::new("a", 1, ttl)).await.expect("claim").remove(0);
    clock_there.advance(Duration::from_secs(60));
    let theirs = there.work_claim(ClaimParams::new("b", 1, ttl)).await.expect("take over").remove(0);
    assert!(theirs.fence > mine.fence);

    assert_eq!(here.work_complete(vec![applied_completion(&mine)]).await.expect("complete"), [CompleteOutcome::Stale]);
    let st = here.status_get(&mine.key).await.expect("status").expect("exists");
    assert_eq!(st.phase, Phase::Applying, "the new holder's run is untouched");
    let out = there.work_complete(vec![applied_completion(&theirs)]).await.expect("complete");
    assert_eq!(out, [CompleteOutcome::Committed(Phase::Applied)]);
}

/// A completion locks its rows in one statement, in id order, like every writer that
/// waits for `work` rows: while another transaction holds s2 (as an enqueue in progress
/// would), a completion of s1 and s2 (s2 has the lower id) waits for s2 holding nothing
/// yet (s1 is free to take), so a writer holding s2 and waiting for s1 cannot deadlock
/// with it; then it completes as it should.
#[tokio::test]
async fn a_completion_waits_in_id_order() {
    use fleetsync_model::Phase;
    use fleetsync_store::CompleteOutcome::Committed;
    let scratch = Scratch::new().await;
    let app = format!("fs_order_{:08x}", rand::random::<u32>());
    // No connection here may sit in a transaction for long: a failing test must not leave
    // locks behind, or dropping its schema would wait for them forever.
    let url = scratch.url_named(&format!("{app}&options=-c%20idle_in_transaction_session_timeout%3D20s"));
    let options = PgOptions { schema: Some(scratch.schema.name.clone()), ..PgOptions::default() };
    let store = PgStore::connect_with(&url, options, StoreConfig::default()).await.expect("connect");
    // s2 is applied first, so its row has the lower id: id order (s2, s1) differs from
    // key order (s1, s2), and the test can tell which one the completion follows.
    store.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s2", 1, "v1")]).await.expect("apply s2");
    store.objects_apply(vec![syncset("s1", 1, "v1")]).await.expect("apply s1");
    let mut items = store.work_claim(ClaimParams::new("w", 10, Duration::from_secs(30))).await.expect("claim");
    assert_eq!(items.len(), 2, "both keys claimed");
    items.sort_by(|a, b| a.key.cmp(&b.key));
    store.objects_apply(vec![syncset("s1", 1, "v2")]).await.expect("a new revision while s1 runs");

    // Another writer holds s2's row (as an enqueue in progress would).
    let (holder, conn) = tokio_postgres::connect(&test_database_url(), NoTls).await.expect("connect");
    tokio::spawn(conn);
    let hold = format!(
        "BEGIN; SET LOCAL idle_in_transaction_session_timeout = '20s';
         SELECT 1 FROM {}.work WHERE syncset = 's2' FOR UPDATE",
        scratch.schema.name
    );
    holder.batch_execute(&hold).await.expect("hold s2");
    let completing = {
        // Completions in key order: s1 first, then s2.
        let (store, done) = (store.clone(), items.iter().map(applied_completion).collect());
        tokio::spawn(async move { store.work_complete(done).await })
    };
    let waiting = "SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'";
    let deadline = Instant::now() + Duration::from_secs(10);
    while scratch.admin.query(waiting, &[&app]).await.expect("poll").is_empty() {
        if completing.is_finished() {
            panic!("the completion ended without waiting: {:?}", completing.await);
        }
        assert!(Instant::now() < deadline, "the completion never waited for s2");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Waiting in id order: for s2 first, holding nothing yet (s1 is free to take). In key
    // order it would hold s1 while it waits for s2.
    let s1 = format!("SELECT 1 FROM {}.work WHERE syncset = 's1' FOR UPDATE NOWAIT", scratch.schema.name);
    let s1_free = holder.batch_execute(&s1).await;
    holder.batch_execute("COMMIT").await.expect("let s1 and s2 go");
    let out = completing.await.expect("join").expect("the completion goes through once s2 is free");
    s1_free.expect("s1 is not held while the completion waits for s2");
    assert_eq!(out, [Committed(Phase::Pending), Committed(Phase::Applied)], "s1 was dirty, s2 clean");
}

/// A completion of leases this store did not claim (another store, as after a take-over
/// by a process that kept the key's run going) reads the rows before deciding: a dirty
/// key goes back to pending, a clean one is applied, a stale lease is refused.
#[tokio::test]
async fn leases_claimed_through_another_store_complete_by_reading_their_rows() {
    use fleetsync_model::Phase;
    use fleetsync_store::CompleteOutcome::{Committed, Stale};
    let scratch = Scratch::new().await;
    let (claimer, completer) = (scratch.store().await, scratch.store().await);
    let docs = vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1"), syncset("s2", 1, "v1")];
    claimer.objects_apply(docs).await.expect("apply");
    let mut items = claimer.work_claim(ClaimParams::new("w", 10, Duration::from_secs(30))).await.expect("claim");
    items.sort_by(|a, b| a.key.cmp(&b.key));
    claimer.objects_apply(vec![syncset("s1", 1, "v2")]).await.expect("a new revision while s1 runs");
    // A completion with a stale fence comes first: the fence check refuses it, and the
    // key's own completion after it goes through.
    let mut stale = applied_completion(&items[1]);
    stale.fence = fleetsync_store::Fence::new(stale.fence.get() - 1_000);
    let mut done = vec![stale];
    done.extend(items.iter().map(applied_completion));
    let out = completer.work_complete(done).await.expect("complete through the other store");
    assert_eq!(out, [Stale, Committed(Phase::Pending), Committed(Phase::Applied)]);
    let st = completer.status_get(&items[1].key).await.expect("status").expect("exists");
    assert_eq!((st.phase, st.observed_generation), (Phase::Applied, 1));
}

/// A completion whose error message holds a NUL byte (no text column can hold one)
/// fails its whole call as refused data — its reason names the problem, not the value —
/// and nothing of the batch is written; the store does not try it again.
#[tokio::test]
async fn a_completion_with_a_nul_byte_is_refused_as_data_and_writes_nothing() {
    use fleetsync_store::{Completion, RunOutcome};
    let scratch = Scratch::new().await;
    let store = scratch.store().await;
    store
        .objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1"), syncset("s2", 1, "v1")])
        .await
        .expect("apply");
    let items = store.work_claim(ClaimParams::new("w", 10, Duration::from_secs(30))).await.expect("claim");
    assert_eq!(items.len(), 2);
    let bad = Completion {
        key: items[1].key.clone(),
        fence: items[1].fence,
        outcome: RunOutcome::Failed { error: "secret-ish \0 value".into() },
        resources: vec![],
    };
    let started = Instant::now();
    let err = store.work_complete(vec![applied_completion(&items[0]), bad]).await.expect_err("refused");
    assert!(started.elapsed() < Duration::from_millis(500), "not tried again: {:?}", started.elapsed());
    let StoreError::Refused { reason, .. } = &err else { panic!("not a refusal: {err:?}") };
    assert!(reason.contains("SQLSTATE 22021") && !reason.contains("secret-ish"), "{reason}");
    assert!(!err.is_transient());
    let sql = format!("SELECT count(*) FROM {}.work WHERE phase = 'running'", scratch.schema.name);
    let running: i64 = scratch.admin.query_one(&sql, &[]).await.expect("count").get(0);
    assert_eq!(running, 2, "nothing of the batch was written");
}
