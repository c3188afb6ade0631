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

mod consumers;
mod live;
mod members;
mod objects;
mod pages;
mod queue;
mod rollouts;
mod rows;
mod schema;
mod summary;
mod tokens;

use crate::error::Cause;
use crate::page::{ClusterFilter, LiveFilter, ObjectFilter, ObjectKey, Page, PageRequest};
use crate::retry::{write_again, Transience};
use crate::roles::{EventLog, LiveState, Members, Objects, Rollouts, StatusRead, Tokens, WorkQueue};
use crate::rollout::{RolloutEvent, RolloutState};
use crate::stored::json;
use crate::{
    check_consumer_name, ApplyOutcome, ClaimParams, ClaimedItem, Commit, CompleteOutcome, Completion, Event,
    EventObject, EventRetention, EventsTrimmed, Fence, LiveRecord, LiveRecorded, LiveResource, Member, MemberBeat,
    OwnWrite, QueueStats, Quotas, RenewParams, Result, StatusFilter, StoreConfig, StoreError,
};
use async_trait::async_trait;
use fleetsync_model::{
    Clock, Cluster, ClusterConditions, Document, KeyStatus, Kind, ResourceRef, RolloutPhase, Secret, StatusSummary,
    SyncSet, SystemClock, Timestamp, TokenRecord, WorkKey,
};
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
        writer
            .execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL; PRAGMA busy_timeout = 10000;")
            .map_err(opened)?;
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

#[async_trait]
impl Objects for SqliteStore {
    async fn objects_apply_within(
        &self,
        docs: Vec<Document>,
        actor: Option<&str>,
        quotas: &Quotas,
        commit: Commit,
    ) -> Result<Vec<ApplyOutcome>> {
        let (actor, quotas) = (actor.map(str::to_string), quotas.clone());
        let apply = move |tx: &Transaction<'_>, now, cfg: &StoreConfig| {
            objects::apply(tx, now, &docs, actor.as_deref(), &quotas, cfg.keys.as_deref())
        };
        let (out, announce) = self.write_ending("applying documents", commit, apply).await?;
        if commit == Commit::Yes {
            self.announce(announce);
        }
        Ok(out)
    }

    async fn objects_apply_own(&self, docs: Vec<Document>, own: OwnWrite) -> Result<Vec<ApplyOutcome>> {
        let (out, announce) = self
            .write("applying an own write", move |tx, now, cfg| {
                objects::apply_own(tx, now, &docs, &own, cfg.keys.as_deref())
            })
            .await?;
        self.announce(announce);
        Ok(out)
    }

    async fn object_delete_by(&self, kind: Kind, tenant: &str, name: &str, actor: Option<&str>) -> Result<()> {
        let (tenant, name, actor) = (tenant.to_string(), name.to_string(), actor.map(str::to_string));
        let announce = self
            .write("deleting an object", move |tx, now, _| {
                objects::delete(tx, now, kind, &tenant, &name, actor.as_deref())
            })
            .await?;
        self.announce(announce);
        Ok(())
    }

    async fn cluster_get(&self, tenant: &str, name: &str) -> Result<Option<Cluster>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.read("reading a cluster", move |c, _| objects::get(c, Kind::Cluster, &tenant, &name, None)).await
    }

    async fn cluster_list(&self, tenant: Option<&str>) -> Result<Vec<Cluster>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing clusters", move |c, _| objects::list(c, Kind::Cluster, tenant.as_deref(), None)).await
    }

    async fn syncset_get(&self, tenant: &str, name: &str) -> Result<Option<SyncSet>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        self.read("reading a syncset", move |c, _| objects::get(c, Kind::SyncSet, &tenant, &name, None)).await
    }

    async fn syncset_list(&self, tenant: Option<&str>) -> Result<Vec<SyncSet>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing syncsets", move |c, _| objects::list(c, Kind::SyncSet, tenant.as_deref(), None)).await
    }

    async fn secret_get(&self, tenant: &str, name: &str) -> Result<Option<Secret>> {
        let (tenant, name) = (tenant.to_string(), name.to_string());
        let keys = self.inner.config.keys.clone();
        self.read("reading a secret", move |c, _| objects::get(c, Kind::Secret, &tenant, &name, keys.as_deref())).await
    }

    async fn secret_list(&self, tenant: Option<&str>) -> Result<Vec<Secret>> {
        let tenant = tenant.map(str::to_string);
        let keys = self.inner.config.keys.clone();
        self.read("listing secrets", move |c, _| objects::list(c, Kind::Secret, tenant.as_deref(), keys.as_deref()))
            .await
    }

    async fn cluster_page(
        &self,
        filter: &ClusterFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Cluster, ObjectKey>> {
        let (filter, page) = (filter.clone(), page.clone());
        self.read("listing clusters", move |c, _| {
            pages::objects(c, Kind::Cluster, filter.tenant.as_deref(), Some(&filter.labels), &page, None)
        })
        .await
    }

    async fn syncset_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<SyncSet, ObjectKey>> {
        let (tenant, page) = (filter.tenant.clone(), page.clone());
        self.read("listing syncsets", move |c, _| {
            pages::objects(c, Kind::SyncSet, tenant.as_deref(), None, &page, None)
        })
        .await
    }

    async fn secret_page(
        &self,
        filter: &ObjectFilter,
        page: &PageRequest<ObjectKey>,
    ) -> Result<Page<Secret, ObjectKey>> {
        let (tenant, page) = (filter.tenant.clone(), page.clone());
        let keys = self.inner.config.keys.clone();
        self.read("listing secrets", move |c, _| {
            pages::objects(c, Kind::Secret, tenant.as_deref(), None, &page, keys.as_deref())
        })
        .await
    }
}

#[async_trait]
impl WorkQueue for SqliteStore {
    async fn work_claim(&self, params: ClaimParams) -> Result<Vec<ClaimedItem>> {
        self.write("claiming work", move |tx, now, _| queue::claim(tx, now, &params)).await
    }

    async fn lease_renew(&self, params: RenewParams) -> Result<Vec<WorkKey>> {
        self.write("renewing leases", move |tx, now, _| queue::renew(tx, now, &params)).await
    }

    async fn work_complete(&self, completions: Vec<Completion>) -> Result<Vec<CompleteOutcome>> {
        let (out, announce) = self
            .write("completing work", move |tx, now, cfg| queue::complete(tx, now, &cfg.retry, &completions))
            .await?;
        self.announce(announce);
        Ok(out)
    }

    async fn work_inventory_record(&self, key: &WorkKey, fence: Fence, inventory: &[ResourceRef]) -> Result<()> {
        let (key, inventory) = (key.clone(), json("work", inventory)?);
        self.write("recording an inventory", move |tx, now, _| {
            queue::inventory_record(tx, now, &key, fence, &inventory)
        })
        .await
    }

    async fn work_release(&self, key: &WorkKey, fence: Fence) -> Result<()> {
        let key = key.clone();
        self.write("releasing a key", move |tx, now, _| queue::release(tx, now, &key, fence)).await?;
        self.wake();
        Ok(())
    }

    async fn work_retry_by(&self, key: &WorkKey, actor: Option<&str>) -> Result<()> {
        let (key, actor) = (key.clone(), actor.map(str::to_string));
        self.write("retrying a key", move |tx, now, _| {
            let generation = queue::retry(tx, now, &key)?;
            let name = format!("{}/{}", key.cluster, key.syncset);
            let e = rows::NewEvent {
                tenant: &key.tenant,
                kind: "Status",
                name: &name,
                action: "Retry",
                generation,
                actor: actor.as_deref(),
            };
            rows::event_append(tx, now, e)
        })
        .await?;
        self.wake();
        Ok(())
    }

    async fn work_resync(&self) -> Result<u64> {
        let n = self.write("resyncing", move |tx, now, _| queue::resync(tx, now)).await?;
        self.wake();
        Ok(n)
    }

    async fn work_next_ready_at(&self, shards: Option<&[u16]>) -> Result<Option<Timestamp>> {
        let shards = queue::shards_json(shards);
        self.read("reading the next ready time", move |c, _| queue::next_ready_at(c, shards.as_deref())).await
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.wake.subscribe()
    }
}

#[async_trait]
impl Members for SqliteStore {
    async fn member_heartbeat(&self, beat: MemberBeat) -> Result<Vec<Member>> {
        self.write("recording a heartbeat", move |tx, now, _| members::heartbeat(tx, now, &beat)).await
    }

    async fn member_leave(&self, id: &str) -> Result<()> {
        let id = id.to_string();
        self.write("leaving the members", move |tx, _, _| members::leave(tx, &id)).await
    }

    async fn member_list(&self) -> Result<Vec<Member>> {
        self.read("listing members", members::list).await
    }
}

#[async_trait]
impl StatusRead for SqliteStore {
    async fn status_list(&self, filter: &StatusFilter) -> Result<Vec<KeyStatus>> {
        let filter = filter.clone();
        self.read("reading status", move |c, now| {
            let mut statuses = rows::status_list(c, now, &filter)?;
            crate::live::attach_drift(&mut statuses, live::drifts(c, &filter, None)?);
            Ok(statuses)
        })
        .await
    }

    async fn status_page(
        &self,
        filter: &StatusFilter,
        page: &PageRequest<WorkKey>,
    ) -> Result<Page<KeyStatus, WorkKey>> {
        let (filter, page) = (filter.clone(), page.clone());
        self.read("reading status", move |c, now| pages::status(c, now, &filter, &page)).await
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        self.read("reading queue stats", rows::queue_stats).await
    }

    async fn store_ready(&self) -> Result<crate::Schema> {
        const STEP: &str = "checking readiness";
        let found: usize =
            self.read(STEP, |c, _| Ok(c.pragma_query_value(None, "user_version", |r| r.get(0))?)).await?;
        crate::error::schema_ready(STEP, "sqlite", found, schema::latest())
    }

    async fn status_summary(&self, tenant: &str, syncset: Option<&str>) -> Result<StatusSummary> {
        let (tenant, syncset) = (tenant.to_string(), syncset.map(str::to_string));
        self.read("summing status", move |c, now| summary::status_summary(c, &tenant, syncset.as_deref(), now)).await
    }

    async fn cluster_conditions(&self, tenant: &str, stale_after: Duration) -> Result<ClusterConditions> {
        let tenant = tenant.to_string();
        self.read("counting clusters by condition", move |c, now| {
            summary::cluster_conditions(c, &tenant, now.minus(stale_after))
        })
        .await
    }
}

#[async_trait]
impl EventLog for SqliteStore {
    async fn events_read(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.read("reading events", move |c, _| rows::events_read(c, after, limit)).await
    }

    async fn events_read_of(&self, tenants: &[String], after: u64, limit: usize) -> Result<Vec<Event>> {
        let tenants = tenants.to_vec();
        self.read("reading a tenant's events", move |c, _| rows::events_read_of(c, &tenants, after, limit)).await
    }

    async fn events_newest(&self, tenants: Option<&[String]>, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        let tenants = tenants.map(<[String]>::to_vec);
        self.read("reading the newest events", move |c, _| rows::events_newest(c, tenants.as_deref(), before, limit))
            .await
    }

    async fn events_head(&self) -> Result<u64> {
        self.read("reading the event log's head", |c, _| rows::events_head(c)).await
    }

    async fn events_of(&self, object: &EventObject, before: Option<u64>, limit: usize) -> Result<Vec<Event>> {
        let object = object.clone();
        self.read("reading an object's events", move |c, _| rows::events_of(c, &object, before, limit)).await
    }

    async fn events_trim(&self, keep: EventRetention) -> Result<EventsTrimmed> {
        crate::event::trim_in_chunks(|| {
            self.write("trimming events", move |tx, now, _| rows::events_trim_chunk(tx, now, &keep))
        })
        .await
    }

    async fn consumer_get(&self, name: &str) -> Result<Option<u64>> {
        check_consumer_name(name)?;
        let name = name.to_string();
        self.read("reading a consumer cursor", move |c, _| consumers::get(c, &name)).await
    }

    async fn consumer_ack(&self, name: &str, seq: u64) -> Result<u64> {
        check_consumer_name(name)?;
        let name = name.to_string();
        self.write("acknowledging events", move |tx, now, _| consumers::ack(tx, now, &name, seq)).await
    }

    fn events_subscribe(&self) -> watch::Receiver<u64> {
        self.inner.events.subscribe()
    }
}

#[async_trait]
impl Tokens for SqliteStore {
    async fn token_create(&self, record: &TokenRecord, hash: &[u8; 32]) -> Result<bool> {
        let (record, hash) = (record.clone(), *hash);
        self.write("storing a token", move |tx, _, _| tokens::create(tx, &record, &hash)).await
    }

    async fn token_find(&self, hash: &[u8; 32]) -> Result<Option<TokenRecord>> {
        let hash = *hash;
        self.read("finding a token", move |c, _| tokens::find(c, &hash)).await
    }

    async fn token_list(&self) -> Result<Vec<TokenRecord>> {
        self.read("listing tokens", |c, _| tokens::list(c)).await
    }

    async fn token_revoke(&self, tenant: Option<&str>, name: &str) -> Result<bool> {
        let (tenant, name) = (tenant.map(str::to_string), name.to_string());
        self.write("revoking a token", move |tx, _, _| tokens::revoke(tx, tenant.as_deref(), &name)).await
    }
}

#[async_trait]
impl LiveState for SqliteStore {
    async fn live_record(&self, tenant: &str, cluster: &str, records: Vec<LiveRecord>) -> Result<LiveRecorded> {
        let (tenant, cluster) = (tenant.to_string(), cluster.to_string());
        let out = self
            .write("recording live state", move |tx, now, _| live::record(tx, now, &tenant, &cluster, &records))
            .await?;
        if !out.requeued.is_empty() {
            self.wake();
        }
        Ok(out)
    }

    async fn live_list(&self, tenant: &str, cluster: &str) -> Result<Vec<LiveResource>> {
        let (tenant, cluster) = (tenant.to_string(), cluster.to_string());
        self.read("listing live state", move |c, _| live::list(c, &tenant, &cluster)).await
    }

    async fn live_page(&self, filter: &LiveFilter, page: &PageRequest<String>) -> Result<Page<LiveResource, String>> {
        let (filter, page) = (filter.clone(), page.clone());
        self.read("listing live state", move |c, _| pages::live(c, &filter, &page)).await
    }
}

#[async_trait]
impl Rollouts for SqliteStore {
    async fn revision_get(&self, tenant: &str, syncset: &str, generation: i64) -> Result<Option<SyncSet>> {
        let (tenant, syncset) = (tenant.to_string(), syncset.to_string());
        self.read("reading a revision", move |c, _| rollouts::revision_get(c, &tenant, &syncset, generation)).await
    }

    async fn rollout_get(&self, tenant: &str, syncset: &str) -> Result<Option<RolloutState>> {
        let (tenant, syncset) = (tenant.to_string(), syncset.to_string());
        self.read("reading a rollout", move |c, _| rollouts::rollout_get(c, &tenant, &syncset)).await
    }

    async fn rollout_list(&self, tenant: Option<&str>, phase: Option<RolloutPhase>) -> Result<Vec<RolloutState>> {
        let tenant = tenant.map(str::to_string);
        self.read("listing rollouts", move |c, _| rollouts::rollout_list(c, tenant.as_deref(), phase)).await
    }

    async fn rollout_write(
        &self,
        next: &RolloutState,
        enqueue: &[(String, i64)],
        event: Option<RolloutEvent>,
    ) -> Result<bool> {
        let (next, enqueue) = (next.clone(), enqueue.to_vec());
        let written = self
            .write("writing a rollout", move |tx, now, _| {
                rollouts::rollout_write(tx, now, &next, &enqueue, event.as_ref())
            })
            .await?;
        if written {
            self.wake();
            self.logged();
        }
        Ok(written)
    }
}

/// Milliseconds of a duration as SQLite's integer.
fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let (tries, _) =
            attempts(u32::MAX, Box::new(|| StoreError::Corrupt { table: "work", message: "x".into() })).await;
        assert_eq!(tries, 1, "an answer about the data");
    }
}
