//! Serving a router on a listener, over plain http or over https ([`ServerTls`]),
//! until a shutdown signal, then draining for at most [`SHUTDOWN_GRACE`].

use crate::tls::{client_identity, ServerTls};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::{Future, IntoFuture};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tower::ServiceExt;

/// How long requests in flight may take to finish once shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a client may take over the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` (over https if `tls` is given) until `shutdown`
/// completes; then stops accepting and lets requests in flight finish, for at most
/// [`SHUTDOWN_GRACE`], before closing their connections.
///
/// Over https the certificate is re-read as [`ServerTls`] describes, and a verified
/// client certificate's subject is put into each request's extensions as a
/// [`ClientIdentity`](crate::tls::ClientIdentity).
pub async fn serve_router(
    listener: TcpListener,
    app: Router,
    tls: Option<ServerTls>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    match tls {
        None => serve_http(listener, app, shutdown).await,
        Some(tls) => {
            serve_https(listener, app, tls, shutdown).await;
            Ok(())
        }
    }
}

async fn serve_http(listener: TcpListener, app: Router, shutdown: impl Future<Output = ()> + Send + 'static) -> std::io::Result<()> {
    let (stopping_tx, stopping) = tokio::sync::oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = stopping_tx.send(());
    };
    let server = axum::serve(listener, app).with_graceful_shutdown(signal).into_future();
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => return r,
        _ = stopping => {}
    }
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(r) => r,
        Err(_) => {
            grace_over();
            Ok(())
        }
    }
}

fn grace_over() {
    tracing::warn!(grace = ?SHUTDOWN_GRACE, "requests still in flight after the grace period: closing their connections");
}

/// Aborts the task when dropped (the reload loop lives as long as the server).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn serve_https(listener: TcpListener, app: Router, tls: ServerTls, shutdown: impl Future<Output = ()> + Send + 'static) {
    let _reload = AbortOnDrop(tokio::spawn(tls.clone().reload_loop()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    connections.spawn(connection(tcp, tls.clone(), app.clone(), stop_rx.clone()));
                }
                Err(e) => {
                    // As axum does: a failed accept (out of file descriptors, a reset
                    // before accept) is not the end of the server.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(SHUTDOWN_GRACE, drained).await.is_err() {
        grace_over();
    }
}

/// Resolves once shutdown has begun.
async fn stopping(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// One https connection: the handshake, then its requests until the client closes it
/// or shutdown begins (then the request in flight finishes first).
async fn connection(tcp: TcpStream, tls: ServerTls, app: Router, stop: watch::Receiver<bool>) {
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
        () = stopping(stop.clone()) => return,
    };
    let identity = client_identity(stream.get_ref().1.peer_certificates());
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        if let Some(identity) = &identity {
            request.extensions_mut().insert(identity.clone());
        }
        app.clone().oneshot(request)
    });
    let conn = hyper::server::conn::http1::Builder::new().timer(TokioTimer::new()).serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        }
        () = stopping(stop) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}
