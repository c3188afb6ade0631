//! `get status`: every key (of one tenant, or with `-A` of each the caller sees), or
//! one cluster rolled up; with `--watch`, printed again after each change of those
//! tenants' objects or keys (the event log, followed from now).

use crate::args::{Format, GetArgs};
use crate::client::{explain, page, print_list};
use crate::output::emit;
use crate::tables::{self, Columns};
use anyhow::{bail, Result};
use fleetsync::outln;
use fleetsync_api::{first_items, Client, ClientError, StatusFilter, WatchLine};
use std::time::Duration;

/// After a change, how long to wait for more before printing again (a burst of
/// changes prints once).
const SETTLE: Duration = Duration::from_millis(250);
/// How long to wait before reconnecting a watch the hub ended.
const RECONNECT: Duration = Duration::from_secs(1);

pub async fn print(hub: &Client, tenants: &[String], a: &GetArgs, cols: Columns) -> Result<()> {
    if let Some(n) = &a.name {
        let t = tenants.first().map_or("", String::as_str);
        let status = hub.cluster_status(t, n).await.map_err(explain)?;
        if !emit(&a.output, &status, !a.no_headers)? {
            let c = &status.condition;
            outln!("cluster {}: ready={} reason={} ({})", status.cluster, c.ready, c.reason, c.message)?;
            tables::status(&status.syncsets, cols)?;
        }
        return Ok(());
    }
    let mut items = Vec::new();
    for t in tenants {
        let left = a.limit.map(|max| usize::try_from(max).unwrap_or(usize::MAX).saturating_sub(items.len()));
        if left == Some(0) {
            break;
        }
        let filter =
            StatusFilter { tenant: Some(t.clone()), phase: a.phase.clone(), stale: a.stale, ..StatusFilter::default() };
        let listed = first_items(left, |token| hub.status_page(&filter, page(a.chunk_size, token)));
        items.extend(listed.await.map_err(explain)?);
    }
    if let Some(path) = &a.sort_by {
        fleetsync::jsonpath::sort_by(&mut items, path)?;
    }
    print_list(&a.output, !a.no_headers, &items, |items| tables::status(items, cols))
}

/// Prints the status, then again after every change of the tenants' objects or keys,
/// until interrupted (or standard output closes). Tables are separated by a blank
/// line, YAML documents by `---`.
pub async fn watch(hub: &Client, tenants: &[String], a: &GetArgs, cols: Columns) -> Result<()> {
    let mut cursor = hub.events_newest(None, 1).await.map_err(explain)?.first().map(|e| e.seq);
    print(hub, tenants, a, cols).await?;
    loop {
        let mut stream = match hub.watch_events(cursor).await {
            Ok(s) => s,
            Err(e @ ClientError::CursorExpired { .. }) => return Err(explain(e)),
            Err(e) if e.status().is_some_and(|s| s.is_client_error()) => return Err(explain(e)),
            Err(_) => {
                tokio::time::sleep(RECONNECT).await;
                continue;
            }
        };
        let mut changed = false;
        loop {
            // Once something changed, a quiet moment prints the status again.
            let next = if changed {
                match tokio::time::timeout(SETTLE, stream.next()).await {
                    Ok(next) => next,
                    Err(_) => {
                        changed = false;
                        separator(a.output.format())?;
                        print(hub, tenants, a, cols).await?;
                        continue;
                    }
                }
            } else {
                stream.next().await
            };
            match next {
                Ok(Some(WatchLine::Event { event })) => {
                    cursor = Some(event.seq);
                    changed |= tenants.contains(&event.tenant);
                }
                Ok(Some(WatchLine::Bookmark { seq })) => cursor = Some(seq),
                Ok(Some(WatchLine::Error(e))) if e.code == 410 => {
                    bail!("the hub's event log moved past this watch: {}", e.body.error)
                }
                Ok(Some(WatchLine::Unknown)) => {}
                // The stream ended or broke (the hub restarts): reconnect from the cursor.
                Ok(Some(WatchLine::Error(_)) | None) | Err(_) => {
                    tokio::time::sleep(RECONNECT).await;
                    break;
                }
            }
        }
    }
}

fn separator(format: Format) -> std::io::Result<()> {
    match format {
        Format::Yaml => outln!("---"),
        Format::Json | Format::Name => Ok(()),
        Format::Table | Format::Wide => outln!(""),
    }
}
