//! `fleetsync agent`: the hub it reports to, its target, and how it speaks https to both.

use clap::Args;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The hub's API.
    #[arg(long, env = "FLEETSYNC_AGENT_HUB")]
    pub hub: String,
    #[arg(long, env = "FLEETSYNC_AGENT_TENANT", default_value = "default")]
    pub tenant: String,
    /// The cluster this agent reports for (its token must be that cluster's).
    #[arg(long, env = "FLEETSYNC_AGENT_CLUSTER")]
    pub cluster: String,
    /// A file holding the cluster's agent credential (`fleetsync token create --agent
    /// --tenant T --cluster C`).
    #[arg(long, env = "FLEETSYNC_AGENT_TOKEN_FILE")]
    pub token_file: PathBuf,
    /// The cluster's Kubernetes API, e.g. http://HOST:PORT/clusters/NAME of `fleetsync sim`,
    /// with the --target-* flags. Without it, the agent finds its cluster as kubectl
    /// does: --kubeconfig (or KUBECONFIG, or ~/.kube/config), else the pod's service account.
    #[arg(long, env = "FLEETSYNC_AGENT_TARGET")]
    pub target: Option<String>,
    /// A kubeconfig naming the cluster and the agent's credentials there (its current
    /// context, or --context); default: KUBECONFIG, else ~/.kube/config, else the
    /// pod's service account.
    #[arg(long, env = "FLEETSYNC_AGENT_KUBECONFIG", conflicts_with = "target")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig's context to use (default: its current-context).
    #[arg(long, env = "FLEETSYNC_AGENT_CONTEXT", conflicts_with = "target")]
    pub context: Option<String>,
    /// How long one watch of a kind lasts before the agent lists the kind again in
    /// full (a safety net: changes arrive through the watch at once).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub relist_interval: Duration,
    /// How often the list of resources to watch is read from the hub again.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub resources_interval: Duration,
    /// Most reports in one request to the hub.
    #[arg(long, default_value_t = 1000)]
    pub batch: usize,
    /// The first wait before resending reports the hub did not acknowledge (doubles
    /// with each failure, up to --backoff-cap).
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub backoff_base: Duration,
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub backoff_cap: Duration,
    /// How long one request (to the hub or the target) may take.
    #[arg(long, env = "FLEETSYNC_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,
    /// Where the agent serves /livez, /readyz (its last exchange with the hub
    /// succeeded) and /metrics, with no credential: bind the pod's address, not a
    /// public one. None unless given.
    #[arg(long, env = "FLEETSYNC_AGENT_LISTEN")]
    pub listen: Option<String>,
    #[command(flatten)]
    pub tls: AgentTlsArgs,
}

/// How `fleetsync agent` speaks https to the hub and to its target.
#[derive(Debug, Clone, Args)]
pub struct AgentTlsArgs {
    /// Trust only the CA certificates (PEM) in this file for the hub's certificate
    /// (default: the system's roots).
    #[arg(long, env = "FLEETSYNC_AGENT_CERTIFICATE_AUTHORITY")]
    pub certificate_authority: Option<PathBuf>,
    /// Do not verify the hub's certificate (insecure: anyone may pose as the hub).
    #[arg(long, env = "FLEETSYNC_AGENT_INSECURE_SKIP_TLS_VERIFY")]
    pub insecure_skip_tls_verify: bool,
    /// A client certificate (PEM) to present to the hub, with --client-key.
    #[arg(long, env = "FLEETSYNC_AGENT_CLIENT_CERTIFICATE", requires = "client_key")]
    pub client_certificate: Option<PathBuf>,
    /// The private key (PEM) of --client-certificate.
    #[arg(long, env = "FLEETSYNC_AGENT_CLIENT_KEY", requires = "client_certificate")]
    pub client_key: Option<PathBuf>,
    /// Trust only the CA certificates (PEM) in this file for the --target API server.
    #[arg(long, env = "FLEETSYNC_AGENT_TARGET_CERTIFICATE_AUTHORITY", requires = "target")]
    pub target_certificate_authority: Option<PathBuf>,
    /// Do not verify the --target API server's certificate (insecure).
    #[arg(long, env = "FLEETSYNC_AGENT_TARGET_INSECURE_SKIP_TLS_VERIFY", requires = "target")]
    pub target_insecure_skip_tls_verify: bool,
    /// A file holding a bearer token for the --target API server (e.g. a Kubernetes
    /// service-account token); read again each minute, so a rotated token is used.
    #[arg(long, env = "FLEETSYNC_AGENT_TARGET_TOKEN_FILE", requires = "target")]
    pub target_token_file: Option<PathBuf>,
}
