//! The hub's side of name completion ([`fleetsync::completer`]): the kind, tenant and
//! context the line names, the names of that kind the hub holds.

use crate::context::connect;
use clap::Parser;
use fleetsync::args::{Cli, Command, ConnArgs};
use fleetsync_model::Kind;
use std::time::Duration;

/// How long completion waits for the hub: a shell must not hang on a TAB.
const PATIENCE: Duration = Duration::from_secs(2);
/// Clusters listed at most (they are found by the typed prefix, on the hub).
const MAX_CLUSTERS: usize = 200;

/// The names of the objects `words` is about that start with `prefix`; none when the
/// line does not name one kind, or the hub cannot be asked.
pub fn list(words: &[String], prefix: &str) -> Vec<String> {
    let Ok(cli) = Cli::try_parse_from(words) else {
        return Vec::new();
    };
    let (kinds, tenant, conn): (Vec<Kind>, Option<String>, ConnArgs) = match cli.command {
        Command::Get(a) => (a.resource.kinds().to_vec(), a.tenant, a.conn),
        Command::Delete(a) => (kind_of(a.kind.as_deref()), a.tenant, a.conn),
        Command::Describe(a) => (kind_of(Some(&a.kind)), a.at.tenant, a.at.conn),
        _ => return Vec::new(),
    };
    if kinds.is_empty() {
        return Vec::new();
    }
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_all().build() else {
        return Vec::new();
    };
    runtime
        .block_on(async {
            let conn = connect(&conn).ok()?;
            let tenant = conn.tenant_or(&tenant);
            let mut names = Vec::new();
            for kind in kinds {
                let listed = tokio::time::timeout(PATIENCE, names_of(&conn.client, kind, &tenant, prefix)).await;
                names.extend(listed.ok()?.ok()?);
            }
            names.sort();
            Some(names)
        })
        .unwrap_or_default()
}

/// `describe`'s and `delete`'s kind word (`source` stands for both kinds of source).
fn kind_of(word: Option<&str>) -> Vec<Kind> {
    match word {
        Some("source" | "sources" | "src") => vec![Kind::GitRepository, Kind::OCIRepository],
        Some(w) => Kind::parse(w).into_iter().collect(),
        None => Vec::new(),
    }
}

/// Clusters are found on the hub by the prefix (a fleet has many); the other kinds are
/// few and listed whole.
async fn names_of(hub: &fleetsync_api::Client, kind: Kind, tenant: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    if kind == Kind::Cluster {
        let found = hub.cluster_list(tenant, &[("name", prefix), ("limit", &MAX_CLUSTERS.to_string())]).await?;
        return Ok(found.items.into_iter().map(|c| c.row.name).collect());
    }
    let objects = hub.list(kind, tenant).await?;
    Ok(objects.iter().filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string)).collect())
}
