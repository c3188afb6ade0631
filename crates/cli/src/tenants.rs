//! `-A/--all-tenants`: which tenants a caller can see. The API answers per tenant
//! (`?tenant=`), so `get -A` lists each of them in turn:
//!
//! - a caller with tenant grants sees those tenants (`GET /v1/whoami`);
//! - a fleet-admin sees every tenant: those named in the event log (every object's
//!   creation is an event there), plus the context's tenant. A tenant whose events all
//!   fell off the log (retention) and that changed nothing since is not found this way;
//!   name it with `-n`.

use crate::client::explain;
use anyhow::Result;
use fleetsync_api::Client;
use fleetsync_model::Grant;
use std::collections::BTreeSet;

/// The largest page of events the hub answers.
const EVENT_PAGE: usize = 10_000;

/// The tenants the caller can see, sorted by name.
pub async fn visible(hub: &Client, context_tenant: &str) -> Result<Vec<String>> {
    let me = hub.whoami().await.map_err(explain)?;
    let mut tenants = BTreeSet::new();
    let mut fleet = false;
    for grant in me.grants {
        match grant {
            Grant::Tenant { tenant, .. } => {
                tenants.insert(tenant);
            }
            Grant::Fleet => fleet = true,
            // An agent credential reads its cluster's resources, not lists.
            Grant::Agent { .. } => {}
        }
    }
    if fleet {
        tenants.insert(context_tenant.to_string());
        let mut after = None;
        loop {
            let page = hub.events(after, Some(EVENT_PAGE)).await.map_err(explain)?;
            let Some(last) = page.last() else { break };
            after = Some(last.seq);
            let full = page.len() == EVENT_PAGE;
            tenants.extend(page.into_iter().map(|e| e.tenant));
            if !full {
                break;
            }
        }
    }
    Ok(tenants.into_iter().collect())
}
