//! A target: a Kubernetes cluster or any endpoint an applier can reach.

use crate::document::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A Cluster document (`kind: Cluster`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub metadata: ObjectMeta,
    pub spec: ClusterSpec,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// How to reach the cluster.
    pub endpoint: Endpoint,
    /// Lets a `fleetsync agent` running beside the cluster report its live state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentSpec>,
}

/// How the agent of a cluster authenticates: a bearer token kept in a fleetsync
/// Secret (never in the Cluster, which is shown to anyone who can list clusters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentSpec {
    /// The Secret (same tenant) whose [`AGENT_TOKEN_KEY`] value is the agent's token.
    pub token_secret_ref: String,
}

/// The key of the Secret named by `spec.agent.tokenSecretRef` that holds the token.
pub const AGENT_TOKEN_KEY: &str = "token";

/// How a cluster is reached. Exactly one variant is given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Endpoint {
    /// The built-in simulated fleet (an in-process target; for demos, tests and
    /// benchmarks).
    Simulator {},
    /// An HTTP endpoint speaking the Kubernetes API, e.g. `fleetsync sim`.
    Http { url: String },
    /// A kubeconfig stored in fleetsync, by the name of the secret that holds it.
    Kubeconfig {
        #[serde(rename = "secretRef")]
        secret_ref: String,
    },
    /// The cluster fleetsync itself runs in, through its pod's service account
    /// (`KUBERNETES_SERVICE_HOST` and the mounted token and CA).
    InCluster {},
}

impl ClusterSpec {
    /// A spec reaching the cluster through `endpoint`, without an agent.
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint, agent: None }
    }
}

impl Endpoint {
    /// The variant's name as written in YAML, for messages.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Endpoint::Simulator {} => "simulator",
            Endpoint::Http { .. } => "http",
            Endpoint::Kubeconfig { .. } => "kubeconfig",
            Endpoint::InCluster {} => "inCluster",
        }
    }
}
