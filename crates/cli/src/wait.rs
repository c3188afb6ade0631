//! `wait --for=condition=Applied syncset/NAME`, `--for=condition=Ready cluster/NAME` and
//! `--for=delete KIND/NAME` (or `KIND -l SELECTOR`: each that matches, in turn): polls
//! the hub until the condition holds, or fails after `--timeout` saying how far it got
//! and why (the first failure).

use crate::args::WaitArgs;
use crate::client::explain;
use crate::context::connect;
use anyhow::{bail, Result};
use fleetsync::outln;
use fleetsync_api::{Client, PageParams};
use fleetsync_model::{Kind, ProgressReason, SyncSetProgress};
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
    /// The object gone (`--for=delete`).
    Deleted(Kind, String),
}

fn target(what: &str, condition: &str) -> Result<Target> {
    let Some((kind, name)) = what.split_once('/').filter(|(_, n)| !n.is_empty()) else {
        bail!("say what to wait for as KIND/NAME: `syncset/NAME` or `cluster/NAME`, not {what:?}");
    };
    if condition == "delete" {
        let Some(kind) = Kind::parse(kind) else {
            bail!("unknown kind {kind:?}: use cluster, syncset, secret, gitrepository, ocirepository or notifier");
        };
        return Ok(Target::Deleted(kind, name.into()));
    }
    let condition = condition.strip_prefix("condition=").unwrap_or(condition);
    let kind = match Kind::parse(kind) {
        Some(Kind::SyncSet) => "syncset",
        Some(Kind::Cluster) => "cluster",
        _ => kind,
    };
    match (kind, condition) {
        ("syncset", "Applied") => Ok(Target::SyncSetApplied(name.into())),
        ("cluster", "Ready") => Ok(Target::ClusterReady(name.into())),
        ("syncset", other) => bail!("a SyncSet's condition is `condition=Applied` (or `delete`), not {other:?}"),
        ("cluster", other) => bail!("a Cluster's condition is `condition=Ready` (or `delete`), not {other:?}"),
        (other, _) => bail!("wait knows `syncset/NAME` and `cluster/NAME` (any kind with --for=delete), not {other:?}"),
    }
}

pub async fn wait(a: WaitArgs) -> Result<()> {
    let conn = connect(&a.at.conn)?;
    let tenant = conn.tenant_or(&a.at.tenant);
    let targets = match &a.selector {
        None => vec![(a.target.clone(), target(&a.target, &a.condition)?)],
        Some(selector) => selected(&conn.client, &tenant, &a.target, selector, &a.condition).await?,
    };
    let start = Instant::now();
    for (shown, target) in &targets {
        wait_one(&conn.client, &tenant, shown, target, &a, start).await?;
    }
    Ok(())
}

/// `wait KIND -l SELECTOR`: each object of the kind whose labels match, as `kind/name`.
async fn selected(
    hub: &Client,
    tenant: &str,
    kind: &str,
    selector: &str,
    condition: &str,
) -> Result<Vec<(String, Target)>> {
    let kind = match Kind::parse(kind) {
        Some(kind @ (Kind::SyncSet | Kind::Cluster)) => kind,
        Some(kind) if condition == "delete" => kind,
        _ => bail!("with -l, say the kind alone: `syncsets` or `clusters` (any kind with --for=delete), not {kind:?}"),
    };
    let items =
        fleetsync_api::all_pages(|token| hub.list_page(kind, tenant, Some(selector), crate::client::page(500, token)))
            .await
            .map_err(explain)?;
    let mut targets = Vec::new();
    for name in items.iter().filter_map(|v| v["metadata"]["name"].as_str()) {
        let shown = format!("{}/{name}", kind.as_str().to_ascii_lowercase());
        targets.push((shown.clone(), target(&shown, condition)?));
    }
    if targets.is_empty() {
        bail!("no {} in tenant {tenant} matches {selector:?}: nothing to wait for", kind.as_str().to_ascii_lowercase());
    }
    Ok(targets)
}

/// Waits for one target, within what is left of `--timeout` since `start`.
async fn wait_one(
    hub: &Client,
    tenant: &str,
    shown: &str,
    target: &Target,
    a: &WaitArgs,
    start: Instant,
) -> Result<()> {
    loop {
        let progress = match check(hub, tenant, target).await? {
            Check::Met(progress) => {
                outln!("{shown} condition met: {progress}")?;
                return Ok(());
            }
            Check::Empty if a.allow_empty => {
                outln!("{shown} condition met: it selects no cluster (--allow-empty)")?;
                return Ok(());
            }
            Check::Empty => {
                bail!("{shown}: selects no cluster, so nothing is applied anywhere (--allow-empty accepts this)")
            }
            Check::Never(why) => bail!("{shown}: {why}"),
            Check::NotYet(progress) => progress,
        };
        if start.elapsed() >= a.timeout {
            bail!(
                "timed out after {} waiting for {shown} ({}): {progress}",
                humantime::format_duration(a.timeout),
                a.condition
            );
        }
        tokio::time::sleep(POLL.min(a.timeout.saturating_sub(start.elapsed()))).await;
    }
}

/// How the condition stands, with how far it got in words.
#[derive(Debug, PartialEq, Eq)]
enum Check {
    Met(String),
    NotYet(String),
    /// A SyncSet that selects no cluster.
    Empty,
    /// Cannot be met without someone acting (a rollback, a failed rollout): stop waiting.
    Never(String),
}

/// A SyncSet's condition from its progress, the one notion of done the hub computes:
/// met when every cluster it selects applied its current generation (its rollout
/// completed); never when its rollout rolled back or failed.
fn syncset_check(p: &SyncSetProgress) -> Check {
    match p.reason {
        _ if p.done => Check::Met(p.message.clone()),
        ProgressReason::NoClusters => Check::Empty,
        r if r.is_final() => Check::Never(p.message.clone()),
        _ => Check::NotYet(p.message.clone()),
    }
}

async fn check(hub: &Client, tenant: &str, target: &Target) -> Result<Check> {
    match target {
        Target::SyncSetApplied(name) => {
            let page = PageParams { limit: Some(1), continue_: None };
            let status = hub.syncset_status_page(tenant, name, page).await.map_err(explain)?;
            Ok(syncset_check(&status.progress))
        }
        Target::ClusterReady(name) => {
            let status = hub.cluster_status(tenant, name).await.map_err(explain)?;
            let c = &status.condition;
            let progress = format!("ready={} reason={} ({})", c.ready, c.reason, c.message);
            Ok(if c.ready { Check::Met(progress) } else { Check::NotYet(progress) })
        }
        Target::Deleted(kind, name) => match hub.get(*kind, tenant, name).await {
            Ok(_) => Ok(Check::NotYet("still there".into())),
            Err(e) if e.status().is_some_and(|s| s.as_u16() == 404) => Ok(Check::Met("deleted".into())),
            Err(e) => Err(explain(e)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_and_conditions_are_read_as_kubectl_writes_them() {
        assert_eq!(target("syncset/base", "condition=Applied").expect("ok"), Target::SyncSetApplied("base".into()));
        assert_eq!(target("clusters/c1", "condition=Ready").expect("ok"), Target::ClusterReady("c1".into()));
        assert_eq!(target("ss/base", "condition=Applied").expect("ok"), Target::SyncSetApplied("base".into()));
        assert_eq!(target("secret/kube", "delete").expect("ok"), Target::Deleted(Kind::Secret, "kube".into()));
        assert_eq!(target("cl/c1", "delete").expect("ok"), Target::Deleted(Kind::Cluster, "c1".into()));
        for (what, condition, says) in [
            ("base", "condition=Applied", "KIND/NAME"),
            ("syncset/", "condition=Applied", "KIND/NAME"),
            ("syncset/base", "condition=Ready", "condition=Applied"),
            ("secret/x", "condition=Ready", "not \"secret\""),
            ("pods/x", "delete", "unknown kind \"pods\""),
        ] {
            let e = target(what, condition).expect_err(what).to_string();
            assert!(e.contains(says), "{what} {condition}: {e}");
        }
    }

    fn progress(reason: ProgressReason, done: bool) -> SyncSetProgress {
        SyncSetProgress {
            generation: 2,
            clusters: 6,
            missing_clusters: vec![],
            current: 2,
            applied: 2,
            held: 4,
            held_at: Some(1),
            failed: 0,
            done,
            reason,
            message: "2 of 6 clusters at generation 2".into(),
            rollout: None,
        }
    }

    #[test]
    fn a_syncset_is_waited_for_until_done_and_never_when_it_cannot_be() {
        assert_eq!(
            syncset_check(&progress(ProgressReason::Applied, true)),
            Check::Met("2 of 6 clusters at generation 2".into())
        );
        for waits in [
            ProgressReason::RollingOut,
            ProgressReason::Progressing,
            ProgressReason::Degraded,
            ProgressReason::RolloutPaused,
        ] {
            assert!(matches!(syncset_check(&progress(waits, false)), Check::NotYet(_)), "{waits}");
        }
        for never in [ProgressReason::RolledBack, ProgressReason::RolloutFailed] {
            assert!(matches!(syncset_check(&progress(never, false)), Check::Never(_)), "{never}");
        }
        assert_eq!(syncset_check(&progress(ProgressReason::NoClusters, false)), Check::Empty);
    }
}
