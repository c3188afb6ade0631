//! `fleetsync completion SHELL` and `fleetsync version`: about the command line itself.

use crate::args::{CompletionArgs, VersionArgs};
use crate::context::connect;
use crate::output::structured;
use anyhow::Result;
use fleetsync::outln;
use std::io::Write;

/// Prints the completion script of `a.shell`: clap_complete's dynamic one, which runs
/// `fleetsync` (as found on the PATH) with `COMPLETE=SHELL` for each completion, so
/// that object names come from the hub ([`fleetsync::completer`]). It is made in
/// memory first: standard output may be a closed pipe.
pub fn completion(a: CompletionArgs) -> Result<()> {
    let shells = clap_complete::env::Shells::builtins();
    let name = a.shell.to_string();
    let Some(shell) = shells.completer(&name) else {
        anyhow::bail!("no completion for {name}");
    };
    let mut script = Vec::new();
    shell.write_registration("COMPLETE", "fleetsync", "fleetsync", "fleetsync", &mut script)?;
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(())
}

/// What `version -o json|yaml` prints.
#[derive(Debug, serde::Serialize)]
struct Versions {
    client: &'static str,
    /// The hub's version (`GET /v1/version`); `null` when it cannot be asked.
    server: Option<String>,
    /// The schema of the hub's store (`null` when it cannot be read).
    schema: Option<fleetsync_api::SchemaVersion>,
}

/// Prints this client's version and the hub's. When the hub cannot be asked, the
/// server's is `null`, with a note (on standard error for `-o json|yaml`) saying why.
pub async fn version(a: VersionArgs) -> Result<()> {
    let asked = match connect(&a.conn) {
        Ok(conn) => conn.client.server_version().await.map_err(|e| format!("{:#}", crate::client::explain(e))),
        Err(e) => Err(format!("{e:#}")),
    };
    let server = asked.as_ref().ok();
    let versions = Versions {
        client: env!("CARGO_PKG_VERSION"),
        server: server.map(|s| s.version.clone()),
        schema: server.and_then(|s| s.schema.clone()),
    };
    let structured_out = structured(a.output, &versions)?;
    match (&asked, structured_out) {
        (Ok(_), true) => {}
        (Ok(server), false) => {
            outln!("client: {}", versions.client)?;
            outln!("server: {}", server.version)?;
            match &server.schema {
                Some(s) => outln!("schema: {} {} (the hub's build keeps {})", s.store, s.version, s.latest)?,
                None => outln!("schema: unknown (the hub cannot read its store)")?,
            }
        }
        (Err(note), true) => eprintln!("note: server version unknown: {note}"),
        (Err(note), false) => {
            outln!("client: {}", versions.client)?;
            outln!("server: unknown ({note})")?;
        }
    }
    Ok(())
}
