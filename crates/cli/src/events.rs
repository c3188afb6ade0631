//! `get events`: newest first (within `--since`, else the newest 10,000), or from a
//! cursor (`--after`) oldest first; `--watch` follows the log from now (after the
//! newest event), from `--since` ago, or from `--after`.

use crate::args::{Format, GetArgs};
use crate::client::{cursor_gone, explain, print_list};
use crate::tables::{self, event_cells, Columns, EVENT_COLUMNS};
use anyhow::{bail, Result};
use fleetsync_api::{describe, Client, ClientError, Event, WatchLine};
use std::io::Write;
use std::time::Duration;

/// Events `get events` prints at most without `--since` or `--after`.
const NEWEST: usize = 10_000;

pub async fn get(hub: &Client, a: &GetArgs, cols: Columns) -> Result<()> {
    let chunk = usize::from(a.chunk_size);
    if a.watch {
        let after = match (a.after, a.since) {
            (Some(after), _) => Some(after),
            (None, Some(since)) => {
                // Just before the oldest event of the window (the newest, if none is in it).
                let window = newest(hub, chunk, Some(since), usize::MAX).await?;
                match window.last() {
                    Some(oldest) => Some(oldest.seq.saturating_sub(1)),
                    None => newest(hub, 1, None, 1).await?.first().map(|e| e.seq),
                }
            }
            (None, None) => newest(hub, 1, None, 1).await?.first().map(|e| e.seq),
        };
        return watch_events(hub, after, a.output.format()).await;
    }
    // `--limit` caps what is printed; without it, the newest 10,000 (all of `--since`).
    let cap = a.limit.map(|max| usize::try_from(max).unwrap_or(usize::MAX));
    let items = match a.after {
        Some(after) => hub.events(Some(after), Some(cap.unwrap_or(NEWEST).min(NEWEST))).await.map_err(explain)?,
        None => newest(hub, chunk, a.since, cap.unwrap_or(if a.since.is_some() { usize::MAX } else { NEWEST })).await?,
    };
    print_list(&a.output, !a.no_headers, &items, |items| tables::events(items, cols))
}

/// The newest events, newest first, read in pages of `limit`: those of the last `since`
/// if given, at most `cap`.
async fn newest(hub: &Client, limit: usize, since: Option<Duration>, cap: usize) -> Result<Vec<Event>> {
    let cutoff = since.map(|d| now_millis().saturating_sub(i64::try_from(d.as_millis()).unwrap_or(i64::MAX)));
    let mut items: Vec<Event> = Vec::new();
    let mut before = None;
    loop {
        let page = hub.events_newest(before, limit.min(cap - items.len())).await.map_err(explain)?;
        let Some(last) = page.last().map(|e| e.seq) else { return Ok(items) };
        let full = page.len() == limit;
        for e in page {
            if cutoff.is_some_and(|c| e.at.millis() < c) {
                return Ok(items);
            }
            items.push(e);
        }
        if !full || items.len() >= cap {
            return Ok(items);
        }
        before = Some(last);
    }
}

fn now_millis() -> i64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
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
            Err(e @ (ClientError::Unreachable { .. } | ClientError::TimedOut { .. })) if !connected => {
                return Err(explain(e))
            }
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
