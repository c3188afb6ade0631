//! TLS to PostgreSQL: libpq's `sslmode` and `sslrootcert`, done with rustls (ring).
//!
//! tokio-postgres only negotiates (its `SslMode` knows disable/prefer/require); which
//! certificate is acceptable is decided here, by the verifier of the rustls config
//! handed to every connection of a store:
//!
//! | sslmode | TLS | certificate check |
//! |---|---|---|
//! | `disable` | never | — |
//! | `allow`, `prefer` (default) | if the server offers it | none |
//! | `require` | always | none; the chain, if a root certificate is at hand (libpq's compatibility rule) |
//! | `verify-ca` | always | the chain, against the root certificates |
//! | `verify-full` | always | the chain and the host name |
//!
//! `prefer` never checks, so a server with a self-signed certificate (the common
//! default) still gets an encrypted session; libpq would check against a root file
//! found by default and fall back to plain text when that fails, which tokio-postgres
//! cannot do. `allow` (libpq: plain first, TLS if the server insists) is taken as
//! `prefer`. The root certificates are those of `sslrootcert` (a PEM file, or `system`),
//! else libpq's default file `~/.postgresql/root.crt` if it exists, else, for the verify
//! modes, the system's roots (where libpq would refuse to start). As in libpq 16,
//! `sslrootcert=system` only goes with `verify-full` (and makes it the default), since
//! with a weaker mode any public CA could vouch for any server.

use crate::{Result, StoreError};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// What `sslmode` asks for (libpq's six values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SslMode {
    Disable,
    Allow,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl SslMode {
    const CHOICES: &'static str = "disable, allow, prefer, require, verify-ca or verify-full";

    fn parse(s: &str) -> Option<SslMode> {
        Some(match s.trim() {
            "disable" => SslMode::Disable,
            "allow" => SslMode::Allow,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Allow => "allow",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }

    /// What tokio-postgres is told: whether to ask for TLS and whether to insist.
    pub(super) fn negotiation(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Wire;
        match self {
            SslMode::Disable => Wire::Disable,
            SslMode::Allow | SslMode::Prefer => Wire::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Wire::Require,
        }
    }
}

/// Where trusted root certificates come from, with the setting that named them (for
/// error messages).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Roots {
    File { path: PathBuf, setting: &'static str },
    System,
}

/// How the server's certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verify {
    Nothing,
    Chain(Roots),
    ChainAndName(Roots),
}

impl Verify {
    /// What `mode` checks, given the root certificates found (if any).
    fn for_mode(mode: SslMode, roots: Option<Roots>) -> Verify {
        match (mode, roots) {
            (SslMode::Disable | SslMode::Allow | SslMode::Prefer, _) | (SslMode::Require, None) => Verify::Nothing,
            (SslMode::Require, Some(roots)) => Verify::Chain(roots),
            (SslMode::VerifyCa, roots) => Verify::Chain(roots.unwrap_or(Roots::System)),
            (SslMode::VerifyFull, roots) => Verify::ChainAndName(roots.unwrap_or(Roots::System)),
        }
    }
}

/// The TLS half of the connection settings (the rest is tokio-postgres' `Config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TlsSettings {
    pub(super) mode: SslMode,
    pub(super) verify: Verify,
}

/// `sslmode` and `sslrootcert` as given in the connection string, not yet checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct TlsParams {
    pub(super) mode: Option<String>,
    pub(super) root_cert: Option<String>,
}

/// libpq's default root certificate file, relative to the home directory.
const DEFAULT_ROOT_FILE: &str = ".postgresql/root.crt";

impl TlsSettings {
    /// The settings from the connection string, else `PGSSLMODE` / `PGSSLROOTCERT`,
    /// else libpq's defaults.
    pub(super) fn resolve(given: TlsParams, env: &impl Fn(&str) -> Option<String>) -> Result<TlsSettings> {
        let mode = given.mode.map(|v| ("sslmode", v)).or_else(|| env("PGSSLMODE").map(|v| ("PGSSLMODE", v)));
        // An empty sslrootcert (`?sslrootcert=`) counts as not given.
        let given_root = given.root_cert.filter(|v| !v.is_empty()).map(|v| ("sslrootcert", v));
        let root = given_root.or_else(|| env("PGSSLROOTCERT").map(|v| ("PGSSLROOTCERT", v)));
        let system = root.as_ref().is_some_and(|(_, v)| v == "system");
        let mode = match mode {
            Some((setting, value)) => SslMode::parse(&value)
                .ok_or_else(|| invalid(format!("{setting}={value:?} is not an sslmode: use {}", SslMode::CHOICES)))?,
            None if system => SslMode::VerifyFull,
            None => SslMode::Prefer,
        };
        if system && mode != SslMode::VerifyFull {
            return Err(invalid(format!(
                "sslmode {} may not be used with sslrootcert=system (any CA would do for any server): use sslmode=verify-full",
                mode.as_str()
            )));
        }
        let roots = match root {
            Some((_, value)) if value == "system" => Some(Roots::System),
            Some((setting, value)) => Some(Roots::File { path: PathBuf::from(value), setting }),
            None => default_root_file(env),
        };
        Ok(TlsSettings { mode, verify: Verify::for_mode(mode, roots) })
    }

    /// The connector every connection of a store uses: loads the root certificates
    /// once, so a bad file fails the store's start and not its first reconnect.
    pub(super) fn connector(&self) -> Result<MakeRustlsConnect> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (roots, name) = match &self.verify {
            Verify::Nothing => (None, false),
            Verify::Chain(roots) => (Some(self.load(roots)?), false),
            Verify::ChainAndName(roots) => (Some(self.load(roots)?), true),
        };
        let verifier = Arc::new(ServerCheck { roots, name, algorithms: provider.signature_verification_algorithms });
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_error(format!("the ring provider offers no TLS version: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }

    fn load(&self, roots: &Roots) -> Result<RootCertStore> {
        match roots {
            Roots::File { path, setting } => load_file(path, setting),
            Roots::System => load_system(self.mode),
        }
    }

    /// What to check when a connection failed on the server's certificate; `None` for
    /// other failures.
    pub(super) fn hint(&self, e: &tokio_postgres::Error) -> Option<String> {
        let problem = rejected_certificate(e)?;
        let roots = match &self.verify {
            Verify::Nothing => return None,
            Verify::Chain(roots) | Verify::ChainAndName(roots) => roots,
        };
        let fix = match problem {
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "connect by a host name the certificate is for (verify-ca skips this check)".to_string()
            }
            _ => format!("check that {} holds the CA that signed it", roots.describe()),
        };
        Some(format!("sslmode={} refused the server's certificate: {fix}", self.mode.as_str()))
    }
}

impl Roots {
    fn describe(&self) -> String {
        match self {
            Roots::File { path, setting } => format!("{setting} {}", path.display()),
            Roots::System => "the system's root certificates".into(),
        }
    }
}

/// `~/.postgresql/root.crt` if it exists, as libpq looks for it.
fn default_root_file(env: &impl Fn(&str) -> Option<String>) -> Option<Roots> {
    let path = Path::new(&env("HOME")?).join(DEFAULT_ROOT_FILE);
    path.is_file().then_some(Roots::File { path, setting: "~/.postgresql/root.crt (libpq's default root file)" })
}

/// Every certificate in a PEM file; a file without one, or with one that does not
/// parse, is an error (it was named to be trusted, so a silent skip would hide a typo).
fn load_file(path: &Path, setting: &str) -> Result<RootCertStore> {
    let named = || format!("{setting} {}", path.display());
    let pem = std::fs::read(path).map_err(|e| {
        tls_error(format!(
            "{}: cannot read it ({e}): give the PEM file of the CA that signed the server's certificate",
            named()
        ))
    })?;
    let mut store = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| tls_error(format!("{}: not a valid PEM file ({e})", named())))?;
        store.add(cert).map_err(|e| tls_error(format!("{}: a certificate in it is invalid ({e})", named())))?;
    }
    if store.is_empty() {
        return Err(tls_error(format!("{}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)", named())));
    }
    Ok(store)
}

/// The platform's trusted roots (certificates that do not parse are skipped, as every
/// system store has a few).
fn load_system(mode: SslMode) -> Result<RootCertStore> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    store.add_parsable_certificates(found.certs);
    if store.is_empty() {
        let errors: Vec<String> = found.errors.iter().map(ToString::to_string).collect();
        return Err(tls_error(format!(
            "sslmode={} found no system root certificates ({}): give sslrootcert=<the CA's PEM file>",
            mode.as_str(),
            if errors.is_empty() { "none installed".into() } else { errors.join("; ") }
        )));
    }
    Ok(store)
}

/// Why rustls rejected the server's certificate, if that is why a connection failed.
fn rejected_certificate(e: &tokio_postgres::Error) -> Option<&CertificateError> {
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        // tokio-rustls wraps the rustls error in an io::Error, whose `source` skips it.
        let inner =
            cause.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).map(|e| e as &dyn std::error::Error);
        if let Some(rustls::Error::InvalidCertificate(problem)) = inner.unwrap_or(cause).downcast_ref::<rustls::Error>()
        {
            return Some(problem);
        }
        source = cause.source();
    }
    None
}

fn invalid(message: String) -> StoreError {
    StoreError::backend("reading the database URL", false, message)
}

fn tls_error(message: String) -> StoreError {
    StoreError::backend("setting up TLS to PostgreSQL", false, message)
}

/// The server-certificate check of one sslmode: nothing, the chain up to `roots`, or
/// that and the host name. The handshake signatures are always checked, so the server
/// holds the key of the certificate it shows.
#[derive(Debug)]
struct ServerCheck {
    roots: Option<RootCertStore>,
    name: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ServerCheck {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(roots) = &self.roots else {
            return Ok(ServerCertVerified::assertion());
        };
        let cert = ParsedCertificate::try_from(end_entity)?;
        verify_server_cert_signed_by_trust_anchor(&cert, roots, intermediates, now, self.algorithms.all)?;
        if self.name {
            verify_server_name(&cert, server_name)?;
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed CA certificate (its key was thrown away): valid, trusted by nobody.
    const UNRELATED_CA: &str = include_str!("../../tests/data/unrelated-ca.pem");

    fn verify_full_with(path: &Path) -> TlsSettings {
        TlsSettings {
            mode: SslMode::VerifyFull,
            verify: Verify::ChainAndName(Roots::File { path: path.into(), setting: "sslrootcert" }),
        }
    }

    fn connector_error(path: &Path) -> String {
        verify_full_with(path).connector().err().expect("the connector must be refused").to_string()
    }

    #[test]
    fn a_root_file_must_hold_valid_certificates() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        verify_full_with(&write("ca.pem", UNRELATED_CA)).connector().expect("a valid CA file");

        let missing = dir.path().join("missing.pem");
        let e = connector_error(&missing);
        assert!(
            e.contains(&format!("sslrootcert {}: cannot read it", missing.display()))
                && e.contains("PEM file of the CA"),
            "{e}"
        );
        let e = connector_error(&write("empty.pem", "just text\n"));
        assert!(e.contains("empty.pem: holds no PEM certificate"), "{e}");
        let e =
            connector_error(&write("bad-base64.pem", "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"));
        assert!(e.contains("bad-base64.pem: not a valid PEM file"), "{e}");
        let e =
            connector_error(&write("not-der.pem", "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"));
        assert!(e.contains("not-der.pem: a certificate in it is invalid"), "{e}");
        assert!(e.starts_with("store backend error while setting up TLS to PostgreSQL"), "{e}");
    }
}
