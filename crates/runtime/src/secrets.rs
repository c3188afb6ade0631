//! The store as the Kubernetes applier's source of Secrets: the applier crate knows
//! nothing of stores, so the glue lives here, beside the rest of what joins them.

use async_trait::async_trait;
use fleetsync_applier::kubeconfig::Credentials;
use fleetsync_model::Secret;
use fleetsync_store::Objects;
use std::sync::Arc;

/// Reads the Secrets that `kubeconfig` endpoints name from the store.
pub struct StoreSecrets(pub Arc<dyn Objects>);

#[async_trait]
impl Credentials for StoreSecrets {
    async fn secret(&self, tenant: &str, name: &str) -> Result<Option<Secret>, String> {
        self.0.secret_get(tenant, name).await.map_err(|e| e.to_string())
    }
}
