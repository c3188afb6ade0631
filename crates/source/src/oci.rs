//! An OCI artifact's layer, pulled into an [`Artifact`](fleetsync_model::Artifact) only when its digest moved.
//!
//! [`OciSource::fetch`] asks the registry which manifest the ref names (a tag's digest
//! from a `HEAD` of its manifest; for a version range, the highest tag of the
//! repository's tag list in the range; a digest as it is), and stops there if that
//! digest is the revision the caller already holds: a poll of an unchanged artifact
//! downloads no layer. Otherwise it pulls the manifest by that digest (its bytes
//! checked against it), picks the layer (by media type, or the first), refuses one the
//! manifest says is over [`Limits::max_download_bytes`], pulls it (its bytes checked
//! against the layer's digest, the download stopped once over the limit), and reads it
//! as a gzipped tarball within the [`Limits`] ([`crate::tarball`]).
//!
//! The revision is the manifest's digest (`sha256:…`). Registry credentials come from
//! the source's Secret (`username` and `password`, or a token as the password), as for
//! Git; none ever appears in an error.

use crate::git::{highest_in_range, ignore_matcher, Basic, Fetch, HostRefused, Reach};
use crate::limits::{Limit, Limits};
use crate::tarball::{read_tar_gz, TarError};
use fleetsync_applier::egress::EgressError;
use fleetsync_model::oci::DEFAULT_TAG;
use fleetsync_model::OciRepositorySpec;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::OciDescriptor;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWrite;

/// Which artifact of a repository a source follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OciRef {
    Tag(String),
    /// The highest tag that is a version (`1.2.3` or `v1.2.3`) in this range.
    Semver(String),
    /// One manifest, by its digest.
    Digest(String),
}

/// A repository of a registry and the artifact of it to follow.
#[derive(Debug, Clone)]
pub struct OciSource {
    /// `host[:port]`.
    pub registry: String,
    pub repository: String,
    pub reference: OciRef,
    /// The media type of the layer that holds the manifests; the first layer if unset.
    pub media_type: Option<String>,
    /// Plain HTTP instead of HTTPS.
    pub insecure: bool,
    /// Paths of the layer to leave out, in .gitignore's syntax.
    pub ignore: Vec<String>,
    pub auth: Option<Basic>,
}

/// Why a pull failed. No error carries a credential.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The egress policy refuses the registry's host or an address it resolves to.
    #[error("{url}: {source}")]
    Egress {
        url: String,
        #[source]
        source: EgressError,
    },
    #[error("resolving {url}: {message}")]
    Resolve { url: String, message: String },
    #[error("invalid ref {reference}: {reason}")]
    Ref { reference: String, reason: String },
    #[error("invalid ignore pattern {pattern:?}: {reason}")]
    Ignore { pattern: String, reason: String },
    /// The registry could not be reached, refused, or answered something else than
    /// the distribution spec (a digest that does not match what it sent included).
    #[error("{step} {url}: {source}")]
    Registry {
        step: &'static str,
        url: String,
        #[source]
        source: OciDistributionError,
    },
    #[error("{url} has no {reference}")]
    NotFound { url: String, reference: String },
    /// The manifest has no layer the selector names.
    #[error("{url}@{digest}: {reason}")]
    Layer { url: String, digest: String, reason: String },
    /// The layer broke one of the [`Limits`] or a rule of what an artifact may hold;
    /// nothing of it was kept.
    #[error("{url}@{digest}: {source}")]
    Tarball {
        url: String,
        digest: String,
        #[source]
        source: TarError,
    },
}

impl std::fmt::Display for OciRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OciRef::Tag(t) => write!(f, "tag {t:?}"),
            OciRef::Semver(r) => write!(f, "tag in the range {r:?}"),
            OciRef::Digest(d) => write!(f, "manifest {d}"),
        }
    }
}

/// How long a request may wait to connect, and for the next bytes.
const CONNECT_TIME: Duration = Duration::from_secs(10);
const READ_TIME: Duration = Duration::from_secs(30);

impl OciSource {
    /// The source an `OCIRepository`'s spec (valid) names.
    pub fn from_spec(spec: &OciRepositorySpec) -> OciSource {
        let (registry, repository) = spec.registry_and_repository();
        let r = &spec.reference;
        let reference = match (&r.tag, &r.semver, &r.digest) {
            (_, Some(range), _) => OciRef::Semver(range.clone()),
            (_, _, Some(digest)) => OciRef::Digest(digest.clone()),
            (tag, ..) => OciRef::Tag(tag.clone().unwrap_or_else(|| DEFAULT_TAG.into())),
        };
        OciSource {
            registry: registry.into(),
            repository: repository.into(),
            reference,
            media_type: spec.layer_selector.as_ref().map(|l| l.media_type.clone()),
            insecure: spec.insecure,
            ignore: spec.ignore_patterns(),
            auth: None,
        }
    }

    /// `oci://registry/repository`, for messages.
    pub fn url(&self) -> String {
        format!("oci://{}/{}", self.registry, self.repository)
    }

    /// Resolves the ref and, unless it is at `known`, pulls it (see the module docs), if
    /// `reach`'s egress policy allows the registry.
    pub async fn fetch(&self, known: Option<&str>, reach: &Reach, limits: &Limits) -> Result<Fetch, OciError> {
        self.check_reach(reach).await?;
        let ignore = ignore_matcher(&self.ignore).map_err(|(pattern, reason)| OciError::Ignore { pattern, reason })?;
        let client = Client::new(ClientConfig {
            protocol: if self.insecure { ClientProtocol::Http } else { ClientProtocol::Https },
            connect_timeout: Some(CONNECT_TIME),
            read_timeout: Some(READ_TIME),
            platform_resolver: None,
            ..ClientConfig::default()
        });
        let auth = match &self.auth {
            Some(b) => RegistryAuth::Basic(b.username.clone(), b.password.expose().to_string()),
            None => RegistryAuth::Anonymous,
        };
        let digest = self.resolve(&client, &auth).await?;
        if known == Some(digest.as_str()) {
            return Ok(Fetch::Unchanged { revision: digest });
        }
        let at = Reference::with_digest(self.registry.clone(), self.repository.clone(), digest.clone());
        let (manifest, _) = client
            .pull_image_manifest(&at, &auth)
            .await
            .map_err(|e| self.registry_error("pulling the manifest of", e))?;
        let layer = self.layer(&manifest.layers, &digest)?;
        let too_big = Limit::DownloadBytes(limits.max_download_bytes);
        let tarball = |source| OciError::Tarball { url: self.url(), digest: digest.clone(), source };
        if u64::try_from(layer.size).unwrap_or(u64::MAX) > limits.max_download_bytes {
            return Err(tarball(TarError::Limit { limit: too_big, path: None }));
        }
        let mut out = Bounded { bytes: Vec::new(), most: limits.max_download_bytes };
        if let Err(e) = client.pull_blob(&at, layer, &mut out).await {
            if out.bytes.len() as u64 > limits.max_download_bytes {
                return Err(tarball(TarError::Limit { limit: too_big, path: None }));
            }
            return Err(self.registry_error("pulling a layer of", e));
        }
        let mut artifact = read_tar_gz(out.bytes.as_slice(), &digest, limits).map_err(tarball)?;
        artifact.files.retain(|path, _| !ignore.matched_path_or_any_parents(path, false).is_ignore());
        Ok(Fetch::Fetched(artifact))
    }

    /// The digest of the manifest the ref names.
    async fn resolve(&self, client: &Client, auth: &RegistryAuth) -> Result<String, OciError> {
        let (registry, repository) = (self.registry.clone(), self.repository.clone());
        let tag = match &self.reference {
            OciRef::Digest(d) => return Ok(d.clone()),
            OciRef::Tag(t) => t.clone(),
            OciRef::Semver(range) => {
                let any = Reference::with_tag(registry.clone(), repository.clone(), DEFAULT_TAG.into());
                let tags = client
                    .list_tags(&any, auth, None, None)
                    .await
                    .map_err(|e| self.registry_error("listing the tags of", e))?;
                let best = highest_in_range(range, tags.tags.iter().map(String::as_str))
                    .map_err(|reason| OciError::Ref { reference: self.reference.to_string(), reason })?;
                best.ok_or_else(|| self.not_found())?.to_string()
            }
        };
        let reference = Reference::with_tag(registry, repository, tag);
        client.fetch_manifest_digest(&reference, auth).await.map_err(|e| match e {
            e if unknown(&e) => self.not_found(),
            e => self.registry_error("resolving the ref of", e),
        })
    }

    fn layer<'a>(&self, layers: &'a [OciDescriptor], digest: &str) -> Result<&'a OciDescriptor, OciError> {
        let found = match &self.media_type {
            Some(m) => layers.iter().find(|l| &l.media_type == m),
            None => layers.first(),
        };
        found.ok_or_else(|| OciError::Layer {
            url: self.url(),
            digest: digest.into(),
            reason: match &self.media_type {
                Some(m) => format!("no layer of media type {m} (layerSelector.mediaType)"),
                None => "the manifest has no layer".into(),
            },
        })
    }

    /// Refuses a registry the egress policy denies: its name, and every address it
    /// resolves to ([`Reach::allows_host`]).
    async fn check_reach(&self, reach: &Reach) -> Result<(), OciError> {
        // `host`, `host:port`, `[::1]:port`.
        let (host, port) = match self.registry.rsplit_once(':') {
            Some((h, p)) if p.parse::<u16>().is_ok() && (!h.contains(':') || h.ends_with(']')) => (h, p.parse().ok()),
            _ => (self.registry.as_str(), None),
        };
        let (host, port) = (host.to_string(), port.unwrap_or(if self.insecure { 80 } else { 443 }));
        let reach = reach.clone();
        let allowed = tokio::task::spawn_blocking(move || reach.allows_host(&host, port)).await;
        let resolve = |message: String| OciError::Resolve { url: self.url(), message };
        match allowed.map_err(|e| resolve(e.to_string()))? {
            Ok(()) => Ok(()),
            Err(HostRefused::Egress(source)) => Err(OciError::Egress { url: self.url(), source }),
            Err(HostRefused::Resolve(e)) => Err(resolve(e.to_string())),
        }
    }

    fn registry_error(&self, step: &'static str, source: OciDistributionError) -> OciError {
        OciError::Registry { step, url: self.url(), source }
    }

    fn not_found(&self) -> OciError {
        OciError::NotFound { url: self.url(), reference: self.reference.to_string() }
    }
}

/// Whether the registry says it has no such manifest (or repository).
fn unknown(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => {
            envelope.errors.iter().any(|e| matches!(e.code, OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown))
        }
        _ => false,
    }
}

/// A layer's bytes, refused once there are more than `most` of them.
struct Bounded {
    bytes: Vec<u8>,
    most: u64,
}

impl AsyncWrite for Bounded {
    fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.bytes.extend_from_slice(buf);
        if self.bytes.len() as u64 > self.most {
            return Poll::Ready(Err(std::io::Error::other("over the download limit")));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
