//! `fleetsync agent`: the command line's flags to the agent library's
//! [`Config`](fleetsync_agent::Config), then the agent ([`fleetsync_agent::run`]).

use crate::args::{AgentArgs, AgentTlsArgs};
use fleetsync_api::ClientTls;

pub async fn run(a: AgentArgs) -> anyhow::Result<()> {
    let (hub_tls, target_tls) = tls(&a.tls);
    let config = fleetsync_agent::Config {
        hub: a.hub,
        hub_tls,
        tenant: a.tenant,
        cluster: a.cluster,
        token_file: a.token_file,
        target: a.target,
        target_tls,
        target_token_file: a.tls.target_token_file,
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
