//! What `apply -f` and `delete -f` read, as kubectl does: each `-f` a file, a directory
//! (its `.yaml`, `.yml` and `.json` files in name order; with `-R` its subdirectories'
//! too) or `-` for standard input; a `kind: List` (what `get -o yaml|json` prints)
//! stands for its items.

use anyhow::{anyhow, Context, Result};
use fleetsync_model::{parse_documents, Document};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

/// One file's documents, as text the hub takes, with where they came from.
#[derive(Debug)]
pub struct Input {
    /// The file's path, or `-` for standard input.
    pub source: String,
    pub text: String,
}

impl Input {
    /// Its documents, validated; an error names the file.
    pub fn documents(&self) -> Result<Vec<Document>> {
        parse_documents(&self.text).map_err(|e| anyhow!("{}: {e}", self.source))
    }
}

/// The inputs' documents, each file checked here first (a bad file fails fast, without
/// a hub, naming the problem), and the body that sends them all in one request.
pub fn documents_and_body(inputs: Vec<Input>) -> Result<(Vec<Document>, String)> {
    let mut docs = Vec::new();
    for input in &inputs {
        docs.extend(input.documents()?);
    }
    let many = inputs.len() > 1;
    let body = inputs.into_iter().map(|i| i.text).collect::<Vec<_>>().join("\n---\n");
    if many {
        // The same object in two files.
        parse_documents(&body).map_err(|e| anyhow!("the files together: {e}"))?;
    }
    Ok((docs, body))
}

/// Reads every input the `-f` flags name, Lists expanded.
pub fn read(paths: &[PathBuf], recursive: bool) -> Result<Vec<Input>> {
    let mut files = Vec::new();
    for path in paths {
        if path.as_os_str() != "-" && path.is_dir() {
            let before = files.len();
            files_in(path, recursive, &mut files)?;
            if files.len() == before {
                anyhow::bail!(
                    "{}: no .yaml, .yml or .json files{}",
                    path.display(),
                    if recursive { "" } else { " (-R reads subdirectories)" }
                );
            }
        } else {
            files.push(path.clone());
        }
    }
    files
        .into_iter()
        .map(|f| Ok(Input { text: expand_lists(read_text(&f)?), source: f.display().to_string() }))
        .collect()
}

fn read_text(path: &Path) -> Result<String> {
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s).context("reading standard input")?;
        return Ok(s);
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
}

/// The manifest files of a directory in name order, then (with `recursive`) those of
/// its subdirectories, each in turn.
fn files_in(dir: &Path, recursive: bool, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).with_context(|| format!("cannot read the directory {}", dir.display()))?;
    let mut paths: Vec<PathBuf> = entries
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("cannot read the directory {}", dir.display()))?;
    paths.sort();
    for path in paths {
        if path.is_dir() {
            if recursive {
                files_in(&path, true, out)?;
            }
        } else if path.extension().and_then(|e| e.to_str()).is_some_and(|e| matches!(e, "yaml" | "yml" | "json")) {
            out.push(path);
        }
    }
    Ok(())
}

/// The text with each `kind: List` document replaced by its items (as JSON documents,
/// which YAML reads). A text without a List, or that does not parse (the hub's own
/// parser then names the problem), is returned as it is.
fn expand_lists(text: String) -> String {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    let Ok(docs) = serde_saphyr::from_multiple_with_options::<Value>(&text, options) else { return text };
    let is_list = |d: &Value| d["kind"] == "List" && d["items"].is_array();
    if !docs.iter().any(is_list) {
        return text;
    }
    let mut out = Vec::new();
    for doc in docs {
        match doc {
            Value::Null => {}
            d if is_list(&d) => out.extend(d["items"].as_array().into_iter().flatten().map(Value::to_string)),
            d => out.push(d.to_string()),
        }
    }
    out.join("\n---\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_stands_for_its_items() {
        let text = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: fleetsync.io/v1, kind: Cluster, metadata: {name: a, labels: {on: 'yes'}}, spec: {endpoint: {simulator: {}}}}\n- {apiVersion: fleetsync.io/v1, kind: Cluster, metadata: {name: b}, spec: {endpoint: {simulator: {}}}}\n---\napiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: c}\nspec: {endpoint: {simulator: {}}}\n";
        let input = Input { source: "x".into(), text: expand_lists(text.into()) };
        let docs = input.documents().expect("valid");
        let names: Vec<&str> = docs.iter().map(|d| d.metadata().name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"]);
        assert_eq!(docs[0].metadata().labels["on"], "yes", "strings stay strings");
        let plain = "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: c}\n";
        assert_eq!(expand_lists(plain.into()), plain, "no List: the text as it was");
    }

    #[test]
    fn directories_are_read_in_name_order_and_recursively_with_r() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sub = dir.path().join("a-sub");
        std::fs::create_dir(&sub).expect("mkdir");
        for (path, name) in
            [(dir.path().join("2.yml"), "b"), (dir.path().join("1.yaml"), "a"), (sub.join("3.json"), "c")]
        {
            std::fs::write(path, format!("{{\"apiVersion\": \"fleetsync.io/v1\", \"kind\": \"Cluster\", \"metadata\": {{\"name\": \"{name}\"}}, \"spec\": {{\"endpoint\": {{\"simulator\": {{}}}}}}}}")).expect("write");
        }
        std::fs::write(dir.path().join("notes.txt"), "not a manifest").expect("write");
        let names = |recursive| -> Vec<String> {
            let inputs = read(&[dir.path().to_path_buf()], recursive).expect("read");
            inputs.iter().flat_map(|i| i.documents().expect("valid")).map(|d| d.metadata().name.clone()).collect()
        };
        assert_eq!(names(false), ["a", "b"]);
        assert_eq!(names(true), ["a", "b", "c"], "a-sub/ sorts after 2.yml by name");
    }
}
