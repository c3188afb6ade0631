//! The `due` table: when each pending or leased key next becomes claimable. It is to
//! `work` what an index is to a table, kept by hand.
//!
//! Why not an index on `work`: an update is HOT (no new index entries, and the new row
//! version on the same page) only when it changes no indexed column, and a claim and a
//! completion change exactly what such an index would hold (`phase`, `run_at`, the
//! lease's expiry). With partial indexes on those, every claim and completion wrote an
//! entry into every index of `work` and, under a long-open snapshot, the unique index's
//! check visited every dead version of the key. `work` now indexes only what never
//! changes, so its updates are HOT, and a narrow row here moves instead.
//!
//! The invariant, kept by every writer while it holds the key's `work` row lock: a key
//! has one row here exactly when it is `ready` or `running`, at its `run_at` (when it
//! became claimable); `idle` and `parked` keys have none. A row is named by its position
//! `(due_at, tenant, cluster, syncset)`, the table's only index, which is also the claim
//! order. A claim does not change `run_at`, so neither a claim nor a lease renewal
//! writes here: only enqueues and completions do, one row each. Writers know a key's old
//! position from the `work` row they locked, record the move in [`DueMoves`], and the
//! transaction applies every move in one statement just before it commits
//! (`Tx::commit`): a fresh snapshot then, so it sees the key's row as the last writer
//! left it.
//!
//! A leased key's row stays behind, at a time already past, so claims see it and pass
//! it by; its lease's expiry is then remembered by the claimer's cursor, which comes back
//! to it at that time (`cursor.rs`). That is how expired leases are found.
//!
//! `work` stays the truth: a claim re-checks each key's `work` row under its lock. A
//! row here that is out of step only costs a look; a missing one would hide a key,
//! which is why processes of builds that do not keep this table are refused writes to
//! `work` (migration 9's trigger, and `conninfo`'s `fleetsync.schema_version`).

use fleetsync_model::WorkKey;
use std::collections::BTreeMap;
use tokio_postgres::types::ToSql;

/// A key's position in `due`, from its `work` row: its `run_at` when ready or running,
/// none when idle or parked.
pub(super) fn position(phase: &str, run_at: i64) -> Option<i64> {
    matches!(phase, "ready" | "running").then_some(run_at)
}

/// One key's move: its row at `from` (if any) goes, one at `to` (if any) comes, for
/// its `work` row `id` (`from_id` before: a key deleted and created again in one
/// transaction has a new row).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Move {
    from_id: i64,
    id: i64,
    shard: i16,
    from: Option<i64>,
    to: Option<i64>,
}

/// The moves of one transaction, by key. Several moves of one key coalesce into one:
/// from where it was before the first to where the last left it.
#[derive(Debug, Default)]
pub(super) struct DueMoves {
    moves: BTreeMap<WorkKey, Move>,
}

impl DueMoves {
    /// Records that `key` (row `id` in `work`, in `shard`) moves from position `from` to
    /// `to` (see [`position`]).
    pub fn record(&mut self, key: WorkKey, id: i64, shard: i16, from: Option<i64>, to: Option<i64>) {
        match self.moves.get_mut(&key) {
            Some(m) => {
                m.to = to;
                m.id = id;
                m.shard = shard;
            }
            None => {
                self.moves.insert(key, Move { from_id: id, id, shard, from, to });
            }
        }
    }

    /// The rows to delete and the rows to insert, as [`APPLY`]'s parameters. A key that
    /// ends where it started, with the same row, needs neither; one that ends where it
    /// started with a new row only has its row's id and shard set there.
    fn columns(&self) -> Columns<'_> {
        let mut c = Columns::default();
        for (key, m) in self.moves.iter().filter(|(_, m)| m.from != m.to || m.from_id != m.id) {
            if let Some(at) = m.from.filter(|_| m.from != m.to) {
                c.gone.push(at, key);
            }
            if let Some(at) = m.to {
                c.new.push(at, key);
                c.ids.push(m.id);
                c.shards.push(m.shard);
            }
        }
        c
    }

    /// The moves as [`APPLY`]'s parameters; `None` if nothing moves.
    pub fn to_apply(&self) -> Option<Columns<'_>> {
        let cols = self.columns();
        (!cols.gone.at.is_empty() || !cols.new.at.is_empty()).then_some(cols)
    }
}

/// Applies the moves in one statement (parameters: [`Columns::params`]). A row to
/// delete that is not there is no error, and a row to insert that is there already
/// takes the id and shard given: the table ends as the invariant says either way.
pub(super) const APPLY: &str = "WITH gone AS (
         DELETE FROM due d
         USING unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS g(due_at, tenant, cluster, syncset)
         WHERE d.due_at = g.due_at AND d.tenant = g.tenant AND d.cluster = g.cluster AND d.syncset = g.syncset)
     INSERT INTO due (due_at, tenant, cluster, syncset, id, shard)
     SELECT * FROM unnest($5::bigint[], $6::text[], $7::text[], $8::text[], $9::bigint[], $10::smallint[])
     ON CONFLICT (due_at, tenant, cluster, syncset) DO UPDATE SET id = EXCLUDED.id, shard = EXCLUDED.shard";

/// Parallel arrays for `unnest`: the positions to delete, and the rows to insert (their
/// positions, ids and shards).
#[derive(Default)]
pub(super) struct Columns<'a> {
    gone: Positions<'a>,
    new: Positions<'a>,
    ids: Vec<i64>,
    shards: Vec<i16>,
}

/// Positions `(due_at, tenant, cluster, syncset)` as columns.
#[derive(Default)]
struct Positions<'a> {
    at: Vec<i64>,
    tenants: Vec<&'a str>,
    clusters: Vec<&'a str>,
    syncsets: Vec<&'a str>,
}

impl Columns<'_> {
    /// [`APPLY`]'s parameters.
    pub fn params(&self) -> [&(dyn ToSql + Sync); 10] {
        let (g, n) = (&self.gone, &self.new);
        [
            &g.at,
            &g.tenants,
            &g.clusters,
            &g.syncsets,
            &n.at,
            &n.tenants,
            &n.clusters,
            &n.syncsets,
            &self.ids,
            &self.shards,
        ]
    }
}

impl<'a> Positions<'a> {
    fn push(&mut self, at: i64, key: &'a WorkKey) {
        self.at.push(at);
        self.tenants.push(&key.tenant);
        self.clusters.push(&key.cluster);
        self.syncsets.push(&key.syncset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> WorkKey {
        WorkKey::new("t", "c", s)
    }

    #[test]
    fn positions_follow_the_phase() {
        assert_eq!(position("ready", 5), Some(5));
        assert_eq!(position("running", 5), Some(5), "a lease leaves its row where it was");
        assert_eq!(position("idle", 5), None);
        assert_eq!(position("parked", 5), None);
    }

    #[test]
    fn moves_of_one_key_coalesce_and_unmoved_keys_write_nothing() {
        let mut m = DueMoves::default();
        m.record(key("a"), 1, 0, None, Some(10));
        m.record(key("a"), 1, 0, Some(10), Some(20));
        m.record(key("b"), 2, 0, Some(5), Some(30));
        m.record(key("b"), 2, 0, Some(30), Some(5));
        m.record(key("c"), 3, 7, Some(8), None);
        let c = m.columns();
        assert_eq!(c.gone.at, [8], "a was nowhere before; b ends where it began");
        assert_eq!(c.gone.syncsets, ["c"]);
        assert_eq!(
            (c.new.at.as_slice(), c.new.syncsets.as_slice(), c.ids.as_slice()),
            (&[20][..], &["a"][..], &[1][..])
        );
    }

    #[test]
    fn a_key_deleted_and_created_again_moves_to_its_new_row() {
        let mut m = DueMoves::default();
        m.record(key("a"), 1, 3, Some(10), None);
        m.record(key("a"), 9, 3, None, Some(12));
        let c = m.columns();
        assert_eq!((c.gone.at.as_slice(), c.new.at.as_slice(), c.ids.as_slice()), (&[10][..], &[12][..], &[9][..]));
    }

    #[test]
    fn a_key_created_again_at_the_same_time_keeps_its_place_with_its_new_row() {
        let mut m = DueMoves::default();
        m.record(key("a"), 1, 3, Some(10), None);
        m.record(key("a"), 9, 3, None, Some(10));
        let c = m.columns();
        assert!(c.gone.at.is_empty(), "nothing to delete: the row stays where it is");
        assert_eq!((c.new.at.as_slice(), c.ids.as_slice()), (&[10][..], &[9][..]), "and takes the new row's id");
    }
}
