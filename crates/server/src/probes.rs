//! `/livez`, `/readyz` and `/metrics` of a process that serves no API: a worker
//! (`fleetsync worker --listen`) and an agent (`fleetsync agent --listen`). The same
//! answers as the hub's: `/livez` is 200 while the process serves requests, `/readyz`
//! is 200 or 503 by the process's own check, `/metrics` is its registry in the classic
//! text format or OpenMetrics ([`crate::metrics::text`]).
//!
//! Like the hub's probes and (by default) its `/metrics`, these need no credential:
//! they say nothing about tenants' objects. Bind them where only the kubelet and
//! Prometheus reach them (the pod's address, not a public one).

use crate::metrics::text;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use fleetsync_api::Health;
use futures_util::future::BoxFuture;
use prometheus_client::registry::Registry;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// A process's readiness: `Err` says why it is not ready (the probe answers 503); the
/// check logs the cause where there is more to say than the answer.
pub type ReadyCheck = Arc<dyn Fn() -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

#[derive(Clone)]
struct Probes {
    registry: Arc<Registry>,
    ready: ReadyCheck,
}

/// Serves the probes and `registry` on `listener` until `shutdown` completes.
pub async fn serve_probes(
    listener: TcpListener,
    registry: Arc<Registry>,
    ready: ReadyCheck,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    crate::serve_router(listener, router(registry, ready), None, shutdown).await
}

fn router(registry: Arc<Registry>, ready: ReadyCheck) -> Router {
    Router::new()
        .route("/livez", get(|| async { Json(Health { status: "ok".into(), error: None }) }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .with_state(Probes { registry, ready })
}

async fn readyz(State(p): State<Probes>) -> (StatusCode, Json<Health>) {
    match (p.ready)().await {
        Ok(()) => (StatusCode::OK, Json(Health { status: "ok".into(), error: None })),
        // The check logged its own cause.
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, Json(Health { status: "unavailable".into(), error: Some(why) })),
    }
}

async fn metrics(State(p): State<Probes>, headers: HeaderMap) -> Response {
    match text::encode(&p.registry, headers.get(header::ACCEPT).and_then(|v| v.to_str().ok())) {
        Ok(answer) => answer.into_response(),
        Err(e) => {
            tracing::error!(error = %e, "encoding metrics");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use std::sync::atomic::{AtomicBool, Ordering};

    async fn get(url: &str, accept: Option<&str>) -> (u16, String, String) {
        let mut req = reqwest::Client::new().get(url);
        if let Some(a) = accept {
            req = req.header("accept", a);
        }
        let r = req.send().await.expect("answer");
        let kind = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        (r.status().as_u16(), kind, r.text().await.expect("body"))
    }

    /// Liveness, the process's own readiness as it changes, and its registry in both formats.
    #[tokio::test]
    async fn probes_answer_by_the_process_own_check() {
        let mut registry = Registry::default();
        let runs = Counter::<u64>::default();
        runs.inc_by(3);
        registry.register("fleetsync_test_runs", "Runs", runs);
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        let check: ReadyCheck = Arc::new(move || {
            let ok = flag.load(Ordering::SeqCst);
            Box::pin(async move {
                if ok {
                    Ok(())
                } else {
                    Err("the target has not been listed yet".into())
                }
            })
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let stop = tokio_util::sync::CancellationToken::new();
        let server = tokio::spawn(serve_probes(listener, Arc::new(registry), check, stop.clone().cancelled_owned()));

        assert_eq!(get(&format!("{base}/livez"), None).await.0, 200);
        let (status, _, body) = get(&format!("{base}/readyz"), None).await;
        assert_eq!(status, 503);
        assert!(body.contains("the target has not been listed yet"), "{body}");
        ready.store(true, Ordering::SeqCst);
        assert_eq!(get(&format!("{base}/readyz"), None).await.0, 200);

        let (status, kind, body) = get(&format!("{base}/metrics"), Some("text/plain;version=0.0.4")).await;
        assert_eq!((status, kind.as_str()), (200, text::CLASSIC));
        assert!(
            body.contains("# TYPE fleetsync_test_runs_total counter\n")
                && body.contains("fleetsync_test_runs_total 3\n"),
            "{body}"
        );
        let (_, kind, body) = get(&format!("{base}/metrics"), Some("application/openmetrics-text")).await;
        assert_eq!(kind, text::OPEN_METRICS);
        assert!(body.ends_with("# EOF\n"), "{body}");
        stop.cancel();
        server.await.expect("joined").expect("served");
    }
}
