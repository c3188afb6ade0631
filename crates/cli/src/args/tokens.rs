//! `fleetsync token …`: issue, list and revoke the hub's tokens.

use super::client::{ConnArgs, Format};
use super::store::PgArgs;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a token and print it alone on standard output (the only time it is shown).
    Create(TokenCreateArgs),
    /// The tokens: name, grant, expiry, issuer (never the tokens themselves).
    List(TokenListArgs),
    /// Revoke a token by name: it is refused from the next request on.
    Revoke(TokenRevokeArgs),
}

/// Where token commands act: on the store itself (`--db` or `--database-url`, for the
/// operator of the hub) or, with neither, through the hub's API as the caller.
#[derive(Debug, Clone, Args)]
pub struct TokenStoreArgs {
    /// The SQLite file of an embedded hub's store.
    #[arg(long, env = "FLEETSYNC_DB")]
    pub db: Option<PathBuf>,
    #[command(flatten)]
    pub pg: PgArgs,
    #[command(flatten)]
    pub conn: ConnArgs,
}

#[derive(Debug, Args)]
pub struct TokenCreateArgs {
    #[command(flatten)]
    pub store: TokenStoreArgs,
    /// The tenant the token is for (fleet-admin: every tenant).
    #[arg(long)]
    pub tenant: String,
    /// viewer, editor, admin, fleet-admin or agent.
    #[arg(long, required_unless_present = "agent")]
    pub role: Option<String>,
    /// An agent credential (the role `agent`) for the cluster given by --cluster.
    #[arg(long, requires = "cluster")]
    pub agent: bool,
    /// The cluster of an agent credential.
    #[arg(long)]
    pub cluster: Option<String>,
    /// How long it is valid (e.g. 30d, 12h); default: until revoked.
    #[arg(long, value_parser = humantime::parse_duration)]
    pub ttl: Option<Duration>,
    /// Its name (unique in its tenant; default: made from the grant).
    #[arg(long)]
    pub name: Option<String>,
}

#[derive(Debug, Args)]
pub struct TokenListArgs {
    #[command(flatten)]
    pub store: TokenStoreArgs,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Table)]
    pub output: Format,
}

#[derive(Debug, Args)]
pub struct TokenRevokeArgs {
    pub name: String,
    /// The tenant of the token (of its grant): needed only when tokens of that name are
    /// in several tenants you administer.
    #[arg(long)]
    pub tenant: Option<String>,
    #[command(flatten)]
    pub store: TokenStoreArgs,
}
