//! `apply`, `get` and `delete`: a thin front of the hub's API client
//! ([`fleetsync_api::Client`]), printing its answers for people or scripts.

use crate::args::{ApplyArgs, Format, GetArgs, Resource};
use crate::inputs;
use crate::output::{names, structured, structured_list, NAME_LISTS_OBJECTS_ONLY};
use crate::tables::{self, event_cells, Columns, EVENT_COLUMNS};
use crate::tenants;
use anyhow::{anyhow, bail, Result};
use crate::context::{connect, HubFlags};
use fleetsync::outln;
use fleetsync_api::{all_pages, describe, Client, ClientError, Event, PageParams, StatusFilter, WatchLine};
use fleetsync_model::Kind;
use std::io::Write;
use std::time::Duration;

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
    let inputs = inputs::read(&a.files, a.recursive)?;
    // Validate here first: a bad file fails fast, without a hub, naming the problem.
    for input in &inputs {
        input.documents()?;
    }
    let body = inputs.into_iter().map(|i| i.text).collect::<Vec<_>>().join("\n---\n");
    for r in connect(server, &a.conn)?.client.apply(body).await.map_err(explain)? {
        let kind = r.kind.as_str().to_ascii_lowercase();
        outln!("{kind}/{} {} (generation {}, {} keys enqueued)", r.name, r.result, r.generation, r.enqueued)?;
    }
    Ok(())
}

/// Prints a list as a `kind: List` in JSON or YAML, or as a table.
fn print_list<T: serde::Serialize>(format: Format, items: &[T], rows: impl Fn(&[T]) -> std::io::Result<()>) -> Result<()> {
    if !structured_list(format, items)? {
        rows(items)?;
    }
    Ok(())
}

/// Refuses flags given where they do not apply, naming where they do.
fn check_flags(a: &GetArgs) -> Result<()> {
    if (a.watch || a.after.is_some()) && !matches!(a.resource, Resource::Events) {
        bail!("--watch and --after apply to `get events` only");
    }
    if a.selector.is_some() && !matches!(a.resource, Resource::Clusters) {
        bail!("-l/--selector applies to `get clusters` only");
    }
    if (a.phase.is_some() || a.stale) && !(matches!(a.resource, Resource::Status) && a.name.is_none()) {
        bail!("--phase and --stale apply to `get status` (without a name) only");
    }
    if a.all_tenants && a.name.is_some() {
        bail!("-A/--all-tenants lists; to get one object by name, give its tenant with -n");
    }
    Ok(())
}

pub async fn get(server: HubFlags<'_>, a: GetArgs) -> Result<()> {
    check_flags(&a)?;
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
    let hub = &conn.client;
    if a.watch {
        return watch_events(hub, a.after, a.output).await;
    }
    let per_tenant = object_kind.is_some() || matches!(a.resource, Resource::Status);
    let tenants = match a.all_tenants && per_tenant {
        true => tenants::visible(hub, &conn.tenant).await?,
        false => vec![conn.tenant_or(&a.tenant)],
    };
    let (t, format) = (tenants.first().map_or("", String::as_str), a.output);
    let cols = Columns { wide: format == Format::Wide, tenant: a.all_tenants };
    match (a.resource, object_kind, &a.name) {
        (_, Some(kind), Some(n)) => {
            let object = hub.get(kind, t, n).await.map_err(explain)?;
            if format == Format::Name {
                names(kind, std::slice::from_ref(&object))?;
            } else if !structured(format, &object)? {
                tables::objects(a.resource, std::slice::from_ref(&object), cols)?;
            }
            Ok(())
        }
        (_, Some(kind), None) => {
            let selector = a.selector.as_deref();
            let mut items = Vec::new();
            for t in &tenants {
                items.extend(all_pages(|token| hub.list_page(kind, t, selector, page(a.limit, token))).await.map_err(explain)?);
            }
            if format == Format::Name {
                return Ok(names(kind, &items)?);
            }
            print_list(format, &items, |items| tables::objects(a.resource, items, cols))
        }
        (_, None, _) if matches!(a.resource, Resource::Status) => match &a.name {
            Some(n) => {
                let status = hub.cluster_status(t, n).await.map_err(explain)?;
                if !structured(format, &status)? {
                    let c = &status.condition;
                    outln!("cluster {}: ready={} reason={} ({})", status.cluster, c.ready, c.reason, c.message)?;
                    tables::status(&status.syncsets, cols)?;
                }
                Ok(())
            }
            None => {
                let mut items = Vec::new();
                for t in &tenants {
                    let filter = StatusFilter { tenant: Some(t.clone()), phase: a.phase.clone(), stale: a.stale, ..StatusFilter::default() };
                    items.extend(all_pages(|token| hub.status_page(&filter, page(a.limit, token))).await.map_err(explain)?);
                }
                print_list(format, &items, |items| tables::status(items, cols))
            }
        },
        (Resource::Members, _, _) => print_list(format, &hub.members().await.map_err(explain)?, tables::members),
        _ => print_list(format, &hub.events(a.after, Some(10_000)).await.map_err(explain)?, tables::events),
    }
}

/// The page of `limit` items after the one whose token is `token`.
fn page(limit: u16, token: Option<String>) -> PageParams {
    PageParams { limit: Some(usize::from(limit)), continue_: token }
}

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
            Format::Table | Format::Wide | Format::Name => {
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
