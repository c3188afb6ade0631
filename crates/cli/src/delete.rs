//! `delete`: one object by name, every object of a kind whose labels match (`-l`), or
//! every object of files (`-f`; with `--ignore-not-found`, one already gone is no
//! error), in an order that lets
//! Sync-mode cleanup run: SyncSets first; then, once the hub has cleaned their
//! resources off the Clusters about to be deleted (their keys are gone from those
//! Clusters' status), the Clusters; Secrets (which may hold those Clusters'
//! kubeconfigs), sources and notifiers last.

use crate::args::DeleteArgs;
use crate::client::{explain, page};
use crate::context::connect;
use crate::inputs;
use anyhow::{anyhow, bail, Result};
use fleetsync::outln;
use fleetsync_api::{all_pages, Client};
use fleetsync_model::Kind;
use std::time::{Duration, Instant};

/// How often a Cluster's status is read again while its cleanup runs.
const POLL: Duration = Duration::from_millis(250);

/// What to delete: kind, tenant, name.
type Target = (Kind, String, String);

pub async fn delete(a: DeleteArgs) -> Result<()> {
    let conn = connect(&a.conn)?;
    let kind_of = |kind: &str| {
        Kind::parse(kind).ok_or_else(|| {
            anyhow!("unknown kind {kind:?}: use cluster, syncset, secret, gitrepository, ocirepository or notifier")
        })
    };
    let targets: Vec<Target> = match (a.files.is_empty(), &a.kind, &a.name) {
        (true, Some(kind), None) if a.selector.is_some() => {
            let (kind, tenant) = (kind_of(kind)?, conn.tenant_or(&a.tenant));
            let selector = a.selector.as_deref();
            let items = all_pages(|token| conn.client.list_page(kind, &tenant, selector, page(500, token)))
                .await
                .map_err(explain)?;
            let names = items.iter().filter_map(|v| v["metadata"]["name"].as_str());
            let targets: Vec<Target> = names.map(|n| (kind, tenant.clone(), n.to_string())).collect();
            if targets.is_empty() {
                outln!("no {} in tenant {tenant} matches {:?}", kind.as_str().to_ascii_lowercase(), a.selector.as_deref().unwrap_or_default())?;
            }
            targets
        }
        (false, _, _) => {
            let mut targets = Vec::new();
            for input in inputs::read(&a.files, a.recursive)? {
                let docs = input.documents()?;
                targets.extend(docs.iter().map(|d| (d.kind(), d.metadata().tenant().to_string(), d.metadata().name.clone())));
            }
            targets
        }
        (true, Some(kind), Some(name)) => vec![(kind_of(kind)?, conn.tenant_or(&a.tenant), name.clone())],
        _ => bail!("say what to delete: `delete KIND NAME` (cluster, syncset, secret…), `delete KIND -l SELECTOR` or `delete -f FILE`"),
    };
    let hub = conn.client;
    let of = |kind: Kind| targets.iter().filter(move |t| t.0 == kind).cloned().collect::<Vec<_>>();
    let (syncsets, clusters, secrets) = (of(Kind::SyncSet), of(Kind::Cluster), of(Kind::Secret));
    let sources: Vec<Target> =
        targets.iter().filter(|t| matches!(t.0, Kind::GitRepository | Kind::OCIRepository)).cloned().collect();
    let notifiers = of(Kind::Notifier);
    let mut failed = delete_all(&hub, &syncsets, a.ignore_not_found).await?;
    if !syncsets.is_empty() && !clusters.is_empty() {
        if let Err(e) = await_cleanup(&hub, &syncsets, &clusters, a.cleanup_timeout).await {
            bail!("{e:#}; the Clusters and Secrets were not deleted (run `delete -f` again, or delete them by name)");
        }
    }
    failed += delete_all(&hub, &clusters, a.ignore_not_found).await?;
    failed += delete_all(&hub, &secrets, a.ignore_not_found).await?;
    failed += delete_all(&hub, &sources, a.ignore_not_found).await?;
    failed += delete_all(&hub, &notifiers, a.ignore_not_found).await?;
    if failed > 0 {
        bail!("{failed} deletion(s) failed");
    }
    Ok(())
}

/// Deletes each target, reporting each; returns how many failed (one that is not there
/// does not count with `ignore_not_found`, and is not reported).
async fn delete_all(hub: &Client, targets: &[Target], ignore_not_found: bool) -> Result<usize> {
    let mut failed = 0;
    for (kind, tenant, name) in targets {
        let kind_name = kind.as_str().to_ascii_lowercase();
        match hub.delete(*kind, tenant, name).await {
            Ok(_) => outln!("{kind_name}/{name} deleted")?,
            Err(e) if ignore_not_found && e.status().is_some_and(|s| s.as_u16() == 404) => {}
            Err(e) => {
                eprintln!("error: {kind_name}/{name}: {:#}", explain(e));
                failed += 1;
            }
        }
    }
    Ok(failed)
}

/// Waits until none of `clusters` has a key of one of `syncsets` left (the hub removes
/// a key once its cleanup is done), or fails after `timeout` naming the keys left.
async fn await_cleanup(hub: &Client, syncsets: &[Target], clusters: &[Target], timeout: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        let mut left = Vec::new();
        for (_, tenant, cluster) in clusters {
            let status = match hub.cluster_status(tenant, cluster).await {
                Ok(s) => s,
                // A Cluster that is not there has nothing to clean up.
                Err(e) if e.status().is_some_and(|s| s.as_u16() == 404) => continue,
                Err(e) => return Err(explain(e)),
            };
            let deleted = |s: &str| syncsets.iter().any(|(_, t, n)| t == tenant && n == s);
            left.extend(status.syncsets.iter().filter(|k| deleted(&k.key.syncset)).map(|k| {
                let error = k.last_error.as_deref().map(|e| format!(": {e}")).unwrap_or_default();
                format!("{cluster}/{} ({}{error})", k.key.syncset, k.phase.as_str())
            }));
        }
        if left.is_empty() {
            return Ok(());
        }
        if start.elapsed() >= timeout {
            bail!(
                "the cleanup of the deleted SyncSets has not finished after {} (--cleanup-timeout) on: {}",
                humantime::format_duration(timeout),
                left.join(", ")
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
