//! `fleetsync serve`: the HTTP API and the workers in one process, on the embedded
//! store, until SIGINT or SIGTERM.

use crate::args::ServeArgs;
use crate::engine::{appliers, check_fail_rate, runtime_config, store_config};
use anyhow::{Context, Result};
use fleetsync_applier::sim::{SimConfig, SimFleet};
use fleetsync_runtime::{Runtime, RuntimeMetrics};
use fleetsync_server::{AppState, QueueMetrics};
use crate::stores::{describe, open_store};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub async fn run(a: ServeArgs) -> Result<()> {
    let runtime_cfg = runtime_config(&a.engine)?;
    let sim = SimConfig { fail_rate: check_fail_rate(a.sim_fail_rate)?, ..SimConfig::default() };
    let store = open_store(&a.store, store_config(&a.engine)?).await?;
    let mut registry = Registry::default();
    let runtime_metrics = RuntimeMetrics::register(&mut registry);
    let queue_metrics = QueueMetrics::register(&mut registry);
    let state = AppState::new(store.clone(), Arc::new(registry), queue_metrics);
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .with_context(|| format!("cannot listen on {} (is the port in use? set --listen)", a.listen))?;

    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let runtime = Runtime::new(store.clone(), appliers(SimFleet::new(sim), store.clone()), runtime_cfg, runtime_metrics);
    let workers = tokio::spawn(runtime.run(shutdown.clone()));
    tracing::info!(listen = %listener.local_addr()?, store = %describe(&a.store), "fleetsync hub serving");
    fleetsync_server::serve(listener, state, shutdown.clone().cancelled_owned()).await.context("the HTTP server failed")?;
    shutdown.cancel();
    workers.await.context("the workers panicked")??;
    tracing::info!("stopped");
    Ok(())
}

/// Cancels `token` on SIGINT or SIGTERM.
pub async fn stop_on_signal(token: CancellationToken) {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
    tracing::info!("signal received: shutting down");
    token.cancel();
}
