//! `diff -f`: how the objects of files differ from the hub's, as `kubectl diff` shows it.
//!
//! The hub's dry run of the files (`POST /v1/apply?dryRun=All`) says what each object
//! would become: created, updated or unchanged, and its generation. Each is then shown
//! as `get -o yaml` prints it, with that generation, against the hub's object as `get -o
//! yaml` prints it (none: an empty text), in a unified diff per object. Exit 0: no
//! differences; 1: differences; 2: an error (as `kubectl diff`, whose 1 is also "found").
//!
//! Secret values — a Secret's, and those of the Kubernetes Secrets a SyncSet holds — are
//! redacted on both sides, so never printed and not compared as text: a change of values
//! alone shows as the new generation the dry run gives the object, with a note on stderr.
//!
//! With `--cluster C`, what that cluster gets is compared instead ([`crate::diff_cluster`]).

use crate::args::DiffArgs;
use crate::client::explain;
use crate::context::connect;
use crate::inputs;
use anyhow::{bail, Result};
use fleetsync::outln;
use fleetsync_api::{ApplyResult, Client};
use fleetsync_model::Document;
use serde_json::Value;
use std::process::ExitCode;

/// Runs `diff` and exits as `kubectl diff` does.
pub fn run(a: DiffArgs) -> ExitCode {
    let outcome = match fleetsync::runtime() {
        Ok(runtime) => runtime.block_on(diff(a)),
        Err(e) => Err(anyhow::Error::new(e).context("cannot start the async runtime")),
    };
    match outcome {
        Ok(false) => ExitCode::SUCCESS,
        Ok(true) => ExitCode::from(1),
        // The reader went away while differences were being printed.
        Err(e) if fleetsync::output::is_closed_pipe(&e) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Prints a diff of each object that differs; returns whether any did.
async fn diff(a: DiffArgs) -> Result<bool> {
    if let Some(cluster) = &a.cluster {
        return crate::diff_cluster::diff(&a, cluster).await;
    }
    let (docs, body) = inputs::documents_and_body(inputs::read(&a.files, a.recursive)?)?;
    let hub = connect(&a.conn)?.client;
    let verdicts = hub.apply_dry_run(body).await.map_err(explain)?;
    if verdicts.len() != docs.len() {
        bail!("the hub's dry run answered for {} objects, the files hold {}", verdicts.len(), docs.len());
    }
    let mut differ = false;
    for (doc, verdict) in docs.iter().zip(&verdicts) {
        differ |= one(&hub, doc, verdict).await?;
    }
    Ok(differ)
}

/// Prints how `doc` differs from the hub's object, if it does.
async fn one(hub: &Client, doc: &Document, verdict: &ApplyResult) -> Result<bool> {
    let (kind, tenant, name) = (doc.kind(), doc.metadata().tenant(), doc.metadata().name.as_str());
    let id = format!("{}/{tenant}/{name}", kind.as_str().to_ascii_lowercase());
    if (verdict.kind, verdict.tenant.as_str(), verdict.name.as_str()) != (kind, tenant, name) {
        bail!(
            "the hub's dry run answered for {}/{}/{} where {id} was expected",
            verdict.kind.as_str(),
            verdict.tenant,
            verdict.name
        );
    }
    let live = match hub.get(kind, tenant, name).await {
        Ok(object) => Some(object),
        Err(e) if e.status().is_some_and(|s| s.as_u16() == 404) => None,
        Err(e) => return Err(explain(e).context(format!("reading {id} from the hub"))),
    };
    let local = with_generation(doc.to_value(), verdict.generation);
    let (old, new) = (live.as_ref().map(yaml).transpose()?.unwrap_or_default(), yaml(&local)?);
    if old == new {
        return Ok(false);
    }
    let text = similar::TextDiff::from_lines(&old, &new);
    let mut unified = text.unified_diff();
    unified.header(&format!("{id} (live)"), &format!("{id} (local, {})", verdict.result));
    // `outln!` adds a newline; the diff ends with one already.
    outln!("{}", unified.to_string().trim_end_matches('\n'))?;
    if live.is_some_and(|live| live == with_generation(local, generation_of(&live))) {
        eprintln!(
            "note: {id}: only secret values differ, which are never shown (the hub would make it generation {})",
            verdict.generation
        );
    }
    Ok(true)
}

/// The object with `metadata.generation` set, as the hub would show it.
fn with_generation(mut object: Value, generation: i64) -> Value {
    object["metadata"]["generation"] = generation.into();
    object
}

fn generation_of(object: &Value) -> i64 {
    object["metadata"]["generation"].as_i64().unwrap_or(0)
}

/// An object as `get -o yaml` prints it.
fn yaml(object: &Value) -> Result<String> {
    Ok(serde_saphyr::to_string(object)?)
}
