//! The files of one revision of a source (a Git commit's tree, an OCI artifact's
//! layer), and the manifests a SyncSet reads from them.
//!
//! Files are kept by path (relative to the source's root, `/`-separated) in name
//! order. Each file's [`digest`] names its content: a store keeps a content once, so a
//! new revision that changes one file adds that file, not the whole tree again.

use crate::manifest::Manifest;
use crate::parse::{parse_manifests_with, ParseBudget, ParseError};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The files of one revision of a source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// What the source calls the revision: a Git commit's id.
    pub revision: String,
    /// Path → content.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// Why the manifests of an artifact could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArtifactError {
    /// The path a SyncSet names is not a plain relative path.
    #[error("invalid path {path:?}: {rule}")]
    Path { path: String, rule: &'static str },
    /// No manifest file (`.yaml`, `.yml`, `.json`) is under the path.
    #[error("no manifests under {path:?} at revision {revision}: expected .yaml, .yml or .json files")]
    Empty { path: String, revision: String },
    /// A file is not UTF-8 text.
    #[error("{file}: not UTF-8 text")]
    NotText { file: String },
    /// A file's manifests did not parse or validate.
    #[error("{file}: {source}")]
    Manifests {
        file: String,
        #[source]
        source: ParseError,
    },
}

/// The content digest of a file: `sha256:` and 64 hex digits.
pub fn digest(content: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(content))
}

impl Artifact {
    /// The manifests under `path` (`""` or `.` for the root): every `.yaml`, `.yml` and
    /// `.json` file at or below it, in name order, and each file's documents in order,
    /// parsed within `budget` one file at a time.
    pub fn manifests(&self, path: &str, budget: &ParseBudget) -> Result<Vec<Manifest>, ArtifactError> {
        let prefix = normalize(path)?;
        let mut manifests = Vec::new();
        let mut files = 0;
        for (file, content) in &self.files {
            let under = prefix.is_empty() || file.strip_prefix(&prefix).is_some_and(|rest| rest.starts_with('/'));
            let is_manifest = [".yaml", ".yml", ".json"].iter().any(|ext| file.ends_with(ext));
            if !under || !is_manifest {
                continue;
            }
            files += 1;
            let text = std::str::from_utf8(content).map_err(|_| ArtifactError::NotText { file: file.clone() })?;
            let parsed = parse_manifests_with(text, budget)
                .map_err(|source| ArtifactError::Manifests { file: file.clone(), source })?;
            manifests.extend(parsed);
        }
        if files == 0 {
            return Err(ArtifactError::Empty { path: path.to_string(), revision: self.revision.clone() });
        }
        Ok(manifests)
    }
}

/// Whether `path` may name a directory of an artifact (see [`Artifact::manifests`]).
pub fn check_path(path: &str) -> Result<(), ArtifactError> {
    const MAX_PATH: usize = 1024;
    if path.len() > MAX_PATH {
        return Err(ArtifactError::Path { path: String::new(), rule: "is longer than 1024 bytes (the limit)" });
    }
    normalize(path).map(drop)
}

/// `path` as a prefix of file paths: relative, `/`-separated, no `..`, no trailing `/`.
fn normalize(path: &str) -> Result<String, ArtifactError> {
    let bad = |rule| ArtifactError::Path { path: path.to_string(), rule };
    if path.starts_with('/') {
        return Err(bad("must be relative to the source's root"));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(bad("may not leave the source (`..`)")),
            p if p.contains('\\') || p.contains('\0') => return Err(bad("may not hold `\\` or NUL")),
            p => parts.push(p),
        }
    }
    Ok(parts.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact(files: &[(&str, &str)]) -> Artifact {
        let files = files.iter().map(|(p, c)| (p.to_string(), c.as_bytes().to_vec())).collect();
        Artifact { revision: "abc".into(), files }
    }

    fn names(manifests: &[Manifest]) -> Vec<&str> {
        manifests.iter().map(|m| m.0["metadata"]["name"].as_str().unwrap_or("?")).collect()
    }

    const CM: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: NAME, namespace: apps}\n";

    #[test]
    fn manifests_are_the_files_under_the_path_in_name_order_and_their_documents_in_order() {
        let a = artifact(&[
            ("apps/b.yaml", &CM.replace("NAME", "b1")),
            ("apps/a.yml", &format!("{}---\n{}", CM.replace("NAME", "a1"), CM.replace("NAME", "a2"))),
            ("apps/sub/c.json", r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c1"}}"#),
            ("apps/README.md", "not a manifest"),
            ("appsx/d.yaml", &CM.replace("NAME", "d1")),
            ("other/e.yaml", &CM.replace("NAME", "e1")),
        ]);
        let budget = ParseBudget::default();
        assert_eq!(names(&a.manifests("apps", &budget).expect("apps")), ["a1", "a2", "b1", "c1"]);
        assert_eq!(names(&a.manifests("./apps/", &budget).expect("apps")), ["a1", "a2", "b1", "c1"]);
        assert_eq!(names(&a.manifests("", &budget).expect("root")), ["a1", "a2", "b1", "c1", "d1", "e1"]);
    }

    #[test]
    fn a_path_out_of_the_source_an_empty_path_and_a_bad_file_are_refused_by_name() {
        let a = artifact(&[("apps/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: Bad_Name}\n")]);
        let budget = ParseBudget::default();
        assert!(matches!(a.manifests("../x", &budget), Err(ArtifactError::Path { .. })));
        assert!(matches!(a.manifests("/apps", &budget), Err(ArtifactError::Path { .. })));
        let empty = a.manifests("nothing", &budget).expect_err("empty");
        assert_eq!(
            empty.to_string(),
            "no manifests under \"nothing\" at revision abc: expected .yaml, .yml or .json files"
        );
        let bad = a.manifests("apps", &budget).expect_err("bad name").to_string();
        assert!(bad.starts_with("apps/a.yaml: ") && bad.contains("metadata.name"), "{bad}");
    }

    #[test]
    fn a_digest_names_the_content_alone() {
        assert_eq!(digest(b""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        let a = artifact(&[("x.yaml", "same"), ("y/z.yaml", "same")]);
        assert_eq!(digest(&a.files["x.yaml"]), digest(&a.files["y/z.yaml"]));
    }
}
