//! How the Kubernetes applier learns to reach a cluster: a URL, a kubeconfig kept in a
//! fleetsync Secret, or the service account of the pod it runs in.
//!
//! A stored kubeconfig must be self-contained: its certificates, keys and token are
//! embedded (`*-data`, `token`), because a hub must not read files of its own machine
//! on behalf of whoever can write a Secret, nor run commands (`exec` plugins,
//! `auth-provider`). Errors about a kubeconfig never quote it: a YAML parser's message
//! may show the line it choked on, which may be a token.

use crate::ApplyError;
use async_trait::async_trait;
use fleetsync_model::secret::KUBECONFIG_KEY;
use fleetsync_model::Secret;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Why a cluster's credentials cannot be had: the Secret could not be read, or its
/// kubeconfig asks for what a stored one may not do. Never quotes secret text.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// The source of Secrets (the store) failed; its error, which holds no secret text.
    #[error("{0}")]
    Source(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cluster {cluster:?} names a certificate-authority file: embed it as certificate-authority-data")]
    CertificateAuthorityFile { cluster: String },
    #[error("user {user:?} names a {field} file: embed the data instead (stored kubeconfigs may not read files)")]
    File { user: String, field: &'static str },
    #[error("user {user:?} uses an exec plugin or auth-provider, which a stored kubeconfig may not run: use a token or a client certificate")]
    Runs { user: String },
}

/// Where the applier reads Secrets from: the store, in a fleetsync process.
#[async_trait]
pub trait SecretSource: Send + Sync + 'static {
    /// The Secret, if it exists; `Err` says why it could not be read
    /// ([`CredentialsError::Source`], no secret text).
    async fn secret(&self, tenant: &str, name: &str) -> Result<Option<Secret>, CredentialsError>;
}

/// Reads the Secret a cluster names. A missing Secret is worth retrying (it may be
/// applied later, which also re-enqueues the cluster's keys).
pub(crate) async fn fetch(credentials: &dyn SecretSource, tenant: &str, name: &str) -> Result<Secret, ApplyError> {
    match credentials.secret(tenant, name).await {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(ApplyError::Unreachable(format!(
            "Secret {tenant}/{name} (spec.endpoint.kubeconfig.secretRef) does not exist: apply it"
        ))),
        Err(e) => Err(ApplyError::Transient(format!("reading Secret {tenant}/{name}: {e}"))),
    }
}

/// The client configuration in a Secret's `kubeconfig` key, checked as the module docs say.
pub(crate) async fn config_from_secret(secret: &Secret) -> Result<kube::Config, ApplyError> {
    let id = format!("Secret {}/{}", secret.metadata.namespace, secret.metadata.name);
    let text = secret
        .get(KUBECONFIG_KEY)
        .ok_or_else(|| ApplyError::Invalid(format!("{id} has no `{KUBECONFIG_KEY}` key in stringData")))?;
    let kubeconfig = Kubeconfig::from_yaml(text.expose()).map_err(|_| {
        ApplyError::Invalid(format!(
            "{id}: `{KUBECONFIG_KEY}` is not a valid kubeconfig (YAML with clusters, users and contexts)"
        ))
    })?;
    check_self_contained(&kubeconfig).map_err(|rule| ApplyError::Invalid(format!("{id}: {rule}")))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| ApplyError::Invalid(format!("{id}: {}", describe(&e))))
}

/// The service account of the pod this process runs in.
pub(crate) fn in_cluster_config() -> Result<kube::Config, ApplyError> {
    kube::Config::incluster().map_err(|e| {
        ApplyError::Unsupported(format!("inCluster endpoint, but this process is not running in a Kubernetes pod: {e}"))
    })
}

/// Refuses what a stored kubeconfig must not do: read local files or run commands.
fn check_self_contained(k: &Kubeconfig) -> Result<(), CredentialsError> {
    for c in &k.clusters {
        if c.cluster.as_ref().is_some_and(|c| c.certificate_authority.is_some()) {
            return Err(CredentialsError::CertificateAuthorityFile { cluster: c.name.clone() });
        }
    }
    for u in &k.auth_infos {
        let Some(a) = &u.auth_info else { continue };
        let file = [
            (&a.client_certificate, "client-certificate"),
            (&a.client_key, "client-key"),
            (&a.token_file, "tokenFile"),
        ]
        .into_iter()
        .find_map(|(v, field)| v.as_ref().map(|_| field));
        if let Some(field) = file {
            return Err(CredentialsError::File { user: u.name.clone(), field });
        }
        if a.exec.is_some() || a.auth_provider.is_some() {
            return Err(CredentialsError::Runs { user: u.name.clone() });
        }
    }
    Ok(())
}

/// A kubeconfig error in words that cannot carry secret material: names of contexts,
/// clusters and users are shown; parser messages and certificate contents are not.
fn describe(e: &KubeconfigError) -> String {
    match e {
        KubeconfigError::CurrentContextNotSet
        | KubeconfigError::LoadContext(_)
        | KubeconfigError::LoadClusterOfContext(_)
        | KubeconfigError::MissingClusterUrl
        | KubeconfigError::ParseClusterUrl(_) => e.to_string(),
        KubeconfigError::LoadCertificateAuthority(_) | KubeconfigError::ParseCertificates(_) => {
            "certificate-authority-data is not valid base64 PEM".into()
        }
        KubeconfigError::LoadClientCertificate(_) | KubeconfigError::LoadClientKey(_) => {
            "client-certificate-data or client-key-data is not valid base64 PEM".into()
        }
        _ => "the kubeconfig cannot be used (check its current-context, cluster server URL and user)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::{ObjectMeta, SecretValue};

    fn secret(kubeconfig: &str) -> Secret {
        let mut s = Secret { metadata: ObjectMeta::new("kc"), string_data: Default::default() };
        s.string_data.insert(KUBECONFIG_KEY.into(), SecretValue::new(kubeconfig));
        s
    }

    const GOOD: &str = "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1/x'}}]\nusers: [{name: u, user: {token: MARKER-tok}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n";

    #[tokio::test]
    async fn a_token_kubeconfig_is_read() {
        let config = config_from_secret(&secret(GOOD)).await.expect("valid");
        assert_eq!(config.cluster_url.to_string(), "http://127.0.0.1:1/x");
    }

    #[tokio::test]
    async fn errors_name_the_problem_but_never_quote_the_secret() {
        let cases = [
            ("MARKER-tok: [unclosed", "not a valid kubeconfig"),
            (
                &GOOD.replace(
                    "token: MARKER-tok",
                    "token: MARKER-tok, exec: {command: sh, apiVersion: client.authentication.k8s.io/v1}",
                ),
                "exec plugin",
            ),
            (&GOOD.replace("token: MARKER-tok", "token: MARKER-tok, tokenFile: /etc/passwd"), "tokenFile file"),
            (&GOOD.replace("current-context: c", "current-context: MARKER-nope"), "MARKER-nope"),
        ];
        for (text, expect) in cases {
            let err = config_from_secret(&secret(text)).await.expect_err(expect).to_string();
            assert!(err.contains(expect), "{err}");
            assert!(!err.contains("MARKER-tok"), "{err}");
        }
        let none = Secret { metadata: ObjectMeta::new("kc"), string_data: Default::default() };
        assert!(config_from_secret(&none).await.expect_err("no key").to_string().contains("no `kubeconfig` key"));
    }
}
