//! `fleetsync config …`: the contexts of the config file, as `kubectl config` keeps
//! them.

use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// The contexts of the config file, the current one marked `*`.
    GetContexts,
    /// The name of the current context.
    CurrentContext,
    /// Make a context the current one.
    UseContext(UseContextArgs),
    /// Create a context, or change the fields given of one (the others are kept).
    SetContext(SetContextArgs),
}

#[derive(Debug, Args)]
pub struct UseContextArgs {
    pub name: String,
}

#[derive(Debug, Args)]
pub struct SetContextArgs {
    pub name: String,
    /// The hub's API, e.g. https://hub.example.com:8443.
    #[arg(long)]
    pub server: Option<String>,
    /// The tenant commands act in when they name none.
    #[arg(long, alias = "namespace")]
    pub tenant: Option<String>,
    /// A file holding the bearer token (kept as a path, never copied into the config).
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// The CA certificate (PEM) the hub's certificate must chain to.
    #[arg(long)]
    pub certificate_authority: Option<PathBuf>,
    /// Make it the current context too.
    #[arg(long)]
    pub current: bool,
}
