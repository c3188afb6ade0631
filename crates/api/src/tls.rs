//! How the [`Client`](crate::Client) speaks https: [`ClientTls`] (the CA it trusts,
//! whether it verifies, its own certificate), and why a client could not be built.

use std::path::{Path, PathBuf};

/// How a client speaks https: whom it trusts, and its own certificate. The default
/// trusts the system's CA roots and presents no certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// Trust only the CA certificates (PEM) in this file, not the system's roots (as
    /// kubectl's `--certificate-authority`).
    pub ca_file: Option<PathBuf>,
    /// Accept any server certificate: encrypted, but anyone may pose as the server.
    pub insecure_skip_verify: bool,
    /// A client certificate and its private key (PEM files), for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// Why a client could not be built. No variant carries key material.
#[derive(Debug, thiserror::Error)]
pub enum ClientBuildError {
    #[error("the hub's URL needs a scheme: http://{url} or https://{url}")]
    NoScheme { url: String },
    #[error("cannot read {}", path.display())]
    Unreadable {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the CA file {} holds no PEM certificate", path.display())]
    NoCa { path: PathBuf },
    #[error("the CA file {} is not valid PEM", path.display())]
    BadCa {
        path: PathBuf,
        #[source]
        source: reqwest::Error,
    },
    /// The parse error is left out: it may quote the key.
    #[error("the client certificate {} and key {} are not a valid PEM certificate and private key", cert.display(), key.display())]
    BadIdentity { cert: PathBuf, key: PathBuf },
    #[error("cannot build the HTTP client")]
    Http(#[source] reqwest::Error),
}

impl ClientTls {
    /// A `reqwest` client builder set up for this TLS (for other https clients of the
    /// same program, e.g. the agent's connection to its target).
    pub fn builder(&self) -> Result<reqwest::ClientBuilder, ClientBuildError> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|source| ClientBuildError::Unreadable { path: path.into(), source })
        };
        let mut builder = reqwest::Client::builder().use_rustls_tls();
        if let Some(path) = &self.ca_file {
            let certs = reqwest::Certificate::from_pem_bundle(&read(path)?)
                .map_err(|source| ClientBuildError::BadCa { path: path.clone(), source })?;
            if certs.is_empty() {
                return Err(ClientBuildError::NoCa { path: path.clone() });
            }
            builder = builder.tls_built_in_root_certs(false);
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        if self.insecure_skip_verify {
            builder = builder.danger_accept_invalid_certs(true);
        }
        if let Some((cert, key)) = &self.client_cert {
            let mut pem = read(cert)?;
            pem.push(b'\n');
            pem.extend(read(key)?);
            let identity = reqwest::Identity::from_pem(&pem)
                .map_err(|_| ClientBuildError::BadIdentity { cert: cert.clone(), key: key.clone() })?;
            builder = builder.identity(identity);
        }
        Ok(builder)
    }
}
