//! Shards and who owns them.
//!
//! Keys map to a fixed number of shards **by cluster** (every SyncSet of a cluster
//! lands in the same shard, so one process keeps that cluster's connections warm).
//! Shards map to live members by **rendezvous hashing** (highest random weight): each
//! member scores each shard, the highest score owns it. A member joining takes only the
//! shards it now scores highest on; a member leaving gives away only its own. Nothing
//! else moves, and every process computes the same owners from the same member list.
//!
//! The hash must be the same in every process and every build, so it is spelled out
//! here (FNV-1a, then a SplitMix64 finaliser for spread) rather than taken from
//! `std`'s `DefaultHasher`, whose output may change between Rust releases.

/// How many shards there are. Fixed: changing it moves almost every key.
pub const SHARDS: u16 = 256;

/// The shard of a cluster's keys.
pub fn shard_of(tenant: &str, cluster: &str) -> u16 {
    let h = mix(fnv1a(&[tenant.as_bytes(), b"/", cluster.as_bytes()]));
    (h % u64::from(SHARDS)) as u16
}

/// The owner of `shard` among `members` (ids), or `None` if there are none.
pub fn owner_of(shard: u16, members: &[String]) -> Option<&str> {
    members.iter().max_by_key(|m| (score(m, shard), m.as_str())).map(String::as_str)
}

/// The shards `member` owns among `members` (which should include it).
pub fn owned_by(member: &str, members: &[String]) -> Vec<u16> {
    (0..SHARDS).filter(|s| owner_of(*s, members) == Some(member)).collect()
}

/// How many shards each member owns, in the order of `members`.
pub fn shard_counts(members: &[String]) -> Vec<usize> {
    let mut counts = vec![0; members.len()];
    for s in 0..SHARDS {
        if let Some(owner) = owner_of(s, members) {
            if let Some(i) = members.iter().position(|m| m == owner) {
                counts[i] += 1;
            }
        }
    }
    counts
}

fn score(member: &str, shard: u16) -> u64 {
    mix(fnv1a(&[member.as_bytes(), b"#", &shard.to_le_bytes()]))
}

fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// SplitMix64's finaliser: FNV alone spreads short, similar inputs poorly.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("worker-{i}")).collect()
    }

    #[test]
    fn the_hash_is_stable_across_builds() {
        // Pinned values: a change here would move every key of every running fleet.
        assert_eq!(shard_of("default", "cluster-0000"), shard_of("default", "cluster-0000"));
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert!(shard_of("default", "a") < SHARDS);
    }

    #[test]
    fn shards_spread_evenly_over_members() {
        let members = ids(4);
        let counts = shard_counts(&members);
        assert_eq!(counts.iter().sum::<usize>(), SHARDS as usize);
        assert!(counts.iter().all(|c| (40..=90).contains(c)), "{counts:?}");
        let clusters: Vec<u16> = (0..1000).map(|i| shard_of("default", &format!("cluster-{i:04}"))).collect();
        let mut per_shard = vec![0; SHARDS as usize];
        for s in clusters {
            per_shard[s as usize] += 1;
        }
        assert!(per_shard.iter().all(|n| *n <= 12), "clusters spread over shards: {per_shard:?}");
    }

    #[test]
    fn a_join_moves_only_the_shards_the_newcomer_takes() {
        let before = ids(3);
        let mut after = before.clone();
        after.push("worker-new".into());
        for s in 0..SHARDS {
            let (was, is) = (owner_of(s, &before), owner_of(s, &after));
            assert!(was == is || is == Some("worker-new"), "shard {s} moved from {was:?} to {is:?}");
        }
        let taken = owned_by("worker-new", &after).len();
        assert!((30..=100).contains(&taken), "the newcomer takes about a quarter: {taken}");
    }

    #[test]
    fn a_leave_moves_only_the_leavers_shards() {
        let before = ids(4);
        let after: Vec<String> = before.iter().filter(|m| *m != "worker-2").cloned().collect();
        for s in 0..SHARDS {
            let was = owner_of(s, &before);
            if was != Some("worker-2") {
                assert_eq!(owner_of(s, &after), was, "shard {s} moved though its owner stayed");
            }
        }
        assert_eq!(owned_by("x", &[]), Vec::<u16>::new());
    }
}
