//! The event log's checks: order, retention behind a horizon, wake-ups for watchers,
//! consumer cursors.

use super::*;

/// Every accepted change is in the log, in commit order.
pub async fn events_in_order(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    s.objects_apply(vec![syncset("s1", 2, "v2")]).await.expect("update");
    s.object_delete(Kind::SyncSet, "default", "s1").await.expect("delete");
    let events = s.events_read(0, 100).await.expect("events");
    let seen: Vec<(String, String, i64)> =
        events.iter().map(|e| (e.kind.clone(), e.action.clone(), e.generation)).collect();
    let want =
        [("Cluster", "Created", 1), ("SyncSet", "Created", 1), ("SyncSet", "Updated", 2), ("SyncSet", "Deleted", 2)];
    let want: Vec<(String, String, i64)> = want.iter().map(|(k, a, g)| (k.to_string(), a.to_string(), *g)).collect();
    assert_eq!(seen, want);
    assert!(events.windows(2).all(|w| w[0].seq < w[1].seq));
    assert_eq!(s.events_read(events[1].seq, 100).await.expect("events").len(), 2, "reading from a cursor");
}

/// One object's events: only its own, newest first, paged back with `before`, and the
/// same as those the whole log holds for it.
pub async fn an_objects_events_newest_first(h: &dyn Harness) {
    let (s, _) = open(h).await;
    one_key(&*s).await;
    for v in 2..6 {
        s.objects_apply(vec![syncset("s1", 2, &format!("v{v}"))]).await.expect("update");
    }
    s.objects_apply(vec![cluster("c2", &[("env", "dev")])]).await.expect("another object");
    let object =
        |kind: &str, name: &str| EventObject { tenant: "default".into(), kind: kind.into(), name: name.into() };
    let all = s.events_read(0, 1_000).await.expect("the log");
    let mut want: Vec<u64> = all.iter().filter(|e| e.kind == "SyncSet" && e.name == "s1").map(|e| e.seq).collect();
    want.reverse();
    assert_eq!(want.len(), 5, "created and four updates");

    let first = s.events_of(&object("SyncSet", "s1"), None, 3).await.expect("newest three");
    assert_eq!(first.iter().map(|e| e.seq).collect::<Vec<_>>(), want[..3]);
    assert!(first.iter().all(|e| e.kind == "SyncSet" && e.name == "s1" && e.tenant == "default"));
    let rest = s.events_of(&object("SyncSet", "s1"), Some(first[2].seq), 3).await.expect("the page before");
    assert_eq!(rest.iter().map(|e| e.seq).collect::<Vec<_>>(), want[3..]);

    assert_eq!(s.events_of(&object("Cluster", "c2"), None, 10).await.expect("c2").len(), 1);
    assert!(s.events_of(&object("Cluster", "s1"), None, 10).await.expect("wrong kind").is_empty());
    let other_tenant = EventObject { tenant: "other".into(), ..object("SyncSet", "s1") };
    assert!(s.events_of(&other_tenant, None, 10).await.expect("another tenant").is_empty());
}

fn expired(r: crate::Result<Vec<crate::Event>>) -> (u64, u64) {
    match r {
        Err(StoreError::CursorExpired { cursor, horizon }) => (cursor, horizon),
        other => panic!("expected CursorExpired, got {other:?}"),
    }
}

/// Retention: a trim deletes the oldest events and raises a recorded horizon. A cursor
/// older than the horizon is refused (never answered with a silent gap), one at or after
/// it reads on. The horizon survives a reopen, and a log emptied by a trim never hands
/// out a trimmed sequence number again.
pub async fn events_trimmed_behind_a_horizon(h: &dyn Harness) {
    let clock = Arc::new(ManualClock::new(T0));
    let s = h.open(config(clock.clone())).await;
    let bump = |v: usize| vec![syncset("s1", 1, &format!("v{v}"))];
    for v in 0..10 {
        s.objects_apply(bump(v)).await.expect("apply");
    }
    clock.advance(Duration::from_secs(60));
    for v in 10..15 {
        s.objects_apply(bump(v)).await.expect("apply");
    }
    let all = seqs(&*s, 0).await;
    assert_eq!(all.len(), 15);
    let hour = Some(Duration::from_secs(3600));
    let nothing = s.events_trim(EventRetention { max_events: Some(100), max_age: hour }).await.expect("trim");
    assert_eq!(nothing, EventsTrimmed { deleted: 0, horizon: 0 });
    assert_eq!(seqs(&*s, 0).await, all, "no horizon yet: cursor 0 reads everything");

    // By count: the newest 12 events stay.
    let t = s.events_trim(EventRetention { max_events: Some(12), max_age: None }).await.expect("trim by count");
    let horizon = all[2];
    assert_eq!(t, EventsTrimmed { deleted: 3, horizon });
    assert_eq!(expired(s.events_read(0, 10).await), (0, horizon));
    assert_eq!(expired(s.events_read(horizon - 1, 10).await), (horizon - 1, horizon));
    assert_eq!(seqs(&*s, horizon).await, all.iter().copied().filter(|q| *q > horizon).collect::<Vec<_>>());
    let again = s.events_trim(EventRetention { max_events: Some(12), max_age: None }).await.expect("trim again");
    assert_eq!(again, EventsTrimmed { deleted: 0, horizon }, "trimming is idempotent");

    // By age: the ten events of the first minute are older than 30 s, the rest are not.
    clock.advance(Duration::from_secs(10));
    let half_minute = EventRetention { max_events: None, max_age: Some(Duration::from_secs(30)) };
    let t = s.events_trim(half_minute).await.expect("trim by age");
    let horizon = all[10] - 1;
    assert_eq!(t.horizon, horizon);
    assert_eq!(seqs(&*s, horizon).await, all[10..].to_vec());
    drop(s);

    let s = h.open(config(clock.clone())).await;
    assert_eq!(expired(s.events_read(horizon - 1, 10).await), (horizon - 1, horizon), "the horizon is durable");
    assert_eq!(seqs(&*s, horizon).await, all[10..].to_vec());

    // Everything too old: the log is emptied, the horizon is the last number used.
    clock.advance(Duration::from_secs(3600));
    let t = s.events_trim(half_minute).await.expect("trim all");
    assert_eq!(t, EventsTrimmed { deleted: 5, horizon: all[14] });
    assert!(seqs(&*s, all[14]).await.is_empty());
    assert_eq!(expired(s.events_read(all[13], 10).await).1, all[14]);
    assert!(
        s.queue_stats().await.expect("stats").last_event_seq >= all[14],
        "the last sequence number is not forgotten"
    );
    s.objects_apply(bump(99)).await.expect("apply");
    let next = seqs(&*s, all[14]).await;
    assert_eq!(next.len(), 1);
    assert!(next[0] > all[14], "a trimmed sequence number is never used again");
}

/// A cluster of `tenant` whose labels carry `v` (each apply of a new `v` is an event).
fn tenant_cluster(tenant: &str, v: usize) -> Document {
    let mut c = cluster("c", &[("v", &v.to_string())]);
    if let Document::Cluster(c) = &mut c {
        c.metadata.namespace = tenant.into();
    }
    c
}

/// Retention and reads by tenant: each tenant keeps its own newest events and its own
/// horizon, so one tenant's volume never pushes out another's record; a read of some
/// tenants returns theirs only, checked against their horizon; the newest events read
/// back from the top, of some tenants or of all.
pub async fn events_kept_and_read_per_tenant(h: &dyn Harness) {
    let clock = Arc::new(ManualClock::new(T0));
    let s = h.open(config(clock.clone())).await;
    let (a, b) = (vec!["a".to_string()], vec!["b".to_string()]);
    s.objects_apply(vec![tenant_cluster("b", 0)]).await.expect("b's first change");
    for v in 0..30 {
        s.objects_apply(vec![tenant_cluster("a", v)]).await.expect("a's change");
    }
    s.objects_apply(vec![tenant_cluster("b", 1)]).await.expect("b's second change");
    let all = seqs(&*s, 0).await;
    assert_eq!(all.len(), 32);
    let of = |events: Vec<crate::Event>| events.iter().map(|e| (e.tenant.clone(), e.seq)).collect::<Vec<_>>();
    let b_events = s.events_read_of(&b, 0, 10).await.expect("b's");
    assert_eq!(of(b_events), [("b".to_string(), all[0]), ("b".to_string(), all[31])]);
    let first_of_a = s.events_read_of(&a, 0, 2).await.expect("a's");
    assert_eq!(first_of_a.iter().map(|e| e.seq).collect::<Vec<_>>(), all[1..3]);

    // Five per tenant: a loses 25, b keeps both, however many a wrote after it.
    let t = s.events_trim(EventRetention { max_events: Some(5), max_age: None }).await.expect("trim");
    let a_horizon = all[25];
    assert_eq!(t, EventsTrimmed { deleted: 25, horizon: a_horizon });
    assert_eq!(s.events_read_of(&b, 0, 10).await.expect("b's record stays").len(), 2);
    assert_eq!(expired(s.events_read_of(&a, 0, 10).await), (0, a_horizon), "a's cursor fell off a's log");
    assert_eq!(expired(s.events_read(0, 10).await), (0, a_horizon), "a reader of every tenant lost a's events");
    let both = vec!["a".to_string(), "b".to_string()];
    assert_eq!(expired(s.events_read_of(&both, 0, 10).await).1, a_horizon);
    let kept = s.events_read_of(&both, a_horizon, 10).await.expect("both from the horizon");
    assert_eq!(kept.iter().map(|e| e.seq).collect::<Vec<_>>(), all[26..]);

    // The newest, newest first: of all, of some, and back from `before`.
    let seq = |events: Vec<crate::Event>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(seq(s.events_newest(None, None, 2).await.expect("newest")), [all[31], all[30]]);
    assert_eq!(seq(s.events_newest(Some(&b), None, 5).await.expect("b's newest")), [all[31], all[0]]);
    assert_eq!(seq(s.events_newest(Some(&a), Some(all[30]), 2).await.expect("a's, back")), [all[29], all[28]]);
    assert!(s.events_newest(Some(&["nobody".to_string()]), None, 5).await.expect("no events").is_empty());
    assert_eq!(s.events_head().await.expect("head"), all[31]);

    // By age, per tenant: a wrote nothing for an hour and is emptied; b's newest change
    // is young, and its older one is kept only while b's log is young from there on.
    clock.advance(Duration::from_secs(3600));
    s.objects_apply(vec![tenant_cluster("b", 2)]).await.expect("b's third change");
    let young = s.events_head().await.expect("head");
    let t = s
        .events_trim(EventRetention { max_events: None, max_age: Some(Duration::from_secs(60)) })
        .await
        .expect("trim by age");
    assert_eq!(t, EventsTrimmed { deleted: 7, horizon: young - 1 }, "a's five and b's two old ones");
    assert!(s.events_read_of(&a, all[30], 10).await.expect("a from its horizon").is_empty());
    assert_eq!(seq(s.events_read_of(&b, young - 1, 10).await.expect("b's young one")), [young]);
    drop(s);
    let s = h.open(config(clock.clone())).await;
    assert_eq!(expired(s.events_read_of(&b, 0, 10).await), (0, young - 1), "a tenant's horizon is durable");
}

/// Event watchers are woken by every commit that appends events: object writes,
/// completions (status transitions) and deletes.
pub async fn event_watchers_woken(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let limit = Duration::from_secs(5);
    let mut events = s.events_subscribe();
    events.borrow_and_update();
    one_key(&*s).await;
    tokio::time::timeout(limit, events.changed()).await.expect("woken by an apply").expect("open");
    let item = claim(&*s, "w", 1).await.remove(0);
    events.borrow_and_update();
    complete(&*s, &item, applied(&item)).await;
    tokio::time::timeout(limit, events.changed()).await.expect("woken by a completion").expect("open");
    events.borrow_and_update();
    s.object_delete(Kind::Cluster, "default", "c1").await.expect("delete");
    tokio::time::timeout(limit, events.changed()).await.expect("woken by a delete").expect("open");
}

/// A consumer's cursor starts unknown, moves forward with each acknowledgement, never
/// back, is kept per name, and survives a reopen.
pub async fn consumer_cursors_only_move_forward(h: &dyn Harness) {
    let clock = Arc::new(ManualClock::new(T0));
    {
        let s = h.open(config(clock.clone())).await;
        assert_eq!(s.consumer_get("audit").await.expect("get"), None, "an unknown consumer starts at 0");
        assert_eq!(s.consumer_ack("audit", 5).await.expect("ack"), 5);
        assert_eq!(s.consumer_ack("audit", 3).await.expect("late ack"), 5, "an older ack does not move it back");
        assert_eq!(s.consumer_ack("audit", 5).await.expect("repeated ack"), 5);
        assert_eq!(s.consumer_ack("audit", 9).await.expect("ack"), 9);
        assert_eq!(s.consumer_ack("mailer", 2).await.expect("other"), 2);
        assert_eq!(s.consumer_get("audit").await.expect("get"), Some(9));
    }
    let s = h.open(config(clock)).await;
    assert_eq!(s.consumer_get("audit").await.expect("get after reopen"), Some(9), "cursors are durable");
    assert_eq!(s.consumer_get("mailer").await.expect("get"), Some(2), "each name has its own cursor");
}

/// Names that cannot be stored are refused with a message saying why.
pub async fn consumer_names_are_checked(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let long = "x".repeat(crate::MAX_CONSUMER_NAME + 1);
    for bad in ["", long.as_str(), "new\nline"] {
        let get = s.consumer_get(bad).await;
        assert!(matches!(get, Err(StoreError::InvalidConsumerName { .. })), "get {bad:?}: {get:?}");
        let ack = s.consumer_ack(bad, 1).await;
        assert!(matches!(ack, Err(StoreError::InvalidConsumerName { .. })), "ack {bad:?}: {ack:?}");
    }
    let name = "x".repeat(crate::MAX_CONSUMER_NAME);
    assert_eq!(s.consumer_ack(&name, 1).await.expect("longest name"), 1);
}
