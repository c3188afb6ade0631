//! A SyncSet read from a Git repository, through the `fleetsync` binary: a hub started
//! with `--allow-local-sources` fetches a `file://` repository, and what a simulated
//! cluster holds (asked over its Kubernetes API) follows the branch: a changed file's
//! new content, and in Sync mode a removed file's resource deleted. `get
//! gitrepositories`, `get sources` (both kinds) and `describe source` show the
//! revision; `reconcile source` fetches at once.

mod common;

use common::{stderr, stdout, Hub, SimChild};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=fleet", "-c", "user.email=fleet@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn commit(dir: &Path) -> String {
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-q", "-m", "change"]);
    git(dir, &["rev-parse", "HEAD"])
}

fn config_map(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: apps}}\ndata: {{v: \"{value}\"}}\n")
}

/// The `v` of ConfigMap `name` as the simulated cluster holds it; `None` if it holds none.
fn held(sim: &SimChild, name: &str) -> Option<String> {
    let url = format!("http://{}/clusters/c1/api/v1/namespaces/apps/configmaps/{name}", sim.addr);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    rt.block_on(async {
        let resp = reqwest::get(url).await.expect("reach the sim");
        match resp.status().as_u16() {
            404 => None,
            200 => {
                let body: Value = resp.json().await.expect("json");
                Some(body["data"]["v"].as_str().unwrap_or_default().to_string())
            }
            other => panic!("GET {name}: {other}"),
        }
    })
}

fn wait_for(what: &str, ok: impl Fn() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < Duration::from_secs(30), "never: {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_syncset_follows_its_branch_on_the_cluster() {
    let repo = tempfile::tempdir().expect("tempdir");
    git(repo.path(), &["init", "-q", "-b", "main"]);
    std::fs::create_dir_all(repo.path().join("apps")).expect("apps/");
    std::fs::write(repo.path().join("apps/cfg.yaml"), config_map("cfg", "1")).expect("write");
    std::fs::write(repo.path().join("apps/old.yaml"), config_map("old", "1")).expect("write");
    let first = commit(repo.path());

    let sim = SimChild::start(0.0);
    let hub = Hub::start_flags(&["--allow-local-sources"]);
    let fleet = format!(
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c1}}\nspec: {{endpoint: {{http: {{url: 'http://{}/clusters/c1'}}}}}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: GitRepository\nmetadata: {{name: fleet}}\nspec: {{url: 'file://{}', ref: {{branch: main}}}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: web}}\n\
         spec: {{clusterNames: [c1], resourceApplyMode: Sync, sourceRef: {{kind: GitRepository, name: fleet, path: apps}}}}\n",
        sim.addr,
        repo.path().display()
    );
    let file = hub.dir.path().join("fleet.yaml");
    std::fs::write(&file, fleet).expect("write");
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "apply: {}", stderr(&out));
    wait_for("the first commit on the cluster", || {
        held(&sim, "cfg").as_deref() == Some("1") && held(&sim, "old").is_some()
    });

    let listed = stdout(&hub.cli(&["get", "gitrepositories"]));
    assert!(listed.contains("REVISION") && listed.contains(&first), "{listed}");
    let both = stdout(&hub.cli(&["get", "sources"]));
    let row = both.lines().find(|l| l.starts_with("fleet ")).unwrap_or_default();
    assert!(both.starts_with("NAME") && both.contains("KIND") && row.contains("GitRepository"), "{both}");
    assert_eq!(stdout(&hub.cli(&["get", "sources", "-o", "name"])).trim(), "gitrepository/fleet");
    let described = stdout(&hub.cli(&["describe", "source", "fleet"]));
    assert!(described.contains(&format!("Revision:   {first}")), "{described}");
    assert!(described.contains("GitRepository"), "{described}");
    assert!(described.contains("  web") && described.contains("apps"), "the SyncSet that reads it: {described}");

    // The next commit changes one file and removes the other; fetched when asked.
    std::fs::write(repo.path().join("apps/cfg.yaml"), config_map("cfg", "2")).expect("write");
    std::fs::remove_file(repo.path().join("apps/old.yaml")).expect("remove");
    let second = commit(repo.path());
    let out = hub.cli(&["reconcile", "source", "fleet"]);
    assert!(out.status.success(), "reconcile: {}", stderr(&out));
    wait_for("the second commit on the cluster", || {
        held(&sim, "cfg").as_deref() == Some("2") && held(&sim, "old").is_none()
    });
    let syncsets = stdout(&hub.cli(&["get", "syncsets"]));
    assert!(syncsets.contains(&format!("fleet@{}", &second[..12])), "{syncsets}");

    // A source is deleted by name like any object.
    let out = hub.cli(&["delete", "gitrepository", "fleet"]);
    assert!(out.status.success() && stdout(&out).contains("gitrepository/fleet deleted"), "{}", stderr(&out));
    assert_eq!(stdout(&hub.cli(&["get", "sources", "-o", "name"])).trim(), "", "no source is left");
}
