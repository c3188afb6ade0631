//! Where a claim starts looking, so that it does not walk the dead index entries every
//! earlier claim left behind.
//!
//! Claims find keys through `due`'s index, in `(due_at, tenant, cluster, syncset)`
//! order (see `due.rs`). Every enqueue and completion moves a key's row there, which
//! leaves an index entry behind that points to a dead row version. Vacuum removes
//! them, and an index scan marks those it finds dead to everyone so the next scan skips
//! them; but while any transaction holds an old snapshot (a report, a backup, a
//! forgotten session) neither can happen. A claim that scanned from the oldest entry
//! then visited every dead entry of every key claimed since that snapshot: claims
//! slowed in proportion to the work done (94% slower after an hour's churn, measured
//! before the cursors existed).
//!
//! So each claimer keeps a cursor per (owner, shards): the position in that order from
//! which it has not looked yet. A claim moves it past what it claimed; nothing it
//! skipped (a key held back by the per-cluster limit, one beyond a full batch, one whose
//! row another transaction held) falls behind it. A leased key's row stays where it was
//! (`due.rs`), so a claim passes leases by as well: it remembers the earliest expiry of
//! those it passed or took, and the earliest position among them ([`Leases`]), and when
//! that time comes (by the store's clock) the cursor goes back there and looks again —
//! at a lease renewed meanwhile, whose new expiry it remembers in turn, or at one that
//! ran out, which it takes over.
//! Keys that become due at an earlier position than the cursor — a transaction whose
//! clock reading is older than its commit, a retry scheduled by another process — are
//! announced: every transaction that makes keys ready sends the earliest `run_at` it
//! wrote with its NOTIFY (`listen.rs`), and [`ClaimCursors::lower`] moves every cursor
//! back to it. A notification that may have been missed (the listener reconnected)
//! moves them back to the start. One case is not announced — a claim in another process
//! that locked a due key and then rolled back — so every [`FULL_SCAN_EVERY`] a claim
//! starts from the beginning again.
//!
//! A claimer claims one call at a time (the runtime's claim loop does). Two claims at
//! once under the same owner and shards would share one cursor, and the last to end
//! would set it, which could leave a key the other held back behind it until the next
//! scan from the start.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a claimer scans from the start anyway (the safety net above).
pub(super) const FULL_SCAN_EVERY: Duration = Duration::from_secs(30);

/// A position in `due`'s order: `(due_at, tenant, cluster, syncset)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct DuePos {
    pub due_at: i64,
    pub tenant: String,
    pub cluster: String,
    pub syncset: String,
}

impl DuePos {
    /// Before every key that becomes due at `due_at` or later.
    pub fn at(due_at: i64) -> Self {
        Self { due_at, tenant: String::new(), cluster: String::new(), syncset: String::new() }
    }

    /// Before every key.
    pub fn start() -> Self {
        Self::at(i64::MIN)
    }
}

/// Leases a claimer passed by or took: when the first of them expires, and where the
/// first of their rows is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Leases {
    pub until: i64,
    pub from: DuePos,
}

impl Leases {
    /// The leases of both: the earlier expiry, the earlier position.
    pub fn merge(a: Option<Leases>, b: Option<Leases>) -> Option<Leases> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Leases { until: a.until.min(b.until), from: a.from.min(b.from) }),
            (a, b) => a.or(b),
        }
    }
}

/// Claimers are told apart by owner and shards: a claimer whose shards change starts
/// over, since the keys of a shard it just gained were never behind its cursor.
type Claimer = (String, Option<Vec<u16>>);

struct Cursor {
    from: DuePos,
    /// The leases behind `from`, to look at again when the first expires.
    leases: Option<Leases>,
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
    /// Where `owner`'s next claim in `shards` starts, at `at` (the store's clock). A
    /// claimer seen for the first time, or whose last scan from the start is
    /// [`FULL_SCAN_EVERY`] ago, starts at the start; one whose first remembered lease
    /// has expired by `at`, at that lease's row or earlier.
    pub fn begin(&self, owner: &str, shards: Option<&[u16]>, at: i64) -> DuePos {
        let now = Instant::now();
        let mut cursors = self.lock();
        // Forget claimers gone quiet (an old shard set), so the map stays small.
        cursors.retain(|_, c| now.duration_since(c.used_at) < FULL_SCAN_EVERY);
        let fresh = || Cursor { from: DuePos::start(), leases: None, announced: None, full_scan_at: now, used_at: now };
        let cursor = cursors.entry((owner.to_string(), shards.map(<[u16]>::to_vec))).or_insert_with(fresh);
        if now.duration_since(cursor.full_scan_at) >= FULL_SCAN_EVERY {
            *cursor = fresh();
        }
        if let Some(leases) = cursor.leases.take_if(|l| l.until <= at) {
            cursor.from = cursor.from.clone().min(leases.from);
        }
        cursor.used_at = now;
        cursor.announced = None;
        cursor.from.clone()
    }

    /// Records where the claim that [`begin`](Self::begin) started ends up: `next`,
    /// or earlier if keys were announced meanwhile; and the `leases` it passed or took.
    pub fn end(&self, owner: &str, shards: Option<&[u16]>, mut next: DuePos, leases: Option<Leases>) {
        let mut cursors = self.lock();
        let Some(cursor) = cursors.get_mut(&(owner.to_string(), shards.map(<[u16]>::to_vec))) else { return };
        if let Some(run_at) = cursor.announced.take() {
            next = next.min(DuePos::at(run_at));
        }
        cursor.from = next;
        cursor.leases = Leases::merge(cursor.leases.take(), leases);
    }

    /// Keys became ready from `run_at` on (`None`: perhaps anywhere): every cursor moves
    /// back to before them.
    pub fn lower(&self, run_at: Option<i64>) {
        let run_at = run_at.unwrap_or(i64::MIN);
        for cursor in self.lock().values_mut() {
            cursor.from = cursor.from.clone().min(DuePos::at(run_at));
            cursor.announced = Some(cursor.announced.map_or(run_at, |a| a.min(run_at)));
        }
    }

    /// The earliest cursor of any claimer of `shards` (the start if none has claimed
    /// yet): where the next due key is to be looked for; and when the first lease they
    /// remember expires.
    pub fn earliest(&self, shards: Option<&[u16]>) -> (DuePos, Option<i64>) {
        let cursors = self.lock();
        let mine: Vec<&Cursor> = cursors.iter().filter(|((_, s), _)| s.as_deref() == shards).map(|(_, c)| c).collect();
        let from = mine.iter().map(|c| &c.from).min().cloned().unwrap_or_else(DuePos::start);
        (from, mine.iter().filter_map(|c| c.leases.as_ref().map(|l| l.until)).min())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Claimer, Cursor>> {
        // The map holds no invariant a panic elsewhere could break half-way.
        self.cursors.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(due_at: i64, syncset: &str) -> DuePos {
        DuePos { due_at, tenant: "t".into(), cluster: "c".into(), syncset: syncset.into() }
    }

    #[test]
    fn a_new_claimer_starts_at_the_start_and_then_where_it_left_off() {
        let c = ClaimCursors::default();
        assert_eq!(c.begin("w", None, 0), DuePos::start());
        c.end("w", None, pos(10, "a"), None);
        assert_eq!(c.begin("w", None, 0), pos(10, "a"));
        assert_eq!(c.begin("w", Some(&[1, 2]), 0), DuePos::start(), "other shards: another cursor");
    }

    #[test]
    fn an_announcement_during_a_claim_holds_the_cursor_back() {
        let c = ClaimCursors::default();
        c.begin("w", None, 0);
        c.end("w", None, pos(10, "a"), None);
        c.begin("w", None, 0);
        c.lower(Some(5));
        c.end("w", None, pos(20, "b"), None);
        assert_eq!(c.begin("w", None, 0), DuePos::at(5));
        c.end("w", None, pos(20, "b"), None);
        c.lower(Some(30));
        assert_eq!(c.begin("w", None, 0), pos(20, "b"), "a later announcement moves nothing");
    }

    #[test]
    fn a_missed_announcement_starts_everything_over() {
        let c = ClaimCursors::default();
        c.begin("w", None, 0);
        c.end("w", None, pos(10, "a"), None);
        c.lower(None);
        assert_eq!(c.begin("w", None, 0), DuePos::start());
    }

    #[test]
    fn the_cursor_goes_back_to_the_leases_it_passed_when_the_first_expires() {
        let c = ClaimCursors::default();
        c.begin("w", None, 0);
        c.end("w", None, pos(50, "z"), Some(Leases { until: 100, from: pos(20, "b") }));
        c.begin("w", None, 60);
        c.end("w", None, pos(60, "z"), Some(Leases { until: 90, from: pos(30, "c") }));
        assert_eq!(c.earliest(None), (pos(60, "z"), Some(90)), "the first expiry of both claims");
        assert_eq!(c.begin("w", None, 89), pos(60, "z"), "not yet");
        assert_eq!(c.begin("w", None, 90), pos(20, "b"), "back to the first lease's row");
        assert_eq!(c.earliest(None).1, None, "they are looked at again, and remembered anew");
    }

    #[test]
    fn the_next_due_key_is_looked_for_from_the_earliest_cursor_of_those_shards() {
        let c = ClaimCursors::default();
        assert_eq!(c.earliest(None), (DuePos::start(), None));
        for (owner, at) in [("a", 10), ("b", 4)] {
            c.begin(owner, None, 0);
            c.end(owner, None, DuePos::at(at), Some(Leases { until: at * 10, from: DuePos::at(at) }));
        }
        assert_eq!(c.earliest(None), (DuePos::at(4), Some(40)));
        assert_eq!(c.earliest(Some(&[3])), (DuePos::start(), None));
    }
}
