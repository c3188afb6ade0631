//! Where the agent finds its target's API and the credentials for it, as kubectl
//! finds them: `--target URL` with its flags, else a kubeconfig (`--kubeconfig`,
//! `--context`; else `KUBECONFIG` or `~/.kube/config`), else the service account of
//! the pod the agent runs in. Every way ends in a [`kube::Config`], which kube's
//! client speaks with (TLS, tokens and token files read again as they rotate, exec
//! plugins).

use fleetsync_api::ClientTls;
use fleetsync_kube_source::{ConnectError, Credentials};
use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext,
};
use std::path::{Path, PathBuf};

/// Where the agent's target is, and how the agent proves who it is there.
#[derive(Debug, Clone)]
pub enum TargetSource {
    /// `--target URL`: http or https, the CA to trust (`tls.ca_file`) or none
    /// (`tls.insecure_skip_verify`), a client certificate, a bearer token file.
    Url { url: String, tls: ClientTls, token_file: Option<PathBuf> },
    /// A kubeconfig and its context (`--kubeconfig`, `--context`); when neither is
    /// given, `KUBECONFIG` or `~/.kube/config`, else the pod's service account.
    Found(Credentials),
}

/// Why the agent has no client configuration for its target.
#[derive(Debug, thiserror::Error)]
pub enum TargetConfigError {
    /// No `--target`, no kubeconfig, not in a pod.
    #[error(
        "no target: give --target URL or --kubeconfig PATH (or set KUBECONFIG, or have ~/.kube/config), \
         or run in a pod with a service account"
    )]
    Missing(#[source] kube::config::InferConfigError),
    /// The kubeconfig (or its context) cannot be used.
    #[error("cannot use the kubeconfig {}{}", path.as_ref().map_or("(KUBECONFIG or ~/.kube/config)".into(), |p| p.display().to_string()), context.as_ref().map(|c| format!(" context {c:?}")).unwrap_or_default())]
    Kubeconfig {
        path: Option<PathBuf>,
        context: Option<String>,
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// `--target` and its flags make no client configuration (e.g. a URL that is not one).
    #[error("--target {url:?}")]
    Url {
        url: String,
        #[source]
        source: kube::config::KubeconfigError,
    },
    #[error("cannot find the target's credentials")]
    Other(#[source] ConnectError),
}

impl TargetSource {
    /// The client configuration of the target.
    pub async fn config(&self) -> Result<kube::Config, TargetConfigError> {
        match self {
            TargetSource::Url { url, tls, .. } => {
                let kubeconfig = url_kubeconfig(url, tls);
                kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                    .await
                    .map_err(|source| TargetConfigError::Url { url: url.clone(), source })
            }
            TargetSource::Found(credentials) => {
                fleetsync_kube_source::config_inferred(credentials).await.map_err(|e| match e {
                    ConnectError::Infer(source) => TargetConfigError::Missing(source),
                    ConnectError::Kubeconfig { context, source } => {
                        TargetConfigError::Kubeconfig { path: credentials.kubeconfig.clone(), context, source }
                    }
                    other => TargetConfigError::Other(other),
                })
            }
        }
    }
}

/// `--target` and its flags as a kubeconfig of one context.
/// The token file (`--target-token-file`) is not in it: the agent sends that token
/// itself (see `Target::new`).
fn url_kubeconfig(url: &str, tls: &ClientTls) -> Kubeconfig {
    const NAME: &str = "target";
    let path = |p: &Path| p.display().to_string();
    let cluster = Cluster {
        server: Some(url.to_string()),
        certificate_authority: tls.ca_file.as_deref().map(path),
        insecure_skip_tls_verify: tls.insecure_skip_verify.then_some(true),
        ..Cluster::default()
    };
    let user = AuthInfo {
        client_certificate: tls.client_cert.as_ref().map(|(cert, _)| path(cert)),
        client_key: tls.client_cert.as_ref().map(|(_, key)| path(key)),
        ..AuthInfo::default()
    };
    let context = Context { cluster: NAME.into(), user: Some(NAME.into()), ..Context::default() };
    Kubeconfig {
        clusters: vec![NamedCluster { name: NAME.into(), cluster: Some(cluster), ..NamedCluster::default() }],
        auth_infos: vec![NamedAuthInfo { name: NAME.into(), auth_info: Some(user), ..NamedAuthInfo::default() }],
        contexts: vec![NamedContext { name: NAME.into(), context: Some(context), ..NamedContext::default() }],
        current_context: Some(NAME.into()),
        ..Kubeconfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn target_flags_make_the_config_kube_speaks_with() {
        let tls = ClientTls { ca_file: None, insecure_skip_verify: true, client_cert: None };
        let source =
            TargetSource::Url { url: "https://10.0.0.1:6443/base".into(), tls, token_file: Some("/t/token".into()) };
        let config = source.config().await.expect("config");
        assert_eq!(config.cluster_url.to_string(), "https://10.0.0.1:6443/base");
        assert!(config.accept_invalid_certs);
        assert_eq!(config.auth_info.token_file, None, "the agent sends the token itself");
    }

    #[tokio::test]
    async fn a_kubeconfig_file_and_its_context_name_the_target() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config");
        let yaml = "apiVersion: v1\nkind: Config\ncurrent-context: a\n\
            clusters:\n- {name: a, cluster: {server: 'http://127.0.0.1:1'}}\n- {name: b, cluster: {server: 'http://127.0.0.1:2/clusters/b'}}\n\
            users:\n- {name: u, user: {token: t}}\n\
            contexts:\n- {name: a, context: {cluster: a, user: u}}\n- {name: b, context: {cluster: b, user: u}}\n";
        std::fs::write(&path, yaml).expect("write");
        let found = |context: Option<&str>| {
            TargetSource::Found(Credentials { kubeconfig: Some(path.clone()), context: context.map(str::to_string) })
        };
        assert_eq!(found(None).config().await.expect("current").cluster_url.to_string(), "http://127.0.0.1:1/");
        assert_eq!(
            found(Some("b")).config().await.expect("b").cluster_url.to_string(),
            "http://127.0.0.1:2/clusters/b"
        );
        let e = found(Some("nope")).config().await.expect_err("no such context");
        assert!(e.to_string().contains("context \"nope\""), "{e}");
    }
}
