//! `describe cluster|syncset|source|notifier NAME`: one object for people, as kubectl describes
//! one: its metadata and spec in short, how its keys stand, the first failures, and its
//! recent events.

use crate::args::DescribeArgs;
use crate::client::{explain, get_one};
use crate::context::connect;
use crate::output::{table, text, text_of};
use anyhow::Result;
use fleetsync::outln;
use fleetsync_api::{Client, Event, PageParams, StatusFilter};
use fleetsync_model::status::{Reach, Reachability};
use fleetsync_model::{Kind, StatusSummary, SyncSetProgress, WorkKey};
use serde_json::Value;

/// Recent events shown, and how many of the newest events are searched for them.
const EVENTS_SHOWN: usize = 10;
const EVENTS_SEARCHED: usize = 2_000;

pub async fn describe(a: DescribeArgs) -> Result<()> {
    let conn = connect(&a.at.conn)?;
    let (hub, tenant) = (&conn.client, conn.tenant_or(&a.at.tenant));
    let kinds: &[Kind] = match Kind::parse(&a.kind) {
        Some(Kind::Cluster) => &[Kind::Cluster],
        Some(Kind::SyncSet) => &[Kind::SyncSet],
        Some(Kind::GitRepository) => &[Kind::GitRepository],
        Some(Kind::OCIRepository) => &[Kind::OCIRepository],
        Some(Kind::Notifier) => &[Kind::Notifier],
        // A source of either kind (`source`, `src`); describe takes no Secret.
        _ => &[Kind::GitRepository, Kind::OCIRepository],
    };
    let object = get_one(hub, kinds, &tenant, &a.name).await?;
    let kind = Kind::parse(&text(&object["kind"])).unwrap_or(kinds[0]);
    let meta = &object["metadata"];
    field("Name", &text(&meta["name"]))?;
    field("Tenant", &text(&meta["namespace"]))?;
    field("Generation", &text(&meta["generation"]))?;
    let labels = meta["labels"]
        .as_object()
        .map(|l| l.iter().map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>().join(", "));
    field("Labels", labels.as_deref().filter(|l| !l.is_empty()).unwrap_or("<none>"))?;
    match kind {
        Kind::Cluster => cluster(hub, &tenant, &a.name, &object).await?,
        Kind::GitRepository | Kind::OCIRepository => source(hub, &tenant, &a.name, &object).await?,
        Kind::Notifier => notifier(hub, &tenant, &a.name, &object).await?,
        _ => syncset(hub, &tenant, &a.name, &object).await?,
    }
    events(hub, kind, &tenant, &a.name).await
}

fn field(name: &str, value: &str) -> std::io::Result<()> {
    outln!("{:<12}{value}", format!("{name}:"))
}

async fn cluster(hub: &Client, tenant: &str, name: &str, object: &Value) -> Result<()> {
    let endpoint = object["spec"]["endpoint"].as_object().and_then(|o| o.iter().next());
    let detail = endpoint.and_then(|(_, v)| v.get("url").or_else(|| v.get("secretRef"))).map(text);
    let endpoint = endpoint.map(|(k, _)| k.clone()).unwrap_or_default();
    field("Endpoint", &detail.map_or(endpoint.clone(), |d| format!("{endpoint} {d}")))?;
    let status = hub.cluster_status(tenant, name).await.map_err(explain)?;
    let c = &status.condition;
    field("Condition", &format!("Ready={} {} ({})", c.ready, c.reason, c.message))?;
    field("Reachable", &reachable(status.reachability.as_ref()))?;
    outln!("SyncSets:")?;
    if status.syncsets.is_empty() {
        return Ok(outln!("  <none>")?);
    }
    let rows: Vec<Vec<String>> = status
        .syncsets
        .iter()
        .map(|k| {
            // Whole: describe is read by a person, and errors are bounded where they are made.
            let error = k.last_error.clone().unwrap_or_else(|| "-".into());
            let cells = [
                format!("  {}", k.key.syncset),
                k.phase.as_str().into(),
                k.generation.to_string(),
                k.observed_generation.to_string(),
            ];
            cells.into_iter().chain([k.attempts.to_string(), error]).collect()
        })
        .collect();
    Ok(table(&["  SYNCSET", "PHASE", "GENERATION", "OBSERVED", "ATTEMPTS", "LAST ERROR"], &rows)?)
}

/// A source: its kind, what it follows, the revision stored, how its fetch stands, and
/// the SyncSets that read it.
async fn source(hub: &Client, tenant: &str, name: &str, object: &Value) -> Result<()> {
    let spec = &object["spec"];
    field("Kind", &text(&object["kind"]))?;
    field("URL", &text(&spec["url"]))?;
    let reference = spec["ref"].as_object().and_then(|r| r.iter().next());
    field("Ref", &reference.map_or("-".into(), |(k, v)| format!("{k} {}", text(v))))?;
    field("Interval", &text(&spec["interval"]))?;
    field("Revision", &text(&object["status"]["revision"]))?;
    field("Fetched", &text(&object["status"]["fetchedAt"]))?;
    let key = WorkKey::source(tenant, name);
    let filter = StatusFilter { tenant: Some(tenant.into()), cluster: Some(key.cluster), ..StatusFilter::default() };
    match hub.status(&filter).await.map_err(explain)?.first() {
        Some(k) => {
            field("Fetch", &format!("{} (attempts {})", k.phase.as_str(), k.attempts))?;
            field("Next", &k.next_attempt_at.as_ref().map_or("-".into(), text_of))?;
            field("Last error", k.last_error.as_deref().unwrap_or("-"))?;
        }
        None => field("Fetch", "-")?,
    }
    outln!("SyncSets:")?;
    let reading: Vec<Vec<String>> = hub
        .list(Kind::SyncSet, tenant)
        .await
        .map_err(explain)?
        .iter()
        .filter(|s| s["spec"]["sourceRef"]["name"] == name)
        .map(|s| {
            let path = s["spec"]["sourceRef"].get("path").map_or(".".into(), text);
            vec![
                format!("  {}", text(&s["metadata"]["name"])),
                text(&s["metadata"]["generation"]),
                path,
                text(&s["status"]["sourceRevision"]),
            ]
        })
        .collect();
    if reading.is_empty() {
        return Ok(outln!("  <none>")?);
    }
    Ok(table(&["  NAME", "GENERATION", "PATH", "REVISION"], &reading)?)
}

/// A notifier: where it sends (a webhook URL as the API shows it, its query hidden;
/// a Slack target by its Secret's name), its template and filters, and how its
/// deliveries stand (its key's phase and last error).
async fn notifier(hub: &Client, tenant: &str, name: &str, object: &Value) -> Result<()> {
    let spec = &object["spec"];
    match spec["webhook"]["url"].as_str() {
        Some(url) => field("Target", &format!("webhook {url}"))?,
        None => field("Target", &format!("slack (Secret {})", text(&spec["slack"]["secretRef"]["name"])))?,
    }
    field("Template", spec["template"].as_str().unwrap_or("<default>"))?;
    field("Filters", &crate::tables::notifier_filters(&spec["filters"]))?;
    let key = WorkKey::notifier(tenant, name);
    let filter = StatusFilter { tenant: Some(tenant.into()), cluster: Some(key.cluster), ..StatusFilter::default() };
    match hub.status(&filter).await.map_err(explain)?.first() {
        Some(k) => {
            field("Delivery", &format!("{} (attempts {})", k.phase.as_str(), k.attempts))?;
            field("Next", &k.next_attempt_at.as_ref().map_or("-".into(), text_of))?;
            field("Last error", k.last_error.as_deref().unwrap_or("-"))?;
        }
        None => field("Delivery", "-")?,
    }
    Ok(())
}

/// A cluster's reachability in words: `True`, `False since T: cause`, or `Unknown` while
/// none of its keys has run.
fn reachable(r: Option<&Reachability>) -> String {
    match r {
        None => "Unknown (no key has run on it yet)".into(),
        Some(r) if r.state == Reach::Reachable => "True".into(),
        Some(r) => {
            let since = r.since.as_ref().map_or_else(String::new, |t| format!(" since {}", text_of(t)));
            format!("False{since}: {}", r.message.as_deref().unwrap_or("no cause recorded"))
        }
    }
}

async fn syncset(hub: &Client, tenant: &str, name: &str, object: &Value) -> Result<()> {
    let spec = &object["spec"];
    field("Mode", &spec.get("resourceApplyMode").map_or("Upsert".into(), text))?;
    if let Some(names) = spec["clusterNames"].as_array() {
        field("Clusters", &names.iter().map(text).collect::<Vec<_>>().join(", "))?;
    }
    if let Some(selector) = spec.get("clusterSelector").filter(|s| !s.is_null()) {
        field("Selector", &selector.to_string())?;
    }
    let resources = spec["resources"].as_array().map(Vec::as_slice).unwrap_or_default();
    outln!("Resources:  {}", resources.len())?;
    for r in resources {
        let (ns, n) = (&r["metadata"]["namespace"], text(&r["metadata"]["name"]));
        let at = if ns.is_null() { n } else { format!("{}/{n}", text(ns)) };
        outln!("  {} {} {at}", text(&r["apiVersion"]), text(&r["kind"]))?;
    }
    let page = PageParams { limit: Some(1), continue_: None };
    let status = hub.syncset_status_page(tenant, name, page).await.map_err(explain)?;
    progress(&status.progress)?;
    summary(&status.summary)
}

/// How far the SyncSet is: its condition, and its rollout while one holds clusters back.
fn progress(p: &SyncSetProgress) -> Result<()> {
    field("Condition", &format!("Applied={} {} ({})", p.done, p.reason, p.message))?;
    let Some(r) = &p.rollout else { return Ok(()) };
    let mut line =
        format!("{} at step {} of {}, generation {} (stable {})", r.phase, r.step + 1, r.steps, r.revision, r.stable);
    for detail in [&r.waiting, &r.reason].into_iter().flatten() {
        line.push_str(&format!("; {detail}"));
    }
    Ok(field("Rollout", &line)?)
}

fn summary(s: &StatusSummary) -> Result<()> {
    let phases: Vec<String> =
        s.phases.iter().filter(|(_, n)| **n > 0).map(|(p, n)| format!("{}={n}", p.as_str())).collect();
    let phases = if phases.is_empty() { "no keys".to_string() } else { phases.join(", ") };
    field("Keys", &format!("{} ({phases})", s.total))?;
    if let Some(since) = &s.oldest_pending_since {
        field("Waiting", &format!("since {}", text_of(since)))?;
    }
    if s.failures.is_empty() {
        return Ok(());
    }
    outln!("Failures:")?;
    let rows: Vec<Vec<String>> = s
        .failures
        .iter()
        .map(|f| {
            let error = f.last_error.clone().unwrap_or_else(|| "-".into());
            vec![format!("  {}", f.cluster), f.phase.as_str().into(), f.attempts.to_string(), error]
        })
        .collect();
    Ok(table(&["  CLUSTER", "PHASE", "ATTEMPTS", "LAST ERROR"], &rows)?)
}

/// The object's recent events (its own, and its keys' status changes), newest first,
/// from the newest events of the log.
async fn events(hub: &Client, kind: Kind, tenant: &str, name: &str) -> Result<()> {
    let recent = hub.events_newest(None, EVENTS_SEARCHED).await.map_err(explain)?;
    let fetch = WorkKey::source(tenant, name).syncset;
    let delivery = WorkKey::notifier(tenant, name).syncset;
    let key_of = |e: &Event| {
        let (cluster, syncset) = e.name.split_once('/')?;
        Some(match kind {
            Kind::Cluster => cluster == name,
            Kind::GitRepository | Kind::OCIRepository => syncset == fetch,
            Kind::Notifier => syncset == delivery,
            _ => syncset == name,
        })
    };
    let mine: Vec<&Event> = recent
        .iter()
        .filter(|e| e.tenant == tenant)
        .filter(|e| (e.kind == kind.as_str() && e.name == name) || (e.kind == "Status" && key_of(e) == Some(true)))
        .take(EVENTS_SHOWN)
        .collect();
    outln!("Events:")?;
    if mine.is_empty() {
        return Ok(outln!("  <none>")?);
    }
    let rows: Vec<Vec<String>> = mine
        .iter()
        .map(|e| {
            vec![
                format!("  {}", text_of(&e.at)),
                e.kind.clone(),
                e.name.clone(),
                e.action.clone(),
                e.generation.to_string(),
            ]
        })
        .collect();
    Ok(table(&["  AT", "KIND", "NAME", "ACTION", "GENERATION"], &rows)?)
}
