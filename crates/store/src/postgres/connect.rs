//! Opening a [`PgStore`]: [`PgOptions`], the connection pool, the schema (found,
//! migrated or checked), the clock and the listener; and `migrate` without a store.

use super::clock::DbClock;
use super::failure::{Failure, PgError, PgResult, Unreachable};
use super::{clock, conninfo, cursor, listen, locations, schema};
use crate::{Result, StoreConfig, StoreError};
use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use fleetsync_model::Clock;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How long a call waits for a free pooled connection before it fails.
pub(super) const POOL_WAIT: Duration = Duration::from_secs(30);

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
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) pool: Pool,
    pub(super) config: StoreConfig,
    /// "Now": the config's clock, or the database's ([`DbClock`]).
    pub(super) clock: Arc<dyn Clock>,
    /// The schema in use (also the notification payload and part of lock names).
    pub(super) schema: String,
    pub(super) wake: watch::Sender<u64>,
    /// Bumped after every commit that appended events, here or in another process.
    pub(super) events: watch::Sender<u64>,
    /// Where this process's claims start (see `cursor.rs`).
    pub(super) cursors: Arc<cursor::ClaimCursors>,
    /// Where this process's claims left the rows of the keys they leased, for their
    /// completions (see `locations.rs`).
    pub(super) locations: Arc<locations::Locations>,
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
        let manager = Manager::from_config(
            info.pg.clone(),
            tls.clone(),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
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
            .map_err(|e| StoreError::backend("creating the connection pool", false, e))?;
        let connecting = |e: PoolError| {
            let cause = PgError::Pool(e);
            StoreError::backend(
                "connecting to PostgreSQL",
                cause.transience().is_transient(),
                Unreachable::new(target.clone(), &info.tls, cause),
            )
        };
        let mut client = pool.get().await.map_err(connecting)?;
        let schema = prepare_schema(&mut client, options.schema.as_deref(), options.migrate).await?;
        drop(client);
        let (clock, refresher): (Arc<dyn Clock>, _) = match config.clock.clone() {
            Some(given) => (given, None),
            None => {
                let db =
                    Arc::new(DbClock::connect(&pool).await.map_err(|e| e.into_store("reading the database's clock"))?);
                (db.clone(), Some(clock::refresh(pool.clone(), db)))
            }
        };
        let (wake, _) = watch::channel(0);
        let (events, _) = watch::channel(0);
        let cursors = Arc::new(cursor::ClaimCursors::default());
        let listener = listen::start(info.pg, tls, schema.clone(), wake.clone(), events.clone(), cursors.clone())
            .await
            .map_err(|e| {
                let transient = e.transience().is_transient();
                StoreError::backend(
                    "listening for wake-ups",
                    transient,
                    Unreachable { target, hint: None, cause: Box::new(e) },
                )
            })?;
        let locations = Arc::default();
        let inner = Inner {
            pool,
            config,
            clock,
            schema,
            wake,
            events,
            cursors,
            locations,
            _listener: listener,
            _clock: refresher,
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    /// Brings the schema up to date without opening a store (what `fleetsync migrate`
    /// does); returns the version it is at.
    pub async fn migrate(url: &str, schema: Option<&str>) -> Result<i32> {
        let info = conninfo::config(url, schema)?;
        let (mut client, connection) = info.pg.connect(info.tls.connector()?).await.map_err(|e| {
            let cause = PgError::Statement(e);
            let transient = cause.transience().is_transient();
            StoreError::backend(
                "connecting to PostgreSQL",
                transient,
                Unreachable::new(conninfo::describe_target(&info.pg), &info.tls, cause),
            )
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
}

/// Finds the schema to use, migrates it (or checks that it is migrated); returns its name.
async fn prepare_schema(client: &mut tokio_postgres::Client, given: Option<&str>, migrate: bool) -> Result<String> {
    let schema = match given {
        Some(s) => s.to_string(),
        None => current_schema(client).await.map_err(|e| e.into_store("finding the schema to use"))?,
    };
    let version = if migrate {
        schema::migrate(client, &schema, given.is_some())
            .await
            .map_err(|e| e.into_store("migrating the database schema"))?
    } else {
        schema::version(client).await.map_err(|e| e.into_store("checking the database schema"))?
    };
    if version < schema::latest() {
        let behind = format!(
            "schema {schema} is at version {version}, this build needs {}: run `fleetsync migrate` first",
            schema::latest()
        );
        return Err(StoreError::backend("checking the database schema", false, behind));
    }
    if version > schema::latest() {
        tracing::warn!(schema, version, known = schema::latest(), "the database schema is newer than this build");
    }
    Ok(schema)
}

async fn current_schema(client: &tokio_postgres::Client) -> PgResult<String> {
    let schema: Option<String> = client.query_one("SELECT current_schema()", &[]).await?.try_get(0)?;
    schema.ok_or_else(|| {
        let missing = "the connection's search_path names no existing schema: give a schema";
        Failure::Store(StoreError::backend("finding the schema to use", false, missing))
    })
}
