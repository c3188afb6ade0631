//! Secrets: credentials fleetsync keeps for reaching targets (a cluster's kubeconfig).
//!
//! A Secret is written like a Kubernetes Secret's `stringData`. Its values are
//! [`SecretValue`]s, which never print themselves: `Debug` shows `<redacted>`, there is
//! no `Display`, and [`Document::to_value`](crate::Document::to_value) (what the API and
//! the CLI show) replaces each value with [`REDACTED`]. Reading a value is an explicit
//! [`SecretValue::expose`], so every place that handles the plain text is greppable.

use crate::document::ObjectMeta;
use crate::error::FieldError;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What is shown instead of a secret value.
pub const REDACTED: &str = "<redacted>";
/// The key of a Secret that holds a kubeconfig (`spec.endpoint.kubeconfig.secretRef`).
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Why a value that is the [`REDACTED`] marker is refused.
pub const REDACTED_APPLIED: &str =
    "is the marker `<redacted>` that reads show instead of a secret value, not a value: apply the real value";
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

/// The fields of a Kubernetes Secret manifest that hold values.
const MANIFEST_VALUE_FIELDS: [&str; 2] = ["data", "stringData"];

/// Whether a manifest is a Kubernetes Secret (core `v1`, `kind: Secret`).
pub fn is_secret_manifest(manifest: &serde_json::Value) -> bool {
    manifest.get("apiVersion").and_then(|v| v.as_str()) == Some("v1")
        && manifest.get("kind").and_then(|v| v.as_str()) == Some("Secret")
}

/// Replaces every value of a Kubernetes Secret manifest's `data` and `stringData`
/// with [`REDACTED`], keeping the keys (a field that is not a map is replaced whole).
/// Other manifests are left as they are. This is what may be shown of a SyncSet.
pub fn redact_manifest(manifest: &mut serde_json::Value) {
    if !is_secret_manifest(manifest) {
        return;
    }
    let Some(obj) = manifest.as_object_mut() else { return };
    for field in MANIFEST_VALUE_FIELDS {
        match obj.get_mut(field) {
            Some(serde_json::Value::Object(values)) => values.values_mut().for_each(|v| *v = REDACTED.into()),
            Some(serde_json::Value::Null) | None => {}
            Some(other) => *other = REDACTED.into(),
        }
    }
}

/// Refuses a Kubernetes Secret manifest that holds the [`REDACTED`] marker (a SyncSet
/// read back and applied unchanged), which would otherwise be written into clusters.
/// Returns the field (`stringData.token`) and the rule.
pub(crate) fn refuse_redacted_manifest(manifest: &serde_json::Value) -> Result<(), FieldError> {
    if !is_secret_manifest(manifest) {
        return Ok(());
    }
    for field in MANIFEST_VALUE_FIELDS {
        match manifest.get(field) {
            Some(serde_json::Value::Object(values)) => {
                if let Some((k, _)) = values.iter().find(|(_, v)| v.as_str() == Some(REDACTED)) {
                    return Err(FieldError::new(format!("{field}.{k}"), REDACTED_APPLIED));
                }
            }
            Some(v) if v.as_str() == Some(REDACTED) => return Err(FieldError::new(field, REDACTED_APPLIED)),
            _ => {}
        }
    }
    Ok(())
}

/// A YAML parser's message with the values it quotes replaced by their type. A YAML
/// tag that does not fit its scalar (`!!int`, `!!float`, `!!bool`, `!!null`) fails before
/// the document's kind is known, with serde's standard
/// `invalid value: string "...", expected an integer`; the scalar may be a secret, so
/// every `invalid value:`/`invalid type:` is rewritten to name the type alone
/// (`invalid value: a string, expected an integer`), for any document. Where a quoted
/// value cannot be delimited, the rest of the message is dropped.
pub fn yaml_message_without_values(message: &str) -> String {
    const QUOTED: [(&str, char, &str); 5] = [
        ("string \"", '"', "a string"),
        ("integer `", '`', "an integer"),
        ("floating point `", '`', "a floating point number"),
        ("boolean `", '`', "a boolean"),
        ("character `", '`', "a character"),
    ];
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) =
        ["invalid value: ", "invalid type: "].iter().filter_map(|p| rest.find(p).map(|i| i + p.len())).min()
    {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some((prefix, close, shown)) = QUOTED.iter().find(|(p, _, _)| rest.starts_with(p)) else { continue };
        let quoted = &rest[prefix.len()..];
        // A string is escaped as by `Debug`: `\"` and `\\` do not close it; a
        // character may itself be a backtick, so the first one is skipped.
        let mut escaped = false;
        let first = if *prefix == "character `" { quoted.chars().next().map_or(0, char::len_utf8) } else { 0 };
        let end = quoted[first..].char_indices().find(|&(_, c)| {
            let closes = c == *close && !escaped;
            escaped = *close == '"' && c == '\\' && !escaped;
            closes
        });
        let Some((end, _)) = end else {
            out.push_str("a value (not shown)");
            return out;
        };
        out.push_str(shown);
        rest = &quoted[first + end + 1..];
    }
    out.push_str(rest);
    out
}

/// Reads a Secret document. Errors name the field, what was expected and the *type*
/// found (`invalid type: a string, expected a map`), never a value: the document is
/// read through a deserializer whose error type is given only the kind of what it
/// found, so a kubeconfig written where a map belongs cannot reach a message.
pub(crate) fn parse_secret(value: serde_json::Value) -> Result<Secret, FieldError> {
    let value = serde_value::to_value(value).map_err(|_| FieldError::message("is not a document"))?;
    serde_path_to_error::deserialize(serde_value::ValueDeserializer::<ShapeError>::new(value)).map_err(|e| {
        let path = e.path().to_string();
        FieldError::new(if path == "." { String::new() } else { path }, e.into_inner().0)
    })
}

/// A deserialization error that says what was expected and what type was found.
#[derive(Debug)]
struct ShapeError(String);

impl fmt::Display for ShapeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ShapeError {}

impl serde::de::Error for ShapeError {
    /// Messages of the Secret's own types (unknown or missing fields, a value that is
    /// not a string), none of which quotes a value.
    fn custom<T: fmt::Display>(msg: T) -> Self {
        ShapeError(msg.to_string())
    }

    fn invalid_type(found: serde::de::Unexpected, expected: &dyn serde::de::Expected) -> Self {
        ShapeError(format!("invalid type: {}, expected {expected}", type_of(found)))
    }

    fn invalid_value(found: serde::de::Unexpected, expected: &dyn serde::de::Expected) -> Self {
        ShapeError(format!("invalid value: {}, expected {expected}", type_of(found)))
    }

    fn unknown_variant(_: &str, expected: &'static [&'static str]) -> Self {
        ShapeError(format!("unknown variant, expected one of {expected:?}"))
    }
}

/// The type of what was found, without its value.
fn type_of(found: serde::de::Unexpected) -> &'static str {
    use serde::de::Unexpected as U;
    match found {
        U::Bool(_) => "a boolean",
        U::Unsigned(_) | U::Signed(_) => "an integer",
        U::Float(_) => "a floating point number",
        U::Char(_) => "a character",
        U::Str(_) => "a string",
        U::Bytes(_) => "bytes",
        U::Unit => "null",
        U::Option => "an optional value",
        U::NewtypeStruct => "a newtype struct",
        U::Seq => "a sequence",
        U::Map => "a map",
        U::Enum | U::UnitVariant | U::NewtypeVariant | U::TupleVariant | U::StructVariant => "an enum",
        U::Other(_) => "another type",
    }
}

/// Checks a Secret's keys (as Kubernetes does: `[-._a-zA-Z0-9]+`), that no value is
/// the [`REDACTED`] marker (a Secret read back and applied unchanged), and the total size.
pub(crate) fn validate_secret(s: &Secret) -> Result<(), FieldError> {
    let mut total = 0;
    for (k, v) in &s.string_data {
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if k.is_empty() || k.len() > 253 || !k.chars().all(ok) {
            return Err(FieldError::new(
                format!("stringData.{k}"),
                "keys must be 1 to 253 characters of letters, digits, '-', '_' or '.'",
            ));
        }
        if v.expose() == REDACTED {
            return Err(FieldError::new(format!("stringData.{k}"), REDACTED_APPLIED));
        }
        total += k.len() + v.len();
    }
    if total > MAX_SECRET_BYTES {
        return Err(FieldError::new(
            "stringData",
            format!("values total {total} bytes; the limit is {MAX_SECRET_BYTES} bytes (1 MiB)"),
        ));
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

    /// Every way a value can land where a Secret wants another type; each holds the
    /// marker, which must reach no message.
    #[test]
    fn secret_errors_never_quote_a_value() {
        let head = "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {name: kc}\n";
        let cases = [
            "stringData: |\n  apiVersion: v1\n  users: [{name: u, user: {token: MARKER-7f3a}}]\n".to_string(),
            "stringData: MARKER-7f3a\n".to_string(),
            "stringData: 987654321\n".to_string(),
            "stringData: [MARKER-7f3a]\n".to_string(),
            "stringData: {token: {nested: MARKER-7f3a}}\n".to_string(),
            "stringData: {token: [MARKER-7f3a]}\n".to_string(),
            "stringData: {token: 987654321}\n".to_string(),
            "stringData: {token: !!int MARKER-7f3a}\n".to_string(),
            "stringData: {token: !!float MARKER-7f3a}\n".to_string(),
            "stringData: {token: !!bool MARKER-7f3a}\n".to_string(),
            "stringData: {token: !!null MARKER-7f3a}\n".to_string(),
            "stringData: !!int MARKER-7f3a\n".to_string(),
            "stringData: {token: ok}\ndata: {token: MARKER-7f3a}\n".to_string(),
        ];
        for case in cases {
            let text = format!("{head}{case}");
            let e = crate::document::parse_documents(&text).expect_err(&case);
            for shown in [e.to_string(), format!("{e:?}")] {
                assert!(!shown.contains("MARKER") && !shown.contains("987654321"), "{case}: {shown}");
            }
        }
    }

    #[test]
    fn a_type_error_names_field_and_types() {
        let text = "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {name: kc}\nstringData: |\n  MARKER-7f3a\n";
        let Err(crate::ParseError::Invalid(e)) = crate::document::parse_documents(text) else { panic!("invalid") };
        assert_eq!(e.field, "stringData");
        assert_eq!(e.rule, "invalid type: a string, expected a map");
        let text =
            "apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {name: kc}\nstringData: {token: {a: MARKER-7f3a}}\n";
        let Err(crate::ParseError::Invalid(e)) = crate::document::parse_documents(text) else { panic!("invalid") };
        assert_eq!(e.field, "stringData.token");
        assert!(e.rule.contains("a string"), "{e}");
    }

    #[test]
    fn yaml_messages_lose_their_values() {
        let clean = yaml_message_without_values;
        assert_eq!(
            clean(
                r#"stringData.token: invalid value: string "MARKER \"x\" \\", expected an integer at line 4 column 21"#
            ),
            "stringData.token: invalid value: a string, expected an integer at line 4 column 21"
        );
        assert_eq!(
            clean("invalid type: integer `5`, expected a map; invalid type: boolean `true`, expected a string"),
            "invalid type: an integer, expected a map; invalid type: a boolean, expected a string"
        );
        assert_eq!(clean("invalid type: character ```, expected x"), "invalid type: a character, expected x");
        assert_eq!(clean("invalid type: sequence, expected a map"), "invalid type: sequence, expected a map");
        assert_eq!(clean(r#"invalid value: string "MARKER unterminated"#), "invalid value: a value (not shown)");
        assert_eq!(
            clean("did not find expected key at line 3 column 1"),
            "did not find expected key at line 3 column 1"
        );
    }

    #[test]
    fn the_redaction_marker_is_not_a_value() {
        let text = format!("apiVersion: fleetsync.io/v1\nkind: Secret\nmetadata: {{name: kc}}\nstringData: {{kubeconfig: \"{REDACTED}\"}}\n");
        let Err(crate::ParseError::Invalid(e)) = crate::document::parse_documents(&text) else { panic!("refused") };
        assert_eq!((e.field.as_str(), e.rule.as_str()), ("stringData.kubeconfig", REDACTED_APPLIED));
    }

    #[test]
    fn non_string_values_are_refused_without_echo() {
        let e = serde_json::from_str::<Secret>(r#"{"metadata":{"name":"k"},"stringData":{"t":98765}}"#)
            .expect_err("number");
        assert!(!e.to_string().contains("98765"), "{e}");
        assert!(e.to_string().contains("must be a string"), "{e}");
    }
}
