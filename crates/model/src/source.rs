//! A Git repository as a source of desired state: the `GitRepository` document and its
//! spec, in Flux's words (`url`, `ref`, `interval`, `secretRef`, `ignore`), and its
//! rules; and [`Source`], either kind of source (this or an
//! [`OCIRepository`](crate::oci::OCIRepository)) as the store and the fetcher read it.

use crate::document::{Document, ObjectMeta};
use crate::error::FieldError;
use crate::names::check_dns1123_label;
use crate::oci::OCIRepository;
use crate::rollout::Wait;
use crate::syncset::SourceKind;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A `GitRepository` document: a repository's ref, fetched at each new revision into
/// an artifact that SyncSets read their resources from (`spec.sourceRef`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitRepository {
    pub metadata: ObjectMeta,
    pub spec: GitRepositorySpec,
    /// Set by the store when read (what is given on input is ignored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SourceStatus>,
}

/// What the store holds of a source.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SourceStatus {
    /// The revision (commit id) of the artifact its SyncSets read; absent until the
    /// first fetch succeeds. A fetch that fails keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// When that revision was stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fetched_at: Option<Timestamp>,
}

/// Where the manifests live and how often to look.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitRepositorySpec {
    /// `https://host/org/repo.git`, `ssh://git@host/org/repo.git` or `git@host:org/repo.git`
    /// (`http://` too, for servers inside the network; `file://` only on a hub started
    /// to allow local sources, for tests and local use). No credentials in it: they
    /// belong in the Secret `secretRef` names.
    pub url: String,
    /// What to follow: exactly one of `branch`, `tag`, `semver` and `commit`.
    #[serde(rename = "ref")]
    pub reference: GitReference,
    /// How often to look for a new revision when no push notification says so; from
    /// 10s to 24h.
    #[serde(default = "default_interval")]
    pub interval: Wait,
    /// The Secret with the credentials to read the repository (token, username and
    /// password, or an SSH key and known hosts), in the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalRef>,
    /// The Secret whose `token` push notifications are signed with (GitHub's and the
    /// generic `sha256=` HMAC) or carry (GitLab's token), in the object's namespace:
    /// without it, `POST /v1/sources/{namespace}/{name}/hook` refuses every
    /// notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook_secret_ref: Option<LocalRef>,
    /// Paths to leave out, one .gitignore pattern a line (`*.md`, `/docs/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore: Option<String>,
}

/// Which revision of the repository to follow.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitReference {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The highest tag that is a version in this range (`>=1.2.0, <2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// A full commit id (40 or 64 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// An object of the same namespace, by name.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalRef {
    pub name: String,
}

const MIN_INTERVAL: Duration = Duration::from_secs(10);
const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// The longest URL, ref and ignore line; and the most ignore lines.
pub(crate) const MAX_URL: usize = 2048;
const MAX_REF: usize = 255;
const MAX_IGNORE_LINES: usize = 1000;
const MAX_IGNORE_LINE: usize = 1024;

pub(crate) fn default_interval() -> Wait {
    Wait(Duration::from_secs(300))
}

impl GitRepositorySpec {
    /// Checks every rule; the first broken one, with its field.
    pub fn validate(&self) -> Result<(), FieldError> {
        check_url(&self.url).map_err(|e| e.at("url"))?;
        self.reference.validate().map_err(|e| e.under("ref"))?;
        check_common(self.interval, &self.secret_ref, &self.webhook_secret_ref, self.ignore.as_deref())
    }

    /// The ignore patterns, one a line, blank lines and `#` comments left out.
    pub fn ignore_patterns(&self) -> Vec<String> {
        ignore_patterns(self.ignore.as_deref())
    }
}

/// The rules every kind of source shares: its interval, the names of its Secrets, and
/// its ignore patterns.
pub(crate) fn check_common(
    interval: Wait,
    secret_ref: &Option<LocalRef>,
    webhook_secret_ref: &Option<LocalRef>,
    ignore: Option<&str>,
) -> Result<(), FieldError> {
    let Wait(every) = interval;
    if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&every) {
        return Err(FieldError::new("interval", "from 10s to 24h"));
    }
    for (field, r) in [("secretRef.name", secret_ref), ("webhookSecretRef.name", webhook_secret_ref)] {
        if let Some(r) = r {
            check_dns1123_label(&r.name).map_err(|rule| FieldError::new(field, rule.to_string()))?;
        }
    }
    if let Some(ignore) = ignore {
        if ignore.lines().count() > MAX_IGNORE_LINES {
            return Err(FieldError::new("ignore", format!("more than {MAX_IGNORE_LINES} lines (the limit)")));
        }
        if ignore.lines().any(|l| l.len() > MAX_IGNORE_LINE) {
            return Err(FieldError::new("ignore", format!("a line longer than {MAX_IGNORE_LINE} bytes (the limit)")));
        }
    }
    Ok(())
}

/// Ignore patterns, one a line, blank lines and `#` comments left out.
pub fn ignore_patterns(ignore: Option<&str>) -> Vec<String> {
    let lines = ignore.unwrap_or_default().lines().map(str::trim);
    lines.filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from).collect()
}

/// A source of either kind, as the store and the fetcher read it: what every kind
/// shares is asked of this, not of each kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    Git(GitRepository),
    Oci(OCIRepository),
}

impl Source {
    pub fn kind(&self) -> SourceKind {
        match self {
            Source::Git(_) => SourceKind::GitRepository,
            Source::Oci(_) => SourceKind::OCIRepository,
        }
    }

    pub fn metadata(&self) -> &ObjectMeta {
        match self {
            Source::Git(g) => &g.metadata,
            Source::Oci(o) => &o.metadata,
        }
    }

    pub fn status(&self) -> Option<&SourceStatus> {
        match self {
            Source::Git(g) => g.status.as_ref(),
            Source::Oci(o) => o.status.as_ref(),
        }
    }

    pub fn set_status(&mut self, status: Option<SourceStatus>) {
        match self {
            Source::Git(g) => g.status = status,
            Source::Oci(o) => o.status = status,
        }
    }

    /// The revision its SyncSets read, if one is stored.
    pub fn revision(&self) -> Option<&str> {
        self.status().and_then(|s| s.revision.as_deref())
    }

    pub fn interval(&self) -> Wait {
        match self {
            Source::Git(g) => g.spec.interval,
            Source::Oci(o) => o.spec.interval,
        }
    }

    pub fn secret_ref(&self) -> Option<&LocalRef> {
        match self {
            Source::Git(g) => g.spec.secret_ref.as_ref(),
            Source::Oci(o) => o.spec.secret_ref.as_ref(),
        }
    }

    pub fn webhook_secret_ref(&self) -> Option<&LocalRef> {
        match self {
            Source::Git(g) => g.spec.webhook_secret_ref.as_ref(),
            Source::Oci(o) => o.spec.webhook_secret_ref.as_ref(),
        }
    }

    /// Where it is fetched from (`https://…`, `oci://…`).
    pub fn url(&self) -> &str {
        match self {
            Source::Git(g) => &g.spec.url,
            Source::Oci(o) => &o.spec.url,
        }
    }

    pub fn into_document(self) -> Document {
        match self {
            Source::Git(g) => Document::GitRepository(g),
            Source::Oci(o) => Document::OCIRepository(o),
        }
    }
}

impl GitReference {
    fn validate(&self) -> Result<(), FieldError> {
        let set: Vec<(&str, &String)> =
            [("branch", &self.branch), ("tag", &self.tag), ("semver", &self.semver), ("commit", &self.commit)]
                .into_iter()
                .filter_map(|(name, v)| v.as_ref().map(|v| (name, v)))
                .collect();
        let [(name, value)] = set[..] else {
            return Err(FieldError::message("exactly one of branch, tag, semver and commit"));
        };
        if value.is_empty() || value.len() > MAX_REF || value.chars().any(|c| c.is_control()) {
            return Err(FieldError::new(name, format!("1 to {MAX_REF} characters, none a control character")));
        }
        if name == "commit" && !(matches!(value.len(), 40 | 64) && value.chars().all(|c| c.is_ascii_hexdigit())) {
            return Err(FieldError::new(name, "a full commit id: 40 or 64 hex digits"));
        }
        Ok(())
    }
}

/// A URL a source may name: https, http, ssh or scp-like (`git@host:path`), with a host
/// and without a password (credentials go in the Secret `secretRef` names); or a
/// `file://` path, which only a hub that allows local sources fetches.
fn check_url(url: &str) -> Result<(), FieldError> {
    if url.len() > MAX_URL || url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(FieldError::message(format!("at most {MAX_URL} characters, no spaces or control characters")));
    }
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (scheme, rest),
        // `git@host:org/repo.git`: ssh, as git reads it.
        None if url.split_once(':').is_some_and(|(h, _)| !h.is_empty() && !h.contains('/')) => ("ssh", url),
        None => return Err(FieldError::message("a URL such as https://host/org/repo.git")),
    };
    if scheme == "file" {
        return match rest.strip_prefix('/') {
            Some(_) => Ok(()),
            None => Err(FieldError::message("a file:// URL names an absolute path: file:///srv/fleet.git")),
        };
    }
    if !matches!(scheme, "https" | "http" | "ssh") {
        return Err(FieldError::message(format!("the scheme {scheme:?} is not one of https, http, ssh and file")));
    }
    let authority = rest.split(['/', ':']).next().unwrap_or_default();
    let userinfo = userinfo(url);
    if userinfo.is_some_and(|u| u.contains(':')) || (scheme != "ssh" && userinfo.is_some()) {
        return Err(FieldError::message("credentials in the URL: put them in the Secret secretRef names"));
    }
    let host = authority.rsplit('@').next().unwrap_or_default();
    if host.is_empty() {
        return Err(FieldError::message("no host"));
    }
    Ok(())
}

/// The user information of a URL, before the `@` of its host (`user:password` of
/// `https://user:password@host/…`, `git` of `git@host:org/repo.git`), if it has some.
pub fn userinfo(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest[..rest.find('/').unwrap_or(rest.len())].rsplit_once('@').map(|(user, _)| user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> Result<GitRepositorySpec, String> {
        let spec: GitRepositorySpec = serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        spec.validate().map_err(|e| e.to_string())?;
        Ok(spec)
    }

    #[test]
    fn a_spec_as_flux_writes_it_is_taken_with_its_defaults() {
        let s = spec(
            "url: https://git.example/org/fleet.git\nref: {branch: main}\nignore: |\n  # docs\n  *.md\n\n  /docs/\n",
        )
        .expect("valid");
        assert_eq!(s.interval, Wait(Duration::from_secs(300)));
        assert_eq!(s.ignore_patterns(), ["*.md", "/docs/"]);
        for url in [
            "ssh://git@git.example/org/fleet.git",
            "git@git.example:org/fleet.git",
            "http://10.0.0.5/fleet",
            "file:///srv/fleet.git",
        ] {
            spec(&format!("url: {url}\nref: {{tag: v1.0.0}}\ninterval: 1m")).expect(url);
        }
    }

    #[test]
    fn each_broken_rule_names_its_field() {
        let broken = [
            (
                "url: ftp://host/x\nref: {branch: main}",
                "url: the scheme \"ftp\" is not one of https, http, ssh and file",
            ),
            ("url: file://etc\nref: {branch: main}", "url: a file:// URL names an absolute path"),
            ("url: https://bot:s3cret@host/x\nref: {branch: main}", "url: credentials in the URL"),
            ("url: https://token@host/x\nref: {branch: main}", "url: credentials in the URL"),
            ("url: https://host/x\nref: {}", "ref: exactly one of branch, tag, semver and commit"),
            ("url: https://host/x\nref: {branch: main, tag: v1}", "ref: exactly one"),
            ("url: https://host/x\nref: {commit: abc}", "ref.commit: a full commit id"),
            ("url: https://host/x\nref: {branch: main}\ninterval: 1s", "interval: from 10s to 24h"),
            ("url: https://host/x\nref: {branch: main}\nsecretRef: {name: ''}", "secretRef.name: "),
            ("url: https://host/x\nref: {branch: main}\nwebhookSecretRef: {name: A}", "webhookSecretRef.name: "),
        ];
        for (yaml, want) in broken {
            let err = spec(yaml).expect_err(yaml);
            assert!(err.starts_with(want), "{yaml}: {err}");
        }
        assert!(spec("url: https://host/x\nref: {branch: main}\nbogus: 1").is_err(), "unknown fields are refused");
    }
}
