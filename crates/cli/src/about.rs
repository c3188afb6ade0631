//! `fleetsync completion SHELL` and `fleetsync version`: about the command line itself.

use crate::args::{Cli, CompletionArgs, VersionArgs};
use crate::context::connect;
use crate::output::structured;
use anyhow::Result;
use clap::CommandFactory;
use fleetsync::outln;
use std::io::Write;

/// Prints the completion script of `a.shell`. It is made in memory first: the
/// generator panics when it cannot write, and standard output may be a closed pipe.
pub fn completion(a: CompletionArgs) -> Result<()> {
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut Cli::command(), "fleetsync", &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(())
}

/// What `version -o json|yaml` prints.
#[derive(Debug, serde::Serialize)]
struct Versions {
    client: &'static str,
    /// The hub's version, when it reports one (its API does not, so far).
    server: Option<String>,
}

/// Prints this client's version and what is known of the hub's: its API has no route
/// that reports a version, so the server's is `null`, with a note (on standard error
/// for `-o json|yaml`) saying whether the hub answered at all.
pub async fn version(a: VersionArgs) -> Result<()> {
    let versions = Versions { client: env!("CARGO_PKG_VERSION"), server: None };
    let note = match connect(&a.conn) {
        Ok(conn) => match conn.client.health().await {
            Ok(_) => format!("the hub at {} answers but does not report its version", conn.client.base()),
            Err(e) => format!("{:#}", crate::client::explain(e)),
        },
        Err(e) => format!("{e:#}"),
    };
    if !structured(a.output, &versions)? {
        outln!("client: {}", versions.client)?;
        outln!("server: unknown ({note})")?;
    } else {
        eprintln!("note: server version unknown: {note}");
    }
    Ok(())
}
