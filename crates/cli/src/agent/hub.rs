//! The agent's client of the hub: what to watch, and sending reports.

use fleetsync_model::{LiveReport, ReportBatch, ResourceRef};
use serde::Deserialize;
use std::time::Duration;

/// Why a request to the hub did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// The hub could not be reached or answered with a server error: try again.
    #[error("the hub at {url} is unavailable: {message}")]
    Unavailable { url: String, message: String },
    /// The hub refused the agent's credentials: trying again cannot help.
    #[error("the hub refused the agent ({status}): {message}")]
    Refused { status: u16, message: String },
    /// The hub refused the request itself (a bug or a version mismatch): logged, tried again.
    #[error("the hub rejected the request ({status}): {message}")]
    Rejected { status: u16, message: String },
}

impl HubError {
    /// Whether waiting and trying again may succeed.
    pub fn is_fatal(&self) -> bool {
        matches!(self, HubError::Refused { .. })
    }
}

/// One acknowledged report, as the hub answers.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ack {
    pub resource: ResourceRef,
    pub resource_version: String,
    pub result: String,
}

#[derive(Debug, Deserialize)]
struct Acks {
    items: Vec<Ack>,
}

#[derive(Debug, Deserialize)]
struct Resources {
    items: Vec<ResourceRef>,
}

/// The hub, as one cluster's agent talks to it.
#[derive(Debug, Clone)]
pub struct Hub {
    http: reqwest::Client,
    url: String,
    token: String,
    tenant: String,
    cluster: String,
}

impl Hub {
    pub fn new(url: &str, token: String, tenant: &str, cluster: &str, timeout: Duration) -> anyhow::Result<Hub> {
        let http = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Hub { http, url: url.trim_end_matches('/').to_string(), token, tenant: tenant.into(), cluster: cluster.into() })
    }

    /// The resources fleetsync applies to this cluster.
    pub async fn resources(&self) -> Result<Vec<ResourceRef>, HubError> {
        let req = self
            .http
            .get(format!("{}/v1/agent/resources", self.url))
            .query(&[("tenant", &self.tenant), ("cluster", &self.cluster)]);
        Ok(self.call::<Resources>(req).await?.items)
    }

    /// Sends a batch; returns the acknowledgements, which the hub gives only once
    /// it has persisted the batch.
    pub async fn send(&self, reports: Vec<LiveReport>) -> Result<Vec<Ack>, HubError> {
        let batch = ReportBatch { tenant: self.tenant.clone(), cluster: self.cluster.clone(), reports };
        let req = self.http.post(format!("{}/v1/agent/reports", self.url)).json(&batch);
        Ok(self.call::<Acks>(req).await?.items)
    }

    async fn call<T: serde::de::DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> Result<T, HubError> {
        let unavailable = |message: String| HubError::Unavailable { url: self.url.clone(), message };
        let resp = req.bearer_auth(&self.token).send().await.map_err(|e| unavailable(describe(&e)))?;
        let status = resp.status();
        if status.is_success() {
            return resp.json::<T>().await.map_err(|e| unavailable(format!("reading the answer: {}", describe(&e))));
        }
        let body: serde_json::Value = resp.json().await.unwrap_or_default();
        let message = body["error"].as_str().unwrap_or("no message").to_string();
        let code = status.as_u16();
        Err(match code {
            401 | 403 => HubError::Refused { status: code, message },
            _ if status.is_server_error() || code == 404 || code == 408 || code == 429 => {
                unavailable(format!("{status}: {message}"))
            }
            _ => HubError::Rejected { status: code, message },
        })
    }
}

/// An error with its causes (reqwest's own message leaves them out).
pub fn describe(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        s.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    s
}
