//! The client as a kubectl user drives it, output asserted as printed: `-n`/`-A`,
//! `-o wide`, lists as `kind: List` that `apply -f` takes back, `-f` repeated and
//! directories, and `delete -f` in an order that lets Sync-mode cleanup run.

mod common;

use common::*;
use std::io::Write;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

const TEAM_A: &str = "\
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {name: a-1, namespace: team-a, labels: {env: dev}}
spec: {endpoint: {http: {url: 'http://127.0.0.1:9/clusters/a-1'}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {name: tools, namespace: team-a}
spec:
  clusterNames: [a-1]
  resources:
    - {apiVersion: v1, kind: ConfigMap, metadata: {name: t, namespace: x}, data: {k: v}}
";

fn ok(out: &Output) -> String {
    assert!(out.status.success(), "{}", stderr(out));
    stdout(out)
}

fn apply_text(hub: &Hub, name: &str, text: &str) -> String {
    let path = hub.dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    ok(&hub.cli(&["apply", "-f", path.to_str().expect("utf-8")]))
}

/// Runs a client command with `input` on its standard input.
fn with_stdin(hub: &Hub, args: &[&str], input: &str) -> Output {
    let mut child = bin()
        .args(args)
        .args(["--server", &hub.url])
        .env("FLEETSYNC_TOKEN", &hub.token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run client");
    child.stdin.take().expect("stdin").write_all(input.as_bytes()).expect("write stdin");
    child.wait_with_output().expect("wait")
}

#[test]
fn tenants_and_wide_tables() {
    let hub = Hub::start();
    apply_text(&hub, "fleet.yaml", &std::fs::read_to_string(example()).expect("example"));
    apply_text(&hub, "team-a.yaml", TEAM_A);

    assert_eq!(
        ok(&hub.cli(&["get", "clusters", "-n", "team-a"])),
        "NAME  GENERATION  ENDPOINT  LABELS\na-1   1           http      env=dev\n"
    );
    assert_eq!(
        ok(&hub.cli(&["get", "clusters", "-A"])),
        "\
TENANT   NAME       GENERATION  ENDPOINT   LABELS
default  eu-west-1  1           simulator  env=prod,region=eu
default  us-east-1  1           simulator  env=prod,region=us
team-a   a-1        1           http       env=dev
"
    );
    // Nothing listens on port 9: once its key failed, the cluster reads unreachable.
    hub.wait_until(Duration::from_secs(30), |h| {
        let out = h.cli(&["get", "status", "-n", "team-a", "--phase", "Failed,Parked"]);
        stdout(&out).lines().count() > 1
    });
    let wide = ok(&hub.cli(&["get", "clusters", "-o", "wide", "--namespace", "team-a"]));
    let lines: Vec<&str> = wide.lines().collect();
    assert_eq!(lines[0], "NAME  GENERATION  ENDPOINT  LABELS   TARGET                           REACHABLE", "{wide}");
    assert!(
        lines[1].starts_with("a-1   1           http      env=dev  http://127.0.0.1:9/clusters/a-1  No (for "),
        "{wide}"
    );
    assert_eq!(
        ok(&hub.cli(&["get", "syncsets", "-A", "-o", "name"])),
        "syncset/base\nsyncset/eu-only\nsyncset/tools\n"
    );

    hub.wait_until(Duration::from_secs(30), |h| {
        let items = status_items(h);
        items.len() == 3 && items.iter().all(|k| k.phase == fleetsync_model::Phase::Applied)
    });
    assert_eq!(
        ok(&hub.cli(&["get", "syncsets", "-o", "wide"])),
        "\
NAME     GENERATION  MODE    RESOURCES  CLUSTERS  APPLIED  STATUS   TARGETS             KINDS                MESSAGE
base     1           Sync    2          2         2/2      Applied  selector(env=prod)  Namespace,ConfigMap  2 of 2 clusters at generation 1
eu-only  1           Upsert  1          1         1/1      Applied  eu-west-1           ConfigMap            1 of 1 cluster at generation 1
"
    );
    let all = ok(&hub.cli(&["get", "syncsets", "-A"]));
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines[0], "TENANT   NAME     GENERATION  MODE    RESOURCES  CLUSTERS  APPLIED  STATUS", "{all}");
    assert!(
        lines[3].starts_with("team-a   tools    1           Upsert  1          1         0/1      "),
        "the unreachable cluster's: {all}"
    );
    let status = ok(&hub.cli(&["get", "status", "-A", "-o", "wide"]));
    let lines: Vec<&str> = status.lines().collect();
    assert!(lines[0].starts_with("TENANT   CLUSTER    SYNCSET  PHASE"), "{status}");
    assert!(
        lines[0].contains("  DRIFT  LAST APPLIED")
            && lines[0].contains("NEXT ATTEMPT  RENDERED  LAST ERROR")
            && lines[0].ends_with("LAST ERROR"),
        "{status}"
    );
    assert_eq!(lines.len(), 5, "3 keys of default, 1 of team-a: {status}");
    // Ages, not timestamps: each key applied seconds ago.
    let last_applied = lines[1].split_whitespace().nth(8).unwrap_or_default();
    let seconds = last_applied.strip_suffix('s').and_then(|n| n.parse::<u64>().ok());
    assert!(seconds.is_some_and(|s| s < 120), "LAST APPLIED {last_applied:?} in {status}");
    assert!(lines[4].starts_with("team-a   a-1        tools"), "{status}");

    let out = hub.cli(&["get", "clusters", "eu-west-1", "-A"]);
    assert!(!out.status.success() && stderr(&out).contains("-A/--all-tenants lists"), "{}", stderr(&out));
}

/// A tenant's viewer sees its own tenant with -A, not the others.
#[test]
fn all_tenants_is_what_the_caller_may_see() {
    let hub = Hub::start();
    apply_text(&hub, "fleet.yaml", &std::fs::read_to_string(example()).expect("example"));
    apply_text(&hub, "team-a.yaml", TEAM_A);
    let token = ok(&hub.cli(&["token", "create", "--tenant", "team-a", "--role", "viewer"])).trim().to_string();
    let out = bin()
        .args(["get", "clusters", "-A", "-o", "name", "--server", &hub.url])
        .env("FLEETSYNC_TOKEN", &token)
        .output()
        .expect("run");
    assert_eq!(ok(&out), "cluster/a-1\n");
}

#[test]
fn lists_print_as_kind_list_and_apply_back_unchanged() {
    let hub = Hub::start();
    apply_text(&hub, "fleet.yaml", &std::fs::read_to_string(example()).expect("example"));
    apply_text(&hub, "team-a.yaml", TEAM_A);

    let yaml = ok(&hub.cli(&["get", "clusters", "-o", "yaml"]));
    assert!(yaml.starts_with("apiVersion: v1\nkind: List\nitems:\n"), "{yaml}");
    let json: serde_json::Value =
        serde_json::from_str(&ok(&hub.cli(&["get", "syncsets", "-A", "-o", "json"]))).expect("JSON");
    assert_eq!((json["apiVersion"].as_str(), json["kind"].as_str()), (Some("v1"), Some("List")));
    assert_eq!(json["items"].as_array().map(Vec::len), Some(3));

    let back = ok(&with_stdin(&hub, &["apply", "-f", "-"], &yaml));
    assert_eq!(
        back,
        "cluster/eu-west-1 unchanged (generation 1, 0 keys enqueued)\ncluster/us-east-1 unchanged (generation 1, 0 keys enqueued)\n"
    );
    for what in ["clusters", "syncsets", "secrets"] {
        for format in ["yaml", "json"] {
            let list = ok(&hub.cli(&["get", what, "-A", "-o", format]));
            let back = with_stdin(&hub, &["apply", "-f", "-"], &list);
            if what == "secrets" {
                assert!(
                    !back.status.success() && stderr(&back).contains("no documents"),
                    "no secrets, nothing to apply: {}",
                    stderr(&back)
                );
                continue;
            }
            let back = ok(&back);
            assert!(
                back.lines().count() >= 2 && back.lines().all(|l| l.contains(" unchanged ")),
                "{what} -o {format}: {back}"
            );
        }
    }
}

#[test]
fn files_repeat_and_directories_read_in_name_order() {
    let hub = Hub::start();
    let dir = hub.dir.path().join("manifests");
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    let cluster = |name: &str| {
        format!("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {name}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n")
    };
    std::fs::write(dir.join("b.yml"), cluster("b")).expect("write");
    std::fs::write(dir.join("a.yaml"), cluster("a")).expect("write");
    std::fs::write(dir.join("sub/c.json"), r#"{"apiVersion": "fleetsync.io/v1", "kind": "Cluster", "metadata": {"name": "c"}, "spec": {"endpoint": {"simulator": {}}}}"#).expect("write");
    std::fs::write(dir.join("README.md"), "not a manifest").expect("write");
    let extra = hub.dir.path().join("extra.yaml");
    std::fs::write(&extra, cluster("d")).expect("write");
    let (dir_s, extra_s) = (dir.to_str().expect("utf-8"), extra.to_str().expect("utf-8"));

    let out = ok(&hub.cli(&["apply", "-f", dir_s, "-f", extra_s]));
    let applied: Vec<&str> = out.lines().map(|l| l.split(' ').next().unwrap_or_default()).collect();
    assert_eq!(applied, ["cluster/a", "cluster/b", "cluster/d"], "{out}");
    let out = ok(&hub.cli(&["apply", "-R", "-f", dir_s]));
    assert!(out.contains("cluster/c created") && out.contains("cluster/a unchanged"), "{out}");

    let out = hub.cli(&["apply", "-f", extra_s, "-f", extra_s]);
    assert!(
        !out.status.success()
            && stderr(&out).contains("the files together")
            && stderr(&out).contains("also document 1"),
        "{}",
        stderr(&out)
    );

    let bad = hub.dir.path().join("bad");
    std::fs::create_dir_all(&bad).expect("mkdir");
    std::fs::write(
        bad.join("x.yaml"),
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: Bad_Name}\nspec: {endpoint: {simulator: {}}}\n",
    )
    .expect("write");
    let out = hub.cli(&["apply", "-f", extra_s, "-f", bad.to_str().expect("utf-8")]);
    assert!(
        !out.status.success() && stderr(&out).contains("x.yaml") && stderr(&out).contains("metadata.name"),
        "{}",
        stderr(&out)
    );
    let out =
        hub.cli(&["apply", "-f", hub.dir.path().join("manifests/sub/..").join("nothing").to_str().expect("utf-8")]);
    assert!(!out.status.success() && stderr(&out).contains("cannot read"), "{}", stderr(&out));
}

/// `delete -f` of a file listing the Cluster before its Sync-mode SyncSet: the SyncSet
/// goes first and its resources are deleted from the cluster before the Cluster is.
#[test]
fn delete_f_lets_sync_mode_cleanup_run() {
    let sim = SimChild::start(0.0);
    let hub = Hub::start();
    let file = format!(
        "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: unused}}\nstringData: {{k: v}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c1}}\nspec: {{endpoint: {{http: {{url: 'http://{}/clusters/c1'}}}}}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterNames: [c1]\n  resourceApplyMode: Sync\n  resources:\n\
         \x20   - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: cm, namespace: default}}, data: {{k: v}}}}\n",
        sim.addr
    );
    apply_text(&hub, "app.yaml", &file);
    let cm = format!("http://{}/clusters/c1/api/v1/namespaces/default/configmaps/cm", sim.addr);
    let held = || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async { reqwest::get(&cm).await.expect("reach the sim").status().as_u16() == 200 })
    };
    let start = Instant::now();
    while !held() {
        assert!(start.elapsed() < Duration::from_secs(30), "the ConfigMap was never applied");
        std::thread::sleep(Duration::from_millis(100));
    }
    let path = hub.dir.path().join("app.yaml");
    let out = ok(&hub.cli(&["delete", "-f", path.to_str().expect("utf-8")]));
    assert_eq!(out, "syncset/app deleted\ncluster/c1 deleted\nsecret/unused deleted\n");
    assert!(!held(), "the SyncSet's cleanup ran before its Cluster was deleted");
}

/// `get events` is newest first, `--since` keeps the last while, and `--watch` follows
/// from now: nothing of the backlog, then each new event.
#[test]
fn events_newest_first_since_and_watch_from_now() {
    use std::io::BufRead;
    let hub = Hub::start();
    apply_text(&hub, "fleet.yaml", &std::fs::read_to_string(example()).expect("example"));
    hub.wait_until(Duration::from_secs(30), |h| {
        let items = status_items(h);
        items.len() == 3 && items.iter().all(|k| k.phase == fleetsync_model::Phase::Applied)
    });
    let events = |args: &[&str]| -> Vec<serde_json::Value> {
        let v: serde_json::Value =
            serde_json::from_str(&ok(&hub.cli(&[&["get", "events", "-o", "json"], args].concat()))).expect("JSON");
        v["items"].as_array().cloned().expect("items")
    };
    let seq = |e: &serde_json::Value| e["seq"].as_u64().expect("seq");
    let all = events(&[]);
    assert!(all.len() >= 7, "4 objects created, 3 keys applied: {all:?}");
    assert!(all.windows(2).all(|w| seq(&w[0]) > seq(&w[1])), "newest first: {all:?}");
    assert_eq!(events(&["--chunk-size", "2"]).len(), all.len(), "--chunk-size sizes the pages, not the output");
    assert_eq!(events(&["--limit", "2"]), all[..2].to_vec(), "--limit: the newest two");
    let newest = seq(&all[0]);

    // Until the backlog is more than a second old: `--since 1s` then leaves all of it out.
    let start = Instant::now();
    while !events(&["--since", "1s"]).is_empty() {
        assert!(start.elapsed() < Duration::from_secs(10), "--since 1s still shows a backlog 10 s old");
        std::thread::sleep(Duration::from_millis(100));
    }
    apply_text(&hub, "team-a.yaml", TEAM_A);
    let recent = events(&["--since", "1s"]);
    assert!(!recent.is_empty() && recent.iter().all(|e| e["tenant"] == "team-a"), "{recent:?}");

    let mut watcher = bin()
        .args(["get", "events", "--watch", "-o", "json", "-A", "--server", &hub.url])
        .env("FLEETSYNC_TOKEN", &hub.token)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn watcher");
    let (tx, rx) = std::sync::mpsc::channel();
    let out = watcher.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str::<serde_json::Value>(&line).expect("an event per line"));
        }
    });
    wait_for_watches(&hub, 1);
    let latest = seq(&events(&[])[0]);
    apply_text(
        &hub,
        "z.yaml",
        "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {name: z}\nspec: {endpoint: {simulator: {}}}\n",
    );
    let start = Instant::now();
    loop {
        let e = rx.recv_timeout(Duration::from_secs(10)).expect("the new event, watched");
        assert!(seq(&e) > newest, "nothing of the backlog before the watch: {e}");
        if e["name"] == "z" {
            assert!(seq(&e) > latest, "{e}");
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no event of z");
    }
    let _ = watcher.kill();
    let _ = watcher.wait();
}

/// `wait` until a SyncSet applied (or time out saying why), `retry` a key, and
/// `describe` a cluster and a SyncSet.
#[test]
fn wait_retry_and_describe() {
    let hub = Hub::start();
    apply_text(&hub, "fleet.yaml", &std::fs::read_to_string(example()).expect("example"));
    apply_text(&hub, "team-a.yaml", TEAM_A);

    let out = ok(&hub.cli(&["wait", "--for=condition=Applied", "syncset/base", "--timeout=30s"]));
    assert_eq!(out, "syncset/base condition met: 2 of 2 clusters at generation 1\n");
    let out = ok(&hub.cli(&["wait", "--for", "condition=Ready", "cluster/us-east-1"]));
    assert!(out.starts_with("cluster/us-east-1 condition met: ready=true reason=Converged"), "{out}");
    let started = Instant::now();
    let out = hub.cli(&["wait", "--for=condition=Applied", "syncset/tools", "-n", "team-a", "--timeout", "2s"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(
            "timed out after 2s waiting for syncset/tools (condition=Applied): 0 of 1 cluster at generation 1"
        ),
        "{err}"
    );
    assert!(err.contains("on a-1: ") && err.contains("unreachable"), "the first failure, named: {err}");
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    let out = hub.cli(&["wait", "--for=condition=Applied", "syncset/nope"]);
    assert!(!out.status.success() && stderr(&out).contains("404"), "{}", stderr(&out));

    assert_eq!(
        ok(&hub.cli(&["retry", "a-1", "tools", "-n", "team-a"])),
        "a-1/tools queued to run again (tenant team-a)\n"
    );
    let out = hub.cli(&["retry", "a-1", "nope", "-n", "team-a"]);
    assert!(!out.status.success() && stderr(&out).contains("404"), "{}", stderr(&out));

    let out = ok(&hub.cli(&["describe", "cluster", "eu-west-1"]));
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..9],
        [
            "Name:       eu-west-1",
            "Tenant:     default",
            "Generation: 1",
            "Labels:     env=prod, region=eu",
            "Endpoint:   simulator",
            "Condition:  Ready=true Converged (2 of 2 SyncSets applied)",
            "Reachable:  True",
            "SyncSets:",
            "  SYNCSET  PHASE    GENERATION  OBSERVED  ATTEMPTS  LAST ERROR",
        ],
        "{out}"
    );
    assert!(lines.iter().any(|l| l.contains("Cluster  eu-west-1") && l.contains("Created")), "its own event: {out}");
    assert!(lines.iter().any(|l| l.contains("Status   eu-west-1/base") && l.contains("Applied")), "its keys': {out}");

    let out = ok(&hub.cli(&["describe", "cluster", "a-1", "-n", "team-a"]));
    let reachable = out.lines().find(|l| l.starts_with("Reachable:")).unwrap_or_default();
    assert!(
        reachable.starts_with("Reachable:  False since ") && reachable.contains("http://127.0.0.1:9/clusters/a-1"),
        "the address: {out}"
    );
    assert!(reachable.contains("refused"), "and the cause: {out}");
    let out = ok(&hub.cli(&["describe", "syncset", "tools", "-n", "team-a"]));
    for want in [
        "Name:       tools",
        "Tenant:     team-a",
        "Mode:       Upsert",
        "Clusters:   a-1",
        "  v1 ConfigMap x/t",
        "Failures:",
        "  a-1 ",
    ] {
        assert!(out.contains(want), "{want:?} in {out}");
    }
    assert!(
        out.contains("Keys:       1 (")
            && out.contains("Condition:  Applied=false Degraded (0 of 1 cluster at generation 1; 1 failed"),
        "{out}"
    );
    let out = hub.cli(&["describe", "secret", "x"]);
    assert!(!out.status.success() && stderr(&out).contains("possible values: cluster"), "{}", stderr(&out));
}

/// A SyncSet that selects no cluster (a label typo, a cluster name that does not exist)
/// is applied with a warning, shows 0 clusters and `NoClusters`, and `wait` on it fails
/// at once rather than report a condition met by nothing.
#[test]
fn a_syncset_that_selects_nothing_is_visible_and_fails_wait() {
    let hub = Hub::start();
    apply_text(&hub, "fleet.yaml", &std::fs::read_to_string(example()).expect("example"));
    let path = hub.dir.path().join("nomatch.yaml");
    std::fs::write(
        &path,
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: nomatch}\nspec:\n  clusterSelector: {matchLabels: {env: prdo}}\n  \
         resources: [{apiVersion: v1, kind: ConfigMap, metadata: {name: t, namespace: x}}]\n---\n\
         apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: named}\nspec:\n  clusterNames: [eu-west-1, eu-west-9]\n  \
         resources: [{apiVersion: v1, kind: ConfigMap, metadata: {name: t, namespace: x}}]\n",
    )
    .expect("write");
    let out = hub.cli(&["apply", "-f", path.to_str().expect("utf-8")]);
    assert!(out.status.success(), "a warning, not a failure: {}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "Warning: syncset/nomatch selects no cluster: nothing will be applied until a cluster matches\n\
         Warning: syncset/named clusterNames names clusters that do not exist: eu-west-9\n"
    );

    let started = Instant::now();
    let out = hub.cli(&["wait", "--for=condition=Applied", "syncset/nomatch", "--timeout=30s"]);
    assert!(!out.status.success(), "{}", stdout(&out));
    assert_eq!(
        stderr(&out).trim(),
        "error: syncset/nomatch: selects no cluster, so nothing is applied anywhere (--allow-empty accepts this)"
    );
    assert!(started.elapsed() < Duration::from_secs(10), "at once, not at the timeout: {:?}", started.elapsed());
    let out = ok(&hub.cli(&["wait", "--for=condition=Applied", "syncset/nomatch", "--allow-empty"]));
    assert_eq!(out, "syncset/nomatch condition met: it selects no cluster (--allow-empty)\n");

    let table = ok(&hub.cli(&["get", "syncsets", "nomatch"]));
    assert!(table.lines().nth(1).is_some_and(|l| l.ends_with("0         0/0      NoClusters")), "{table}");
    let out = ok(&hub.cli(&["describe", "syncset", "named"]));
    assert!(out.contains("clusterNames names 1 cluster that does not exist: eu-west-9"), "{out}");
    let out = ok(&hub.cli(&["wait", "--for=condition=Applied", "syncset/named", "--timeout=30s"]));
    assert!(
        out.contains("1 of 1 cluster at generation 1; clusterNames names 1 cluster that does not exist: eu-west-9"),
        "{out}"
    );
}

/// `get status --watch` prints the status, then again after each change of the
/// tenant's keys: a new SyncSet's key shows up, Pending then Applied.
#[test]
fn status_watch_prints_again_on_changes() {
    use std::io::BufRead;
    let hub = Hub::start();
    apply_text(&hub, "fleet.yaml", &std::fs::read_to_string(example()).expect("example"));
    hub.wait_until(Duration::from_secs(30), |h| {
        let items = status_items(h);
        items.len() == 3 && items.iter().all(|k| k.phase == fleetsync_model::Phase::Applied)
    });
    let mut watcher = bin()
        .args(["get", "status", "--watch", "--server", &hub.url])
        .env("FLEETSYNC_TOKEN", &hub.token)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn watcher");
    let (tx, rx) = std::sync::mpsc::channel();
    let out = watcher.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let next = || rx.recv_timeout(Duration::from_secs(15)).expect("a line");
    assert!(next().starts_with("CLUSTER    SYNCSET  PHASE"), "the header first");
    for _ in 0..3 {
        assert!(next().contains(" Applied "), "the three keys");
    }
    wait_for_watches(&hub, 1);
    apply_text(&hub, "more.yaml", "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: more}\nspec:\n  clusterNames: [us-east-1]\n  resources:\n    - {apiVersion: v1, kind: ConfigMap, metadata: {name: m, namespace: x}, data: {k: v}}\n");
    let start = Instant::now();
    let mut tables = 0;
    loop {
        let line = next();
        tables += usize::from(line.is_empty());
        if line.starts_with("us-east-1  more") && line.contains(" Applied ") {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "the new key never showed Applied");
    }
    assert!(tables >= 1, "printed again after a blank line");
    let _ = watcher.kill();
    let _ = watcher.wait();
}

/// Until the hub counts `n` open event watches (`fleetsync_watches` on its `/metrics`):
/// a watcher started before is then following the log.
fn wait_for_watches(hub: &Hub, n: u64) {
    let address = hub.url.trim_start_matches("http://");
    let start = Instant::now();
    loop {
        let open = http_get(address, "/metrics").and_then(|(_, body)| {
            body.lines().find_map(|l| l.strip_prefix("fleetsync_watches ")?.trim().parse::<u64>().ok())
        });
        if open.is_some_and(|open| open >= n) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(15), "{n} watches not open on the hub after 15 s: {open:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The habits a kubectl user brings: short names, `--no-headers`, `--limit` as a cap
/// with `--chunk-size` the page, `delete --ignore-not-found`, `wait --for=delete`, and
/// a 401 that says where a local hub's token is looked for.
#[test]
fn short_names_no_headers_limit_ignore_not_found_and_wait_for_delete() {
    let hub = Hub::start();
    ok(&hub.cli(&["apply", "-f", example().to_str().expect("utf-8")]));
    assert_eq!(ok(&hub.cli(&["get", "cl"])), ok(&hub.cli(&["get", "clusters"])), "cl is clusters");
    let bare = ok(&hub.cli(&["get", "ss", "--no-headers"]));
    let lines: Vec<&str> = bare.lines().collect();
    assert_eq!(lines.len(), 2, "{bare}");
    assert!(lines[0].starts_with("base ") && lines[1].starts_with("eu-only "), "no header line: {bare}");
    let one = ok(&hub.cli(&["get", "clusters", "--limit", "1", "--chunk-size", "1"]));
    assert_eq!(one.lines().count(), 2, "a header and one cluster: {one}");
    assert!(one.lines().nth(1).is_some_and(|l| l.starts_with("eu-west-1 ")), "{one}");
    let keys = ok(&hub.cli(&["get", "status", "--no-headers"]));
    assert!(keys.lines().count() > 2, "three keys in the example: {keys}");
    let two = ok(&hub.cli(&["get", "status", "--limit", "2", "--no-headers"]));
    assert_eq!(two.lines().collect::<Vec<_>>(), keys.lines().take(2).collect::<Vec<_>>(), "the first two keys");

    // -o jsonpath= and custom-columns=, as kubectl writes them.
    let names = ok(&hub.cli(&["get", "clusters", "-o", "jsonpath={.items[*].metadata.name}"]));
    assert_eq!(names, "eu-west-1 us-east-1");
    let one = ok(&hub.cli(&["get", "cl", "eu-west-1", "-o", r#"jsonpath={.metadata.labels.env}{"\n"}"#]));
    assert_eq!(one, "prod\n");
    let spec = "custom-columns=NAME:.metadata.name,GEN:.metadata.generation,MODE:.spec.resourceApplyMode,TEAM:.metadata.labels.team";
    let cols = ok(&hub.cli(&["get", "ss", "-o", spec]));
    let want = ["NAME     GEN  MODE    TEAM", "base     1    Sync    <none>", "eu-only  1    Upsert  <none>"];
    assert_eq!(cols.lines().collect::<Vec<_>>(), want, "{cols}");
    for kind in ["events", "members"] {
        let rows = ok(&hub.cli(&["get", kind, "--no-headers"]));
        assert!(!rows.starts_with("SEQ") && !rows.starts_with("MEMBER"), "{kind} without a header: {rows}");
    }
    let labelled = ok(&hub.cli(&["get", "ss", "--show-labels"]));
    assert!(labelled.lines().next().is_some_and(|h| h.contains(" STATUS ") && h.ends_with(" LABELS")), "{labelled}");
    let by_syncset = ok(&hub.cli(&["get", "status", "--sort-by", ".syncset", "-o", "jsonpath={.items[*].cluster}"]));
    assert_eq!(by_syncset, "eu-west-1 us-east-1 eu-west-1", "base's keys, then eu-only's");
    let range = hub.cli(&["get", "cl", "-o", "jsonpath={range .items[*]}{.metadata.name}{end}"]);
    assert!(!range.status.success() && stderr(&range).contains("not supported"), "{}", stderr(&range));
    let unknown = hub.cli(&["get", "cl", "-o", "cols"]);
    assert!(stderr(&unknown).contains("custom-columns=HEADER:PATH"), "{}", stderr(&unknown));

    let gone = hub.cli(&["delete", "ss", "nope"]);
    assert!(!gone.status.success() && stderr(&gone).contains("nope"), "{}", stderr(&gone));
    let ignored = ok(&hub.cli(&["delete", "ss", "nope", "--ignore-not-found"]));
    assert!(ignored.is_empty(), "{ignored}");

    ok(&hub.cli(&["delete", "ss", "eu-only"]));
    let waited = ok(&hub.cli(&["wait", "ss/eu-only", "--for=delete", "--timeout", "10s"]));
    assert!(waited.contains("ss/eu-only condition met: deleted"), "{waited}");
    let there = hub.cli(&["wait", "cl/eu-west-1", "--for=delete", "--timeout", "1s"]);
    assert!(!there.status.success() && stderr(&there).contains("still there"), "{}", stderr(&there));

    let anonymous = bin().args(["get", "clusters", "--server", &hub.url]).current_dir(hub.dir.path()).output();
    let anonymous = anonymous.expect("run the client");
    assert!(!anonymous.status.success());
    let said = stderr(&anonymous);
    assert!(said.contains("admin token file, looked for at fleetsync.db.admin-token"), "{said}");
}

/// `config set-context`, `use-context`, `get-contexts`, `current-context`: the config
/// file is written (owner-only) and the commands then reach the hub through it.
#[test]
fn contexts_are_set_switched_listed_and_used() {
    use std::os::unix::fs::PermissionsExt;
    let hub = Hub::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let (config, token) = (dir.path().join("conf/config.yaml"), dir.path().join("token"));
    std::fs::write(&token, &hub.token).expect("token file");
    let run = |args: &[&str]| bin().args(args).env("FLEETSYNC_CONFIG", &config).output().expect("run");
    let set = ["config", "set-context", "local", "--server", &hub.url, "--token-file", token.to_str().expect("utf-8")];
    assert!(ok(&run(&set)).contains("context \"local\" created"));
    assert!(!run(&["config", "current-context"]).status.success(), "none is current yet");
    let nope = run(&["config", "use-context", "nope"]);
    assert!(!nope.status.success() && stderr(&nope).contains("(it has: local)"), "{}", stderr(&nope));
    ok(&run(&["config", "use-context", "local"]));
    assert_eq!(ok(&run(&["config", "current-context"])), "local\n");
    assert!(ok(&run(&["config", "set-context", "local", "--tenant", "team-a"])).contains("modified"));
    let listed = ok(&run(&["config", "get-contexts"]));
    assert!(
        listed.lines().nth(1).is_some_and(|l| l.starts_with("*        local") && l.ends_with("team-a")),
        "{listed}"
    );
    let mode = std::fs::metadata(&config).expect("written").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a context may hold a token");
    // The context's server, token and tenant are used: team-a has no clusters yet.
    ok(&hub.cli(&["apply", "-f", example().to_str().expect("utf-8")]));
    assert_eq!(ok(&run(&["get", "clusters", "--no-headers"])), "", "the context's tenant, team-a");
    assert_eq!(ok(&run(&["get", "clusters", "-n", "default", "--no-headers"])).lines().count(), 2);
}
