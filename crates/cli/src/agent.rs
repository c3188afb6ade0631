//! `fleetsync agent`: the command line's flags to the agent library's
//! [`Config`](fleetsync_agent::Config), then the agent ([`fleetsync_agent::run`]).
//! Without `--target`, the agent finds its cluster as kubectl does (`--kubeconfig`,
//! `--context`, else KUBECONFIG or ~/.kube/config, else the pod's service account). With
//! `--listen`, it serves its probes and metrics there.

use crate::args::{AgentArgs, AgentTlsArgs};
use anyhow::Context;
use fleetsync_agent::{AgentMetrics, Credentials, TargetSource};
use fleetsync_api::ClientTls;
use fleetsync_server::metrics::process::ProcessCollector;
use fleetsync_server::probes::{serve_probes, ReadyCheck};
use prometheus_client::registry::Registry;
use std::sync::Arc;

pub async fn run(a: AgentArgs) -> anyhow::Result<()> {
    let (hub_tls, target_tls) = tls(&a.tls);
    let target = match a.target {
        Some(url) => TargetSource::Url { url, tls: target_tls, token_file: a.tls.target_token_file },
        None => TargetSource::Found(Credentials { kubeconfig: a.kubeconfig, context: a.context }),
    };
    let mut registry = Registry::default();
    ProcessCollector::register(&mut registry);
    let metrics = AgentMetrics::register(&mut registry);
    if let Some(listen) = &a.listen {
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("cannot listen on {listen} (is the port in use? set --listen)"))?;
        tracing::info!(url = %format!("http://{}", listener.local_addr()?), "serving /livez, /readyz and /metrics");
        let m = metrics.clone();
        let ready: ReadyCheck = Arc::new(move || {
            let ok = m.hub_reachable();
            Box::pin(async move {
                if ok {
                    Ok(())
                } else {
                    Err("the agent's last exchange with the hub failed (or none yet)".into())
                }
            })
        });
        tokio::spawn(serve_probes(listener, Arc::new(registry), ready, std::future::pending()));
    }
    let config = fleetsync_agent::Config {
        hub: a.hub,
        hub_tls,
        tenant: a.tenant,
        cluster: a.cluster,
        token_file: a.token_file,
        target,
        relist_interval: a.relist_interval,
        resources_interval: a.resources_interval,
        batch: a.batch,
        backoff_base: a.backoff_base,
        backoff_cap: a.backoff_cap,
        request_timeout: a.request_timeout,
        metrics,
    };
    Ok(fleetsync_agent::run(config).await?)
}

/// How the agent speaks https to the hub, and to the target.
fn tls(a: &AgentTlsArgs) -> (ClientTls, ClientTls) {
    let hub = ClientTls {
        ca_file: a.certificate_authority.clone(),
        insecure_skip_verify: a.insecure_skip_tls_verify,
        client_cert: a.client_certificate.clone().zip(a.client_key.clone()),
    };
    let target = ClientTls {
        ca_file: a.target_certificate_authority.clone(),
        insecure_skip_verify: a.target_insecure_skip_tls_verify,
        client_cert: None,
    };
    (hub, target)
}
