//! The public keys OIDC tokens are checked with: a JSON Web Key Set (JWKS), read from
//! a file or fetched from the identity provider's `jwks_uri`.
//!
//! Each key is kept with the signature algorithms it may verify, decided from the key
//! itself (its type, its curve, and its `alg` if it names one), never from a token:
//! an EC P-256 key verifies ES256 only, an Ed25519 key EdDSA only, an RSA key RS*/PS*
//! (or only the one its `alg` names). Symmetric (`oct`) keys, encryption keys
//! (`"use": "enc"`) and keys of unsupported types are skipped, so a set that holds
//! nothing else is refused as having no usable key.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The most a JWKS may weigh, read from a file or over HTTP.
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// How long one fetch of a JWKS URL may take, connection included.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// A JWKS document on disk (re-read at each refresh, so it can be rotated in place).
    File(PathBuf),
    /// The identity provider's `jwks_uri`. `https` is required, except on a loopback
    /// host (`localhost`, `127.0.0.1`, `[::1]`), since whoever can alter the answer can
    /// sign tokens; redirects are followed only to such URLs.
    Url(String),
}

impl fmt::Display for JwksSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JwksSource::File(path) => write!(f, "file {}", path.display()),
            JwksSource::Url(url) => write!(f, "URL {url}"),
        }
    }
}

/// Why a JWKS could not be read or used.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("cannot read the JWKS file {path}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the JWKS URL {url} is not an https URL (http is allowed only on a loopback host)")]
    InsecureUrl { url: String },
    #[error("cannot set up the HTTP client for the JWKS URL")]
    Client {
        #[source]
        source: reqwest::Error,
    },
    #[error("cannot fetch the JWKS from {url}")]
    Fetch {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("the JWKS URL {url} answered HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("the JWKS from {source_name} is larger than {MAX_JWKS_BYTES} bytes")]
    TooLarge { source_name: String },
    #[error("the JWKS from {source_name} is not a JSON Web Key Set (an object with a `keys` array)")]
    NotJwks {
        source_name: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("the JWKS from {source_name} holds no usable signature key (EC P-256/P-384, Ed25519 or RSA)")]
    NoUsableKey { source_name: String },
}

/// One verification key and the algorithms it may verify.
#[derive(Clone)]
pub struct Key {
    /// The key's `kid`, if it names one.
    pub kid: Option<String>,
    pub decoding: DecodingKey,
    /// Never empty; never a symmetric (HS*) algorithm.
    pub algorithms: Vec<Algorithm>,
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key").field("kid", &self.kid).field("algorithms", &self.algorithms).finish_non_exhaustive()
    }
}

/// The usable keys of one JWKS; never empty.
#[derive(Debug, Clone)]
pub struct KeySet {
    pub keys: Vec<Key>,
}

impl KeySet {
    /// The key a token names by `kid`; with no `kid`, the only key (if there is one).
    pub fn find(&self, kid: Option<&str>) -> Option<&Key> {
        match kid {
            Some(kid) => self.keys.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if self.keys.len() == 1 => self.keys.first(),
            None => None,
        }
    }

    /// The usable keys of a JWKS document; `source_name` names it in errors.
    pub fn parse(json: &[u8], source_name: &str) -> Result<KeySet, JwksError> {
        #[derive(serde::Deserialize)]
        struct Document {
            keys: Vec<serde_json::Value>,
        }
        let doc: Document = serde_json::from_slice(json)
            .map_err(|source| JwksError::NotJwks { source_name: source_name.to_string(), source })?;
        let keys: Vec<Key> = doc.keys.into_iter().filter_map(usable_key).collect();
        if keys.is_empty() {
            return Err(JwksError::NoUsableKey { source_name: source_name.to_string() });
        }
        Ok(KeySet { keys })
    }
}

/// The key `value` describes, if it is a public signature key of a supported type.
fn usable_key(value: serde_json::Value) -> Option<Key> {
    let jwk: Jwk = match serde_json::from_value(value) {
        Ok(jwk) => jwk,
        Err(e) => {
            tracing::debug!(error = %e, "JWKS: skipping a key of an unsupported type");
            return None;
        }
    };
    let kid = jwk.common.key_id.clone();
    if jwk.common.public_key_use == Some(PublicKeyUse::Encryption) {
        tracing::debug!(?kid, "JWKS: skipping an encryption key");
        return None;
    }
    let Some(algorithms) = algorithms_of(&jwk) else {
        tracing::debug!(
            ?kid,
            "JWKS: skipping a key that is symmetric, of an unsupported curve, or whose `alg` does not fit it"
        );
        return None;
    };
    match DecodingKey::from_jwk(&jwk) {
        Ok(decoding) => Some(Key { kid, decoding, algorithms }),
        Err(e) => {
            tracing::debug!(?kid, error = %e, "JWKS: skipping a malformed key");
            None
        }
    }
}

/// The algorithms a key may verify: those its type allows, narrowed to its `alg` if it
/// names one. `None` for symmetric keys and keys nothing here can verify with.
fn algorithms_of(jwk: &Jwk) -> Option<Vec<Algorithm>> {
    use Algorithm::*;
    let allowed: Vec<Algorithm> = match &jwk.algorithm {
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => vec![ES256],
            EllipticCurve::P384 => vec![ES384],
            EllipticCurve::P521 | EllipticCurve::Ed25519 => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => vec![EdDSA],
        AlgorithmParameters::RSA(_) => vec![RS256, RS384, RS512, PS256, PS384, PS512],
        AlgorithmParameters::OctetKeyPair(_) | AlgorithmParameters::OctetKey(_) => return None,
    };
    let Some(named) = jwk.common.key_algorithm else {
        return Some(allowed);
    };
    let named = match named {
        KeyAlgorithm::ES256 => ES256,
        KeyAlgorithm::ES384 => ES384,
        KeyAlgorithm::RS256 => RS256,
        KeyAlgorithm::RS384 => RS384,
        KeyAlgorithm::RS512 => RS512,
        KeyAlgorithm::PS256 => PS256,
        KeyAlgorithm::PS384 => PS384,
        KeyAlgorithm::PS512 => PS512,
        KeyAlgorithm::EdDSA => EdDSA,
        _ => return None,
    };
    allowed.contains(&named).then(|| vec![named])
}

/// Reads one JWKS source, again at each call of [`JwksReader::read`].
#[derive(Debug, Clone)]
pub struct JwksReader {
    source: JwksSource,
    /// Present for a URL source.
    client: Option<reqwest::Client>,
}

/// Redirects followed when fetching a JWKS (only to URLs [`JwksSource::Url`] allows).
const MAX_REDIRECTS: usize = 5;

impl JwksReader {
    /// A reader of `source`; checks a URL's scheme and builds its HTTP client.
    pub fn new(source: JwksSource) -> Result<JwksReader, JwksError> {
        let client = match &source {
            JwksSource::File(_) => None,
            JwksSource::Url(url) => {
                if !reqwest::Url::parse(url).is_ok_and(|u| is_allowed_url(&u)) {
                    return Err(JwksError::InsecureUrl { url: url.clone() });
                }
                let redirects = reqwest::redirect::Policy::custom(|attempt| {
                    if attempt.previous().len() > MAX_REDIRECTS {
                        attempt.error("too many redirects")
                    } else if is_allowed_url(attempt.url()) {
                        attempt.follow()
                    } else {
                        attempt.stop()
                    }
                });
                let client = reqwest::Client::builder()
                    .timeout(FETCH_TIMEOUT)
                    .redirect(redirects)
                    .build()
                    .map_err(|source| JwksError::Client { source })?;
                Some(client)
            }
        };
        Ok(JwksReader { source, client })
    }

    pub fn source(&self) -> &JwksSource {
        &self.source
    }

    /// Reads the JWKS and keeps its usable keys.
    pub async fn read(&self) -> Result<KeySet, JwksError> {
        let bytes = match (&self.source, &self.client) {
            (JwksSource::File(path), _) => read_file(path).await?,
            (JwksSource::Url(url), Some(client)) => fetch(url, client).await?,
            (JwksSource::Url(url), None) => return Err(JwksError::InsecureUrl { url: url.clone() }),
        };
        KeySet::parse(&bytes, &self.source.to_string())
    }
}

async fn read_file(path: &PathBuf) -> Result<Vec<u8>, JwksError> {
    let file_error = |source| JwksError::File { path: path.clone(), source };
    let len = tokio::fs::metadata(path).await.map_err(file_error)?.len();
    if len > MAX_JWKS_BYTES as u64 {
        return Err(JwksError::TooLarge { source_name: JwksSource::File(path.clone()).to_string() });
    }
    tokio::fs::read(path).await.map_err(file_error)
}

async fn fetch(url: &str, client: &reqwest::Client) -> Result<Vec<u8>, JwksError> {
    let fetch_error = |source| JwksError::Fetch { url: url.to_string(), source };
    let too_large = || JwksError::TooLarge { source_name: JwksSource::Url(url.to_string()).to_string() };
    let mut response = client.get(url).send().await.map_err(fetch_error)?;
    if !response.status().is_success() {
        return Err(JwksError::Status { url: url.to_string(), status: response.status().as_u16() });
    }
    if response.content_length().is_some_and(|n| n > MAX_JWKS_BYTES as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(fetch_error)? {
        if body.len() + chunk.len() > MAX_JWKS_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// `https`, or `http` to a loopback host.
fn is_allowed_url(parsed: &reqwest::Url) -> bool {
    match parsed.scheme() {
        "https" => true,
        "http" => {
            let host = parsed.host_str().unwrap_or_default();
            host == "localhost" || host.trim_matches(['[', ']']).parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
        }
        _ => false,
    }
}
