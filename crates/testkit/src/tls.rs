//! Test certificate authorities: a CA, server certificates for loopback and client
//! certificates with a subject, as PEM, and written to files for a server or a client
//! to read (feature `tls`).

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};

/// A certificate and its private key, as PEM.
#[derive(Debug, Clone)]
pub struct Pem {
    pub cert: String,
    pub key: String,
}

/// Where [`Pem::write`] put a certificate and its key.
#[derive(Debug, Clone)]
pub struct PemFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pem {
    /// Writes the certificate to `<dir>/<name>.crt` and the key to `<dir>/<name>.key`
    /// (overwriting them: a rotation).
    pub fn write(&self, dir: &Path, name: &str) -> std::io::Result<PemFiles> {
        let files = PemFiles { cert: dir.join(format!("{name}.crt")), key: dir.join(format!("{name}.key")) };
        std::fs::write(&files.cert, &self.cert)?;
        std::fs::write(&files.key, &self.key)?;
        Ok(files)
    }
}

/// A self-signed certificate authority that signs leaf certificates.
pub struct TestCa {
    cert: Certificate,
    key: KeyPair,
}

impl TestCa {
    /// A new CA whose subject's common name is `name`.
    pub fn new(name: &str) -> Result<TestCa, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate()?;
        let cert = params.self_signed(&key)?;
        Ok(TestCa { cert, key })
    }

    /// The CA's certificate, as PEM (what a client or server is told to trust).
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    /// Writes the CA's certificate to `<dir>/<name>.crt`.
    pub fn write_cert(&self, dir: &Path, name: &str) -> std::io::Result<PathBuf> {
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, self.cert_pem())?;
        Ok(path)
    }

    /// A server certificate for `localhost` and `127.0.0.1`.
    pub fn server_cert(&self) -> Result<Pem, rcgen::Error> {
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
        params.distinguished_name.push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate whose subject has the common name `common_name` and one
    /// organization (O) per item of `organizations`, at most two (rcgen keeps one
    /// attribute per type: the second is written under O's object identifier).
    pub fn client_cert(&self, common_name: &str, organizations: &[&str]) -> Result<Pem, rcgen::Error> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, common_name);
        assert!(organizations.len() <= 2, "at most two organizations in a test client certificate");
        let types = [DnType::OrganizationName, DnType::CustomDnType(vec![2, 5, 4, 10])];
        for (ty, o) in types.into_iter().zip(organizations) {
            params.distinguished_name.push(ty, *o);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> Result<Pem, rcgen::Error> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.cert, &self.key)?;
        Ok(Pem { cert: cert.pem(), key: key.serialize_pem() })
    }
}
