//! Four workers on PostgreSQL read a SyncSet's manifests from an OCI registry
//! (`docker-registry` on loopback) or a Git server (`git http-backend` on loopback):
//! each new revision is downloaded once, as the server's own log shows, also when the
//! busiest worker is killed with SIGKILL in the middle of the rollout the new revision
//! started, and every cluster ends holding it.

use crate::fixture::{block_on, serial, Fixture, Sim, Worker};
use fleetsync_model::{parse_documents, Document, WorkKey};
use fleetsync_store::{Objects, WorkQueue};
use fleetsync_testkit::cluster_name;
use fleetsync_testkit::git::{Asked, GitServer, Repo};
use fleetsync_testkit::registry::Registry;
use serde_json::Value;
use std::time::{Duration, Instant};

const CLUSTERS: usize = 40;

#[test]
fn four_workers_pull_each_digest_once_also_when_one_is_killed_mid_rollout() {
    let _one_at_a_time = serial();
    block_on(async { downloads_with_a_kill(Remote::Oci(Registry::start())).await });
}

#[test]
fn four_workers_fetch_each_commit_once_also_when_one_is_killed_mid_rollout() {
    let _one_at_a_time = serial();
    let root = tempfile::tempdir().expect("tempdir");
    let repo = Repo::new(root.path(), "fleet");
    let server = GitServer::start(root.path().to_path_buf());
    block_on(async { downloads_with_a_kill(Remote::Git(server, repo)).await });
}

/// Where the manifests live: a registry's repository `fleet` (tag `prod`), or a Git
/// server's repository `fleet` (branch `main`).
enum Remote {
    Oci(Registry),
    Git(GitServer, Repo),
}

impl Remote {
    /// Publishes `apps/a.yaml` and `apps/b.yaml` with `value` (a push of the tag, a commit).
    async fn publish(&self, value: &str) {
        let (a, b) = (config_map("a", value), config_map("b", value));
        match self {
            Remote::Oci(registry) => {
                registry.push("fleet", "prod", &[("apps/a.yaml", &a), ("apps/b.yaml", &b)]).await;
            }
            Remote::Git(_, repo) => {
                repo.commit(&[("apps/a.yaml", &a), ("apps/b.yaml", &b)], value);
            }
        }
    }

    /// The source's document, polled every 10s.
    fn source(&self) -> String {
        match self {
            Remote::Oci(registry) => format!(
                "kind: OCIRepository\nmetadata: {{name: fleet}}\nspec: {{url: '{}', ref: {{tag: prod}}, insecure: true, interval: 10s}}",
                registry.url("fleet")
            ),
            Remote::Git(server, _) => format!(
                "kind: GitRepository\nmetadata: {{name: fleet}}\nspec: {{url: '{}/fleet', ref: {{branch: main}}, interval: 10s}}",
                server.url
            ),
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Remote::Oci(_) => "OCIRepository",
            Remote::Git(..) => "GitRepository",
        }
    }

    /// Downloads, as the server logged them: layers pulled, packs fetched.
    fn downloads(&self) -> usize {
        match self {
            Remote::Oci(registry) => registry.blob_pulls("fleet"),
            Remote::Git(server, _) => server.fetches(),
        }
    }

    /// Questions that download nothing: the tag's digest asked, the refs listed.
    fn asked(&self) -> usize {
        match self {
            Remote::Oci(r) => r.requests().iter().filter(|q| q.starts_with("HEAD /v2/fleet/manifests/prod")).count(),
            Remote::Git(server, _) => server.asked().iter().filter(|a| **a == Asked::LsRefs).count(),
        }
    }

    fn log(&self) -> String {
        match self {
            Remote::Oci(registry) => format!("{:?}", registry.requests()),
            Remote::Git(server, _) => format!("{:?}", server.asked()),
        }
    }
}

fn config_map(name: &str, value: &str) -> Vec<u8> {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: apps}}\ndata: {{v: \"{value}\"}}\n")
        .into_bytes()
}

/// The clusters on the sim, the source `fleet` (polled every 10s), and the SyncSet
/// `app` reading its `apps/`, staged by 25 %, 50 % and 100 %.
fn fleet(sim: &Sim, remote: &Remote) -> Vec<Document> {
    let mut yaml = String::new();
    for i in 0..CLUSTERS {
        let name = cluster_name(i);
        yaml += &format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{env: prod}}}}\n\
             spec: {{endpoint: {{http: {{url: '{}/clusters/{name}'}}}}}}\n---\n",
            sim.url
        );
    }
    yaml += &format!(
        "apiVersion: fleetsync.io/v1\n{}\n---\n\
         apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterSelector: {{matchLabels: {{env: prod}}}}\n  \
         resourceApplyMode: Upsert\n  sourceRef: {{kind: {}, name: fleet, path: apps}}\n  \
         rollout:\n    steps: [{{percent: 25}}, {{percent: 50}}, {{percent: 100}}]\n    minSuccessTime: 1s\n",
        remote.source(),
        remote.kind()
    );
    parse_documents(&yaml).expect("the fleet's YAML")
}

/// The generation each cluster's `app` resources are at on the sim (the lowest of
/// them; 0 if it holds none).
async fn generations(sim: &Sim) -> Vec<i64> {
    let keys = sim.get("/_sim/keys").await;
    (0..CLUSTERS)
        .map(|i| {
            let key = WorkKey::new("default", cluster_name(i), "app").to_string();
            let held: Vec<i64> =
                keys[&key].as_object().map(|r| r.values().filter_map(Value::as_i64).collect()).unwrap_or_default();
            if held.len() == 2 {
                held.into_iter().min().unwrap_or(0)
            } else {
                0
            }
        })
        .collect()
}

async fn wait_all_at(fx: &Fixture, sim: &Sim, generation: i64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let at = generations(sim).await;
        if at.iter().all(|g| *g == generation) {
            return;
        }
        assert!(Instant::now() < deadline, "not every cluster reached {generation}: {at:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn downloads_with_a_kill(remote: Remote) {
    remote.publish("1").await;
    let sim = Sim::start(0.2);
    let fx = Fixture::new(if matches!(remote, Remote::Oci(_)) { "scale_oci" } else { "scale_git" }).await;
    fx.store.objects_apply(fleet(&sim, &remote)).await.expect("apply the fleet");
    fx.analyze().await;
    let knobs = [
        "--lease-ttl",
        "2s",
        "--renew-every",
        "500ms",
        "--member-ttl",
        "1s",
        "--max-in-flight",
        "16",
        "--egress-allow",
        "127.0.0.0/8",
    ];
    let mut workers: Vec<Worker> = (1..=4).map(|i| Worker::start(&fx, &format!("src-{i:02}"), &knobs)).collect();

    // The first revision: generation 2 of the SyncSet (it waited for the source at 1).
    wait_all_at(&fx, &sim, 2, Duration::from_secs(60)).await;
    assert_eq!(remote.downloads(), 1, "{}", remote.log());

    // A new revision; the source is asked at once, and it rolls out.
    remote.publish("2").await;
    fx.store.work_retry_by(&WorkKey::source("default", "fleet"), None).await.expect("fetch now");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let at = generations(&sim).await;
        let moved = at.iter().filter(|g| **g == 3).count();
        if moved > 0 && moved < CLUSTERS {
            break;
        }
        assert!(moved < CLUSTERS, "the rollout ended before a worker could be killed in it: {at:?}");
        assert!(Instant::now() < deadline, "the new revision never started rolling out: {at:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Mid-rollout: the busiest worker dies without a word, and a new one starts.
    let leases = fx.lease_counts().await;
    let victim =
        (0..workers.len()).max_by_key(|&i| leases.get(&workers[i].id).copied().unwrap_or(0)).expect("a worker");
    workers[victim].kill9();
    workers.push(Worker::start(&fx, "src-05", &knobs));

    wait_all_at(&fx, &sim, 3, Duration::from_secs(90)).await;
    assert_eq!(remote.downloads(), 2, "one download per revision: {}", remote.log());

    // Polls at the interval ask what the ref points at and download nothing.
    let before = remote.asked();
    let deadline = Instant::now() + Duration::from_secs(30);
    while remote.asked() == before {
        assert!(Instant::now() < deadline, "the source was not polled: {}", remote.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(remote.downloads(), 2, "{}", remote.log());
    assert_eq!(generations(&sim).await, vec![3; CLUSTERS]);
}
