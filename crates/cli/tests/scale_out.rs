//! Scale-out with real processes on the real PostgreSQL: `fleetsync worker`s on one
//! schema of the test's own (dropped afterwards), applying a fleet to a `fleetsync
//! sim` child over HTTP, as users run them.
//!
//! * Three workers; one of them is killed with SIGKILL twenty times, a replacement
//!   started each time, while the fleet runs and changes: every key converges to its
//!   latest generation, the sim records no overlapping applies of a key, and the keys
//!   each killed process held are taken over within 2 × the lease TTL.
//! * Two workers with a fixed in-flight limit run a fleet and a third joins: only the
//!   shards rendezvous hashing gives the newcomer move (seen in who holds which
//!   shard's leases), and throughput rises.
//! * Two workers, one with its clock a minute ahead (libfaketime on the real binary):
//!   leases are on the database's clock, so neither takes over the other's live
//!   leases (the sim sees no overlapping and no fenced applies), and when the one ahead
//!   is killed its keys are taken over within 2 × the lease TTL.
//! * Three workers drive a rollout of four steps, and one of them is killed with
//!   SIGKILL mid-rollout: the rollout completes, each step logged once and in order,
//!   and the clusters see each step's clusters take the new generation only after
//!   every cluster of the steps before (by at least `minSuccessTime`), with no two
//!   runs of a key at once.
//!
//! They run one at a time: they measure time on a shared 2-core machine.

mod common;

use common::{bin, database_url, Schema, SimChild};
use fleetsync_model::shard::{owned_by, owner_of};
use fleetsync_model::{parse_documents, Document, Endpoint, Phase, RolloutPhase, WorkKey};
use fleetsync_store::postgres::{PgOptions, PgStore};
use fleetsync_store::rollout::{step_of, ClusterView};
use fleetsync_store::{EventLog, Members, Objects, Rollouts, StatusRead};
use fleetsync_store::{StatusFilter, StoreConfig};
use fleetsync_testkit::{cluster_name, hive_fleet, syncset_name, wait_settled, FleetShape};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The lease TTL of the kill test; take-over must happen within twice this.
const LEASE_TTL: Duration = Duration::from_secs(2);
const KILLS: usize = 20;

/// Three workers, one killed -9 twenty times while the fleet runs and changes.
#[test]
fn kill_9_a_worker_twenty_times_while_the_fleet_changes() {
    let _one_at_a_time = serial();
    block_on(kill_loop());
}

async fn kill_loop() {
    // A run of a key (5 applies) takes ~0.3 s; a generation of the fleet a few seconds.
    let sim = Sim::start(0.2);
    let fx = Fixture::new("scale_kill").await;
    let shape = FleetShape { clusters: 60, syncsets: 10, resources: 5 };
    let mut revision = 1;
    fx.load(shape, &sim, revision).await;
    let knobs = ["--lease-ttl", "2s", "--renew-every", "500ms", "--member-ttl", "1s", "--max-in-flight", "16"];
    let mut started = 0;
    let mut start = |fx: &Fixture| {
        started += 1;
        Worker::start(fx, &format!("kill-{started:02}"), &knobs)
    };
    let mut workers: Vec<Worker> = (0..3).map(|_| start(&fx)).collect();

    let mut takeovers = Vec::with_capacity(KILLS);
    for kill in 1..=KILLS {
        // The victim: the worker holding the most leases. The fleet changes again
        // whenever it has nearly caught up, so every kill lands in the middle of work.
        let deadline = Instant::now() + Duration::from_secs(30);
        let (victim, held) = loop {
            let stats = fx.store.queue_stats().await.expect("queue stats");
            if stats.unsettled() < shape.keys() as u64 / 4 {
                revision += 1;
                fx.load(shape, &sim, revision).await;
            }
            let leases = fx.lease_counts().await;
            let busiest = workers.iter().enumerate().map(|(i, w)| (leases.get(&w.id).copied().unwrap_or(0), i)).max();
            if let Some((held, i)) = busiest.filter(|(n, _)| *n > 0) {
                break (i, held);
            }
            assert!(Instant::now() < deadline, "kill {kill}: no worker holds a lease\n{}", fx.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let mut dead = workers.swap_remove(victim);
        dead.kill9();
        let killed = Instant::now();
        workers.push(start(&fx));

        // Taken over: no key is left running under the dead process's lease.
        loop {
            let left = fx.lease_counts().await.get(&dead.id).copied().unwrap_or(0);
            let took = killed.elapsed();
            if left == 0 {
                takeovers.push(took);
                break;
            }
            assert!(
                took <= 2 * LEASE_TTL,
                "kill {kill}: {left} of the ~{held} keys {} held are not taken over {took:?} after it died\n{}",
                dead.id,
                fx.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    let (stats, settled) = wait_settled(&fx.store, Duration::from_secs(120)).await.expect("queue stats");
    assert!(settled, "the fleet did not settle after the kills: {:?}\n{}", stats.by_phase, fx.logs());
    let report = sim.get("/_sim/report").await;
    fx.assert_latest(shape, &sim, revision).await;
    assert_eq!(report["totals"]["overlaps"], 0, "two applies of one key at once: {}", report["totals"]);
    assert_eq!(report["totals"]["order_violations"], 0, "{}", report["totals"]);
    takeovers.sort();
    println!(
        "{KILLS} kills, {revision} generations, {} applies ({} refused as fenced); take-over after a kill: median {:?}, max {:?} (bound {:?})",
        report["totals"]["applies"],
        report["totals"]["fenced"],
        takeovers[takeovers.len() / 2],
        takeovers[takeovers.len() - 1],
        2 * LEASE_TTL
    );
}

/// Two workers run a fleet, each at a fixed in-flight limit; a third joins.
#[test]
fn a_joining_worker_takes_only_its_shards_and_throughput_rises() {
    let _one_at_a_time = serial();
    block_on(join());
}

async fn join() {
    // 8 keys in flight per process, each apply ~110 ms: ~70 applies/s per process,
    // far below what the CPU allows, so the limit bounds throughput. The fleet is big
    // enough that no process runs out of work in its shards before the end. Loaded
    // one SyncSet per transaction, so keys are claimed SyncSet by SyncSet, each a sweep
    // over every cluster: a window of a few seconds sees most shards at work.
    let sim = Sim::start(0.4);
    let fx = Fixture::new("scale_join").await;
    let shape = FleetShape { clusters: 120, syncsets: 10, resources: 6 };
    fx.load_by_syncset(shape, &sim).await;
    // No stealing: this test watches where shards go, and a process that ran short
    // would run a few keys of others' shards (stealing has its own test in the runtime).
    let knobs = [
        "--lease-ttl",
        "5s",
        "--renew-every",
        "1s",
        "--member-ttl",
        "3s",
        "--max-in-flight",
        "8",
        "--steal-after",
        "0s",
    ];
    let ids: Vec<String> = ["join-a", "join-b", "join-c"].map(String::from).to_vec();
    let (two, newcomer) = (&ids[..2], &ids[2]);
    let _first: Vec<Worker> = two.iter().map(|id| Worker::start(&fx, id, &knobs)).collect();
    fx.wait_sharded(two, None).await;
    let before = fx.window(&sim, two).await;

    let _joined = Worker::start(&fx, newcomer, &knobs);
    fx.wait_sharded(&ids, Some(newcomer)).await;
    let after = fx.window(&sim, &ids).await;

    // Every shard seen in both windows kept its owner, unless the newcomer took it.
    let mut moved = Vec::new();
    for (shard, owner) in &after.owners {
        match before.owners.get(shard) {
            Some(was) if was != owner => {
                assert_eq!(owner, newcomer, "shard {shard} moved from {was} to {owner}, not to the newcomer");
                moved.push(*shard);
            }
            _ => {}
        }
    }
    let newcomers = after.owners.values().filter(|o| *o == newcomer).count();
    assert!(!moved.is_empty() && newcomers > 0, "the newcomer took no shard: {:?}", after.owners);
    let report = sim.get("/_sim/report").await;
    assert_eq!(report["totals"]["overlaps"], 0, "two applies of one key at once: {}", report["totals"]);
    let ratio = after.rate / before.rate;
    println!(
        "2 workers: {:.0} applies/s; 3 workers: {:.0} applies/s ({ratio:.2}×); hashing gives the newcomer {} of 256 shards; \
         seen at work: {} shards moving (all to the newcomer), the newcomer running keys of {newcomers}",
        before.rate,
        after.rate,
        owned_by(newcomer, &ids).len(),
        moved.len()
    );
    assert!(
        ratio > 1.2,
        "throughput did not rise enough with a third worker: {:.0} → {:.0} applies/s",
        before.rate,
        after.rate
    );
}

/// libfaketime, which `.ci/run` installs (Debian's `faketime` package).
const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// Two workers, the first with its clock 60 s ahead; the first is then killed -9.
#[test]
fn a_worker_whose_clock_is_a_minute_ahead_takes_over_no_live_lease() {
    if !Path::new(LIBFAKETIME).exists() {
        eprintln!(
            "SKIPPED: {LIBFAKETIME} is missing, so no process can run with its clock ahead (apt-get install faketime)"
        );
        return;
    }
    let _one_at_a_time = serial();
    block_on(clock_ahead());
}

async fn clock_ahead() {
    let sim = Sim::start(0.2);
    let fx = Fixture::new("scale_skew").await;
    let shape = FleetShape { clusters: 40, syncsets: 8, resources: 5 };
    let mut revision = 1;
    fx.load(shape, &sim, revision).await;
    let knobs = ["--lease-ttl", "2s", "--renew-every", "500ms", "--member-ttl", "1s", "--max-in-flight", "16"];
    let ahead_env = [("LD_PRELOAD", LIBFAKETIME), ("FAKETIME", "+60s")];
    let mut ahead = Worker::start_with_env(&fx, "skew-ahead", &knobs, &ahead_env);
    let plain = Worker::start(&fx, "skew-plain", &knobs);
    let skew = fx.clock_ahead_by(&ahead).await;
    assert!(skew >= Duration::from_secs(55), "libfaketime did not move the worker's clock ahead (by {skew:?})");

    // Both at work, on the fleet and on the same keys' later generations, for a few
    // generations: each one's leases live while the other claims.
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut both_busy = 0;
    while revision < 4 || both_busy < 20 {
        let stats = fx.store.queue_stats().await.expect("queue stats");
        if stats.unsettled() < shape.keys() as u64 / 4 {
            revision += 1;
            fx.load(shape, &sim, revision).await;
        }
        let leases = fx.lease_counts().await;
        if [&ahead.id, &plain.id].iter().all(|id| leases.get(*id).is_some_and(|n| *n > 0)) {
            both_busy += 1;
        }
        assert!(Instant::now() < deadline, "the two workers were not both at work ({both_busy} looks)\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = sim.get("/_sim/report").await;
    assert_eq!(
        report["totals"]["fenced"],
        0,
        "a live lease was taken over (the holder's applies were fenced): {}\n{}",
        report["totals"],
        fx.logs()
    );
    assert_eq!(report["totals"]["overlaps"], 0, "two applies of one key at once: {}\n{}", report["totals"], fx.logs());

    // The worker ahead dies holding leases; the other takes them over in time.
    let deadline = Instant::now() + Duration::from_secs(30);
    let held = loop {
        let held = fx.lease_counts().await.get(&ahead.id).copied().unwrap_or(0);
        if held > 0 {
            break held;
        }
        if fx.store.queue_stats().await.expect("queue stats").unsettled() < shape.keys() as u64 / 4 {
            revision += 1;
            fx.load(shape, &sim, revision).await;
        }
        assert!(Instant::now() < deadline, "the worker ahead holds no lease\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    ahead.kill9();
    let killed = Instant::now();
    loop {
        let left = fx.lease_counts().await.get(&ahead.id).copied().unwrap_or(0);
        if left == 0 {
            break;
        }
        let took = killed.elapsed();
        assert!(
            took <= 2 * LEASE_TTL,
            "{left} of the {held} keys the worker ahead held are not taken over {took:?} after it died\n{}",
            fx.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = killed.elapsed();

    let (stats, settled) = wait_settled(&fx.store, Duration::from_secs(120)).await.expect("queue stats");
    assert!(settled, "the fleet did not settle: {:?}\n{}", stats.by_phase, fx.logs());
    fx.assert_latest(shape, &sim, revision).await;
    let report = sim.get("/_sim/report").await;
    assert_eq!(report["totals"]["overlaps"], 0, "two applies of one key at once: {}", report["totals"]);
    assert_eq!(report["totals"]["fenced"], 0, "a live lease was taken over: {}", report["totals"]);
    println!(
        "clock {skew:?} ahead: {revision} generations, {} applies, no overlap, none fenced; {held} leases taken over {took:?} after a kill (bound {:?})",
        report["totals"]["applies"],
        2 * LEASE_TTL
    );
}

/// How many clusters the rollout test stages (every tenth from the eighth a canary).
const ROLLOUT_CLUSTERS: usize = 40;
const ROLLOUT_STEPS: &str = "[{selector: {matchLabels: {ring: canary}}}, {percent: 25}, {percent: 50}, {percent: 100}]";
/// The rollout's `minSuccessTime`: each step stays healthy this long before the next.
const MIN_SUCCESS: Duration = Duration::from_secs(1);

/// Three workers drive a rollout of four steps; one dies by SIGKILL mid-rollout.
#[test]
fn a_rollout_survives_a_killed_worker_with_no_step_skipped_or_repeated() {
    let _one_at_a_time = serial();
    block_on(rollout_with_a_kill());
}

/// The clusters (`env: prod`, every tenth from the eighth `ring: canary`) on the sim,
/// and the SyncSet `app`: three ConfigMaps carrying `value`, staged by [`ROLLOUT_STEPS`].
fn rollout_fleet(sim: &Sim, value: &str) -> Vec<Document> {
    let mut yaml = String::new();
    for i in 0..ROLLOUT_CLUSTERS {
        let (name, ring) = (cluster_name(i), if i % 10 == 7 { "canary" } else { "main" });
        yaml += &format!(
            "apiVersion: fleetsync.io/v1\nkind: Cluster\nmetadata: {{name: {name}, labels: {{env: prod, ring: {ring}}}}}\n\
             spec: {{endpoint: {{http: {{url: '{}/clusters/{name}'}}}}}}\n---\n",
            sim.url
        );
    }
    yaml += &format!(
        "apiVersion: fleetsync.io/v1\nkind: SyncSet\nmetadata: {{name: app}}\nspec:\n  clusterSelector: {{matchLabels: {{env: prod}}}}\n  \
         resourceApplyMode: Upsert\n  rollout:\n    steps: {ROLLOUT_STEPS}\n    minSuccessTime: 1s\n  resources:\n"
    );
    for m in ["app-a", "app-b", "app-c"] {
        yaml += &format!("    - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: {m}, namespace: apps}}, data: {{v: \"{value}\"}}}}\n");
    }
    parse_documents(&yaml).expect("the rollout fleet's YAML")
}

/// Cluster → the SyncSet generation of each of its `app` resources on the sim.
async fn app_on_sim(sim: &Sim) -> BTreeMap<String, Vec<i64>> {
    let keys = sim.get("/_sim/keys").await;
    (0..ROLLOUT_CLUSTERS)
        .map(|i| {
            let key = WorkKey::new("default", cluster_name(i), "app").to_string();
            let held =
                keys[&key].as_object().map(|r| r.values().filter_map(Value::as_i64).collect()).unwrap_or_default();
            (cluster_name(i), held)
        })
        .collect()
}

async fn rollout_with_a_kill() {
    let sim = Sim::start(0.2);
    let fx = Fixture::new("scale_rollout").await;
    let docs = rollout_fleet(&sim, "1");
    let spec = docs
        .iter()
        .find_map(|d| match d {
            Document::SyncSet(s) => s.spec.rollout.clone(),
            _ => None,
        })
        .expect("a rollout spec");
    // Which step first reaches each cluster, as the decision computes it (names sorted).
    let views: Vec<ClusterView> = docs
        .iter()
        .filter_map(|d| match d {
            Document::Cluster(c) => {
                Some(ClusterView { name: c.metadata.name.clone(), labels: c.metadata.labels.clone(), key: None })
            }
            _ => None,
        })
        .collect();
    assert!(views.windows(2).all(|w| w[0].name < w[1].name), "clusters in name order");
    let step_of: BTreeMap<String, usize> = views
        .iter()
        .zip(step_of(&spec, &views))
        .map(|(c, s)| (c.name.clone(), s.expect("every cluster is reached")))
        .collect();
    let per_step: Vec<usize> = (0..spec.steps.len()).map(|j| step_of.values().filter(|s| **s == j).count()).collect();
    assert_eq!(per_step, [4, 6, 10, 20], "canaries, then up to 25 %, 50 % and 100 % of {ROLLOUT_CLUSTERS}");

    fx.store.objects_apply(docs).await.expect("apply generation 1");
    fx.analyze().await;
    let knobs = ["--lease-ttl", "2s", "--renew-every", "500ms", "--member-ttl", "1s", "--max-in-flight", "16"];
    let mut workers: Vec<Worker> =
        ["roll-01", "roll-02", "roll-03"].iter().map(|id| Worker::start(&fx, id, &knobs)).collect();

    // Generation 1 goes everywhere at once: a first generation is not staged.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let statuses = fx.store.status_list(&StatusFilter::default()).await.expect("status");
        if statuses.len() == ROLLOUT_CLUSTERS
            && statuses.iter().all(|s| s.phase == Phase::Applied && s.observed_generation == 1)
        {
            break;
        }
        assert!(Instant::now() < deadline, "generation 1 was not applied everywhere\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = fx.store.rollout_get("default", "app").await.expect("read the rollout").expect("a rollout");
    assert_eq!(
        (r.phase, r.revision, r.stable),
        (RolloutPhase::Completed, 1, 1),
        "a first generation is not staged: {r:?}"
    );

    // Generation 2, staged. Watched from the clusters' side every ~50 ms: when each
    // first holds generation 2 on any resource.
    fx.store.objects_apply(rollout_fleet(&sim, "2")).await.expect("apply generation 2");
    let t0 = Instant::now();
    let mut first_at: BTreeMap<String, Duration> = BTreeMap::new();
    let mut last_look = Duration::ZERO;
    let mut widest_look = Duration::ZERO;
    let mut killed: Option<(Worker, usize, usize, Duration)> = None;
    let mut taken_over: Option<Duration> = None;
    let deadline = Instant::now() + Duration::from_secs(90);
    let done = loop {
        // The clusters first, then the rollout: a cluster of step k holding generation 2
        // means the rollout had reached step k before this look, so the state read
        // after it is at step k or later.
        let held = app_on_sim(&sim).await;
        let now = t0.elapsed();
        widest_look = widest_look.max(now - last_look);
        last_look = now;
        let r = fx.store.rollout_get("default", "app").await.expect("read the rollout").expect("a rollout");
        assert!(
            r.revision == 2 && matches!(r.phase, RolloutPhase::Progressing | RolloutPhase::Completed),
            "the rollout left its course: {r:?}\n{}",
            fx.logs()
        );
        for (cluster, generations) in &held {
            assert!(generations.iter().all(|g| *g == 1 || *g == 2), "{cluster} holds {generations:?}");
            if generations.contains(&2) {
                first_at.entry(cluster.clone()).or_insert(now);
                assert!(
                    step_of[cluster] <= r.step,
                    "{cluster} of step index {} holds generation 2 while the rollout is at step index {}: {r:?}",
                    step_of[cluster],
                    r.step
                );
            }
        }
        if r.phase == RolloutPhase::Completed {
            break r;
        }

        match &killed {
            // Mid-rollout, once the step's clusters are being written to: kill the
            // worker running the most keys.
            None if (1..=2).contains(&r.step) && first_at.keys().any(|c| step_of[c] == r.step) => {
                let leases = fx.lease_counts().await;
                let busiest =
                    workers.iter().enumerate().map(|(i, w)| (leases.get(&w.id).copied().unwrap_or(0), i)).max();
                if let Some((n, i)) = busiest.filter(|(n, _)| *n > 0) {
                    let mut victim = workers.swap_remove(i);
                    victim.kill9();
                    killed = Some((victim, n, r.step, t0.elapsed()));
                    workers.push(Worker::start(&fx, "roll-04", &knobs));
                }
            }
            None => assert!(
                r.step < 3,
                "the rollout passed step index 2 before any worker could be killed holding a lease: {r:?}"
            ),
            Some((dead, _, _, at)) if taken_over.is_none() => {
                if fx.lease_counts().await.get(&dead.id).copied().unwrap_or(0) == 0 {
                    taken_over = Some(t0.elapsed() - *at);
                }
            }
            Some(_) => {}
        }
        assert!(Instant::now() < deadline, "the rollout did not complete: {r:?}\n{}", fx.logs());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let completed = t0.elapsed();
    let (dead, held, kill_step, kill_at) = killed.expect("a worker was killed mid-rollout");
    let taken_over = taken_over.unwrap_or(completed - kill_at);
    assert_eq!(
        (done.revision, done.stable, done.step),
        (2, 2, 3),
        "completed at revision 2, now the stable one: {done:?}"
    );

    // Each move logged once, in order, whichever process made it: none skipped, none
    // taken twice (generation 2 started at step 1 without an event; generation 1
    // completed at once without one).
    let events = fx.store.events_read(0, 100_000).await.expect("events");
    let moves: Vec<(String, i64, Option<String>)> = events
        .into_iter()
        .filter(|e| e.kind == "Rollout" && e.name == "app")
        .map(|e| (e.action, e.generation, e.actor))
        .collect();
    let want: Vec<(String, i64, Option<String>)> =
        ["Step 2", "Step 3", "Step 4", "Completed"].iter().map(|a| (a.to_string(), 2, None)).collect();
    assert_eq!(moves, want, "the rollout's events\n{}", fx.logs());

    // From the clusters' side: every cluster took generation 2, each step's clusters
    // all after every cluster of the steps before, at least minSuccessTime later
    // (less what one look may lag behind).
    assert_eq!(first_at.len(), ROLLOUT_CLUSTERS, "clusters that took generation 2: {first_at:?}");
    let span = |j: usize| {
        let times = first_at.iter().filter(|(c, _)| step_of[*c] == j).map(|(_, t)| *t);
        (times.clone().min().expect("a cluster"), times.max().expect("a cluster"))
    };
    let spans: Vec<(Duration, Duration)> = (0..spec.steps.len()).map(span).collect();
    let slack = widest_look;
    for j in 1..spans.len() {
        let gap = spans[j].0.checked_sub(spans[j - 1].1);
        assert!(
            gap.is_some_and(|g| g + slack >= MIN_SUCCESS),
            "step {} first wrote at {:?}, {gap:?} after step {} last did (minSuccessTime {MIN_SUCCESS:?}, looks up to {slack:?} apart): {spans:?}",
            j + 1,
            spans[j].0,
            j
        );
    }

    // Never two runs of a key at once, order kept, and at the end every key applied at
    // generation 2, in the store and whole on the clusters.
    let report = sim.get("/_sim/report").await;
    assert_eq!(report["totals"]["overlaps"], 0, "two applies of one key at once: {}", report["totals"]);
    assert_eq!(report["totals"]["order_violations"], 0, "{}", report["totals"]);
    let statuses = fx.store.status_list(&StatusFilter::default()).await.expect("status");
    assert_eq!(statuses.len(), ROLLOUT_CLUSTERS);
    for s in &statuses {
        assert!(s.phase == Phase::Applied && s.generation == 2 && s.observed_generation == 2, "{s:?}");
    }
    for (cluster, generations) in app_on_sim(&sim).await {
        assert_eq!(generations, vec![2; 3], "{cluster} on the sim");
    }

    let ms = |d: Duration| d.as_millis();
    let steps: Vec<String> =
        spans.iter().enumerate().map(|(j, (a, b))| format!("step {}: {}–{} ms", j + 1, ms(*a), ms(*b))).collect();
    println!(
        "rollout of {ROLLOUT_CLUSTERS} clusters in 4 steps over 3 workers: {} (running {held} keys) killed at step {} ({} ms), its leases taken over \
         {} ms later; first writes of generation 2 {}; completed at {} ms; {} applies ({} refused as fenced), looks up to {} ms apart",
        dead.id,
        kill_step + 1,
        ms(kill_at),
        ms(taken_over),
        steps.join(", "),
        ms(completed),
        report["totals"]["applies"],
        report["totals"]["fenced"],
        ms(widest_look)
    );
}

/// What a measuring window saw: applies per second, and who ran each shard's keys.
struct Window {
    rate: f64,
    owners: BTreeMap<u16, String>,
}

/// One test's schema, its store, and a plain connection to look into it.
struct Fixture {
    schema: String,
    store: PgStore,
    db: tokio_postgres::Client,
    url: String,
    logs: tempfile::TempDir,
    /// Dropped last: the schema goes once everything using it is gone.
    _drop: Schema,
}

impl Fixture {
    async fn new(prefix: &str) -> Fixture {
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
    async fn load(&self, shape: FleetShape, sim: &Sim, revision: i64) {
        let endpoint = |i: usize| Endpoint::Http { url: format!("{}/clusters/{}", sim.url, cluster_name(i)) };
        self.store.objects_apply(hive_fleet(shape, endpoint, &format!("r{revision}"))).await.expect("apply the fleet");
        if revision == 1 {
            self.analyze().await;
        }
    }

    /// The fleet at revision 1: the clusters, then each SyncSet in a transaction of its
    /// own (its keys are claimable at a time of their own).
    async fn load_by_syncset(&self, shape: FleetShape, sim: &Sim) {
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
    async fn analyze(&self) {
        let s = &self.schema;
        self.db.batch_execute(&format!("ANALYZE {s}.work, {s}.clusters, {s}.syncsets")).await.expect("analyze");
    }

    /// (shard, lease owner) of every key being run.
    async fn running(&self) -> Vec<(u16, String)> {
        let sql = format!("SELECT shard, lease_owner FROM {}.work WHERE phase = 'running'", self.schema);
        let rows = self.db.query(&sql, &[]).await.expect("query running keys");
        rows.iter().map(|r| (u16::try_from(r.get::<_, i16>(0)).expect("a shard"), r.get::<_, String>(1))).collect()
    }

    /// Keys being run, by lease owner.
    async fn lease_counts(&self) -> HashMap<String, usize> {
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
    async fn wait_sharded(&self, members: &[String], busy: Option<&String>) {
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
    async fn window(&self, sim: &Sim, members: &[String]) -> Window {
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
    async fn assert_latest(&self, shape: FleetShape, sim: &Sim, revision: i64) {
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
    async fn clock_ahead_by(&self, worker: &Worker) -> Duration {
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
    fn logs(&self) -> String {
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
struct Worker {
    id: String,
    child: Child,
}

impl Worker {
    fn start(fx: &Fixture, id: &str, knobs: &[&str]) -> Worker {
        Worker::start_with_env(fx, id, knobs, &[])
    }

    /// The same, with these environment variables.
    fn start_with_env(fx: &Fixture, id: &str, knobs: &[&str], env: &[(&str, &str)]) -> Worker {
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
    fn kill9(&mut self) {
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
struct Sim {
    url: String,
    http: reqwest::Client,
    _child: SimChild,
}

impl Sim {
    fn start(latency_scale: f64) -> Sim {
        let child = SimChild::start(latency_scale);
        Sim { url: format!("http://{}", child.addr), http: reqwest::Client::new(), _child: child }
    }

    async fn get(&self, path: &str) -> Value {
        let resp = self.http.get(format!("{}{path}", self.url)).send().await.expect("reach the sim");
        resp.json().await.expect("JSON from the sim")
    }
}

/// One test at a time (a failed one does not hold the others up) under `cargo test`;
/// under cargo-nextest, whose tests are processes of their own, the `timing` test group
/// of .config/nextest.toml does it.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a runtime").block_on(f)
}
