//! The store as the Kubernetes applier's source of Secrets: the applier crate knows
//! nothing of stores, so the glue lives here, beside the rest of what joins them.

use async_trait::async_trait;
use fleetsync_applier::kubeconfig::{CredentialsError, SecretSource};
use fleetsync_model::Secret;
use fleetsync_store::Objects;
use std::sync::Arc;

/// Reads the Secrets that `kubeconfig` endpoints name from the store.
pub struct StoreSecrets(pub Arc<dyn Objects>);

#[async_trait]
impl SecretSource for StoreSecrets {
    async fn secret(&self, tenant: &str, name: &str) -> Result<Option<Secret>, CredentialsError> {
        self.0.secret_get(tenant, name).await.map_err(|e| CredentialsError::Source(Box::new(e)))
    }
}
