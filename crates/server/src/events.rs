//! The event log over HTTP: a page from a cursor, or a watch that streams every event
//! after the cursor and then each new one as it is committed.
//!
//! `GET /v1/events?after=N&limit=M` answers `{"items": [...]}`, oldest first. Without
//! `after` it starts at the oldest event kept. A cursor older than the log's horizon
//! (retention trimmed events after it) is `410 Gone` with
//! `{"error", "cursor", "horizon"}`: the client re-lists, it never silently misses events.
//! A caller sees the events of its own tenants only (a fleet-admin, all): a page reads
//! on past other tenants' events until it is full or the log ends, and a watch moves its
//! cursor past them (its bookmarks carry it).
//!
//! `GET /v1/events?after=N&watch=true` streams newline-delimited JSON
//! (`application/x-ndjson`), one object per line, like a Kubernetes watch:
//!
//! - `{"type":"EVENT","event":{…}}`: the next event, in `seq` order, each once.
//! - `{"type":"BOOKMARK","seq":N}`: every event up to `N` has been sent. One is sent
//!   when the backlog is out (the client is caught up), then after every
//!   [`Watches::keepalive`] without output, so that idle connections stay open through
//!   proxies and the client knows its cursor even when nothing happens.
//! - `{"type":"ERROR","code":410,…}` and the end of the stream if the watch fell behind
//!   the horizon (a trim passed it), with the same fields as the 410 answer; `code` 500
//!   if the store failed. The client re-lists (410) or reconnects (500).
//!
//! New events are sent as soon as they are committed: the stream waits on the store's
//! [`events_subscribe`](fleetsync_store::EventLog::events_subscribe) channel, with a slow
//! [`Watches::poll`] as a safety net. It reads the log a page (`limit`) at a time and
//! only when the previous page has been sent, so a watch holds one page in memory
//! however far behind it starts or however slowly its client reads. When the server
//! shuts down every stream ends cleanly (last chunk); a client reconnects with `after`
//! set to the last `seq` it saw (event or bookmark) and misses nothing.

use crate::access::{Caller, Visible};
use crate::error::{ApiError, Result};
use crate::extract::ApiQuery;
use crate::{AppState, Items};
use axum::body::Body;
use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::Json;
use fleetsync_api::{WatchError, WatchLine};
use fleetsync_store::{Event, EventLog, StoreError};
use serde::Deserialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// Page size when the client names none.
pub const DEFAULT_LIMIT: usize = 500;
/// The largest page: bounds the memory and time one request (or one step of a watch)
/// can take.
pub const MAX_LIMIT: usize = 10_000;

/// `?after=N&limit=M&watch=true`. The log is store-wide and ordered across tenants, so
/// there is no `tenant` parameter: each caller sees the events of its own tenants.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Events with a sequence number greater than this (the cursor); none = from the
    /// oldest event kept.
    #[serde(default)]
    pub after: Option<u64>,
    /// Page size (for a watch: how many events it reads and sends at a time).
    #[serde(default = "default_limit")]
    pub limit: usize,
    /// Stream instead of answering one page.
    #[serde(default)]
    pub watch: bool,
}

fn default_limit() -> usize {
    DEFAULT_LIMIT
}

/// How event watches behave, and the switch that ends them all when the server stops.
/// Clones share the switch.
#[derive(Debug, Clone)]
pub struct Watches {
    /// A bookmark is sent after this long without output.
    pub keepalive: Duration,
    /// The log is read again after this long without a wake-up (a safety net: commits
    /// wake watches at once).
    pub poll: Duration,
    closing: Arc<watch::Sender<bool>>,
}

impl Default for Watches {
    /// Keep-alive every 20 s (below the 30–60 s idle timeouts of common proxies and
    /// load balancers), safety poll every 5 s.
    fn default() -> Self {
        Self::new(Duration::from_secs(20), Duration::from_secs(5))
    }
}

impl Watches {
    pub fn new(keepalive: Duration, poll: Duration) -> Self {
        Self { keepalive, poll, closing: Arc::new(watch::channel(false).0) }
    }

    /// Ends every watch stream of this server: each finishes the chunk it is sending
    /// and ends. Watches opened afterwards end at once.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }
}

/// `GET /v1/events`: a page of events, or with `watch=true` a stream of them — of the
/// caller's tenants only.
pub async fn list(State(state): State<AppState>, caller: Caller, ApiQuery(q): ApiQuery<EventsQuery>) -> Result<Response> {
    let visible = caller.visible();
    if visible == Visible::Tenants(Default::default()) {
        return Err(ApiError::Forbidden(format!("{} may read no tenant's events", caller.subject)));
    }
    if !(1..=MAX_LIMIT).contains(&q.limit) {
        return Err(ApiError::InvalidParam {
            param: "query parameter `limit`".into(),
            rule: format!("must be between 1 and {MAX_LIMIT}, got {}", q.limit),
        });
    }
    // Read before answering, so that an expired cursor is a 410, not a broken stream.
    let (cursor, first) = first_page(&*state.store, q.after, q.limit).await?;
    if !q.watch {
        let items = visible_page(&*state.store, &visible, first, q.limit).await?;
        return Ok(Json(Items { items }).into_response());
    }
    let follow = Follow {
        wake: state.store.events_subscribe(),
        closing: state.watches.closing.subscribe(),
        store: state.store,
        cursor,
        limit: q.limit,
        pending: first,
        visible,
        keepalive: state.watches.keepalive,
        poll: state.watches.poll,
        caught_up: false,
        quiet_since: Instant::now(),
        done: false,
    };
    let stream = futures_util::stream::unfold(follow, |mut f| async move {
        let chunk = f.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), f))
    });
    let headers = [(CONTENT_TYPE, "application/x-ndjson"), (CACHE_CONTROL, "no-cache")];
    Ok((headers, Body::from_stream(stream)).into_response())
}

/// The first page and the cursor it was read from. Without a cursor, the log is read
/// from its horizon (retention may move it between two reads, hence the loop).
async fn first_page(store: &dyn EventLog, after: Option<u64>, limit: usize) -> Result<(u64, Vec<Event>)> {
    let mut cursor = after.unwrap_or(0);
    loop {
        match store.events_read(cursor, limit).await {
            Ok(page) => return Ok((cursor, page)),
            Err(StoreError::CursorExpired { horizon, .. }) if after.is_none() && horizon > cursor => cursor = horizon,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Up to `limit` events of the `visible` tenants, from `first` (a page just read) on:
/// reads further pages while the ones read hold fewer, so that a page of other tenants'
/// events does not look like the end of the log.
async fn visible_page(store: &dyn EventLog, visible: &Visible, first: Vec<Event>, limit: usize) -> Result<Vec<Event>> {
    let mut page = first;
    let mut items = Vec::new();
    loop {
        let (full, last) = (page.len() == limit, page.last().map(|e| e.seq));
        items.extend(page.into_iter().filter(|e| visible.contains(&e.tenant)));
        match last {
            Some(last) if full && items.len() < limit => page = store.events_read(last, limit).await?,
            _ => break,
        }
    }
    items.truncate(limit);
    Ok(items)
}

/// A watch in progress: everything it needs to produce its next chunk.
struct Follow {
    store: Arc<dyn EventLog>,
    /// Every event up to here has been sent (or precedes the start).
    cursor: u64,
    limit: usize,
    /// Read, not yet sent (nor filtered).
    pending: Vec<Event>,
    /// Whose events are sent; the others are skipped (the cursor moves past them).
    visible: Visible,
    wake: watch::Receiver<u64>,
    closing: watch::Receiver<bool>,
    keepalive: Duration,
    poll: Duration,
    /// Whether the "caught up" bookmark has been sent.
    caught_up: bool,
    quiet_since: Instant,
    /// An error line was sent: the stream ends.
    done: bool,
}

impl Follow {
    /// The next chunk of the stream (one page of events, a bookmark, or an error), or
    /// `None` when the stream ends.
    async fn next_chunk(&mut self) -> Option<Vec<u8>> {
        loop {
            if self.done || *self.closing.borrow() {
                return None;
            }
            if !self.pending.is_empty() {
                let page = std::mem::take(&mut self.pending);
                self.cursor = page.last().map_or(self.cursor, |e| e.seq);
                let mut out = Vec::with_capacity(page.len() * 200);
                for event in page.into_iter().filter(|e| self.visible.contains(&e.tenant)) {
                    push_line(&mut out, &WatchLine::Event { event });
                }
                if out.is_empty() {
                    continue;
                }
                return Some(self.sent(out));
            }
            // Mark the wake-up seen *before* reading: a commit after the read changes it.
            self.wake.borrow_and_update();
            match self.store.events_read(self.cursor, self.limit).await {
                Ok(page) if !page.is_empty() => {
                    self.pending = page;
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    self.done = true;
                    return Some(self.sent(error_line(e)));
                }
            }
            if !self.caught_up {
                self.caught_up = true;
                return Some(self.bookmark());
            }
            let (poll, keepalive_at) = (self.poll, self.quiet_since + self.keepalive);
            let woken = tokio::select! {
                () = closed(&mut self.closing) => return None,
                changed = self.wake.changed() => Woken::Commit(changed.is_ok()),
                () = tokio::time::sleep(poll) => Woken::Poll,
                () = tokio::time::sleep_until(keepalive_at) => Woken::Quiet,
            };
            match woken {
                Woken::Quiet => return Some(self.bookmark()),
                // The store's channel closed (cannot happen while we hold the store): poll.
                Woken::Commit(false) => tokio::time::sleep(poll).await,
                Woken::Commit(true) | Woken::Poll => {}
            }
        }
    }

    fn bookmark(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        push_line(&mut out, &WatchLine::Bookmark { seq: self.cursor });
        self.sent(out)
    }

    fn sent(&mut self, chunk: Vec<u8>) -> Vec<u8> {
        self.quiet_since = Instant::now();
        chunk
    }
}

/// Why a caught-up watch stopped waiting.
enum Woken {
    /// Events were committed (or `false`: the store's channel closed).
    Commit(bool),
    /// The safety poll.
    Poll,
    /// Nothing was sent for a keep-alive interval.
    Quiet,
}

/// Waits until the server closes watches (forever if it never will).
async fn closed(closing: &mut watch::Receiver<bool>) {
    if closing.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
}

fn push_line(out: &mut Vec<u8>, line: &WatchLine) {
    // Serializing these plain structs cannot fail.
    if serde_json::to_writer(&mut *out, line).is_ok() {
        out.push(b'\n');
    }
}

/// The last line of a stream the store failed under: the API's error body (internals
/// hidden) with `"type": "ERROR"` and the status `code` a request would have had.
fn error_line(e: StoreError) -> Vec<u8> {
    let e = ApiError::from(e);
    let status = e.status();
    if status.is_server_error() {
        tracing::error!(error = %e, "an event watch failed");
    }
    let mut out = Vec::new();
    push_line(&mut out, &WatchLine::Error(WatchError { code: status.as_u16(), body: e.body() }));
    out
}
