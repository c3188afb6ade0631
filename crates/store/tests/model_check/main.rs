//! Model check of the SQLite work queue: random sequences of operations run against
//! [`SqliteStore`] and against a small reference model written here, and after every
//! step the two must agree (docs/concepts.md#guarantees, 1–5: coalescing, exclusivity,
//! durability, take-over, retries).
//!
//! Setup per case: a fresh store on a [`ManualClock`] with a jitter-free retry policy
//! (base 1 s, cap 8 s, 3 attempts); clusters `c0`, `c1` labelled `env=prod` and SyncSets
//! `s0`, `s1` selecting `env=prod`, so four keys. Three workers claim, complete, renew
//! and release; they keep what they claimed even after their leases expire, so stale
//! tokens get exercised.
//!
//! Checked after every step:
//! - each operation's answer (claimed items with key, fence, generation and attempt;
//!   completion outcomes; keys lost by a renewal; resync count; apply outcome);
//! - `status_list` per key (phase, attempts, generation, observed generation, desired,
//!   last error presence, next attempt), `work_next_ready_at` and `queue_stats`;
//! - the raw `work` rows and the fence counter (this test is about the SQLite backend,
//!   so it also reads its schema through a read-only connection);
//! - exclusivity: no two held items are a valid (current fence, running, unexpired)
//!   lease on the same key at the same time, judged from the store's own rows.
//!
//! The model and the test are here; running a case against the store is in
//! `store_side.rs`.

use fleetsync_model::{ApplyMode, Kind, ManualClock, Phase, Timestamp, WorkKey};
use fleetsync_store::conformance::{cluster, syncset};
use fleetsync_store::sqlite::SqliteStore;
use fleetsync_store::{
    ClaimParams, ClaimedItem, CompleteOutcome, Completion, Fence, RenewParams, RetryPolicy, RunOutcome, StatusFilter,
    StoreConfig,
};
use fleetsync_store::{Objects, StatusRead, WorkQueue};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::TestCaseError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod store_side;

use store_side::run_case;

const T0: i64 = 1_800_000_000_000;
const TTL: Duration = Duration::from_secs(30);
const TTL_MS: i64 = 30_000;
const WORKERS: usize = 3;
const CLUSTERS: [&str; 2] = ["c0", "c1"];
const SYNCSETS: [&str; 2] = ["s0", "s1"];

fn retry_policy() -> RetryPolicy {
    RetryPolicy { base: Duration::from_secs(1), cap: Duration::from_secs(8), max_attempts: 3, jitter: 0.0 }
}

// ---------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Op {
    /// Apply SyncSet `s` with a new marker: bumps its generation, enqueues both its keys.
    Enqueue(usize),
    /// Worker claims up to `limit` keys with a 30 s lease.
    Claim {
        worker: usize,
        limit: usize,
    },
    /// Worker completes one of the items it holds (skipped if it holds none). With
    /// `current`, the pick is among its items whose lease is still the key's current one
    /// (if any), so that runs get through often enough to reach backoff and parking;
    /// otherwise among all it holds, stale ones included.
    Complete {
        worker: usize,
        item: Index,
        current: bool,
        ran: Ran,
    },
    /// Worker renews every lease it holds.
    Renew(usize),
    /// Worker gives one held item back (skipped if it holds none).
    Release {
        worker: usize,
        item: Index,
    },
    /// Moves the clock forward.
    Advance(u64),
    Resync,
    /// Explicit retry of key `k` (in creation order).
    Retry(usize),
}

/// What a completed run reports.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ran {
    Applied,
    Failed,
    /// Waited for a dependency (2 s), applying nothing.
    Waiting,
}

const WAIT_MS: i64 = 2_000;

fn ran() -> impl Strategy<Value = Ran> {
    prop_oneof![8 => Just(Ran::Applied), 9 => Just(Ran::Failed), 3 => Just(Ran::Waiting)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => (0..SYNCSETS.len()).prop_map(Op::Enqueue),
        4 => (0..WORKERS, 1..=4usize).prop_map(|(worker, limit)| Op::Claim { worker, limit }),
        5 => (0..WORKERS, any::<Index>(), prop::bool::weighted(0.6), ran())
            .prop_map(|(worker, item, current, ran)| Op::Complete { worker, item, current, ran }),
        1 => (0..WORKERS).prop_map(Op::Renew),
        1 => (0..WORKERS, any::<Index>()).prop_map(|(worker, item)| Op::Release { worker, item }),
        3 => (0..=40u64).prop_map(Op::Advance),
        1 => Just(Op::Resync),
        1 => (0..4usize).prop_map(Op::Retry),
    ]
}

// ---------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Db {
    Idle,
    Ready,
    Running,
    Parked,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyState {
    phase: Db,
    run_at: i64,
    want_seq: i64,
    claimed_seq: i64,
    fence: i64,
    lease_expires_at: Option<i64>,
    attempts: u32,
    generation: i64,
    observed_generation: i64,
    last_error: bool,
}

impl KeyState {
    fn dirty(&self) -> bool {
        self.want_seq > self.claimed_seq
    }

    /// The status phase, as `rows::phase` derives it.
    fn status_phase(&self) -> Phase {
        match self.phase {
            Db::Running => Phase::Applying,
            Db::Parked => Phase::Parked,
            Db::Idle => Phase::Applied,
            Db::Ready if self.attempts > 0 && self.last_error => Phase::Failed,
            Db::Ready => Phase::Pending,
        }
    }

    fn lease_valid(&self, now: i64, fence: i64) -> bool {
        self.phase == Db::Running && self.fence == fence && self.lease_expires_at.is_some_and(|t| now < t)
    }
}

struct Model {
    now: i64,
    /// The store-wide fence counter (last issued).
    fence: i64,
    /// Keys in creation (row id) order: (c0,s0), (c1,s0), (c0,s1), (c1,s1).
    keys: Vec<KeyState>,
    names: Vec<WorkKey>,
    syncset_gen: [i64; 2],
    retry: RetryPolicy,
}

/// Index of a key in creation order: SyncSets were applied s0 then s1, clusters by name.
fn key_index(s: usize, c: usize) -> usize {
    s * CLUSTERS.len() + c
}

impl Model {
    fn new() -> Self {
        let mut names = Vec::new();
        for s in SYNCSETS {
            for c in CLUSTERS {
                names.push(WorkKey::new("default", c, s));
            }
        }
        let fresh = KeyState {
            phase: Db::Ready,
            run_at: T0,
            want_seq: 1,
            claimed_seq: 0,
            fence: 0,
            lease_expires_at: None,
            attempts: 0,
            generation: 1,
            observed_generation: 0,
            last_error: false,
        };
        Model { now: T0, fence: 0, keys: vec![fresh; names.len()], names, syncset_gen: [1, 1], retry: retry_policy() }
    }

    fn index_of(&self, key: &WorkKey) -> Option<usize> {
        self.names.iter().position(|k| k == key)
    }

    /// `queue::enqueue` on an existing row; `generation` None keeps the row's.
    fn enqueue(&mut self, i: usize, generation: Option<i64>) {
        let now = self.now;
        let k = &mut self.keys[i];
        if let Some(g) = generation {
            k.generation = g;
        }
        k.want_seq += 1;
        k.attempts = 0;
        if k.phase != Db::Running {
            k.run_at = now;
            k.phase = Db::Ready;
        }
    }

    fn apply_syncset(&mut self, s: usize) -> i64 {
        self.syncset_gen[s] += 1;
        let g = self.syncset_gen[s];
        for c in 0..CLUSTERS.len() {
            self.enqueue(key_index(s, c), Some(g));
        }
        g
    }

    /// Expired leases, sorted by expiry (ties by row id, though the store may break ties
    /// differently), and ready keys in the store's exact order.
    fn claimable(&self) -> (Vec<usize>, Vec<usize>) {
        let mut expired: Vec<usize> = (0..self.keys.len())
            .filter(|&i| {
                self.keys[i].phase == Db::Running && self.keys[i].lease_expires_at.is_some_and(|t| t <= self.now)
            })
            .collect();
        expired.sort_by_key(|&i| (self.keys[i].lease_expires_at, i));
        let mut ready: Vec<usize> = (0..self.keys.len())
            .filter(|&i| self.keys[i].phase == Db::Ready && self.keys[i].run_at <= self.now)
            .collect();
        ready.sort_by(|&a, &b| {
            let (ka, kb) = (&self.names[a], &self.names[b]);
            (self.keys[a].run_at, &ka.tenant, &ka.cluster, &ka.syncset).cmp(&(
                self.keys[b].run_at,
                &kb.tenant,
                &kb.cluster,
                &kb.syncset,
            ))
        });
        (expired, ready)
    }

    /// Claims key `i` for a new lease; returns the item the store must hand out.
    fn claim_one(&mut self, i: usize) -> (WorkKey, i64, i64, u32) {
        self.fence += 1;
        let (now, fence) = (self.now, self.fence);
        let k = &mut self.keys[i];
        k.phase = Db::Running;
        k.fence = fence;
        k.lease_expires_at = Some(now + TTL_MS);
        k.claimed_seq = k.want_seq;
        k.attempts += 1;
        (self.names[i].clone(), fence, k.generation, k.attempts)
    }

    fn complete(&mut self, i: usize, fence: i64, outcome: &RunOutcome) -> CompleteOutcome {
        let now = self.now;
        let retry = self.retry;
        let k = &mut self.keys[i];
        if k.phase != Db::Running || k.fence != fence {
            return CompleteOutcome::Stale;
        }
        k.lease_expires_at = None;
        match outcome {
            RunOutcome::Applied { generation, .. } => {
                let phase = if k.dirty() { Phase::Pending } else { Phase::Applied };
                k.phase = if k.dirty() { Db::Ready } else { Db::Idle };
                k.run_at = now;
                k.observed_generation = *generation;
                k.last_error = false;
                CompleteOutcome::Committed(phase)
            }
            RunOutcome::Failed { .. } => {
                let (phase, db, run_at) = if k.dirty() {
                    (Phase::Pending, Db::Ready, now)
                } else if k.attempts >= retry.max_attempts {
                    (Phase::Parked, Db::Parked, now)
                } else {
                    let exp = k.attempts.saturating_sub(1).min(30);
                    let delay = retry.base.saturating_mul(1 << exp).min(retry.cap);
                    (Phase::Failed, Db::Ready, now + delay.as_millis() as i64)
                };
                k.phase = db;
                k.run_at = run_at;
                k.last_error = true;
                CompleteOutcome::Committed(phase)
            }
            RunOutcome::Waiting { .. } => {
                k.phase = Db::Ready;
                k.run_at = if k.dirty() { now } else { now + WAIT_MS };
                k.attempts = 0;
                k.last_error = true;
                CompleteOutcome::Committed(Phase::Pending)
            }
            RunOutcome::Removed => unreachable!("the model never removes"),
            RunOutcome::Parked { .. } => unreachable!("the model never parks at once"),
            RunOutcome::Requeue { .. } => unreachable!("the model never requeues"),
        }
    }

    fn renew(&mut self, leases: &[(WorkKey, Fence)]) -> Vec<WorkKey> {
        let now = self.now;
        let mut lost = Vec::new();
        for (key, fence) in leases {
            let i = self.index_of(key).expect("known key");
            let k = &mut self.keys[i];
            if k.phase == Db::Running && k.fence == fence.get() {
                k.lease_expires_at = Some(now + TTL_MS);
            } else {
                lost.push(key.clone());
            }
        }
        lost
    }

    fn release(&mut self, i: usize, fence: i64) {
        let now = self.now;
        let k = &mut self.keys[i];
        if k.phase == Db::Running && k.fence == fence {
            k.phase = Db::Ready;
            k.run_at = now;
            k.attempts = k.attempts.saturating_sub(1);
            k.lease_expires_at = None;
        }
    }

    fn resync(&mut self) -> u64 {
        let now = self.now;
        let mut n = 0;
        for k in &mut self.keys {
            if matches!(k.phase, Db::Idle | Db::Parked) {
                k.want_seq += 1;
                k.phase = Db::Ready;
                k.run_at = now;
                k.attempts = 0;
                n += 1;
            }
        }
        n
    }

    fn next_ready_at(&self) -> Option<i64> {
        self.keys
            .iter()
            .filter_map(|k| match k.phase {
                Db::Ready => Some(k.run_at),
                Db::Running => k.lease_expires_at,
                _ => None,
            })
            .min()
    }
}

/// How often the interesting situations came up over all cases, so that the test cannot
/// silently become vacuous (see the end of [`sqlite_queue_matches_the_model`]).
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    steps: u64,
    takeovers: u64,
    expiry_ties: u64,
    stale_completions: u64,
    dirty_completions: u64,
    failed_backoff: u64,
    parked: u64,
    applied: u64,
    lost_on_renew: u64,
    kept_on_renew: u64,
    releases_honoured: u64,
    resynced: u64,
}

#[test]
fn sqlite_queue_matches_the_model() {
    use proptest::test_runner::{Config, TestRunner};
    let config = Config { cases: 128, failure_persistence: None, ..Config::default() };
    let mut runner = TestRunner::new(config);
    let total = std::cell::RefCell::new(Coverage::default());
    let result = runner.run(&prop::collection::vec(op(), 1..=60), |ops| {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let mut cov = Coverage::default();
        rt.block_on(run_case(ops, &mut cov))?;
        let mut t = total.borrow_mut();
        t.steps += cov.steps;
        t.takeovers += cov.takeovers;
        t.expiry_ties += cov.expiry_ties;
        t.stale_completions += cov.stale_completions;
        t.dirty_completions += cov.dirty_completions;
        t.failed_backoff += cov.failed_backoff;
        t.parked += cov.parked;
        t.applied += cov.applied;
        t.lost_on_renew += cov.lost_on_renew;
        t.kept_on_renew += cov.kept_on_renew;
        t.releases_honoured += cov.releases_honoured;
        t.resynced += cov.resynced;
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let t = total.into_inner();
    eprintln!("model check coverage: {t:?}");
    // Guards against a vacuous run: over 128 random cases each of these comes up several
    // times at least (parking, the rarest, about ten times on average).
    for (what, n) in [
        ("takeovers", t.takeovers),
        ("stale completions", t.stale_completions),
        ("dirty completions", t.dirty_completions),
        ("failures with backoff", t.failed_backoff),
        ("parked keys", t.parked),
        ("applied completions", t.applied),
        ("leases lost on renew", t.lost_on_renew),
        ("leases kept on renew", t.kept_on_renew),
        ("releases honoured", t.releases_honoured),
    ] {
        assert!(n > 0, "no {what} in {} steps: the generator no longer reaches them", t.steps);
    }
}
