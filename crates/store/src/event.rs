//! The event log: every accepted change, in commit order, readable from a cursor.

pub use fleetsync_model::Event;

/// One object's place in the event log: its tenant, kind (`Cluster`, `SyncSet`,
/// `Secret` or `Status`) and name (for `Status`, `cluster/syncset`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventObject {
    pub tenant: String,
    pub kind: String,
    pub name: String,
}

/// How much of each tenant's events to keep; see
/// [`EventLog::events_trim`](crate::EventLog::events_trim). Both bounds apply to each
/// tenant on its own, so one tenant's volume never pushes out another's record.
/// `None` leaves that bound off; both `None` keeps everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventRetention {
    /// Keep each tenant's newest `n` events.
    pub max_events: Option<u64>,
    /// Drop events older than this (by the store's clock). A tenant's events are only
    /// ever cut at their old end: an event is dropped once it and every earlier event
    /// of its tenant are too old.
    pub max_age: Option<std::time::Duration>,
}

/// What a trim did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventsTrimmed {
    /// Events deleted by this call.
    pub deleted: u64,
    /// The whole log's horizon after it: the highest of the tenants' horizons. Every
    /// event after it is kept, so a reader of every tenant can read from a cursor
    /// `after` iff `after >= horizon`; a reader of some tenants only, from their own
    /// (lower or equal) horizon.
    pub horizon: u64,
}

/// A whole trim from its chunks: runs `chunk` (one bounded transaction, answering
/// what it did and whether more is left) until nothing is left, adding up the rows
/// deleted; the horizon is the last chunk's. Each backend supplies the chunk.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) async fn trim_in_chunks<F, Fut>(mut chunk: F) -> crate::Result<EventsTrimmed>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = crate::Result<(EventsTrimmed, bool)>>,
{
    let mut total = EventsTrimmed::default();
    loop {
        let (step, more) = chunk().await?;
        total.deleted += step.deleted;
        total.horizon = step.horizon;
        if !more {
            return Ok(total);
        }
    }
}

/// Where an age-based trim may cut: before the first event at or after `cutoff`.
pub(crate) fn age_cut(first_young: Option<u64>, last: u64) -> u64 {
    match first_young {
        Some(seq) => seq.saturating_sub(1),
        None => last,
    }
}

/// Where a trim may cut one tenant's events (every event of the tenant with
/// `seq <= cut` goes): `beyond_count` is the newest event past the count bound (the
/// `max_events + 1`-th newest, if there is one), `first_young` the oldest event young
/// enough to keep under an age bound, `last` the tenant's newest event.
pub(crate) fn tenant_cut(keep: &EventRetention, beyond_count: Option<u64>, first_young: Option<u64>, last: u64) -> u64 {
    let by_count = if keep.max_events.is_some() { beyond_count.unwrap_or(0) } else { 0 };
    let by_age = if keep.max_age.is_some() { age_cut(first_young, last) } else { 0 };
    by_count.max(by_age)
}

/// The horizon of a read of some tenants: the highest of theirs, where each is at
/// least `floor` (the whole log's horizon from before horizons were kept per tenant).
pub(crate) fn scoped_horizon(floor: u64, tenants: impl IntoIterator<Item = u64>) -> u64 {
    tenants.into_iter().fold(floor, u64::max)
}

/// One page from pages read per tenant (each in `seq` order, ascending or, with
/// `newest_first`, descending): the first `limit` of them all in that order.
pub(crate) fn merge_pages(pages: Vec<Vec<Event>>, limit: usize, newest_first: bool) -> Vec<Event> {
    let mut all: Vec<Event> = pages.into_iter().flatten().collect();
    if newest_first {
        all.sort_unstable_by_key(|e| std::cmp::Reverse(e.seq));
    } else {
        all.sort_unstable_by_key(|e| e.seq);
    }
    all.truncate(limit);
    all
}

/// Lists each tenant that has events, one indexed step per tenant (a loose scan of the
/// `events_by_tenant` index), in both backends' SQL.
pub(crate) const TENANTS_WITH_EVENTS: &str = "WITH RECURSIVE t(name) AS (
        SELECT MIN(tenant) FROM events
        UNION ALL
        SELECT (SELECT MIN(tenant) FROM events WHERE tenant > t.name) FROM t WHERE t.name IS NOT NULL)
    SELECT name FROM t WHERE name IS NOT NULL";

/// Rows deleted per transaction when trimming, so a large trim never holds the
/// (SQLite) writer or the (PostgreSQL) table for long.
pub(crate) const TRIM_CHUNK: u64 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn event(seq: u64) -> Event {
        Event {
            seq,
            at: fleetsync_model::Timestamp(0),
            tenant: "t".into(),
            kind: "Cluster".into(),
            name: "c".into(),
            action: "Created".into(),
            generation: 1,
            actor: None,
        }
    }

    #[test]
    fn a_tenants_cut_keeps_its_newest_events_and_its_young_ones() {
        let count = EventRetention { max_events: Some(10), max_age: None };
        assert_eq!(tenant_cut(&count, Some(40), None, 90), 40, "everything up to the 11th newest goes");
        assert_eq!(tenant_cut(&count, None, None, 90), 0, "fewer events than the bound");
        let age = EventRetention { max_events: None, max_age: Some(Duration::from_secs(60)) };
        assert_eq!(tenant_cut(&age, Some(40), Some(70), 90), 69, "the count bound is off");
        assert_eq!(tenant_cut(&age, None, None, 90), 90, "everything is too old");
        let both = EventRetention { max_events: Some(10), max_age: Some(Duration::from_secs(60)) };
        assert_eq!(tenant_cut(&both, Some(40), Some(20), 90), 40);
        assert_eq!(tenant_cut(&both, Some(40), Some(70), 90), 69);
        assert_eq!(tenant_cut(&EventRetention::default(), Some(40), None, 90), 0, "no bounds keep everything");
    }

    #[test]
    fn a_scoped_horizon_is_the_highest_of_its_tenants_and_the_floor() {
        assert_eq!(scoped_horizon(5, []), 5);
        assert_eq!(scoped_horizon(5, [3, 9, 7]), 9);
        assert_eq!(scoped_horizon(0, [0]), 0);
    }

    #[test]
    fn pages_of_tenants_merge_in_log_order() {
        let seqs = |v: Vec<Event>| v.into_iter().map(|e| e.seq).collect::<Vec<_>>();
        let pages = || vec![vec![event(2), event(5), event(9)], vec![event(1), event(6)], vec![]];
        assert_eq!(seqs(merge_pages(pages(), 4, false)), [1, 2, 5, 6]);
        let newest = vec![vec![event(9), event(5), event(2)], vec![event(6), event(1)]];
        assert_eq!(seqs(merge_pages(newest, 3, true)), [9, 6, 5]);
    }
}
