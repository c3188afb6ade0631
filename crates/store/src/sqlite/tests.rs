//! The SQLite store's own tests (the conformance suite is shared).

use super::*;
use crate::roles::{EventLog, StatusRead};
use crate::{EventRetention, EventsTrimmed};

/// A trim larger than one chunk takes several transactions and reports them all.
#[tokio::test]
async fn trims_in_chunks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f.db");
    let store = SqliteStore::open(&path, StoreConfig::default()).expect("open");
    {
        let mut c = Connection::open(&path).expect("connect");
        let tx = c.transaction().expect("begin");
        let mut insert = tx
            .prepare("INSERT INTO events (at, tenant, kind, name, action, generation) VALUES (0, 'default', 'SyncSet', 's', 'Updated', ?1)")
            .expect("prepare");
        for g in 0..25_000 {
            insert.execute([g]).expect("insert");
        }
        drop(insert);
        tx.commit().expect("commit");
    }
    let keep = EventRetention { max_events: Some(1_000), max_age: None };
    assert_eq!(store.events_trim(keep).await.expect("trim"), EventsTrimmed { deleted: 24_000, horizon: 24_000 });
    let kept = store.events_read(24_000, 10_000).await.expect("read");
    assert_eq!((kept.len(), kept[0].seq), (1_000, 24_001));
}

/// Readiness reads the schema's version, not the keys: ready once migrated, not ready
/// (saying what to run) when the file's schema is behind this build's.
#[tokio::test]
async fn readiness_needs_the_schema_this_build_keeps() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("f.db");
    let store = SqliteStore::open(&path, StoreConfig::default()).expect("open");
    let ready = store.store_ready().await.expect("a migrated file is ready");
    assert_eq!(ready, crate::Schema { backend: "sqlite", version: schema::latest(), latest: schema::latest() });
    let c = Connection::open(&path).expect("connect");
    c.pragma_update(None, "user_version", schema::latest() - 1).expect("set the version back");
    let e = store.store_ready().await.expect_err("a schema behind the build is not ready");
    assert!(e.is_transient() && e.to_string().contains("run `fleetsync migrate`"), "{e}");
}

#[tokio::test]
async fn open_reports_the_path_on_failure() {
    let err = SqliteStore::open("/nonexistent-dir/x/fleetsync.db", StoreConfig::default()).expect_err("must fail");
    assert!(err.to_string().contains("/nonexistent-dir/x/fleetsync.db"), "{err}");
}

/// An SQLite error as the statements of a transaction would return it.
fn sqlite_error(code: std::ffi::c_int) -> StoreError {
    rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None).into()
}

/// The write runner runs a transaction again while the file is busy or locked (up
/// to the attempts allowed), and never after anything else: a corrupt, read-only or
/// full file, a constraint, or the store's own answer.
#[tokio::test]
async fn a_write_is_run_again_only_while_the_file_is_busy_or_locked() {
    use crate::retry::WRITE_ATTEMPTS;
    use rusqlite::ffi;
    use std::sync::atomic::{AtomicU32, Ordering};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open(dir.path().join("f.db"), StoreConfig::default()).expect("open");
    let attempts = |fail_first: u32, error: Box<dyn Fn() -> StoreError + Send>| {
        let store = store.clone();
        async move {
            let tries = Arc::new(AtomicU32::new(0));
            let counted = tries.clone();
            let out = store
                .write("testing", move |_, _, _| match counted.fetch_add(1, Ordering::Relaxed) < fail_first {
                    true => Err(error()),
                    false => Ok(()),
                })
                .await;
            (tries.load(Ordering::Relaxed), out)
        }
    };
    let (tries, out) = attempts(2, Box::new(|| sqlite_error(ffi::SQLITE_BUSY))).await;
    assert_eq!(tries, 3, "busy twice, then committed");
    out.expect("committed on the third attempt");
    let (tries, out) = attempts(u32::MAX, Box::new(|| sqlite_error(ffi::SQLITE_LOCKED))).await;
    let err = out.expect_err("locked every time");
    assert_eq!((tries, err.is_transient()), (WRITE_ATTEMPTS, true), "{err}");
    assert!(err.to_string().starts_with("store backend error while testing: "), "{err}");

    for code in [ffi::SQLITE_CORRUPT, ffi::SQLITE_READONLY, ffi::SQLITE_FULL, ffi::SQLITE_CONSTRAINT] {
        let (tries, out) = attempts(u32::MAX, Box::new(move || sqlite_error(code))).await;
        let err = out.expect_err("fails");
        assert_eq!((tries, err.is_transient()), (1, false), "code {code}: {err}");
        let source = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<rusqlite::Error>());
        assert_eq!(
            source.and_then(rusqlite::Error::sqlite_error).map(|e| e.extended_code),
            Some(code),
            "the cause is kept"
        );
    }
    let (tries, _) = attempts(u32::MAX, Box::new(|| StoreError::Corrupt { table: "work", message: "x".into() })).await;
    assert_eq!(tries, 1, "an answer about the data");
}
