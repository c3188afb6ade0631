//! Kubeconfigs kept as fleetsync Secrets: a cluster is reached through the kubeconfig
//! in its Secret, and the Secret's token never shows: not in the hub's log (at debug
//! level), not in status or errors, not in any API or CLI output.

mod common;

use common::*;
use fleetsync_model::{KeyStatus, Phase};
use std::time::Duration;

/// The marker that stands for a credential; it must never be printed.
const MARKER: &str = "MARKER-7f3a9c-credential";

fn kubeconfig(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{{name: c, cluster: {{server: '{server}'}}}}]\nusers: [{{name: u, user: {{token: {token}}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n"
    )
}

/// kc-good reaches the sim through its kubeconfig; kc-broken's Secret is not a
/// kubeconfig (and quotes the marker where a parser would show it); kc-missing names a
/// Secret that does not exist.
fn fleet(sim: &str) -> String {
    let good = kubeconfig(&format!("http://{sim}/clusters/kc-good"), MARKER);
    let indent = |t: &str| t.lines().map(|l| format!("      {l}")).collect::<Vec<_>>().join("\n");
    format!(
        r#"apiVersion: fleetsync.io/v1
kind: Secret
metadata: {{name: good-kc}}
stringData:
  kubeconfig: |
{good}
---
apiVersion: fleetsync.io/v1
kind: Secret
metadata: {{name: broken-kc}}
stringData:
  kubeconfig: "{MARKER}: [unclosed"
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {{name: kc-good}}
spec: {{endpoint: {{kubeconfig: {{secretRef: good-kc}}}}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {{name: kc-broken}}
spec: {{endpoint: {{kubeconfig: {{secretRef: broken-kc}}}}}}
---
apiVersion: fleetsync.io/v1
kind: Cluster
metadata: {{name: kc-missing}}
spec: {{endpoint: {{kubeconfig: {{secretRef: missing-kc}}}}}}
---
apiVersion: fleetsync.io/v1
kind: SyncSet
metadata: {{name: base}}
spec:
  clusterNames: [kc-good, kc-broken, kc-missing]
  resources:
    - {{apiVersion: v1, kind: Namespace, metadata: {{name: app}}}}
    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: cfg, namespace: app}}, data: {{k: v}}}}
"#,
        good = indent(&good)
    )
}

/// A GET with curl (the tests need no HTTP client crate of their own).
fn http_get(url: &str) -> String {
    let out = std::process::Command::new("curl").args(["-sf", url]).output().expect("curl");
    assert!(out.status.success(), "GET {url} failed");
    stdout(&out)
}

fn key_of<'a>(items: &'a [KeyStatus], cluster: &str) -> Option<&'a KeyStatus> {
    items.iter().find(|k| k.key.cluster == cluster)
}

#[test]
fn kubeconfig_secrets_reach_clusters_and_never_show() {
    let sim = SimChild::start(0.0);
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("hub.log");
    let hub = Hub::start_logged(Some(&log));
    let file = dir.path().join("fleet.yaml");
    std::fs::write(&file, fleet(&sim.addr)).expect("write");

    let mut shown = Vec::new();
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    assert!(out.status.success(), "{}", stderr(&out));
    shown.push(stdout(&out) + &stderr(&out));

    // The good cluster converges through its kubeconfig; the others fail with a
    // message that says what to fix.
    hub.wait_until(Duration::from_secs(30), |h| {
        let items = status_items(h);
        let failed = |c: &str| key_of(&items, c).is_some_and(|k| k.attempts >= 1 && k.last_error.is_some());
        key_of(&items, "kc-good").is_some_and(|k| k.phase == Phase::Applied)
            && failed("kc-broken")
            && failed("kc-missing")
    });
    let items = status_items(&hub);
    let error = |c: &str| key_of(&items, c).and_then(|k| k.last_error.clone()).unwrap_or_default();
    assert!(error("kc-broken").contains("not a valid kubeconfig"), "{}", error("kc-broken"));
    assert!(
        error("kc-missing").contains("missing-kc") && error("kc-missing").contains("does not exist"),
        "{}",
        error("kc-missing")
    );
    let report: serde_json::Value =
        serde_json::from_str(&http_get(&format!("http://{}/_sim/report", sim.addr))).expect("sim report");
    assert_eq!(report["totals"]["applies"], 2, "{report}");

    // A rotated Secret re-applies the keys of the clusters that use it.
    let rotated = std::fs::read_to_string(&file).expect("read").replacen(MARKER, &format!("{MARKER}-2"), 1);
    std::fs::write(&file, rotated).expect("write");
    let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
    let said = stdout(&out);
    assert!(said.contains("secret/good-kc updated (generation 2, 1 keys enqueued)"), "{said}");
    shown.push(stdout(&out) + &stderr(&out));

    for args in [
        &["get", "secrets"][..],
        &["get", "secrets", "-o", "yaml"],
        &["get", "secrets", "good-kc", "-o", "json"],
        &["get", "status", "-o", "json"],
        &["get", "status", "kc-broken"],
        &["get", "clusters", "-o", "yaml"],
        &["get", "events", "-o", "json"],
    ] {
        let out = hub.cli(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        shown.push(stdout(&out));
    }
    assert!(shown[3].contains("good-kc") && shown[3].contains("kubeconfig"), "secrets are listed by key: {}", shown[3]);
    let metrics = http_get(&format!("{}/metrics", hub.url));
    drop(hub);
    let logged = std::fs::read_to_string(&log).expect("hub log");
    assert!(logged.contains("DEBUG") || logged.contains("INFO"), "the hub logged at debug level: {logged}");
    shown.extend([metrics, logged]);
    for (i, text) in shown.iter().enumerate() {
        assert!(!text.contains(MARKER), "output {i} shows the credential:\n{text}");
    }
}

/// A Secret pointing cluster c1 at `server`, the cluster, and four SyncSets of three
/// ConfigMaps each (four keys that arrive together).
fn rotating_fleet(server: &str) -> String {
    let kc = kubeconfig(&format!("http://{server}/clusters/c1"), "t");
    let kc: String = kc.lines().map(|l| format!("    {l}\n")).collect();
    let mut yaml = format!(
        "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: kc}}\nstringData:\n  kubeconfig: |\n{kc}---\n\
         apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c1}}\nspec: {{endpoint: {{kubeconfig: {{secretRef: kc}}}}}}\n"
    );
    for s in 1..=4 {
        yaml += &format!("---\napiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: s{s}}}\nspec:\n  clusterNames: [c1]\n  resources:\n");
        for r in 1..=3 {
            yaml += &format!("    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: s{s}-{r}, namespace: app}}, data: {{k: v}}}}\n");
        }
    }
    yaml
}

fn sim_applies(sim: &SimChild) -> u64 {
    let report: serde_json::Value =
        serde_json::from_str(&http_get(&format!("http://{}/_sim/report", sim.addr))).expect("sim report");
    report["totals"]["applies"].as_u64().expect("applies")
}

/// Secret rotation within a second of the last use of the old client: every write of
/// the keys the rotation re-enqueued goes to the new server, none to the old one
/// (which still answers), as the servers themselves recorded.
#[test]
fn a_rotated_kubeconfig_is_used_by_the_runs_it_enqueued() {
    let (old, new) = (SimChild::start(0.0), SimChild::start(0.0));
    let hub = Hub::start();
    let file = hub.dir.path().join("fleet.yaml");
    let apply = |server: &str| {
        std::fs::write(&file, rotating_fleet(server)).expect("write");
        let out = hub.cli(&["apply", "-f", file.to_str().expect("utf-8")]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    // SyncSet → when its key was last applied, for the keys that are Applied.
    let applied_at = |h: &Hub| -> std::collections::BTreeMap<String, String> {
        let items = status_items(h);
        items
            .iter()
            .filter(|k| k.phase == Phase::Applied)
            .map(|k| (k.key.syncset.clone(), format!("{:?}", k.last_applied_at)))
            .collect()
    };

    apply(&old.addr);
    hub.wait_until(Duration::from_secs(30), |h| applied_at(h).len() == 4);
    let before = applied_at(&hub);
    assert_eq!(sim_applies(&old), 12, "converged on the old server");

    // At once (the old client was last used a moment ago, and is still cached).
    let said = apply(&new.addr);
    assert!(said.contains("secret/kc updated (generation 2, 4 keys enqueued)"), "{said}");
    hub.wait_until(Duration::from_secs(30), |h| {
        let now = applied_at(h);
        now.len() == 4 && now.iter().all(|(key, at)| before.get(key) != Some(at))
    });

    assert_eq!(sim_applies(&old), 12, "the old server got no write after the rotation");
    assert_eq!(sim_applies(&new), 12, "the new server got every write of the re-enqueued keys");
    let keys: serde_json::Value =
        serde_json::from_str(&http_get(&format!("http://{}/_sim/keys", new.addr))).expect("sim keys");
    for s in 1..=4 {
        assert_eq!(keys[format!("default/c1/s{s}")].as_object().map(|r| r.len()), Some(3), "{keys}");
    }
}
