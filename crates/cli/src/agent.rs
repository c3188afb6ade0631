//! `fleetsync agent`: the command line's flags to the agent library's
//! [`Config`](fleetsync_agent::Config), then the agent ([`fleetsync_agent::run`]).

use crate::args::AgentArgs;

pub async fn run(a: AgentArgs) -> anyhow::Result<()> {
    let config = fleetsync_agent::Config {
        hub: a.hub,
        tenant: a.tenant,
        cluster: a.cluster,
        token_file: a.token_file,
        target: a.target,
        relist_interval: a.relist_interval,
        resources_interval: a.resources_interval,
        batch: a.batch,
        backoff_base: a.backoff_base,
        backoff_cap: a.backoff_cap,
        request_timeout: a.request_timeout,
    };
    Ok(fleetsync_agent::run(config).await?)
}
