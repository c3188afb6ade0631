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
//! * Four workers read a SyncSet's manifests from an OCI registry, and from a Git
//!   server; the busiest is killed with SIGKILL mid-rollout of a new revision: the
//!   server's own log shows one download per revision, and every cluster ends
//!   holding the new one.
//!
//! * Three workers apply a SyncSet that depends on another, one of them killed with
//!   SIGKILL while keys wait: each cluster's own watch shows the dependent's first
//!   write after every resource of its dependency, and a cluster the dependency does
//!   not select is not held back.
//!
//! They run one at a time: they measure time on a shared 2-core machine.

#[path = "../common/mod.rs"]
mod common;
mod depends_on;
mod fixture;
mod rollout;
mod sources;

use fixture::{block_on, serial, Fixture, Sim, Worker};
use fleetsync_model::shard::owned_by;
use fleetsync_store::StatusRead;
use fleetsync_testkit::{wait_settled, FleetShape};
use std::path::Path;
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
