//! Quotas per tenant, checked in the transaction that writes.

use super::*;
use crate::{Commit, Quota, Quotas};

fn quotas(default: &str) -> Quotas {
    Quotas { default: default.parse().expect("quota"), tenants: Default::default() }
}

/// An apply that would take a tenant past a limit writes nothing (not even its other
/// documents, nor another tenant's); one within the limits, or one that does not add to
/// what is over a lowered limit, is written; a tenant's override takes the default's
/// place; each backend counts keys as the SyncSets' selected clusters.
pub async fn quotas_refuse_whole_applies(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let q = quotas("clusters=3,keys=4");
    let three: Vec<Document> = (1..=3).map(|i| cluster(&format!("c{i}"), &[("env", "prod")])).collect();
    s.objects_apply_within(three, None, &q, Commit::Yes).await.expect("three clusters are within the quota");
    let seq = seqs(&*s, 0).await.len();

    // Two SyncSets on three clusters would be six keys.
    let err = s
        .objects_apply_within(vec![syncset("s1", 1, "v1"), syncset("s2", 1, "v1")], None, &q, Commit::Yes)
        .await
        .expect_err("keys");
    let StoreError::QuotaExceeded(e) = &err else { panic!("expected a quota refusal, got {err}") };
    assert_eq!((e.tenant.as_str(), e.what, e.used, e.requested, e.limit), ("default", "keys", 0, 6, 4), "{err}");
    assert!(s.syncset_get("default", "s1").await.expect("get").is_none(), "nothing of the refused apply was written");
    assert_eq!(seqs(&*s, 0).await.len(), seq, "no event for a refused apply");
    assert!(s.status_list(&StatusFilter::default()).await.expect("status").is_empty(), "no key for a refused apply");

    s.objects_apply_within(vec![syncset("s1", 1, "v1")], None, &q, Commit::Yes)
        .await
        .expect("three keys are within the quota");
    let err =
        s.objects_apply_within(vec![cluster("c4", &[])], None, &q, Commit::Yes).await.expect_err("a fourth cluster");
    assert!(err.to_string().contains("clusters would be 4 (now 3); the limit is 3"), "{err}");

    // Lowered below today's usage: changes that add nothing still pass.
    let lowered = quotas("clusters=1,keys=1");
    s.objects_apply_within(vec![syncset("s1", 2, "v2")], None, &lowered, Commit::Yes)
        .await
        .expect("a change that adds no key");
    s.objects_apply_within(vec![cluster("c1", &[("env", "prod"), ("zone", "a")])], None, &lowered, Commit::Yes)
        .await
        .expect("relabel in place");

    // Another tenant has its own count, and an override replaces the default's limit.
    let mut per_tenant = q.clone();
    per_tenant.tenants.insert("big".into(), Quota { clusters: Some(10), ..Quota::default() });
    let big: Vec<Document> = (1..=5)
        .map(|i| {
            let mut c = cluster(&format!("b{i}"), &[]);
            if let Document::Cluster(c) = &mut c {
                c.metadata.namespace = "big".into();
            }
            c
        })
        .collect();
    s.objects_apply_within(big, None, &per_tenant, Commit::Yes).await.expect("the override allows five");

    let bytes = quotas("bytes=100");
    let err = s.objects_apply_within(vec![syncset("s3", 3, "v1")], None, &bytes, Commit::Yes).await.expect_err("bytes");
    let StoreError::QuotaExceeded(e) = &err else { panic!("expected a quota refusal, got {err}") };
    assert_eq!(e.what, "bytes", "{err}");
    assert!(e.used > 0 && e.requested > e.used, "{err}");
}
