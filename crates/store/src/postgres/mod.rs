//! The PostgreSQL backend: many worker processes on many machines, one database.
//!
//! Same rows and the same key lifecycle as SQLite (`lifecycle.rs`); what differs
//! is how many processes share them safely:
//!
//! - **Connections.** [`PgStore::connect`] takes a URL or `key=value` string plus the
//!   usual `PG*` environment variables (precedence, defaults and what is not supported
//!   are in `conninfo.rs`), an optional schema (made the `search_path`), and uses a pool of
//!   [`PgOptions::pool_size`] connections (default 16), plus one for LISTEN. All of them
//!   use TLS as `sslmode` says (`tls.rs`).
//! - **Time.** "Now" — in leases, member TTLs, due times, every timestamp written — is
//!   the database server's clock, the one clock every process shares: [`DbClock`]
//!   (`clock.rs`) samples it at connect and every few seconds and carries it forward on
//!   this machine's monotonic clock, so no transaction spends a round trip on it and
//!   no machine's wall clock is ever read. [`Store::clock`] hands the same clock to the
//!   runtime. A store opened with [`StoreConfig::clock`] (tests) uses that clock instead.
//! - **Transactions** are READ COMMITTED with the server's `synchronous_commit` (on by
//!   default): a call returns after its commit is durable. `now` is read from the
//!   store's clock once per transaction and passed as a parameter. A transaction
//!   that hits a deadlock, a serialization failure or a dropped connection before its
//!   commit is retried (up to 4 attempts in all) with a fresh connection. One the
//!   server refuses for the data it was given (SQLSTATE class 22, a data exception, e.g.
//!   a NUL byte in text) is not: it fails as [`StoreError::Refused`].
//! - **Claims** take a batch in one statement (`claim.rs`): due keys are found in the
//!   `due` table (`due.rs`) in `due_at, tenant, cluster, syncset` order — each key at its
//!   `run_at`, a leased one too, whose expiry the claimer's cursor remembers and comes
//!   back to (`cursor.rs`) — then `FOR UPDATE SKIP LOCKED` locks
//!   their `work` rows and an `UPDATE … RETURNING` leases them with tokens from a
//!   SEQUENCE. Concurrent claimers skip each other's rows instead of waiting.
//! - **Completions** of one call commit in one transaction, with set-based statements
//!   (`complete.rs`). They find their rows by the ids this process's claims remembered
//!   (`locations.rs`), and by key otherwise.
//! - **Lock order.** Row locks on `work` are taken in id order everywhere a writer may
//!   wait for them (enqueues, completions, renewals, resyncs, cluster deletions), one
//!   statement each, so concurrent writers do not deadlock. A statement that locks rows
//!   in a CTE and then writes them names them by id, never by `ctid`: a lock that waited
//!   for another writer holds the row's newest version, which the statement's own
//!   snapshot cannot see by `ctid` (it would skip the row); a row in `due` is only
//!   written by the holder of its key's `work` row lock, and claims never wait for a
//!   `work` row (`SKIP LOCKED`), so `due` adds no wait that could close a cycle; object
//!   writes take a
//!   per-tenant advisory lock first (so a cluster and a SyncSet applied at the same time
//!   by two processes both see each other, and enqueue their common key).
//! - **The event log** is in commit order: a transaction appends its events last, under
//!   a per-schema advisory lock held until it commits, so a reader following the log
//!   by `seq` never sees a later number commit before an earlier one. The price: the
//!   commits of transactions that append events (object writes, completions) are
//!   serialized per schema, which is one more reason completions come in batches.
//! - **Wake-ups** go through LISTEN/NOTIFY (`listen.rs`) to every process, and directly
//!   to this process's own waiters: one channel for claimable work, one for appended
//!   events (event watchers).
//! - **Retention** deletes the oldest events in chunks and records the log's horizon in
//!   `events_horizon` in the same transaction (`rows.rs`).
//! - **Table bloat.** `schema.rs` explains the fill factor, which updates are HOT and
//!   why each index exists.

mod claim;
pub mod clock;
mod complete;
mod conninfo;
mod consumers;
mod cursor;
mod due;
mod listen;
mod live;
mod locations;
mod members;
mod objects;
mod queue;
mod rows;
mod schema;
mod tls;

use crate::{
    check_consumer_name, ApplyOutcome, ClaimParams, ClaimedItem, ClusterLimit, CompleteOutcome, Completion, Event, EventRetention,
    EventsTrimmed, Fence, LiveRecord, LiveRecorded, LiveResource, Member, MemberBeat, OwnWrite, QueueStats, RenewParams,
    Result, StatusFilter, Store, StoreConfig, StoreError,
};
use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use clock::DbClock;
use fleetsync_model::{Clock, Cluster, Document, Kind, KeyStatus, ResourceRef, Secret, SyncSet, Timestamp, WorkKey};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// Windows of due keys one claim looks through at most (see `work_claim`).
const CLAIM_PASSES: usize = 8;

/// How often a write transaction is tried when it fails in a way that is safe to retry.
const WRITE_ATTEMPTS: u32 = 4;
/// How long a call waits for a free pooled connection before it fails.
const POOL_WAIT: Duration = Duration::from_secs(30);

/// How to open a [`PgStore`] beyond the URL.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// The schema fleetsync's tables live in (created if missing); `None` = the first
    /// schema of the connection's `search_path` (usually `public`). Lower-case letters,
    /// digits and underscores.
    pub schema: Option<String>,
    /// Most pooled connections this store opens (the LISTEN connection is extra).
    pub pool_size: usize,
    /// Apply missing schema migrations when connecting. If false, connecting fails
    /// unless the schema is already at this build's version (`fleetsync migrate` first).
    pub migrate: bool,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self { schema: None, pool_size: 16, migrate: true }
    }
}

/// The PostgreSQL store. Cheap to clone; clones share the pool and the listener, which
/// stops when the last clone is dropped.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    config: StoreConfig,
    /// "Now": the config's clock, or the database's ([`DbClock`]).
    clock: Arc<dyn Clock>,
    /// The schema in use (also the notification payload and part of lock names).
    schema: String,
    wake: watch::Sender<u64>,
    /// Bumped after every commit that appended events, here or in another process.
    events: watch::Sender<u64>,
    /// Where this process's claims start (see `cursor.rs`).
    cursors: Arc<cursor::ClaimCursors>,
    /// Where this process's claims left the rows of the keys they leased, for their
    /// completions (see `locations.rs`).
    locations: Arc<locations::Locations>,
    _listener: listen::Listener,
    /// Keeps the [`DbClock`] fresh, if this store uses one.
    _clock: Option<clock::Refresher>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").field("schema", &self.inner.schema).field("pool", &self.inner.pool.status()).finish()
    }
}

impl PgStore {
    /// Connects with the default [`PgOptions`] (pool of 16, migrations applied) and
    /// `schema` as the place for fleetsync's tables.
    pub async fn connect(url: &str, schema: Option<&str>, config: StoreConfig) -> Result<PgStore> {
        let options = PgOptions { schema: schema.map(str::to_string), ..PgOptions::default() };
        Self::connect_with(url, options, config).await
    }

    /// Connects, brings the schema up to date (or checks it is, see
    /// [`PgOptions::migrate`]) and starts listening for wake-ups.
    pub async fn connect_with(url: &str, options: PgOptions, config: StoreConfig) -> Result<PgStore> {
        let info = conninfo::config(url, options.schema.as_deref())?;
        let tls = info.tls.connector()?;
        let target = conninfo::describe_target(&info.pg);
        let manager = Manager::from_config(info.pg.clone(), tls.clone(), ManagerConfig { recycling_method: RecyclingMethod::Fast });
        // Last in, first out: the connections used a moment ago are handed out again, so a
        // busy process keeps a few backends (and their caches) hot instead of rotating
        // through the whole pool. Measured on the drain: 16 rotating connections ran 6–19%
        // slower than 4.
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .queue_mode(deadpool_postgres::QueueMode::Lifo)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|e| StoreError::Backend { step: "creating the connection pool", message: e.to_string() })?;
        let connecting = |e: PoolError| StoreError::Backend {
            step: "connecting to PostgreSQL",
            message: format!("{target}: {}", with_hint(pool_error(&e), &info.tls, backend_error(&e))),
        };
        let mut client = pool.get().await.map_err(connecting)?;
        let schema = prepare_schema(&mut client, options.schema.as_deref(), options.migrate).await?;
        drop(client);
        let (clock, refresher): (Arc<dyn Clock>, _) = match config.clock.clone() {
            Some(given) => (given, None),
            None => {
                let db = Arc::new(DbClock::connect(&pool).await.map_err(|e| e.into_store("reading the database's clock"))?);
                (db.clone(), Some(clock::refresh(pool.clone(), db)))
            }
        };
        let (wake, _) = watch::channel(0);
        let (events, _) = watch::channel(0);
        let cursors = Arc::new(cursor::ClaimCursors::default());
        let listener = listen::start(info.pg, tls, schema.clone(), wake.clone(), events.clone(), cursors.clone())
            .await
            .map_err(|message| StoreError::Backend { step: "listening for wake-ups", message: format!("{target}: {message}") })?;
        let locations = Arc::default();
        let inner = Inner { pool, config, clock, schema, wake, events, cursors, locations, _listener: listener, _clock: refresher };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// Brings the schema up to date without opening a store (what `fleetsync migrate`
    /// does); returns the version it is at.
    pub async fn migrate(url: &str, schema: Option<&str>) -> Result<i32> {
        let info = conninfo::config(url, schema)?;
        let (mut client, connection) = info.pg.connect(info.tls.connector()?).await.map_err(|e| StoreError::Backend {
            step: "connecting to PostgreSQL",
            message: format!("{}: {}", conninfo::describe_target(&info.pg), with_hint(describe(&e), &info.tls, Some(&e))),
        })?;
        let driver = tokio::spawn(connection);
        let schema = prepare_schema(&mut client, schema, true).await?;
        let version = schema::version(&client).await.map_err(|e| e.into_store("checking the database schema"));
        drop(client);
        let _ = driver.await;
        tracing::info!(schema, "database schema is up to date");
        version
    }

    /// The schema this store's tables are in.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Runs `f` in a transaction and commits it, retrying what is safe to retry.
    async fn write<T, F>(&self, step: &'static str, mut f: F) -> Result<T>
    where
        T: Send,
        F: for<'t, 'c> FnMut(&'t mut Tx<'c>) -> BoxFuture<'t, PgResult<T>> + Send,
    {
        let mut attempt = 1;
        loop {
            match self.write_once(&mut f).await {
                Ok((out, committed)) => {
                    if let Some(run_at) = committed.wake_at {
                        self.inner.cursors.lower(Some(run_at));
                        listen::bump(&self.inner.wake);
                    }
                    if committed.logged {
                        listen::bump(&self.inner.events);
                    }
                    return Ok(out);
                }
                Err(e) if Again::Write.wanted(&e, attempt) => {
                    tracing::debug!(step, attempt, error = %e.message(), "retrying a transaction");
                    Again::Write.pause(attempt).await;
                    attempt += 1;
                }
                Err(e) => return Err(e.into_store(step)),
            }
        }
    }

    async fn write_once<T, F>(&self, f: &mut F) -> PgResult<(T, Committed)>
    where
        F: for<'t, 'c> FnMut(&'t mut Tx<'c>) -> BoxFuture<'t, PgResult<T>>,
    {
        let mut client = self.inner.pool.get().await?;
        let tx = client.transaction().await?;
        let mut tx = Tx {
            tx,
            now: self.inner.clock.now(),
            schema: &self.inner.schema,
            events: Vec::new(),
            wake_at: None,
            own: None,
            due: due::DueMoves::default(),
        };
        let out = match f(&mut tx).await {
            Ok(out) => out,
            Err(e) => {
                tx.rollback().await;
                return Err(e);
            }
        };
        let committed = tx.commit().await?;
        Ok((out, committed))
    }

    /// Runs `f` on a pooled connection (no transaction), retrying once if the
    /// connection turns out to be dead.
    async fn read<T, F>(&self, step: &'static str, f: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnMut(&'c deadpool_postgres::Client, Timestamp) -> BoxFuture<'c, PgResult<T>> + Send,
    {
        self.on_client(step, Again::Read, f).await
    }

    /// Runs a write that is one statement (it appends no event, moves nothing in `due`
    /// and wakes no one) outside [`Tx`], with what `f` sends around it. Retried like
    /// [`write`](Self::write); also when the connection was lost, whether or not the
    /// statement took effect, so `f` must be safe to run again (a claim is: the leases of
    /// one whose answer was lost expire).
    async fn write_statement<T, F>(&self, step: &'static str, f: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnMut(&'c deadpool_postgres::Client, Timestamp) -> BoxFuture<'c, PgResult<T>> + Send,
    {
        self.on_client(step, Again::Write, f).await
    }

    /// Runs `f` on a pooled connection, trying again as `again` says.
    async fn on_client<T, F>(&self, step: &'static str, again: Again, mut f: F) -> Result<T>
    where
        T: Send,
        F: for<'c> FnMut(&'c deadpool_postgres::Client, Timestamp) -> BoxFuture<'c, PgResult<T>> + Send,
    {
        let mut attempt = 1;
        loop {
            let result = match self.inner.pool.get().await {
                Ok(client) => f(&client, self.inner.clock.now()).await,
                Err(e) => Err(Failure::Pool(e)),
            };
            match result {
                Err(e) if again.wanted(&e, attempt) => {
                    tracing::debug!(step, attempt, error = %e.message(), "trying again");
                    again.pause(attempt).await;
                    attempt += 1;
                }
                other => return other.map_err(|e| e.into_store(step)),
            }
        }
    }

    /// One claim statement from the claimer's cursor, moving the cursor after it.
    async fn claim_once(&self, params: &ClaimParams, window: i64) -> Result<claim::Claimed> {
        let cursors = &self.inner.cursors;
        let from = cursors.begin(&params.owner, params.shards.as_deref(), self.inner.clock.now().millis());
        let mut claimed = self
            .write_statement("claiming work", |c, now| Box::pin(claim::claim(c, now, params.clone(), from.clone(), window)))
            .await?;
        tracing::trace!(owner = params.owner, ?from, next = ?claimed.next, window, asked = params.limit, took = claimed.items.len(), cut = claimed.window_cut, "claimed");
        cursors.end(&params.owner, params.shards.as_deref(), claimed.next.clone(), claimed.leases.take());
        // Only now, after the commit: a retried attempt's locations would be wrong.
        self.inner.locations.claimed(std::mem::take(&mut claimed.located), params.lease_ttl);
        Ok(claimed)
    }
}

/// When a call on a pooled connection is tried again.
#[derive(Debug, Clone, Copy)]
enum Again {
    /// A read: once more, at once, if the connection turned out to be dead.
    Read,
    /// A write: after a transient failure (deadlock, serialization, a lost connection),
    /// up to [`WRITE_ATTEMPTS`] in all, after a short jittered pause.
    Write,
}

impl Again {
    fn wanted(self, e: &Failure, attempt: u32) -> bool {
        match self {
            Again::Read => e.connection_lost() && attempt < 2,
            Again::Write => e.retryable() && attempt < WRITE_ATTEMPTS,
        }
    }

    async fn pause(self, attempt: u32) {
        if let Again::Write = self {
            tokio::time::sleep(Duration::from_millis(u64::from(attempt) * (2 + rand::random::<u64>() % 8))).await;
        }
    }
}

/// A boxed future, as the transaction closures return.
pub(super) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A write transaction: the statements, `now` for all of them, and what to do at
/// commit (append events in commit order, notify waiters).
pub(super) struct Tx<'c> {
    tx: deadpool_postgres::Transaction<'c>,
    pub(super) now: Timestamp,
    schema: &'c str,
    events: Vec<NewEvent>,
    /// The earliest `run_at` of the keys this transaction made ready, if any.
    wake_at: Option<i64>,
    /// The key making an own write in this transaction: enqueues leave it clean.
    pub(super) own: Option<WorkKey>,
    /// How the keys written move in `due`, applied at commit.
    due: due::DueMoves,
}

/// What a commit is to tell this process's waiters.
struct Committed {
    /// Work may have become claimable, due from this `run_at` on.
    wake_at: Option<i64>,
    /// Events were appended.
    logged: bool,
}

/// An event to append at commit.
struct NewEvent {
    tenant: String,
    kind: &'static str,
    name: String,
    action: &'static str,
    generation: i64,
}

impl Tx<'_> {
    pub(super) async fn query(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>> {
        query(&self.tx, sql, params).await
    }

    pub(super) async fn query_opt(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Option<Row>> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.query_opt(&stmt, params).await?)
    }

    pub(super) async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<u64> {
        let stmt = self.tx.prepare_cached(sql).await?;
        Ok(self.tx.execute(&stmt, params).await?)
    }

    /// The transaction as a client, for the readers shared with reads.
    pub(super) fn client(&self) -> &deadpool_postgres::Transaction<'_> {
        &self.tx
    }

    /// Appends an event to the log when the transaction commits.
    pub(super) fn event(&mut self, tenant: &str, kind: &'static str, name: &str, action: &'static str, generation: i64) {
        self.events.push(NewEvent { tenant: tenant.into(), kind, name: name.into(), action, generation });
    }

    /// Wakes waiting workers (in every process) when the transaction commits, and
    /// moves their claim cursors back to `run_at`, when the keys made ready are due.
    pub(super) fn wake_at(&mut self, run_at: Timestamp) {
        self.wake_at = Some(self.wake_at.map_or(run_at.millis(), |at| at.min(run_at.millis())));
    }

    /// Serializes object writes within a tenant, across processes, until commit.
    pub(super) async fn lock_tenant(&self, tenant: &str) -> PgResult<()> {
        let name = format!("fleetsync objects {} {tenant}", self.schema);
        self.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &[&name]).await?;
        Ok(())
    }

    /// Ends the transaction without effect, now: the connection goes back to the pool
    /// clean (dropping it would only queue a ROLLBACK for whenever the connection task
    /// next runs). A failure here means the connection is gone, which ends it too.
    async fn rollback(self) {
        let _ = self.tx.rollback().await;
    }

    /// Runs `statements` pipelined (see [`pipeline`]).
    pub(super) async fn pipeline(&self, statements: &[Statement<'_>]) -> PgResult<Vec<Vec<Row>>> {
        pipeline(&self.tx, statements).await
    }

    /// Moves the keys' rows in `due`, appends the events under the log's lock (held
    /// until commit, so `seq` follows commit order), notifies, commits. Returns which
    /// waiters are to be woken.
    ///
    /// The statements before COMMIT need nothing from each other's results: they go out
    /// pipelined, one round trip, not four, while this transaction holds its rows and the
    /// log's lock.
    async fn commit(self) -> PgResult<Committed> {
        let logged = !self.events.is_empty();
        let lock = format!("fleetsync events {}", self.schema);
        let tenants: Vec<&str> = self.events.iter().map(|e| e.tenant.as_str()).collect();
        let kinds: Vec<&str> = self.events.iter().map(|e| e.kind).collect();
        let names: Vec<&str> = self.events.iter().map(|e| e.name.as_str()).collect();
        let actions: Vec<&str> = self.events.iter().map(|e| e.action).collect();
        let generations: Vec<i64> = self.events.iter().map(|e| e.generation).collect();
        let now = self.now.millis();
        let work_payload = self.wake_at.map(|run_at| listen::work_payload(self.schema, run_at));
        let due = self.due.to_apply();
        let due_params = due.as_ref().map(due::Columns::params);
        let lock_params: [&(dyn ToSql + Sync); 1] = [&lock];
        let event_params: [&(dyn ToSql + Sync); 6] = [&now, &tenants, &kinds, &names, &actions, &generations];
        let work_params: [&(dyn ToSql + Sync); 2] = [&listen::CHANNEL, &work_payload];
        let events_params: [&(dyn ToSql + Sync); 2] = [&listen::EVENTS_CHANNEL, &self.schema];
        let mut statements: Vec<Statement<'_>> = Vec::with_capacity(5);
        if let Some(params) = &due_params {
            statements.push((due::APPLY, params));
        }
        if logged {
            statements.push(("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", &lock_params));
            statements.push((
                "INSERT INTO events (at, tenant, kind, name, action, generation)
                 SELECT $1::bigint, u.tenant, u.kind, u.name, u.action, u.generation
                 FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[])
                      WITH ORDINALITY AS u(tenant, kind, name, action, generation, n)
                 ORDER BY u.n",
                &event_params,
            ));
        }
        if work_payload.is_some() {
            statements.push(("SELECT pg_notify($1, $2)", &work_params));
        }
        if logged {
            statements.push(("SELECT pg_notify($1, $2)", &events_params));
        }
        self.pipeline(&statements).await?;
        self.tx.commit().await.map_err(Failure::Commit)?;
        Ok(Committed { wake_at: self.wake_at, logged })
    }
}

/// A statement and its parameters.
pub(super) type Statement<'a> = (&'a str, &'a [&'a (dyn ToSql + Sync)]);

/// Runs statements of one session that need nothing from each other's results, sent
/// together: one round trip (tokio-postgres pipelines queries polled at once). The server
/// runs them in the order given, which is also the order they are sent in: they are all
/// prepared first (a statement not yet in this connection's cache costs a round trip of
/// its own, one that is costs none, so sending each as soon as it is prepared could send
/// a later one first), and the queries are then polled in order (each sends its request
/// on its first poll). If one fails, the transaction is aborted and those after it fail
/// too; the first failure is the one returned.
pub(super) async fn pipeline<C: GenericClient>(c: &C, statements: &[Statement<'_>]) -> PgResult<Vec<Vec<Row>>> {
    let mut prepared = Vec::with_capacity(statements.len());
    for (sql, _) in statements {
        prepared.push(c.prepare_cached(sql).await?);
    }
    let queries = prepared.iter().zip(statements).map(|(statement, (_, params))| c.query(statement, params));
    Ok(futures_util::future::try_join_all(queries).await?)
}

/// Runs a query through the connection's statement cache.
pub(super) async fn query<C: GenericClient>(c: &C, sql: &str, params: &[&(dyn ToSql + Sync)]) -> PgResult<Vec<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query(&stmt, params).await?)
}

/// Finds the schema to use, migrates it (or checks that it is migrated); returns its name.
async fn prepare_schema(client: &mut tokio_postgres::Client, given: Option<&str>, migrate: bool) -> Result<String> {
    let schema = match given {
        Some(s) => s.to_string(),
        None => current_schema(client).await.map_err(|e| e.into_store("finding the schema to use"))?,
    };
    let version = if migrate {
        schema::migrate(client, &schema, given.is_some()).await.map_err(|e| e.into_store("migrating the database schema"))?
    } else {
        schema::version(client).await.map_err(|e| e.into_store("checking the database schema"))?
    };
    if version < schema::latest() {
        return Err(StoreError::Backend {
            step: "checking the database schema",
            message: format!(
                "schema {schema} is at version {version}, this build needs {}: run `fleetsync migrate` first",
                schema::latest()
            ),
        });
    }
    if version > schema::latest() {
        tracing::warn!(schema, version, known = schema::latest(), "the database schema is newer than this build");
    }
    Ok(schema)
}

async fn current_schema(client: &tokio_postgres::Client) -> PgResult<String> {
    let schema: Option<String> = client.query_one("SELECT current_schema()", &[]).await?.try_get(0)?;
    schema.ok_or_else(|| {
        Failure::Store(StoreError::Backend {
            step: "finding the schema to use",
            message: "the connection's search_path names no existing schema: give a schema".into(),
        })
    })
}

/// Why an operation failed, before it is named for the caller.
pub(super) enum Failure {
    /// A statement failed; the transaction did not commit.
    Pg(tokio_postgres::Error),
    /// COMMIT itself failed: the outcome is unknown, so it is never retried.
    Commit(tokio_postgres::Error),
    /// No connection could be had.
    Pool(PoolError),
    Store(StoreError),
}

pub(super) type PgResult<T> = std::result::Result<T, Failure>;

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Failure::Store(e)
    }
}

impl From<PoolError> for Failure {
    fn from(e: PoolError) -> Self {
        Failure::Pool(e)
    }
}

impl Failure {
    /// Safe to run the whole transaction again: nothing of it committed, and trying
    /// again can succeed.
    fn retryable(&self) -> bool {
        let Failure::Pg(e) = self else { return false };
        let transient = [SqlState::T_R_DEADLOCK_DETECTED, SqlState::T_R_SERIALIZATION_FAILURE];
        e.code().is_some_and(|c| transient.contains(c)) || self.connection_lost()
    }

    /// The connection died under the statement (server restart, network).
    fn connection_lost(&self) -> bool {
        let Failure::Pg(e) = self else { return false };
        let shutdown = [SqlState::ADMIN_SHUTDOWN, SqlState::CRASH_SHUTDOWN];
        e.is_closed()
            || e.code().is_some_and(|c| shutdown.contains(c))
            || std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
    }

    fn message(&self) -> String {
        match self {
            Failure::Pg(e) => describe(e),
            Failure::Commit(e) => format!("commit failed, so whether it took effect is unknown: {}", describe(e)),
            Failure::Pool(e) => pool_error(e),
            Failure::Store(e) => e.to_string(),
        }
    }

    /// Why the server refused the data a statement was given (SQLSTATE class 22, a data
    /// exception; the same statement would be refused again), if it did: its message
    /// and code, without the detail (which may quote the value).
    fn refusal(&self) -> Option<String> {
        let Failure::Pg(e) = self else { return None };
        let db = e.as_db_error().filter(|db| db.code().code().starts_with("22"))?;
        Some(format!("{} (SQLSTATE {})", db.message(), db.code().code()))
    }

    fn into_store(self, step: &'static str) -> StoreError {
        if let Some(reason) = self.refusal() {
            return StoreError::Refused { step, reason };
        }
        match self {
            Failure::Store(e) => e,
            other => StoreError::Backend { step, message: other.message() },
        }
    }
}

/// An error with its causes, e.g. `db error: ERROR: relation "x" does not exist`.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut s = format!("{}: {} (SQLSTATE {})", db.severity(), db.message(), db.code().code());
        if let Some(detail) = db.detail() {
            s.push_str(&format!("; {detail}"));
        }
        return s;
    }
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    s
}

/// `message`, and what to check if the server's certificate was the trouble.
fn with_hint(message: String, tls: &tls::TlsSettings, e: Option<&tokio_postgres::Error>) -> String {
    match e.and_then(|e| tls.hint(e)) {
        Some(hint) => format!("{message} ({hint})"),
        None => message,
    }
}

fn backend_error(e: &PoolError) -> Option<&tokio_postgres::Error> {
    match e {
        PoolError::Backend(e) => Some(e),
        _ => None,
    }
}

fn pool_error(e: &PoolError) -> String {
    match e {
        PoolError::Backend(e) => describe(e),
        PoolError::Timeout(_) => format!("no free connection in the pool within {POOL_WAIT:?} (pool too small or connections stuck)"),
        other => other.to_string(),
    }
}

#[async_trait]
impl Store for PgStore {
    async fn objects_apply(&self, docs: Vec<Document>) -> Result<Vec<ApplyOutcome>> {
        let docs = Arc::new(docs);
        self.write("applying documents", |tx| {
            let docs = docs.clone();
            Box::pin(async move { objects::apply(tx, &docs).await })
        })
        .await
    }

    async fn objects_apply_own(&self, docs: Vec<Document>, own: OwnWrite) -> Result<Vec<ApplyOutcome>> {
        let (docs, own) = (Arc::new(docs), Arc::new(own));
        self.write("applying an own write", |tx| {
            let (docs, own) = (docs.clone(), own.clone());
            Box::pin(async move { objects::apply_own(tx, &docs, &own).await })
        })
        .await
    }

    async fn object_delete(&self, kind: Kind, tenant: &str, name: &str) -> Result<()> {
        self.write("deleting an object", |tx| Box::pin(objects::delete(tx, kind, tenant.to_string(), name.to_string()))).await
    }

    async fn cluster_get(&self, tenant: &str, name: &str) -> Result<Option<Cluster>> {
        self.read("reading a cluster", |c, _| Box::pin(objects::get(c, Kind::Cluster, tenant.to_string(), name.to_string()))).await
    }

    async fn cluster_list(&self, tenant: Option<&str>) -> Result<Vec<Cluster>> {
        self.read("listing clusters", |c, _| Box::pin(objects::list(c, Kind::Cluster, tenant.map(str::to_string)))).await
    }

    async fn syncset_get(&self, tenant: &str, name: &str) -> Result<Option<SyncSet>> {
        self.read("reading a syncset", |c, _| Box::pin(objects::get(c, Kind::SyncSet, tenant.to_string(), name.to_string()))).await
    }

    async fn syncset_list(&self, tenant: Option<&str>) -> Result<Vec<SyncSet>> {
        self.read("listing syncsets", |c, _| Box::pin(objects::list(c, Kind::SyncSet, tenant.map(str::to_string)))).await
    }

    async fn secret_get(&self, tenant: &str, name: &str) -> Result<Option<Secret>> {
        self.read("reading a secret", |c, _| Box::pin(objects::get(c, Kind::Secret, tenant.to_string(), name.to_string()))).await
    }

    async fn secret_list(&self, tenant: Option<&str>) -> Result<Vec<Secret>> {
        self.read("listing secrets", |c, _| Box::pin(objects::list(c, Kind::Secret, tenant.map(str::to_string)))).await
    }

    /// A claim looks through a narrow window of due keys first (as many as the batch).
    /// When that window filled up with keys it cannot take and did not fill the batch,
    /// it looks further at once, up to [`CLAIM_PASSES`] windows in all:
    ///
    /// - through the wide window, when keys held back by the per-cluster limit filled it
    ///   (counting what it took so far against the limit);
    /// - through the next window, when leases filled it (they stay in `due` while they
    ///   run): a cursor that starts before a process's live leases (a new claimer, one
    ///   that went back) passes them in one call, not one window per wake-up.
    async fn work_claim(&self, params: ClaimParams) -> Result<Vec<ClaimedItem>> {
        let mut items: Vec<ClaimedItem> = Vec::new();
        // The parameters of a further pass: made only when one is needed (the usual
        // claim is one pass, and the cluster limit's counts are a map worth not copying).
        let mut rest: Option<ClaimParams> = None;
        let mut wide = false;
        for _ in 0..CLAIM_PASSES {
            let pass = rest.as_ref().unwrap_or(&params);
            let limit = i64::try_from(pass.limit).unwrap_or(i64::MAX);
            let window = if wide { ClusterLimit::window(limit) } else { ClusterLimit::narrow_window(limit) };
            let claimed = self.claim_once(pass, window).await?;
            let before = items.len();
            items.extend(claimed.items);
            if items.len() >= params.limit || !(claimed.window_cut || claimed.more) {
                break;
            }
            wide |= claimed.window_cut;
            // What is left to claim, with what this pass took counted against the limit.
            let next = rest.get_or_insert_with(|| params.clone());
            next.limit = params.limit - items.len();
            if let Some(cluster_limit) = next.cluster_limit.as_mut() {
                cluster_limit.count(&items[before..]);
            }
        }
        Ok(items)
    }

    async fn lease_renew(&self, params: RenewParams) -> Result<Vec<WorkKey>> {
        let params = Arc::new(params);
        let lost = self
            .write("renewing leases", |tx| {
                let params = params.clone();
                Box::pin(async move { queue::renew(tx, &params).await })
            })
            .await?;
        let renewed = params.leases.iter().filter(|(k, _)| !lost.contains(k)).map(|(k, f)| (k, *f));
        self.inner.locations.renewed(renewed, params.lease_ttl);
        Ok(lost)
    }

    async fn work_complete(&self, completions: Vec<Completion>) -> Result<Vec<CompleteOutcome>> {
        let completions = Arc::new(completions);
        let retry = self.inner.config.retry;
        let outcomes = self
            .write("completing work", |tx| {
                let (completions, locations) = (completions.clone(), self.inner.locations.clone());
                Box::pin(async move { complete::run(tx, &retry, &locations, &completions).await })
            })
            .await?;
        // Committed: each lease is over (or was already lost, if stale).
        self.inner.locations.forget(completions.iter().map(|c| (&c.key, c.fence)));
        Ok(outcomes)
    }

    async fn work_inventory_record(&self, key: &WorkKey, fence: Fence, inventory: &[ResourceRef]) -> Result<()> {
        let inventory = crate::stored::json("work", inventory)?;
        self.write("recording an inventory", |tx| Box::pin(queue::inventory_record(tx, key.clone(), fence, inventory.clone()))).await
    }

    async fn work_release(&self, key: &WorkKey, fence: Fence) -> Result<()> {
        self.write("releasing a key", |tx| Box::pin(queue::release(tx, key.clone(), fence))).await?;
        self.inner.locations.forget([(key, fence)]);
        Ok(())
    }

    async fn work_retry(&self, key: &WorkKey) -> Result<()> {
        self.write("retrying a key", |tx| Box::pin(queue::retry(tx, key.clone()))).await
    }

    async fn work_resync(&self) -> Result<u64> {
        self.write("resyncing", |tx| Box::pin(queue::resync(tx))).await
    }

    async fn work_next_ready_at(&self, shards: Option<&[u16]>) -> Result<Option<Timestamp>> {
        let (from, lease_ends) = self.inner.cursors.earliest(shards);
        let shards = claim::shard_array(shards);
        let next = self.read("reading the next ready time", |c, _| Box::pin(claim::next_due_at(c, shards.clone(), from.clone()))).await?;
        // The leases the claimers passed by are due when they expire.
        Ok(next.into_iter().chain(lease_ends.map(Timestamp)).min())
    }

    async fn member_heartbeat(&self, beat: MemberBeat) -> Result<Vec<Member>> {
        self.write("recording a heartbeat", |tx| Box::pin(members::heartbeat(tx, beat.clone()))).await
    }

    async fn member_leave(&self, id: &str) -> Result<()> {
        self.write("leaving the members", |tx| Box::pin(members::leave(tx, id.to_string()))).await
    }

    async fn member_list(&self) -> Result<Vec<Member>> {
        self.read("listing members", |c, now| Box::pin(members::list(c, now))).await
    }

    async fn status_list(&self, filter: &StatusFilter) -> Result<Vec<KeyStatus>> {
        self.read("reading status", |c, now| {
            let filter = filter.clone();
            Box::pin(async move {
                let mut statuses = rows::status_list(c, now, filter.clone()).await?;
                crate::live::attach_drift(&mut statuses, live::drifts(c, &filter).await?);
                Ok(statuses)
            })
        })
        .await
    }

    async fn live_record(&self, tenant: &str, cluster: &str, records: Vec<LiveRecord>) -> Result<LiveRecorded> {
        let records = Arc::new(records);
        self.write("recording live state", |tx| {
            let (records, tenant, cluster) = (records.clone(), tenant.to_string(), cluster.to_string());
            Box::pin(async move { live::record(tx, tenant, cluster, &records).await })
        })
        .await
    }

    async fn live_list(&self, tenant: &str, cluster: &str) -> Result<Vec<LiveResource>> {
        self.read("listing live state", |c, _| Box::pin(live::list(c, tenant.to_string(), cluster.to_string()))).await
    }

    async fn queue_stats(&self) -> Result<QueueStats> {
        self.read("reading queue stats", |c, now| Box::pin(rows::queue_stats(c, now))).await
    }

    async fn events_read(&self, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.read("reading events", |c, _| Box::pin(rows::events_read(c, after, limit))).await
    }

    async fn events_trim(&self, keep: EventRetention) -> Result<EventsTrimmed> {
        crate::event::trim_in_chunks(|| self.write("trimming events", move |tx| Box::pin(rows::events_trim_chunk(tx, keep)))).await
    }

    async fn consumer_get(&self, name: &str) -> Result<Option<u64>> {
        check_consumer_name(name)?;
        self.read("reading a consumer cursor", |c, _| Box::pin(consumers::get(c, name.to_string()))).await
    }

    async fn consumer_ack(&self, name: &str, seq: u64) -> Result<u64> {
        check_consumer_name(name)?;
        self.write("acknowledging events", |tx| Box::pin(consumers::ack(tx, name.to_string(), seq))).await
    }

    fn clock(&self) -> Arc<dyn Clock> {
        self.inner.clock.clone()
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.wake.subscribe()
    }

    fn events_subscribe(&self) -> watch::Receiver<u64> {
        self.inner.events.subscribe()
    }
}

/// Test support: the database the PostgreSQL tests use, `FLEETSYNC_TEST_DATABASE_URL`
/// or the local default.
#[cfg(feature = "conformance")]
pub fn test_database_url() -> String {
    std::env::var("FLEETSYNC_TEST_DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Test support: a schema name of a test's own (the stores it opens create the schema),
/// dropped when this goes, also when the test failed.
#[cfg(feature = "conformance")]
#[derive(Debug)]
pub struct ScratchSchema {
    pub name: String,
}

#[cfg(feature = "conformance")]
impl ScratchSchema {
    pub fn new() -> Self {
        Self { name: format!("fs_{:016x}", rand::random::<u64>()) }
    }
}

#[cfg(feature = "conformance")]
impl Default for ScratchSchema {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(feature = "conformance")]
impl Drop for ScratchSchema {
    fn drop(&mut self) {
        drop_schema_blocking(&test_database_url(), &self.name);
    }
}

/// Test support: drops `schema` (best effort) on a runtime of its own, so a test
/// harness can clean up from `Drop` while its own runtime may be shutting down.
#[cfg(feature = "conformance")]
pub fn drop_schema_blocking(url: &str, schema: &str) {
    let (url, sql) = (url.to_string(), format!("DROP SCHEMA IF EXISTS {schema} CASCADE"));
    let _ = std::thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            if let Ok((client, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                tokio::spawn(conn);
                let _ = client.batch_execute(&sql).await;
            }
        });
    })
    .join();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh schema per test, dropped afterwards (best effort).
    struct Harness {
        schema: ScratchSchema,
    }

    impl Harness {
        async fn new() -> Self {
            let schema = ScratchSchema::new();
            let (client, conn) = tokio_postgres::connect(&test_database_url(), tokio_postgres::NoTls).await.expect("connect to the test database");
            tokio::spawn(conn);
            client.batch_execute(&format!("CREATE SCHEMA {}", schema.name)).await.expect("create schema");
            Harness { schema }
        }
    }

    #[async_trait]
    impl crate::conformance::Harness for Harness {
        async fn open(&self, config: StoreConfig) -> Arc<dyn Store> {
            Arc::new(PgStore::connect(&test_database_url(), Some(&self.schema.name), config).await.expect("connect"))
        }
    }

    async fn harness() -> Harness {
        Harness::new().await
    }

    crate::conformance_tests!(harness());

    /// An admin connection to the test database, with `schema` first on its path, that
    /// writes as a process of this build (see `due.rs`).
    async fn admin(schema: &str) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&test_database_url(), tokio_postgres::NoTls).await.expect("connect to the test database");
        tokio::spawn(conn);
        let setup = format!("SET search_path = {schema}; SET fleetsync.schema_version = {}", schema::latest());
        client.batch_execute(&setup).await.expect("search_path");
        client
    }

    /// Claims remember each lease's row id (the id the key's row really has); renewals
    /// keep it, completions and releases forget it again.
    #[tokio::test]
    async fn leases_remember_their_rows() {
        use crate::conformance::{applied_completion, cluster, syncset};
        let h = harness().await;
        let store = PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("connect");
        let admin = admin(&h.schema.name).await;
        let docs = vec![cluster("c1", &[("env", "prod")]), syncset("s1", 1, "v1"), syncset("s2", 1, "v1")];
        store.objects_apply(docs).await.expect("apply");
        let ttl = Duration::from_secs(30);
        let items = store.work_claim(ClaimParams::new("w", 10, ttl)).await.expect("claim");
        assert_eq!(items.len(), 2);
        let id = |key: &WorkKey| {
            let sql = "SELECT id FROM work WHERE tenant = $1 AND cluster = $2 AND syncset = $3";
            let (admin, key) = (&admin, key.clone());
            async move { admin.query_one(sql, &[&key.tenant, &key.cluster, &key.syncset]).await.expect("id").get::<_, i64>(0) }
        };
        let locations = &store.inner.locations;
        for item in &items {
            assert_eq!(locations.get(&item.key, item.fence), Some(id(&item.key).await), "claimed {}", item.key);
        }

        let (first, second) = (&items[0], &items[1]);
        let lost = store.lease_renew(RenewParams { leases: vec![(first.key.clone(), first.fence)], lease_ttl: ttl }).await;
        assert!(lost.expect("renew").is_empty());
        assert_eq!(locations.get(&first.key, first.fence), Some(id(&first.key).await), "renewed: still remembered");

        let out = store.work_complete(vec![applied_completion(first)]).await.expect("complete");
        assert_eq!(out, [CompleteOutcome::Committed(fleetsync_model::Phase::Applied)]);
        assert_eq!(locations.get(&first.key, first.fence), None, "completed: forgotten");
        store.work_release(&second.key, second.fence).await.expect("release");
        assert_eq!(locations.len(), 0, "released: forgotten");
    }

    /// A session set up as the store's are, on `h`'s migrated schema, with 20,000 keys of
    /// 400 clusters in `work` (their rows in `due` too, when `phase` is `ready`), and the
    /// generic plans a prepared statement switches to after five runs.
    async fn filled(h: &Harness, phase: &str) -> tokio_postgres::Client {
        let _store = PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("connect (migrates)");
        let info = conninfo::config(&test_database_url(), Some(&h.schema.name)).expect("settings");
        let (session, conn) = info.pg.connect(tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(conn);
        let fill = format!(
            "INSERT INTO work (tenant, cluster, syncset, desired, apply_mode, generation, want_seq, claimed_seq, phase,
                               run_at, fence, attempts, observed_generation, updated_at, shard)
             SELECT 't', 'c' || (i / 50), 's' || (i % 50), true, 'Upsert', 1, 1, 0, '{phase}', 0, i, 0, 0, 0, (i / 50) % 256
             FROM generate_series(1, 20000) i;
             INSERT INTO due SELECT run_at, tenant, cluster, syncset, id, shard FROM work WHERE phase = 'ready';
             SET plan_cache_mode = force_generic_plan"
        );
        session.batch_execute(&fill).await.expect("fill");
        session
    }

    /// The completion's lock goes through the unique index on `id`, also in the generic
    /// plan a prepared statement switches to after five runs: an index fetch prunes the
    /// page, which leaves room for the completion's HOT update (a TID fetch does not).
    #[tokio::test]
    async fn the_completions_lock_goes_through_the_id_index() {
        let h = harness().await;
        let admin = filled(&h, "running").await;
        admin.batch_execute(&format!("PREPARE locked(bigint[]) AS {}", *complete::LOCK_BY_ID)).await.expect("prepare");
        let plan: Vec<String> =
            admin.query("EXPLAIN EXECUTE locked('{1,2,3}')", &[]).await.expect("explain").iter().map(|r| r.get(0)).collect();
        let plan = plan.join("\n");
        assert!(plan.contains("Index Scan using work_id on work"), "{plan}");
    }

    /// The claim's generic plan (what a prepared statement switches to after five runs)
    /// reads the window through `due`'s index in order and `work` by id: never a scan of
    /// either table, nor a bitmap scan that reads every due key and sorts them, whether
    /// the tables have statistics or not (right after a fleet-sized apply they may not).
    #[tokio::test]
    async fn the_claim_reads_only_its_window() {
        let h = harness().await;
        let admin = filled(&h, "ready").await;
        let types = "bigint, bigint, text, bigint, bigint, smallint[], bigint, text, text, text";
        admin.batch_execute(&format!("PREPARE plain({types}) AS {}", *claim::CLAIM)).await.expect("prepare");
        admin.batch_execute(&format!("PREPARE limited({types}, bigint, text[], text[], bigint[]) AS {}", *claim::CLAIM_LIMITED)).await.expect("prepare");
        let args = "1000, 512, 'w', 99999, 512, NULL, -9223372036854775808, '', '', ''";
        for stats in ["without statistics", "with statistics"] {
            if stats == "with statistics" {
                admin.batch_execute("ANALYZE work, due").await.expect("analyze");
            }
            for run in [format!("plain({args})"), format!("limited({args}, 256, '{{}}', '{{}}', '{{}}')")] {
                let explain = format!("EXPLAIN EXECUTE {run}");
                let plan: Vec<String> = admin.query(&explain, &[]).await.expect("explain").iter().map(|r| r.get(0)).collect();
                let plan = plan.join("\n");
                for bad in ["Seq Scan on work", "Seq Scan on due", "Bitmap"] {
                    assert!(!plan.contains(bad), "{stats}, {run}: {bad} in\n{plan}");
                }
                assert!(plan.contains("Index Scan using due_pkey on due"), "{stats}, {run}:\n{plan}");
            }
        }
    }

    /// A schema from before shards (version 2) with ready and running keys, migrated to
    /// this build's: every such key gets its row in `due`, at its `run_at`, with the
    /// shard the backfill gives it (not the -1 of the rows written before shards), and a
    /// claim of its shard takes it.
    #[tokio::test]
    async fn an_old_schema_migrates_with_its_pending_keys_claimable() {
        use fleetsync_model::shard::shard_of;
        let h = harness().await;
        let info = conninfo::config(&test_database_url(), Some(&h.schema.name)).expect("settings");
        let (mut old, conn) = info.pg.connect(tokio_postgres::NoTls).await.expect("connect");
        tokio::spawn(conn);
        schema::migrate_to(&mut old, &h.schema.name, true, 2).await.map_err(|e| e.message()).expect("migrate to 2");
        old.batch_execute(
            "INSERT INTO clusters VALUES ('t', 'c1', 1, '{}', '{}');
             INSERT INTO work (tenant, cluster, syncset, desired, apply_mode, generation, want_seq, claimed_seq, phase,
                               run_at, fence, lease_owner, lease_expires_at, attempts, observed_generation, updated_at)
             VALUES ('t', 'c1', 'ready', true, 'Upsert', 1, 1, 0, 'ready', 5, 0, NULL, NULL, 0, 0, 0),
                    ('t', 'c1', 'running', true, 'Upsert', 1, 1, 1, 'running', 7, 3, 'gone', 9, 1, 0, 0),
                    ('t', 'c1', 'idle', true, 'Upsert', 1, 1, 1, 'idle', 8, 2, NULL, NULL, 0, 1, 0)",
        )
        .await
        .expect("rows of a build before shards");
        schema::migrate(&mut old, &h.schema.name, true).await.map_err(|e| e.message()).expect("migrate to the latest");
        let shard = shard_of("t", "c1") as i16;
        let due: Vec<(i64, String, i16)> = old
            .query("SELECT due_at, syncset, shard FROM due ORDER BY due_at", &[])
            .await
            .expect("due")
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        assert_eq!(due, [(5, "ready".to_string(), shard), (7, "running".to_string(), shard)]);

        let store = PgStore::connect(&test_database_url(), Some(&h.schema.name), StoreConfig::default()).await.expect("open it");
        let claim = ClaimParams { shards: Some(vec![shard as u16]), ..ClaimParams::new("w", 10, Duration::from_secs(30)) };
        let got: Vec<String> = store.work_claim(claim).await.expect("claim").into_iter().map(|i| i.key.syncset).collect();
        assert_eq!(got, ["ready", "running"], "the ready key, and the lease that expired long ago");
    }
}
