//! Pages of every list: each item present for a whole walk is seen exactly once while
//! items are added, changed and removed between pages, no item twice, keys strictly
//! increasing; and the filters (phase, staleness, labels) evaluated by the store.

use super::*;
use crate::page::{ClusterFilter, LiveFilter, ObjectKey, PageRequest};
use fleetsync_model::{LabelQuery, LiveState};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeSet;

/// Cluster names: a pool of 80, zero-padded so that every backend orders them alike.
fn name(i: usize) -> String {
    format!("c{i:03}")
}

/// Checks a finished walk: `seen` in page order, `stayed` the keys present throughout.
fn check_walk<K: Ord + Clone + std::fmt::Debug>(seen: &[K], stayed: &BTreeSet<K>) {
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "keys not strictly increasing (so some twice): {seen:?}");
    let seen: BTreeSet<K> = seen.iter().cloned().collect();
    let missed: Vec<_> = stayed.difference(&seen).collect();
    assert!(missed.is_empty(), "present for the whole walk but never returned: {missed:?}");
}

/// Walks the clusters in pages of random sizes, adding, relabelling and deleting
/// clusters between pages (seeded, so a failure replays).
pub async fn cluster_pages_see_each_item_once_under_changes(h: &dyn Harness) {
    let (s, _) = open(h).await;
    for seed in 0..4u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut present: BTreeSet<usize> = (0..80).filter(|i| i % 2 == 0).collect();
        let docs: Vec<_> = (0..80).map(|i| cluster(&name(i), &[("v", "0")])).collect();
        for i in 0..80 {
            s.object_delete(Kind::Cluster, "default", &name(i))
                .await
                .or_else(|e| if matches!(e, StoreError::NotFound { .. }) { Ok(()) } else { Err(e) })
                .expect("reset");
        }
        s.objects_apply(present.iter().map(|i| docs[*i].clone()).collect()).await.expect("seed");
        let mut stayed: BTreeSet<ObjectKey> = present.iter().map(|i| ObjectKey::new("default", name(*i))).collect();
        let (mut seen, mut after) = (Vec::new(), None);
        loop {
            let limit = rng.random_range(1..=7);
            let page = s.cluster_page(&ClusterFilter::default(), &PageRequest { after, limit }).await.expect("page");
            assert!(page.items.len() <= limit);
            assert!(
                page.next.is_none() || page.items.len() == limit,
                "an unfiltered page is full unless it is the last"
            );
            seen.extend(page.items.iter().map(|c| ObjectKey::new(c.metadata.tenant(), c.metadata.name.clone())));
            let Some(next) = page.next else { break };
            after = Some(next);
            for _ in 0..3 {
                let i = rng.random_range(0..80);
                if !present.contains(&i) {
                    s.objects_apply(vec![docs[i].clone()]).await.expect("add");
                    present.insert(i);
                } else if rng.random_bool(0.5) {
                    let v = rng.random_range(1..1000).to_string();
                    s.objects_apply(vec![cluster(&name(i), &[("v", &v)])]).await.expect("change");
                } else {
                    s.object_delete(Kind::Cluster, "default", &name(i)).await.expect("remove");
                    present.remove(&i);
                    stayed.remove(&ObjectKey::new("default", name(i)));
                }
            }
        }
        check_walk(&seen, &stayed);
    }
}

/// Walks key status in pages of random sizes while clusters (and so keys) come and go
/// and keys change phase between pages.
pub async fn status_pages_see_each_key_once_under_changes(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let prod = |i: usize| cluster(&name(i), &[("env", "prod")]);
    let mut present: BTreeSet<usize> = (0..30).filter(|i| i % 3 != 0).collect();
    let mut docs: Vec<Document> = present.iter().map(|i| prod(*i)).collect();
    docs.extend([syncset("s1", 1, "v1"), syncset("s2", 1, "v1")]);
    s.objects_apply(docs).await.expect("seed");
    let keys_of = |i: usize| [key(&name(i), "s1"), key(&name(i), "s2")];
    let mut stayed: BTreeSet<WorkKey> = present.iter().flat_map(|i| keys_of(*i)).collect();
    let mut rng = StdRng::seed_from_u64(7);
    let (mut seen, mut after) = (Vec::new(), None);
    loop {
        let limit = rng.random_range(1..=5);
        let page = s.status_page(&StatusFilter::default(), &PageRequest { after, limit }).await.expect("page");
        assert!(page.items.len() <= limit);
        seen.extend(page.items.iter().map(|k| k.key.clone()));
        let Some(next) = page.next else { break };
        after = Some(next);
        let i = rng.random_range(0..30);
        if present.insert(i) {
            s.objects_apply(vec![prod(i)]).await.expect("add");
        } else if rng.random_bool(0.3) {
            s.object_delete(Kind::Cluster, "default", &name(i)).await.expect("remove");
            present.remove(&i);
            for k in keys_of(i) {
                stayed.remove(&k);
            }
        }
        // Some keys change phase: claimed, then applied or failed.
        for item in claim(&*s, "w", 2).await {
            let outcome = if rng.random_bool(0.5) { applied(&item) } else { failed("boom") };
            complete(&*s, &item, outcome).await;
        }
    }
    check_walk(&seen, &stayed);
}

/// The phase and staleness filters select, in SQL, exactly the keys whose status says so.
pub async fn status_filtered_by_phase_and_staleness(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let clusters: Vec<_> = (1..=3).map(|i| cluster(&format!("c{i}"), &[("env", "prod")])).collect();
    s.objects_apply([clusters, vec![syncset("s1", 1, "v1")]].concat()).await.expect("apply");
    let mut items = claim(&*s, "w", 10).await;
    items.sort_by(|a, b| a.key.cmp(&b.key));
    complete(&*s, &items[0], applied(&items[0])).await; // c1: Applied
    complete(&*s, &items[1], failed("boom")).await; // c2: Failed
                                                    // c3 stays Applying; c4 is Pending.
    s.objects_apply(vec![cluster("c4", &[("env", "prod")])]).await.expect("c4");

    let all = s.status_list(&StatusFilter::default()).await.expect("all");
    let phases: BTreeSet<Phase> = all.iter().map(|k| k.phase).collect();
    assert_eq!(phases, [Phase::Pending, Phase::Applying, Phase::Applied, Phase::Failed].into());
    let selected = async |f: StatusFilter| -> (Vec<WorkKey>, Vec<WorkKey>) {
        let listed = s.status_list(&f).await.expect("list").into_iter().map(|k| k.key).collect();
        let paged =
            s.status_page(&f, &PageRequest::first(100)).await.expect("page").items.into_iter().map(|k| k.key).collect();
        (listed, paged)
    };
    for want in [
        vec![Phase::Pending],
        vec![Phase::Applying],
        vec![Phase::Applied],
        vec![Phase::Failed],
        vec![Phase::Parked],
        vec![Phase::Failed, Phase::Applied],
    ] {
        let expected: Vec<WorkKey> = all.iter().filter(|k| want.contains(&k.phase)).map(|k| k.key.clone()).collect();
        let (listed, paged) = selected(StatusFilter { phases: want.clone(), ..StatusFilter::default() }).await;
        assert_eq!((&listed, &paged), (&expected, &expected), "phases {want:?}");
    }
    let stale = StatusFilter { stale: true, ..StatusFilter::default() };
    let (listed, paged) = selected(stale.clone()).await;
    let expected = vec![key("c2", "s1"), key("c3", "s1"), key("c4", "s1")];
    assert_eq!((&listed, &paged), (&expected, &expected), "c1 applied generation 1");
    // A new generation of the SyncSet makes c1 stale too.
    s.objects_apply(vec![syncset("s1", 1, "v2")]).await.expect("v2");
    let (listed, _) = selected(stale.clone()).await;
    assert_eq!(listed.len(), 4);
    // Filters combine with the others and with paging.
    let f = StatusFilter {
        stale: true,
        phases: vec![Phase::Pending],
        cluster: Some("c4".into()),
        ..StatusFilter::default()
    };
    assert_eq!(selected(f).await.1, vec![key("c4", "s1")]);
}

/// A label selector filters Clusters while pages are walked: every match once, in
/// order; a sparse match ends pages early but the walk ends.
pub async fn clusters_filtered_by_labels(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let labels: [&[(&str, &str)]; 6] = [
        &[("env", "prod"), ("tier", "a")],
        &[("env", "prod"), ("tier", "b"), ("canary", "yes")],
        &[("env", "prod"), ("tier", "c")],
        &[("env", "dev"), ("tier", "a")],
        &[("env", "prod"), ("tier", "b")],
        &[("tier", "a")],
    ];
    let docs: Vec<_> = (0..30).map(|i| cluster(&name(i), labels[i % labels.len()])).collect();
    s.objects_apply(docs).await.expect("apply");
    let walk = async |selector: &str, limit: usize| -> (Vec<String>, usize) {
        let filter =
            ClusterFilter { tenant: Some("default".into()), labels: LabelQuery::parse(selector).expect("selector") };
        let (mut names, mut after, mut pages) = (Vec::new(), None, 0);
        loop {
            let page = s.cluster_page(&filter, &PageRequest { after, limit }).await.expect("page");
            assert!(page.items.len() <= limit);
            pages += 1;
            assert!(pages <= 30, "the walk must end");
            names.extend(page.items.into_iter().map(|c| c.metadata.name));
            match page.next {
                Some(n) => after = Some(n),
                None => return (names, pages),
            }
        }
    };
    let expect = |f: &dyn Fn(usize) -> bool| (0..30).filter(|i| f(i % labels.len())).map(name).collect::<Vec<_>>();
    assert_eq!(walk("env=prod,tier in (a,b),!canary", 2).await.0, expect(&|l| l == 0 || l == 4));
    assert_eq!(walk("tier notin (a)", 3).await.0, expect(&|l| l == 1 || l == 2 || l == 4));
    assert_eq!(walk("env!=prod", 1).await.0, expect(&|l| l == 3 || l == 5));
    assert_eq!(walk("", 7).await.0.len(), 30);
    // One match in 30 rows, pages of 1: each page examines at most 10 rows.
    s.objects_apply(vec![cluster(&name(17), &[("only", "me")])]).await.expect("relabel");
    let (names, pages) = walk("only=me", 1).await;
    assert_eq!(names, vec![name(17)]);
    assert!(pages >= 3, "pages end at the scan budget: {pages}");
    assert!(walk("nobody", 5).await.0.is_empty());
}

/// Live state, SyncSets and Secrets page too (a round trip over each).
pub async fn other_lists_page(h: &dyn Harness) {
    let (s, _) = open(h).await;
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), syncset("s1", 7, "v1"), syncset("s2", 1, "v1")])
        .await
        .expect("apply");
    let records: Vec<LiveRecord> = (0..7)
        .map(|i| LiveRecord {
            resource: ResourceRef {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("apps".into()),
                name: format!("s1-{i}"),
            },
            syncset: "s1".into(),
            resource_version: "1".into(),
            state: LiveState::Present,
            object: None,
            drift: (i == 4).then(|| "data.marker".to_string()),
            unready: None,
        })
        .collect();
    s.live_record("default", "c1", records).await.expect("record");
    let filter = LiveFilter { tenant: "default".into(), cluster: "c1".into() };
    let (mut all, mut after) = (Vec::new(), None);
    loop {
        let page = s.live_page(&filter, &PageRequest { after, limit: 3 }).await.expect("live page");
        all.extend(page.items);
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(all, s.live_list("default", "c1").await.expect("live list"));
    assert_eq!(all.len(), 7);
    // A page of status shows its keys' drift as the whole list does.
    let paged = s.status_page(&StatusFilter::default(), &PageRequest::first(1)).await.expect("status page");
    assert_eq!(paged.items[0].drift.len(), 1);
    assert_eq!(paged.items, s.status_list(&StatusFilter::default()).await.expect("status")[..1]);

    let first = s.syncset_page(&Default::default(), &PageRequest::first(1)).await.expect("syncsets");
    assert_eq!(first.items.iter().map(|x| x.metadata.name.as_str()).collect::<Vec<_>>(), ["s1"]);
    let second =
        s.syncset_page(&Default::default(), &PageRequest { after: first.next, limit: 1 }).await.expect("syncsets");
    assert_eq!((second.items[0].metadata.name.as_str(), second.next), ("s2", None));
    let none = s.secret_page(&Default::default(), &PageRequest::first(5)).await.expect("secrets");
    assert!(none.items.is_empty() && none.next.is_none());
}
