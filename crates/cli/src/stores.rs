//! Opening the store the command line names: SQLite by default, PostgreSQL with
//! `--database-url`. `worker` and `migrate` need PostgreSQL: many processes share it.
//!
//! `serve` and `worker` open it with the keys of `--encryption-key-file`, if given, and
//! at start seal again every Secret not sealed with the first key (a rotation, or
//! Secrets written in clear before a key was given); they refuse to start if a Secret
//! does not open with the keys given (see `fleetsync_store::sealed`).

use crate::args::{MigrateArgs, PgArgs, SealArgs, StoreArgs, WorkerArgs};
use crate::engine::{appliers, egress_policy, runtime_config, store_config};
use anyhow::{anyhow, Context, Result};
use fleetsync_hub::Hub;
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{Keyring, Resealed, Store, StoreConfig};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The store of a process that runs work (`serve`). On SQLite it is that file's only
/// such process: it takes back the keys its predecessor was running when it died.
pub async fn open_store(a: &StoreArgs, config: StoreConfig) -> Result<Arc<dyn Store>> {
    let config = with_keys(&a.seal, config)?;
    match &a.pg.database_url {
        Some(url) => {
            let store = connect(url, &a.pg, config).await?;
            resealed(store.secrets_reseal().await)?;
            Ok(Arc::new(store))
        }
        None => {
            let (store, taken) = SqliteStore::open_for_work(&a.db, config).await.with_context(|| {
                format!("cannot open the store {} (check the path and its permissions)", a.db.display())
            })?;
            resealed(store.secrets_reseal().await)?;
            if taken > 0 {
                tracing::info!(
                    keys = taken,
                    "took back the keys the previous process was running when it stopped; they run again now"
                );
            }
            Ok(Arc::new(store))
        }
    }
}

/// `config` with the keys of `--encryption-key-file`, if given; without, a warning:
/// Secret values are then kept in clear. The error names the file, never a key.
fn with_keys(a: &SealArgs, mut config: StoreConfig) -> Result<StoreConfig> {
    match &a.encryption_key_file {
        Some(path) => {
            let keys = Keyring::from_file(path).context("--encryption-key-file")?;
            tracing::info!(sealing_key = keys.sealing_key(), keys = keys.names().count(), "Secrets are sealed at rest");
            config.keys = Some(Arc::new(keys));
        }
        None => tracing::warn!(
            "no --encryption-key-file: Secret values (the clusters' credentials) are kept in clear in the store; \
             give a key file to seal them at rest"
        ),
    }
    Ok(config)
}

/// What sealing every Secret again at start did, logged; an error if a Secret does not
/// open with the keys given (the process then refuses to start).
fn resealed(done: fleetsync_store::Result<Resealed>) -> Result<()> {
    let done =
        done.context("cannot start: a Secret in the store does not open with the keys given (--encryption-key-file)")?;
    if done.resealed > 0 {
        tracing::info!(
            resealed = done.resealed,
            were_in_clear = done.were_in_clear,
            "sealed Secrets again with the first key of the key file"
        );
    }
    if done.in_clear > 0 {
        tracing::warn!(secrets = done.in_clear, "Secrets are kept in clear in the store (no --encryption-key-file)");
    }
    Ok(())
}

pub(crate) async fn connect(url: &str, pg: &PgArgs, config: StoreConfig) -> Result<PgStore> {
    if pg.pool_size == 0 {
        return Err(anyhow!("--pool-size must be at least 1"));
    }
    let options = PgOptions { schema: pg.schema.clone(), pool_size: pg.pool_size, migrate: !pg.no_migrate };
    PgStore::connect_with(url, options, config).await.context("cannot open the PostgreSQL store (check --database-url)")
}

fn required_url(url: &Option<String>) -> Result<&str> {
    url.as_deref().ok_or_else(|| {
        anyhow!("--database-url (or FLEETSYNC_DATABASE_URL) is required: workers share a PostgreSQL store")
    })
}

/// Where the store is, for logs (never the password).
pub fn describe(a: &StoreArgs) -> String {
    match &a.pg.database_url {
        Some(_) => format!("postgresql (schema {})", a.pg.schema.as_deref().unwrap_or("from search_path")),
        None => format!("sqlite {}", a.db.display()),
    }
}

/// `fleetsync worker`: a [`Hub`] of workers alone (no API), until SIGINT or SIGTERM.
pub async fn worker(a: WorkerArgs) -> Result<()> {
    let url = required_url(&a.pg.database_url)?;
    let config = runtime_config(&a.engine)?;
    let egress = egress_policy(&a.engine)?;
    let store = connect(url, &a.pg, with_keys(&a.seal, store_config(&a.engine)?)?).await?;
    resealed(store.secrets_reseal().await)?;
    let store: Arc<dyn Store> = Arc::new(store);
    tracing::info!(id = config.worker_id, "fleetsync worker running");
    let sources = crate::engine::sources(&a.engine, egress.clone());
    let mut hub = Hub::new(store.clone(), appliers(SimFleet::new(SimFleetConfig::default()), store, egress), config)
        .sources(sources);
    if let Some(listen) = &a.listen {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen} (is the port in use? set --listen)"))?;
        tracing::info!(url = %format!("http://{}", listener.local_addr()?), "serving /livez, /readyz and /metrics");
        hub = hub.probes(listener);
    }
    let shutdown = CancellationToken::new();
    tokio::spawn(crate::serve::stop_on_signal(shutdown.clone()));
    hub.run(shutdown).await?;
    tracing::info!("stopped");
    Ok(())
}

/// `fleetsync migrate`.
pub async fn migrate(a: MigrateArgs) -> Result<()> {
    let url = required_url(&a.database_url)?;
    let version = PgStore::migrate(url, a.schema.as_deref()).await.context("migrating the PostgreSQL schema")?;
    println!("schema {} is at version {version}", a.schema.as_deref().unwrap_or("(search_path)"));
    Ok(())
}
