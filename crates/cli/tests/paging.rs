//! `get` reads lists in pages (`--chunk-size`) until the hub has no more, and prints
//! them all, as one list (or the first `--limit`); `-l`, `--phase` and `--stale`
//! filter on the hub.

mod common;

use common::*;
use fleetsync_api::Items;
use fleetsync_model::KeyStatus;
use serde_json::Value;
use std::io::Write;

/// Five clusters, `c3` labelled `env=dev` and the others `env=prod`, all selected by
/// one SyncSet: five keys.
fn fleet(hub: &Hub) {
    let mut yaml = String::new();
    for i in 1..=5 {
        let env = if i == 3 { "dev" } else { "prod" };
        yaml.push_str(&format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{i}, labels: {{env: {env}}}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n---\n"
        ));
    }
    yaml.push_str("apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {name: base}\nspec:\n  resources:\n    - {apiVersion: v1, kind: Namespace, metadata: {name: app}}\n  clusterNames: [c1, c2, c3, c4, c5]\n");
    let path = hub.dir.path().join("fleet.yaml");
    std::fs::File::create(&path).and_then(|mut f| f.write_all(yaml.as_bytes())).expect("write fleet");
    let out = hub.cli(&["apply", "-f", path.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn get_pages_through_every_list_and_prints_it_whole() {
    let hub = Hub::start();
    fleet(&hub);

    let out = hub.cli(&["get", "status", "--chunk-size", "2", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let status: Value = serde_json::from_str(&stdout(&out)).expect("json");
    assert!(status.get("continue").is_none(), "the output is the whole list: {status}");
    let status: Items<KeyStatus> = serde_json::from_value(status).expect("key statuses");
    let clusters: Vec<&str> = status.items.iter().map(|k| k.key.cluster.as_str()).collect();
    assert_eq!(clusters, ["c1", "c2", "c3", "c4", "c5"]);

    let table = stdout(&hub.cli(&["get", "status", "--chunk-size", "2"]));
    assert!((1..=5).all(|i| table.contains(&format!("c{i}"))), "{table}");
    // `--limit`: the first ones only, across pages.
    let out = hub.cli(&["get", "status", "--chunk-size", "2", "--limit", "3", "-o", "json"]);
    let first: Items<KeyStatus> = serde_json::from_str(&stdout(&out)).expect("json");
    assert_eq!(first.items.iter().map(|k| k.key.cluster.as_str()).collect::<Vec<_>>(), ["c1", "c2", "c3"]);

    let out = hub.cli(&["get", "clusters", "--chunk-size", "1", "-l", "env notin (dev)", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed: Value = serde_json::from_str(&stdout(&out)).expect("json");
    let names: Vec<&str> =
        listed["items"].as_array().expect("items").iter().filter_map(|c| c["metadata"]["name"].as_str()).collect();
    assert_eq!(names, ["c1", "c2", "c4", "c5"]);

    let out = hub.cli(&["get", "status", "--chunk-size", "2", "--phase", "Parked", "-o", "json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(serde_json::from_str::<Items<KeyStatus>>(&stdout(&out)).expect("json").items, vec![]);
}

#[test]
fn bad_paging_and_filter_flags_say_what_to_fix() {
    let hub = Hub::start();
    let out = hub.cli(&["get", "status", "--phase", "Broken"]);
    assert!(
        !out.status.success() && stderr(&out).contains("`phase`") && stderr(&out).contains("Broken"),
        "{}",
        stderr(&out)
    );
    let out = hub.cli(&["get", "clusters", "-l", "tier in (a"]);
    assert!(!out.status.success() && stderr(&out).contains("labelSelector"), "{}", stderr(&out));
    let out = hub.cli(&["get", "status", "-l", "a=b"]);
    assert!(!out.status.success() && stderr(&out).contains("--selector"), "{}", stderr(&out));
    let out = hub.cli(&["get", "syncsets", "-l", "a in (b"]);
    assert!(!out.status.success() && stderr(&out).contains("labelSelector"), "{}", stderr(&out));
    let out = hub.cli(&["get", "status", "--limit", "0"]);
    assert!(!out.status.success() && stderr(&out).contains("--limit"), "{}", stderr(&out));
    let out = hub.cli(&["get", "status", "--chunk-size", "0"]);
    assert!(!out.status.success() && stderr(&out).contains("--chunk-size"), "{}", stderr(&out));
}

/// `-o name` prints `kind/name` per line — with `-l`, across pages, and for one object —
/// and is refused where there are no objects to name.
#[test]
fn output_name_prints_kind_slash_name_per_line() {
    let hub = Hub::start();
    fleet(&hub);
    let out = hub.cli(&["get", "clusters", "-o", "name", "-l", "env=prod", "--chunk-size", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "cluster/c1\ncluster/c2\ncluster/c4\ncluster/c5\n");
    let out = hub.cli(&["get", "syncset", "base", "-o", "name"]);
    assert_eq!(stdout(&out), "syncset/base\n", "{}", stderr(&out));
    let out = hub.cli(&["get", "status", "-o", "name"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("-o name lists objects only"), "{}", stderr(&out));
}

/// `-l` selects objects of every kind by their labels, for `get` and for `delete`.
#[test]
fn syncsets_are_got_and_deleted_by_label_selector() {
    let hub = Hub::start();
    let set = |name: &str, labels: &str| {
        format!("apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: {name}, labels: {{{labels}}}}}\nspec: {{clusterNames: [c1]}}\n---\n")
    };
    let yaml =
        [set("web-eu", "team: web, region: eu"), set("web-us", "team: web, region: us"), set("db", "team: data")]
            .concat();
    let path = hub.dir.path().join("sets.yaml");
    std::fs::write(&path, yaml).expect("write");
    assert!(hub.cli(&["apply", "-f", path.to_str().expect("utf-8")]).status.success());

    let out = hub.cli(&["get", "syncsets", "-o", "name", "-l", "team=web,region notin (us)"]);
    assert_eq!(stdout(&out), "syncset/web-eu\n", "{}", stderr(&out));
    let out = hub.cli(&[
        "wait",
        "syncsets",
        "-l",
        "team=web",
        "--for",
        "condition=Applied",
        "--allow-empty",
        "--timeout",
        "10s",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let waited: Vec<&str> = text.lines().filter_map(|l| l.split(' ').next()).collect();
    assert_eq!(waited, ["syncset/web-eu", "syncset/web-us"]);
    let out = hub.cli(&["wait", "syncsets", "-l", "team=none", "--for", "condition=Applied"]);
    assert!(!out.status.success() && stderr(&out).contains("nothing to wait for"), "{}", stderr(&out));
    let out = hub.cli(&["delete", "syncsets", "-l", "team in (web)"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "syncset/web-eu deleted\nsyncset/web-us deleted\n");
    let out = hub.cli(&["get", "syncsets", "-o", "name"]);
    assert_eq!(stdout(&out), "syncset/db\n", "only the unselected one is left: {}", stderr(&out));
    let out = hub.cli(&["delete", "syncsets", "-l", "team=none"]);
    assert!(out.status.success() && stdout(&out).contains("no syncset in tenant default matches"), "{}", stdout(&out));
}
