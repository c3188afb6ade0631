//! A SyncSet whose resources live in a Git repository or an OCI registry, judged from
//! what the simulated clusters hold: the hub fetches the repository's branch as a key
//! of its queue, each new commit becomes a new generation of the SyncSet that the
//! clusters then hold (one fetched on a push notification, one found by polling at the
//! interval), and a commit whose manifests are broken is refused while the clusters
//! keep the last good one; a tag moved in a registry reaches them the same way, the
//! registry's own log showing one layer pulled per digest.

mod common;

use common::TestHub;
use fleetsync_applier::egress::EgressPolicy;
use fleetsync_model::{ResourceRef, WorkKey};
use fleetsync_runtime::RuntimeConfig;
use fleetsync_source::{Reach, SourceReconciler};
use fleetsync_testkit::git::{Repo, SshServer};
use fleetsync_testkit::registry::Registry;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLUSTERS: usize = 3;
const HOOK_TOKEN: &str = "hook-token-1";

/// Commits `files` (path, text) to `repo`; the commit's id.
fn commit(repo: &Repo, files: &[(&str, &str)]) -> String {
    let files: Vec<(&str, &[u8])> = files.iter().map(|(p, c)| (*p, c.as_bytes())).collect();
    repo.commit(&files, "change")
}

fn config_map(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: apps}}\ndata: {{v: \"{value}\"}}\n")
}

fn cm(name: &str) -> ResourceRef {
    ResourceRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: name.into(),
    }
}

/// Whether every cluster holds each of `resources` at `generation`, as the target
/// recorded its writes.
fn held(hub: &TestHub, resources: &[ResourceRef], generation: i64) -> bool {
    (0..CLUSTERS).all(|c| {
        let key = WorkKey::new("default", format!("c{c}"), "web");
        resources.iter().all(|r| hub.sim.generation_of(&key, r) == Some(generation))
    })
}

async fn wait_held(hub: &TestHub, resources: &[ResourceRef], generation: i64, within: Duration) {
    let start = Instant::now();
    while !held(hub, resources, generation) {
        let status: Value = hub.get("/v1/status?tenant=default").send().await.expect("hub").json().await.expect("json");
        assert!(start.elapsed() < within, "the clusters never held generation {generation}: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The simulated clusters c0, c1… as documents, each ending with `---`.
fn clusters() -> String {
    (0..CLUSTERS)
        .map(|c| format!("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{c}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n---\n"))
        .collect()
}

async fn object(hub: &TestHub, path: &str) -> Value {
    hub.get(&format!("{path}?tenant=default")).send().await.expect("hub").json().await.expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_commit_to_the_branch_reaches_the_clusters_and_a_broken_one_is_held_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(dir.path(), "fleet");
    let first = commit(
        &repo,
        &[
            ("apps/a.yaml", &config_map("a", "1")),
            ("apps/b.yaml", &format!("{}---\n{}", config_map("b1", "1"), config_map("b2", "1"))),
            ("README.md", "not a manifest"),
            ("other/c.yaml", &config_map("elsewhere", "1")),
        ],
    );
    let sources = SourceReconciler { reach: Reach { local_files: true, ..Reach::default() }, ..Default::default() };
    let hub = TestHub::start_with(RuntimeConfig::default(), 0.0, |hub| hub.sources(sources)).await;
    let mut fleet = clusters();
    // The SyncSet comes first: it waits for the source applied with it.
    fleet.push_str(&format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: web}}\nspec:\n  clusterSelector: {{}}\n  sourceRef: {{kind: GitRepository, name: fleet, path: apps}}\n---\napiVersion: fleetsync.io/v1\nkind: GitRepository\nmetadata: {{name: fleet}}\nspec: {{url: \"{}\", ref: {{branch: main}}, interval: 10s, webhookSecretRef: {{name: hook}}}}\n---\napiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: hook}}\nstringData: {{token: {HOOK_TOKEN}}}\n",
        repo.file_url()
    ));
    hub.apply(&fleet).await;

    // The first commit: the manifests under apps/, in file order.
    wait_held(&hub, &[cm("a"), cm("b1"), cm("b2")], 2, Duration::from_secs(30)).await;
    let key = WorkKey::new("default", "c0", "web");
    assert_eq!(hub.sim.resource_count(&key), 3, "nothing from outside apps/");
    let source = object(&hub, "/v1/gitrepositories/fleet").await;
    assert_eq!(source["status"]["revision"], first, "{source}");
    let set = object(&hub, "/v1/syncsets/web").await;
    assert_eq!((&set["status"]["sourceRevision"], &set["metadata"]["generation"]), (&first.as_str().into(), &2.into()));

    // A commit fetched at once on a push notification (GitLab's form: the token itself).
    let second = commit(&repo, &[("apps/a.yaml", &config_map("a", "2")), ("apps/d.yaml", &config_map("d", "2"))]);
    let hook = hub.http.post(format!("{}/v1/sources/default/fleet/hook", hub.url)).header("x-gitlab-token", HOOK_TOKEN);
    let pushed = hook.body(r#"{"object_kind": "push"}"#).send().await.expect("hub");
    assert_eq!(pushed.status(), reqwest::StatusCode::ACCEPTED);
    wait_held(&hub, &[cm("a"), cm("b1"), cm("b2"), cm("d")], 3, Duration::from_secs(30)).await;
    assert_eq!(object(&hub, "/v1/syncsets/web").await["status"]["sourceRevision"], second);

    // A commit found by polling at the interval.
    let third = commit(&repo, &[("apps/e.yaml", &config_map("e", "3"))]);
    wait_held(&hub, &[cm("a"), cm("e")], 4, Duration::from_secs(40)).await;
    assert_eq!(object(&hub, "/v1/gitrepositories/fleet").await["status"]["revision"], third);

    // A commit whose manifests do not parse: refused, the clusters keep the third, and
    // the source's key says why.
    commit(&repo, &[("apps/broken.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [unclosed\n")]);
    hub.post("/v1/gitrepositories/fleet/reconcile?tenant=default").send().await.expect("hub");
    let source_key = WorkKey::source("default", "fleet");
    let start = Instant::now();
    let error = loop {
        let status = object(&hub, "/v1/status").await;
        let row = status["items"].as_array().and_then(|items| {
            items.iter().find(|k| k["cluster"] == source_key.cluster.as_str() && k["lastError"].is_string())
        });
        if let Some(row) = row {
            break row["lastError"].as_str().unwrap_or_default().to_string();
        }
        assert!(start.elapsed() < Duration::from_secs(30), "the broken commit was never refused: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(error.contains("apps/broken.yaml"), "{error}");
    assert_eq!(object(&hub, "/v1/gitrepositories/fleet").await["status"]["revision"], third);
    let at: Vec<_> = (0..CLUSTERS)
        .map(|c| hub.sim.generation_of(&WorkKey::new("default", format!("c{c}"), "web"), &cm("e")))
        .collect();
    assert_eq!(at, [Some(4); CLUSTERS], "{}", object(&hub, "/v1/status").await);
    assert_eq!(object(&hub, "/v1/syncsets/web").await["metadata"]["generation"], 4);
    hub.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_moved_in_the_registry_reaches_the_clusters_with_one_pull_per_digest() {
    let registry = Registry::start();
    let first = registry.push("fleet", "prod", &[("apps/a.yaml", config_map("a", "1").as_bytes())]).await;
    let loopback = "127.0.0.0/8".parse().expect("a rule");
    let reach = Reach { egress: Arc::new(EgressPolicy::default().allowing(loopback)), local_files: false };
    let sources = SourceReconciler { reach, ..Default::default() };
    let hub = TestHub::start_with(RuntimeConfig::default(), 0.0, |hub| hub.sources(sources)).await;
    let mut fleet = clusters();
    fleet.push_str(&format!(
        "apiVersion: fleetsync.io/v1\nkind: OCIRepository\nmetadata: {{name: fleet}}\nspec: {{url: \"{}\", ref: {{tag: prod}}, insecure: true, interval: 1h, webhookSecretRef: {{name: hook}}}}\n---\napiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: web}}\nspec:\n  clusterSelector: {{}}\n  sourceRef: {{kind: OCIRepository, name: fleet, path: apps}}\n---\napiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: hook}}\nstringData: {{token: {HOOK_TOKEN}}}\n",
        registry.url("fleet")
    ));
    hub.apply(&fleet).await;

    wait_held(&hub, &[cm("a")], 2, Duration::from_secs(30)).await;
    let source = object(&hub, "/v1/ocirepositories/fleet").await;
    assert_eq!(source["status"]["revision"], first, "{source}");
    assert_eq!(object(&hub, "/v1/syncsets/web").await["status"]["sourceRevision"], first);
    assert_eq!(registry.blob_pulls("fleet"), 1, "{:?}", registry.requests());

    // Sources of both kinds share one name space.
    let git = "apiVersion: fleetsync.io/v1\nkind: GitRepository\nmetadata: {name: fleet}\nspec: {url: \"https://git.example/fleet.git\", ref: {branch: main}}\n";
    let taken = hub.post("/v1/apply").header("content-type", "application/yaml").body(git).send().await.expect("hub");
    assert_eq!(taken.status(), reqwest::StatusCode::CONFLICT, "{}", taken.text().await.unwrap_or_default());

    // The tag moved (the interval is an hour away): a push notification pulls it.
    let second = registry.push("fleet", "prod", &[("apps/a.yaml", config_map("a", "2").as_bytes())]).await;
    let hook = hub.http.post(format!("{}/v1/sources/default/fleet/hook", hub.url)).header("x-gitlab-token", HOOK_TOKEN);
    assert_eq!(hook.body("{}").send().await.expect("hub").status(), reqwest::StatusCode::ACCEPTED);
    wait_held(&hub, &[cm("a")], 3, Duration::from_secs(30)).await;
    assert_eq!(object(&hub, "/v1/syncsets/web").await["status"]["sourceRevision"], second);
    assert_eq!(registry.blob_pulls("fleet"), 2, "{:?}", registry.requests());

    // Asked again with nothing new: the digest is asked for, no layer pulled.
    let asked = registry.requests().len();
    hub.post("/v1/ocirepositories/fleet/reconcile?tenant=default").send().await.expect("hub");
    let start = Instant::now();
    while registry.requests().len() == asked {
        assert!(start.elapsed() < Duration::from_secs(30), "the source was never asked again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(registry.blob_pulls("fleet"), 2, "{:?}", registry.requests());
    hub.stop().await;
}

/// A GitRepository over SSH: the hub reads it with the key and known hosts of the
/// Secret `secretRef` names, and the clusters hold what was committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repository_over_ssh_is_read_with_the_secrets_key() {
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "fleet");
    commit(&repo, &[("apps/a.yaml", &config_map("a", "1"))]);
    let server = SshServer::start(root.path());
    let loopback = "127.0.0.0/8".parse().expect("a rule");
    let reach = Reach { egress: Arc::new(EgressPolicy::default().allowing(loopback)), local_files: false };
    let sources = SourceReconciler { reach, ..Default::default() };
    let hub = TestHub::start_with(RuntimeConfig::default(), 0.0, |hub| hub.sources(sources)).await;
    let indent = |text: &str| text.lines().map(|l| format!("    {l}\n")).collect::<String>();
    let mut fleet = clusters();
    fleet.push_str(&format!(
        "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: deploy-key}}\nstringData:\n  identity: |\n{}  known_hosts: |\n{}---\n\
         apiVersion: fleetsync.io/v1\nkind: GitRepository\nmetadata: {{name: fleet}}\nspec: {{url: \"{}\", ref: {{branch: main}}, secretRef: {{name: deploy-key}}}}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: web}}\nspec:\n  clusterSelector: {{}}\n  sourceRef: {{kind: GitRepository, name: fleet, path: apps}}\n",
        indent(&server.identity),
        indent(&server.known_hosts),
        server.url("fleet")
    ));
    hub.apply(&fleet).await;
    wait_held(&hub, &[cm("a")], 2, Duration::from_secs(30)).await;
    let shown = object(&hub, "/v1/secrets/deploy-key").await.to_string();
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    hub.stop().await;
}
