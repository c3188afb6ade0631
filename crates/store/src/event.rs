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

/// How much of the event log to keep; see [`EventLog::events_trim`](crate::EventLog::events_trim).
/// `None` leaves that bound off; both `None` keeps everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventRetention {
    /// Keep the events of the newest `n` sequence numbers: at most `n` events (fewer
    /// where a backend's sequence has gaps, as PostgreSQL's identity can).
    pub max_events: Option<u64>,
    /// Drop events older than this (by the store's clock). The log is only ever cut at
    /// its old end: an event is dropped once it and every event before it are too old.
    pub max_age: Option<std::time::Duration>,
}

/// What a trim did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EventsTrimmed {
    /// Events deleted by this call.
    pub deleted: u64,
    /// The log's horizon after it: every event with `seq <= horizon` is gone, every
    /// later one is kept. A cursor `after` can be read from iff `after >= horizon`.
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

/// Where a trim cuts (every event with `seq <= cut` goes), given the log's newest
/// sequence number `last` and, for an age bound, the first event young enough to keep.
pub(crate) fn trim_cut(keep: &EventRetention, last: u64, first_young: Option<u64>) -> u64 {
    let by_count = keep.max_events.map_or(0, |n| last.saturating_sub(n));
    let by_age = if keep.max_age.is_some() { age_cut(first_young, last) } else { 0 };
    by_count.max(by_age)
}

/// Rows deleted per transaction when trimming, so a large trim never holds the
/// (SQLite) writer or the (PostgreSQL) table for long.
pub(crate) const TRIM_CHUNK: u64 = 10_000;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn cut_is_the_larger_of_the_bounds() {
        let count = EventRetention { max_events: Some(10), max_age: None };
        assert_eq!(trim_cut(&count, 25, None), 15);
        assert_eq!(trim_cut(&count, 5, None), 0, "fewer events than the bound");
        let age = EventRetention { max_events: None, max_age: Some(Duration::from_secs(60)) };
        assert_eq!(trim_cut(&age, 25, Some(20)), 19);
        assert_eq!(trim_cut(&age, 25, None), 25, "everything is too old");
        let both = EventRetention { max_events: Some(10), max_age: Some(Duration::from_secs(60)) };
        assert_eq!(trim_cut(&both, 25, Some(3)), 15);
        assert_eq!(trim_cut(&both, 25, Some(20)), 19);
        assert_eq!(trim_cut(&EventRetention::default(), 25, None), 0, "no bounds keep everything");
    }
}
