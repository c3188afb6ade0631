//! A source's artifact from a gzipped tarball (an OCI artifact's layer), read as a
//! stream within [`Limits`]. Nothing is kept if any limit or rule is broken.
//!
//! The compressed stream may be at most [`Limits::max_download_bytes`]. What it
//! decompresses to may be at most [`Limits::max_bytes`], plus a header's worth a file.
//! A file is refused from its header, before its content is read, when it is over the
//! size or depth limits or one too many. So a gzip bomb costs what its first headers
//! cost. Regular files are kept, with a leading `./` dropped, and directories are
//! skipped. Everything else is refused, naming its path: a path that is absolute or
//! holds `..`, a symlink or hard link, a device or a FIFO.

use crate::limits::{Limit, Limits, Tally};
use fleetsync_model::Artifact;
use std::collections::BTreeMap;
use std::io::{self, Read};

/// Why a tarball was refused.
#[derive(Debug, thiserror::Error)]
pub enum TarError {
    /// The stream is not a gzipped tarball, or could not be read.
    #[error("reading the tarball: {0}")]
    Read(String),
    #[error("{}{limit}", path.as_ref().map(|p| format!("{p}: ")).unwrap_or_default())]
    Limit { limit: Limit, path: Option<String> },
    /// An entry an artifact may not hold.
    #[error("{path}: {reason}")]
    Entry { path: String, reason: &'static str },
}

/// The files of a gzipped tarball, as the artifact of `revision` (a digest).
pub fn read_tar_gz(input: impl Read, revision: &str, limits: &Limits) -> Result<Artifact, TarError> {
    let compressed = Counted::new(input, limits.max_download_bytes, Limit::DownloadBytes(limits.max_download_bytes));
    let headroom = (limits.max_files as u64).saturating_add(2).saturating_mul(1024);
    let most = limits.max_bytes.saturating_add(headroom);
    let plain = Counted::new(flate2::read::GzDecoder::new(compressed), most, Limit::Bytes(limits.max_bytes));
    let mut archive = tar::Archive::new(plain);
    let mut tally = Tally::new(*limits);
    let mut files = BTreeMap::new();
    let entries = archive.entries().map_err(read_error)?;
    for entry in entries {
        let mut entry = entry.map_err(read_error)?;
        let raw = entry.path_bytes();
        let path = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        if kind.is_dir() || kind.is_pax_global_extensions() {
            continue;
        }
        let refuse = |reason| TarError::Entry { path: path.clone(), reason };
        if !kind.is_file() {
            return Err(refuse(if kind.is_symlink() || kind.is_hard_link() {
                "a link: an artifact may hold regular files only"
            } else {
                "not a regular file: an artifact may hold regular files only"
            }));
        }
        let clean = clean_path(&path).ok_or_else(|| refuse("a path out of the artifact (absolute, or with `..`)"))?;
        let size = entry.header().size().map_err(read_error)?;
        tally.add(&clean, size).map_err(|limit| TarError::Limit { limit, path: Some(clean.clone()) })?;
        let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        entry.read_to_end(&mut content).map_err(read_error)?;
        files.insert(clean, content);
    }
    Ok(Artifact { revision: revision.to_string(), files })
}

/// `path` relative and `/`-separated, without `.` parts; `None` if it is absolute or
/// holds `..` (or a NUL or `\`).
fn clean_path(path: &str) -> Option<String> {
    if path.starts_with('/') || path.contains(['\0', '\\']) {
        return None;
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return None,
            p => parts.push(p),
        }
    }
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// A reader's errors as a refusal: a limit the counting reader broke, or the text.
fn read_error(e: io::Error) -> TarError {
    match e.get_ref().and_then(|inner| inner.downcast_ref::<Over>()) {
        Some(Over(limit)) => TarError::Limit { limit: *limit, path: None },
        None => TarError::Read(e.to_string()),
    }
}

/// A limit a [`Counted`] reader passed.
#[derive(Debug)]
struct Over(Limit);

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Over {}

/// A reader that fails once more than `most` bytes went through it.
struct Counted<R> {
    inner: R,
    left: u64,
    limit: Limit,
}

impl<R> Counted<R> {
    fn new(inner: R, most: u64, limit: Limit) -> Self {
        Counted { inner, left: most, limit }
    }
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| io::Error::other(Over(self.limit)))?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use tar::{EntryType, Header};

    /// A gzipped tarball of `entries`: (path, type, content or link target).
    fn tarball(entries: &[(&str, EntryType, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(GzEncoder::new(Vec::new(), flate2::Compression::default()));
        for (path, kind, content) in entries {
            let mut h = Header::new_gnu();
            // Written into the header as given (`set_path` refuses `..`, as it should).
            let name = &mut h.as_old_mut().name;
            name[..path.len()].copy_from_slice(path.as_bytes());
            h.set_entry_type(*kind);
            h.set_mode(0o644);
            if kind.is_symlink() {
                h.set_link_name(std::str::from_utf8(content).expect("a target")).expect("a link name");
                h.set_size(0);
                h.set_cksum();
                builder.append(&h, io::empty()).expect("append");
            } else {
                h.set_size(content.len() as u64);
                h.set_cksum();
                builder.append(&h, *content).expect("append");
            }
        }
        builder.into_inner().expect("the tar").finish().expect("the gzip")
    }

    fn read(bytes: &[u8], limits: Limits) -> Result<Artifact, TarError> {
        read_tar_gz(bytes, "sha256:abc", &limits)
    }

    #[test]
    fn regular_files_are_kept_by_clean_path_and_directories_skipped() {
        let t = tarball(&[
            ("./apps/", EntryType::Directory, b""),
            ("./apps/a.yaml", EntryType::Regular, b"kind: A\n"),
            ("b.yaml", EntryType::Regular, b"kind: B\n"),
        ]);
        let a = read(&t, Limits::default()).expect("read");
        assert_eq!(a.files.keys().collect::<Vec<_>>(), ["apps/a.yaml", "b.yaml"]);
        assert_eq!(a.files["apps/a.yaml"], b"kind: A\n");
    }

    #[test]
    fn a_gzip_bomb_is_refused_from_its_header_and_its_stream() {
        let zeros = vec![0u8; 64 << 20];
        let t = tarball(&[("bomb.yaml", EntryType::Regular, &zeros)]);
        assert!(t.len() < 1 << 20, "64 MiB of zeros compress to {} bytes", t.len());
        let err = read(&t, Limits::default()).expect_err("a bomb");
        assert!(matches!(err, TarError::Limit { limit: Limit::FileBytes(_), .. }), "{err}");
        // With a file limit that lets it through, the stream's own limit stops it.
        let loose = Limits { max_file_bytes: u64::MAX, max_bytes: 1 << 20, ..Limits::default() };
        let err = read(&t, loose).expect_err("a bomb");
        assert!(matches!(err, TarError::Limit { limit: Limit::Bytes(_), .. }), "{err}");
        let err = read(&t, Limits { max_download_bytes: 1024, ..Limits::default() }).expect_err("compressed");
        assert!(matches!(err, TarError::Limit { limit: Limit::DownloadBytes(1024), path: None }), "{err}");
    }

    #[test]
    fn paths_out_of_the_artifact_links_and_devices_are_refused_by_path() {
        let cases: [(&str, EntryType, &[u8], &str); 4] = [
            ("../evil.yaml", EntryType::Regular, b"x", "a path out of the artifact"),
            ("/etc/evil.yaml", EntryType::Regular, b"x", "a path out of the artifact"),
            ("apps/passwd.yaml", EntryType::Symlink, b"/etc/passwd", "a link"),
            ("apps/fifo", EntryType::Fifo, b"", "not a regular file"),
        ];
        for (path, kind, content, why) in cases {
            let t = tarball(&[("ok.yaml", EntryType::Regular, b"kind: A\n"), (path, kind, content)]);
            let err = read(&t, Limits::default()).expect_err(path).to_string();
            assert!(err.starts_with(&format!("{path}: {why}")), "{path}: {err}");
        }
    }

    #[test]
    fn a_tarball_of_100k_files_is_refused_at_the_file_limit() {
        let names: Vec<String> = (0..100_000).map(|i| format!("d{}/f{i}.yaml", i % 100)).collect();
        let entries: Vec<(&str, EntryType, &[u8])> =
            names.iter().map(|n| (n.as_str(), EntryType::Regular, &b"k: v\n"[..])).collect();
        let err = read(&tarball(&entries), Limits::default()).expect_err("100k files");
        assert!(matches!(err, TarError::Limit { limit: Limit::Files(10_000), .. }), "{err}");
        assert!(read(b"not gzip at all", Limits::default()).is_err());
    }
}
