//! An OCI artifact as a source of desired state: the `OCIRepository` document and its
//! spec, in Flux's words (`url`, `ref`, `layerSelector`, `interval`, `secretRef`,
//! `insecure`, `ignore`), and its rules.

use crate::document::ObjectMeta;
use crate::error::FieldError;
use crate::rollout::Wait;
use crate::source::{check_common, default_interval, LocalRef, SourceStatus, MAX_URL};
use serde::{Deserialize, Serialize};

/// An `OCIRepository` document: an artifact of a registry (a tag, the highest tag in a
/// version range, or a digest), pulled at each new digest into an artifact that
/// SyncSets read their resources from (`spec.sourceRef`). Its revision is the digest of
/// the manifest pulled (`sha256:…`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OCIRepository {
    pub metadata: ObjectMeta,
    pub spec: OciRepositorySpec,
    /// Set by the store when read (what is given on input is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SourceStatus>,
}

/// Which artifact, from where, and how often to look.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OciRepositorySpec {
    /// `oci://host[:port]/repository` (no tag or digest: those go in `ref`). No
    /// credentials in it: they belong in the Secret `secretRef` names.
    pub url: String,
    /// What to follow: at most one of `tag`, `semver` and `digest`; `tag: latest` if
    /// none is set.
    #[serde(rename = "ref", default, skip_serializing_if = "OciReference::is_default")]
    pub reference: OciReference,
    /// The layer that holds the manifests, a gzipped tarball: the first whose media type
    /// is `layerSelector.mediaType`, or the first layer if it is not set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_selector: Option<LayerSelector>,
    /// How often to look for a new digest when no push notification says so; from
    /// 10s to 24h.
    #[serde(default = "default_interval")]
    pub interval: Wait,
    /// The Secret with the registry's credentials (`username` and `password`, or a
    /// token as the password), in the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalRef>,
    /// The Secret whose `token` push notifications are signed with, as for a
    /// GitRepository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret_ref: Option<LocalRef>,
    /// Speak plain HTTP to the registry (for a registry inside the network or on the
    /// hub's own host); HTTPS otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub insecure: bool,
    /// Paths of the layer to leave out, one .gitignore pattern a line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<String>,
}

/// Which artifact of the repository to follow.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OciReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The highest tag that is a version in this range (`>=1.2.0, <2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// A manifest's digest: `sha256:` and 64 hex digits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// How the layer that holds the manifests is found.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LayerSelector {
    /// e.g. `application/vnd.cncf.flux.content.v1.tar+gzip`.
    pub media_type: String,
}

/// The tag followed when `ref` sets none.
pub const DEFAULT_TAG: &str = "latest";
const MAX_MEDIA_TYPE: usize = 255;

impl OciRepositorySpec {
    /// Checks every rule; the first broken one, with its field.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_oci_url(&self.url).map_err(|e| e.at("url"))?;
        self.reference.validate().map_err(|e| e.under("ref"))?;
        if let Some(l) = &self.layer_selector {
            let m = &l.media_type;
            if m.is_empty() || m.len() > MAX_MEDIA_TYPE || !m.contains('/') || m.chars().any(|c| c.is_whitespace()) {
                let rule = format!("a media type such as application/vnd.cncf.flux.content.v1.tar+gzip, at most {MAX_MEDIA_TYPE} characters");
                return Err(FieldError::new("layerSelector.mediaType", rule));
            }
        }
        check_common(self.interval, &self.secret_ref, &self.webhook_secret_ref, self.ignore.as_deref())
    }

    /// The ignore patterns, one a line, blank lines and `#` comments left out.
    pub fn ignore_patterns(&self) -> Vec<String> {
        crate::source::ignore_patterns(self.ignore.as_deref())
    }

    /// `host[:port]` and the repository's path of the URL (valid, see [`Self::validate`]).
    pub fn registry_and_repository(&self) -> (&str, &str) {
        let rest = self.url.strip_prefix("oci://").unwrap_or(&self.url);
        rest.split_once('/').unwrap_or((rest, ""))
    }
}

impl OciReference {
    fn is_default(&self) -> bool {
        *self == OciReference::default()
    }

    fn validate(&self) -> Result<(), FieldError> {
        let set: Vec<(&str, &String)> = [("tag", &self.tag), ("semver", &self.semver), ("digest", &self.digest)]
            .into_iter()
            .filter_map(|(name, v)| v.as_ref().map(|v| (name, v)))
            .collect();
        match set[..] {
            [] => Ok(()),
            [("tag", tag)] if !is_tag(tag) => Err(FieldError::new(
                "tag",
                "1 to 128 of letters, digits, `_`, `.` and `-`, not starting with `.` or `-`",
            )),
            [("semver", range)] if range.is_empty() || range.len() > 255 => {
                Err(FieldError::new("semver", "a version range of 1 to 255 characters"))
            }
            [("digest", d)] if !is_digest(d) => Err(FieldError::new("digest", "`sha256:` and 64 lowercase hex digits")),
            [_] => Ok(()),
            _ => Err(FieldError::message("at most one of tag, semver and digest")),
        }
    }
}

/// A tag as the distribution spec allows it: `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
pub fn is_tag(tag: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-');
    tag.len() <= 128 && tag.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') && tag.chars().all(ok)
}

fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha256:").is_some_and(|h| h.len() == 64 && h.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')))
}

/// `oci://host[:port]/path`: a host, and a repository path of lowercase path
/// components (as the distribution spec names repositories); no credentials, tag or
/// digest.
fn check_oci_url(url: &str) -> Result<(), FieldError> {
    if url.len() > MAX_URL {
        return Err(FieldError::message(format!("at most {MAX_URL} characters")));
    }
    let Some(rest) = url.strip_prefix("oci://") else {
        return Err(FieldError::message("a URL such as oci://registry.example/fleet/manifests"));
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    if host.contains('@') {
        return Err(FieldError::message("credentials in the URL: put them in the Secret secretRef names"));
    }
    let host_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']');
    if host.is_empty() || !host.chars().all(host_ok) {
        return Err(FieldError::message("no host, or a host that is not a name or address with an optional port"));
    }
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
            && p.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
    };
    if !path.split('/').all(part_ok) {
        return Err(FieldError::message(
            "a repository path of lowercase letters, digits, `.`, `_` and `-` between `/`, without a tag or digest (they go in `ref`)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn spec(yaml: &str) -> Result<OciRepositorySpec, String> {
        let spec: OciRepositorySpec = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        spec.validate().map_err(|e| e.to_string())?;
        Ok(spec)
    }

    #[test]
    fn a_spec_as_flux_writes_it_is_taken_with_its_defaults() {
        let s = spec("url: oci://127.0.0.1:5000/fleet/manifests\ninsecure: true\n").expect("valid");
        assert_eq!(s.interval, Wait(Duration::from_secs(300)));
        assert_eq!(s.reference, OciReference::default(), "tag latest");
        assert_eq!(s.registry_and_repository(), ("127.0.0.1:5000", "fleet/manifests"));
        let digest = format!("sha256:{}", "a".repeat(64));
        for r in ["{tag: v1.2.0}", "{semver: '>=1.0, <2'}", &format!("{{digest: '{digest}'}}")] {
            spec(&format!(
                "url: oci://ghcr.io/org/fleet\nref: {r}\nlayerSelector: {{mediaType: application/x-tar+gzip}}"
            ))
            .expect(r);
        }
    }

    #[test]
    fn each_broken_rule_names_its_field() {
        let broken = [
            ("url: https://ghcr.io/org/fleet", "url: a URL such as oci://"),
            ("url: oci://bot:pw@ghcr.io/org/fleet", "url: credentials in the URL"),
            ("url: oci://ghcr.io/Org/fleet", "url: a repository path of lowercase"),
            ("url: oci://ghcr.io/org/fleet:v1", "url: a repository path"),
            ("url: oci:///org/fleet", "url: no host"),
            (
                "url: oci://ghcr.io/org/fleet\nref: {tag: v1, digest: 'sha256:00'}",
                "ref: at most one of tag, semver and digest",
            ),
            ("url: oci://ghcr.io/org/fleet\nref: {tag: '-x'}", "ref.tag: "),
            ("url: oci://ghcr.io/org/fleet\nref: {digest: 'sha256:abc'}", "ref.digest: "),
            ("url: oci://ghcr.io/org/fleet\nlayerSelector: {mediaType: tarball}", "layerSelector.mediaType: "),
            ("url: oci://ghcr.io/org/fleet\ninterval: 1s", "interval: from 10s to 24h"),
            ("url: oci://ghcr.io/org/fleet\nsecretRef: {name: A}", "secretRef.name: "),
        ];
        for (yaml, want) in broken {
            let err = spec(yaml).expect_err(yaml);
            assert!(err.starts_with(want), "{yaml}: {err}");
        }
        assert!(spec("url: oci://ghcr.io/org/fleet\nbogus: 1").is_err(), "unknown fields are refused");
    }
}
