//! `diff -f FILE --cluster C`: how what one cluster gets would change, SyncSet by
//! SyncSet of the files: the hub's rendering of its SyncSet for the cluster (`GET
//! /v1/syncsets/{name}/render`) against the files' SyncSet rendered here for the same
//! cluster, as the files have it (if they hold it) or as the hub has it. A SyncSet that
//! does not select the cluster gives it nothing. Kubernetes Secret values are redacted
//! on both sides; a difference in them alone shows in the rendering's hash, on stderr.

use crate::args::DiffArgs;
use crate::client::explain;
use crate::context::connect;
use crate::inputs;
use anyhow::{anyhow, Context as _, Result};
use fleetsync::outln;
use fleetsync_api::Client;
use fleetsync_model::{secret, template, Cluster, Document, Kind, Manifest, SyncSet};

/// Prints a diff of what `cluster` gets for each SyncSet of the files that differs;
/// returns whether any did.
pub async fn diff(a: &DiffArgs, cluster: &str) -> Result<bool> {
    let (docs, _) = inputs::documents_and_body(inputs::read(&a.files, a.recursive)?)?;
    let hub = connect(&a.conn)?.client;
    let mut differ = false;
    for set in docs.iter().filter_map(|d| match d {
        Document::SyncSet(s) => Some(s),
        _ => None,
    }) {
        differ |= one(&hub, &docs, set, cluster).await?;
    }
    Ok(differ)
}

async fn one(hub: &Client, docs: &[Document], set: &SyncSet, name: &str) -> Result<bool> {
    let (tenant, syncset) = (set.metadata.tenant(), set.metadata.name.as_str());
    let id = format!("syncset/{tenant}/{syncset} on cluster {name}");
    let live_cluster = read::<Cluster>(hub, Kind::Cluster, tenant, name).await?;
    let local_cluster = docs.iter().find_map(|d| match d {
        Document::Cluster(c) if c.metadata.tenant() == tenant && c.metadata.name == name => Some(c),
        _ => None,
    });
    let Some(cluster) = local_cluster.or(live_cluster.as_ref()) else {
        return Err(anyhow!("no cluster {name} in tenant {tenant}, in the files or on the hub"));
    };
    if set.spec.source_ref.is_some() {
        eprintln!("note: {id}: its resources come from a source, which is not read here; skipped");
        return Ok(false);
    }
    let (old, old_hash) = live(hub, tenant, syncset, live_cluster.as_ref()).await.with_context(|| id.clone())?;
    let (new, new_hash) = match set.spec.selects(name, &cluster.metadata.labels) {
        true => {
            let rendered = template::resources_for(set, cluster).map_err(|e| anyhow!("{id}: {e}"))?.into_owned();
            let hash = template::rendered_hash(&rendered);
            (redacted(rendered), Some(hash))
        }
        false => (Vec::new(), None),
    };
    let (old_text, new_text) = (yaml(&old)?, yaml(&new)?);
    if old_text == new_text {
        if old_hash != new_hash {
            eprintln!("note: {id}: only secret values differ, which are never shown");
            return Ok(true);
        }
        return Ok(false);
    }
    let text = similar::TextDiff::from_lines(&old_text, &new_text);
    let mut unified = text.unified_diff();
    unified.header(&format!("{id} (live)"), &format!("{id} (local)"));
    outln!("{}", unified.to_string().trim_end_matches('\n'))?;
    Ok(true)
}

/// What the cluster gets from the hub's SyncSet now (nothing if there is none, or it
/// does not select the cluster), redacted, and the rendering's hash.
async fn live(
    hub: &Client,
    tenant: &str,
    syncset: &str,
    cluster: Option<&Cluster>,
) -> Result<(Vec<Manifest>, Option<String>)> {
    let (Some(set), Some(cluster)) = (read::<SyncSet>(hub, Kind::SyncSet, tenant, syncset).await?, cluster) else {
        return Ok((Vec::new(), None));
    };
    if !set.spec.selects(&cluster.metadata.name, &cluster.metadata.labels) {
        return Ok((Vec::new(), None));
    }
    let rendered = hub.render(tenant, syncset, &cluster.metadata.name).await.map_err(explain)?;
    Ok((rendered.resources, Some(rendered.hash)))
}

/// The hub's object, if it has one (as `to_value` shows it: `apiVersion` and `kind`
/// beside the object's own fields).
async fn read<T: serde::de::DeserializeOwned>(hub: &Client, kind: Kind, tenant: &str, name: &str) -> Result<Option<T>> {
    let mut object = match hub.get(kind, tenant, name).await {
        Ok(object) => object,
        Err(e) if e.status().is_some_and(|s| s.as_u16() == 404) => return Ok(None),
        Err(e) => return Err(explain(e).context(format!("reading {kind} {tenant}/{name} from the hub"))),
    };
    if let Some(fields) = object.as_object_mut() {
        fields.remove("apiVersion");
        fields.remove("kind");
    }
    Ok(Some(serde_json::from_value(object).with_context(|| format!("reading {kind} {tenant}/{name} from the hub"))?))
}

fn redacted(mut resources: Vec<Manifest>) -> Vec<Manifest> {
    resources.iter_mut().for_each(|m| secret::redact_manifest(&mut m.0));
    resources
}

/// The resources as `render` prints them: one YAML document each.
fn yaml(resources: &[Manifest]) -> Result<String> {
    let mut out = String::new();
    for m in resources {
        out += "---\n";
        out += &serde_saphyr::to_string(&m.0)?;
    }
    Ok(out)
}
