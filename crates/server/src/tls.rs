//! https for the API: a certificate and key from PEM files, re-read when they change
//! (a rotated certificate is served to new connections without a restart), and
//! optional client certificates.
//!
//! [`ServerTls::load`] reads a [`TlsConfig`] once and fails with a [`TlsError`] that
//! names the file and what is wrong with it; [`serve`](crate::serve) then serves over
//! it. While serving, the files' modification times and sizes are polled every
//! [`TlsConfig::reload_every`] (a Kubernetes Secret mount's symlink swap counts as a
//! change): new files are loaded and used for every connection accepted afterwards;
//! files that do not load are logged and the previous ones kept.
//!
//! With a [`TlsConfig::client_ca_file`], clients may present a certificate signed by
//! that CA (one signed by any other CA is refused at the handshake; none at all is
//! allowed, the request then needs other credentials). The subject of a verified
//! client certificate reaches every handler of the connection as a [`ClientIdentity`]
//! in the request's extensions.

use fleetsync_api::describe;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime};

/// Where the server's certificate and key are, and how often to look for new ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsConfig {
    /// The certificate chain, PEM: the server's certificate first.
    pub cert_file: PathBuf,
    /// The private key, PEM: PKCS#8, RSA (PKCS#1) or SEC1.
    pub key_file: PathBuf,
    /// CA certificates, PEM, that client certificates are verified against; `None`:
    /// no client certificate is asked for.
    pub client_ca_file: Option<PathBuf>,
    /// How often the files' modification times are checked.
    pub reload_every: Duration,
}

impl TlsConfig {
    /// How often the files are checked unless told otherwise.
    pub const DEFAULT_RELOAD: Duration = Duration::from_secs(10);

    /// A certificate and key, no client certificates, checked every [`Self::DEFAULT_RELOAD`].
    pub fn new(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> TlsConfig {
        TlsConfig {
            cert_file: cert_file.into(),
            key_file: key_file.into(),
            client_ca_file: None,
            reload_every: Self::DEFAULT_RELOAD,
        }
    }
}

/// The subject of a verified client certificate, in the extensions of every request
/// of its connection (`axum::Extension<ClientIdentity>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The subject's common name (CN); empty if it has none.
    pub common_name: String,
    /// Every organization (O) of the subject, in order.
    pub organizations: Vec<String>,
}

/// In the extensions of every request that came over https: what the dashboard's
/// session cookie is marked `Secure` by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverTls;

/// Why the TLS files could not be loaded. No variant carries key material.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the {what} file {}", path.display())]
    Unreadable {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the {what} file {} is not valid PEM", path.display())]
    BadPem {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: pem::Error,
    },
    #[error("the {what} file {} holds no PEM certificate", path.display())]
    NoCertificate { what: &'static str, path: PathBuf },
    /// The key file's own parse error is left out: it may quote the file.
    #[error("the private key file {} holds no valid PEM private key (PKCS#8, RSA or SEC1)", path.display())]
    NoKey { path: PathBuf },
    #[error("the certificate in {} and the private key in {} are refused", cert.display(), key.display())]
    Refused {
        cert: PathBuf,
        key: PathBuf,
        #[source]
        source: rustls::Error,
    },
    #[error("the client CA file {} is refused", path.display())]
    ClientCa {
        path: PathBuf,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// A loaded [`TlsConfig`]: the rustls configuration new connections use, swapped
/// when the files change ([`ServerTls::reload_loop`]). Cheap to clone; clones share it.
#[derive(Clone)]
pub struct ServerTls {
    config: TlsConfig,
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls").field("config", &self.config).finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Reads the files named by `config`; fails if any is missing or wrong.
    pub fn load(config: TlsConfig) -> Result<ServerTls, TlsError> {
        let server = build(&config)?;
        Ok(ServerTls { config, current: Arc::new(RwLock::new(server)) })
    }

    /// What it was loaded from.
    pub fn config(&self) -> &TlsConfig {
        &self.config
    }

    /// The configuration for a connection accepted now.
    pub(crate) fn current(&self) -> Arc<ServerConfig> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Checks the files every `reload_every`, forever; when one changed, loads them
    /// all again and swaps the result in (or logs why not, and keeps serving the old).
    pub(crate) async fn reload_loop(self) {
        let mut seen = stamps(&self.config);
        let mut tick = tokio::time::interval(self.config.reload_every.max(Duration::from_millis(10)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let now = stamps(&self.config);
            if now == seen {
                continue;
            }
            seen = now;
            match build(&self.config) {
                Ok(server) => {
                    *self.current.write().unwrap_or_else(PoisonError::into_inner) = server;
                    tracing::info!(cert = %self.config.cert_file.display(), "TLS files changed: serving the new certificate");
                }
                Err(e) => {
                    tracing::warn!(error = %describe(&e), "TLS files changed but do not load: still serving the previous certificate");
                }
            }
        }
    }
}

/// Each file's modification time and length (`None`: cannot be read now).
fn stamps(config: &TlsConfig) -> Vec<Option<(SystemTime, u64)>> {
    let files = [Some(&config.cert_file), Some(&config.key_file), config.client_ca_file.as_ref()];
    files
        .into_iter()
        .flatten()
        .map(|path| {
            let meta = std::fs::metadata(path).ok()?;
            Some((meta.modified().ok()?, meta.len()))
        })
        .collect()
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A rustls server configuration from the files (http/1.1 only).
fn build(config: &TlsConfig) -> Result<Arc<ServerConfig>, TlsError> {
    let certs = read_certs("certificate", &config.cert_file)?;
    let key_pem = read("private key", &config.key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|_| TlsError::NoKey { path: config.key_file.clone() })?;
    let refused = |source| TlsError::Refused { cert: config.cert_file.clone(), key: config.key_file.clone(), source };
    let builder =
        ServerConfig::builder_with_provider(provider()).with_safe_default_protocol_versions().map_err(refused)?;
    let builder = match &config.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let ca_error =
                |source: Box<dyn std::error::Error + Send + Sync>| TlsError::ClientCa { path: path.clone(), source };
            let mut roots = RootCertStore::empty();
            for cert in read_certs("client CA", path)? {
                roots.add(cert).map_err(|e| ca_error(e.into()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .allow_unauthenticated()
                .build()
                .map_err(|e| ca_error(e.into()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut server = builder.with_single_cert(certs, key).map_err(refused)?;
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(server))
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Unreadable { what, path: path.into(), source })
}

fn read_certs(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::BadPem { what, path: path.into(), source })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { what, path: path.into() });
    }
    Ok(certs)
}

/// The subject of the client's certificate, if it presented one (the verifier has
/// checked it by then).
pub(crate) fn client_identity(peer: Option<&[CertificateDer<'_>]>) -> Option<ClientIdentity> {
    let leaf = peer?.first()?;
    let (_, cert) = x509_parser::parse_x509_certificate(leaf.as_ref()).ok()?;
    let subject = cert.subject();
    let text = |a: &x509_parser::x509::AttributeTypeAndValue<'_>| a.as_str().ok().map(str::to_string);
    let identity = ClientIdentity {
        common_name: subject.iter_common_name().find_map(text).unwrap_or_default(),
        organizations: subject.iter_organization().filter_map(text).collect(),
    };
    Some(identity)
}
