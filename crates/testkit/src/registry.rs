//! An OCI registry on a loopback port for tests: Debian's `docker-registry` (the CNCF
//! distribution registry) with its storage in a temporary directory and its access
//! log kept, which tells how often a test's fetcher pulled a repository's manifests
//! and layers. Artifacts are pushed as Flux pushes them: one gzipped tarball layer of
//! files.

use crate::tools::installed;
use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use std::io::Write;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Flux's media types: what `flux push artifact` writes.
pub const CONTENT_TYPE: &str = "application/vnd.cncf.flux.content.v1.tar+gzip";
pub const CONFIG_TYPE: &str = "application/vnd.cncf.flux.config.v1+json";

pub struct Registry {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    dir: tempfile::TempDir,
    child: Child,
}

impl Registry {
    /// Starts one (installing the package on CI) and waits until it answers.
    pub fn start() -> Registry {
        let program = installed("docker-registry", &["docker-registry"]);
        let dir = tempfile::tempdir().expect("a temporary directory");
        let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
        let addr = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog: {{level: error, accesslog: {{disabled: false}}}}\nstorage: {{filesystem: {{rootdirectory: {}}}, delete: {{enabled: true}}}}\nhttp: {{addr: \"{addr}\", secret: test}}\n",
            dir.path().join("data").display()
        );
        std::fs::write(dir.path().join("config.yml"), config).expect("write the config");
        let log = std::fs::File::create(dir.path().join("access.log")).expect("the log");
        let child = Command::new(program)
            .arg("serve")
            .arg(dir.path().join("config.yml"))
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .expect("start docker-registry");
        let registry = Registry { addr, dir, child };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&registry.addr).is_err() {
            assert!(Instant::now() < deadline, "docker-registry did not listen on {}", registry.addr);
            std::thread::sleep(Duration::from_millis(20));
        }
        registry
    }

    /// `oci://127.0.0.1:PORT/repository`.
    pub fn url(&self, repository: &str) -> String {
        format!("oci://{}/{repository}", self.addr)
    }

    /// Pushes `files` as one gzipped tarball layer of Flux's media type, tagged `tag`;
    /// the manifest's digest.
    pub async fn push(&self, repository: &str, tag: &str, files: &[(&str, &[u8])]) -> String {
        self.push_layer(repository, tag, tar_gz(files), CONTENT_TYPE).await
    }

    /// Pushes `layer` (any bytes) as the one layer of an artifact tagged `tag`.
    pub async fn push_layer(&self, repository: &str, tag: &str, layer: Vec<u8>, media_type: &str) -> String {
        let client = Client::new(ClientConfig { protocol: ClientProtocol::Http, ..ClientConfig::default() });
        let reference = Reference::with_tag(self.addr.clone(), repository.into(), tag.into());
        let layers = [ImageLayer::new(layer, media_type.into(), None)];
        let config = Config::new(b"{}".to_vec(), CONFIG_TYPE.into(), None);
        let pushed = client.push(&reference, &layers, config, &RegistryAuth::Anonymous, None).await.expect("push");
        let digest = client.fetch_manifest_digest(&reference, &RegistryAuth::Anonymous).await.expect("digest");
        assert!(pushed.manifest_url.contains(repository), "{}", pushed.manifest_url);
        digest
    }

    /// The access log's requests (`GET /v2/…`) that the registry answered 200.
    pub fn requests(&self) -> Vec<String> {
        let log = std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default();
        log.lines()
            .filter_map(|l| {
                let request = l.split('"').nth(1)?;
                let status = l.split('"').nth(2)?.split_whitespace().next()?;
                (status == "200").then(|| request.to_string())
            })
            .collect()
    }

    /// How many layers (blobs other than configs are not told apart: a fetcher pulls no
    /// config) of `repository` were downloaded.
    pub fn blob_pulls(&self, repository: &str) -> usize {
        let prefix = format!("GET /v2/{repository}/blobs/");
        self.requests().iter().filter(|r| r.starts_with(&prefix)).count()
    }

    /// Where the registry keeps the blob `digest` (`sha256:…`), to tamper with.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.dir.path().join(format!("data/docker/registry/v2/blobs/sha256/{}/{hex}/data", &hex[..2]))
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gzipped tarball of `files` (path, content), as `flux push artifact` makes one;
/// the paths as given, `..` included (a hostile artifact's).
pub fn tar_gz(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default()));
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        let name = &mut header.as_old_mut().name;
        assert!(path.len() < name.len(), "a path of at most 99 bytes");
        name[..path.len()].copy_from_slice(path.as_bytes());
        header.set_cksum();
        tar.append(&header, *content).expect("append");
    }
    let mut gz = tar.into_inner().expect("finish the tarball");
    gz.flush().expect("flush");
    gz.finish().expect("finish the gzip stream")
}
