//! What the server knows about each open connection: whether a request is in flight,
//! since when it has been idle or reading a request head, and how to close it when the
//! connection cap needs its slot.
//!
//! A connection is *busy* from the moment its request head is complete until the
//! response body has been handed over (a watch stream is busy as long as it runs). A
//! connection that is not busy is either reading a request head (timed by
//! [`ConnectionLimits::header_read_timeout`], from its first byte, or from the accept for
//! the first request) or idle between requests (timed by
//! [`ConnectionLimits::idle_timeout`]).

use axum::body::{Body, Bytes};
use http_body::{Body as HttpBody, Frame, SizeHint};
use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Bounds on the API's connections, whatever the clients do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once. At the cap, a new connection takes the slot of the
    /// open one that has waited longest without a request in flight (idle, or still
    /// sending its request head); if every connection has a request in flight, the new
    /// one waits until one ends. Keep it below the process's file-descriptor limit.
    pub max_connections: usize,
    /// How long a client may take to send a whole request head: from the accept (or
    /// the TLS handshake) for the first request, from the first byte for later ones.
    pub header_read_timeout: Duration,
    /// How long a keep-alive connection may stay open with no request in flight.
    pub idle_timeout: Duration,
    /// How long a client may take to send a request's body, from the end of its head;
    /// then the request is `408` and the connection closed.
    pub body_read_timeout: Duration,
}

impl Default for ConnectionLimits {
    /// 1000 connections, 10 s to send a request head, 60 s to send its body, 60 s idle
    /// between requests.
    fn default() -> Self {
        Self {
            max_connections: 1000,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_read_timeout: Duration::from_secs(60),
        }
    }
}

/// The open connections, oldest first.
#[derive(Default)]
pub(crate) struct Connections {
    next: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<Tracker>>>,
}

impl Connections {
    /// A new connection's tracker, registered until the returned guard is dropped.
    pub(crate) fn register(self: &Arc<Self>) -> Registered {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let tracker = Arc::new(Tracker::new());
        lock(&self.open).insert(id, tracker.clone());
        Registered { connections: self.clone(), id, tracker }
    }

    /// Closes the connection that has waited longest without a request in flight;
    /// `false` if every connection has one.
    pub(crate) fn evict_oldest_idle(&self) -> bool {
        let open = lock(&self.open);
        let oldest = open.values().find(|t| !t.evict.is_cancelled() && lock(&t.state).in_flight == 0);
        match oldest {
            Some(t) => {
                t.evict.cancel();
                true
            }
            None => false,
        }
    }
}

/// One connection's registration; unregisters it when dropped.
pub(crate) struct Registered {
    connections: Arc<Connections>,
    id: u64,
    pub(crate) tracker: Arc<Tracker>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.connections.open).remove(&self.id);
    }
}

struct State {
    in_flight: usize,
    /// When the request head being read began (none: idle, or busy).
    head_started: Option<Instant>,
    /// When the last request ended.
    idle_since: Instant,
}

/// One connection's state.
pub(crate) struct Tracker {
    state: Mutex<State>,
    changed: Notify,
    /// Cancelled when the connection cap needs this connection's slot.
    pub(crate) evict: CancellationToken,
}

/// Why a connection that is not busy is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// Its request head did not arrive in time.
    Header,
    /// No request came for the idle timeout.
    Idle,
}

impl Tracker {
    fn new() -> Self {
        let now = Instant::now();
        let state = State { in_flight: 0, head_started: Some(now), idle_since: now };
        Self { state: Mutex::new(state), changed: Notify::new(), evict: CancellationToken::new() }
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut lock(&self.state));
        self.changed.notify_waiters();
    }

    /// The first request head is due from now (after the TLS handshake).
    pub(crate) fn waiting_for_head(&self) {
        self.update(|s| s.head_started = Some(Instant::now()));
    }

    /// Bytes arrived: if no request is in flight, a request head has begun.
    fn bytes_read(&self) {
        let mut s = lock(&self.state);
        if s.in_flight == 0 && s.head_started.is_none() {
            s.head_started = Some(Instant::now());
            drop(s);
            self.changed.notify_waiters();
        }
    }

    /// A request head is complete: the connection is busy until the guard (which goes
    /// with the response body) is dropped.
    pub(crate) fn begin(self: &Arc<Self>) -> InFlight {
        self.update(|s| {
            s.in_flight += 1;
            s.head_started = None;
        });
        InFlight(self.clone())
    }

    /// Resolves when the connection has been neither busy nor sent a complete head for
    /// too long.
    pub(crate) async fn expired(&self, limits: &ConnectionLimits) -> Expiry {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let s = lock(&self.state);
                if s.in_flight > 0 {
                    None
                } else if let Some(started) = s.head_started {
                    Some((started + limits.header_read_timeout, Expiry::Header))
                } else {
                    Some((s.idle_since + limits.idle_timeout, Expiry::Idle))
                }
            };
            match deadline {
                None => notified.await,
                Some((at, why)) => tokio::select! {
                    () = tokio::time::sleep_until(at) => return why,
                    () = notified => {}
                },
            }
        }
    }
}

/// A request in flight; dropped with its response body.
pub(crate) struct InFlight(Arc<Tracker>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.update(|s| {
            s.in_flight = s.in_flight.saturating_sub(1);
            if s.in_flight == 0 {
                s.idle_since = Instant::now();
            }
        });
    }
}

/// A response body that keeps its request counted as in flight until it is dropped.
pub(crate) struct TrackedBody {
    pub(crate) body: Body,
    pub(crate) _request: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A connection's byte stream, telling its tracker when bytes arrive.
pub(crate) struct Watched<I> {
    pub(crate) io: I,
    pub(crate) tracker: Arc<Tracker>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.tracker.bytes_read();
        }
        polled
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The lock, even if a holder panicked (the state stays consistent: every update is
/// one assignment).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
