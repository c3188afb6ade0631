//! A target: a Kubernetes cluster or any endpoint an applier can reach.

use crate::document::ObjectMeta;
use crate::template::Values;
use serde::{Deserialize, Serialize};

/// A Cluster document (`kind: Cluster`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub metadata: ObjectMeta,
    pub spec: ClusterSpec,
}

#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterSpec {
    /// How to reach the cluster.
    pub endpoint: Endpoint,
    /// Values of this cluster's own, seen by templated SyncSets as `cluster.values`.
    #[serde(default, skip_serializing_if = "Values::is_empty")]
    pub values: Values,
}

/// How a cluster is reached. Exactly one variant is given.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// A spec reaching the cluster through `endpoint`.
    pub fn new(endpoint: Endpoint) -> Self {
        Self { endpoint, values: Values::default() }
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
