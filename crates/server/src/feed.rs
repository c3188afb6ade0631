//! One reader of the event log per server, fanned out to every watch.
//!
//! The [`EventFeed`] reads the events committed after its cursor once per wake-up of
//! the store's [`events_subscribe`](EventLog::events_subscribe) channel (and on the
//! safety poll) and broadcasts them as [`FeedPage`]s; each watch filters them by its
//! caller's tenants and its own cursor. So a commit costs the store one read however
//! many watches are open, and each event is serialized once for all of them.
//!
//! A page says which cursor it was read after. A watch whose cursor is older than that
//! (it started far behind, or fell behind the broadcast's buffer and lost pages) reads
//! the store itself from its cursor until it has caught up, then follows the feed
//! again: no event is lost or sent twice, and order is kept.
//!
//! The reader runs only while some watch follows it: it starts with the first and
//! stops after the last has gone. It learns where the log ends from the first watch
//! that caught up by reading the store.

use fleetsync_api::WatchLine;
use fleetsync_store::{Event, EventLog, StoreError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// Events read per store read by the feed.
const FEED_PAGE: usize = 500;

/// Pages kept for watches that have not taken them yet; a watch further behind reads
/// the store (the default).
pub const DEFAULT_FEED_PAGES: usize = 256;

/// Events the feed read after one cursor, shared by every watch.
#[derive(Debug)]
pub struct FeedPage {
    /// The events follow this sequence number: every event up to it came in earlier pages.
    pub after: u64,
    pub events: Vec<Event>,
    /// Each event's watch line (`{"type":"EVENT",…}\n`), serialized once, on first use.
    lines: OnceLock<Vec<Box<[u8]>>>,
}

impl FeedPage {
    pub(crate) fn new(after: u64, events: Vec<Event>) -> Self {
        Self { after, events, lines: OnceLock::new() }
    }

    /// The watch line of event `i`.
    pub(crate) fn line(&self, i: usize) -> &[u8] {
        let lines = self.lines.get_or_init(|| {
            self.events
                .iter()
                .map(|event| {
                    let mut out = Vec::with_capacity(256);
                    // Serializing these plain structs cannot fail.
                    if serde_json::to_writer(&mut out, &WatchLine::Event { event: event.clone() }).is_ok() {
                        out.push(b'\n');
                    }
                    out.into_boxed_slice()
                })
                .collect()
        });
        lines.get(i).map_or(&[][..], |l| &l[..])
    }
}

/// The event log and the one reader that fans it out to this server's watches. Clones
/// share both.
#[derive(Clone)]
pub struct EventFeed {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for EventFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventFeed").field("followers", &self.shared.pages.receiver_count()).finish_non_exhaustive()
    }
}

struct Shared {
    log: Arc<dyn EventLog>,
    pages: broadcast::Sender<Arc<FeedPage>>,
    /// Whether the reader task runs.
    running: Mutex<bool>,
    /// A cursor a watch caught up to by reading the store: where a new reader starts.
    hint: watch::Sender<Option<u64>>,
}

impl EventFeed {
    /// A feed of `log` keeping [`DEFAULT_FEED_PAGES`] pages.
    pub fn new(log: Arc<dyn EventLog>) -> Self {
        Self::with_pages(log, DEFAULT_FEED_PAGES)
    }

    /// A feed of `log` keeping `pages` pages (at least 1) for watches that are behind.
    pub fn with_pages(log: Arc<dyn EventLog>, pages: usize) -> Self {
        let shared = Shared {
            log,
            pages: broadcast::channel(pages.max(1)).0,
            running: Mutex::new(false),
            hint: watch::channel(None).0,
        };
        Self { shared: Arc::new(shared) }
    }

    /// The event log itself.
    pub fn log(&self) -> &Arc<dyn EventLog> {
        &self.shared.log
    }

    /// Follows the feed from now on, starting its reader if none runs (it reads on
    /// every commit and every `poll`, and stops when `closing` turns true).
    pub(crate) fn follow(&self, poll: Duration, closing: watch::Receiver<bool>) -> broadcast::Receiver<Arc<FeedPage>> {
        let receiver = self.shared.pages.subscribe();
        let mut running = self.shared.running.lock().unwrap_or_else(|e| e.into_inner());
        if !*running {
            *running = true;
            tokio::spawn(read_loop(self.shared.clone(), poll, closing));
        }
        receiver
    }

    /// A watch read the store up to `cursor` and found nothing after it: a reader that
    /// does not know where the log ends yet starts there.
    pub(crate) fn caught_up(&self, cursor: u64) {
        self.shared.hint.send_if_modified(|hint| {
            let newer = hint.is_none_or(|h| h < cursor);
            if newer {
                *hint = Some(cursor);
            }
            newer
        });
    }
}

/// The reader: waits for a commit, a hint or the poll, reads what is new and broadcasts
/// it; ends when nobody follows or the server closes its watches.
async fn read_loop(shared: Arc<Shared>, poll: Duration, mut closing: watch::Receiver<bool>) {
    let mut wake = shared.log.events_subscribe();
    let mut hint = shared.hint.subscribe();
    let mut cursor = *hint.borrow_and_update();
    let mut due = true;
    loop {
        {
            let mut running = shared.running.lock().unwrap_or_else(|e| e.into_inner());
            if shared.pages.receiver_count() == 0 || *closing.borrow() {
                *running = false;
                shared.hint.send_replace(None);
                return;
            }
        }
        if let (Some(from), true) = (cursor, due) {
            // Mark the wake-up seen *before* reading: a commit after the read changes it.
            wake.borrow_and_update();
            cursor = Some(publish_new(&shared, from).await);
        }
        due = false;
        tokio::select! {
            () = closing_or_gone(&mut closing) => {}
            changed = wake.changed() => {
                due = true;
                if changed.is_err() {
                    // The store's channel closed (it cannot while the store lives): poll.
                    tokio::time::sleep(poll).await;
                }
            }
            _ = hint.changed() => {
                let hinted = *hint.borrow_and_update();
                if cursor.is_none() && hinted.is_some() {
                    cursor = hinted;
                    due = true;
                }
            }
            () = tokio::time::sleep(poll) => due = true,
        }
    }
}

/// Resolves when `closing` changes; never if its sender is gone (the reader then ends
/// when its last follower does).
async fn closing_or_gone(closing: &mut watch::Receiver<bool>) {
    if closing.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Reads and broadcasts every event after `cursor`; returns the new cursor. A store
/// failure is logged and retried at the next wake-up: watches wait meanwhile.
async fn publish_new(shared: &Shared, mut cursor: u64) -> u64 {
    loop {
        match shared.log.events_read(cursor, FEED_PAGE).await {
            Ok(events) => {
                let Some(last) = events.last().map(|e| e.seq) else { return cursor };
                let full = events.len() == FEED_PAGE;
                // No follower left is fine: the loop ends at its next turn.
                let _ = shared.pages.send(Arc::new(FeedPage::new(cursor, events)));
                cursor = last;
                if !full {
                    return cursor;
                }
            }
            // Retention passed the feed: go on from the horizon. Watches behind it see
            // the gap, read the store themselves and get their 410.
            Err(StoreError::CursorExpired { horizon, .. }) if horizon > cursor => cursor = horizon,
            Err(e) => {
                tracing::warn!(error = %e, "reading new events for the watches failed: retrying at the next commit or poll");
                return cursor;
            }
        }
    }
}
