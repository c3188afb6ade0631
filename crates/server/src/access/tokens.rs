//! Hub-issued bearer tokens: made of 256 random bits, given to the caller once, and
//! kept by the store only as their SHA-256, so a copy of the store is no credential.
//! A request's token is found by its hash in one indexed lookup.

use fleetsync_model::{Clock, Grant, Role, Timestamp, TokenRecord};
use fleetsync_store::{StoreError, Tokens};
use rand::RngCore;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What every hub-issued token starts with, so that a leaked one is recognisable (and
/// told apart from a JWT).
pub const PREFIX: &str = "fst_";

/// The name of the token an embedded hub issues itself when it starts with none.
pub const BOOTSTRAP_NAME: &str = "bootstrap-admin";

/// Why a token was not issued.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    #[error("a token named {name:?} exists already {place}: revoke it first, or choose another --name")]
    NameTaken { name: String, place: String },
    #[error("invalid token name {name:?}: {rule}")]
    BadName { name: String, rule: String },
    #[error("the store failed")]
    Store(#[from] StoreError),
    #[error("cannot write the token file {path}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What to issue.
#[derive(Debug, Clone)]
pub struct TokenRequest {
    pub grant: Grant,
    /// Default: the role, tenant (and cluster) with a random suffix.
    pub name: Option<String>,
    /// Default: it does not expire.
    pub ttl: Option<Duration>,
    pub created_by: String,
}

/// The SHA-256 of a token, as the store keys it.
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Whether `token` has the shape of a hub-issued token.
pub fn is_hub_token(token: &str) -> bool {
    token.starts_with(PREFIX)
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn default_name(grant: &Grant) -> String {
    let base = match grant {
        Grant::Tenant { tenant, role } => format!("{tenant}-{}", role.role()),
        Grant::Fleet => Role::FleetAdmin.to_string(),
        Grant::Agent { tenant, cluster } => format!("{tenant}-{cluster}-agent"),
    };
    // A name is one DNS-1123 label: keep the base short enough for the suffix.
    let base: String = base.chars().take(55).collect();
    format!("{}-{}", base.trim_end_matches('-'), random_hex(3))
}

/// Issues a token: stores its record and hash, and returns the token — the only time
/// anyone sees it — with the record.
pub async fn issue(
    store: &dyn Tokens,
    clock: &dyn Clock,
    req: TokenRequest,
) -> Result<(String, TokenRecord), IssueError> {
    let name = req.name.unwrap_or_else(|| default_name(&req.grant));
    fleetsync_model::names::check_dns1123_label(&name)
        .map_err(|rule| IssueError::BadName { name: name.clone(), rule: rule.to_string() })?;
    let now = clock.now();
    let record = TokenRecord {
        name: name.clone(),
        grant: req.grant,
        created_at: now,
        expires_at: req.ttl.map(|ttl| now.plus(ttl)),
        created_by: req.created_by,
    };
    let token = format!("{PREFIX}{}", random_hex(32));
    if !store.token_create(&record, &hash(&token)).await? {
        // Taken in its own tenant, or by a hub-wide token (whose names every tenant's
        // admins may learn so): never a name of another tenant.
        let place = match record.grant.tenant() {
            Some(tenant) => format!("in tenant {tenant} or hub-wide"),
            None => "(a hub-wide token's name is unique in the hub)".into(),
        };
        return Err(IssueError::NameTaken { name, place });
    }
    Ok((token, record))
}

/// Why a name did not pick one token to revoke.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickError {
    #[error("token {0} not found")]
    NotFound(String),
    #[error("tokens named {name} are in {}: say which with --tenant (?tenant=)", .places.join(", "))]
    Several { name: String, places: Vec<String> },
}

/// The one token among `records` (those the caller may see) named `name`, in `tenant`
/// if given. A name is unique in a tenant (and a hub-wide token's in the store), so a
/// name alone is enough unless the caller administers several tenants with a token of
/// that name; then the tenant decides.
pub fn pick<'a>(records: &'a [TokenRecord], name: &str, tenant: Option<&str>) -> Result<&'a TokenRecord, PickError> {
    let found: Vec<&TokenRecord> =
        records.iter().filter(|r| r.name == name && tenant.is_none_or(|t| r.grant.tenant() == Some(t))).collect();
    match found[..] {
        [] => Err(PickError::NotFound(name.to_string())),
        [one] => Ok(one),
        _ => {
            let places = found
                .iter()
                .map(|r| r.grant.tenant().map_or("hub-wide".to_string(), |t| format!("tenant {t}")))
                .collect();
            Err(PickError::Several { name: name.to_string(), places })
        }
    }
}

/// Why a presented hub token was refused (the 401's message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("the token is not known to this hub (revoked, or never issued)")]
    Unknown,
    #[error("the token has expired")]
    Expired,
}

/// The record of a presented token, if it is valid at `now`.
pub async fn find(store: &dyn Tokens, token: &str, now: Timestamp) -> Result<Result<TokenRecord, Refused>, StoreError> {
    Ok(match store.token_find(&hash(token)).await? {
        None => Err(Refused::Unknown),
        Some(r) if r.expired(now) => Err(Refused::Expired),
        Some(r) => Ok(r),
    })
}

/// Where an embedded hub keeps the token it issued itself: beside its database.
pub fn bootstrap_file(db: &Path) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(".admin-token");
    db.with_file_name(name)
}

/// For a hub that starts with no token at all: issues a `fleet-admin` token and writes
/// it to `file` (mode 0600, replacing an older file). Returns whether it did; a store
/// that holds any token is left alone.
pub async fn bootstrap(store: &dyn Tokens, clock: &dyn Clock, file: &Path) -> Result<bool, IssueError> {
    if !store.token_list().await?.is_empty() {
        return Ok(false);
    }
    let req = TokenRequest {
        grant: Grant::Fleet,
        name: Some(BOOTSTRAP_NAME.into()),
        ttl: None,
        created_by: "bootstrap".into(),
    };
    let (token, _) = issue(store, clock, req).await?;
    write_private(file, &token).map_err(|source| IssueError::File { path: file.to_path_buf(), source })?;
    Ok(true)
}

/// Writes `text` to `path` readable by its owner only: a new file in the same
/// directory, renamed over `path`.
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut tmp = tempfile::Builder::new().prefix(".admin-token").tempfile_in(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    tmp.write_all(text.as_bytes())?;
    tmp.write_all(b"\n")?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_random_and_hashed() {
        let a = format!("{PREFIX}{}", random_hex(32));
        assert_eq!(a.len(), PREFIX.len() + 64, "256 bits");
        assert_ne!(a, format!("{PREFIX}{}", random_hex(32)));
        assert_ne!(hash(&a), hash("fst_other"));
        assert!(is_hub_token(&a) && !is_hub_token("eyJhbGciOi.x.y"));
    }

    #[test]
    fn default_names_say_what_the_token_is() {
        let n = default_name(&Grant::parse("team-a:agent:c1").expect("grant"));
        assert!(n.starts_with("team-a-c1-agent-"), "{n}");
        assert!(default_name(&Grant::Fleet).starts_with("fleet-admin-"));
        let long = Grant::new(&"t".repeat(63), Role::Agent, Some(&"c".repeat(63))).expect("grant");
        assert!(fleetsync_model::names::check_dns1123_label(&default_name(&long)).is_ok());
    }

    #[test]
    fn the_bootstrap_file_sits_beside_the_database() {
        assert_eq!(
            bootstrap_file(Path::new("/var/lib/fs/fleetsync.db")),
            Path::new("/var/lib/fs/fleetsync.db.admin-token")
        );
        assert_eq!(bootstrap_file(Path::new("f.db")), Path::new("f.db.admin-token"));
    }
}
