//! OCI sources against a real registry: Debian's `docker-registry` on a loopback port
//! (`fleetsync_testkit::registry`), artifacts pushed with the OCI client as Flux pushes
//! them. What a pull got is checked against what was pushed; how often it downloaded,
//! against the registry's own access log.

use fleetsync_applier::egress::EgressPolicy;
use fleetsync_source::{Fetch, Limit, Limits, OciError, OciRef, OciSource, Reach};
use fleetsync_testkit::registry::{tar_gz, Registry, CONTENT_TYPE};
use std::sync::Arc;

const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: NAME, namespace: apps}\ndata: {v: VALUE}\n";

fn cm(name: &str, value: &str) -> Vec<u8> {
    CM.replace("NAME", name).replace("VALUE", value).into_bytes()
}

fn source(registry: &Registry, repository: &str, reference: OciRef) -> OciSource {
    OciSource {
        registry: registry.addr.clone(),
        repository: repository.into(),
        reference,
        media_type: None,
        insecure: true,
        ignore: Vec::new(),
        auth: None,
    }
}

fn tag(t: &str) -> OciRef {
    OciRef::Tag(t.into())
}

/// What the tests reach: the loopback registry.
fn reach() -> Reach {
    let loopback = "127.0.0.0/8".parse().expect("a rule");
    Reach { egress: Arc::new(EgressPolicy::default().allowing(loopback)), local_files: false }
}

fn fetched(f: Fetch) -> fleetsync_source::Artifact {
    match f {
        Fetch::Fetched(a) => a,
        Fetch::Unchanged { revision } => panic!("unchanged at {revision}, expected a pull"),
    }
}

#[tokio::test]
async fn a_tag_is_pulled_once_per_digest_and_a_moved_tag_again() {
    let registry = Registry::start();
    let (a1, b1) = (cm("a", "1"), cm("b", "1"));
    let first = registry.push("fleet", "prod", &[("apps/a.yaml", &a1), ("./apps/b.yaml", &b1)]).await;
    let src = source(&registry, "fleet", tag("prod"));
    let limits = Limits::default();

    let artifact = fetched(src.fetch(None, &reach(), &limits).await.expect("pull"));
    assert_eq!(artifact.revision, first);
    assert!(first.starts_with("sha256:") && first.len() == 71, "{first}");
    assert_eq!(artifact.files.keys().collect::<Vec<_>>(), ["apps/a.yaml", "apps/b.yaml"]);
    assert_eq!(artifact.files["apps/a.yaml"], a1);
    assert_eq!(registry.blob_pulls("fleet"), 1, "{:?}", registry.requests());

    // Polling an unchanged tag asks for its digest and downloads nothing.
    let again = src.fetch(Some(&first), &reach(), &limits).await.expect("poll");
    assert_eq!(again, Fetch::Unchanged { revision: first.clone() });
    assert_eq!(registry.blob_pulls("fleet"), 1, "{:?}", registry.requests());

    // The tag moved to a new artifact: the next poll pulls it, once.
    let b2 = cm("b", "2");
    let second = registry.push("fleet", "prod", &[("apps/a.yaml", &a1), ("apps/b.yaml", &b2)]).await;
    assert_ne!(second, first);
    let artifact = fetched(src.fetch(Some(&first), &reach(), &limits).await.expect("pull the move"));
    assert_eq!(artifact.revision, second);
    assert_eq!(artifact.files["apps/b.yaml"], b2);
    assert_eq!(registry.blob_pulls("fleet"), 2, "{:?}", registry.requests());
}

#[tokio::test]
async fn version_ranges_digests_and_layer_selectors_resolve_to_what_was_pushed() {
    let registry = Registry::start();
    let mut digests = Vec::new();
    for (t, v) in [("1.0.0", "1"), ("v1.2.0", "2"), ("2.0.0", "3"), ("latest", "4")] {
        digests.push(registry.push("fleet", t, &[("a.yaml", &cm("a", v))]).await);
    }
    let limits = Limits::default();
    let range = source(&registry, "fleet", OciRef::Semver(">=1.0, <2".into()));
    assert_eq!(fetched(range.fetch(None, &reach(), &limits).await.expect("range")).revision, digests[1]);
    let pinned = source(&registry, "fleet", OciRef::Digest(digests[0].clone()));
    let artifact = fetched(pinned.fetch(None, &reach(), &limits).await.expect("digest"));
    assert_eq!((artifact.revision.as_str(), &artifact.files["a.yaml"]), (digests[0].as_str(), &cm("a", "1")));

    let none = source(&registry, "fleet", OciRef::Semver(">=3".into())).fetch(None, &reach(), &limits).await;
    assert!(matches!(none, Err(OciError::NotFound { .. })), "{none:?}");
    let missing = source(&registry, "fleet", tag("nope")).fetch(None, &reach(), &limits).await;
    assert!(matches!(missing, Err(OciError::NotFound { .. })), "{missing:?}");

    // A layer picked by media type, and files left out by `ignore`.
    let by_type = OciSource {
        media_type: Some(CONTENT_TYPE.into()),
        ignore: vec!["*.md".into()],
        ..source(&registry, "docs", tag("v1"))
    };
    registry.push("docs", "v1", &[("a.yaml", &cm("a", "1")), ("README.md", b"# docs")]).await;
    let artifact = fetched(by_type.fetch(None, &reach(), &limits).await.expect("by media type"));
    assert_eq!(artifact.files.keys().collect::<Vec<_>>(), ["a.yaml"]);
    let other = OciSource { media_type: Some("application/x-other".into()), ..by_type };
    let err = other.fetch(None, &reach(), &limits).await.map(drop).expect_err("no such layer");
    assert!(err.to_string().contains("no layer of media type application/x-other"), "{err}");
}

#[tokio::test]
async fn a_layer_whose_bytes_are_not_its_digest_is_refused() {
    let registry = Registry::start();
    let content = cm("a", "1");
    registry.push("fleet", "v1", &[("a.yaml", &content)]).await;
    // The registry's stored layer, changed behind its back: it serves other bytes.
    let layer = tar_gz(&[("a.yaml", &content)]);
    let digest = format!("sha256:{}", sha256_hex(&layer));
    let path = registry.blob_path(&digest);
    let mut tampered = std::fs::read(&path).expect("the stored layer");
    assert_eq!(tampered, layer);
    let last = tampered.len() - 1;
    tampered[last] ^= 0xff;
    std::fs::write(&path, tampered).expect("tamper");

    let err = source(&registry, "fleet", tag("v1"))
        .fetch(None, &reach(), &Limits::default())
        .await
        .map(drop)
        .expect_err("refused");
    assert!(matches!(err, OciError::Registry { step: "pulling a layer of", .. }), "{err:?}");
    let chain = format!("{err}: {:?}", std::error::Error::source(&err));
    assert!(chain.contains(&digest), "the error names the digest it expected: {chain}");
}

#[tokio::test]
async fn hostile_artifacts_are_refused_naming_the_limit_or_the_rule() {
    let registry = Registry::start();
    let small = Limits { max_download_bytes: 4096, max_bytes: 64 * 1024, max_files: 3, ..Limits::default() };
    // A layer over the download limit, refused from the size its manifest gives.
    let mut x = 0x9e37_79b9_7f4a_7c15_u64;
    let noise: Vec<u8> = (0..20_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    registry.push_layer("big", "v1", tar_gz(&[("a.yaml", &noise)]), CONTENT_TYPE).await;
    let err = source(&registry, "big", tag("v1")).fetch(None, &reach(), &small).await.map(drop).expect_err("too big");
    assert!(err.to_string().ends_with(&Limit::DownloadBytes(4096).to_string()), "{err}");
    assert_eq!(registry.blob_pulls("big"), 0, "refused before the download: {:?}", registry.requests());

    // A gzip bomb: a few hundred bytes that inflate past the limit of all files.
    let zeros = vec![0u8; 10 * 1024 * 1024];
    registry.push("bomb", "v1", &[("a.yaml", &zeros)]).await;
    let err = source(&registry, "bomb", tag("v1")).fetch(None, &reach(), &small).await.map(drop).expect_err("bomb");
    assert!(err.to_string().contains("(the limit)"), "{err}");

    // A path out of the artifact, and too many files.
    registry.push("escape", "v1", &[("../etc/a.yaml", b"x")]).await;
    let err = source(&registry, "escape", tag("v1")).fetch(None, &reach(), &small).await.map(drop).expect_err("escape");
    assert!(err.to_string().contains("a path out of the artifact"), "{err}");
    let many: Vec<(String, Vec<u8>)> = (0..5).map(|i| (format!("{i}.yaml"), cm("a", "1"))).collect();
    let many: Vec<(&str, &[u8])> = many.iter().map(|(p, c)| (p.as_str(), c.as_slice())).collect();
    registry.push("many", "v1", &many).await;
    let err = source(&registry, "many", tag("v1")).fetch(None, &reach(), &small).await.map(drop).expect_err("many");
    assert!(err.to_string().ends_with(&Limit::Files(3).to_string()), "{err}");

    // A registry the egress policy denies is not asked anything.
    let before = registry.requests().len();
    let denied = Reach { egress: Arc::new(EgressPolicy::default()), local_files: false };
    let err = source(&registry, "big", tag("v1")).fetch(None, &denied, &small).await.map(drop).expect_err("denied");
    assert!(matches!(err, OciError::Egress { .. }), "{err:?}");
    assert_eq!(registry.requests().len(), before);
}

fn sha256_hex(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}
