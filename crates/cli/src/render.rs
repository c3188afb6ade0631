//! `render syncset/NAME --cluster C`: the SyncSet's resources as the cluster gets them,
//! rendered by the hub (`GET /v1/syncsets/{name}/render`), Secret values redacted.

use crate::args::RenderArgs;
use crate::client::explain;
use crate::context::connect;
use anyhow::{bail, Result};
use fleetsync::outln;

pub async fn render(a: RenderArgs) -> Result<()> {
    let name = match a.target.split_once('/') {
        Some(("syncset" | "syncsets" | "ss", name)) if !name.is_empty() => name,
        _ => bail!("render takes syncset/NAME, got {:?}", a.target),
    };
    let conn = connect(&a.at.conn)?;
    let tenant = conn.tenant_or(&a.at.tenant);
    let rendered = conn.client.render(&tenant, name, &a.cluster).await.map_err(explain)?;
    if a.output == "json" {
        outln!("{}", serde_json::to_string_pretty(&rendered)?)?;
        return Ok(());
    }
    outln!(
        "# syncset/{} generation {} on cluster {} (tenant {tenant}): rendered hash {}",
        rendered.syncset,
        rendered.generation,
        rendered.cluster,
        rendered.hash
    )?;
    for m in &rendered.resources {
        outln!("---\n{}", serde_saphyr::to_string(&m.0)?.trim_end())?;
    }
    Ok(())
}
