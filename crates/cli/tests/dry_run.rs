//! `apply --dry-run=server|client` and `diff -f`, as a kubectl user runs them.

mod common;

use common::*;
use std::process::Output;

const WEB: &str = "\
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: c1, labels: {env: prod}}
spec: {endpoint: {http: {url: 'http://127.0.0.1:9/clusters/c1'}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: web}
spec:
  clusterSelector: {matchLabels: {env: prod}}
  resources:
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: web, namespace: apps}, data: {size: small}}
";

const KC: &str = "\
apiVersion: fleetsync.io/v1
kind: Secret
metadata: {name: kc}
stringData: {token: FIRST-VALUE-1}
";

/// Writes `text` to `name` in the hub's directory; returns the path.
fn file(hub: &Hub, name: &str, text: &str) -> String {
    let path = hub.dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path.to_str().expect("utf-8").to_string()
}

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    stdout(out)
}

#[test]
fn apply_dry_runs_say_what_would_happen_and_apply_nothing() {
    let hub = Hub::start();
    let web = file(&hub, "web.yaml", WEB);
    assert_eq!(
        ok(&hub.cli(&["apply", "-f", &web, "--dry-run=server"])),
        "cluster/c1 created (server dry run: generation 1, 0 keys would be enqueued)\n\
         syncset/web created (server dry run: generation 1, 1 keys would be enqueued)\n"
    );
    assert_eq!(ok(&hub.cli(&["get", "clusters", "-o", "name"])), "", "nothing applied");
    assert_eq!(ok(&hub.cli(&["get", "events", "-o", "json"])).matches("\"seq\"").count(), 0, "no event");

    ok(&hub.cli(&["apply", "-f", &web]));
    let changed = file(&hub, "changed.yaml", &WEB.replace("size: small", "size: large"));
    assert_eq!(
        ok(&hub.cli(&["apply", "-f", &changed, "--dry-run=server"])),
        "cluster/c1 unchanged (server dry run: generation 1, 0 keys would be enqueued)\n\
         syncset/web updated (server dry run: generation 2, 1 keys would be enqueued)\n"
    );
    assert!(
        ok(&hub.cli(&["get", "syncset", "web", "-o", "yaml"])).contains("generation: 1"),
        "still the first generation"
    );

    // The client dry run needs no hub: nothing listens on port 9.
    let client = bin()
        .args(["apply", "-f", &changed, "--dry-run=client", "--server", "http://127.0.0.1:9"])
        .output()
        .expect("run");
    assert_eq!(
        ok(&client),
        "cluster/c1 valid (client dry run, not sent)\nsyncset/web valid (client dry run, not sent)\n"
    );
    let bad = file(&hub, "bad.yaml", &WEB.replace("name: c1", "name: C1"));
    let refused = hub.cli(&["apply", "-f", &bad, "--dry-run=client"]);
    assert!(!refused.status.success() && stderr(&refused).contains("metadata.name"), "{}", stderr(&refused));

    for flags in [&["--dry-run"][..], &["--dry-run", "server"], &["--dry-run=bogus"]] {
        let out = hub.cli(&[&["apply", "-f", &web][..], flags].concat());
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {}", stderr(&out));
        assert!(stderr(&out).contains("--dry-run"), "{flags:?}: {}", stderr(&out));
    }

    let viewer = ok(&hub.cli(&["token", "create", "--tenant", "default", "--role", "viewer"])).trim().to_string();
    let out = bin()
        .args(["apply", "-f", &changed, "--dry-run=server", "--server", &hub.url])
        .env("FLEETSYNC_TOKEN", &viewer)
        .output()
        .expect("run");
    assert!(
        !out.status.success() && stderr(&out).contains("403"),
        "a viewer may not dry-run a write: {}",
        stderr(&out)
    );
}

#[test]
fn diff_shows_what_apply_would_change() {
    let hub = Hub::start();
    let web = file(&hub, "web.yaml", WEB);
    ok(&hub.cli(&["apply", "-f", &web]));

    let same = hub.cli(&["diff", "-f", &web]);
    assert_eq!((same.status.code(), stdout(&same).as_str()), (Some(0), ""), "no differences: {}", stderr(&same));

    let changed = file(&hub, "changed.yaml", &WEB.replace("size: small", "size: large"));
    let out = hub.cli(&["diff", "-f", &changed]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(
        shown.starts_with("--- syncset/default/web (live)\n+++ syncset/default/web (local, updated)\n@@ "),
        "{shown}"
    );
    let changes: Vec<&str> =
        shown.lines().filter(|l| l.starts_with(['-', '+']) && !l.starts_with("---") && !l.starts_with("+++")).collect();
    assert_eq!(changes.len(), 4, "the generation and the field, each out and in: {shown}");
    assert!(changes.iter().any(|l| l.starts_with('-') && l.contains("size: small")), "{shown}");
    assert!(changes.iter().any(|l| l.starts_with('+') && l.contains("size: large")), "{shown}");
    assert!(changes.contains(&"-  generation: 1") && changes.contains(&"+  generation: 2"), "{shown}");
    assert!(!shown.contains("cluster/"), "the unchanged Cluster is not shown: {shown}");

    let c2 =
        "---\napiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: c2}\nspec: {endpoint: {simulator: {}}}\n";
    let added = file(&hub, "added.yaml", &format!("{WEB}{c2}"));
    let out = hub.cli(&["diff", "-f", &added]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(
        shown.starts_with("--- cluster/default/c2 (live)\n+++ cluster/default/c2 (local, created)\n@@ -0,0 +1,"),
        "{shown}"
    );
    assert!(shown.lines().skip(3).all(|l| l.starts_with('+')), "a new object is all additions: {shown}");
    assert!(shown.contains("+  name: c2"), "{shown}");

    let nowhere = bin().args(["diff", "-f", &web, "--server", "http://127.0.0.1:9"]).output().expect("run");
    assert_eq!(nowhere.status.code(), Some(2), "an error is 2, not a difference: {}", stderr(&nowhere));
    assert_eq!(ok(&hub.cli(&["get", "clusters", "-o", "name"])), "cluster/c1\n", "diff applied nothing");
}

#[test]
fn diff_never_prints_secret_values() {
    let hub = Hub::start();
    ok(&hub.cli(&["apply", "-f", &file(&hub, "kc.yaml", KC)]));

    let rotated = file(&hub, "rotated.yaml", &KC.replace("FIRST-VALUE-1", "SECOND-VALUE-2"));
    let out = hub.cli(&["diff", "-f", &rotated]);
    assert_eq!(out.status.code(), Some(1), "a new value is a difference: {}", stderr(&out));
    let (shown, said) = (stdout(&out), stderr(&out));
    assert!(shown.contains("--- secret/default/kc (live)") && shown.contains("+  generation: 2"), "{shown}");
    assert!(said.contains("only secret values differ"), "{said}");

    let more =
        file(&hub, "more.yaml", &KC.replace("{token: FIRST-VALUE-1}", "{token: FIRST-VALUE-1, ca: THIRD-VALUE-3}"));
    let out = hub.cli(&["diff", "-f", &more]);
    let shown = stdout(&out);
    assert!(shown.lines().any(|l| l.starts_with("+  ca: ")), "a new key shows by its name: {shown}");
    assert!(!stderr(&out).contains("only secret values differ"), "a new key is more than values: {}", stderr(&out));

    let unchanged = hub.cli(&["diff", "-f", &file(&hub, "same.yaml", KC)]);
    assert_eq!((unchanged.status.code(), stdout(&unchanged).as_str()), (Some(0), ""), "{}", stderr(&unchanged));
    for out in [&out, &unchanged, &hub.cli(&["diff", "-f", &rotated])] {
        let all = format!("{}{}", stdout(out), stderr(out));
        assert!(!all.contains("VALUE-"), "no value printed: {all}");
    }
}
