//! Paged lists: `?limit=` and `?continue=`, and the continue token.
//!
//! A list asked with `limit` (or `continue`) answers one page, `{"items": [...],
//! "continue": "<token>"}`, the token absent on the last page. Without either it
//! answers the whole list, as before paging existed. `continue` without `limit` pages
//! by [`DEFAULT_PAGE_LIMIT`].
//!
//! The token is opaque to clients: base64url (no padding) of `{"v":1,"after":[...],
//! "f":"<hash>"}`, where `after` is the last key of the page and `f` a hash of the list,
//! the tenant and the filters it was made for. A token used with another list, tenant
//! or filter, or one that does not decode, is refused (400, naming `continue`): a page
//! is only continued with the question that started it.

use crate::error::{ApiError, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use fleetsync_model::WorkKey;
use fleetsync_store::{ObjectKey, Page, PageRequest, DEFAULT_PAGE_LIMIT, MAX_PAGE_LIMIT};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The longest `continue` token accepted.
pub const MAX_CONTINUE_BYTES: usize = 4096;
const VERSION: u32 = 1;

/// What a list and its filters are, for the tokens it hands out: a token is only good
/// for the same scope.
#[derive(Debug, Clone)]
pub struct Scope {
    hash: String,
}

impl Scope {
    /// `list`: the route; `tenant`; `filters`: the filters in a canonical text (equal
    /// filters give equal text).
    pub fn new(list: &str, tenant: &str, filters: &str) -> Self {
        let digest = Sha256::digest(format!("{list}\0{tenant}\0{filters}").as_bytes());
        Self { hash: digest[..12].iter().map(|b| format!("{b:02x}")).collect() }
    }
}

/// A key a list pages by, as the token's `after`.
pub trait Cursor: Sized {
    fn parts(&self) -> Vec<String>;
    fn from_parts(parts: Vec<String>) -> Option<Self>;
}

impl Cursor for ObjectKey {
    fn parts(&self) -> Vec<String> {
        vec![self.tenant.clone(), self.name.clone()]
    }
    fn from_parts(parts: Vec<String>) -> Option<Self> {
        let [tenant, name]: [String; 2] = parts.try_into().ok()?;
        Some(ObjectKey { tenant, name })
    }
}

impl Cursor for WorkKey {
    fn parts(&self) -> Vec<String> {
        vec![self.tenant.clone(), self.cluster.clone(), self.syncset.clone()]
    }
    fn from_parts(parts: Vec<String>) -> Option<Self> {
        let [tenant, cluster, syncset]: [String; 3] = parts.try_into().ok()?;
        Some(WorkKey::new(tenant, cluster, syncset))
    }
}

impl Cursor for String {
    fn parts(&self) -> Vec<String> {
        vec![self.clone()]
    }
    fn from_parts(parts: Vec<String>) -> Option<Self> {
        let [one]: [String; 1] = parts.try_into().ok()?;
        Some(one)
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Token {
    v: u32,
    after: Vec<String>,
    f: String,
}

/// What a list request asks for: the whole list, or one page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Want<K> {
    All,
    Page(PageRequest<K>),
}

/// Reads `?limit=` and `?continue=` for a list of `scope`.
pub fn want<K: Cursor>(limit: Option<usize>, token: Option<&str>, scope: &Scope) -> Result<Want<K>> {
    let limit = match (limit, token) {
        (None, None) => return Ok(Want::All),
        (Some(l), _) if l == 0 || l > MAX_PAGE_LIMIT => {
            return Err(ApiError::InvalidParam {
                param: "query parameter `limit`".into(),
                rule: format!("{l} is not within 1..={MAX_PAGE_LIMIT} (the largest page is {MAX_PAGE_LIMIT} items)"),
            })
        }
        (l, _) => l.unwrap_or(DEFAULT_PAGE_LIMIT),
    };
    let after = token.map(|t| decode(t, scope)).transpose()?;
    Ok(Want::Page(PageRequest { after, limit }))
}

fn decode<K: Cursor>(text: &str, scope: &Scope) -> Result<K> {
    let bad =
        |rule: &str| ApiError::InvalidParam { param: "query parameter `continue`".into(), rule: rule.to_string() };
    if text.len() > MAX_CONTINUE_BYTES {
        return Err(bad(&format!("longer than {MAX_CONTINUE_BYTES} bytes")));
    }
    let malformed = "not a continue token of this hub (pass back the `continue` of the page before, unchanged)";
    let bytes = URL_SAFE_NO_PAD.decode(text).map_err(|_| bad(malformed))?;
    let token: Token = serde_json::from_slice(&bytes).map_err(|_| bad(malformed))?;
    if token.v != VERSION {
        return Err(bad(&format!(
            "token version {} is not supported (start the list again without `continue`)",
            token.v
        )));
    }
    if token.f != scope.hash {
        return Err(bad(
            "the token belongs to another list, tenant or filter: continue with the same parameters, or start again without `continue`",
        ));
    }
    K::from_parts(token.after).ok_or_else(|| bad(malformed))
}

/// The token that continues after `key` in `scope`.
pub fn token<K: Cursor>(key: &K, scope: &Scope) -> String {
    let token = Token { v: VERSION, after: key.parts(), f: scope.hash.clone() };
    // A struct of strings always serializes.
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&token).unwrap_or_default())
}

/// A store page as the API's items, mapped by `f`, with the token of the next page.
pub fn items<T, U, K: Cursor>(page: Page<T, K>, scope: &Scope, f: impl FnMut(T) -> U) -> fleetsync_api::Items<U> {
    fleetsync_api::Items {
        items: page.items.into_iter().map(f).collect(),
        continue_: page.next.map(|k| token(&k, scope)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope() -> Scope {
        Scope::new("/v1/status", "default", "phase=Failed")
    }

    #[test]
    fn tokens_round_trip_within_their_scope_only() {
        let key = WorkKey::new("default", "c1", "s1");
        let t = token(&key, &scope());
        assert!(t.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{t}");
        assert_eq!(
            want::<WorkKey>(Some(2), Some(&t), &scope()).expect("ok"),
            Want::Page(PageRequest { after: Some(key), limit: 2 })
        );
        for other in [
            Scope::new("/v1/status", "other", "phase=Failed"),
            Scope::new("/v1/status", "default", ""),
            Scope::new("/v1/clusters", "default", "phase=Failed"),
        ] {
            let err = want::<WorkKey>(Some(2), Some(&t), &other).expect_err("another scope").to_string();
            assert!(err.contains("`continue`") && err.contains("another list, tenant or filter"), "{err}");
        }
        // A token of the right scope but another key shape.
        let err = want::<ObjectKey>(Some(2), Some(&t), &scope()).expect_err("shape").to_string();
        assert!(err.contains("`continue`"), "{err}");
    }

    #[test]
    fn limits_and_defaults() {
        assert_eq!(want::<String>(None, None, &scope()).expect("all"), Want::All);
        let t = token(&"x".to_string(), &scope());
        assert_eq!(
            want::<String>(None, Some(&t), &scope()).expect("default"),
            Want::Page(PageRequest { after: Some("x".into()), limit: DEFAULT_PAGE_LIMIT })
        );
        for bad in [0, MAX_PAGE_LIMIT + 1] {
            let err = want::<String>(Some(bad), None, &scope()).expect_err("bad limit").to_string();
            assert!(err.contains("`limit`") && err.contains("5000"), "{err}");
        }
        assert!(want::<String>(Some(MAX_PAGE_LIMIT), None, &scope()).is_ok());
    }

    #[test]
    fn garbage_and_oversized_tokens_are_refused() {
        let wrong_version = URL_SAFE_NO_PAD.encode(br#"{"v":2,"after":["x"],"f":"0"}"#);
        for t in ["%%%", "bm90IGpzb24", "", &wrong_version, &"A".repeat(MAX_CONTINUE_BYTES + 1)] {
            let err = want::<String>(Some(1), Some(t), &scope()).expect_err(t).to_string();
            assert!(err.starts_with("invalid query parameter `continue`: "), "{err}");
        }
    }
}
