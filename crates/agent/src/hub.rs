//! The hub, as one cluster's agent talks to it: what to watch, and sending reports,
//! through the API's client with the cluster's token.

use fleetsync_api::{Ack, Client, ClientBuildError, ClientError, ClientTls};
use fleetsync_model::{LiveReport, ReportBatch, ResourceRef};
use reqwest::StatusCode;
use std::time::Duration;

/// The hub, for the agent of one cluster.
#[derive(Debug, Clone)]
pub struct Hub {
    client: Client,
    tenant: String,
    cluster: String,
}

impl Hub {
    /// The hub at `url` (http or https, as `tls` says), as the agent of `cluster`
    /// with its `token`.
    pub fn new(
        url: &str,
        tls: &ClientTls,
        token: String,
        tenant: &str,
        cluster: &str,
        timeout: Duration,
    ) -> Result<Hub, ClientBuildError> {
        let client = Client::build(url, tls, Some(timeout))?.with_token(token);
        Ok(Hub { client, tenant: tenant.into(), cluster: cluster.into() })
    }

    /// The resources fleetsync applies to this cluster.
    pub async fn resources(&self) -> Result<Vec<ResourceRef>, ClientError> {
        self.client.agent_resources(&self.tenant, &self.cluster).await
    }

    /// Sends a batch; returns the acknowledgements, which the hub gives only once
    /// it has persisted the batch.
    pub async fn send(&self, reports: Vec<LiveReport>) -> Result<Vec<Ack>, ClientError> {
        let batch = ReportBatch { tenant: self.tenant.clone(), cluster: self.cluster.clone(), reports };
        Ok(self.client.agent_report(&batch).await?.items)
    }
}

/// Whether the hub refused the agent's credentials (401, 403): trying again cannot
/// help. Every other failure (the hub down, restarting, or refusing one request) is
/// tried again.
pub fn is_fatal(e: &ClientError) -> bool {
    matches!(e.status(), Some(StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refused_credentials_end_the_agent() {
        let refused = |status| ClientError::Refused { status, message: "no".into() };
        assert!(is_fatal(&refused(StatusCode::UNAUTHORIZED)));
        assert!(is_fatal(&refused(StatusCode::FORBIDDEN)));
        for retried in [StatusCode::NOT_FOUND, StatusCode::UNPROCESSABLE_ENTITY, StatusCode::SERVICE_UNAVAILABLE] {
            assert!(!is_fatal(&refused(retried)), "{retried}");
        }
    }
}
