//! Where a claim starts looking, so that it does not walk the dead index entries every
//! earlier claim left behind.
//!
//! Every claim, completion and enqueue changes a work row's `phase`, so none is a HOT
//! update: each leaves an index entry behind in `work_ready` (ordered by `run_at`) or
//! `work_expiry` (ordered by `lease_expires_at`) that points to a dead row version.
//! Vacuum removes them, and an index scan marks those it finds dead to everyone so the
//! next scan skips them; but while any transaction holds an old snapshot (a report, a
//! backup, a forgotten session) neither can happen. A claim that scanned from the
//! oldest entry then visited every dead entry of every key claimed since that snapshot:
//! claims slowed in proportion to the work done, 94% slower after an hour's churn.
//!
//! So each claimer keeps a cursor per (owner, shards): the ready keys it has not
//! looked at yet start at `ready_from` (a `(run_at, tenant, cluster, syncset)` tuple,
//! the index's order) and the leases it has not checked yet expire at or after
//! `expired_from`. A claim moves them past what it claimed; nothing it skipped (a key
//! held back by the per-cluster limit) falls behind them. Keys that become ready with
//! an earlier `run_at` than the cursor — a transaction whose clock reading is older
//! than its commit, a retry scheduled by another process — are announced: every
//! transaction that makes keys ready sends the earliest `run_at` it wrote with its
//! NOTIFY (`listen.rs`), and [`ClaimCursors::lower`] moves every cursor back to it.
//! A notification that may have been missed (the listener reconnected) moves them back
//! to the start. One case is not announced — a claim in another process that locked a
//! ready key and then rolled back — so every [`FULL_SCAN_EVERY`] a claim starts from
//! the beginning again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a claimer scans from the start anyway (the safety net above).
pub(super) const FULL_SCAN_EVERY: Duration = Duration::from_secs(30);

/// A position in `work_ready`'s order: `(run_at, tenant, cluster, syncset)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ReadyPos {
    pub run_at: i64,
    pub tenant: String,
    pub cluster: String,
    pub syncset: String,
}

impl ReadyPos {
    /// Before every key that becomes ready at `run_at` or later.
    pub fn at(run_at: i64) -> Self {
        Self { run_at, tenant: String::new(), cluster: String::new(), syncset: String::new() }
    }

    /// Before every key.
    pub fn start() -> Self {
        Self::at(i64::MIN)
    }
}

/// Where one claim starts, and (after it) where the next one is to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Floors {
    pub ready_from: ReadyPos,
    /// Leases expiring before this were checked (and taken over if expired).
    pub expired_from: i64,
}

impl Floors {
    fn start() -> Self {
        Self { ready_from: ReadyPos::start(), expired_from: i64::MIN }
    }
}

/// Claimers are told apart by owner and shards: a claimer whose shards change starts
/// over, since the keys of a shard it just gained were never behind its cursor.
type Claimer = (String, Option<Vec<u16>>);

struct Cursor {
    floors: Floors,
    /// The earliest `run_at` announced while a claim was under way (applied when it
    /// ends, so the claim's result cannot move the cursor past it).
    announced: Option<i64>,
    /// When this claimer last scanned from the start.
    full_scan_at: Instant,
    used_at: Instant,
}

/// The cursors of every claimer of one store (usually one per process).
#[derive(Default)]
pub(super) struct ClaimCursors {
    cursors: Mutex<HashMap<Claimer, Cursor>>,
}

impl ClaimCursors {
    /// Where `owner`'s next claim in `shards` starts. A claimer seen for the first time,
    /// or whose last scan from the start is [`FULL_SCAN_EVERY`] ago, starts at the start.
    pub fn begin(&self, owner: &str, shards: Option<&[u16]>) -> Floors {
        let now = Instant::now();
        let mut cursors = self.lock();
        // Forget claimers gone quiet (an old shard set), so the map stays small.
        cursors.retain(|_, c| now.duration_since(c.used_at) < FULL_SCAN_EVERY);
        let fresh = || Cursor { floors: Floors::start(), announced: None, full_scan_at: now, used_at: now };
        let cursor = cursors.entry((owner.to_string(), shards.map(<[u16]>::to_vec))).or_insert_with(fresh);
        if now.duration_since(cursor.full_scan_at) >= FULL_SCAN_EVERY {
            *cursor = fresh();
        }
        cursor.used_at = now;
        cursor.announced = None;
        cursor.floors.clone()
    }

    /// Records where the claim that [`begin`](Self::begin) started ends up: `next`,
    /// or earlier if keys were announced meanwhile.
    pub fn end(&self, owner: &str, shards: Option<&[u16]>, mut next: Floors) {
        let mut cursors = self.lock();
        let Some(cursor) = cursors.get_mut(&(owner.to_string(), shards.map(<[u16]>::to_vec))) else { return };
        if let Some(run_at) = cursor.announced.take() {
            next.ready_from = next.ready_from.min(ReadyPos::at(run_at));
        }
        cursor.floors = next;
    }

    /// Keys became ready from `run_at` on (`None`: perhaps anywhere): every cursor moves
    /// back to before them.
    pub fn lower(&self, run_at: Option<i64>) {
        let run_at = run_at.unwrap_or(i64::MIN);
        for cursor in self.lock().values_mut() {
            cursor.floors.ready_from = cursor.floors.ready_from.clone().min(ReadyPos::at(run_at));
            cursor.announced = Some(cursor.announced.map_or(run_at, |a| a.min(run_at)));
            if run_at == i64::MIN {
                cursor.floors.expired_from = i64::MIN;
            }
        }
    }

    /// The earliest floors of any claimer of `shards` (the start if none has claimed
    /// yet): where the next due key or lease is to be looked for.
    pub fn earliest(&self, shards: Option<&[u16]>) -> Floors {
        let cursors = self.lock();
        let mut mine = cursors.iter().filter(|((_, s), _)| s.as_deref() == shards).map(|(_, c)| &c.floors);
        let Some(first) = mine.next() else { return Floors::start() };
        mine.fold(first.clone(), |a, b| Floors {
            ready_from: a.ready_from.min(b.ready_from.clone()),
            expired_from: a.expired_from.min(b.expired_from),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Claimer, Cursor>> {
        // The map holds no invariant a panic elsewhere could break half-way.
        self.cursors.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(run_at: i64, syncset: &str) -> ReadyPos {
        ReadyPos { run_at, tenant: "t".into(), cluster: "c".into(), syncset: syncset.into() }
    }

    #[test]
    fn a_new_claimer_starts_at_the_start_and_then_where_it_left_off() {
        let c = ClaimCursors::default();
        assert_eq!(c.begin("w", None), Floors::start());
        c.end("w", None, Floors { ready_from: pos(10, "a"), expired_from: 7 });
        assert_eq!(c.begin("w", None), Floors { ready_from: pos(10, "a"), expired_from: 7 });
        assert_eq!(c.begin("w", Some(&[1, 2])), Floors::start(), "other shards: another cursor");
    }

    #[test]
    fn an_announcement_during_a_claim_holds_the_cursor_back() {
        let c = ClaimCursors::default();
        c.begin("w", None);
        c.end("w", None, Floors { ready_from: pos(10, "a"), expired_from: 7 });
        c.begin("w", None);
        c.lower(Some(5));
        c.end("w", None, Floors { ready_from: pos(20, "b"), expired_from: 9 });
        assert_eq!(c.begin("w", None), Floors { ready_from: ReadyPos::at(5), expired_from: 9 });
        c.end("w", None, Floors { ready_from: pos(20, "b"), expired_from: 9 });
        c.lower(Some(30));
        assert_eq!(c.begin("w", None).ready_from, pos(20, "b"), "a later announcement moves nothing");
    }

    #[test]
    fn a_missed_announcement_starts_everything_over() {
        let c = ClaimCursors::default();
        c.begin("w", None);
        c.end("w", None, Floors { ready_from: pos(10, "a"), expired_from: 7 });
        c.lower(None);
        assert_eq!(c.begin("w", None), Floors::start());
    }

    #[test]
    fn the_next_due_key_is_looked_for_from_the_earliest_cursor_of_those_shards() {
        let c = ClaimCursors::default();
        assert_eq!(c.earliest(None), Floors::start());
        for (owner, at) in [("a", 10), ("b", 4)] {
            c.begin(owner, None);
            c.end(owner, None, Floors { ready_from: ReadyPos::at(at), expired_from: at });
        }
        assert_eq!(c.earliest(None), Floors { ready_from: ReadyPos::at(4), expired_from: 4 });
        assert_eq!(c.earliest(Some(&[3])), Floors::start());
    }
}
