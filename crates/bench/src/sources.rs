//! `fleetsync bench sources`: desired state from Git. One repository of `--manifests`
//! ConfigMaps under `--syncsets` directories, a SyncSet reading each directory on every
//! one of `--clusters` simulated clusters, and a hub (in this process, on SQLite, its
//! API on loopback) fetching the repository. Each of `--pushes` commits changes one
//! file and sends the push notification a Git host would; measured: from the
//! notification to the first apply on any cluster and to the whole fleet holding the
//! new revision (as the simulated clusters recorded it), the revisions stored per push
//! and the bytes the store grew by per push.

use crate::args::SourcesArgs;
use anyhow::{bail, Context, Result};
use fleetsync::report::print_rows;
use fleetsync_applier::ByEndpoint;
use fleetsync_hub::Hub;
use fleetsync_k8s_sim::fleet::{SimFleet, SimFleetConfig};
use fleetsync_k8s_sim::LatencyModel;
use fleetsync_model::{parse_documents, ResourceRef, WorkKey};
use fleetsync_runtime::RuntimeConfig;
use fleetsync_source::{Reach, SourceReconciler};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::StoreConfig;
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const HOOK_TOKEN: &str = "bench-hook-token";

#[derive(Debug, Serialize)]
struct SourcesReport {
    clusters: usize,
    syncsets: usize,
    manifests: usize,
    pushes: usize,
    /// From the push notification to the first apply on any cluster.
    first_apply_p50_ms: f64,
    first_apply_p99_ms: f64,
    /// From the push notification to every key holding the new revision.
    converged_p50_ms: f64,
    converged_max_ms: f64,
    /// Revisions the store kept per push (one: a fetch per new revision).
    revisions_per_push: f64,
    /// What the store's file contents grew by per push (a one-file change).
    stored_bytes_per_push: f64,
    /// The repository's files, for scale.
    repository_bytes: u64,
}

pub async fn run(a: SourcesArgs) -> Result<bool> {
    if a.syncsets == 0 || a.manifests < a.syncsets || a.clusters == 0 {
        bail!("--syncsets, --clusters and --manifests must be at least 1, and --manifests at least --syncsets");
    }
    let dir = tempfile::tempdir()?;
    let repo = dir.path().join("repo");
    let per = a.manifests / a.syncsets;
    let repository_bytes = write_repository(&repo, a.syncsets, per)?;
    commit(&repo)?;

    let db = dir.path().join("hub.db");
    let (store, _) = SqliteStore::open_for_work(&db, StoreConfig::default()).await?;
    let store: Arc<dyn fleetsync_store::Store> = Arc::new(store);
    let config = SimFleetConfig { latency: LatencyModel::hive_fleet_scaled(a.latency_scale), fail_rate: 0.0 };
    let sim = SimFleet::new(config);
    let applier = Arc::new(ByEndpoint { simulator: Some(Arc::new(sim.clone())), ..ByEndpoint::default() });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let sources = SourceReconciler { reach: Reach { local_files: true, ..Reach::default() }, ..Default::default() };
    let runtime = RuntimeConfig { resync_every: None, ..RuntimeConfig::default() };
    let hub = Hub::new(store.clone(), applier, runtime).sources(sources).api(listener);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(hub.run(shutdown.clone()));

    store.objects_apply(parse_documents(&fleet(&a, &repo))?).await.context("loading the fleet")?;
    let keys: Vec<(WorkKey, ResourceRef)> = (0..a.clusters)
        .flat_map(|c| (0..a.syncsets).map(move |s| (c, s)))
        .map(|(c, s)| (WorkKey::new("default", format!("c{c}"), format!("s{s}")), cm(s, 0)))
        .collect();
    // Generation 1 waited for the source; the first revision is generation 2.
    converged(&sim, &keys, 2, a.timeout).await.context("the first revision")?;

    let http = reqwest::Client::new();
    let (mut first, mut all) = (Vec::new(), Vec::new());
    let (revisions_before, bytes_before) = stored(&db)?;
    for push in 1..=a.pushes {
        std::fs::write(repo.join("apps/s0/m0.yaml"), config_map(0, 0, push))?;
        commit(&repo)?;
        let applies = sim.totals().applies;
        let start = Instant::now();
        let hook = http.post(format!("{url}/v1/sources/default/fleet/hook")).header("x-gitlab-token", HOOK_TOKEN);
        let answer = hook.body("{}").send().await?;
        if answer.status() != reqwest::StatusCode::ACCEPTED {
            bail!("the push notification was refused: {}", answer.text().await?);
        }
        while sim.totals().applies == applies {
            if start.elapsed() > a.timeout {
                bail!("push {push}: no apply within {:?}", a.timeout);
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
        first.push(start.elapsed());
        converged(&sim, &keys, 2 + push as i64, a.timeout).await.with_context(|| format!("push {push}"))?;
        all.push(start.elapsed());
    }
    let (revisions_after, bytes_after) = stored(&db)?;
    shutdown.cancel();
    running.await??;

    let pushes = a.pushes as f64;
    let report = SourcesReport {
        clusters: a.clusters,
        syncsets: a.syncsets,
        manifests: per * a.syncsets,
        pushes: a.pushes,
        first_apply_p50_ms: quantile(&mut first, 0.5),
        first_apply_p99_ms: quantile(&mut first, 0.99),
        converged_p50_ms: quantile(&mut all, 0.5),
        converged_max_ms: quantile(&mut all, 1.0),
        revisions_per_push: (revisions_after - revisions_before) as f64 / pushes,
        stored_bytes_per_push: (bytes_after - bytes_before) as f64 / pushes,
        repository_bytes,
    };
    if a.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!(
            "sources: {} clusters × {} SyncSets from one repository of {} manifests",
            a.clusters, a.syncsets, report.manifests
        );
        print_rows(&[
            ("push → first apply p50", format!("{:.1} ms", report.first_apply_p50_ms)),
            ("push → first apply p99", format!("{:.1} ms", report.first_apply_p99_ms)),
            ("push → fleet converged p50", format!("{:.0} ms", report.converged_p50_ms)),
            ("push → fleet converged max", format!("{:.0} ms", report.converged_max_ms)),
            ("revisions stored per push", format!("{}", report.revisions_per_push)),
            (
                "store bytes per push",
                format!("{:.0} (repository: {} bytes)", report.stored_bytes_per_push, repository_bytes),
            ),
        ]);
    }
    Ok(true)
}

/// The ConfigMap of manifest `m` of SyncSet `s` at push `push`.
fn config_map(s: usize, m: usize, push: usize) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: s{s}-m{m}, namespace: apps}}\ndata: {{push: \"{push}\", filler: \"{}\"}}\n", "x".repeat(200))
}

fn cm(s: usize, m: usize) -> ResourceRef {
    ResourceRef {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: format!("s{s}-m{m}"),
    }
}

/// Writes `per` manifests under `apps/sN/` for each SyncSet; the bytes written.
fn write_repository(repo: &Path, syncsets: usize, per: usize) -> Result<u64> {
    let mut bytes = 0;
    for s in 0..syncsets {
        let dir = repo.join(format!("apps/s{s}"));
        std::fs::create_dir_all(&dir)?;
        for m in 0..per {
            let text = config_map(s, m, 0);
            bytes += text.len() as u64;
            std::fs::write(dir.join(format!("m{m}.yaml")), text)?;
        }
    }
    git(repo, &["init", "-q", "-b", "main"])?;
    Ok(bytes)
}

fn commit(repo: &Path) -> Result<()> {
    git(repo, &["add", "-A"])?;
    git(repo, &["commit", "-q", "-m", "push"])
}

fn git(dir: &Path, args: &[&str]) -> Result<()> {
    let out = Command::new("git")
        .args(["-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .context("running git (is it installed?)")?;
    if !out.status.success() {
        bail!("git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(())
}

/// The clusters, the SyncSets (each reading its directory), the source and its webhook
/// Secret, as YAML.
fn fleet(a: &SourcesArgs, repo: &Path) -> String {
    let mut y = String::new();
    for c in 0..a.clusters {
        y.push_str(&format!("apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: c{c}}}\nspec: {{endpoint: {{simulator: {{}}}}}}\n---\n"));
    }
    for s in 0..a.syncsets {
        y.push_str(&format!("apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: s{s}}}\nspec: {{clusterSelector: {{}}, sourceRef: {{kind: GitRepository, name: fleet, path: apps/s{s}}}}}\n---\n"));
    }
    y.push_str(&format!("apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: hook}}\nstringData: {{token: {HOOK_TOKEN}}}\n---\n"));
    y.push_str(&format!(
        "apiVersion: fleetsync.io/v1\nkind: GitRepository\nmetadata: {{name: fleet}}\nspec: {{url: 'file://{}', ref: {{branch: main}}, interval: 24h, webhookSecretRef: {{name: hook}}}}\n",
        repo.display()
    ));
    y
}

/// Waits until every key holds its first resource at `generation`.
async fn converged(sim: &SimFleet, keys: &[(WorkKey, ResourceRef)], generation: i64, timeout: Duration) -> Result<()> {
    let start = Instant::now();
    let mut from = 0;
    while from < keys.len() {
        let (key, r) = &keys[from];
        if sim.generation_of(key, r) == Some(generation) {
            from += 1;
            continue;
        }
        if start.elapsed() > timeout {
            bail!("{from} of {} keys at generation {generation} after {timeout:?}", keys.len());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

/// The revisions the store holds, and the bytes of its contents.
fn stored(db: &Path) -> Result<(i64, i64)> {
    let c = rusqlite::Connection::open(db)?;
    let revisions = c.query_row("SELECT count(*) FROM artifacts", [], |r| r.get(0))?;
    let bytes = c.query_row("SELECT coalesce(sum(length(content)), 0) FROM contents", [], |r| r.get(0))?;
    Ok((revisions, bytes))
}

fn quantile(xs: &mut [Duration], q: f64) -> f64 {
    xs.sort();
    xs.get(((xs.len().saturating_sub(1)) as f64 * q).round() as usize).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}
