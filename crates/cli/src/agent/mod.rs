//! `fleetsync agent`: runs beside a target cluster and reports the live state of the
//! resources fleetsync applied there to the hub, which stores it, shows drift in
//! status and re-applies what drifted.
//!
//! Two loops share an [`Outbox`]:
//! * the **watcher** learns from the hub what to watch (`GET /v1/agent/resources`,
//!   again every `--resources-interval`), looks at the target every
//!   `--poll-interval` (one list per kind), and puts a report into the outbox for each
//!   resource whose version changed or that disappeared. Its first look reports every
//!   watched resource: on start the agent sends its full state.
//! * the **sender** sends the pending reports in batches and forgets each only once
//!   the hub has answered that it persisted it; while the hub is down, restarting or
//!   unreachable it resends with capped exponential backoff. Nothing is lost meanwhile:
//!   the outbox keeps the newest report of every resource.
//!
//! A refused token (401/403) ends the agent with the hub's message: retrying cannot fix it.

mod hub;
mod outbox;
mod target;

use crate::args::AgentArgs;
use anyhow::{bail, Context, Result};
use fleetsync_model::names::check_dns1123_label;
use fleetsync_model::{LiveReport, LiveState, ResourceRef};
use fleetsync_store::RetryPolicy;
use hub::Hub;
pub use outbox::Outbox;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;
use target::Target;

pub async fn run(a: AgentArgs) -> Result<()> {
    check_dns1123_label(&a.cluster).map_err(|r| anyhow::anyhow!("--cluster {:?}: {r}", a.cluster))?;
    check_dns1123_label(&a.tenant).map_err(|r| anyhow::anyhow!("--tenant {:?}: {r}", a.tenant))?;
    for (flag, url) in [("--hub", &a.hub), ("--target", &a.target)] {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("{flag} must be an http:// or https:// URL, got {url:?}");
        }
    }
    if a.batch == 0 {
        bail!("--batch must be at least 1");
    }
    let token = read_token(&a.token_file)?;
    let hub = Hub::new(&a.hub, token, &a.tenant, &a.cluster, a.request_timeout)?;
    let target = Target::new(&a.target, a.request_timeout)?;
    let outbox = Arc::new(Outbox::default());
    let backoff = RetryPolicy { base: a.backoff_base, cap: a.backoff_cap, max_attempts: u32::MAX, jitter: 0.2 };
    tracing::info!(hub = a.hub, target = a.target, cluster = a.cluster, "agent starting");
    let sender = send_loop(hub.clone(), outbox.clone(), a.batch, backoff);
    let watcher = watch_loop(hub, target, outbox, &a, backoff);
    tokio::select! {
        r = sender => r,
        r = watcher => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

fn read_token(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read the token file {}", path.display()))?;
    let token = text.trim();
    if token.is_empty() {
        bail!("the token file {} is empty: put the cluster's agent token in it", path.display());
    }
    Ok(token.to_string())
}

/// Sends pending reports until the hub acknowledges them; backs off while it cannot.
async fn send_loop(hub: Hub, outbox: Arc<Outbox>, batch: usize, backoff: RetryPolicy) -> Result<()> {
    let mut failures = 0u32;
    loop {
        let reports = outbox.batch(batch);
        if reports.is_empty() {
            outbox.wait().await;
            continue;
        }
        let sent = reports.len();
        match hub.send(reports).await {
            Ok(acks) => {
                outbox.ack(acks.iter().map(|a| (&a.resource, a.resource_version.as_str())));
                if failures > 0 {
                    tracing::info!(after_failures = failures, "the hub acknowledges again");
                }
                failures = 0;
                let stored = acks.iter().filter(|a| a.result == "stored").count();
                tracing::debug!(sent, acknowledged = acks.len(), stored, pending = outbox.len(), "reports acknowledged");
            }
            Err(e) if e.is_fatal() => return Err(e.into()),
            Err(e) => {
                failures = failures.saturating_add(1);
                let wait = backoff.next_delay(failures);
                tracing::warn!(error = %e, retry_in = ?wait, pending = outbox.len(), "reports not acknowledged; will resend");
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// What the watcher last put into the outbox for a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Version(String),
    Deleted,
}

/// Learns what to watch, looks at the target, and puts every change into the outbox.
async fn watch_loop(hub: Hub, mut target: Target, outbox: Arc<Outbox>, a: &AgentArgs, backoff: RetryPolicy) -> Result<()> {
    let mut watched: Option<Vec<ResourceRef>> = None;
    let mut refreshed = Instant::now();
    let mut failures = 0u32;
    let mut seen: HashMap<ResourceRef, Seen> = HashMap::new();
    loop {
        if watched.is_none() || refreshed.elapsed() >= a.resources_interval {
            match hub.resources().await {
                Ok(list) => {
                    failures = 0;
                    seen.retain(|r, _| list.contains(r));
                    watched = Some(list);
                }
                Err(e) if e.is_fatal() => return Err(e.into()),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %e, "cannot read what to watch from the hub");
                }
            }
            refreshed = Instant::now();
        }
        let Some(list) = &watched else {
            tokio::time::sleep(backoff.next_delay(failures)).await;
            continue;
        };
        observe(&mut target, list, &mut seen, &outbox).await;
        tokio::time::sleep(a.poll_interval).await;
    }
}

/// One look at the target: a report for each watched resource that changed (every
/// one, the first time).
async fn observe(target: &mut Target, watched: &[ResourceRef], seen: &mut HashMap<ResourceRef, Seen>, outbox: &Outbox) {
    let mut by_kind: BTreeMap<(&str, &str), Vec<&ResourceRef>> = BTreeMap::new();
    for r in watched {
        by_kind.entry((r.api_version.as_str(), r.kind.as_str())).or_default().push(r);
    }
    for resources in by_kind.values() {
        let listing = match target.list(resources[0]).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the target");
                continue;
            }
        };
        for r in resources {
            let report = match listing.objects.get(&(r.namespace.clone(), r.name.clone())) {
                Some(object) => {
                    let version = object["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
                    live_report(r, version, LiveState::Present, Some(object.clone()))
                }
                None => live_report(r, listing.resource_version.clone(), LiveState::Deleted, None),
            };
            let now = match report.state {
                LiveState::Present => Seen::Version(report.resource_version.clone()),
                LiveState::Deleted => Seen::Deleted,
            };
            if seen.get(*r) != Some(&now) {
                seen.insert((*r).clone(), now);
                outbox.put(report);
            }
        }
    }
}

fn live_report(r: &ResourceRef, resource_version: String, state: LiveState, object: Option<serde_json::Value>) -> LiveReport {
    LiveReport { resource: r.clone(), resource_version, state, object }
}
