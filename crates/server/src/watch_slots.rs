//! How many event watches may be open at once — in all, per tenant and per identity —
//! and the slots that count them: a watch holds its slot until its stream ends or its
//! client goes away (the stream is dropped).
//!
//! A watch streams the events of every tenant its caller may read, so it counts
//! against each of those tenants (the tenants of the caller's `viewer`, `editor` and
//! `admin` grants), and is refused if any of them is full: a caller with grants in two
//! tenants cannot take more of either than a caller of that tenant alone. A
//! `fleet-admin`'s watches are hub-wide: they count in all and for the identity only.

use crate::access::{Caller, Visible};
use crate::error::ApiError;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// Caps on concurrent event watches. Each open watch costs a connection and a small
/// buffer; the caps keep any one caller, any one tenant, and all of them, from holding
/// the server's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchLimits {
    /// Watches open at once on this server.
    pub max_watches: usize,
    /// Watches open at once by one caller (its subject: `token:NAME`, `oidc:SUB`, `cert:CN`).
    pub max_per_identity: usize,
    /// Watches open at once that carry one tenant's events (by all its callers), below
    /// `max_watches` so that no tenant can take every watch of the server.
    pub max_per_tenant: usize,
}

impl Default for WatchLimits {
    /// 500 in all, 250 per tenant, 100 per identity (below the default cap of 1000
    /// connections, so watches leave room for other requests).
    fn default() -> Self {
        Self { max_watches: 500, max_per_identity: 100, max_per_tenant: 250 }
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
    by_tenant: HashMap<String, usize>,
}

/// The tenants a watch of `caller` counts against: those it reads (none for a
/// fleet-admin: hub-wide).
fn tenants_of(caller: &Caller) -> BTreeSet<String> {
    match caller.visible() {
        Visible::All => BTreeSet::new(),
        Visible::Tenants(tenants) => tenants,
    }
}

impl WatchSlots {
    /// A slot for a watch of `caller`, or `429` naming the limit it would pass.
    pub(crate) fn take(self: &Arc<Self>, limits: &WatchLimits, caller: &Caller) -> Result<WatchSlot, ApiError> {
        let tenants = tenants_of(caller);
        let mut open = lock(&self.open);
        let mine = open.by_identity.get(&caller.subject).copied().unwrap_or(0);
        if mine >= limits.max_per_identity {
            return Err(ApiError::TooManyWatches { open: mine, scope: "for this identity" });
        }
        let fullest = tenants.iter().map(|t| open.by_tenant.get(t).copied().unwrap_or(0)).max().unwrap_or(0);
        if fullest >= limits.max_per_tenant {
            return Err(ApiError::TooManyWatches { open: fullest, scope: "for a tenant of this identity" });
        }
        if open.total >= limits.max_watches {
            return Err(ApiError::TooManyWatches { open: open.total, scope: "on this server" });
        }
        open.total += 1;
        *open.by_identity.entry(caller.subject.clone()).or_default() += 1;
        for t in &tenants {
            *open.by_tenant.entry(t.clone()).or_default() += 1;
        }
        Ok(WatchSlot { slots: self.clone(), subject: caller.subject.clone(), tenants })
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
    tenants: BTreeSet<String>,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.slots.open);
        open.total = open.total.saturating_sub(1);
        give_back(&mut open.by_identity, &self.subject);
        for t in &self.tenants {
            give_back(&mut open.by_tenant, t);
        }
    }
}

fn give_back(counts: &mut HashMap<String, usize>, key: &str) {
    if let Some(n) = counts.get_mut(key) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(key);
        }
    }
}

fn lock(m: &Mutex<Open>) -> MutexGuard<'_, Open> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetsync_model::Grant;

    fn caller(subject: &str, grants: &[&str]) -> Caller {
        Caller { subject: subject.into(), grants: grants.iter().map(|g| Grant::parse(g).expect("grant")).collect() }
    }

    #[test]
    fn caps_per_identity_and_in_all_and_slots_come_back() {
        let slots = Arc::new(WatchSlots::default());
        let limits = WatchLimits { max_watches: 3, max_per_identity: 2, max_per_tenant: 3 };
        let (a, b) = (caller("token:a", &["t:viewer"]), caller("token:b", &["u:viewer"]));
        let a1 = slots.take(&limits, &a).expect("a 1");
        let _a2 = slots.take(&limits, &a).expect("a 2");
        let e = slots.take(&limits, &a).expect_err("a 3");
        assert_eq!(
            e.to_string(),
            "too many watches: 2 open for this identity (the limit); close one or try again later"
        );
        let _b1 = slots.take(&limits, &b).expect("b 1");
        let e = slots.take(&limits, &b).expect_err("4 in all");
        assert_eq!(e.to_string(), "too many watches: 3 open on this server (the limit); close one or try again later");
        drop(a1);
        assert_eq!(slots.open(), 2);
        slots.take(&limits, &b).expect("a slot came back");
    }

    #[test]
    fn a_watch_counts_for_each_tenant_of_its_caller_and_a_fleet_admins_for_none() {
        let slots = Arc::new(WatchSlots::default());
        let limits = WatchLimits { max_watches: 10, max_per_identity: 10, max_per_tenant: 2 };
        let both = slots.take(&limits, &caller("token:ab", &["a:viewer", "b:admin", "c:agent:c1"])).expect("a and b");
        let _a = slots.take(&limits, &caller("token:a", &["a:editor"])).expect("a");
        let e = slots.take(&limits, &caller("token:a2", &["a:viewer"])).expect_err("a is full");
        assert_eq!(
            e.to_string(),
            "too many watches: 2 open for a tenant of this identity (the limit); close one or try again later"
        );
        slots
            .take(&limits, &caller("token:ab", &["a:viewer", "b:admin"]))
            .expect_err("a is full for a caller of a and b");
        let _b = slots.take(&limits, &caller("token:b", &["b:viewer"])).expect("b has room");
        let _c = slots.take(&limits, &caller("token:c", &["c:viewer"])).expect("an agent grant counted nothing in c");
        let fleet: Vec<WatchSlot> = (0..3)
            .map(|_| slots.take(&limits, &caller("token:fleet", &["fleet-admin", "a:viewer"])).expect("hub-wide"))
            .collect();
        assert_eq!(fleet.len(), 3);
        drop(both);
        slots.take(&limits, &caller("token:a2", &["a:viewer"])).expect("a slot of a came back");
    }
}
