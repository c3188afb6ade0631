//! `labelSelector` and `fieldSelector` of list and watch requests.
//!
//! Only the cheap part of the grammar: label terms `a=b`, `a==b`, `a!=b`, `a` and
//! `!a`, joined by commas (all must hold); field terms `metadata.name=` and
//! `metadata.namespace=` (with `==`/`!=`). Set-based terms (`a in (x,y)`) are refused
//! with 400 rather than silently ignored. A request without selectors never parses
//! an object, so the common path costs nothing.

use crate::status::{ApiError, Result};
use serde_json::Value;

/// One term: a key, and what its value must be.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Term {
    Equals(String, String),
    NotEquals(String, String),
    Exists(String),
    Absent(String),
}

/// The selectors of one request; empty matches everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    labels: Vec<Term>,
    /// Terms on `metadata.name` / `metadata.namespace` (the key is the field name).
    fields: Vec<Term>,
}

impl Filter {
    /// Parses the two query parameters (either may be absent).
    pub fn parse(label_selector: Option<&str>, field_selector: Option<&str>) -> Result<Self> {
        let labels = terms(label_selector.unwrap_or(""), "labelSelector")?;
        let fields = terms(field_selector.unwrap_or(""), "fieldSelector")?;
        for t in &fields {
            let key = match t {
                Term::Equals(k, _) | Term::NotEquals(k, _) => k.as_str(),
                Term::Exists(k) | Term::Absent(k) => {
                    return Err(ApiError::BadRequest(format!("fieldSelector: {k:?} needs a value (field=value)")))
                }
            };
            if key != "metadata.name" && key != "metadata.namespace" {
                return Err(ApiError::BadRequest(format!(
                    "fieldSelector: field {key:?} is not supported (metadata.name, metadata.namespace)"
                )));
            }
        }
        Ok(Self { labels, fields })
    }

    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    /// Whether the object (rendered JSON) is selected.
    pub fn matches_json(&self, object: &str) -> bool {
        if self.is_empty() {
            return true;
        }
        serde_json::from_str::<Value>(object).is_ok_and(|v| self.matches(&v["metadata"]))
    }

    /// Whether an object with this `metadata` is selected.
    pub fn matches(&self, metadata: &Value) -> bool {
        let label = |k: &str| metadata["labels"].get(k).and_then(Value::as_str);
        let field = |k: &str| metadata[k.trim_start_matches("metadata.")].as_str().or(Some(""));
        self.labels.iter().all(|t| holds(t, label)) && self.fields.iter().all(|t| holds(t, field))
    }
}

fn holds<'a>(term: &Term, value_of: impl Fn(&str) -> Option<&'a str>) -> bool {
    match term {
        Term::Equals(k, v) => value_of(k) == Some(v.as_str()),
        Term::NotEquals(k, v) => value_of(k) != Some(v.as_str()),
        Term::Exists(k) => value_of(k).is_some(),
        Term::Absent(k) => value_of(k).is_none(),
    }
}

fn terms(text: &str, what: &str) -> Result<Vec<Term>> {
    let bad = |term: &str, why: &str| ApiError::BadRequest(format!("{what}: {term:?}: {why}"));
    let mut out = Vec::new();
    for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        if term.contains(['(', ')', ' ']) {
            return Err(bad(term, "only a=b, a==b, a!=b, a and !a are supported"));
        }
        let parsed = if let Some((k, v)) = term.split_once("!=") {
            Term::NotEquals(k.into(), v.into())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            Term::Equals(k.into(), v.into())
        } else if let Some(k) = term.strip_prefix('!') {
            Term::Absent(k.into())
        } else {
            Term::Exists(term.into())
        };
        let key = match &parsed {
            Term::Equals(k, _) | Term::NotEquals(k, _) | Term::Exists(k) | Term::Absent(k) => k,
        };
        if key.is_empty() {
            return Err(bad(term, "the key is empty"));
        }
        out.push(parsed);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta() -> Value {
        json!({"name": "a", "namespace": "app", "labels": {"env": "prod", "tier": "web"}})
    }

    #[test]
    fn label_terms() {
        let m = meta();
        let sel = |s: &str| Filter::parse(Some(s), None).expect("valid").matches(&m);
        assert!(sel("env=prod") && sel("env==prod") && sel("env=prod,tier=web") && sel("env") && sel("!zone"));
        assert!(!sel("env=dev") && !sel("env!=prod") && !sel("zone") && !sel("!env") && !sel("env=prod,tier=db"));
        assert!(Filter::parse(Some(""), None).expect("empty").matches(&m));
    }

    #[test]
    fn field_terms() {
        let m = meta();
        let sel = |s: &str| Filter::parse(None, Some(s)).expect("valid").matches(&m);
        assert!(sel("metadata.name=a") && sel("metadata.namespace=app,metadata.name!=b"));
        assert!(!sel("metadata.name=b"));
        assert!(Filter::parse(None, Some("spec.x=1")).is_err());
    }

    #[test]
    fn set_terms_are_refused() {
        let err = Filter::parse(Some("env in (a,b)"), None).expect_err("set-based");
        assert_eq!(err.code(), 400);
        assert!(Filter::parse(Some("=x"), None).is_err());
    }

    #[test]
    fn json_objects() {
        let f = Filter::parse(Some("env=prod"), None).expect("valid");
        assert!(f.matches_json(&json!({"metadata": meta()}).to_string()));
        assert!(!f.matches_json(r#"{"metadata":{"name":"b"}}"#));
    }
}
