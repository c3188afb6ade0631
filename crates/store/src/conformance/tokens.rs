//! Hub-issued tokens and the actor of each change.

use super::*;
use fleetsync_model::{Grant, TokenRecord};

fn record(name: &str, grant: &str, expires_at: Option<i64>) -> TokenRecord {
    TokenRecord {
        name: name.into(),
        grant: Grant::parse(grant).expect("grant"),
        created_at: T0,
        expires_at: expires_at.map(Timestamp),
        created_by: "test".into(),
    }
}

/// Tokens are kept by hash and found by it; a name is taken once per tenant (the
/// tenant of the grant), and a hub-wide (fleet-admin) token's name once in the store;
/// revoking a tenant's token removes that one only; every shape of grant and the
/// expiry come back as written; a reopened store still has them.
pub async fn tokens_found_by_hash_and_revoked(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let records = [
        (record("ci", "team-a:editor", Some(T0.millis() + 60_000)), [1u8; 32]),
        (record("ops", "fleet-admin", None), [2u8; 32]),
        (record("agent-c1", "team-a:agent:c1", None), [3u8; 32]),
        (record("ci", "team-b:viewer", None), [5u8; 32]),
    ];
    for (r, hash) in &records {
        assert!(s.token_create(r, hash).await.expect("create"), "{} {}", r.name, r.grant);
    }
    let taken = [
        (record("ci", "team-a:viewer", None), "in its tenant"),
        (record("agent-c1", "team-a:admin", None), "in its tenant, whatever the role"),
        (record("ops", "team-c:admin", None), "by a hub-wide token"),
        (record("ci", "fleet-admin", None), "a hub-wide name taken by a tenant's token"),
    ];
    for (r, why) in &taken {
        assert!(!s.token_create(r, &[9u8; 32]).await.expect("create"), "{} {}: {why}", r.name, r.grant);
    }
    assert_eq!(s.token_find(&[9u8; 32]).await.expect("find"), None, "nothing written for a taken name");
    for (r, hash) in &records {
        assert_eq!(s.token_find(hash).await.expect("find").as_ref(), Some(r));
    }
    assert_eq!(s.token_find(&[7u8; 32]).await.expect("find"), None);
    let listed: Vec<String> =
        s.token_list().await.expect("list").into_iter().map(|r| format!("{} {}", r.name, r.grant)).collect();
    assert_eq!(listed, ["agent-c1 team-a:agent:c1", "ci team-a:editor", "ci team-b:viewer", "ops fleet-admin"]);

    assert!(!s.token_revoke(Some("team-c"), "ci").await.expect("revoke in another tenant"));
    assert!(!s.token_revoke(None, "ci").await.expect("revoke hub-wide"));
    assert!(s.token_revoke(Some("team-a"), "ci").await.expect("revoke"));
    assert!(!s.token_revoke(Some("team-a"), "ci").await.expect("revoke again"));
    assert_eq!(s.token_find(&[1u8; 32]).await.expect("find"), None);
    assert_eq!(s.token_find(&[5u8; 32]).await.expect("find").as_ref(), Some(&records[3].0), "team-b's ci stays");
    assert!(!s.token_revoke(Some("team-a"), "ops").await.expect("a hub-wide token is not a tenant's"));
    let s = h.open(StoreConfig::default()).await;
    assert_eq!(s.token_find(&[2u8; 32]).await.expect("find after reopen").as_ref(), Some(&records[1].0));
    assert!(s.token_revoke(None, "ops").await.expect("revoke hub-wide"));
}

/// Applies and deletes by an actor put it on their events; changes by no one leave it
/// out, and so do status events.
pub async fn changes_record_their_actor(h: &dyn Harness) {
    let (s, _) = open(h).await;
    s.objects_apply_by(vec![cluster("c1", &[("env", "prod")])], Some("token:alice")).await.expect("apply");
    s.objects_apply(vec![syncset("s1", 1, "v1")]).await.expect("apply");
    s.object_delete_by(Kind::SyncSet, "default", "s1", Some("oidc:bob")).await.expect("delete");
    let events = s.events_read(0, 100).await.expect("events");
    let actors: Vec<(String, Option<String>)> = events.iter().map(|e| (e.action.clone(), e.actor.clone())).collect();
    let want = [("Created", Some("token:alice")), ("Created", None), ("Deleted", Some("oidc:bob"))];
    let want: Vec<(String, Option<String>)> =
        want.iter().map(|(a, b)| (a.to_string(), b.map(str::to_string))).collect();
    assert_eq!(actors, want);
}

/// A token past its expiry is still found (expiry is the caller's to judge, with its
/// clock), as given; an unknown name revokes nothing.
pub async fn expired_tokens_are_found_and_unknown_names_not_revoked(h: &dyn Harness) {
    let (s, clock) = open(h).await;
    let expired = record("old", "team-a:viewer", Some(T0.millis() - 1));
    assert!(s.token_create(&expired, &[4u8; 32]).await.expect("create"));
    let found = s.token_find(&[4u8; 32]).await.expect("find").expect("an expired token is still found");
    assert_eq!(found, expired);
    assert!(found.expired(clock.now()), "the caller sees it expired");
    assert!(!s.token_revoke(Some("team-a"), "nope").await.expect("revoke unknown"));
    assert_eq!(s.token_list().await.expect("list"), [expired]);
}

/// Own writes and status changes are the hub's: their events name no actor, whoever
/// made the change the run followed; a delete of nothing logs nothing.
pub async fn own_writes_and_status_changes_name_no_actor(h: &dyn Harness) {
    let (s, _) = open(h).await;
    s.objects_apply_by(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1")], Some("token:alice"))
        .await
        .expect("apply");
    let item = claim(&*s, "w", 1).await.remove(0);
    let own = OwnWrite { key: item.key.clone(), fence: item.fence };
    s.objects_apply_own(vec![syncset("s1", 1, "annotated")], own).await.expect("own write");
    complete(&*s, &item, applied(&item)).await;
    let before = seqs(&*s, 0).await;
    let err = s.object_delete_by(Kind::Cluster, "default", "nope", Some("token:alice")).await.expect_err("absent");
    assert!(matches!(err, StoreError::NotFound { .. }), "{err}");
    assert_eq!(seqs(&*s, 0).await, before, "nothing logged");

    let events = s.events_read(0, 100).await.expect("events");
    let seen: Vec<_> = events.iter().map(|e| (e.kind.as_str(), e.action.as_str(), e.actor.as_deref())).collect();
    assert_eq!(
        seen,
        [
            ("Cluster", "Created", Some("token:alice")),
            ("SyncSet", "Created", Some("token:alice")),
            ("SyncSet", "Updated", None),
            ("Status", "Applied", None),
        ]
    );
}
