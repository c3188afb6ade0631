//! The member registry's checks: heartbeats, expiry and the shards they own.

use super::*;

/// Members live until their TTL runs out or they leave; a claim (and the next-ready
/// time) can be narrowed to some shards, and a key's shard is its cluster's.
pub async fn members_and_shards(h: &dyn Harness) {
    use fleetsync_model::shard::shard_of;
    let (s, clock) = open(h).await;
    let beat = |id: &str, in_flight| crate::MemberBeat {
        id: id.into(),
        ttl: Duration::from_secs(10),
        in_flight,
        max_in_flight: 64,
    };
    s.member_heartbeat(beat("w1", 3)).await.expect("beat");
    let live = s.member_heartbeat(beat("w2", 0)).await.expect("beat");
    let seen: Vec<_> = live.iter().map(|m| (m.id.as_str(), m.in_flight, m.max_in_flight)).collect();
    assert_eq!(seen, [("w1", 3, 64), ("w2", 0, 64)], "each member's keys in flight and its limit");
    clock.advance(Duration::from_secs(6));
    s.member_heartbeat(beat("w1", 1)).await.expect("beat");
    clock.advance(Duration::from_secs(6));
    let live = s.member_list().await.expect("list");
    assert_eq!(live.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(), ["w1"], "w2 missed its heartbeat");
    s.member_leave("w1").await.expect("leave");
    assert!(s.member_list().await.expect("list").is_empty());

    // Two clusters in different shards.
    let other = (2..100)
        .map(|i| format!("c{i}"))
        .find(|c| shard_of("default", c) != shard_of("default", "c1"))
        .expect("a cluster in another shard");
    s.objects_apply(vec![
        cluster("c1", &[("env", "prod")]),
        cluster(&other, &[("env", "prod")]),
        syncset("s1", 1, "v"),
    ])
    .await
    .expect("apply");
    let (mine, theirs) = (shard_of("default", "c1"), shard_of("default", &other));
    let claim_in = |shards: Vec<u16>| ClaimParams { shards: Some(shards), ..claim_params("w", 10) };
    let got = s.work_claim(claim_in(vec![mine])).await.expect("claim");
    assert_eq!(got.iter().map(|i| i.key.cluster.as_str()).collect::<Vec<_>>(), ["c1"], "only the shard asked for");
    assert_eq!(
        s.work_next_ready_at(Some(&[mine])).await.expect("next"),
        Some(clock.now().plus(TTL)),
        "only c1's lease"
    );
    assert!(s.work_next_ready_at(Some(&[theirs])).await.expect("next").is_some(), "the other cluster's key is ready");
    assert!(s.work_claim(claim_in(vec![mine])).await.expect("claim").is_empty());
    assert_eq!(s.work_claim(claim_in(vec![theirs])).await.expect("claim").len(), 1);
}
