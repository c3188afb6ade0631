//! Claims on PostgreSQL: one statement finds due keys in `due` (from the claimer's
//! cursor on), checks each against its `work` row, locks what it takes with
//! `FOR UPDATE SKIP LOCKED` (concurrent claimers take different keys without waiting
//! for each other), and leases them with tokens from the `work_fence` SEQUENCE. A claim
//! changes no key's `run_at`, so it writes nothing to `due` (`due.rs`): it only updates
//! `work` rows, HOT.
//!
//! Order: by `(due_at, tenant, cluster, syncset)`, `due_at` being when the key became
//! claimable, so keys are claimed in that order (an expired lease, whose key became
//! claimable when its run began, before keys that became ready since); equal times (one
//! transaction's changes) go by cluster, so a cluster's SyncSets are claimed together
//! and its make-span stays near its critical path.

use super::cursor::{DuePos, Leases};
use super::locations::Located;
use super::queue::attempts;
use super::{query, PgResult};
use crate::stored::{corrupt, decode};
use crate::write::transitions;
use crate::{ClaimParams, ClaimedItem, ClusterLimit, Fence};
use deadpool_postgres::GenericClient;
use fleetsync_model::{ApplyMode, Timestamp, WorkKey};
use std::sync::LazyLock;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// What one claim statement did.
pub(super) struct Claimed {
    pub items: Vec<ClaimedItem>,
    /// Each claimed key's `work` row (see `locations.rs`).
    pub located: Vec<Located>,
    /// Where the next claim starts.
    pub next: DuePos,
    /// The leases this claim passed by or took, for the cursor to come back to.
    pub leases: Option<Leases>,
    /// A limited claim took fewer keys than it could because its window filled up
    /// with keys held back by the per-cluster limit: due keys beyond it went unseen.
    pub window_cut: bool,
    /// The window filled up with keys it could not take (leases, rows out of step) and
    /// left no claimable one behind: the cursor is at its end, and due keys may follow.
    pub more: bool,
}

/// Leases up to `p.limit` due keys of `p.shards` at `now`, looking at `window` due keys
/// at most, from the cursor `from` on. One statement, a write on its own.
pub(super) async fn claim<C: GenericClient>(
    c: &C,
    now: Timestamp,
    p: ClaimParams,
    from: DuePos,
    window: i64,
) -> PgResult<Claimed> {
    let limit = i64::try_from(p.limit).unwrap_or(i64::MAX);
    if limit == 0 {
        return Ok(Claimed {
            items: Vec::new(),
            located: Vec::new(),
            next: from,
            leases: None,
            window_cut: false,
            more: false,
        });
    }
    let expires = now.plus(p.lease_ttl).millis();
    let now = now.millis();
    let shards = shard_array(p.shards.as_deref());
    let f = &from;
    let mut params: Vec<&(dyn ToSql + Sync)> =
        vec![&now, &limit, &p.owner, &expires, &window, &shards, &f.due_at, &f.tenant, &f.cluster, &f.syncset];
    let limit_arrays = p.cluster_limit.as_ref().map(|cl| (i64::from(cl.max), in_flight_arrays(cl)));
    let sql: &str = match &limit_arrays {
        None => &CLAIM,
        Some((max, (tenants, clusters, busy))) => {
            params.extend([max as &(dyn ToSql + Sync), tenants, clusters, busy]);
            &CLAIM_LIMITED
        }
    };
    let rows = query(c, sql, &params).await?;
    let mut seen = Seen::default();
    let (mut items, mut located) = (Vec::new(), Vec::new());
    for r in &rows {
        let at =
            DuePos { due_at: r.try_get(4)?, tenant: r.try_get(1)?, cluster: r.try_get(2)?, syncset: r.try_get(3)? };
        match r.try_get::<_, i32>(0)? {
            CLAIMED => {
                let item = claimed_item(r)?;
                located.push(Located { key: item.key.clone(), fence: item.fence, id: r.try_get(13)? });
                seen.took(at, expires);
                items.push(item);
            }
            LEFT => {
                let phase: Option<String> = r.try_get(14)?;
                let key = Snapshot { phase, run_at: r.try_get(15)?, lease_expires_at: r.try_get(16)? };
                let state = key.state(at.due_at, now);
                seen.left(at, state, r.try_get(17)?);
            }
            _ => seen.window(r.try_get(12)?, at),
        }
    }
    let window_cut = p.cluster_limit.is_some() && seen.window_cut(window, limit);
    let more = seen.window_full(window) && seen.first_left.is_none() && seen.took < limit;
    Ok(Claimed { items, located, next: seen.next(now, window), leases: seen.leases, window_cut, more })
}

/// The kinds of rows a claim returns (column 0).
const CLAIMED: i32 = 0;
const LEFT: i32 = 1;

/// A due key the claim did not take, as its `work` row stood when the claim began.
struct Snapshot {
    /// `None`: no `work` row (the row in `due` is out of step).
    phase: Option<String>,
    run_at: Option<i64>,
    lease_expires_at: Option<i64>,
}

/// What a key the claim left behind is, for the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeftState {
    /// Could have been claimed: held back, beyond the batch, or another transaction
    /// held its row.
    Claimable,
    /// Leased until then.
    Leased(i64),
    /// Its row in `due` is not where its `work` row says: nothing to come back for.
    OutOfStep,
}

impl Snapshot {
    /// Its state at `now`, its row in `due` being at `due_at`.
    fn state(&self, due_at: i64, now: i64) -> LeftState {
        if self.run_at != Some(due_at) {
            return LeftState::OutOfStep;
        }
        match (self.phase.as_deref(), self.lease_expires_at) {
            (Some("ready"), _) => LeftState::Claimable,
            (Some("running"), Some(until)) if until > now => LeftState::Leased(until),
            (Some("running"), _) => LeftState::Claimable,
            _ => LeftState::OutOfStep,
        }
    }
}

/// What a claim saw, for its cursor.
#[derive(Debug, Default)]
struct Seen {
    /// How many due keys the window held, and the last of them.
    in_window: i64,
    last: Option<DuePos>,
    /// How many keys it took, and how many claimable ones the per-cluster limit held
    /// back.
    took: i64,
    held_back: i64,
    /// The first claimable key it did not take.
    first_left: Option<DuePos>,
    /// The leases it took or passed by.
    leases: Option<Leases>,
}

impl Seen {
    fn took(&mut self, at: DuePos, until: i64) {
        self.took += 1;
        self.leases = Leases::merge(self.leases.take(), Some(Leases { until, from: at }));
    }

    fn left(&mut self, at: DuePos, state: LeftState, allowed: bool) {
        match state {
            LeftState::Claimable => {
                self.held_back += i64::from(!allowed);
                self.first_left = Some(self.first_left.take().map_or(at.clone(), |f| f.min(at)));
            }
            LeftState::Leased(until) => {
                self.leases = Leases::merge(self.leases.take(), Some(Leases { until, from: at }))
            }
            LeftState::OutOfStep => {}
        }
    }

    fn window(&mut self, in_window: i64, last: DuePos) {
        self.in_window = in_window;
        self.last = Some(last);
    }

    fn window_full(&self, window: i64) -> bool {
        self.in_window >= window
    }

    /// Whether keys the per-cluster limit held back filled the window so that it took
    /// fewer than `limit`: due keys beyond the window went unseen.
    fn window_cut(&self, window: i64, limit: i64) -> bool {
        self.window_full(window) && self.held_back > 0 && self.took < limit
    }

    /// Where the next claim starts. Nothing this one left behind may fall behind the
    /// cursor; past a full window more keys may wait; otherwise every key due by `now`
    /// was looked at, and the next claim starts after them (keys made due by `now` that
    /// this claim did not see are announced, see `cursor.rs`).
    fn next(&self, now: i64, window: i64) -> DuePos {
        match (&self.first_left, &self.last) {
            (Some(left), _) => left.clone(),
            (None, Some(last)) if self.window_full(window) => last.clone(),
            _ => DuePos::at(now.saturating_add(1)),
        }
    }
}

pub(super) static CLAIM: LazyLock<String> = LazyLock::new(|| claim_sql(UNLIMITED));
pub(super) static CLAIM_LIMITED: LazyLock<String> = LazyLock::new(|| claim_sql(LIMITED));

/// Every key of the window is allowed.
const UNLIMITED: &str = "ranked AS (SELECT c.*, true AS allowed FROM cand c),";

/// A limited claim's ranking, by the window's own rows: a key is allowed unless its
/// cluster ($12–$14: the claimer's in-flight counts) would exceed $11 with it. (A lease
/// in the window counts against its cluster too: a claim may take fewer than it could,
/// never more.)
const LIMITED: &str = "ranked AS MATERIALIZED (
                 SELECT r.*, r.rn + COALESCE(b.n, 0) <= $11 AS allowed FROM (
                     SELECT c.*, row_number() OVER (PARTITION BY c.tenant, c.cluster ORDER BY c.due_at, c.syncset) AS rn
                     FROM cand c) r
                 LEFT JOIN unnest($12::text[], $13::text[], $14::bigint[]) AS b(tenant, cluster, n)
                   ON b.tenant = r.tenant AND b.cluster = r.cluster),";

/// The claim. Parameters: $1 now, $2 the batch, $3 owner, $4 the leases' expiry, $5 the
/// window, $6 the shards (`smallint[]`, NULL: every shard), $7–$10 the cursor; with a
/// per-cluster limit also $11–$14 (see [`LIMITED`]).
///
/// - `cand`: the window of due rows, from the cursor on.
/// - `took`: the first `$2` allowed keys, in claim order, that are claimable — ready, or
///   their lease expired — locked (`SKIP LOCKED`: those another claimer holds are
///   passed, and the next ones taken). Found by id, through an array: a plan the
///   planner cannot turn into a scan of `work`.
/// - `claimed`: leased, found by id (through the index: a key whose lock `took` had
///   to follow to a newer version is updated there, not passed by). Whether a key's
///   lease had expired is looked up in an array of the expired ones (one, usually
///   empty, array per claim), not by a subquery per key (a scan of `took` for each: a
///   claim's cost grew with the square of its batch), nor by a join (which may reorder
///   the keys).
/// - `left`: the window's keys not claimed, with their `work` rows as this statement's
///   snapshot has them, for the cursor (`Seen`): usually none.
///
/// Result rows, by column 0: [`CLAIMED`] (1–4 the key and `run_at`, 5–11 the item, 13
/// its `work` row's id, 18 whether its lease had expired, 19 when its change was asked for), [`LEFT`] (1–4 the position, 14–16 phase, `run_at` and
/// lease, 17 allowed), and one row for the window (1–4 its last position, 12 its size)
/// unless it was empty.
fn claim_sql(ranked: &str) -> String {
    let args = [("row", "w."), ("fence", "nextval('work_fence')"), ("owner", "$3"), ("expires", "$4"), ("now", "$1")];
    let (claimable, claim) = (transitions::CLAIM.guard(&args), transitions::CLAIM.sql(&args));
    format!(
        "WITH cand AS MATERIALIZED (
                 SELECT due_at, tenant, cluster, syncset, id FROM due
                 WHERE due_at <= $1 AND ($6::smallint[] IS NULL OR shard = ANY($6::smallint[]))
                   AND due_at >= $7::bigint AND (due_at, tenant, cluster, syncset) >= ($7::bigint, $8::text, $9::text, $10::text)
                 ORDER BY due_at, tenant, cluster, syncset
                 LIMIT $5),
             {ranked}
             took AS MATERIALIZED (
                 SELECT w.id, w.phase = 'running' AS expired FROM work w
                 WHERE w.id = ANY(ARRAY(SELECT id FROM ranked WHERE allowed))
                   AND ({claimable})
                 ORDER BY w.run_at, w.tenant COLLATE \"C\", w.cluster COLLATE \"C\", w.syncset COLLATE \"C\"
                 LIMIT $2
                 FOR UPDATE SKIP LOCKED),
             claimed AS (
                 UPDATE work w SET {claim}
                 WHERE w.id = ANY(ARRAY(SELECT id FROM took))
                 RETURNING w.tenant, w.cluster, w.syncset, w.run_at, w.desired, w.generation, w.apply_mode, w.inventory,
                     w.attempts, w.fence, w.id, w.running_since),
             -- Each cluster's generation, looked up once per cluster (a claim takes a
             -- cluster's keys together).
             gens AS MATERIALIZED (
                 SELECT d.tenant, d.cluster, g.generation
                 FROM (SELECT DISTINCT tenant, cluster FROM claimed) d
                 LEFT JOIN LATERAL (SELECT generation FROM clusters cl WHERE cl.tenant = d.tenant AND cl.name = d.cluster) g ON true),
             left_keys AS MATERIALIZED (SELECT r.* FROM ranked r WHERE r.id NOT IN (SELECT id FROM claimed)),
             left_rows AS MATERIALIZED (
                 SELECT w.id, w.phase, w.run_at, w.lease_expires_at FROM work w WHERE w.id = ANY(ARRAY(SELECT id FROM left_keys)))
             SELECT 0, c.tenant, c.cluster, c.syncset, c.run_at, c.desired, c.generation, c.apply_mode, c.inventory, c.attempts,
                 c.fence, COALESCE(g.generation, 0), NULL::bigint, c.id, NULL::text, NULL::bigint, NULL::bigint, NULL::bool,
                 c.id = ANY(ARRAY(SELECT id FROM took WHERE expired)), c.running_since
             FROM claimed c JOIN gens g ON g.tenant = c.tenant AND g.cluster = c.cluster
             UNION ALL
             SELECT 1, l.tenant, l.cluster, l.syncset, l.due_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                 w.phase, w.run_at, w.lease_expires_at, l.allowed, NULL, NULL
             FROM left_keys l LEFT JOIN left_rows w ON w.id = l.id
             UNION ALL
             SELECT 2, z.tenant, z.cluster, z.syncset, z.due_at, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                 (SELECT count(*) FROM cand), NULL, NULL, NULL, NULL, NULL, NULL, NULL
             FROM (SELECT * FROM cand ORDER BY due_at DESC, tenant DESC, cluster DESC, syncset DESC LIMIT 1) z"
    )
}

/// Shards as PostgreSQL's `smallint[]`: they are below 256 (`SHARDS`), so they fit.
pub(super) fn shard_array(shards: Option<&[u16]>) -> Option<Vec<i16>> {
    shards.map(|s| s.iter().map(|s| *s as i16).collect())
}

/// The claimer's in-flight counts as three parallel arrays, for `unnest`.
fn in_flight_arrays(cl: &ClusterLimit) -> (Vec<&str>, Vec<&str>, Vec<i64>) {
    let mut arrays = (Vec::new(), Vec::new(), Vec::new());
    for ((tenant, cluster), n) in &cl.in_flight {
        arrays.0.push(tenant.as_str());
        arrays.1.push(cluster.as_str());
        arrays.2.push(i64::from(*n));
    }
    arrays
}

fn claimed_item(r: &Row) -> PgResult<ClaimedItem> {
    let mode: String = r.try_get(7)?;
    let inventory: String = r.try_get(8)?;
    Ok(ClaimedItem {
        key: WorkKey::new(r.try_get::<_, String>(1)?, r.try_get::<_, String>(2)?, r.try_get::<_, String>(3)?),
        desired: r.try_get(5)?,
        generation: r.try_get(6)?,
        apply_mode: ApplyMode::parse(&mode).ok_or_else(|| corrupt("work", format!("apply mode {mode:?}")))?,
        inventory: decode("work", &inventory)?,
        attempt: attempts(r.try_get(9)?)?,
        fence: Fence::new(r.try_get(10)?),
        cluster_generation: r.try_get(11)?,
        taken_over: r.try_get(18)?,
        changed_at: r.try_get::<_, Option<i64>>(19)?.map(Timestamp),
    })
}

/// When the next ready key of the shards ($1) is due, looking from the claimers'
/// cursors ($2–$5) as a claim would. Leased keys' rows are passed by: when their leases
/// expire is what the cursors remember (`cursor.rs`).
static NEXT_DUE: &str = "SELECT d.due_at FROM due d
     WHERE ($1::smallint[] IS NULL OR d.shard = ANY($1::smallint[]))
       AND d.due_at >= $2::bigint AND (d.due_at, d.tenant, d.cluster, d.syncset) >= ($2::bigint, $3::text, $4::text, $5::text)
       AND EXISTS (SELECT 1 FROM work w WHERE w.id = d.id AND w.phase = 'ready' AND w.run_at = d.due_at)
     ORDER BY d.due_at, d.tenant, d.cluster, d.syncset
     LIMIT 1";

pub(super) async fn next_due_at<C: GenericClient>(
    c: &C,
    shards: Option<Vec<i16>>,
    from: DuePos,
) -> PgResult<Option<Timestamp>> {
    let rows = query(c, NEXT_DUE, &[&shards, &from.due_at, &from.tenant, &from.cluster, &from.syncset]).await?;
    Ok(match rows.first() {
        Some(r) => Some(Timestamp(r.try_get(0)?)),
        None => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(due_at: i64, s: &str) -> DuePos {
        DuePos { due_at, tenant: "t".into(), cluster: "c".into(), syncset: s.into() }
    }

    fn snapshot(phase: &str, run_at: i64, lease: Option<i64>) -> Snapshot {
        Snapshot { phase: Some(phase.into()), run_at: Some(run_at), lease_expires_at: lease }
    }

    #[test]
    fn keys_left_behind_are_claimable_leased_or_out_of_step() {
        assert_eq!(snapshot("ready", 5, None).state(5, 100), LeftState::Claimable);
        assert_eq!(snapshot("running", 5, Some(150)).state(5, 100), LeftState::Leased(150));
        assert_eq!(snapshot("running", 5, Some(100)).state(5, 100), LeftState::Claimable, "expired at now");
        assert_eq!(snapshot("ready", 7, None).state(5, 100), LeftState::OutOfStep, "its row moved on");
        assert_eq!(snapshot("idle", 5, None).state(5, 100), LeftState::OutOfStep);
        let gone = Snapshot { phase: None, run_at: None, lease_expires_at: None };
        assert_eq!(gone.state(5, 100), LeftState::OutOfStep);
    }

    #[test]
    fn the_cursor_stays_at_the_first_claimable_key_left_behind() {
        let mut seen = Seen::default();
        seen.took(pos(1, "a"), 130);
        seen.left(pos(3, "c"), LeftState::Leased(120), true);
        seen.left(pos(5, "e"), LeftState::Claimable, false);
        seen.left(pos(4, "d"), LeftState::Claimable, true);
        seen.left(pos(2, "b"), LeftState::OutOfStep, true);
        seen.window(10, pos(9, "z"));
        assert_eq!(seen.next(100, 10), pos(4, "d"));
        assert_eq!((seen.took, seen.held_back), (1, 1));
        assert!(seen.window_cut(10, 5), "a full window, a key held back, fewer taken than asked");
        assert!(!seen.window_cut(11, 5), "not full: every due key was seen");
        assert_eq!(seen.leases, Some(Leases { until: 120, from: pos(1, "a") }), "the lease taken and the one passed");
    }

    #[test]
    fn past_a_full_window_the_cursor_moves_to_its_end_and_otherwise_past_now() {
        let mut full = Seen::default();
        full.window(10, pos(9, "z"));
        full.left(pos(3, "c"), LeftState::Leased(120), true);
        assert_eq!(full.next(100, 10), pos(9, "z"), "more may follow the window");
        assert!(!full.window_cut(10, 5), "a lease in the window is no key held back");
        let mut short = Seen::default();
        short.window(4, pos(9, "z"));
        assert_eq!(short.next(100, 10), DuePos::at(101), "everything due by now was seen");
        assert_eq!(Seen::default().next(100, 10), DuePos::at(101), "an empty window");
    }
}
