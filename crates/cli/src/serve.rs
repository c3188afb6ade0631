//! `fleetsync serve`: the HTTP API and the workers in one process, on the embedded
//! store, until SIGINT or SIGTERM.

use crate::args::{KubeSourceArgs, RetentionArgs, ServeArgs};
use crate::engine::{appliers, check_fail_rate, runtime_config, store_config};
use anyhow::{Context, Result};
use fleetsync_applier::sim::{SimConfig, SimFleet};
use fleetsync_kube_source::{KubeSource, SourceConfig, StoreReconciler};
use fleetsync_runtime::{Runtime, RuntimeMetrics};
use fleetsync_server::{AppState, QueueMetrics};
use fleetsync_store::{EventRetention, Store};
use crate::stores::{describe, open_store};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

pub async fn run(a: ServeArgs) -> Result<()> {
    let runtime_cfg = runtime_config(&a.engine)?;
    let retention = retention(&a.retention)?;
    let sim = SimConfig { fail_rate: check_fail_rate(a.sim_fail_rate)?, ..SimConfig::default() };
    let store = open_store(&a.store, store_config(&a.engine)?).await?;
    let source = kube_source(&a.kube_source, &store)?;
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
    let source = source.map(|source| tokio::spawn(source.run(shutdown.clone().cancelled_owned())));
    let trimmer = retention.map(|keep| tokio::spawn(trim_loop(store.clone(), keep, a.retention.event_trim_every, shutdown.clone())));
    tracing::info!(listen = %listener.local_addr()?, store = %describe(&a.store), "fleetsync hub serving");
    fleetsync_server::serve(listener, state, shutdown.clone().cancelled_owned()).await.context("the HTTP server failed")?;
    shutdown.cancel();
    workers.await.context("the workers panicked")??;
    if let Some(t) = trimmer {
        let _ = t.await;
    }
    if let Some(s) = source {
        let _ = s.await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// The Kubernetes source, if `--kube-source-url` is given: it writes the hub cluster's
/// custom resources into `store` and their keys' status back.
fn kube_source(a: &KubeSourceArgs, store: &Arc<dyn Store>) -> Result<Option<KubeSource>> {
    let Some(url) = &a.kube_source_url else { return Ok(None) };
    if a.kube_source_own_write_timeout.is_zero() {
        anyhow::bail!("--kube-source-own-write-timeout must be above zero");
    }
    let client = fleetsync_kube_source::client_for(url).context("--kube-source-url")?;
    let config = SourceConfig {
        namespace: a.kube_source_namespace.clone(),
        own_write_timeout: a.kube_source_own_write_timeout,
        ..SourceConfig::default()
    };
    tracing::info!(url, "watching SyncSet and Cluster custom resources in the hub cluster");
    Ok(Some(KubeSource::new(client, Arc::new(StoreReconciler::new(store.clone()))).config(config)))
}

/// The event log's retention from the flags; `None` if it is unbounded both ways.
fn retention(a: &RetentionArgs) -> Result<Option<EventRetention>> {
    if a.event_trim_every.is_zero() {
        anyhow::bail!("--event-trim-every must be above zero");
    }
    let keep = EventRetention {
        max_events: (a.event_retention_count > 0).then_some(a.event_retention_count),
        max_age: (!a.event_retention_age.is_zero()).then_some(a.event_retention_age),
    };
    Ok((keep != EventRetention::default()).then_some(keep))
}

/// Trims the event log now and then every `every`, until shutdown. Safe beside other
/// hubs doing the same on a shared PostgreSQL.
async fn trim_loop(store: Arc<dyn Store>, keep: EventRetention, every: Duration, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        match store.events_trim(keep).await {
            Ok(t) if t.deleted > 0 => tracing::info!(deleted = t.deleted, horizon = t.horizon, "trimmed the event log"),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "trimming the event log failed; trying again later"),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(count: u64, age: &str, every: &str) -> RetentionArgs {
        let d = |s: &str| humantime::parse_duration(s).expect("duration");
        RetentionArgs { event_retention_count: count, event_retention_age: d(age), event_trim_every: d(every) }
    }

    #[test]
    fn retention_flags_map_zero_to_no_bound() {
        let both = retention(&flags(1_000_000, "7d", "1m")).expect("valid").expect("bounded");
        assert_eq!(both.max_events, Some(1_000_000));
        assert_eq!(both.max_age, Some(Duration::from_secs(7 * 86_400)));
        let by_age = retention(&flags(0, "1h", "1m")).expect("valid").expect("bounded");
        assert_eq!((by_age.max_events, by_age.max_age), (None, Some(Duration::from_secs(3_600))));
        assert!(retention(&flags(0, "0s", "1m")).expect("valid").is_none(), "unbounded: no trimming");
        assert!(retention(&flags(5, "0s", "0s")).is_err(), "trimming every 0 s");
    }
}
