//! Fetched once, stored once: a repository of 200 manifests fetched over smart HTTP and
//! stored in each backend; a commit that changes one file adds that file's content
//! alone to the store, and what is read back is what was committed.

use crate::{cm, fetched, reach, source};
use fleetsync_source::{GitRef, Limits};
use fleetsync_store::postgres::testing::{test_database_url, ScratchSchema};
use fleetsync_store::postgres::PgStore;
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Artifacts, StoreConfig};
use fleetsync_testkit::git::GitServer;
use fleetsync_testkit::git::Repo;

const SOURCE: &str = "GitRepository/fleet";

async fn a_commit_adds_what_it_changed(store: &dyn Artifacts) {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "fleet");
    let files: Vec<(String, Vec<u8>)> =
        (0..200).map(|i| (format!("apps/m{i:03}.yaml"), cm(&format!("m{i:03}"), "1"))).collect();
    let refs: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (p.as_str(), c.as_slice())).collect();
    repo.commit(&refs, "200 manifests");
    let server = GitServer::start(root.path().to_path_buf());
    let src = source(&format!("{}/fleet", server.url), GitRef::Branch("main".into()));
    let fetch = |known: Option<String>| {
        let src = src.clone();
        std::thread::spawn(move || src.fetch(known.as_deref(), &reach(), &Limits::default())).join().expect("the fetch")
    };

    let first = fetched(fetch(None).expect("fetch"));
    let stored = store.artifact_put("t1", SOURCE, &first).await.expect("store");
    let total: u64 = files.iter().map(|(_, c)| c.len() as u64).sum();
    assert_eq!((stored.files, stored.new_contents, stored.new_bytes), (200, 200, total));

    let changed = cm("m007", "2");
    repo.commit(&[("apps/m007.yaml", &changed)], "one file");
    let second = fetched(fetch(Some(first.revision.clone())).expect("fetch"));
    let stored = store.artifact_put("t1", SOURCE, &second).await.expect("store");
    assert_eq!((stored.files, stored.new_contents, stored.new_bytes), (200, 1, changed.len() as u64));
    assert_eq!(server.fetches(), 2, "{:?}", server.asked());

    let read = store.artifact_get("t1", SOURCE, &second.revision).await.expect("read").expect("stored");
    assert_eq!(read.files["apps/m007.yaml"], changed);
    assert_eq!(read, second);
    println!("200 manifests, {total} bytes; the next commit stored {} bytes", stored.new_bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_changing_one_file_stores_that_file_alone_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("hub.db"), StoreConfig::default()).expect("open");
    a_commit_adds_what_it_changed(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_changing_one_file_stores_that_file_alone_on_postgres() {
    let schema = ScratchSchema::new();
    let store =
        PgStore::connect(&test_database_url(), Some(&schema.name), StoreConfig::default()).await.expect("connect");
    a_commit_adds_what_it_changed(&store).await;
}
