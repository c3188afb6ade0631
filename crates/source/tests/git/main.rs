//! Git sources against real Git servers: `git http-backend` over smart HTTP on a
//! loopback port (`fleetsync_testkit::git`), and `file://`. Repositories are made with the
//! `git` command. What a fetch got is checked against what was committed; how often
//! it downloaded, against the server's own log of requests.

mod stored;

use fleetsync_applier::egress::EgressPolicy;
use fleetsync_model::{ParseBudget, SecretValue};
use fleetsync_source::{Basic, Fetch, GitError, GitRef, GitSource, Limit, Limits, Reach, SshKey};
use fleetsync_testkit::git::{GitServer, Repo, SshServer};
use std::sync::Arc;

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: NAME, namespace: apps}\ndata: {v: VALUE}\n";

fn cm(name: &str, value: &str) -> Vec<u8> {
    CM.replace("NAME", name).replace("VALUE", value).into_bytes()
}

fn source(url: &str, reference: GitRef) -> GitSource {
    GitSource { url: url.to_string(), reference, ignore: Vec::new(), auth: None, ssh: None }
}

fn fetched(f: Fetch) -> fleetsync_source::Artifact {
    match f {
        Fetch::Fetched(a) => a,
        Fetch::Unchanged { revision } => panic!("unchanged at {revision}, expected a fetch"),
    }
}

/// What the tests reach: the loopback servers they start, and `file://`.
fn reach() -> Reach {
    let loopback = "127.0.0.0/8".parse().expect("a rule");
    Reach { egress: Arc::new(EgressPolicy::default().allowing(loopback)), local_files: true }
}

fn branch(b: &str) -> GitRef {
    GitRef::Branch(b.to_string())
}

#[test]
fn a_branch_over_smart_http_is_downloaded_once_per_revision() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "fleet");
    let first = repo.commit(&[("apps/a.yaml", &cm("a", "1")), ("apps/b.yaml", &cm("b", "1"))], "first");
    let server = GitServer::start(root.path().to_path_buf());
    let src = source(&format!("{}/fleet", server.url), branch("main"));
    let limits = Limits::default();

    let artifact = fetched(src.fetch(None, &reach(), &limits).expect("fetch"));
    assert_eq!(artifact.revision, first);
    assert_eq!(artifact.files["apps/a.yaml"], cm("a", "1"));
    assert_eq!(server.fetches(), 1, "{:?}", server.asked());

    // Polling an unchanged branch lists the refs and downloads nothing.
    let again = src.fetch(Some(&first), &reach(), &limits).expect("poll");
    assert_eq!(again, Fetch::Unchanged { revision: first.clone() });
    assert_eq!(server.fetches(), 1, "{:?}", server.asked());

    // A push: the next poll downloads the new revision, once.
    let second = repo.commit(&[("apps/b.yaml", &cm("b", "2"))], "second");
    let artifact = fetched(src.fetch(Some(&first), &reach(), &limits).expect("fetch the push"));
    assert_eq!(artifact.revision, second);
    assert_eq!(artifact.files["apps/b.yaml"], cm("b", "2"));
    assert_eq!(artifact.files["apps/a.yaml"], cm("a", "1"));
    assert_eq!(server.fetches(), 2, "{:?}", server.asked());
    let names: Vec<String> = artifact
        .manifests("apps", &ParseBudget::default())
        .expect("manifests")
        .iter()
        .map(|m| format!("{}={}", m.0["metadata"]["name"], m.0["data"]["v"]))
        .collect();
    assert_eq!(names, ["\"a\"=1", "\"b\"=2"]);
}

#[test]
fn tags_version_ranges_and_commits_resolve_to_what_was_committed() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "tags");
    let v1 = repo.commit(&[("app.yaml", &cm("app", "1"))], "v1");
    repo.git(&["tag", "-a", "v1.0.0", "-m", "one"]);
    let v12 = repo.commit(&[("app.yaml", &cm("app", "12"))], "v1.2");
    repo.git(&["tag", "v1.2.0"]);
    let v2 = repo.commit(&[("app.yaml", &cm("app", "2"))], "v2");
    repo.git(&["tag", "v2.0.0"]);
    let limits = Limits::default();
    let url = repo.file_url();

    let at = |reference: GitRef| fetched(source(&url, reference).fetch(None, &reach(), &limits).expect("fetch"));
    let annotated = at(GitRef::Tag("v1.0.0".into()));
    assert_eq!((annotated.revision.as_str(), &annotated.files["app.yaml"]), (v1.as_str(), &cm("app", "1")));
    assert_eq!(at(GitRef::Semver(">=1.1, <2".into())).revision, v12);
    assert_eq!(at(GitRef::Semver(">=1".into())).revision, v2);
    let old = at(GitRef::Commit(v1.clone()));
    assert_eq!((old.revision.as_str(), &old.files["app.yaml"]), (v1.as_str(), &cm("app", "1")));

    let missing = source(&url, branch("nope")).fetch(None, &reach(), &limits).expect_err("no such branch");
    assert!(matches!(missing, GitError::NotFound { .. }), "{missing}");
    assert!(missing.to_string().ends_with("has no branch \"nope\""), "{missing}");
    let none = source(&url, GitRef::Semver(">=3".into())).fetch(None, &reach(), &limits).expect_err("no such version");
    assert!(matches!(none, GitError::NotFound { .. }), "{none}");
}

#[test]
fn ignore_patterns_leave_files_out_and_submodule_free_trees_come_whole() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "ignore");
    repo.commit(
        &[
            ("apps/a.yaml", &cm("a", "1")),
            ("apps/README.md", b"# notes"),
            ("docs/guide.yaml", &cm("g", "1")),
            ("apps/keep.md", b"kept"),
        ],
        "files",
    );
    let mut src = source(&repo.file_url(), branch("main"));
    src.ignore = vec!["*.md".into(), "/docs/".into(), "!keep.md".into()];
    let artifact = fetched(src.fetch(None, &reach(), &Limits::default()).expect("fetch"));
    let paths: Vec<&str> = artifact.files.keys().map(String::as_str).collect();
    assert_eq!(paths, ["apps/a.yaml", "apps/keep.md"]);
}

/// What a fetch over a limit gives.
fn refused(src: &GitSource, limits: Limits) -> GitError {
    src.fetch(None, &reach(), &limits).expect_err("over a limit")
}

#[test]
fn a_repository_of_100k_files_is_refused_at_the_file_limit() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "many");
    repo.commit(&[("README", b"many files")], "start");
    repo.commit_many(100_000, |i| format!("d{:03}/f{i}.yaml", i % 1000));
    let err = refused(&source(&repo.file_url(), branch("main")), Limits::default());
    assert!(matches!(err, GitError::Limit { limit: Limit::Files(10_000), .. }), "{err}");
    assert!(err.to_string().contains("more than 10000 files (the limit)"), "{err}");
}

#[test]
fn a_large_file_too_many_bytes_a_deep_path_and_a_large_download_are_each_refused_by_name() {
    let root = tempfile::tempdir().expect("tempdir");
    let small =
        Limits { max_download_bytes: 1 << 20, max_files: 100, max_bytes: 3000, max_file_bytes: 2000, max_depth: 3 };

    let big = Repo::new(root.path(), "big");
    big.commit(&[("a.yaml", &[b'x'; 2001])], "big");
    let err = refused(&source(&big.file_url(), branch("main")), small);
    assert!(
        matches!(err, GitError::Limit { limit: Limit::FileBytes(2000), ref path, .. } if path.as_deref() == Some("a.yaml")),
        "{err}"
    );

    let bytes = Repo::new(root.path(), "bytes");
    bytes.commit(&[("a.yaml", &[b'x'; 1600]), ("b.yaml", &[b'y'; 1600])], "bytes");
    let err = refused(&source(&bytes.file_url(), branch("main")), small);
    assert!(matches!(err, GitError::Limit { limit: Limit::Bytes(3000), .. }), "{err}");

    let deep = Repo::new(root.path(), "deep");
    deep.commit(&[("a/b/c/d/e.yaml", &cm("e", "1"))], "deep");
    let err = refused(&source(&deep.file_url(), branch("main")), small);
    assert!(matches!(err, GitError::Limit { limit: Limit::Depth(3), .. }), "{err}");
    assert!(err.to_string().contains("a/b/c/d/e.yaml: a path more than 3 directories deep (the limit)"), "{err}");

    // 4 MiB that do not compress: the pack alone is over the download limit.
    let noise = Repo::new(root.path(), "noise");
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let random: Vec<u8> = (0..4 << 20)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    noise.commit(&[("blob.bin", &random)], "noise");
    let err = refused(
        &source(&noise.file_url(), branch("main")),
        Limits { max_file_bytes: 8 << 20, max_bytes: 8 << 20, ..small },
    );
    assert!(matches!(err, GitError::Limit { limit: Limit::DownloadBytes(_), .. }), "{err}");
}

#[test]
fn a_symlink_is_refused_by_its_path_unless_ignored() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "links");
    repo.commit(&[("apps/a.yaml", &cm("a", "1"))], "files");
    std::os::unix::fs::symlink("/etc/passwd", repo.dir.join("apps/evil.yaml")).expect("a symlink");
    repo.commit(&[], "a symlink out of the source");
    let mut src = source(&repo.file_url(), branch("main"));
    let err = refused(&src, Limits::default());
    assert!(matches!(err, GitError::Symlink { ref path, .. } if path == "apps/evil.yaml"), "{err}");
    src.ignore = vec!["evil.yaml".into()];
    let artifact = fetched(src.fetch(None, &reach(), &Limits::default()).expect("fetch"));
    assert_eq!(artifact.files.keys().collect::<Vec<_>>(), ["apps/a.yaml"]);
}

#[test]
fn credentials_in_a_url_never_show_in_an_error() {
    let src = source("http://fleet-bot:s3cr3t-t0ken@127.0.0.1:9/org/fleet.git", branch("main"));
    let err = src.fetch(None, &reach(), &Limits::default()).expect_err("nothing listens on port 9");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains("s3cr3t") && !shown.contains("fleet-bot"), "{shown}");
    assert!(shown.contains("http://127.0.0.1:9/org/fleet.git"), "{shown}");
}

#[test]
fn the_egress_policy_and_the_hubs_own_disk_are_out_of_reach_by_default() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "fleet");
    repo.commit(&[("a.yaml", &cm("a", "1"))], "first");
    let server = GitServer::start(root.path().to_path_buf());
    let hub = Reach::default();
    let refused =
        |url: &str| source(url, branch("main")).fetch(None, &hub, &Limits::default()).expect_err(url).to_string();

    let loopback = refused(&format!("{}/fleet", server.url));
    assert!(loopback.contains("egress to 127.0.0.1 is denied (loopback"), "{loopback}");
    let by_name = refused(&format!("{}/fleet", server.url.replace("127.0.0.1", "localhost")));
    assert!(by_name.contains("egress to localhost") && by_name.contains("is denied"), "{by_name}");
    let metadata = refused("http://169.254.169.254/latest/meta-data");
    assert!(metadata.contains("cloud metadata"), "{metadata}");
    let disk = refused(&repo.file_url());
    assert!(disk.contains("file:// reads the hub's own disk"), "{disk}");
    assert_eq!(server.asked(), Vec::new(), "nothing reached the server");
}

/// Credentials go over https only: over plain http the transport refuses to send them,
/// so a private repository on an http URL is refused whatever the credentials.
#[test]
fn credentials_are_never_sent_in_clear_text_nor_shown() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "private");
    repo.commit(&[("a.yaml", &cm("a", "1"))], "first");
    let server = GitServer::start_private(root.path().to_path_buf(), "fleet-bot", "s3cr3t-t0ken");
    let url = format!("{}/private", server.url);
    let with = |auth: Option<Basic>| GitSource { auth, ..source(&url, branch("main")) };

    let anonymous = with(None).fetch(None, &reach(), &Limits::default()).expect_err("no credentials");
    assert!(matches!(anonymous, GitError::Remote { .. }), "{anonymous}");
    let right =
        with(Some(Basic { username: "fleet-bot".into(), password: fleetsync_model::SecretValue::new("s3cr3t-t0ken") }));
    assert!(!format!("{right:?}").contains("s3cr3t"), "{right:?}");
    let err = right.fetch(None, &reach(), &Limits::default()).expect_err("credentials over http");
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("clear text") && !shown.contains("s3cr3t"), "{shown}");
    assert_eq!(server.fetches(), 0, "{:?}", server.asked());
}

/// Over SSH, a fetch uses the source's key and known hosts and nothing of the hub's: it
/// reads the repository with them, is refused by a host whose key `known_hosts` does
/// not list (no error holds the private key), and does not start without a key.
#[test]
fn an_ssh_remote_is_read_with_the_sources_key_and_known_hosts_only() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "fleet");
    let first = repo.commit(&[("apps/a.yaml", &cm("a", "1"))], "first");
    let server = SshServer::start(root.path());
    let key = SshKey { identity: SecretValue::new(server.identity.clone()), known_hosts: server.known_hosts.clone() };
    let with = |ssh: Option<SshKey>| GitSource { ssh, ..source(&server.url("fleet"), branch("main")) };
    let limits = Limits::default();

    let artifact = fetched(with(Some(key.clone())).fetch(None, &reach(), &limits).expect("fetch over ssh"));
    assert_eq!((artifact.revision.as_str(), &artifact.files["apps/a.yaml"]), (first.as_str(), &cm("a", "1")));

    let impostor = SshKey { known_hosts: server.impostor_known_hosts(), ..key.clone() };
    let err = with(Some(impostor)).fetch(None, &reach(), &limits).map(drop).expect_err("an unknown host key");
    let text = format!("{err} {err:?}");
    assert!(text.contains("known_hosts"), "{text}");
    assert!(!text.contains(server.identity.trim()) && !text.contains("PRIVATE KEY"), "{text}");

    let err = with(None).fetch(None, &reach(), &limits).map(drop).expect_err("no key");
    assert!(matches!(&err, GitError::Url { reason, .. } if reason.contains("identity")), "{err}");

    // An ssh URL reads a Secret's key; a username and password there are not a key.
    let basic: fleetsync_model::Secret =
        serde_saphyr::from_str("metadata: {name: basic}\nstringData: {username: bot, password: s3cret}\n")
            .expect("a Secret");
    let err = with(None).with_secret(&basic).map(drop).expect_err("no identity");
    assert!(matches!(&err, GitError::Credentials { reason, .. } if reason.contains("no `identity`")), "{err}");
    assert!(!err.to_string().contains("s3cret"), "{err}");
}
