//! Completion through the shell's own protocol (`COMPLETE=bash fleetsync -- WORDS`, as
//! the script of `fleetsync completion bash` calls it): commands and flags from the
//! command line's definition, object names from the hub of the context.

mod common;

use common::{bin, stdout, Hub};
use std::time::{Duration, Instant};

const FLEET: &str = "\
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: eu-west-1}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: eu-north-1}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: us-east-1}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: eu-team-b, namespace: team-b}
spec: {endpoint: {simulator: {}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: base}
spec: {clusterNames: [eu-west-1], resources: []}
";

/// What completing the last of `words` answers (one candidate a line), with the hub at
/// `server` and `token` in the environment.
fn complete(server: &str, token: &str, words: &[&str]) -> Vec<String> {
    let out = bin()
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
        .env("_CLAP_IFS", "\n")
        .env("FLEETSYNC_SERVER", server)
        .env("FLEETSYNC_TOKEN", token)
        .arg("--")
        .args(words)
        .output()
        .expect("run fleetsync");
    assert!(out.status.success(), "{words:?}: {}", String::from_utf8_lossy(&out.stderr));
    stdout(&out).lines().map(str::to_string).filter(|l| !l.is_empty()).collect()
}

#[test]
fn names_come_from_the_hub() {
    let hub = Hub::start();
    hub.apply(FLEET);
    let names = |words: &[&str]| complete(&hub.url, &hub.token, words);
    assert_eq!(names(&["fleetsync", "get", "clusters", "eu-"]), ["eu-north-1", "eu-west-1"]);
    // Nothing typed yet: every name (and the flags).
    let all: Vec<String> = names(&["fleetsync", "get", "cl", ""]).into_iter().filter(|n| !n.starts_with('-')).collect();
    assert_eq!(all, ["eu-north-1", "eu-west-1", "us-east-1"]);
    assert_eq!(names(&["fleetsync", "get", "clusters", "-n", "team-b", "eu"]), ["eu-team-b"], "the tenant of -n");
    assert_eq!(names(&["fleetsync", "describe", "syncset", "b"]), ["base"]);
    assert_eq!(names(&["fleetsync", "delete", "cluster", "us"]), ["us-east-1"]);
    // Commands and flags come from the command line's definition.
    assert_eq!(names(&["fleetsync", "descr"]), ["describe"]);
    assert!(names(&["fleetsync", "get", "clusters", "--show-l"]).contains(&"--show-labels".to_string()));
}

#[test]
fn without_a_hub_nothing_is_completed_quickly() {
    let start = Instant::now();
    let names = complete("http://127.0.0.1:9", "fst_none", &["fleetsync", "get", "clusters", "eu"]);
    assert!(names.is_empty(), "{names:?}");
    assert!(start.elapsed() < Duration::from_secs(10), "a TAB waited {:?}", start.elapsed());
}
