//! `wait --for=condition=Applied syncset/NAME` and `--for=condition=Ready cluster/NAME`:
//! polls the hub until the condition holds, or fails after `--timeout` saying how far
//! it got and why (the first failure).

use crate::args::WaitArgs;
use crate::client::explain;
use crate::context::connect;
use anyhow::{bail, Result};
use fleetsync::outln;
use fleetsync_api::{Client, PageParams};
use fleetsync_model::{Phase, RolloutPhase};
use std::time::{Duration, Instant};

/// How often the hub is asked again.
const POLL: Duration = Duration::from_millis(500);

/// What `wait` waits for.
#[derive(Debug, PartialEq, Eq)]
enum Target {
    /// Every key of the SyncSet Applied at its current generation.
    SyncSetApplied(String),
    /// The Cluster's condition Ready.
    ClusterReady(String),
}

fn target(what: &str, condition: &str) -> Result<Target> {
    let Some((kind, name)) = what.split_once('/').filter(|(_, n)| !n.is_empty()) else {
        bail!("say what to wait for as KIND/NAME: `syncset/NAME` or `cluster/NAME`, not {what:?}");
    };
    let condition = condition.strip_prefix("condition=").unwrap_or(condition);
    match (kind, condition) {
        ("syncset" | "syncsets", "Applied") => Ok(Target::SyncSetApplied(name.into())),
        ("cluster" | "clusters", "Ready") => Ok(Target::ClusterReady(name.into())),
        ("syncset" | "syncsets", other) => bail!("a SyncSet's condition is `condition=Applied`, not {other:?}"),
        ("cluster" | "clusters", other) => bail!("a Cluster's condition is `condition=Ready`, not {other:?}"),
        (other, _) => bail!("wait knows `syncset/NAME` and `cluster/NAME`, not {other:?}"),
    }
}

pub async fn wait(a: WaitArgs) -> Result<()> {
    let target = target(&a.target, &a.condition)?;
    let conn = connect(&a.at.conn)?;
    let tenant = conn.tenant_or(&a.at.tenant);
    let start = Instant::now();
    loop {
        let (done, progress) = check(&conn.client, &tenant, &target).await?;
        if done {
            outln!("{} condition met: {progress}", a.target)?;
            return Ok(());
        }
        if start.elapsed() >= a.timeout {
            bail!("timed out after {} waiting for {} ({}): {progress}", humantime::format_duration(a.timeout), a.target, a.condition);
        }
        tokio::time::sleep(POLL.min(a.timeout.saturating_sub(start.elapsed()))).await;
    }
}

/// Whether the condition holds, and how far it got, in words.
async fn check(hub: &Client, tenant: &str, target: &Target) -> Result<(bool, String)> {
    match target {
        Target::SyncSetApplied(name) => {
            let page = PageParams { limit: Some(1), continue_: None };
            let status = hub.syncset_status_page(tenant, name, page).await.map_err(explain)?;
            let s = &status.summary;
            let applied = s.phases.get(&Phase::Applied).copied().unwrap_or(0);
            let mut done = applied == s.total && s.at_generation == s.total;
            let mut progress = format!("{applied} of {} keys Applied, {} at generation {}", s.total, s.at_generation, status.generation);
            // A rollout holds keys at the stable revision: Applied at it, not at this generation.
            if let Ok(r) = hub.rollout(tenant, name).await {
                if r.phase == RolloutPhase::RolledBack && r.revision == status.generation {
                    bail!("syncset/{name}: the rollout of generation {} rolled back: {}", r.revision, r.reason.as_deref().unwrap_or("no reason given"));
                }
                if r.phase != RolloutPhase::Completed || r.revision != status.generation {
                    done = false;
                    progress.push_str(&format!("; rollout {} at step {} of revision {}", r.phase, r.step + 1, r.revision));
                    if let Some(reason) = &r.reason {
                        progress.push_str(&format!(": {reason}"));
                    }
                }
            }
            if let Some(f) = s.failures.first() {
                let reason = f.last_error.as_deref().unwrap_or("no error recorded");
                progress.push_str(&format!("; {} on {} after {} attempt(s): {reason}", f.phase.as_str(), f.cluster, f.attempts));
            }
            Ok((done, progress))
        }
        Target::ClusterReady(name) => {
            let status = hub.cluster_status(tenant, name).await.map_err(explain)?;
            let c = &status.condition;
            Ok((c.ready, format!("ready={} reason={} ({})", c.ready, c.reason, c.message)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_conditions_are_read_as_kubectl_writes_them() {
        assert_eq!(target("syncset/base", "condition=Applied").expect("ok"), Target::SyncSetApplied("base".into()));
        assert_eq!(target("clusters/c1", "condition=Ready").expect("ok"), Target::ClusterReady("c1".into()));
        for (what, condition, says) in [
            ("base", "condition=Applied", "KIND/NAME"),
            ("syncset/", "condition=Applied", "KIND/NAME"),
            ("syncset/base", "condition=Ready", "condition=Applied"),
            ("secret/x", "condition=Ready", "not \"secret\""),
        ] {
            let e = target(what, condition).expect_err(what).to_string();
            assert!(e.contains(says), "{what} {condition}: {e}");
        }
    }
}
