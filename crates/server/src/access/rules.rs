//! The rule of who may do what: a [`Caller`]'s grants against the right a request
//! needs in a tenant. A decision is a plain value, tested here without a server.

use fleetsync_model::{Grant, TenantRole};
use std::collections::BTreeSet;

/// What a request needs in the tenant it touches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Read objects (not Secrets), status, live state and events.
    Read,
    /// Apply, delete and retry Clusters and SyncSets.
    Edit,
    /// Secrets, tokens and agent credentials.
    Admin,
}

impl Right {
    fn as_str(self) -> &'static str {
        match self {
            Right::Read => "read",
            Right::Edit => "edit",
            Right::Admin => "administer",
        }
    }

    /// The least tenant role that holds this right.
    pub fn least_role(self) -> TenantRole {
        match self {
            Right::Read => TenantRole::Viewer,
            Right::Edit => TenantRole::Editor,
            Right::Admin => TenantRole::Admin,
        }
    }
}

/// Who is calling, once authenticated: a subject (for audit and messages) and the
/// grants its credential carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// `token:NAME`, `oidc:SUB` or `cert:CN`: recorded as the actor of every change.
    pub subject: String,
    pub grants: Vec<Grant>,
}

/// The tenants a caller may read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Visible {
    All,
    Tenants(BTreeSet<String>),
}

impl Visible {
    pub fn contains(&self, tenant: &str) -> bool {
        match self {
            Visible::All => true,
            Visible::Tenants(t) => t.contains(tenant),
        }
    }

    /// Whether no tenant is visible (an agent's credential, or one with no grant).
    pub fn is_none(&self) -> bool {
        matches!(self, Visible::Tenants(t) if t.is_empty())
    }
}

impl Caller {
    pub fn is_fleet_admin(&self) -> bool {
        self.grants.contains(&Grant::Fleet)
    }

    /// Whether the caller holds `right` in `tenant`. An agent credential holds no
    /// right: it only [reports](Caller::reports_for).
    pub fn allows(&self, right: Right, tenant: &str) -> bool {
        self.grants.iter().any(|g| match g {
            Grant::Fleet => true,
            Grant::Tenant { tenant: t, role } => t == tenant && *role >= right.least_role(),
            Grant::Agent { .. } => false,
        })
    }

    /// Whether the caller is the agent of `tenant/cluster`. Nobody else reports for a
    /// cluster, not even a fleet-admin: reports move status, so they come from the
    /// cluster's own credential.
    pub fn reports_for(&self, tenant: &str, cluster: &str) -> bool {
        self.grants.iter().any(|g| matches!(g, Grant::Agent { tenant: t, cluster: c } if t == tenant && c == cluster))
    }

    /// The tenants whose objects, status and events the caller may read.
    pub fn visible(&self) -> Visible {
        if self.is_fleet_admin() {
            return Visible::All;
        }
        let tenants = self.grants.iter().filter_map(|g| match g {
            Grant::Tenant { tenant, .. } => Some(tenant.clone()),
            Grant::Fleet | Grant::Agent { .. } => None,
        });
        Visible::Tenants(tenants.collect())
    }

    /// Whether the caller may issue (or revoke) a credential carrying `grant`: an admin
    /// of its tenant for a tenant role or an agent credential, a fleet-admin for
    /// `fleet-admin`.
    pub fn may_issue(&self, grant: &Grant) -> bool {
        match grant.tenant() {
            Some(tenant) => self.allows(Right::Admin, tenant),
            None => self.is_fleet_admin(),
        }
    }

    /// The message of a 403: what the caller lacks, without naming anything it may
    /// not see.
    pub fn refusal(&self, right: Right, tenant: &str) -> String {
        let role = right.least_role().role();
        format!("{} may not {} in tenant {tenant} (needs role {role} there)", self.subject, right.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(grants: &[&str]) -> Caller {
        Caller { subject: "test".into(), grants: grants.iter().map(|g| Grant::parse(g).expect("grant")).collect() }
    }

    #[test]
    fn roles_nest_within_their_tenant() {
        let rights = [Right::Read, Right::Edit, Right::Admin];
        let held = |c: &Caller, t: &str| rights.map(|r| c.allows(r, t));
        assert_eq!(held(&caller(&["a:viewer"]), "a"), [true, false, false]);
        assert_eq!(held(&caller(&["a:editor"]), "a"), [true, true, false]);
        assert_eq!(held(&caller(&["a:admin"]), "a"), [true, true, true]);
        assert_eq!(held(&caller(&["a:admin"]), "b"), [false, false, false]);
        assert_eq!(held(&caller(&["fleet-admin"]), "any"), [true, true, true]);
        assert_eq!(held(&caller(&["a:agent:c1"]), "a"), [false, false, false]);
        assert_eq!(held(&caller(&["a:viewer", "b:editor"]), "b"), [true, true, false]);
        assert_eq!(held(&caller(&[]), "a"), [false, false, false]);
    }

    #[test]
    fn only_the_clusters_agent_reports() {
        let agent = caller(&["a:agent:c1"]);
        assert!(agent.reports_for("a", "c1"));
        assert!(!agent.reports_for("a", "c2"));
        assert!(!agent.reports_for("b", "c1"));
        assert!(!caller(&["fleet-admin"]).reports_for("a", "c1"));
        assert!(!caller(&["a:admin"]).reports_for("a", "c1"));
    }

    #[test]
    fn visibility_follows_tenant_grants() {
        assert_eq!(caller(&["fleet-admin"]).visible(), Visible::All);
        let v = caller(&["a:viewer", "b:admin", "c:agent:x"]).visible();
        assert!(v.contains("a") && v.contains("b"));
        assert!(!v.contains("c"), "an agent credential reads nothing");
    }

    #[test]
    fn issuing_needs_admin_of_the_grants_tenant() {
        let admin = caller(&["a:admin"]);
        assert!(admin.may_issue(&Grant::parse("a:editor").expect("g")));
        assert!(admin.may_issue(&Grant::parse("a:agent:c1").expect("g")));
        assert!(!admin.may_issue(&Grant::parse("b:viewer").expect("g")));
        assert!(!admin.may_issue(&Grant::Fleet));
        assert!(!caller(&["a:editor"]).may_issue(&Grant::parse("a:viewer").expect("g")));
        assert!(caller(&["fleet-admin"]).may_issue(&Grant::Fleet));
    }
}
