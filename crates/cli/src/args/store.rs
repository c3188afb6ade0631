//! Where the store is (SQLite or PostgreSQL), what Secrets are sealed with, and `migrate`.

use clap::Args;
use std::path::PathBuf;

/// Where the store is: a SQLite file (the default) or a PostgreSQL database.
#[derive(Debug, Clone, Args)]
pub struct StoreArgs {
    /// The SQLite file of the embedded store (when no --database-url is given).
    #[arg(long, env = "FLEETSYNC_DB", default_value = "fleetsync.db")]
    pub db: PathBuf,
    #[command(flatten)]
    pub pg: PgArgs,
    #[command(flatten)]
    pub seal: SealArgs,
}

/// What Secrets are sealed with at rest, in either store.
#[derive(Debug, Clone, Args)]
pub struct SealArgs {
    /// A file of keys that seal Secret values in the store (AES-256-GCM), one a line:
    /// `[NAME:]BASE64` of 32 random bytes (`head -c 32 /dev/urandom | base64`). The first
    /// key seals; every key opens. At start the hub seals again every Secret not sealed
    /// with the first key (a rotation), and refuses to start if one does not open.
    /// Without it, Secret values are kept in clear.
    #[arg(long, env = "FLEETSYNC_ENCRYPTION_KEY_FILE", value_name = "FILE")]
    pub encryption_key_file: Option<PathBuf>,
}

/// A PostgreSQL store: a URL (or key=value string) plus the usual PG* variables.
#[derive(Debug, Clone, Args)]
pub struct PgArgs {
    /// e.g. postgres://user@host:5432/db; unset parts come from PGHOST, PGUSER, … .
    #[arg(long, env = "FLEETSYNC_DATABASE_URL")]
    pub database_url: Option<String>,
    /// The schema fleetsync's tables live in (created if missing).
    #[arg(long, env = "FLEETSYNC_DATABASE_SCHEMA")]
    pub schema: Option<String>,
    /// Connections in the pool.
    #[arg(long, env = "FLEETSYNC_DATABASE_POOL", default_value_t = 16)]
    pub pool_size: usize,
    /// Do not migrate at start (run `fleetsync migrate` instead).
    #[arg(long)]
    pub no_migrate: bool,
}

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// e.g. postgres://user@host:5432/db; unset parts come from PGHOST, PGUSER, … .
    #[arg(long, env = "FLEETSYNC_DATABASE_URL")]
    pub database_url: Option<String>,
    /// The schema fleetsync's tables live in (created if missing).
    #[arg(long, env = "FLEETSYNC_DATABASE_SCHEMA")]
    pub schema: Option<String>,
}
