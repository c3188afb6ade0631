//! Who may do what: roles, the grants an identity carries, and the record of a
//! hub-issued token.
//!
//! Every credential the hub accepts (a hub-issued bearer token, an OIDC JWT, an mTLS
//! client certificate) comes down to a subject and a list of [`Grant`]s. The rule
//! that decides what a grant allows lives in the server (`fleetsync_server::access`);
//! this module is only the vocabulary the store, the API and the CLI share.

use crate::error::FieldError;
use crate::names::check_dns1123_label;
use crate::time::Timestamp;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a grant allows, from least to most. `Agent` is apart: it reports for one
/// cluster and reads what that cluster's agent watches, nothing else.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Reads its tenant: objects (Secrets without values), status, live state, events.
    Viewer,
    /// Also applies, deletes and retries in its tenant (not Secrets).
    Editor,
    /// Also Secrets, tokens and agent credentials of its tenant.
    Admin,
    /// Every tenant, members and store-wide settings.
    FleetAdmin,
    /// The agent of one cluster.
    Agent,
}

impl Role {
    pub const ALL: [Role; 5] = [Role::Viewer, Role::Editor, Role::Admin, Role::FleetAdmin, Role::Agent];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Editor => "editor",
            Role::Admin => "admin",
            Role::FleetAdmin => "fleet-admin",
            Role::Agent => "agent",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = FieldError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL.into_iter().find(|r| r.as_str() == s).ok_or_else(|| {
            FieldError::message(format!("unknown role {s:?}: one of viewer, editor, admin, fleet-admin, agent"))
        })
    }
}

/// One right an identity holds. Written (and serialized) as [`Grant::parse`] reads it:
/// `team-a:editor`, `fleet-admin`, `team-a:agent:c1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Grant {
    /// `viewer`, `editor` or `admin` of one tenant.
    Tenant { tenant: String, role: TenantRole },
    /// `fleet-admin`: every tenant.
    Fleet,
    /// The agent of `tenant/cluster`.
    Agent { tenant: String, cluster: String },
}

impl TryFrom<String> for Grant {
    type Error = FieldError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        Grant::parse(&s)
    }
}

impl From<Grant> for String {
    fn from(g: Grant) -> String {
        g.to_string()
    }
}

/// The roles a grant can hold within one tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TenantRole {
    Viewer,
    Editor,
    Admin,
}

impl TenantRole {
    pub fn role(self) -> Role {
        match self {
            TenantRole::Viewer => Role::Viewer,
            TenantRole::Editor => Role::Editor,
            TenantRole::Admin => Role::Admin,
        }
    }
}

impl Grant {
    /// The grant of `role` in `tenant`; `cluster` is required for (and only for) `agent`.
    pub fn new(tenant: &str, role: Role, cluster: Option<&str>) -> Result<Grant, FieldError> {
        check_dns1123_label(tenant).map_err(|r| FieldError::message(format!("invalid tenant {tenant:?}: {r}")))?;
        let tenant_role = |role| Ok(Grant::Tenant { tenant: tenant.to_string(), role });
        match (role, cluster) {
            (Role::Agent, Some(c)) => {
                check_dns1123_label(c).map_err(|r| FieldError::message(format!("invalid cluster {c:?}: {r}")))?;
                Ok(Grant::Agent { tenant: tenant.to_string(), cluster: c.to_string() })
            }
            (Role::Agent, None) => Err(FieldError::message("an agent credential is for one cluster: name it")),
            (_, Some(_)) => Err(FieldError::message(format!(
                "a cluster is named only for an agent credential, not for role {role}"
            ))),
            (Role::Viewer, None) => tenant_role(TenantRole::Viewer),
            (Role::Editor, None) => tenant_role(TenantRole::Editor),
            (Role::Admin, None) => tenant_role(TenantRole::Admin),
            (Role::FleetAdmin, None) => Ok(Grant::Fleet),
        }
    }

    /// A grant as identity providers write it (an OIDC claim's values, an mTLS
    /// certificate's organizations) and as the API reads it: `TENANT:ROLE`
    /// (`team-a:editor`), `fleet-admin`, or `TENANT:agent:CLUSTER`. `fleet-admin` is
    /// written alone: `TENANT:fleet-admin` is refused, since where teams may name their
    /// own groups it would make a team admin of every tenant.
    pub fn parse(text: &str) -> Result<Grant, FieldError> {
        if text == Role::FleetAdmin.as_str() {
            return Ok(Grant::Fleet);
        }
        let mut parts = text.splitn(3, ':');
        let (Some(tenant), Some(role)) = (parts.next(), parts.next()) else {
            return Err(FieldError::message(format!(
                "invalid grant {text:?}: write TENANT:ROLE (e.g. team-a:editor) or fleet-admin"
            )));
        };
        let role: Role = role.parse()?;
        if role == Role::FleetAdmin {
            return Err(FieldError::message(format!("invalid grant {text:?}: fleet-admin is every tenant's, written alone as `fleet-admin`, not for one tenant")));
        }
        Grant::new(tenant, role, parts.next())
    }

    pub fn role(&self) -> Role {
        match self {
            Grant::Tenant { role, .. } => role.role(),
            Grant::Fleet => Role::FleetAdmin,
            Grant::Agent { .. } => Role::Agent,
        }
    }

    /// The tenant the grant is for; `None` for `fleet-admin` (every tenant).
    pub fn tenant(&self) -> Option<&str> {
        match self {
            Grant::Tenant { tenant, .. } | Grant::Agent { tenant, .. } => Some(tenant),
            Grant::Fleet => None,
        }
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Grant::Tenant { tenant, role } => write!(f, "{tenant}:{}", role.role()),
            Grant::Fleet => f.write_str(Role::FleetAdmin.as_str()),
            Grant::Agent { tenant, cluster } => write!(f, "{tenant}:agent:{cluster}"),
        }
    }
}

/// A hub-issued bearer token as the store keeps it: everything but the token, which
/// is kept only as its hash (see the store's `Tokens` role).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenRecord {
    /// Unique in the store; how `token list` shows it and `token revoke` names it.
    pub name: String,
    pub grant: Grant,
    pub created_at: Timestamp,
    /// `None`: it does not expire.
    pub expires_at: Option<Timestamp>,
    /// Who issued it (the subject of the caller, or `cli` for `fleetsync token create`).
    pub created_by: String,
}

impl TokenRecord {
    pub fn expired(&self, now: Timestamp) -> bool {
        self.expires_at.is_some_and(|at| at <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_parse_and_print_back() {
        for text in ["team-a:viewer", "team-a:editor", "team-a:admin", "fleet-admin", "team-a:agent:c1"] {
            let g = Grant::parse(text).expect(text);
            assert_eq!(g.to_string(), text);
        }
        assert_eq!(Grant::parse("t:admin").expect("admin").role(), Role::Admin);
        assert_eq!(Grant::parse("fleet-admin").expect("fleet").tenant(), None);
        let json = serde_json::to_string(&Grant::parse("t:agent:c1").expect("agent")).expect("json");
        assert_eq!(json, "\"t:agent:c1\"");
        assert!(serde_json::from_str::<Grant>("\"t:boss\"").is_err());
    }

    #[test]
    fn bad_grants_say_why() {
        assert!(Grant::parse("team-a").expect_err("no role").message.contains("TENANT:ROLE"));
        assert!(Grant::parse("team-a:owner").expect_err("role").message.contains("unknown role"));
        assert!(Grant::parse("team-a:agent").expect_err("cluster").message.contains("one cluster"));
        assert!(Grant::parse("team-a:viewer:c1").expect_err("cluster").message.contains("only for an agent"));
        assert!(Grant::parse("Team_A:viewer").expect_err("tenant").message.contains("invalid tenant"));
        // `token create --tenant t --role fleet-admin`: the tenant is checked, then ignored.
        assert_eq!(Grant::new("t", Role::FleetAdmin, None), Ok(Grant::Fleet));
        // But a grant written `TENANT:fleet-admin` (an OIDC group, a certificate's
        // organization, the API) is not fleet-admin: refused, whatever the tenant.
        for text in ["team-a:fleet-admin", "team-a:fleet-admin:x"] {
            assert!(Grant::parse(text).expect_err(text).message.contains("written alone"), "{text}");
            assert!(serde_json::from_str::<Grant>(&format!("\"{text}\"")).is_err(), "{text}");
        }
    }

    #[test]
    fn expiry_is_inclusive() {
        let r = TokenRecord {
            name: "n".into(),
            grant: Grant::Fleet,
            created_at: Timestamp(0),
            expires_at: Some(Timestamp(10)),
            created_by: "cli".into(),
        };
        assert!(!r.expired(Timestamp(9)));
        assert!(r.expired(Timestamp(10)));
        assert!(!TokenRecord { expires_at: None, ..r }.expired(Timestamp(i64::MAX)));
    }
}
