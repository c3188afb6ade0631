//! The cluster the agent runs beside, read through its Kubernetes API: discovery
//! (the plural name of each kind) and lists of the kinds fleetsync applied.
//!
//! Each kind is listed across all namespaces in one request, so one look at the
//! cluster costs one request per kind, whatever the number of objects.

use super::hub::describe;
use fleetsync_model::ResourceRef;
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

/// What one list of a kind found: each object by (namespace, name), and the
/// collection's version (the version a deletion is reported at).
#[derive(Debug, Default)]
pub struct Listing {
    pub objects: HashMap<(Option<String>, String), Value>,
    pub resource_version: String,
}

/// The target's API.
#[derive(Debug)]
pub struct Target {
    http: reqwest::Client,
    base: String,
    /// `(apiVersion, kind)` → the collection's path, from discovery.
    paths: HashMap<(String, String), String>,
}

impl Target {
    pub fn new(base: &str, timeout: Duration) -> anyhow::Result<Target> {
        let http = reqwest::Client::builder().timeout(timeout).build()?;
        Ok(Target { http, base: base.trim_end_matches('/').to_string(), paths: HashMap::new() })
    }

    /// Lists every object of `r`'s kind (in all namespaces).
    pub async fn list(&mut self, r: &ResourceRef) -> Result<Listing, String> {
        let path = self.collection(&r.api_version, &r.kind).await?;
        let list = self.get(&path).await?;
        let resource_version = list["metadata"]["resourceVersion"].as_str().unwrap_or("0").to_string();
        let mut objects = HashMap::new();
        for item in list["items"].as_array().into_iter().flatten() {
            let meta = &item["metadata"];
            let namespace = meta["namespace"].as_str().map(str::to_string);
            if let Some(name) = meta["name"].as_str() {
                objects.insert((namespace, name.to_string()), item.clone());
            }
        }
        Ok(Listing { objects, resource_version })
    }

    /// The path of a kind's collection across namespaces, found by discovery once.
    async fn collection(&mut self, api_version: &str, kind: &str) -> Result<String, String> {
        let id = (api_version.to_string(), kind.to_string());
        if let Some(p) = self.paths.get(&id) {
            return Ok(p.clone());
        }
        let prefix = if api_version.contains('/') { format!("/apis/{api_version}") } else { format!("/api/{api_version}") };
        let resources = self.get(&prefix).await?;
        let plural = resources["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["kind"] == kind && r["name"].as_str().is_some_and(|n| !n.contains('/')))
            .and_then(|r| r["name"].as_str())
            .ok_or_else(|| format!("the target serves no kind {kind} in {api_version}"))?;
        let path = format!("{prefix}/{plural}");
        self.paths.insert(id, path.clone());
        Ok(path)
    }

    async fn get(&self, path: &str) -> Result<Value, String> {
        let url = format!("{}{path}", self.base);
        let resp = self.http.get(&url).send().await.map_err(|e| format!("GET {url}: {}", describe(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(format!("GET {url}: {status}: {}", body.chars().take(200).collect::<String>()));
        }
        resp.json().await.map_err(|e| format!("GET {url}: reading the answer: {}", describe(&e)))
    }
}
