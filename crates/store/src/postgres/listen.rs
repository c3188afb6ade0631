//! Wake-ups across processes: LISTEN/NOTIFY.
//!
//! A transaction that makes work claimable calls `pg_notify('fleetsync_work',
//! 'schema@run_at')` with the earliest `run_at` it wrote (the claim cursors move back to
//! it, see `cursor.rs`), one that appends events `pg_notify('fleetsync_events', schema)`;
//! PostgreSQL delivers them when (and only if) it commits. Each store keeps one
//! dedicated connection (outside the pool) that LISTENs to both and bumps the store's
//! matching `watch` channel on every notification for its schema (or with an empty
//! payload), so a worker or an event watcher waiting in any process wakes within
//! milliseconds.
//!
//! The connection is pinged every [`PING_EVERY`] and has TCP keepalives; when it drops
//! (PostgreSQL restarted, network gone) it is re-established with capped exponential
//! backoff, and both watches are bumped once after reconnecting (and the claim cursors
//! start over), because a notification may have been missed meanwhile. The task ends
//! when the store's last clone is dropped.

use super::cursor::ClaimCursors;
use super::failure::pg_transience;
use super::{describe, BoxFuture};
use crate::retry::Transience;
use std::future::{pending, poll_fn, Future};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{AsyncMessage, Client, Config, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The notification channel for claimable work.
pub(super) const CHANNEL: &str = "fleetsync_work";
/// The notification channel for appended events.
pub(super) const EVENTS_CHANNEL: &str = "fleetsync_events";
const PING_EVERY: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Short: while the listener is down, changes of other processes wake nobody (the
/// safety poll aside), so it must be back within about a second of the server.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Why the LISTEN connection could not be had or was lost.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    #[error("{}", describe(.0))]
    Pg(#[source] tokio_postgres::Error),
    #[error("connection closed")]
    Closed,
    #[error("no answer to a ping within {PING_TIMEOUT:?}")]
    NoPingAnswer,
}

impl From<tokio_postgres::Error> for ListenError {
    fn from(e: tokio_postgres::Error) -> Self {
        ListenError::Pg(e)
    }
}

impl ListenError {
    /// How this failure counts for trying again: a closed or silent connection is an
    /// outage.
    pub(super) fn transience(&self) -> Transience {
        match self {
            ListenError::Pg(e) => pg_transience(e),
            ListenError::Closed | ListenError::NoPingAnswer => Transience::Outage,
        }
    }
}

type Listening = (Client, Connection<Socket, <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream>);

/// The store's channels, one per notification channel.
struct Wakes {
    work: watch::Sender<u64>,
    events: watch::Sender<u64>,
    cursors: Arc<ClaimCursors>,
}

/// Keeps the listener running; dropping it stops the task.
pub(super) struct Listener {
    _stop: oneshot::Sender<()>,
}

/// How the listener connects: the store's settings and TLS connector, so it
/// reconnects exactly as the pool does.
struct Target {
    cfg: Config,
    tls: MakeRustlsConnect,
}

/// Establishes the LISTEN connection (so that wake-ups work once this returns) and
/// spawns the task that keeps it.
pub(super) async fn start(
    cfg: Config,
    tls: MakeRustlsConnect,
    schema: String,
    wake: watch::Sender<u64>,
    events: watch::Sender<u64>,
    cursors: Arc<ClaimCursors>,
) -> Result<Listener, ListenError> {
    let target = Target { cfg, tls };
    let first = listen(&target).await?;
    let (stop_tx, stop_rx) = oneshot::channel();
    let wakes = Wakes { work: wake, events, cursors };
    tokio::spawn(run(target, schema, wakes, first, stop_rx));
    Ok(Listener { _stop: stop_tx })
}

/// Connects and subscribes.
async fn listen(target: &Target) -> Result<Listening, ListenError> {
    let (client, mut connection) = target.cfg.connect(target.tls.clone()).await?;
    {
        let sql = format!("LISTEN {CHANNEL}; LISTEN {EVENTS_CHANNEL}");
        let subscribe = client.batch_execute(&sql);
        tokio::pin!(subscribe);
        loop {
            tokio::select! {
                done = &mut subscribe => break done?,
                msg = poll_fn(|cx| connection.poll_message(cx)) => match msg {
                    Some(Ok(_)) => {}
                    Some(Err(e)) => return Err(e.into()),
                    None => return Err(ListenError::Closed),
                },
            }
        }
    }
    Ok((client, connection))
}

/// Why [`pump`] returned.
enum Ended {
    Stopped,
    Lost(ListenError),
}

async fn run(target: Target, schema: String, wake: Wakes, first: Listening, mut stop: oneshot::Receiver<()>) {
    let mut current = Some(first);
    let mut backoff = MIN_BACKOFF;
    loop {
        let listening = match current.take() {
            Some(l) => l,
            None => {
                let attempt = tokio::select! {
                    _ = &mut stop => return,
                    attempt = listen(&target) => attempt,
                };
                match attempt {
                    Ok(l) => {
                        tracing::info!(schema, "wake-up listener reconnected");
                        backoff = MIN_BACKOFF;
                        wake.cursors.lower(None);
                        bump(&wake.work);
                        bump(&wake.events);
                        l
                    }
                    Err(error) => {
                        tracing::warn!(schema, %error, retry_in = ?backoff, "wake-up listener cannot reconnect");
                        tokio::select! {
                            _ = &mut stop => return,
                            _ = tokio::time::sleep(backoff) => {}
                        }
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                }
            }
        };
        match pump(listening, &schema, &wake, &mut stop).await {
            Ended::Stopped => return,
            Ended::Lost(error) => tracing::warn!(schema, %error, "wake-up listener lost its connection; reconnecting"),
        }
    }
}

/// Delivers notifications until the connection fails or the store is dropped.
async fn pump(
    (client, mut connection): Listening,
    schema: &str,
    wake: &Wakes,
    stop: &mut oneshot::Receiver<()>,
) -> Ended {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + PING_EVERY, PING_EVERY);
    let mut ping: Option<BoxFuture<'_, Result<(), ListenError>>> = None;
    loop {
        tokio::select! {
            _ = &mut *stop => return Ended::Stopped,
            msg = poll_fn(|cx| connection.poll_message(cx)) => match msg {
                Some(Ok(AsyncMessage::Notification(n))) => match (n.channel(), for_schema(n.payload(), schema)) {
                    (CHANNEL, Some(run_at)) => {
                        wake.cursors.lower(run_at);
                        bump(&wake.work);
                    }
                    (EVENTS_CHANNEL, Some(_)) => bump(&wake.events),
                    _ => {}
                },
                Some(Ok(_)) => {}
                Some(Err(e)) => return Ended::Lost(e.into()),
                None => return Ended::Lost(ListenError::Closed),
            },
            _ = tick.tick(), if ping.is_none() => {
                let client = &client;
                ping = Some(Box::pin(async move {
                    match tokio::time::timeout(PING_TIMEOUT, client.simple_query("")).await {
                        Ok(Ok(_)) => Ok(()),
                        Ok(Err(e)) => Err(e.into()),
                        Err(_) => Err(ListenError::NoPingAnswer),
                    }
                }));
            }
            answer = in_flight(&mut ping) => {
                ping = None;
                if let Err(error) = answer {
                    return Ended::Lost(error);
                }
            }
        }
    }
}

/// Awaits the ping if one is in flight; otherwise never completes.
async fn in_flight<F: Future + Unpin>(f: &mut Option<F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => pending().await,
    }
}

/// The payload of a work notification: the schema and the earliest `run_at` made ready.
pub(super) fn work_payload(schema: &str, run_at: i64) -> String {
    format!("{schema}@{run_at}")
}

/// Whether a notification with `payload` is for `schema` (an empty payload is for
/// every schema), and the `run_at` it announces (`None`: not said, so anywhere).
fn for_schema(payload: &str, schema: &str) -> Option<Option<i64>> {
    match payload.split_once('@') {
        Some((s, at)) if s == schema => Some(at.parse().ok()),
        None if payload.is_empty() || payload == schema => Some(None),
        _ => None,
    }
}

/// Tells the channel's waiters to look again.
pub(super) fn bump(wake: &watch::Sender<u64>) {
    wake.send_modify(|v| *v = v.wrapping_add(1));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_payload_names_its_schema_and_when_its_keys_are_due() {
        assert_eq!(for_schema(&work_payload("fs_a", 1234), "fs_a"), Some(Some(1234)));
        assert_eq!(for_schema(&work_payload("fs_a", -5), "fs_a"), Some(Some(-5)));
        assert_eq!(for_schema(&work_payload("fs_a", 1234), "fs_b"), None, "another schema's");
        assert_eq!(for_schema("fs_a", "fs_a"), Some(None), "no time said: anywhere");
        assert_eq!(for_schema("", "fs_a"), Some(None), "for everyone");
        assert_eq!(for_schema("fs_a@soon", "fs_a"), Some(None), "an unreadable time: anywhere");
        assert_eq!(for_schema("fs_ab", "fs_a"), None);
    }
}
