//! A Git repository's ref, fetched into an [`Artifact`] only when its revision moved.
//!
//! [`GitSource::fetch`] asks the remote what it advertises for the ref (`ls-refs`,
//! narrowed to the ref's prefix), resolves the ref to a commit, and stops there if that
//! commit is the revision the caller already holds: a poll of an unchanged source
//! downloads no pack. Otherwise it fetches that one commit, shallow (depth 1), into a
//! bare repository in a temporary directory, reads the commit's tree within the
//! [`Limits`], and deletes the directory. The download is watched while it arrives and
//! stopped once it passes [`Limits::max_download_bytes`].
//!
//! What a tree may hold: regular files (kept unless an `ignore` pattern matches),
//! directories, and submodules (skipped: their content is another repository's). A
//! symlink is refused, naming its path, since it could point out of the source; an
//! `ignore` pattern that matches it lets the rest through.

use crate::limits::{Limit, Limits, Tally};
use crate::ssh::SshKey;
use fleetsync_applier::egress::{EgressError, EgressPolicy};
use fleetsync_model::error::causes;
use fleetsync_model::source::userinfo;
use fleetsync_model::{Artifact, GitRepositorySpec, Secret, SecretValue};
use gix::remote::Direction;
use std::collections::BTreeMap;
use std::net::ToSocketAddrs;
use std::num::NonZeroU32;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Which revision of a repository a source follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitRef {
    /// The branch's head.
    Branch(String),
    /// The commit a tag names (an annotated tag peeled).
    Tag(String),
    /// The highest tag that is a version (`1.2.3` or `v1.2.3`) in this range
    /// (`>=1.2, <2`, as Cargo writes ranges).
    Semver(String),
    /// One commit, by its full id.
    Commit(String),
}

/// A repository and the ref of it to follow.
#[derive(Debug, Clone)]
pub struct GitSource {
    /// `https://…`, `ssh://…` or `file://…`.
    pub url: String,
    pub reference: GitRef,
    /// Paths to leave out, in .gitignore's syntax (`*.md`, `/docs/`, `!keep.yaml`).
    pub ignore: Vec<String>,
    /// Credentials for an http(s) remote; without them none are sent (the hub never
    /// asks a terminal or a credential helper).
    pub auth: Option<Basic>,
    /// The key and known hosts for an ssh remote, which needs them.
    pub ssh: Option<SshKey>,
}

/// A username and password for an https remote. A token is a password, with the
/// username the host expects (`x-access-token` on GitHub, `oauth2` on GitLab, any on
/// many others). The password never prints ([`SecretValue`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Basic {
    pub username: String,
    pub password: SecretValue,
}

impl Basic {
    /// The credentials a source's Secret holds: `password` (or a token), and `username`
    /// (`git` if it has none). An error names the Secret and the key, never a value.
    pub fn from_secret(secret: &Secret) -> Result<Basic, GitError> {
        let name = &secret.metadata.name;
        let password = secret.get("password").filter(|p| !p.is_empty()).ok_or_else(|| GitError::Credentials {
            secret: name.clone(),
            reason: "it has no `password` (a password or a token)".into(),
        })?;
        let username = secret.get("username").map_or("git", |u| u.expose()).to_string();
        if username.is_empty() || username.contains(':') {
            let reason = "its `username` is empty or holds `:`".to_string();
            return Err(GitError::Credentials { secret: name.clone(), reason });
        }
        Ok(Basic { username, password: password.clone() })
    }
}

/// Where a fetch may reach: hosts as the hub's egress policy allows (the name, and
/// every address it resolves to, checked before the fetch), and `file://` URLs (the
/// hub's own disk) only when `local_files` is set, which is for tests and local use.
#[derive(Debug, Clone, Default)]
pub struct Reach {
    pub egress: Arc<EgressPolicy>,
    pub local_files: bool,
}

/// Why [`Reach::allows_host`] refused a host.
#[derive(Debug)]
pub(crate) enum HostRefused {
    Egress(EgressError),
    /// The name did not resolve.
    Resolve(std::io::Error),
}

impl Reach {
    /// Whether the egress policy allows `host` (a name, an address, `[v6]`) and every
    /// address it resolves to on `port`. Blocks while it resolves. The transport
    /// resolves the name again when it connects; a name re-pointed in between is not
    /// seen here.
    pub(crate) fn allows_host(&self, host: &str, port: u16) -> Result<(), HostRefused> {
        self.egress.check_host(host).map_err(HostRefused::Egress)?;
        let addrs: Vec<_> = (host.trim_start_matches('[').trim_end_matches(']'), port)
            .to_socket_addrs()
            .map_err(HostRefused::Resolve)?
            .collect();
        self.egress.check_resolved(host, &addrs).map_err(HostRefused::Egress)
    }
}

/// What a fetch found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetch {
    /// The ref is at the revision already held; nothing was downloaded.
    Unchanged { revision: String },
    /// A new revision, read whole.
    Fetched(Artifact),
}

/// Why a fetch failed. URLs in it are shown without user information.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("invalid source URL {url}: {reason}")]
    Url { url: String, reason: String },
    /// The egress policy refuses the URL's host or an address it resolves to.
    #[error("{url}: {source}")]
    Egress {
        url: String,
        #[source]
        source: EgressError,
    },
    /// The Secret a source names does not hold usable credentials.
    #[error("the Secret {secret} cannot be used to read the source: {reason}")]
    Credentials { secret: String, reason: String },
    #[error("invalid ref {reference}: {reason}")]
    Ref { reference: String, reason: String },
    #[error("invalid ignore pattern {pattern:?}: {reason}")]
    Ignore { pattern: String, reason: String },
    /// The remote could not be reached or answered something else than Git.
    #[error("{step} {url}: {message}")]
    Remote { step: &'static str, url: String, message: String },
    /// The remote advertises nothing the ref names.
    #[error("{url} has no {reference}")]
    NotFound { url: String, reference: String },
    /// The source broke one of the [`Limits`]; nothing of it was kept.
    #[error("{url}: {}{limit}", path.as_ref().map(|p| format!("{p}: ")).unwrap_or_default())]
    Limit { url: String, limit: Limit, path: Option<String> },
    #[error("{url}: {path} is a symlink: a source may hold regular files only (leave it out with `ignore`)")]
    Symlink { url: String, path: String },
    /// Reading what was fetched failed (the temporary repository, an object).
    #[error("reading {url} ({step}): {message}")]
    Local { step: &'static str, url: String, message: String },
}

impl std::fmt::Display for GitRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GitRef::Branch(b) => write!(f, "branch {b:?}"),
            GitRef::Tag(t) => write!(f, "tag {t:?}"),
            GitRef::Semver(r) => write!(f, "tag in the range {r:?}"),
            GitRef::Commit(c) => write!(f, "commit {c}"),
        }
    }
}

/// How often the download is looked at.
const WATCH_EVERY: Duration = Duration::from_millis(20);

impl GitSource {
    /// The source a `GitRepository`'s spec (valid, see [`GitRepositorySpec::validate`])
    /// names.
    pub fn from_spec(spec: &GitRepositorySpec) -> GitSource {
        let r = &spec.reference;
        let reference = match (&r.branch, &r.tag, &r.semver, &r.commit) {
            (_, Some(tag), _, _) => GitRef::Tag(tag.clone()),
            (_, _, Some(range), _) => GitRef::Semver(range.clone()),
            (_, _, _, Some(commit)) => GitRef::Commit(commit.clone()),
            (branch, ..) => GitRef::Branch(branch.clone().unwrap_or_else(|| "main".into())),
        };
        GitSource { url: spec.url.clone(), reference, ignore: spec.ignore_patterns(), auth: None, ssh: None }
    }

    /// With the credentials of a source's Secret, as its URL reads them: an ssh URL
    /// its `identity` and `known_hosts` ([`SshKey`]), any other a username and
    /// password ([`Basic`]). An error names the Secret and the key it lacks.
    pub fn with_secret(mut self, secret: &Secret) -> Result<GitSource, GitError> {
        let ssh = gix::url::parse(self.url.as_str().into()).is_ok_and(|u| u.scheme == gix::url::Scheme::Ssh);
        match ssh {
            true => self.ssh = Some(SshKey::from_secret(secret)?),
            false => self.auth = Some(Basic::from_secret(secret)?),
        }
        Ok(self)
    }

    /// Resolves the ref and, unless it is at `known`, fetches it (see the module docs),
    /// if `reach` allows the URL.
    pub fn fetch(&self, known: Option<&str>, reach: &Reach, limits: &Limits) -> Result<Fetch, GitError> {
        let url = gix::url::parse(self.url.as_str().into())
            .map_err(|e| GitError::Url { url: redact(&self.url), reason: scrub(&e.to_string(), &self.url) })?;
        self.check_reach(&url, reach)?;
        let ignore = self.ignore_matcher()?;
        let dir = tempfile::tempdir().map_err(|e| self.local("creating a temporary directory", e))?;
        let mut repo = gix::init_bare(dir.path()).map_err(|e| self.local("creating a repository", e))?;
        if url.scheme == gix::url::Scheme::Ssh {
            let Some(key) = &self.ssh else {
                let reason = "an ssh URL needs a secretRef naming a Secret with `identity` and `known_hosts`";
                return Err(GitError::Url { url: redact(&self.url), reason: reason.into() });
            };
            key.configure(&mut repo, dir.path()).map_err(|message| GitError::Local {
                step: "configuring ssh",
                url: redact(&self.url),
                message,
            })?;
        }
        let (wanted, revision) = self.resolve(&repo, &url)?;
        if known == Some(revision.as_str()) {
            return Ok(Fetch::Unchanged { revision });
        }
        let commit = self.download(&repo, &url, &wanted, dir.path(), limits)?;
        let files = self.read_tree(&repo, commit, &ignore, limits)?;
        Ok(Fetch::Fetched(Artifact { revision: commit.to_string(), files }))
    }

    /// Refuses a URL `reach` does not allow: `file://` unless local files are, another
    /// scheme than http(s), ssh and git, and a host (or an address of it) the egress
    /// policy denies ([`Reach::allows_host`]).
    fn check_reach(&self, url: &gix::Url, reach: &Reach) -> Result<(), GitError> {
        use gix::url::Scheme;
        let shown = redact(&self.url);
        let bad = |reason: &str| GitError::Url { url: shown.clone(), reason: reason.to_string() };
        match url.scheme {
            Scheme::File if reach.local_files => return Ok(()),
            Scheme::File => return Err(bad("file:// reads the hub's own disk, which sources may not")),
            Scheme::Http | Scheme::Https | Scheme::Ssh | Scheme::Git => {}
            Scheme::Ext(_) => return Err(bad("the scheme is not one of https, http, ssh and git")),
        }
        let host = url.host().ok_or_else(|| bad("no host"))?;
        reach.allows_host(host, url.port_or_default().unwrap_or(443)).map_err(|refused| match refused {
            HostRefused::Egress(source) => GitError::Egress { url: shown.clone(), source },
            HostRefused::Resolve(e) => {
                GitError::Remote { step: "resolving", url: shown.clone(), message: e.to_string() }
            }
        })
    }

    fn ignore_matcher(&self) -> Result<ignore::gitignore::Gitignore, GitError> {
        ignore_matcher(&self.ignore).map_err(|(pattern, reason)| GitError::Ignore { pattern, reason })
    }

    /// The refspec source to fetch and the commit it is at, from what the remote
    /// advertises (for a commit, the commit itself: remotes need not advertise it).
    fn resolve(&self, repo: &gix::Repository, url: &gix::Url) -> Result<(String, String), GitError> {
        let prefix = match &self.reference {
            GitRef::Commit(id) => {
                let parsed = gix::ObjectId::from_hex(id.as_bytes()).map_err(|e| GitError::Ref {
                    reference: self.reference.to_string(),
                    reason: format!("not a full commit id: {e}"),
                })?;
                return Ok((parsed.to_string(), parsed.to_string()));
            }
            GitRef::Branch(b) => format!("refs/heads/{b}"),
            GitRef::Tag(t) => format!("refs/tags/{t}"),
            GitRef::Semver(_) => "refs/tags/*".to_string(),
        };
        let advertised = self.list(repo, url, &prefix)?;
        let found = match &self.reference {
            GitRef::Semver(range) => best_version(range, &advertised)
                .map_err(|reason| GitError::Ref { reference: self.reference.to_string(), reason })?,
            _ => advertised.get(&prefix).map(|id| (prefix.clone(), id.clone())),
        };
        found.ok_or_else(|| GitError::NotFound { url: redact(&self.url), reference: self.reference.to_string() })
    }

    /// Ref name → commit id (annotated tags peeled), of the refs `spec` matches.
    fn list(&self, repo: &gix::Repository, url: &gix::Url, spec: &str) -> Result<BTreeMap<String, String>, GitError> {
        let remote = self.remote(repo, url, spec)?;
        let connection = remote.connect(Direction::Fetch).map_err(|e| self.remote_error("connecting to", e))?;
        let connection = self.authenticated(connection);
        let (map, _) = connection
            .ref_map(gix::progress::Discard, Default::default())
            .map_err(|e| self.remote_error("listing the refs of", e))?;
        let mut refs = BTreeMap::new();
        for r in &map.remote_refs {
            let (name, target, peeled) = r.unpack();
            if let Some(id) = peeled.or(target) {
                refs.insert(name.to_string(), id.to_string());
            }
        }
        Ok(refs)
    }

    /// `connection`, answering a request for credentials with [`GitSource::auth`], or
    /// with none.
    #[allow(clippy::result_large_err)] // the helper's result type is gix's
    fn authenticated<'a, 'r, T: gix::protocol::transport::client::blocking_io::Transport>(
        &self,
        connection: gix::remote::Connection<'a, 'r, T>,
    ) -> gix::remote::Connection<'a, 'r, T> {
        let auth = self.auth.clone();
        connection.with_credentials(move |action| match action {
            gix::credentials::helper::Action::Get(context) => {
                Ok(auth.clone().map(|a| gix::credentials::protocol::Outcome {
                    identity: gix::sec::identity::Account {
                        username: a.username,
                        password: a.password.expose().to_string(),
                        oauth_refresh_token: None,
                    },
                    next: context.into(),
                }))
            }
            _ => Ok(None),
        })
    }

    fn remote<'r>(&self, repo: &'r gix::Repository, url: &gix::Url, spec: &str) -> Result<gix::Remote<'r>, GitError> {
        let refspec =
            if spec.ends_with('*') { format!("+{spec}:refs/listed/*") } else { format!("+{spec}:refs/fetched") };
        repo.remote_at(url.clone())
            .map(|r| r.with_fetch_tags(gix::remote::fetch::Tags::None))
            .map_err(|e| GitError::Url { url: redact(&self.url), reason: scrub(&e.to_string(), &self.url) })?
            .with_refspecs([refspec.as_str()], Direction::Fetch)
            .map_err(|e| GitError::Ref { reference: self.reference.to_string(), reason: e.to_string() })
    }

    /// Fetches `wanted` (a ref name or a commit id), one commit deep; the commit.
    fn download(
        &self,
        repo: &gix::Repository,
        url: &gix::Url,
        wanted: &str,
        dir: &Path,
        limits: &Limits,
    ) -> Result<gix::ObjectId, GitError> {
        let remote = self.remote(repo, url, wanted)?;
        let connection = remote.connect(Direction::Fetch).map_err(|e| self.remote_error("connecting to", e))?;
        let connection = self.authenticated(connection);
        let depth = NonZeroU32::MIN;
        let prepare = connection
            .prepare_fetch(gix::progress::Discard, Default::default())
            .map_err(|e| self.remote_error("listing the refs of", e))?
            .with_shallow(gix::remote::fetch::Shallow::DepthAtRemote(depth));
        let (stop, done, over) = (AtomicBool::new(false), AtomicBool::new(false), AtomicBool::new(false));
        let outcome = std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    if size_of_dir(dir) > limits.max_download_bytes {
                        over.store(true, Ordering::Relaxed);
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                    std::thread::sleep(WATCH_EVERY);
                }
            });
            // The error is large; only its text is kept.
            let outcome = prepare.receive(gix::progress::Discard, &stop).map(drop).map_err(|e| causes(&e));
            done.store(true, Ordering::Relaxed);
            outcome
        });
        // Also what arrived between the last look and the end.
        if over.load(Ordering::Relaxed) || size_of_dir(dir) > limits.max_download_bytes {
            return Err(GitError::Limit {
                url: redact(&self.url),
                limit: Limit::DownloadBytes(limits.max_download_bytes),
                path: None,
            });
        }
        outcome.map_err(|message| GitError::Remote {
            step: "fetching from",
            url: redact(&self.url),
            message: scrub(&message, &self.url),
        })?;
        let fetched = repo
            .find_reference("refs/fetched")
            .map_err(|e| self.local("finding what was fetched", e))?
            .peel_to_id()
            .map_err(|e| self.local("peeling what was fetched", e))?;
        Ok(fetched.detach())
    }

    /// The files of `commit`'s tree, within `limits`.
    fn read_tree(
        &self,
        repo: &gix::Repository,
        commit: gix::ObjectId,
        ignore: &ignore::gitignore::Gitignore,
        limits: &Limits,
    ) -> Result<BTreeMap<String, Vec<u8>>, GitError> {
        let shown = redact(&self.url);
        let tree = repo
            .find_commit(commit)
            .map_err(|e| self.local("reading the commit", e))?
            .tree()
            .map_err(|e| self.local("reading the commit's tree", e))?;
        let mut recorder = gix::traverse::tree::Recorder::default();
        tree.traverse().breadthfirst(&mut recorder).map_err(|e| self.local("walking the tree", e))?;
        let limit = |limit, path: &str| GitError::Limit { url: shown.clone(), limit, path: Some(path.to_string()) };
        let mut tally = Tally::new(*limits);
        let mut files = BTreeMap::new();
        for entry in recorder.records {
            let path = entry.filepath.to_string();
            if entry.mode.is_tree() || entry.mode.is_commit() {
                continue;
            }
            if ignore.matched_path_or_any_parents(&path, false).is_ignore() {
                continue;
            }
            if entry.mode.is_link() {
                return Err(GitError::Symlink { url: shown.clone(), path });
            }
            let header = repo.find_header(entry.oid).map_err(|e| self.local("reading an object's header", e))?;
            tally.add(&path, header.size()).map_err(|l| limit(l, &path))?;
            let blob = repo.find_object(entry.oid).map_err(|e| self.local("reading a file", e))?;
            files.insert(path, blob.detach().data);
        }
        Ok(files)
    }

    fn remote_error(&self, step: &'static str, e: impl std::error::Error + 'static) -> GitError {
        let mut message = scrub(&causes(&e), &self.url);
        if self.ssh.is_some() {
            // ssh says why on its stderr, which does not reach the error.
            message.push_str(" (over ssh: does known_hosts list the host's key, and does the host take the identity?)");
        }
        GitError::Remote { step, url: redact(&self.url), message }
    }

    fn local(&self, step: &'static str, e: impl std::error::Error + 'static) -> GitError {
        GitError::Local { step, url: redact(&self.url), message: scrub(&causes(&e), &self.url) }
    }
}

/// The highest tag in `range` among `refs` (`refs/tags/NAME` → commit).
fn best_version(range: &str, refs: &BTreeMap<String, String>) -> Result<Option<(String, String)>, String> {
    let tags = refs.keys().filter_map(|name| name.strip_prefix("refs/tags/"));
    let Some(best) = highest_in_range(range, tags)? else { return Ok(None) };
    let name = format!("refs/tags/{best}");
    Ok(refs.get(&name).map(|id| (name.clone(), id.clone())))
}

/// The tag of the highest version (`1.2.3` or `v1.2.3`) in `range` (`>=1.2, <2`, as
/// Cargo writes ranges) among `tags`; other tags are passed over.
pub(crate) fn highest_in_range<'a>(
    range: &str,
    tags: impl Iterator<Item = &'a str>,
) -> Result<Option<&'a str>, String> {
    let req = semver::VersionReq::parse(range).map_err(|e| format!("not a version range: {e}"))?;
    let best = tags
        .filter_map(|tag| {
            let version = semver::Version::parse(tag.strip_prefix('v').unwrap_or(tag)).ok()?;
            req.matches(&version).then_some((version, tag))
        })
        .max_by(|a, b| a.0.cmp(&b.0));
    Ok(best.map(|(_, tag)| tag))
}

/// The matcher of .gitignore patterns; a bad pattern, with why.
pub(crate) fn ignore_matcher(patterns: &[String]) -> Result<ignore::gitignore::Gitignore, (String, String)> {
    let mut builder = ignore::gitignore::GitignoreBuilder::new("/");
    for pattern in patterns {
        builder.add_line(None, pattern).map_err(|e| (pattern.clone(), e.to_string()))?;
    }
    builder.build().map_err(|e| (patterns.join(", "), e.to_string()))
}

/// Bytes of the files under `dir`.
fn size_of_dir(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size_of_dir(&e.path()),
            Ok(_) => e.metadata().map(|m| m.len()).unwrap_or(0),
            Err(_) => 0,
        })
        .sum()
}

/// `url` without its user information (`https://token@host/…` → `https://host/…`).
pub fn redact(url: &str) -> String {
    user_part(url).map_or_else(|| url.to_string(), |part| url.replacen(&part, "", 1))
}

/// `message` without the user information of `url`, wherever it shows.
fn scrub(message: &str, url: &str) -> String {
    user_part(url).map_or_else(|| message.to_string(), |part| message.replace(&part, ""))
}

/// The `user:password@` of a `scheme://` URL (an scp-like `git@host:…` names a user
/// only).
fn user_part(url: &str) -> Option<String> {
    url.contains("://").then(|| userinfo(url)).flatten().map(|user| format!("{user}@"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_names_its_ref_and_ignore_patterns() {
        let spec: GitRepositorySpec = serde_saphyr::from_str(
            "url: https://host/fleet.git\nref: {semver: '>=1, <2'}\nignore: \"*.md\\n# note\\n/docs/\"",
        )
        .expect("a spec");
        let src = GitSource::from_spec(&spec);
        assert_eq!(src.reference, GitRef::Semver(">=1, <2".into()));
        assert_eq!(src.ignore, ["*.md", "/docs/"]);
    }

    #[test]
    fn credentials_come_from_a_secrets_password_and_username_and_errors_name_keys_only() {
        let secret = |pairs: &[(&str, &str)]| {
            let mut s =
                Secret { metadata: fleetsync_model::ObjectMeta::new("git-creds"), string_data: Default::default() };
            for (k, v) in pairs {
                s.string_data.insert(k.to_string(), SecretValue::new(*v));
            }
            s
        };
        let token = Basic::from_secret(&secret(&[("password", "ghp_t0ken")])).expect("a token");
        assert_eq!((token.username.as_str(), token.password.expose()), ("git", "ghp_t0ken"));
        let basic = Basic::from_secret(&secret(&[("username", "bot"), ("password", "pw")])).expect("basic");
        assert_eq!(basic.username, "bot");
        assert!(!format!("{basic:?}").contains("pw\""), "{basic:?}");
        let none = Basic::from_secret(&secret(&[("username", "bot")])).expect_err("no password").to_string();
        assert_eq!(
            none,
            "the Secret git-creds cannot be used to read the source: it has no `password` (a password or a token)"
        );
        let colon = Basic::from_secret(&secret(&[("username", "a:b"), ("password", "s3cret")])).expect_err("a colon");
        assert!(!colon.to_string().contains("s3cret"), "{colon}");
    }

    #[test]
    fn user_information_never_shows() {
        assert_eq!(redact("https://x-token:s3cret@git.example/org/repo.git"), "https://git.example/org/repo.git");
        assert_eq!(redact("ssh://git@host:22/repo"), "ssh://host:22/repo");
        assert_eq!(redact("file:///srv/repo"), "file:///srv/repo");
        assert_eq!(redact("https://host/a@b"), "https://host/a@b");
    }

    #[test]
    fn the_highest_version_in_the_range_wins_with_or_without_a_v() {
        let refs: BTreeMap<String, String> = [("v1.2.0", "a"), ("1.10.0", "b"), ("v2.0.0", "c"), ("latest", "d")]
            .into_iter()
            .map(|(t, id)| (format!("refs/tags/{t}"), id.to_string()))
            .collect();
        assert_eq!(best_version(">=1.2, <2", &refs), Ok(Some(("refs/tags/1.10.0".into(), "b".into()))));
        assert_eq!(best_version(">=3", &refs), Ok(None));
        assert!(best_version("not a range", &refs).is_err());
    }
}
