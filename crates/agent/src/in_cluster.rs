//! The cluster the agent runs in, reached as kube-rs and client-go reach it from a
//! pod: the API server at `KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT`, its
//! CA and the pod's service-account token mounted under
//! `/var/run/secrets/kubernetes.io/serviceaccount`.

use std::path::{Path, PathBuf};

/// Where a pod's service account is mounted.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The in-cluster API server and the pod's credentials for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InCluster {
    /// `https://HOST:PORT`.
    pub url: String,
    /// The cluster's CA (`ca.crt`).
    pub ca_file: PathBuf,
    /// The service account's token (`token`), rotated by the kubelet.
    pub token_file: PathBuf,
}

/// Why the agent is not in a pod it can read its cluster from.
#[derive(Debug, thiserror::Error)]
pub enum InClusterError {
    #[error("{0} is not set: not in a pod (give --target)")]
    NoEnv(&'static str),
    #[error("no service-account {what} at {}: mount the pod's service account (automountServiceAccountToken) or give --target", path.display())]
    NoFile { what: &'static str, path: PathBuf },
}

impl InCluster {
    /// From the pod's environment and mounted service account.
    pub fn from_env() -> Result<Self, InClusterError> {
        let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
        Self::from_parts(var("KUBERNETES_SERVICE_HOST"), var("KUBERNETES_SERVICE_PORT"), Path::new(SERVICE_ACCOUNT_DIR))
    }

    /// From the API server's host and port and the directory the service account is
    /// mounted in.
    pub fn from_parts(host: Option<String>, port: Option<String>, dir: &Path) -> Result<Self, InClusterError> {
        let host = host.ok_or(InClusterError::NoEnv("KUBERNETES_SERVICE_HOST"))?;
        let port = port.ok_or(InClusterError::NoEnv("KUBERNETES_SERVICE_PORT"))?;
        // An IPv6 address goes in brackets.
        let host = if host.contains(':') && !host.starts_with('[') { format!("[{host}]") } else { host };
        let (ca_file, token_file) = (dir.join("ca.crt"), dir.join("token"));
        for (what, path) in [("CA", &ca_file), ("token", &token_file)] {
            if !path.is_file() {
                return Err(InClusterError::NoFile { what, path: path.clone() });
            }
        }
        Ok(Self { url: format!("https://{host}:{port}"), ca_file, token_file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mounted() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.crt"), "ca").expect("ca");
        std::fs::write(dir.path().join("token"), "t").expect("token");
        dir
    }

    #[test]
    fn the_service_account_and_the_service_address_make_the_target() {
        let dir = mounted();
        let found = InCluster::from_parts(Some("10.0.0.1".into()), Some("443".into()), dir.path()).expect("in cluster");
        assert_eq!(found.url, "https://10.0.0.1:443");
        assert_eq!((found.ca_file, found.token_file), (dir.path().join("ca.crt"), dir.path().join("token")));
        let v6 = InCluster::from_parts(Some("fd00::1".into()), Some("6443".into()), dir.path()).expect("in cluster");
        assert_eq!(v6.url, "https://[fd00::1]:6443");
    }

    #[test]
    fn outside_a_pod_the_error_says_what_is_missing() {
        let dir = mounted();
        let err = InCluster::from_parts(None, Some("443".into()), dir.path()).expect_err("no host");
        assert!(err.to_string().contains("KUBERNETES_SERVICE_HOST"), "{err}");
        let empty = tempfile::tempdir().expect("tempdir");
        let err = InCluster::from_parts(Some("h".into()), Some("443".into()), empty.path()).expect_err("no files");
        assert!(err.to_string().contains("ca.crt"), "{err}");
    }
}
