//! What every scale-out test stands on: a schema of its own with its store, `fleetsync
//! worker` children, a `fleetsync sim` child, and running one test at a time.

use crate::common::{bin, database_url, Schema, SimChild};
use fleetsync_model::shard::owner_of;
use fleetsync_model::{Endpoint, Phase, WorkKey};
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::{Members, Objects, StatusRead};
use fleetsync_store::{StatusFilter, StoreConfig};
use fleetsync_testkit::{cluster_name, hive_fleet, syncset_name, FleetShape};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// What a measuring window saw: applies per second, and who ran each shard's keys.
pub(crate) struct Window {
    pub(crate) rate: f64,
    pub(crate) owners: BTreeMap<u16, String>,
}

/// One test's schema, its store, and a plain connection to look into it.
pub(crate) struct Fixture {
    pub(crate) schema: String,
    pub(crate) store: PgStore,
    pub(crate) db: tokio_postgres::Client,
    pub(crate) url: String,
    pub(crate) logs: tempfile::TempDir,
    /// Dropped last: the schema goes once everything using it is gone.
    _drop: Schema,
}

impl Fixture {
    pub(crate) async fn new(prefix: &str) -> Fixture {
        let url = database_url();
        let schema = format!("{prefix}_{}", std::process::id());
        let (db, connection) =
            tokio_postgres::connect(&url, tokio_postgres::NoTls).await.expect("connect to PostgreSQL");
        tokio::spawn(connection);
        db.batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE")).await.expect("drop a leftover schema");
        let guard = Schema(schema.clone());
        let options = PgOptions { schema: Some(schema.clone()), pool_size: 4, migrate: true };
        let store = PgStore::connect_with(&url, options, StoreConfig::default()).await.expect("open the store");
        let logs = tempfile::tempdir().expect("tempdir");
        Fixture { schema, store, db, url, logs, _drop: guard }
    }

    /// Applies the fleet at `revision` (SyncSet generation `revision`), on the sim.
    pub(crate) async fn load(&self, shape: FleetShape, sim: &Sim, revision: i64) {
        let endpoint = |i: usize| Endpoint::Http { url: format!("{}/clusters/{}", sim.url, cluster_name(i)) };
        self.store.objects_apply(hive_fleet(shape, endpoint, &format!("r{revision}"))).await.expect("apply the fleet");
        if revision == 1 {
            self.analyze().await;
        }
    }

    /// The fleet at revision 1: the clusters, then each SyncSet in a transaction of its
    /// own (its keys are claimable at a time of their own).
    pub(crate) async fn load_by_syncset(&self, shape: FleetShape, sim: &Sim) {
        let endpoint = |i: usize| Endpoint::Http { url: format!("{}/clusters/{}", sim.url, cluster_name(i)) };
        let mut docs = hive_fleet(shape, endpoint, "r1");
        let syncsets = docs.split_off(shape.clusters);
        self.store.objects_apply(docs).await.expect("apply the clusters");
        for s in syncsets {
            self.store.objects_apply(vec![s]).await.expect("apply a SyncSet");
        }
        self.analyze().await;
    }

    /// Planner statistics for the freshly filled tables, as a long-running store has.
    pub(crate) async fn analyze(&self) {
        let s = &self.schema;
        self.db.batch_execute(&format!("ANALYZE {s}.work, {s}.clusters, {s}.syncsets")).await.expect("analyze");
    }

    /// (shard, lease owner) of every key being run.
    pub(crate) async fn running(&self) -> Vec<(u16, String)> {
        let sql = format!("SELECT shard, lease_owner FROM {}.work WHERE phase = 'running'", self.schema);
        let rows = self.db.query(&sql, &[]).await.expect("query running keys");
        rows.iter().map(|r| (u16::try_from(r.get::<_, i16>(0)).expect("a shard"), r.get::<_, String>(1))).collect()
    }

    /// Keys being run, by lease owner.
    pub(crate) async fn lease_counts(&self) -> HashMap<String, usize> {
        let mut counts = HashMap::new();
        for (_, owner) in self.running().await {
            *counts.entry(owner).or_default() += 1;
        }
        counts
    }

    /// Waits until `members` are exactly the live members, each has heard of the others
    /// (its latest heartbeat is after the last one joined), and every key being run is
    /// run by its shard's owner among them (leases taken before are over); with
    /// `busy`, also until that member runs keys.
    pub(crate) async fn wait_sharded(&self, members: &[String], busy: Option<&String>) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let live = self.store.member_list().await.expect("members");
            let ids: Vec<&String> = live.iter().map(|m| &m.id).collect();
            let last_join = live.iter().map(|m| m.started_at).max();
            let heard = live.iter().all(|m| Some(m.heartbeat_at) > last_join);
            let running = self.running().await;
            let sharded = running.iter().all(|(shard, owner)| owner_of(*shard, members) == Some(owner.as_str()));
            let working = busy.is_none_or(|b| running.iter().any(|(_, owner)| owner == b));
            if ids.len() == members.len() && ids.iter().all(|id| members.contains(id)) && heard && sharded && working {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "members {members:?} did not settle: live {ids:?}, running {running:?}\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Measures applies/s over a few seconds while checking, every 100 ms, that every
    /// key being run is run by its shard's owner among `members`.
    pub(crate) async fn window(&self, sim: &Sim, members: &[String]) -> Window {
        const LENGTH: Duration = Duration::from_secs(4);
        let applies = || async { sim.get("/_sim/report").await["totals"]["applies"].as_u64().expect("applies") };
        let (start, applied0) = (Instant::now(), applies().await);
        let mut owners = BTreeMap::new();
        while start.elapsed() < LENGTH {
            for (shard, owner) in self.running().await {
                let expected = owner_of(shard, members);
                assert_eq!(
                    Some(owner.as_str()),
                    expected,
                    "shard {shard} is run by {owner}, but hashing gives it to {expected:?} among {members:?}"
                );
                owners.insert(shard, owner);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (applied, seconds) = (applies().await - applied0, start.elapsed().as_secs_f64());
        Window { rate: applied as f64 / seconds, owners }
    }

    /// Every key Applied at `revision`, in the store and on the sim's clusters.
    pub(crate) async fn assert_latest(&self, shape: FleetShape, sim: &Sim, revision: i64) {
        let statuses = self.store.status_list(&StatusFilter::default()).await.expect("status");
        assert_eq!(statuses.len(), shape.keys());
        for s in &statuses {
            assert!(
                s.phase == Phase::Applied && s.generation == revision && s.observed_generation == revision,
                "{s:?}"
            );
        }
        let keys = sim.get("/_sim/keys").await;
        for c in 0..shape.clusters {
            for s in 0..shape.syncsets {
                let key = WorkKey::new("default", cluster_name(c), syncset_name(s)).to_string();
                let resources =
                    keys[&key].as_object().map(|r| r.values().filter_map(Value::as_i64).collect::<Vec<_>>());
                assert_eq!(resources, Some(vec![revision; shape.resources]), "{key} on the sim");
            }
        }
    }

    /// How far ahead of this process's clock `worker`'s clock is, from the time on the
    /// first line of its log.
    pub(crate) async fn clock_ahead_by(&self, worker: &Worker) -> Duration {
        let path = self.logs.path().join(format!("{}.log", worker.id));
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            // `2026-11-21T18:00:00.123456Z  INFO …`, in terminal colours (`\x1b[2m`…`m`).
            let stamp = text.lines().next().and_then(|line| {
                let mut plain = String::new();
                let mut escaped = false;
                for c in line.chars() {
                    match c {
                        '\x1b' => escaped = true,
                        'm' if escaped => escaped = false,
                        c if !escaped => plain.push(c),
                        _ => {}
                    }
                }
                humantime::parse_rfc3339_weak(plain.split_whitespace().next()?).ok()
            });
            if let Some(at) = stamp {
                return at.duration_since(std::time::SystemTime::now()).unwrap_or_default();
            }
            assert!(Instant::now() < deadline, "{} logged no time\n{}", worker.id, self.logs());
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The last lines of every worker's log, for a failure message.
    pub(crate) fn logs(&self) -> String {
        let mut out = String::new();
        let mut paths: Vec<PathBuf> =
            std::fs::read_dir(self.logs.path()).into_iter().flatten().flatten().map(|e| e.path()).collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out += &format!(
                "--- {} (last lines)\n{}\n",
                path.display(),
                lines[lines.len().saturating_sub(15)..].join("\n")
            );
        }
        out
    }
}

/// A `fleetsync worker` child on the fixture's schema, logging to a file; killed on drop.
pub(crate) struct Worker {
    pub(crate) id: String,
    pub(crate) child: Child,
}

impl Worker {
    pub(crate) fn start(fx: &Fixture, id: &str, knobs: &[&str]) -> Worker {
        Worker::start_with_env(fx, id, knobs, &[])
    }

    /// The same, with these environment variables.
    pub(crate) fn start_with_env(fx: &Fixture, id: &str, knobs: &[&str], env: &[(&str, &str)]) -> Worker {
        let log = std::fs::File::create(fx.logs.path().join(format!("{id}.log"))).expect("log file");
        let child = bin()
            .args([
                "worker",
                "--database-url",
                &fx.url,
                "--schema",
                &fx.schema,
                "--no-migrate",
                "--worker-id",
                id,
                "--pool-size",
                "4",
            ])
            .args(knobs)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a worker");
        Worker { id: id.to_string(), child }
    }

    /// SIGKILL: no goodbye, no lease released, no member leaving.
    pub(crate) fn kill9(&mut self) {
        self.child.kill().expect("kill -9");
        let _ = self.child.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `fleetsync sim` child process and a client for its report endpoints.
pub(crate) struct Sim {
    pub(crate) url: String,
    pub(crate) http: reqwest::Client,
    _child: SimChild,
}

impl Sim {
    pub(crate) fn start(latency_scale: f64) -> Sim {
        let child = SimChild::start(latency_scale);
        Sim { url: format!("http://{}", child.addr), http: reqwest::Client::new(), _child: child }
    }

    pub(crate) async fn get(&self, path: &str) -> Value {
        let resp = self.http.get(format!("{}{path}", self.url)).send().await.expect("reach the sim");
        resp.json().await.expect("JSON from the sim")
    }
}

/// One test at a time (a failed one does not hold the others up) under `cargo test`;
/// under cargo-nextest, whose tests are processes of their own, the `timing` test group
/// of .config/nextest.toml does it.
pub(crate) fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime").block_on(f)
}
