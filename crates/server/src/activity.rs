//! `GET /v1/status/activity?tenant=`: the tenant's applies and failures per minute over
//! the last hour, counted from its `Status` events (the dashboard's small chart).
//!
//! The tenant's newest events are read back from now, a page at a time, until one is
//! older than the hour or [`MAX_READ`] have been read; a burst bigger than that is
//! counted from its newest part, and the answer says from which minute on
//! (`countedFrom`). Events the log's retention has trimmed are not counted.

use crate::error::Result;
use crate::extract::{ApiQuery, TenantQuery};
use crate::AppState;
use axum::extract::State;
use axum::Json;
use fleetsync_model::{Event, Timestamp};
use serde::{Deserialize, Serialize};

/// Minutes answered.
pub const MINUTES: usize = 60;
/// Events read at most per request.
pub const MAX_READ: usize = 50_000;
const PAGE: usize = 5_000;
const MINUTE_MS: i64 = 60_000;

/// One minute of the chart.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Minute {
    /// The minute's start.
    pub at: Timestamp,
    /// Keys applied (`Status` events `Applied`).
    pub applied: u64,
    /// Runs that failed (`Status` events `Failed` or `Parked`).
    pub failed: u64,
}

/// `GET /v1/status/activity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Activity {
    /// The last [`MINUTES`] minutes, oldest first; the last one is the current minute.
    pub minutes: Vec<Minute>,
    /// Set when the read stopped at [`MAX_READ`] events: the minutes before this one
    /// are not counted (or not whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_from: Option<Timestamp>,
}

/// The minutes up to `now`'s, with `events` (any order) counted into them; events of
/// other kinds or actions, and those outside the minutes, are not counted.
pub fn count(events: &[Event], now: Timestamp) -> Vec<Minute> {
    let last = now.millis().div_euclid(MINUTE_MS);
    let first = last - MINUTES as i64 + 1;
    let mut minutes: Vec<Minute> =
        (first..=last).map(|m| Minute { at: Timestamp(m * MINUTE_MS), ..Minute::default() }).collect();
    for e in events.iter().filter(|e| e.kind == "Status") {
        let m = e.at.millis().div_euclid(MINUTE_MS);
        let Some(slot) = usize::try_from(m - first).ok().and_then(|i| minutes.get_mut(i)) else {
            continue;
        };
        match e.action.as_str() {
            "Applied" => slot.applied += 1,
            "Failed" | "Parked" => slot.failed += 1,
            _ => {}
        }
    }
    minutes
}

/// `GET /v1/status/activity`: see the module docs.
pub async fn activity(State(state): State<AppState>, ApiQuery(q): ApiQuery<TenantQuery>) -> Result<Json<Activity>> {
    let tenants = [q.tenant()?.to_string()];
    let now = state.store.clock().now();
    let hour_ago = now.minus(std::time::Duration::from_millis(MINUTE_MS as u64 * MINUTES as u64));
    let mut events = Vec::new();
    let mut before = None;
    let counted_from = loop {
        let page = state.store.events_newest(Some(&tenants), before, PAGE).await?;
        let (Some(oldest), full) = (page.last(), page.len() == PAGE) else { break None };
        let (seq, at) = (oldest.seq, oldest.at);
        events.extend(page);
        if at < hour_ago || !full {
            break None;
        }
        if events.len() >= MAX_READ {
            // The oldest minute read may be partial: count from the next one.
            break Some(Timestamp((at.millis().div_euclid(MINUTE_MS) + 1) * MINUTE_MS));
        }
        before = Some(seq);
    };
    let mut minutes = count(&events, now);
    if let Some(from) = counted_from {
        for m in minutes.iter_mut().filter(|m| m.at < from) {
            m.applied = 0;
            m.failed = 0;
        }
    }
    Ok(Json(Activity { minutes, counted_from }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(at_ms: i64, kind: &str, action: &str) -> Event {
        Event {
            seq: 1,
            at: Timestamp(at_ms),
            tenant: "t".into(),
            kind: kind.into(),
            name: "c/s".into(),
            action: action.into(),
            generation: 1,
            actor: None,
        }
    }

    #[test]
    fn status_events_are_counted_into_their_minute() {
        let now = Timestamp(100 * MINUTE_MS + 30_000);
        let events = [
            event(100 * MINUTE_MS + 1, "Status", "Applied"),
            event(100 * MINUTE_MS + 2, "Status", "Applied"),
            event(99 * MINUTE_MS, "Status", "Failed"),
            event(41 * MINUTE_MS, "Status", "Parked"),
            event(41 * MINUTE_MS, "Status", "Pending"),
            event(100 * MINUTE_MS, "SyncSet", "Applied"),
            // Before the first minute, and after now's.
            event(40 * MINUTE_MS + 59_999, "Status", "Applied"),
            event(101 * MINUTE_MS, "Status", "Applied"),
        ];
        let minutes = count(&events, now);
        assert_eq!(minutes.len(), MINUTES);
        assert_eq!(minutes[0].at, Timestamp(41 * MINUTE_MS));
        assert_eq!((minutes[0].applied, minutes[0].failed), (0, 1));
        assert_eq!((minutes[58].applied, minutes[58].failed), (0, 1));
        assert_eq!((minutes[59].at, minutes[59].applied), (Timestamp(100 * MINUTE_MS), 2));
        assert_eq!(minutes.iter().map(|m| m.applied + m.failed).sum::<u64>(), 4);
    }
}
