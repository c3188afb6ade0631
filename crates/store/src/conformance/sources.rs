//! Sources: a SyncSet that reads its resources from a GitRepository (or an
//! OCIRepository) takes each revision the source's key stores as a new generation, and
//! nothing else; sources of both kinds share one name space.

use super::*;
use fleetsync_model::{Artifact, GitReference, GitRepository, GitRepositorySpec, OCIRepository, SourceKind, SourceRef};

fn repository(name: &str) -> Document {
    let reference = GitReference { branch: Some("main".into()), ..GitReference::default() };
    let spec: GitRepositorySpec = serde_json::from_value(serde_json::json!({
        "url": "https://git.example/fleet.git", "ref": reference,
    }))
    .expect("a spec");
    Document::GitRepository(GitRepository { metadata: ObjectMeta::new(name), spec, status: None })
}

/// SyncSet `name` (selecting `env=prod`) reading `apps/` of GitRepository `fleet`.
fn sourced(name: &str) -> Document {
    let Document::SyncSet(mut s) = syncset(name, 0, "") else { unreachable!("a SyncSet") };
    s.spec.source_ref = Some(SourceRef { kind: SourceKind::GitRepository, name: "fleet".into(), path: "apps".into() });
    Document::SyncSet(s)
}

fn artifact(revision: &str, files: &[(&str, &str)]) -> Artifact {
    Artifact {
        revision: revision.into(),
        files: files.iter().map(|(p, c)| (p.to_string(), c.as_bytes().to_vec())).collect(),
    }
}

const A: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: apps}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: apps}\n";

/// Applied before its source holds a revision, a SyncSet is stored and runs nowhere;
/// the source's key stores a revision, and the SyncSet takes it as a new generation
/// (the manifests under its path, in order; its status names the revision), its keys
/// enqueued at it. A revision whose manifests break a rule, or stored with a lost
/// lease, is refused whole: the source keeps its revision and nothing of it is stored.
/// Applied again as written, the SyncSet and the source are unchanged.
pub async fn sources_feed_syncsets_one_revision_at_a_time(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let docs = vec![cluster("c1", &[("env", "prod")]), sourced("web"), repository("fleet")];
    s.objects_apply(docs.clone()).await.expect("apply");
    let web = s.syncset_get("default", "web").await.expect("get").expect("stored");
    assert!(web.waits_for_source() && web.metadata.generation == 1, "{web:?}");
    // A cluster that comes while the SyncSet waits gets no key of it either.
    s.objects_apply(vec![cluster("c2", &[("env", "prod")])]).await.expect("a later cluster");
    let items = claim(s.as_ref(), "w", 10).await;
    let keys: Vec<&WorkKey> = items.iter().map(|i| &i.key).collect();
    assert_eq!(keys, [&WorkKey::source("default", "fleet")], "only the source's key runs");
    let own = OwnWrite { key: items[0].key.clone(), fence: items[0].fence };

    let first = artifact("c1", &[("apps/a.yaml", A), ("other/x.yaml", "not: read")]);
    let fetched = s.source_fetched("default", "fleet", &first, own.clone()).await.expect("fetched");
    let outcomes: Vec<_> = fetched.syncsets.iter().map(|o| (o.name.as_str(), o.generation, o.result)).collect();
    assert_eq!(outcomes, [("web", 2, "updated")]);
    let web = s.syncset_get("default", "web").await.expect("get").expect("stored");
    assert_eq!(web.status.and_then(|st| st.source_revision).as_deref(), Some("c1"));
    let applied = s.revision_get("default", "web", 2).await.expect("revision").expect("kept");
    let names: Vec<_> = applied.spec.resources.iter().map(|m| m.0["metadata"]["name"].clone()).collect();
    assert_eq!(names, ["a", "b"]);
    for c in ["c1", "c2"] {
        let web_key = s.status_get(&key(c, "web")).await.expect("status").expect("enqueued");
        assert_eq!(web_key.generation, 2);
    }
    let repo = s.git_repository_get("default", "fleet").await.expect("get").expect("stored");
    assert_eq!(repo.status.and_then(|st| st.revision).as_deref(), Some("c1"));

    let broken = artifact("c2", &[("apps/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n")]);
    let e = s.source_fetched("default", "fleet", &broken, own.clone()).await.expect_err("refused");
    assert!(matches!(&e, StoreError::SourceInvalid { revision, .. } if revision == "c2"), "{e}");
    assert!(e.to_string().contains("apps/a.yaml"), "{e}");
    let stale = OwnWrite { fence: crate::Fence::new(own.fence.get() + 1), ..own.clone() };
    let e =
        s.source_fetched("default", "fleet", &artifact("c3", &[("apps/a.yaml", A)]), stale).await.expect_err("stale");
    assert!(matches!(e, StoreError::LeaseLost { .. }), "{e}");
    for revision in ["c2", "c3"] {
        assert_eq!(s.artifact_get("default", "GitRepository/fleet", revision).await.expect("get"), None, "{revision}");
    }
    let repo = s.git_repository_get("default", "fleet").await.expect("get").expect("stored");
    assert_eq!(repo.status.and_then(|st| st.revision).as_deref(), Some("c1"), "the last good revision");

    let again = s.objects_apply(docs).await.expect("apply again");
    let results: Vec<_> = again.iter().map(|o| (o.name.as_str(), o.generation, o.result)).collect();
    assert_eq!(results, [("c1", 1, "unchanged"), ("web", 2, "unchanged"), ("fleet", 1, "unchanged")]);
}

fn oci(name: &str) -> Document {
    let spec = serde_json::from_value(serde_json::json!({"url": "oci://registry.example/fleet"})).expect("a spec");
    Document::OCIRepository(OCIRepository { metadata: ObjectMeta::new(name), spec, status: None })
}

/// An OCIRepository feeds the SyncSets that name it as a GitRepository does, its
/// digest as the revision; a source of the other kind cannot take its name (nothing of
/// that apply is written), and once it is deleted, can.
pub async fn oci_sources_feed_syncsets_and_share_one_name_space(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let Document::SyncSet(mut web) = sourced("web") else { unreachable!("a SyncSet") };
    web.spec.source_ref =
        Some(SourceRef { kind: SourceKind::OCIRepository, name: "fleet".into(), path: "apps".into() });
    s.objects_apply(vec![cluster("c1", &[("env", "prod")]), oci("fleet"), Document::SyncSet(web)])
        .await
        .expect("apply");
    let items = claim(s.as_ref(), "w", 10).await;
    assert_eq!(items.iter().map(|i| &i.key).collect::<Vec<_>>(), [&WorkKey::source("default", "fleet")]);
    let own = OwnWrite { key: items[0].key.clone(), fence: items[0].fence };
    let digest = format!("sha256:{}", "a".repeat(64));
    let fetched = s.source_fetched("default", "fleet", &artifact(&digest, &[("apps/a.yaml", A)]), own).await;
    let outcomes: Vec<_> = fetched.expect("fetched").syncsets.iter().map(|o| (o.name.clone(), o.generation)).collect();
    assert_eq!(outcomes, [("web".to_string(), 2)]);
    let source = s.oci_repository_get("default", "fleet").await.expect("get").expect("stored");
    assert_eq!(source.status.and_then(|st| st.revision), Some(digest.clone()));
    let any = s.source_get("default", "fleet").await.expect("get").expect("found");
    assert_eq!((any.kind(), any.revision()), (SourceKind::OCIRepository, Some(digest.as_str())));
    assert!(s.artifact_get("default", "OCIRepository/fleet", &digest).await.expect("get").is_some());

    let e = s.objects_apply(vec![cluster("c2", &[]), repository("fleet")]).await.expect_err("taken");
    assert!(matches!(&e, StoreError::NameTaken { taken_by: "OCIRepository", .. }), "{e}");
    assert_eq!(s.cluster_get("default", "c2").await.expect("get"), None, "nothing of the apply");
    assert_eq!(s.git_repository_get("default", "fleet").await.expect("get"), None);
    s.object_delete(Kind::OCIRepository, "default", "fleet").await.expect("delete");
    s.objects_apply(vec![repository("fleet")]).await.expect("the name is free");
    let e = s.objects_apply(vec![oci("fleet")]).await.expect_err("taken the other way");
    assert!(matches!(&e, StoreError::NameTaken { taken_by: "GitRepository", .. }), "{e}");
}

/// A fetch stores the revision, then each SyncSet that reads the source takes it in a
/// transaction of its own: one left behind by a fetcher that died in between (here:
/// the store step and one SyncSet done) is applied by the next holder's catch-up, once,
/// and a catch-up with nothing behind writes nothing.
pub async fn syncsets_left_behind_by_a_dead_fetcher_catch_up(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let docs = vec![
        cluster("c1", &[("env", "prod")]),
        sourced("web-a"),
        sourced("web-b"),
        sourced("web-c"),
        repository("fleet"),
    ];
    s.objects_apply(docs).await.expect("apply");
    let items = claim(s.as_ref(), "w", 10).await;
    let own = OwnWrite { key: items[0].key.clone(), fence: items[0].fence };
    let stored = s.source_stored("default", "fleet", &artifact("c1", &[("apps/a.yaml", A)]), own.clone()).await;
    assert_eq!(stored.expect("stored").syncsets, ["web-a", "web-b", "web-c"]);
    let first = s.source_catch_up_one("default", "fleet", own.clone()).await.expect("one").expect("one behind");
    assert_eq!((first.name.as_str(), first.generation), ("web-a", 2));
    // The fetcher dies here; the next holder of the key finds the remote unchanged.
    s.work_release(&own.key, own.fence).await.expect("its lease ends");
    let items = claim(s.as_ref(), "w2", 10).await;
    let next = items.iter().find(|i| i.key == own.key).map(|i| OwnWrite { key: i.key.clone(), fence: i.fence });
    let next = next.expect("the source's key, claimed again");
    let e = s.source_catch_up("default", "fleet", own).await.expect_err("the dead fetcher's token");
    assert!(matches!(e, StoreError::LeaseLost { .. }), "{e}");
    let caught: Vec<_> = s
        .source_catch_up("default", "fleet", next.clone())
        .await
        .expect("catch up")
        .iter()
        .map(|o| (o.name.clone(), o.generation))
        .collect();
    assert_eq!(caught, [("web-b".to_string(), 2), ("web-c".to_string(), 2)]);
    for name in ["web-a", "web-b", "web-c"] {
        let set = s.syncset_get("default", name).await.expect("get").expect("stored");
        assert_eq!(
            (set.metadata.generation, set.status.and_then(|st| st.source_revision)),
            (2, Some("c1".into())),
            "{name}"
        );
    }
    assert_eq!(s.source_catch_up("default", "fleet", next).await.expect("again"), [], "nothing behind");
}
