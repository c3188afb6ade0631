//! `apply`, `get` and `delete`: a thin front of the hub's API client
//! ([`fleetsync_api::Client`]), printing its answers for people or scripts.

use crate::args::{ApplyArgs, DeleteArgs, Format, GetArgs, Resource};
use crate::output::{clip, names, structured, table, text, text_of, NAME_LISTS_OBJECTS_ONLY};
use anyhow::{anyhow, bail, Context, Result};
use crate::context::{connect, HubFlags};
use fleetsync::outln;
use fleetsync_api::{all_pages, describe, Client, ClientError, Event, Items, Member, PageParams, StatusFilter, WatchLine};
use fleetsync_model::{parse_documents, KeyStatus, Kind};
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

fn read_input(path: &Path) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading standard input")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// What to tell the user about a failed call: for an unreachable hub, where to point
/// the client; for an expired event cursor, what to do.
pub(crate) fn explain(e: ClientError) -> anyhow::Error {
    match e {
        ClientError::TimedOut { .. } => anyhow!("{e} (--request-timeout)"),
        ClientError::Unreachable { .. } => {
            anyhow!("{} (is `fleetsync serve` running? set --server or FLEETSYNC_SERVER)", describe(&e))
        }
        ClientError::Refused { status, .. } if status.as_u16() == 401 => {
            anyhow!("{e} (give a token: --token, FLEETSYNC_TOKEN, or a context of the config file)")
        }
        ClientError::CursorExpired { cursor, horizon } => anyhow!(cursor_gone(cursor, horizon)),
        other => other.into(),
    }
}

fn cursor_gone(cursor: u64, horizon: u64) -> String {
    format!("the cursor {cursor} fell off the log (oldest kept is {}): re-list with `fleetsync get events`", horizon + 1)
}

pub async fn apply(server: HubFlags<'_>, a: ApplyArgs) -> Result<()> {
    let body = read_input(&a.file)?;
    // Validate here first: a bad file fails fast, without a hub, naming the problem.
    parse_documents(&body).map_err(|e| anyhow!("{}: {e}", a.file.display()))?;
    for r in connect(server, &a.conn)?.client.apply(body).await.map_err(explain)? {
        let kind = r.kind.as_str().to_ascii_lowercase();
        outln!("{kind}/{} {} (generation {}, {} keys enqueued)", r.name, r.result, r.generation, r.enqueued)?;
    }
    Ok(())
}

/// Prints a list as JSON or YAML (`{"items": [...]}`, as the hub answers it), or as a
/// table.
fn print_list<T: serde::Serialize>(format: Format, items: Vec<T>, rows: impl Fn(&[T]) -> std::io::Result<()>) -> Result<()> {
    let items = Items::all(items);
    if !structured(format, &items)? {
        rows(&items.items)?;
    }
    Ok(())
}

pub async fn get(server: HubFlags<'_>, a: GetArgs) -> Result<()> {
    if (a.watch || a.after.is_some()) && !matches!(a.resource, Resource::Events) {
        bail!("--watch and --after apply to `get events` only");
    }
    if a.selector.is_some() && !matches!(a.resource, Resource::Clusters) {
        bail!("-l/--selector applies to `get clusters` only");
    }
    if (a.phase.is_some() || a.stale) && !(matches!(a.resource, Resource::Status) && a.name.is_none()) {
        bail!("--phase and --stale apply to `get status` (without a name) only");
    }
    let object_kind = match a.resource {
        Resource::Clusters => Some(Kind::Cluster),
        Resource::Syncsets => Some(Kind::SyncSet),
        Resource::Secrets => Some(Kind::Secret),
        Resource::Status | Resource::Members | Resource::Events => None,
    };
    if a.output == Format::Name && object_kind.is_none() {
        bail!(NAME_LISTS_OBJECTS_ONLY);
    }
    let conn = connect(server, &a.conn)?;
    let tenant = conn.tenant_or(&a.tenant);
    let hub = conn.client;
    if a.watch {
        return watch_events(&hub, a.after, a.output).await;
    }
    let (t, format) = (tenant.as_str(), a.output);
    match (a.resource, object_kind, &a.name) {
        (_, Some(kind), Some(n)) => {
            let object = hub.get(kind, t, n).await.map_err(explain)?;
            if format == Format::Name {
                names(kind, std::slice::from_ref(&object))?;
            } else if !structured(format, &object)? {
                print_objects(a.resource, std::slice::from_ref(&object))?;
            }
            Ok(())
        }
        (_, Some(kind), None) => {
            let selector = a.selector.as_deref();
            let items = all_pages(|token| hub.list_page(kind, t, selector, page(a.limit, token))).await.map_err(explain)?;
            if format == Format::Name {
                return Ok(names(kind, &items)?);
            }
            print_list(format, items, |items| print_objects(a.resource, items))
        }
        (_, None, _) if matches!(a.resource, Resource::Status) => match &a.name {
            Some(n) => {
                let status = hub.cluster_status(t, n).await.map_err(explain)?;
                if !structured(format, &status)? {
                    let c = &status.condition;
                    outln!("cluster {}: ready={} reason={} ({})", status.cluster, c.ready, c.reason, c.message)?;
                    print_status(&status.syncsets)?;
                }
                Ok(())
            }
            None => {
                let filter = StatusFilter { tenant: Some(t.to_string()), phase: a.phase.clone(), stale: a.stale, ..StatusFilter::default() };
                let items = all_pages(|token| hub.status_page(&filter, page(a.limit, token))).await.map_err(explain)?;
                print_list(format, items, print_status)
            }
        },
        (Resource::Members, _, _) => print_list(format, hub.members().await.map_err(explain)?, print_members),
        _ => print_list(format, hub.events(a.after, Some(10_000)).await.map_err(explain)?, print_events),
    }
}

/// The page of `limit` items after the one whose token is `token`.
fn page(limit: u16, token: Option<String>) -> PageParams {
    PageParams { limit: Some(usize::from(limit)), continue_: token }
}

/// Objects as users write them (JSON documents), one row each.
fn print_objects(resource: Resource, items: &[Value]) -> std::io::Result<()> {
    let rows = |f: &dyn Fn(&Value) -> Vec<String>| items.iter().map(f).collect::<Vec<_>>();
    match resource {
        Resource::Clusters => table(
            &["NAME", "GENERATION", "ENDPOINT", "LABELS"],
            &rows(&|c| {
                let ep = c["spec"]["endpoint"].as_object().and_then(|o| o.keys().next().cloned()).unwrap_or_default();
                let labels = c["metadata"]["labels"].as_object().map(|l| {
                    l.iter().map(|(k, v)| format!("{k}={}", text(v))).collect::<Vec<_>>().join(",")
                });
                vec![text(&c["metadata"]["name"]), text(&c["metadata"]["generation"]), ep, labels.unwrap_or_default()]
            }),
        ),
        Resource::Syncsets => table(
            &["NAME", "GENERATION", "MODE", "RESOURCES"],
            &rows(&|s| {
                let n = s["spec"]["resources"].as_array().map_or(0, Vec::len);
                let mode = s["spec"].get("resourceApplyMode").map_or("Upsert".into(), text);
                vec![text(&s["metadata"]["name"]), text(&s["metadata"]["generation"]), mode, n.to_string()]
            }),
        ),
        _ => table(
            &["NAME", "GENERATION", "KEYS"],
            &rows(&|s| {
                let keys = s["stringData"].as_object().map(|d| d.keys().cloned().collect::<Vec<_>>().join(","));
                vec![text(&s["metadata"]["name"]), text(&s["metadata"]["generation"]), keys.unwrap_or_default()]
            }),
        ),
    }
}

fn print_members(items: &[Member]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|m| {
            let w = &m.member;
            vec![w.id.clone(), m.shards.to_string(), w.in_flight.to_string(), text_of(&w.heartbeat_at), text_of(&w.started_at)]
        })
        .collect();
    table(&["MEMBER", "SHARDS", "IN-FLIGHT", "HEARTBEAT", "STARTED"], &rows)
}

fn print_status(items: &[KeyStatus]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = items
        .iter()
        .map(|k| {
            vec![
                k.key.cluster.clone(),
                k.key.syncset.clone(),
                k.phase.as_str().to_string(),
                k.generation.to_string(),
                k.observed_generation.to_string(),
                k.attempts.to_string(),
                k.drift.len().to_string(),
                clip(k.last_error.clone().unwrap_or_else(|| "-".into()), 60),
            ]
        })
        .collect();
    table(&["CLUSTER", "SYNCSET", "PHASE", "GENERATION", "OBSERVED", "ATTEMPTS", "DRIFT", "LAST ERROR"], &rows)
}

fn print_events(items: &[Event]) -> std::io::Result<()> {
    let rows: Vec<Vec<String>> = items.iter().map(event_cells).collect();
    table(&EVENT_COLUMNS.map(|(h, _)| h), &rows)
}

/// An event's cells, in the order of [`EVENT_COLUMNS`].
fn event_cells(e: &Event) -> Vec<String> {
    let at = text_of(&e.at);
    let actor = e.actor.clone().unwrap_or_else(|| "-".into());
    vec![e.seq.to_string(), at, e.tenant.clone(), e.kind.clone(), e.name.clone(), e.action.clone(), e.generation.to_string(), actor]
}

/// Columns of the event table, and the width each is padded to when streaming (rows
/// are printed as they come, so widths cannot be measured first).
const EVENT_COLUMNS: [(&str, usize); 8] =
    [("SEQ", 8), ("AT", 24), ("TENANT", 10), ("KIND", 8), ("NAME", 28), ("ACTION", 9), ("GENERATION", 10), ("ACTOR", 0)];

/// First delay before reconnecting a watch; doubles up to [`RECONNECT_MAX`].
const RECONNECT_MIN: Duration = Duration::from_millis(100);
const RECONNECT_MAX: Duration = Duration::from_secs(2);

/// How a watch stream ended.
enum Ended {
    /// The stream ended or broke (hub shutting down or gone, store failure): reconnect.
    Closed(String),
    /// The cursor fell off the log.
    Gone(String),
    /// Standard output is closed (e.g. piped into `head`): stop quietly.
    StdoutClosed,
}

/// `get events --watch`: prints the log from the cursor, then each event as the hub
/// commits it, until interrupted. When the stream ends (the hub restarts) it
/// reconnects from the last cursor it saw, so nothing is missed or printed twice. Fails
/// when the hub cannot be reached at first, or when the cursor fell off the log.
async fn watch_events(hub: &Client, after: Option<u64>, format: Format) -> Result<()> {
    let mut printer = EventPrinter { format, header_done: false };
    let mut cursor = after;
    let mut connected = false;
    let mut backoff = RECONNECT_MIN;
    loop {
        let watch = match hub.watch_events(cursor).await {
            Ok(watch) => watch,
            Err(e @ (ClientError::Unreachable { .. } | ClientError::TimedOut { .. })) if !connected => return Err(explain(e)),
            Err(ClientError::Unreachable { .. } | ClientError::TimedOut { .. }) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RECONNECT_MAX);
                continue;
            }
            Err(e) if connected && e.status().is_some_and(|s| s.is_server_error()) => {
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(RECONNECT_MAX);
                continue;
            }
            Err(e) => return Err(explain(e)),
        };
        connected = true;
        backoff = RECONNECT_MIN;
        match follow(watch, &mut cursor, &mut printer).await {
            Ended::Gone(msg) => bail!(msg),
            Ended::StdoutClosed => return Ok(()),
            Ended::Closed(why) => {
                let from = cursor.map_or("the start".to_string(), |c| format!("seq {c}"));
                eprintln!("watch: {why}; reconnecting after {from}");
            }
        }
    }
}

/// Reads one watch stream to its end, printing events and advancing `cursor`.
async fn follow(mut watch: fleetsync_api::EventWatch, cursor: &mut Option<u64>, printer: &mut EventPrinter) -> Ended {
    loop {
        let line = match watch.next().await {
            Ok(Some(line)) => line,
            Ok(None) => return Ended::Closed("the hub ended the stream".into()),
            Err(e @ ClientError::Undecodable { .. }) => return Ended::Closed(describe(&e)),
            Err(e) => return Ended::Closed(format!("the stream broke ({})", describe(&e))),
        };
        let mut stdout = std::io::stdout().lock();
        match line {
            WatchLine::Event { event } => {
                if printer.print(&mut stdout, &event).is_err() || stdout.flush().is_err() {
                    return Ended::StdoutClosed;
                }
                *cursor = Some(event.seq);
            }
            WatchLine::Bookmark { seq } => *cursor = Some(seq),
            WatchLine::Error(e) => {
                if let (410, Some(c), Some(h)) = (e.code, e.body.cursor, e.body.horizon) {
                    return Ended::Gone(cursor_gone(c, h));
                }
                return Ended::Closed(format!("the hub reported: {}", e.body.error));
            }
            WatchLine::Unknown => {} // unknown line types are for newer clients
        }
    }
}

/// Prints events one at a time: table rows under a header printed once, or one JSON
/// object per line, or YAML documents.
struct EventPrinter {
    format: Format,
    header_done: bool,
}

impl EventPrinter {
    fn print(&mut self, out: &mut impl Write, event: &Event) -> std::io::Result<()> {
        match self.format {
            Format::Json => writeln!(out, "{}", serde_json::to_string(event).unwrap_or_default()),
            Format::Yaml => write!(out, "---\n{}", serde_saphyr::to_string(event).unwrap_or_default()),
            // `get` refuses `-o name` for events before it watches.
            Format::Table | Format::Name => {
                if !self.header_done {
                    self.header_done = true;
                    let header: Vec<String> = EVENT_COLUMNS.iter().map(|(h, _)| h.to_string()).collect();
                    writeln!(out, "{}", padded(&header))?;
                }
                writeln!(out, "{}", padded(&event_cells(event)))
            }
        }
    }
}

fn padded(cells: &[String]) -> String {
    let cols = cells.iter().zip(EVENT_COLUMNS).map(|(c, (_, w))| format!("{c:<w$}")).collect::<Vec<_>>();
    cols.join("  ").trim_end().to_string()
}

pub async fn delete(server: HubFlags<'_>, a: DeleteArgs) -> Result<()> {
    let conn = connect(server, &a.conn)?;
    let targets: Vec<(Kind, String, String)> = match (&a.file, &a.kind, &a.name) {
        (Some(file), _, _) => {
            let text = read_input(file)?;
            let docs = parse_documents(&text).map_err(|e| anyhow!("{}: {e}", file.display()))?;
            docs.iter().map(|d| (d.kind(), d.metadata().tenant().to_string(), d.metadata().name.clone())).collect()
        }
        (None, Some(kind), Some(name)) => {
            let kind = Kind::parse(kind).ok_or_else(|| anyhow!("unknown kind {kind:?}: use cluster, syncset or secret"))?;
            vec![(kind, conn.tenant_or(&a.tenant), name.clone())]
        }
        _ => bail!("say what to delete: `delete cluster NAME`, `delete syncset NAME`, `delete secret NAME` or `delete -f FILE`"),
    };
    let hub = conn.client;
    let mut failed = 0;
    for (kind, tenant, name) in targets {
        let kind_name = kind.as_str().to_ascii_lowercase();
        match hub.delete(kind, &tenant, &name).await {
            Ok(_) => outln!("{kind_name}/{name} deleted")?,
            Err(e) => {
                eprintln!("error: {kind_name}/{name}: {:#}", explain(e));
                failed += 1;
            }
        }
    }
    if failed > 0 {
        bail!("{failed} deletion(s) failed");
    }
    Ok(())
}
