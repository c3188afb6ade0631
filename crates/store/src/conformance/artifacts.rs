//! Artifacts of sources: each content kept once per tenant.

use super::*;
use fleetsync_model::Artifact;

fn artifact(revision: &str, files: &[(&str, &[u8])]) -> Artifact {
    let files = files.iter().map(|(p, c)| (p.to_string(), c.to_vec())).collect();
    Artifact { revision: revision.into(), files }
}

/// An artifact reads back as it was stored, from a reopened store too; a new revision
/// that changes one file of three adds that file's content alone, and a content two
/// files share is kept once; storing a revision again adds nothing; another tenant, or
/// another source, reads nothing of it.
pub async fn artifacts_keep_each_content_once(h: &dyn Harness) {
    let (s, _) = open(h).await;
    let (a, b): (&[u8], &[u8]) = (b"kind: A\n", b"kind: B, longer\n");
    let first = artifact("c1", &[("apps/a.yaml", a), ("apps/b.yaml", b), ("apps/copy-of-a.yaml", a)]);
    let stored = s.artifact_put("t1", "GitRepository/fleet", &first).await.expect("put");
    assert_eq!(
        (stored.files, stored.new_contents, stored.new_bytes, stored.new_revision),
        (3, 2, (a.len() + b.len()) as u64, true)
    );

    let changed: &[u8] = b"kind: B, changed\n";
    let second = artifact("c2", &[("apps/a.yaml", a), ("apps/b.yaml", changed), ("apps/copy-of-a.yaml", a)]);
    let stored = s.artifact_put("t1", "GitRepository/fleet", &second).await.expect("put");
    assert_eq!((stored.new_contents, stored.new_bytes, stored.new_revision), (1, changed.len() as u64, true));

    let again = s.artifact_put("t1", "GitRepository/fleet", &second).await.expect("put again");
    assert_eq!((again.new_contents, again.new_bytes, again.new_revision), (0, 0, false));

    let s = h.open(config(Arc::new(ManualClock::new(T0)))).await;
    assert_eq!(s.artifact_get("t1", "GitRepository/fleet", "c1").await.expect("get"), Some(first));
    assert_eq!(s.artifact_get("t1", "GitRepository/fleet", "c2").await.expect("get"), Some(second.clone()));
    assert_eq!(s.artifact_get("t1", "GitRepository/fleet", "c3").await.expect("get"), None);
    assert_eq!(s.artifact_get("t2", "GitRepository/fleet", "c2").await.expect("get"), None, "another tenant");
    assert_eq!(s.artifact_get("t1", "GitRepository/other", "c2").await.expect("get"), None, "another source");

    // Another tenant's copy of the same content is its own.
    let stored = s.artifact_put("t2", "GitRepository/fleet", &second).await.expect("put");
    assert_eq!((stored.new_contents, stored.new_revision), (2, true));
}
