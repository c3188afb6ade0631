//! What a `get` table shows beside the objects themselves, read from the hub's views:
//! each SyncSet's progress, and the clusters known to be unreachable.

use crate::args::Resource;
use crate::client::explain;
use crate::output::text;
use anyhow::Result;
use fleetsync_api::{all_pages, Client, PageParams, StatusFilter};
use fleetsync_model::status::{unreachable_cause, Reach, Reachability};
use fleetsync_model::SyncSetProgress;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// Beside the rows of a table.
#[derive(Debug, Default)]
pub struct Details {
    /// Each SyncSet's progress, in the order of the items (`None`: deleted since listed).
    pub progress: Vec<Option<SyncSetProgress>>,
    /// `(tenant, cluster)` → its reachability, for the clusters that cannot be reached.
    pub unreachable: HashMap<(String, String), Reachability>,
}

/// What the table of `items` shows beside them: for SyncSets their progress; for
/// clusters, with `wide`, which ones are unreachable.
pub async fn read(hub: &Client, resource: Resource, items: &[Value], wide: bool) -> Result<Details> {
    match resource {
        Resource::Syncsets => Ok(Details { progress: progress(hub, items).await?, ..Details::default() }),
        Resource::Clusters if wide => Ok(Details { unreachable: unreachable(hub, items).await?, ..Details::default() }),
        _ => Ok(Details::default()),
    }
}

async fn progress(hub: &Client, items: &[Value]) -> Result<Vec<Option<SyncSetProgress>>> {
    let mut out = Vec::with_capacity(items.len());
    for s in items {
        let (tenant, name) = (text(&s["metadata"]["namespace"]), text(&s["metadata"]["name"]));
        match hub.syncset_status_page(&tenant, &name, PageParams { limit: Some(1), continue_: None }).await {
            Ok(status) => out.push(Some(status.progress)),
            Err(e) if e.status().is_some_and(|s| s.as_u16() == 404) => out.push(None),
            Err(e) => return Err(explain(e)),
        }
    }
    Ok(out)
}

/// The unreachable clusters among `items`: those with a failed or parked key whose
/// error says the cluster did not answer are candidates (one read of the keys with an
/// error per tenant, from their index), and each candidate's own status decides, by
/// the rule every view uses ([`fleetsync_model::status::reachability`]).
async fn unreachable(hub: &Client, items: &[Value]) -> Result<HashMap<(String, String), Reachability>> {
    let listed: BTreeSet<(String, String)> =
        items.iter().map(|c| (text(&c["metadata"]["namespace"]), text(&c["metadata"]["name"]))).collect();
    let tenants: BTreeSet<&String> = listed.iter().map(|(t, _)| t).collect();
    let mut candidates = BTreeSet::new();
    for tenant in tenants {
        let filter = StatusFilter {
            tenant: Some(tenant.clone()),
            phase: Some("Failed,Parked".into()),
            ..StatusFilter::default()
        };
        let failing = all_pages(|token| hub.status_page(&filter, PageParams { limit: Some(500), continue_: token }))
            .await
            .map_err(explain)?;
        for k in failing.into_iter().filter(|k| k.last_error.as_deref().and_then(unreachable_cause).is_some()) {
            let at = (k.key.tenant, k.key.cluster);
            if listed.contains(&at) {
                candidates.insert(at);
            }
        }
    }
    let mut out = HashMap::new();
    for (tenant, cluster) in candidates {
        let status = hub.cluster_status(&tenant, &cluster).await.map_err(explain)?;
        if let Some(r) = status.reachability.filter(|r| r.state == Reach::Unreachable) {
            out.insert((tenant, cluster), r);
        }
    }
    Ok(out)
}
