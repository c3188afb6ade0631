//! Quotas per tenant: how many Clusters, SyncSets and keys a tenant may have, and how
//! many bytes its documents may take, checked in the transaction that writes them.
//!
//! A backend measures a tenant's [`Usage`] before and after an apply (only what a quota
//! limits: counting costs a read of the tenant's rows), and asks [`check`]. Nothing here
//! touches a database, so the rule is tested on its own. The rule is Kubernetes'
//! `ResourceQuota`'s: a write that would leave a tenant above a limit is refused, unless
//! it does not add to what is above it (so a quota lowered below today's usage still lets
//! a tenant change, shrink and delete).

use std::collections::BTreeMap;
use std::fmt;

/// What a tenant may hold; `None`: no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    pub clusters: Option<u64>,
    pub syncsets: Option<u64>,
    /// Keys: one per Cluster a SyncSet selects.
    pub keys: Option<u64>,
    /// The tenant's Clusters, SyncSets and Secrets, as stored (compact JSON).
    pub bytes: Option<u64>,
}

impl Quota {
    /// Whether this quota limits anything.
    pub fn is_unlimited(&self) -> bool {
        *self == Quota::default()
    }

    /// This quota with each limit `other` sets taking the place of this one's.
    pub fn overridden_by(self, other: &Quota) -> Quota {
        Quota {
            clusters: other.clusters.or(self.clusters),
            syncsets: other.syncsets.or(self.syncsets),
            keys: other.keys.or(self.keys),
            bytes: other.bytes.or(self.bytes),
        }
    }
}

/// The operator's quotas: one for every tenant, and overrides for some.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quotas {
    pub default: Quota,
    pub tenants: BTreeMap<String, Quota>,
}

impl Quotas {
    /// No limits (the default).
    pub const NONE: &'static Quotas = &Quotas {
        default: Quota { clusters: None, syncsets: None, keys: None, bytes: None },
        tenants: BTreeMap::new(),
    };

    /// The quota of `tenant`: its override's limits where set, else the default's.
    pub fn of(&self, tenant: &str) -> Quota {
        match self.tenants.get(tenant) {
            Some(q) => self.default.overridden_by(q),
            None => self.default,
        }
    }

    /// Whether no tenant has any limit (backends then measure nothing).
    pub fn is_unlimited(&self) -> bool {
        self.default.is_unlimited() && self.tenants.values().all(Quota::is_unlimited)
    }
}

/// What a tenant holds; only what its quota limits is measured (the rest stays 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub clusters: u64,
    pub syncsets: u64,
    pub keys: u64,
    pub bytes: u64,
}

/// A quota a write would have exceeded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("exceeded quota of tenant {tenant}: {what} would be {requested} (now {used}); the limit is {limit}")]
pub struct QuotaExceeded {
    pub tenant: String,
    /// `clusters`, `syncsets`, `keys` or `bytes`.
    pub what: &'static str,
    /// Usage before the write.
    pub used: u64,
    /// Usage the write would leave.
    pub requested: u64,
    pub limit: u64,
}

/// The first limit of `quota` that the change from `before` to `after` breaks: usage
/// above the limit that the change added to.
pub fn check(tenant: &str, quota: &Quota, before: &Usage, after: &Usage) -> Result<(), QuotaExceeded> {
    let dims = [
        ("clusters", quota.clusters, before.clusters, after.clusters),
        ("syncsets", quota.syncsets, before.syncsets, after.syncsets),
        ("keys", quota.keys, before.keys, after.keys),
        ("bytes", quota.bytes, before.bytes, after.bytes),
    ];
    for (what, limit, used, requested) in dims {
        if let Some(limit) = limit {
            if requested > limit && requested > used {
                return Err(QuotaExceeded { tenant: tenant.to_string(), what, used, requested, limit });
            }
        }
    }
    Ok(())
}

impl fmt::Display for Quota {
    /// `clusters=10,keys=1000` (the form `serve --tenant-quota` takes), or `unlimited`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set: Vec<String> =
            [("clusters", self.clusters), ("syncsets", self.syncsets), ("keys", self.keys), ("bytes", self.bytes)]
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| format!("{k}={v}")))
                .collect();
        if set.is_empty() {
            f.write_str("unlimited")
        } else {
            f.write_str(&set.join(","))
        }
    }
}

impl std::str::FromStr for Quota {
    type Err = String;

    /// `clusters=10,syncsets=50,keys=1000,bytes=64Mi` (any subset; sizes take the
    /// suffixes Ki, Mi, Gi).
    fn from_str(s: &str) -> Result<Quota, String> {
        let mut q = Quota::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = part.split_once('=').ok_or_else(|| format!("{part:?}: expected NAME=NUMBER"))?;
            let n = number(v.trim())
                .ok_or_else(|| format!("{part:?}: {v:?} is not a whole number (sizes take Ki, Mi, Gi)"))?;
            let slot = match k.trim() {
                "clusters" => &mut q.clusters,
                "syncsets" => &mut q.syncsets,
                "keys" => &mut q.keys,
                "bytes" => &mut q.bytes,
                other => return Err(format!("unknown quota {other:?}: expected clusters, syncsets, keys or bytes")),
            };
            *slot = Some(n);
        }
        Ok(q)
    }
}

fn number(v: &str) -> Option<u64> {
    let (digits, scale) = match v {
        _ if v.ends_with("Ki") => (&v[..v.len() - 2], 1u64 << 10),
        _ if v.ends_with("Mi") => (&v[..v.len() - 2], 1 << 20),
        _ if v.ends_with("Gi") => (&v[..v.len() - 2], 1 << 30),
        _ => (v, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(clusters: u64, syncsets: u64, keys: u64, bytes: u64) -> Usage {
        Usage { clusters, syncsets, keys, bytes }
    }

    #[test]
    fn a_write_above_a_limit_is_refused_with_the_numbers() {
        let q: Quota = "keys=10000".parse().expect("quota");
        let e = check("team-a", &q, &usage(0, 0, 0, 0), &usage(0, 0, 40_000, 0)).expect_err("over");
        assert_eq!((e.what, e.used, e.requested, e.limit), ("keys", 0, 40_000, 10_000));
        assert_eq!(e.to_string(), "exceeded quota of tenant team-a: keys would be 40000 (now 0); the limit is 10000");
        assert!(check("team-a", &q, &usage(0, 0, 0, 0), &usage(0, 0, 10_000, 0)).is_ok(), "at the limit is allowed");
    }

    #[test]
    fn a_write_that_does_not_add_to_what_is_over_passes() {
        let q: Quota = "clusters=2,bytes=1Ki".parse().expect("quota");
        // Quota lowered below usage: shrinking and changing in place pass, growing does not.
        assert!(check("t", &q, &usage(5, 0, 0, 0), &usage(5, 0, 0, 0)).is_ok());
        assert!(check("t", &q, &usage(5, 0, 0, 0), &usage(4, 0, 0, 0)).is_ok());
        assert_eq!(check("t", &q, &usage(5, 0, 0, 0), &usage(6, 0, 0, 0)).expect_err("grows").what, "clusters");
        assert_eq!(check("t", &q, &usage(0, 0, 0, 1000), &usage(0, 0, 0, 1025)).expect_err("bytes").limit, 1024);
    }

    #[test]
    fn unset_limits_limit_nothing_and_overrides_take_precedence() {
        assert!(
            check("t", &Quota::default(), &Usage::default(), &usage(u64::MAX, u64::MAX, u64::MAX, u64::MAX)).is_ok()
        );
        let quotas = Quotas {
            default: "clusters=10,keys=100".parse().expect("default"),
            tenants: [("big".to_string(), "keys=1000000".parse().expect("big"))].into(),
        };
        assert_eq!(quotas.of("big"), Quota { clusters: Some(10), keys: Some(1_000_000), ..Quota::default() });
        assert_eq!(quotas.of("other"), quotas.default);
        assert!(!quotas.is_unlimited());
        assert!(Quotas::NONE.is_unlimited());
    }

    #[test]
    fn quotas_parse_and_print() {
        let q: Quota = "clusters=10, syncsets=5,keys=100,bytes=64Mi".parse().expect("all");
        assert_eq!(q.bytes, Some(64 << 20));
        assert_eq!(q.to_string(), format!("clusters=10,syncsets=5,keys=100,bytes={}", 64u64 << 20));
        assert!("pods=3".parse::<Quota>().expect_err("unknown").contains("unknown quota \"pods\""));
        assert!("keys=lots".parse::<Quota>().expect_err("nan").contains("not a whole number"));
        assert!("keys".parse::<Quota>().expect_err("no value").contains("NAME=NUMBER"));
        assert!("bytes=99999999999Gi".parse::<Quota>().is_err(), "overflow is refused");
        assert_eq!(Quota::default().to_string(), "unlimited");
    }
}
