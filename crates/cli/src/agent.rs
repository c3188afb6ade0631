//! `fleetsync agent`: the command line's flags to the agent library's
//! [`Config`](fleetsync_agent::Config), then the agent ([`fleetsync_agent::run`]).
//! Without `--target`, the agent reads the cluster it runs in ([`InCluster`]).

use crate::args::{AgentArgs, AgentTlsArgs};
use anyhow::Context;
use fleetsync_agent::InCluster;
use fleetsync_api::ClientTls;

pub async fn run(a: AgentArgs) -> anyhow::Result<()> {
    let (hub_tls, mut target_tls) = tls(&a.tls);
    let mut target_token_file = a.tls.target_token_file;
    let target = match a.target {
        Some(url) => url,
        None => {
            // In a pod: its cluster's API server, CA and service-account token (flags
            // given for the CA or the token still win).
            let pod = InCluster::from_env().context("--target")?;
            target_tls.ca_file = target_tls.ca_file.or(Some(pod.ca_file));
            target_token_file = target_token_file.or(Some(pod.token_file));
            pod.url
        }
    };
    let config = fleetsync_agent::Config {
        hub: a.hub,
        hub_tls,
        tenant: a.tenant,
        cluster: a.cluster,
        token_file: a.token_file,
        target,
        target_tls,
        target_token_file,
        relist_interval: a.relist_interval,
        resources_interval: a.resources_interval,
        batch: a.batch,
        backoff_base: a.backoff_base,
        backoff_cap: a.backoff_cap,
        request_timeout: a.request_timeout,
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
