//! The embedded backend: SQLite in WAL mode, one file, one process.
//!
//! One writer connection serializes every write (SQLite allows one writer anyway);
//! a separate reader connection serves status and listings without waiting for it.
//! Both run on tokio's blocking pool. `synchronous = FULL`: a commit is on disk before
//! the call returns, which is what the API's 2xx promises.
//!
//! The file holds the fleet's credentials (Secrets, sealed only if the store was given
//! keys), so it is created readable by its owner alone (0600, whatever the umask), and
//! SQLite gives its `-wal` and `-shm` the main file's mode; a store file other users may
//! read is warned about at open (see [`private_file`]).
//!
//! `store.rs` is the [`Store`](crate::Store) implementation: its writes hand over to the
//! workflows written once for every backend ([`crate::write`]), driven on the writer
//! thread over the storage operations of `write.rs`; the other files are the SQL of
//! what they are named after.

mod artifacts;
mod consumers;
mod live;
mod members;
mod objects;
mod pages;
mod queue;
mod rollouts;
mod rows;
mod schema;
mod store;
mod summary;
#[cfg(test)]
mod tests;
mod tokens;
mod write;

use crate::error::Cause;
use crate::retry::{write_again, Transience};
use crate::{Commit, Result, StoreConfig, StoreError};
use fleetsync_model::{Clock, SystemClock, Timestamp};
use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::watch;

impl From<rusqlite::Error> for StoreError {
    /// A backend error with the step still to be named (see [`blocking`]).
    fn from(e: rusqlite::Error) -> Self {
        StoreError::backend("sqlite", transience(&e).is_transient(), e)
    }
}

/// How an SQLite error counts for trying again: a busy or locked database (another
/// connection holds the lock past the busy timeout) is contention; anything else — a
/// corrupt, read-only or full file, a constraint, a statement that cannot run, a value
/// that does not decode — would fail the same way again.
fn transience(e: &rusqlite::Error) -> Transience {
    match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => Transience::Contention,
        _ => Transience::Permanent,
    }
}

/// The SQLite store. Cheap to clone; clones share the connections.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    writer: Mutex<Connection>,
    reader: Mutex<Connection>,
    config: StoreConfig,
    /// The config's clock, or the system's (one process: no other clock to agree with).
    clock: Arc<dyn Clock>,
    wake: watch::Sender<u64>,
    /// Bumped after every commit that appended events.
    events: watch::Sender<u64>,
    /// Held (locked) by the process that runs work on this file; see
    /// [`SqliteStore::open_for_work`].
    _work_lock: Option<std::fs::File>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore").field("path", &self.inner.path).finish()
    }
}

/// The writer's settings. Besides durability (WAL, a sync at every commit):
/// `temp_store = MEMORY` keeps the statement journals in memory, which SQLite writes
/// for every statement of a transaction that changes several rows or fires a trigger
/// (a completion batch does both); in a file they cost a quarter of a drain's CPU in
/// `pwrite` calls.
const WRITER_PRAGMAS: &str = "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 10000;
    PRAGMA temp_store = MEMORY;";

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` and migrates its schema.
    pub fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Self> {
        Self::open_with(path.as_ref(), config, None)
    }

    fn open_with(path: &Path, config: StoreConfig, work_lock: Option<std::fs::File>) -> Result<Self> {
        let path = path.to_path_buf();
        let opened = |e: rusqlite::Error| {
            let transient = transience(&e).is_transient();
            StoreError::backend("opening the SQLite file", transient, AtPath { path: path.clone(), cause: Box::new(e) })
        };
        private_file(&path).map_err(|e| {
            StoreError::backend("creating the SQLite file", false, AtPath { path: path.clone(), cause: Box::new(e) })
        })?;
        let mut writer = Connection::open(&path).map_err(opened)?;
        writer.execute_batch(WRITER_PRAGMAS).map_err(opened)?;
        schema::migrate(&mut writer).map_err(opened)?;
        warn_if_shared(&path);
        let reader =
            Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX)
                .map_err(opened)?;
        reader.execute_batch("PRAGMA busy_timeout = 10000;").map_err(opened)?;
        let (wake, _) = watch::channel(0);
        let (events, _) = watch::channel(0);
        let clock = config.clock.clone().unwrap_or_else(|| Arc::new(SystemClock));
        let inner = Inner {
            path,
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            config,
            clock,
            wake,
            events,
            _work_lock: work_lock,
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// Opens the store as the one process that runs work on the file (the embedded
    /// hub), and returns it with the number of keys it took back.
    ///
    /// An embedded store serves one process by construction, so a lease still running
    /// in the file was held by this process's predecessor, which is gone (killed, or
    /// its machine stopped): its keys are made ready at once rather than after their
    /// leases' TTL (the interrupted attempt still counts). A lock on `<file>.lock`,
    /// held until the process ends, makes that true: a second process that would run
    /// work on the same file is refused, and so cannot take back leases that are live.
    pub async fn open_for_work(path: impl AsRef<Path>, config: StoreConfig) -> Result<(Self, u64)> {
        let path = path.as_ref();
        let lock_path = PathBuf::from(format!("{}.lock", path.display()));
        let locking = |cause: Cause| {
            StoreError::backend("locking the SQLite file", false, AtPath { path: lock_path.clone(), cause })
        };
        let lock =
            owner_only().create(true).truncate(false).write(true).open(&lock_path).map_err(|e| locking(Box::new(e)))?;
        lock.try_lock().map_err(|e| match e {
            std::fs::TryLockError::WouldBlock => locking(
                format!("another fleetsync process runs work on {} (it holds this lock)", path.display()).into(),
            ),
            std::fs::TryLockError::Error(e) => locking(Box::new(e)),
        })?;
        let store = Self::open_with(path, config, Some(lock))?;
        let taken = store.write("taking back the predecessor's leases", |tx, now, _| queue::take_back(tx, now)).await?;
        Ok((store, taken))
    }

    /// Seals every Secret with the first of the config's keys where it is not yet (it
    /// is in clear, or sealed with another key), keeping its generation: run at start,
    /// this finishes a key rotation (see [`crate::sealed`]). Fails, changing nothing, if
    /// a Secret does not open with the keys given (or is sealed and no keys were given).
    /// When Secrets that were in clear were sealed, the file is vacuumed and its WAL
    /// truncated, so that their clear text is not left in free pages or old WAL frames.
    pub async fn secrets_reseal(&self) -> Result<crate::Resealed> {
        let done =
            self.write("sealing secrets again", |tx, _, cfg| objects::secrets_reseal(tx, cfg.keys.as_deref())).await?;
        if done.were_in_clear > 0 {
            let inner = self.inner.clone();
            blocking("vacuuming the SQLite file", move || {
                let conn = inner.writer.lock().unwrap_or_else(PoisonError::into_inner);
                conn.execute_batch("VACUUM")?;
                let busy: i64 = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
                if busy != 0 {
                    tracing::warn!(path = %inner.path.display(), "the WAL could not be truncated after sealing the Secrets (a reader held it); it is at the next checkpoint");
                }
                Ok(())
            })
            .await?;
        }
        Ok(done)
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Size of the database and its WAL on disk, in bytes.
    pub fn size_bytes(&self) -> u64 {
        let len = |p: PathBuf| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let wal = PathBuf::from(format!("{}-wal", self.inner.path.display()));
        len(self.inner.path.clone()) + len(wal)
    }

    /// Runs `f` in an immediate write transaction on the blocking pool and commits it;
    /// runs it again, in a new transaction, while it fails as contention (a busy or
    /// locked file), as [`write_again`] says. Anything else fails at once.
    async fn write<T, F>(&self, step: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Transaction<'_>, Timestamp, &StoreConfig) -> Result<T> + Send + 'static,
    {
        self.write_ending(step, Commit::Yes, f).await
    }

    /// [`write`](Self::write), whose transaction `commit` says whether to commit or to
    /// roll back once `f` has run (a dry run).
    async fn write_ending<T, F>(&self, step: &'static str, commit: Commit, mut f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnMut(&Transaction<'_>, Timestamp, &StoreConfig) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        blocking(step, move || {
            let mut conn = inner.writer.lock().unwrap_or_else(PoisonError::into_inner);
            let mut attempt = 1;
            loop {
                let once = |conn: &mut Connection, f: &mut F| -> Result<T, Retried> {
                    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                    let out = f(&tx, inner.clock.now(), &inner.config)?;
                    match commit {
                        Commit::Yes => tx.commit()?,
                        Commit::No => tx.rollback()?,
                    }
                    Ok(out)
                };
                let e = match once(&mut conn, &mut f) {
                    Ok(out) => return Ok(out),
                    Err(e) => e,
                };
                match write_again(e.transience, attempt, rand::random::<f64>()) {
                    Some(pause) => {
                        tracing::debug!(step, attempt, error = %e.error, "retrying a transaction");
                        std::thread::sleep(pause);
                        attempt += 1;
                    }
                    None => return Err(e.error),
                }
            }
        })
        .await
    }

    /// Runs `f` on the reader connection.
    async fn read<T, F>(&self, step: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection, Timestamp) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        blocking(step, move || {
            let conn = inner.reader.lock().unwrap_or_else(PoisonError::into_inner);
            f(&conn, inner.clock.now())
        })
        .await
    }

    /// Tells waiting workers that work may be claimable.
    fn wake(&self) {
        self.inner.wake.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Tells waiters what a commit announces ([`crate::plan::Announce`]).
    fn announce(&self, a: crate::plan::Announce) {
        if a.work_at.is_some() {
            self.wake();
        }
        if a.events {
            self.logged();
        }
    }

    /// Tells event watchers that events were appended.
    fn logged(&self) {
        self.inner.events.send_modify(|v| *v = v.wrapping_add(1));
    }
}

/// Options that create a file readable and writable by its owner alone (0600, whatever
/// the umask): the store's file and its lock.
fn owner_only() -> std::fs::OpenOptions {
    let mut options = std::fs::OpenOptions::new();
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options
}

/// Creates the store's file, if missing, readable and writable by its owner alone
/// (0600, whatever the umask), before SQLite opens it: SQLite creates the `-wal` and
/// `-shm` files with the main file's permissions. An existing file is left as it is.
fn private_file(path: &Path) -> std::io::Result<()> {
    match owner_only().write(true).create_new(true).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Warns about each of the store's files (the database, `-wal`, `-shm`) that users other
/// than its owner may read or write: it holds the fleet's credentials. A warning, not a
/// refusal: stores created before 0600 was the rule are 0644, and a group may be given
/// access on purpose (a backup agent); the warning says how to close it.
fn warn_if_shared(path: &Path) {
    #[cfg(unix)]
    for file in [
        path.to_path_buf(),
        PathBuf::from(format!("{}-wal", path.display())),
        PathBuf::from(format!("{}-shm", path.display())),
    ] {
        use std::os::unix::fs::PermissionsExt;
        let Ok(meta) = std::fs::metadata(&file) else { continue };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                file = %file.display(),
                mode = %format!("{mode:o}"),
                "the store file may be read by other users, and it holds the fleet's credentials: chmod 600 {}*",
                path.display()
            );
        }
    }
}

/// A failed attempt of a write, and how it counts for running the write again: only
/// SQLite's own errors may be contention; the store's answers never are.
struct Retried {
    error: StoreError,
    transience: Transience,
}

impl From<rusqlite::Error> for Retried {
    fn from(e: rusqlite::Error) -> Self {
        Retried { transience: transience(&e), error: e.into() }
    }
}

impl From<StoreError> for Retried {
    fn from(error: StoreError) -> Self {
        let transience = if error.is_transient() { Transience::Contention } else { Transience::Permanent };
        Retried { error, transience }
    }
}

/// A file the SQLite store failed on, and why.
#[derive(Debug, thiserror::Error)]
#[error("{}: {cause}", path.display())]
pub struct AtPath {
    pub path: PathBuf,
    #[source]
    pub cause: Cause,
}

/// Runs blocking SQLite work off the async threads, naming the step in errors.
async fn blocking<T: Send + 'static>(step: &'static str, f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    let named = |e: StoreError| match e {
        StoreError::Backend { step: "sqlite", transient, source } => StoreError::Backend { step, transient, source },
        other => other,
    };
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(named),
        // The task panicked or was cancelled: not something to try again.
        Err(e) => Err(StoreError::backend(step, false, e)),
    }
}

/// Milliseconds of a duration as SQLite's integer.
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
