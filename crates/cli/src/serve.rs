//! `fleetsync serve`: its flags made into a [`Hub`] (the HTTP API, the workers, the
//! event log's trimming, the Kubernetes source) on the store they name, run until
//! SIGINT or SIGTERM.

use crate::args::{KubeSourceArgs, RetentionArgs, ServeArgs, ServeLimitsArgs, ServeTlsArgs};
use crate::engine::{appliers, check_fail_rate, egress_policy, runtime_config, sources, store_config};
use crate::stores::{describe, open_store};
use anyhow::{Context, Result};
use fleetsync_hub::{ConnectionLimits, EventTrim, Hub, TlsConfig, WatchLimits};
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_kube_source::{Credentials, KubeSource, SourceConfig, StoreReconciler};
use fleetsync_store::{EventRetention, Store};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub async fn run(a: ServeArgs) -> Result<()> {
    let runtime_cfg = runtime_config(&a.engine)?;
    let egress = egress_policy(&a.engine)?;
    let trim = event_trim(&a.retention)?;
    let sim = SimFleetConfig { fail_rate: check_fail_rate(a.sim_fail_rate)?, ..SimFleetConfig::default() };
    let store = open_store(&a.store, store_config(&a.engine)?).await?;
    let shutdown = CancellationToken::new();
    let access = crate::access::settings(&a.access, shutdown.clone()).await?;
    let source = kube_source(&a.kube_source, &store).await?;
    let tls = tls_config(&a.tls)?;
    let (connections, watches) = serve_limits(&a.limits)?;
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .with_context(|| format!("cannot listen on {} (is the port in use? set --listen)", a.listen))?;
    // Only a hub that listens issues its first token: one that cannot start leaves none.
    if a.store.pg.database_url.is_none() {
        crate::access::bootstrap(store.as_ref(), &a.store.db).await?;
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let url = format!("{scheme}://{}", listener.local_addr()?);
    tracing::info!(%url, store = %describe(&a.store), "fleetsync hub serving {scheme}");

    let sources = sources(&a.engine, egress.clone());
    let mut hub = Hub::new(store.clone(), appliers(SimFleet::new(sim), store, egress), runtime_cfg)
        .sources(sources)
        .api(listener)
        .event_trim(trim);
    hub = hub.connection_limits(connections).watch_limits(watches);
    if let Some(tls) = tls {
        hub = hub.api_tls(tls);
    }
    if let Some(source) = source {
        hub = hub.kube_source(source);
    }
    tokio::spawn(stop_on_signal(shutdown.clone()));
    hub.access(access).quotas(a.quotas.quotas()).stale_after(a.stale_after).run(shutdown).await?;
    tracing::info!("stopped");
    Ok(())
}

/// The Kubernetes source, if `--kube-source-url`, `--kube-source` or
/// `--kube-source-context` is given: it writes the hub cluster's custom resources
/// into `store` and their status back.
async fn kube_source(a: &KubeSourceArgs, store: &Arc<dyn Store>) -> Result<Option<KubeSource>> {
    let client = match (&a.kube_source_url, a.kube_source || a.kube_source_context.is_some()) {
        (Some(url), _) => {
            tracing::info!(url, "watching SyncSet and Cluster custom resources in the hub cluster");
            fleetsync_kube_source::client_for(url).context("--kube-source-url")?
        }
        (None, true) => {
            let credentials = Credentials { kubeconfig: None, context: a.kube_source_context.clone() };
            let client = fleetsync_kube_source::client_inferred(&credentials).await.context("--kube-source")?;
            tracing::info!(context = ?a.kube_source_context, "watching SyncSet and Cluster custom resources in the hub cluster");
            client
        }
        (None, false) => return Ok(None),
    };
    if a.kube_source_own_write_timeout.is_zero() {
        anyhow::bail!("--kube-source-own-write-timeout must be above zero");
    }
    let config = SourceConfig {
        namespace: a.kube_source_namespace.clone(),
        own_write_timeout: a.kube_source_own_write_timeout,
        ..SourceConfig::default()
    };
    Ok(Some(KubeSource::new(client, Arc::new(StoreReconciler::new(store.clone()))).config(config)))
}

/// https for the API, if --tls-cert-file (and its key) are given. The flags' parser
/// already refuses one of the pair without the other.
fn tls_config(a: &ServeTlsArgs) -> Result<Option<TlsConfig>> {
    let (Some(cert), Some(key)) = (&a.tls_cert_file, &a.tls_private_key_file) else {
        if a.client_ca_file.is_some() {
            anyhow::bail!("--client-ca-file needs --tls-cert-file and --tls-private-key-file");
        }
        return Ok(None);
    };
    if a.tls_reload_interval.is_zero() {
        anyhow::bail!("--tls-reload-interval must be above zero");
    }
    Ok(Some(TlsConfig {
        client_ca_file: a.client_ca_file.clone(),
        reload_every: a.tls_reload_interval,
        ..TlsConfig::new(cert, key)
    }))
}

/// The API's connection and watch limits from the flags.
fn serve_limits(a: &ServeLimitsArgs) -> Result<(ConnectionLimits, WatchLimits)> {
    let watch_flags = [
        ("--max-watches-per-identity", a.max_watches_per_identity),
        ("--max-watches-per-tenant", a.max_watches_per_tenant),
    ];
    for (flag, value) in
        [("--max-connections", a.max_connections), ("--max-watches", a.max_watches)].into_iter().chain(watch_flags)
    {
        if value == 0 {
            anyhow::bail!("{flag} must be above zero");
        }
    }
    for (flag, value) in [
        ("--header-read-timeout", a.header_read_timeout),
        ("--idle-timeout", a.idle_timeout),
        ("--body-read-timeout", a.body_read_timeout),
    ] {
        if value.is_zero() {
            anyhow::bail!("{flag} must be above zero");
        }
    }
    let connections = ConnectionLimits {
        max_connections: a.max_connections,
        header_read_timeout: a.header_read_timeout,
        idle_timeout: a.idle_timeout,
        body_read_timeout: a.body_read_timeout,
    };
    let watches = WatchLimits {
        max_watches: a.max_watches,
        max_per_identity: a.max_watches_per_identity,
        max_per_tenant: a.max_watches_per_tenant,
    };
    Ok((connections, watches))
}

/// The event log's retention and trim interval from the flags ("0" lifts a bound).
fn event_trim(a: &RetentionArgs) -> Result<EventTrim> {
    let keep = EventRetention {
        max_events: (a.event_retention_count > 0).then_some(a.event_retention_count),
        max_age: (!a.event_retention_age.is_zero()).then_some(a.event_retention_age),
    };
    EventTrim::new(keep, a.event_trim_every).context("--event-trim-every")
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
    use std::time::Duration;

    fn flags(count: u64, age: &str, every: &str) -> RetentionArgs {
        let d = |s: &str| humantime::parse_duration(s).expect("duration");
        RetentionArgs { event_retention_count: count, event_retention_age: d(age), event_trim_every: d(every) }
    }

    #[test]
    fn retention_flags_map_zero_to_no_bound() {
        let both = event_trim(&flags(1_000_000, "7d", "1m")).expect("valid");
        assert_eq!(both.keep().max_events, Some(1_000_000));
        assert_eq!(both.keep().max_age, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(both.every(), Duration::from_secs(60));
        let by_age = event_trim(&flags(0, "1h", "1m")).expect("valid");
        assert_eq!((by_age.keep().max_events, by_age.keep().max_age), (None, Some(Duration::from_secs(3_600))));
        assert!(!event_trim(&flags(0, "0s", "1m")).expect("valid").bounded(), "unbounded: no trimming");
        assert!(event_trim(&flags(5, "0s", "0s")).is_err(), "trimming every 0 s");
    }
}
