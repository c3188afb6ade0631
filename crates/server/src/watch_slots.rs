//! How many event watches may be open at once, in all and per identity, and the slots
//! that count them: a watch holds its slot until its stream ends or its client goes
//! away (the stream is dropped).

use crate::error::ApiError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// Caps on concurrent event watches. Each open watch costs a connection and a small
/// buffer; the caps keep any one caller, and all of them, from holding the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchLimits {
    /// Watches open at once on this server.
    pub max_watches: usize,
    /// Watches open at once by one caller (its subject: `token:NAME`, `oidc:SUB`, `cert:CN`).
    pub max_per_identity: usize,
}

impl Default for WatchLimits {
    /// 500 in all, 100 per identity (below the default cap of 1000 connections, so
    /// watches leave room for other requests).
    fn default() -> Self {
        Self { max_watches: 500, max_per_identity: 100 }
    }
}

/// The open watches, counted.
#[derive(Debug, Default)]
pub(crate) struct WatchSlots {
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_identity: HashMap<String, usize>,
}

impl WatchSlots {
    /// A slot for a watch of `subject`, or `429` naming the limit it would pass.
    pub(crate) fn take(self: &Arc<Self>, limits: &WatchLimits, subject: &str) -> Result<WatchSlot, ApiError> {
        let mut open = lock(&self.open);
        let mine = open.by_identity.get(subject).copied().unwrap_or(0);
        if mine >= limits.max_per_identity {
            return Err(ApiError::TooManyWatches { open: mine, scope: "for this identity" });
        }
        if open.total >= limits.max_watches {
            return Err(ApiError::TooManyWatches { open: open.total, scope: "on this server" });
        }
        open.total += 1;
        *open.by_identity.entry(subject.to_string()).or_default() += 1;
        Ok(WatchSlot { slots: self.clone(), subject: subject.to_string() })
    }

    /// Watches open now.
    pub(crate) fn open(&self) -> usize {
        lock(&self.open).total
    }
}

/// One open watch's place under the caps; given back when dropped.
#[derive(Debug)]
pub(crate) struct WatchSlot {
    slots: Arc<WatchSlots>,
    subject: String,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.slots.open);
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_identity.get_mut(&self.subject) {
            *n -= 1;
            if *n == 0 {
                open.by_identity.remove(&self.subject);
            }
        }
    }
}

fn lock(m: &Mutex<Open>) -> MutexGuard<'_, Open> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_per_identity_and_in_all_and_slots_come_back() {
        let slots = Arc::new(WatchSlots::default());
        let limits = WatchLimits { max_watches: 3, max_per_identity: 2 };
        let a1 = slots.take(&limits, "token:a").expect("a 1");
        let _a2 = slots.take(&limits, "token:a").expect("a 2");
        let e = slots.take(&limits, "token:a").expect_err("a 3");
        assert_eq!(e.to_string(), "too many watches: 2 open for this identity (the limit); close one or try again later");
        let _b1 = slots.take(&limits, "token:b").expect("b 1");
        let e = slots.take(&limits, "token:b").expect_err("4 in all");
        assert_eq!(e.to_string(), "too many watches: 3 open on this server (the limit); close one or try again later");
        drop(a1);
        assert_eq!(slots.open(), 2);
        slots.take(&limits, "token:b").expect("a slot came back");
    }
}
