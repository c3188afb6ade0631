//! `rollout status|pause|resume|promote|abort SYNCSET`: where a SyncSet's staged
//! rollout stands, and an operator's controls.

use crate::client::explain;
use crate::context::connect;
use anyhow::Result;
use fleetsync::args::RolloutCommand;
use fleetsync::outln;
use fleetsync::output::{structured, table};
use fleetsync_model::{RolloutPhase, RolloutStatus};

pub async fn run(command: RolloutCommand) -> Result<()> {
    let (a, control) = match command {
        RolloutCommand::Status(a) => (a, None),
        RolloutCommand::Pause(a) => (a, Some("pause")),
        RolloutCommand::Resume(a) => (a, Some("resume")),
        RolloutCommand::Promote(a) => (a, Some("promote")),
        RolloutCommand::Abort(a) => (a, Some("abort")),
    };
    let conn = connect(&a.at.conn)?;
    let tenant = conn.tenant_or(&a.at.tenant);
    let status = match control {
        None => conn.client.rollout(&tenant, &a.syncset).await,
        Some(c) => conn.client.rollout_control(&tenant, &a.syncset, c).await,
    }
    .map_err(explain)?;
    if structured(a.output, &status)? {
        return Ok(());
    }
    print(&status)
}

/// The rollout as people read it: a header, then one row per step.
fn print(s: &RolloutStatus) -> Result<()> {
    let step = if s.steps.is_empty() { "-".to_string() } else { format!("{} of {}", s.step + 1, s.steps.len()) };
    outln!("SyncSet:   {}/{}", s.tenant, s.syncset)?;
    outln!("Phase:     {}", s.phase)?;
    outln!("Revision:  {} (stable {})", s.revision, s.stable)?;
    outln!("Step:      {step}")?;
    if let Some(waiting) = &s.waiting {
        outln!("Waiting:   {waiting}")?;
    }
    if let Some(reason) = &s.reason {
        outln!("Reason:    {reason}")?;
    }
    outln!("")?;
    // A rolled-back rollout has nothing pending: it shows what it rolled back instead.
    let rolled_back = s.phase == RolloutPhase::RolledBack;
    let rows: Vec<Vec<String>> = s
        .steps
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mark = if i == s.step { "*" } else { "" };
            let last = if rolled_back { c.rolled_back } else { c.pending };
            [
                format!("{}{mark}", i + 1),
                c.clusters.to_string(),
                c.updated.to_string(),
                c.healthy.to_string(),
                c.failed.to_string(),
                last.to_string(),
            ]
            .into()
        })
        .collect();
    let last = if rolled_back { "ROLLED BACK" } else { "PENDING" };
    table(&["STEP", "CLUSTERS", "UPDATED", "HEALTHY", "FAILED", last], &rows)?;
    Ok(())
}
