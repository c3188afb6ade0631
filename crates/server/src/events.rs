//! The event log over HTTP: a page from a cursor, or a watch that streams every event
//! after the cursor and then each new one as it is committed.
//!
//! `GET /v1/events?after=N&limit=M` answers `{"items": [...]}`, oldest first. Without
//! `after` it starts at the oldest event kept. A cursor older than the log's horizon
//! (retention trimmed events after it) is `410 Gone` with
//! `{"error", "cursor", "horizon"}`: the client re-lists, it never silently misses events.
//! A caller sees the events of its own tenants only (a fleet-admin, all). The store
//! reads a caller's tenants by an index on the tenant, so a page costs the page however
//! many events other tenants have; retention is kept per tenant, and a cursor is
//! checked against the caller's tenants' horizon. A watch moves its cursor past other
//! tenants' events (its bookmarks carry it).
//!
//! `GET /v1/events?order=desc&limit=M` answers the `M` newest events instead, newest
//! first; `&before=N` pages back (the newest events older than `N`). `order=desc` takes
//! no `after` and no `watch`; it too costs the page. A client that wants to watch
//! "from now" reads the newest event (`order=desc&limit=1`) and watches after its `seq`.
//!
//! `since=now` (instead of `after`) starts a list or a watch after the newest event:
//! a client that only wants what happens from now on (the dashboard) reads no backlog.
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
//! New events are sent as soon as they are committed: one reader per server follows the
//! store's [`events_subscribe`](fleetsync_store::EventLog::events_subscribe) channel
//! (with a slow [`Watches::poll`] as a safety net) and fans each commit's events out
//! to every watch ([`feed`](crate::feed)), so a commit costs the store one read however
//! many watches are open. A watch that starts behind, or falls behind the fan-out's
//! buffer, reads the store from its cursor (a page, `limit`, at a time, the next only
//! when the previous one has been sent) until it has caught up. A watch builds chunks
//! of at most ~32 KiB and the next only when the connection took the previous one, so
//! a client that stops reading makes the server hold a small, bounded buffer.
//!
//! Watches are capped ([`WatchLimits`]) in all and per caller: beyond a cap the request
//! is `429 Too Many Requests`, naming the limit. A watch's slot is given back when its
//! stream ends or its client goes away. When the server shuts down every stream ends
//! cleanly (last chunk); a client reconnects with `after` set to the last `seq` it saw
//! (event or bookmark) and misses nothing.

use crate::access::{Caller, Visible};
use crate::error::{ApiError, Result};
use crate::extract::ApiQuery;
use crate::feed::{EventFeed, FeedPage};
use crate::watch_slots::{WatchLimits, WatchSlot, WatchSlots};
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
use tokio::sync::{broadcast, watch};
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
    /// `asc` (oldest first, the default) or `desc` (newest first; no `after`, no `watch`).
    #[serde(default)]
    pub order: Order,
    /// With `order=desc`: only events older than this sequence number (the next page
    /// back is `before` the last `seq` of this one).
    #[serde(default)]
    pub before: Option<u64>,
    /// `now`: start after the newest event, whoever's it is (no backlog); takes no
    /// `after`.
    #[serde(default)]
    pub since: Option<Since>,
}

/// Where a list or a watch without `after` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Since {
    Now,
}

/// Which end of the log a page starts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    #[default]
    Asc,
    Desc,
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
    /// Caps on open watches.
    pub limits: WatchLimits,
    closing: Arc<watch::Sender<bool>>,
    slots: Arc<WatchSlots>,
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
        Self {
            keepalive,
            poll,
            limits: WatchLimits::default(),
            closing: Arc::new(watch::channel(false).0),
            slots: Arc::default(),
        }
    }

    /// These settings with `limits` on open watches.
    pub fn with_limits(self, limits: WatchLimits) -> Self {
        Self { limits, ..self }
    }

    /// Watches open now.
    pub fn open(&self) -> usize {
        self.slots.open()
    }

    /// Ends every watch stream of this server: each finishes the chunk it is sending
    /// and ends. Watches opened afterwards end at once.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }
}

/// `GET /v1/events`: a page of events, or with `watch=true` a stream of them — of the
/// caller's tenants only.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Response> {
    let visible = caller.visible();
    if visible.is_none() {
        return Err(ApiError::Forbidden(format!("{} may read no tenant's events", caller.subject)));
    }
    if !(1..=MAX_LIMIT).contains(&q.limit) {
        return Err(ApiError::InvalidParam {
            param: "query parameter `limit`".into(),
            rule: format!("must be between 1 and {MAX_LIMIT}, got {}", q.limit),
        });
    }
    if q.order == Order::Desc || q.before.is_some() {
        let bad = |param: &str, rule: &str| ApiError::InvalidParam {
            param: format!("query parameter `{param}`"),
            rule: rule.into(),
        };
        if q.order != Order::Desc {
            return Err(bad("before", "needs `order=desc`"));
        }
        if q.watch || q.after.is_some() || q.since.is_some() {
            return Err(bad(
                "order",
                "`desc` reads back from the newest event: it takes no `after`, `since` or `watch`",
            ));
        }
        let items = state.events.log().events_newest(scope(&visible).as_deref(), q.before, q.limit).await?;
        return Ok(Json(Items::all(items)).into_response());
    }
    let after = match q.since {
        Some(Since::Now) if q.after.is_some() => {
            return Err(ApiError::InvalidParam {
                param: "query parameter `since`".into(),
                rule: "`now` takes no `after`".into(),
            });
        }
        Some(Since::Now) => Some(state.events.log().events_head().await?),
        None => q.after,
    };
    let tenants = scope(&visible);
    if !q.watch {
        let (_, items) = first_page(&**state.events.log(), tenants.as_deref(), after, q.limit).await?;
        return Ok(Json(Items::all(items)).into_response());
    }
    let slot = state.watches.slots.take(&state.watches.limits, &caller)?;
    // Follow the feed before the first read: what it broadcasts from now on reaches us.
    let closing = state.watches.closing.subscribe();
    let pages = state.events.follow(state.watches.poll, closing.clone());
    // Read before answering, so that an expired cursor is a 410, not a broken stream.
    let (cursor, first) = first_page(&**state.events.log(), tenants.as_deref(), after, q.limit).await?;
    let follow = Follow {
        log: state.events.log().clone(),
        feed: state.events,
        pages,
        live: false,
        cursor,
        limit: q.limit,
        pending: Some((Arc::new(FeedPage::new(cursor, first)), 0)),
        visible,
        closing,
        keepalive: state.watches.keepalive,
        caught_up: false,
        quiet_since: Instant::now(),
        done: false,
        _slot: slot,
    };
    let stream = futures_util::stream::unfold(follow, |mut f| async move {
        let chunk = f.next_chunk().await?;
        Some((Ok::<_, Infallible>(chunk), f))
    });
    let headers = [(CONTENT_TYPE, "application/x-ndjson"), (CACHE_CONTROL, "no-cache")];
    Ok((headers, Body::from_stream(stream)).into_response())
}

/// The tenants a caller's reads are scoped to (none: every tenant's).
fn scope(visible: &Visible) -> Option<Vec<String>> {
    match visible {
        Visible::All => None,
        Visible::Tenants(t) => Some(t.iter().cloned().collect()),
    }
}

/// A page of the events of `tenants` (none: all) after `after`: read by tenant for a
/// caller of some tenants, so it costs the page however many events others have.
async fn read(
    store: &dyn EventLog,
    tenants: Option<&[String]>,
    after: u64,
    limit: usize,
) -> Result<Vec<Event>, StoreError> {
    match tenants {
        None => store.events_read(after, limit).await,
        Some(tenants) => store.events_read_of(tenants, after, limit).await,
    }
}

/// The first page and the cursor it was read from. Without a cursor, the log is read
/// from its horizon (for a caller of some tenants, theirs; retention may move it
/// between two reads, hence the loop).
async fn first_page(
    store: &dyn EventLog,
    tenants: Option<&[String]>,
    after: Option<u64>,
    limit: usize,
) -> Result<(u64, Vec<Event>)> {
    let mut cursor = after.unwrap_or(0);
    loop {
        match read(store, tenants, cursor, limit).await {
            Ok(page) => return Ok((cursor, page)),
            Err(StoreError::CursorExpired { horizon, .. }) if after.is_none() && horizon > cursor => cursor = horizon,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Largest chunk a watch builds before handing it to the connection: with hyper's
/// bounded buffer, what a watch whose client stops reading holds.
const CHUNK_BYTES: usize = 32 * 1024;

/// A watch in progress: everything it needs to produce its next chunk.
struct Follow {
    log: Arc<dyn EventLog>,
    feed: EventFeed,
    /// The feed's pages, once caught up.
    pages: broadcast::Receiver<Arc<FeedPage>>,
    /// Following the feed (else reading the store from the cursor until caught up).
    live: bool,
    /// Every event up to here has been sent (or precedes the start).
    cursor: u64,
    limit: usize,
    /// Read, not yet all sent: the page and where in it to go on.
    pending: Option<(Arc<FeedPage>, usize)>,
    /// Whose events are sent; the others are skipped (the cursor moves past them).
    visible: Visible,
    closing: watch::Receiver<bool>,
    keepalive: Duration,
    /// Whether the "caught up" bookmark has been sent.
    caught_up: bool,
    quiet_since: Instant,
    /// An error line was sent: the stream ends.
    done: bool,
    /// Its place under the watch caps, given back when the stream is dropped.
    _slot: WatchSlot,
}

impl Follow {
    /// The next chunk of the stream (events, a bookmark, or an error), or `None` when
    /// the stream ends.
    async fn next_chunk(&mut self) -> Option<Vec<u8>> {
        loop {
            if self.done || *self.closing.borrow() {
                return None;
            }
            if let Some((page, from)) = self.pending.take() {
                let (out, next) = self.lines(&page, from);
                if let Some(next) = next {
                    self.pending = Some((page, next));
                }
                if out.is_empty() {
                    continue;
                }
                return Some(self.sent(out));
            }
            if !self.live {
                match self.catch_up().await {
                    Ok(page) if !page.is_empty() => {
                        self.pending = Some((Arc::new(FeedPage::new(self.cursor, page)), 0));
                        continue;
                    }
                    Ok(_) => {
                        self.live = true;
                        self.feed.caught_up(self.cursor);
                    }
                    Err(e) => {
                        self.done = true;
                        return Some(self.sent(error_line(e)));
                    }
                }
                if !self.caught_up {
                    self.caught_up = true;
                    return Some(self.bookmark());
                }
                continue;
            }
            let keepalive_at = self.quiet_since + self.keepalive;
            let received = tokio::select! {
                () = closed(&mut self.closing) => return None,
                page = self.pages.recv() => Some(page),
                () = tokio::time::sleep_until(keepalive_at) => None,
            };
            let Some(received) = received else { return Some(self.bookmark()) };
            match received {
                // Events after our cursor that the page does not hold: read them from
                // the store first.
                Ok(page) if page.after > self.cursor => self.live = false,
                Ok(page) => self.pending = Some((page, 0)),
                // Fell behind the feed's buffer (or the feed is gone): catch up from the
                // store, then follow again.
                Err(_) => self.live = false,
            }
        }
    }

    /// The next page from the store after the cursor. A watch of some tenants reads
    /// theirs only; when none is left it moves its cursor to the log's head as read
    /// *before* that read (every event up to there was committed then, so none of its
    /// tenants' is skipped): following the feed, it then starts where the feed is.
    async fn catch_up(&mut self) -> Result<Vec<Event>, StoreError> {
        let tenants = scope(&self.visible);
        let head = match tenants {
            Some(_) => Some(self.log.events_head().await?),
            None => None,
        };
        let page = read(&*self.log, tenants.as_deref(), self.cursor, self.limit).await?;
        if let (Some(head), true) = (head, page.is_empty()) {
            self.cursor = self.cursor.max(head);
        }
        Ok(page)
    }

    /// The lines of `page`'s visible events after the cursor, from index `from`, up to
    /// about [`CHUNK_BYTES`]; moves the cursor past every event looked at (visible or
    /// not). Also where to go on in the page, if it is not done.
    fn lines(&mut self, page: &FeedPage, from: usize) -> (Vec<u8>, Option<usize>) {
        let mut out = Vec::new();
        for (i, event) in page.events.iter().enumerate().skip(from) {
            if out.len() >= CHUNK_BYTES {
                return (out, Some(i));
            }
            if event.seq <= self.cursor {
                continue;
            }
            self.cursor = event.seq;
            if self.visible.contains(&event.tenant) {
                out.extend_from_slice(page.line(i));
            }
        }
        (out, None)
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
