//! Completions on PostgreSQL: every completion of a call in one transaction. The rows
//! are locked in id order, found by the ids this process's claims remembered when it
//! can (`locations.rs`); what each completion does is decided as for every backend
//! ([`crate::write::complete`]) and written set-based; each key's row in `due` moves
//! with it (`due.rs`).

use super::due::position;
use super::live::Ends;
use super::locations::Locations;
use super::queue::{attempts, key_columns};
use super::{PgResult, Tx};
use crate::lifecycle::Held;
use crate::stored::json;
use crate::write::complete::{self, CompletedRow, RowWrite};
use crate::write::{status_name, NewEvent};
use crate::{CompleteOutcome, Completion, Fence, RetryPolicy};
use fleetsync_model::Timestamp;
use std::collections::HashMap;
use std::sync::LazyLock;
use tokio_postgres::Row;

/// Writes every completion in one transaction: locks the keys' rows (in id order, see
/// [`lock_rows`]), decides each completion ([`complete::decide`]), then writes them
/// set-based.
pub(super) async fn run(
    tx: &mut Tx<'_>,
    retry: &RetryPolicy,
    locations: &Locations,
    items: &[Completion],
) -> PgResult<Vec<CompleteOutcome>> {
    if items.is_empty() {
        return Ok(Vec::new());
    }
    let rows = lock_rows(tx, locations, items).await?;
    let mut held = held_rows(&rows)?;

    let now = tx.now;
    let mut updates = Updates::default();
    let mut deletes: Vec<String> = Vec::new();
    let mut ends = Ends::default();
    let mut outcomes = Vec::with_capacity(items.len());
    for c in items {
        // A key completed earlier in this batch is no longer running: later ones are stale.
        let Some((h, row)) = held.get_mut(&(c.key.tenant.as_str(), c.key.cluster.as_str(), c.key.syncset.as_str()))
        else {
            outcomes.push(CompleteOutcome::Stale);
            continue;
        };
        let Some(done) = complete::decide(h, c, now, retry) else {
            outcomes.push(CompleteOutcome::Stale);
            continue;
        };
        h.running = false;
        let ctid = row.ctid.clone();
        match &done.row {
            RowWrite::Update(w) => {
                tx.due.record(c.key.clone(), h.id, row.shard, row.due_at, position(w.db_phase(), w.run_at.millis()));
                updates.push(ctid, w, json("work", &c.resources)?)?;
            }
            RowWrite::Delete => {
                tx.due.record(c.key.clone(), h.id, row.shard, row.due_at, None);
                deletes.push(ctid);
            }
        }
        if let Some(kept) = &done.live_kept {
            ends.push(&c.key, kept)?;
        }
        tx.announce(done.announce);
        let name = status_name(&c.key);
        let (tenant, action, generation) = (c.key.tenant.as_str(), done.event_action, h.generation);
        tx.event(NewEvent { tenant, kind: "Status", name: &name, action, generation, actor: None });
        outcomes.push(done.outcome);
    }
    if !updates.ctids.is_empty() {
        let u = &updates;
        tx.execute(
            "UPDATE work w SET phase = u.phase, run_at = u.run_at,
                 observed_generation = COALESCE(u.observed, w.observed_generation),
                 resources = COALESCE(u.resources, w.resources), inventory = COALESCE(u.inventory, w.inventory),
                 last_error = u.last_error,
                 last_applied_at = COALESCE(u.applied_at, w.last_applied_at),
                 attempts = CASE WHEN u.reset_attempts THEN 0 ELSE w.attempts END,
                 rendered = CASE WHEN u.set_rendered THEN u.rendered ELSE w.rendered END,
                 lease_owner = NULL, lease_expires_at = NULL, updated_at = $10
             FROM unnest($1::text[]::tid[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::text[], $7::text[],
                         $8::bigint[], $9::bool[], $11::bool[], $12::text[])
                  AS u(ctid, phase, run_at, observed, resources, inventory, last_error, applied_at, reset_attempts,
                       set_rendered, rendered)
             WHERE w.ctid = ANY($1::text[]::tid[]) AND w.ctid = u.ctid",
            &[
                &u.ctids,
                &u.phases,
                &u.run_ats,
                &u.observed,
                &u.resources,
                &u.inventories,
                &u.errors,
                &u.applied_at,
                &u.reset_attempts,
                &now.millis(),
                &u.set_rendered,
                &u.rendered,
            ],
        )
        .await?;
    }
    if !deletes.is_empty() {
        tx.execute("DELETE FROM work WHERE ctid = ANY($1::text[]::tid[])", &[&deletes]).await?;
    }
    ends.write(tx).await?;
    Ok(outcomes)
}

/// What a completion reads of each row it locks: columns 0–5 are [`Held`]'s, 6–8 the
/// key, 9 the locked version's `ctid` (as text), 10–11 its id and shard, 12–13 what
/// says where its row in `due` is (see `due::position`).
const HELD_COLUMNS: &str =
    "w.fence, w.phase = 'running', w.want_seq > w.claimed_seq, w.desired, w.attempts, w.generation,
                            w.tenant, w.cluster, w.syncset, w.ctid::text, w.id, w.shard, w.phase, w.run_at";

/// The rows with the ids in `$1`, locked in id order (`mod.rs`), through the unique
/// index on `id`: an index fetch prunes the page's dead versions first (a TID fetch
/// does not), which leaves room for this completion's new version on the page, so its
/// update is HOT; and it finds the key's latest version, whatever moved it since the
/// claim.
pub(super) static LOCK_BY_ID: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {HELD_COLUMNS} FROM work w WHERE w.id = ANY($1) ORDER BY w.id FOR UPDATE"));

/// The rows of the keys in `$1`–`$3`, found through the unique index on the key, locked
/// in id order.
static LOCK_BY_KEY: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {HELD_COLUMNS} FROM work w
         WHERE (w.tenant, w.cluster, w.syncset) IN (SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
         ORDER BY w.id
         FOR UPDATE"
    )
});

/// Locks the rows of the completions' keys and reads them ([`HELD_COLUMNS`]), in one
/// statement, in id order like every writer that waits for `work` rows: by the ids this
/// process's claims remembered (`locations.rs`) if it remembers every lease, by key
/// otherwise (a lease claimed through another store).
async fn lock_rows(tx: &Tx<'_>, locations: &Locations, items: &[Completion]) -> PgResult<Vec<Row>> {
    if let Some(ids) = locations.ids(items.iter().map(|c| (&c.key, c.fence))) {
        return tx.query(&LOCK_BY_ID, &[&ids]).await;
    }
    let (tenants, clusters, syncsets) = key_columns(items.iter().map(|c| &c.key));
    tx.query(&LOCK_BY_KEY, &[&tenants, &clusters, &syncsets]).await
}

/// The locked rows ([`HELD_COLUMNS`]) by key (borrowed from the rows), and where each
/// is: the completion's writes go straight to that version (a TID scan). Locked, so it is
/// the latest version until commit.
fn held_rows(rows: &[Row]) -> PgResult<HashMap<KeyRef<'_>, (Held, LockedRow)>> {
    let mut held = HashMap::with_capacity(rows.len());
    for r in rows {
        let key = (r.try_get(6)?, r.try_get(7)?, r.try_get(8)?);
        let h = Held {
            id: r.try_get(10)?,
            fence: Fence::new(r.try_get(0)?),
            running: r.try_get(1)?,
            dirty: r.try_get(2)?,
            desired: r.try_get(3)?,
            attempts: attempts(r.try_get(4)?)?,
            generation: r.try_get(5)?,
        };
        let phase: &str = r.try_get(12)?;
        let due_at = position(phase, r.try_get(13)?);
        held.insert(key, (h, LockedRow { ctid: r.try_get(9)?, shard: r.try_get(11)?, due_at }));
    }
    Ok(held)
}

/// A key as `(tenant, cluster, syncset)`, borrowed.
type KeyRef<'a> = (&'a str, &'a str, &'a str);

/// Where a locked row is, in `work` and in `due`.
struct LockedRow {
    /// The locked version's `ctid`, as text.
    ctid: String,
    shard: i16,
    /// Its position in `due` (see `due::position`), if it has one.
    due_at: Option<i64>,
}

/// Row updates of a completion batch, as columns, by row version (`ctid`, as text);
/// `None` keeps the row's value (except `errors`, where `None` clears it).
#[derive(Default)]
struct Updates {
    ctids: Vec<String>,
    phases: Vec<&'static str>,
    run_ats: Vec<i64>,
    observed: Vec<Option<i64>>,
    resources: Vec<Option<String>>,
    inventories: Vec<Option<String>>,
    errors: Vec<Option<String>>,
    applied_at: Vec<Option<i64>>,
    reset_attempts: Vec<bool>,
    set_rendered: Vec<bool>,
    rendered: Vec<Option<String>>,
}

impl Updates {
    /// Adds the row at `ctid` and what the completion writes to it.
    fn push(&mut self, ctid: String, w: &CompletedRow<'_>, resources: String) -> PgResult<()> {
        self.ctids.push(ctid);
        self.phases.push(w.db_phase());
        self.run_ats.push(w.run_at.millis());
        self.observed.push(w.observed_generation);
        self.resources.push((!w.keep_resources).then_some(resources));
        self.inventories.push(w.inventory.map(|i| json("work", i)).transpose()?);
        self.errors.push(w.last_error.map(str::to_string));
        self.applied_at.push(w.last_applied_at.map(Timestamp::millis));
        self.reset_attempts.push(w.reset_attempts);
        self.set_rendered.push(w.rendered.is_some());
        self.rendered.push(w.rendered.flatten().map(str::to_string));
        Ok(())
    }
}
