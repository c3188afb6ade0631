//! Secrets: credentials fleetsync keeps for reaching targets (a cluster's kubeconfig).
//!
//! A Secret is written like a Kubernetes Secret's `stringData`. Its values are
//! [`SecretValue`]s, which never print themselves: `Debug` shows `<redacted>`, there is
//! no `Display`, and [`Document::to_value`](crate::Document::to_value) (what the API and
//! the CLI show) replaces each value with [`REDACTED`]. Reading a value is an explicit
//! [`SecretValue::expose`], so every place that handles the plain text is greppable.

use crate::document::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What is shown instead of a secret value.
pub const REDACTED: &str = "<redacted>";
/// The key of a Secret that holds a kubeconfig (`spec.endpoint.kubeconfig.secretRef`).
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// The largest Secret (all values together).
pub const MAX_SECRET_BYTES: usize = 1024 * 1024;

/// A Secret document (`kind: Secret`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Secret {
    pub metadata: ObjectMeta,
    /// The values, by key, as plain text (base64 `data` is not accepted).
    pub string_data: BTreeMap<String, SecretValue>,
}

impl Secret {
    /// The value under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&SecretValue> {
        self.string_data.get(key)
    }

    /// The same Secret with every value replaced by [`REDACTED`]: what may be shown.
    pub fn redacted(&self) -> Secret {
        let string_data = self.string_data.keys().map(|k| (k.clone(), SecretValue(REDACTED.into()))).collect();
        Secret { metadata: self.metadata.clone(), string_data }
    }
}

/// A secret value. Never printed: see the module docs.
#[derive(Clone, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The plain text. Call only where the value is used, never to show it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Accepts strings only, and says so without echoing what it got (serde's own
/// "invalid type" message would quote a numeric value).
impl<'de> Deserialize<'de> for SecretValue {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl serde::de::Visitor<'_> for Text {
            type Value = SecretValue;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SecretValue, E> {
                Ok(SecretValue(v.to_owned()))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<SecretValue, E> {
                Err(E::custom("a secret value must be a string (quote it)"))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<SecretValue, E> {
                Err(E::custom("a secret value must be a string (quote it)"))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<SecretValue, E> {
                Err(E::custom("a secret value must be a string (quote it)"))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<SecretValue, E> {
                Err(E::custom("a secret value must be a string (quote it)"))
            }
        }
        // `deserialize_any`: `deserialize_str` lets the format report the value itself.
        d.deserialize_any(Text)
    }
}

/// Checks a Secret's keys (as Kubernetes does: `[-._a-zA-Z0-9]+`) and total size.
pub(crate) fn validate_secret(s: &Secret) -> Result<(), (String, String)> {
    let mut total = 0;
    for (k, v) in &s.string_data {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if k.is_empty() || k.len() > 253 || !k.chars().all(ok) {
            return Err((format!("stringData.{k}"), "keys must be 1 to 253 characters of letters, digits, '-', '_' or '.'".into()));
        }
        total += k.len() + v.len();
    }
    if total > MAX_SECRET_BYTES {
        return Err(("stringData".into(), format!("values total {total} bytes; the limit is {MAX_SECRET_BYTES} bytes (1 MiB)")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_never_print() {
        let mut s = Secret { metadata: ObjectMeta::new("k"), string_data: BTreeMap::new() };
        s.string_data.insert("token".into(), SecretValue::new("MARKER-123"));
        assert!(!format!("{s:?}").contains("MARKER"));
        assert!(!serde_json::to_string(&s.redacted()).expect("json").contains("MARKER"));
        assert_eq!(s.get("token").map(SecretValue::expose), Some("MARKER-123"));
    }

    #[test]
    fn non_string_values_are_refused_without_echo() {
        let e = serde_json::from_str::<Secret>(r#"{"metadata":{"name":"k"},"stringData":{"t":98765}}"#).expect_err("number");
        assert!(!e.to_string().contains("98765"), "{e}");
        assert!(e.to_string().contains("must be a string"), "{e}");
    }
}
