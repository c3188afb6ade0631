//! Serving a router on a listener, over plain http or over https ([`ServerTls`]),
//! until a shutdown signal, then draining for at most [`SHUTDOWN_GRACE`].
//!
//! Both use one loop with the same discipline ([`ConnectionLimits`]): a cap on open
//! connections, a deadline for each request head and one for idle keep-alive
//! connections. At the cap a new connection takes the slot of the connection that has
//! waited longest without a request in flight, so clients that open connections and
//! stall (slowloris) cannot keep `/healthz` or anyone else out; they are also closed
//! when their head's deadline passes.

use crate::conn::{ConnectionLimits, Connections, Expiry, Registered, TrackedBody, Watched};
use crate::extract::BodyDeadline;
use crate::tls::{client_identity, ClientIdentity, OverTls, ServerTls};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tower::ServiceExt;

/// How long requests in flight may take to finish once shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a client may take over the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What hyper buffers per connection, each way: it bounds a request head and what a
/// client that stops reading a stream makes the server hold (hyper's default is ~400 KiB).
const MAX_BUF: usize = 64 * 1024;

/// Serves `app` on `listener` (over https if `tls` is given) until `shutdown`
/// completes, with the default [`ConnectionLimits`]; see [`serve_router_with`].
pub async fn serve_router(
    listener: TcpListener,
    app: Router,
    tls: Option<ServerTls>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_router_with(listener, app, tls, ConnectionLimits::default(), shutdown).await
}

/// Serves `app` on `listener` (over https if `tls` is given) within `limits` until
/// `shutdown` completes; then stops accepting and lets requests in flight finish, for
/// at most [`SHUTDOWN_GRACE`], before closing their connections.
///
/// Over https the certificate is re-read as [`ServerTls`] describes, and a verified
/// client certificate's subject is put into each request's extensions as a
/// [`ClientIdentity`].
pub async fn serve_router_with(
    listener: TcpListener,
    app: Router,
    tls: Option<ServerTls>,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let _reload = tls.as_ref().map(|tls| AbortOnDrop(tokio::spawn(tls.clone().reload_loop())));
    let open = Arc::new(Connections::default());
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let tcp = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors, or a reset before accept: not the end of
                    // the server. Without descriptors, an idle connection makes room.
                    tracing::debug!(error = %e, "accept failed");
                    let pause = if open.evict_oldest_idle() { 5 } else { 50 };
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let permit = match slots.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                // At the cap: take an idle connection's slot, or wait for a busy one to end.
                if !open.evict_oldest_idle() {
                    tracing::debug!(
                        max = limits.max_connections,
                        "every connection has a request in flight: the new one waits"
                    );
                }
                tokio::select! {
                    () = &mut shutdown => break,
                    permit = slots.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                }
            }
        };
        let accepted = Accepted { registered: open.register(), _permit: permit, limits, stop: stop_rx.clone() };
        connections.spawn(accepted.run(tcp, tls.clone(), app.clone()));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
        tracing::warn!(grace = ?SHUTDOWN_GRACE, "requests still in flight after the grace period: closing their connections");
    }
    Ok(())
}

/// Aborts the task when dropped (the reload loop lives as long as the server).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Resolves once shutdown has begun.
async fn stopping(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// An accepted connection: its slot under the cap, its tracker, and the shutdown signal.
struct Accepted {
    registered: Registered,
    _permit: OwnedSemaphorePermit,
    limits: ConnectionLimits,
    stop: watch::Receiver<bool>,
}

impl Accepted {
    /// The TLS handshake if any, then the connection's requests until the client closes
    /// it, a deadline passes, the cap needs its slot, or shutdown begins (then the
    /// request in flight finishes first).
    async fn run(self, tcp: TcpStream, tls: Option<ServerTls>, app: Router) {
        // The client's address, for what is counted per client (dashboard sign-ins).
        let peer = tcp.peer_addr().ok();
        let Some(tls) = tls else {
            return self.serve(tcp, None, false, peer, app).await;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
        let handshake = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp));
        let stream = tokio::select! {
            r = handshake => match r {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!("TLS handshake timed out");
                    return;
                }
            },
            () = self.registered.tracker.evict.cancelled() => return,
            () = stopping(self.stop.clone()) => return,
        };
        let identity = client_identity(stream.get_ref().1.peer_certificates());
        self.serve(stream, identity, true, peer, app).await;
    }

    async fn serve<I>(
        self,
        io: I,
        identity: Option<ClientIdentity>,
        over_tls: bool,
        peer: Option<std::net::SocketAddr>,
        app: Router,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let tracker = self.registered.tracker.clone();
        tracker.waiting_for_head();
        let requests = tracker.clone();
        let body_read_timeout = self.limits.body_read_timeout;
        let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
            request.extensions_mut().insert(BodyDeadline::after(body_read_timeout));
            if let Some(identity) = &identity {
                request.extensions_mut().insert(identity.clone());
            }
            if over_tls {
                request.extensions_mut().insert(OverTls);
            }
            if let Some(peer) = peer {
                request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
            }
            let in_flight = requests.begin();
            let app = app.clone();
            async move {
                let response = app.oneshot(request).await?;
                Ok::<_, Infallible>(response.map(|body| TrackedBody { body, _request: in_flight }))
            }
        });
        let io = TokioIo::new(Watched { io, tracker: tracker.clone() });
        // The head and idle deadlines are kept here (hyper's own header timeout would
        // also run while a keep-alive connection is idle).
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(None)
            .max_buf_size(MAX_BUF)
            .serve_connection(io, service);
        tokio::pin!(conn);
        tokio::select! {
            r = conn.as_mut() => {
                if let Err(e) = r {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
            }
            expiry = tracker.expired(&self.limits) => match expiry {
                Expiry::Header => tracing::debug!(timeout = ?self.limits.header_read_timeout, "closing a connection: no complete request head in time"),
                Expiry::Idle => tracing::debug!(timeout = ?self.limits.idle_timeout, "closing an idle connection"),
            },
            () = tracker.evict.cancelled() => {
                tracing::debug!(max = self.limits.max_connections, "closing the longest-idle connection: the connection cap is reached");
            }
            () = stopping(self.stop.clone()) => {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        }
    }
}
